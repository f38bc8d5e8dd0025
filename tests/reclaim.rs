//! When, by whom and as which rank the crate drops what it reclaims, and how a reclamation call
//! ends: every freeing path drops a value as its own rank, also after a sweep nested in a drop; a
//! swept value's panicking `Drop` (even one whose panic payload panics when dropped) never comes
//! out of an unrelated rank's access; a delegate's first touch drops what its sweep freed after
//! its pin ends; `reclaim_exited_blocking` returns only once every exited rank's scoped-only value
//! is dropped, never early beside other sweeps or after a drop freed another batch, and returns
//! when called from drops (also from two drops on two threads at once); formatting a `RankLocal`
//! keeps nothing alive and survives a `fmt` that writes and sweeps the same map. Stamped over
//! every backend.
//!
//! Regressions of the churn review (issue 19 of the project's tracker): formatting went through
//! `iter()` and kept every instance forever; a swept value's `Drop` panic came out of another
//! rank's first touch; values were dropped as whatever rank the freeing thread acted for; nothing
//! told a caller when reclamation was done. Regressions of review 5 (adversarial) are said in
//! their tests' doc comments.

mod common;

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::thread;

use common::{panic_message, Blocked, Bomb, Counted};
use ranklocal::{on_behalf_of, Backend, Rank, RankId, RankLocal};

/// Records, for each drop, the rank it ran as and the rank the value belonged to.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(RankId, RankId)>>>);

struct OwnedBy {
    owner: RankId,
    log: Log,
}

impl Drop for OwnedBy {
    fn drop(&mut self) {
        self.log
            .0
            .lock()
            .unwrap()
            .push((self.owner, RankId::current()));
    }
}

fn owned_by(log: &Log) -> OwnedBy {
    OwnedBy {
        owner: RankId::current(),
        log: log.clone(),
    }
}

/// `n` ranks with a scoped-only value each; returns them and their ids.
fn scoped_values<B: Backend>(rl: &RankLocal<OwnedBy, B>, log: &Log, n: usize) -> Vec<Rank> {
    let ranks: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
    for r in &ranks {
        on_behalf_of(r.id(), || rl.with_or(|| owned_by(log), |_| ()));
    }
    ranks
}

fn assert_each_dropped_once_as_itself(log: &Log, want: usize, path: &str) {
    let drops = log.0.lock().unwrap();
    assert_eq!(
        drops.len(),
        want,
        "{path}: dropped {} of {want}",
        drops.len()
    );
    for &(owner, ran_as) in drops.iter() {
        assert_eq!(
            ran_as, owner,
            "{path}: {owner}'s value was dropped as {ran_as}"
        );
    }
    let mut owners: Vec<RankId> = drops.iter().map(|&(o, _)| o).collect();
    owners.sort();
    owners.dedup();
    assert_eq!(owners.len(), want, "{path}: a value was dropped twice");
}

/// Every freeing path drops each value as its own rank, whatever the freeing thread acts for.
fn every_freeing_path_drops_as_the_values_rank<B: Backend>() {
    let stranger = Rank::new(); // the rank the freeing thread acts for
                                // a sweep (reclaim_exited)
    let log = Log::default();
    let rl = RankLocal::<OwnedBy, B>::new();
    drop(scoped_values(&rl, &log, 8));
    on_behalf_of(stranger.id(), || rl.reclaim_exited_blocking());
    assert_each_dropped_once_as_itself(&log, 8, "reclaim_exited");
    // purge_exited
    let log = Log::default();
    let mut rl = RankLocal::<OwnedBy, B>::new();
    drop(scoped_values(&rl, &log, 8));
    on_behalf_of(stranger.id(), || assert_eq!(rl.purge_exited(), 8));
    assert_each_dropped_once_as_itself(&log, 8, "purge_exited");
    // clear
    let log = Log::default();
    let mut rl = RankLocal::<OwnedBy, B>::new();
    let live = scoped_values(&rl, &log, 8);
    on_behalf_of(stranger.id(), || rl.clear());
    assert_each_dropped_once_as_itself(&log, 8, "clear");
    // drop
    let log = Log::default();
    let rl = RankLocal::<OwnedBy, B>::new();
    let more = scoped_values(&rl, &log, 8);
    on_behalf_of(stranger.id(), || drop(rl));
    assert_each_dropped_once_as_itself(&log, 8, "drop");
    // a first touch's amortized sweep, run as an unrelated rank
    let log = Log::default();
    let rl = RankLocal::<OwnedBy, B>::new();
    drop(scoped_values(&rl, &log, 32));
    let toucher = Rank::new();
    on_behalf_of(toucher.id(), || rl.with_or(|| owned_by(&log), |_| ()));
    common::patiently(
        || log.0.lock().unwrap().len() >= 32,
        || {
            on_behalf_of(toucher.id(), || rl.reclaim_exited());
        },
    );
    assert_each_dropped_once_as_itself(&log, 32, "a first touch's sweep");
    drop((live, more, stranger, toucher));
}

/// A value's `Drop` that touches its rank's other rank-local state reaches that rank's instance,
/// not the freeing thread's (as a work handle deregistering itself would).
fn a_drop_reaches_its_own_ranks_state<B: Backend>() {
    static REGISTRY: RankLocal<Mutex<Vec<u32>>> = RankLocal::new();
    let registry = &REGISTRY;
    struct Handle(u32);
    impl Drop for Handle {
        fn drop(&mut self) {
            // a plain access as the current rank: the value's own, if dropped as it
            REGISTRY.with(|r| r.lock().unwrap().retain(|&h| h != self.0));
        }
    }
    let rl = RankLocal::<Option<Handle>, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || {
        registry.with(|r| r.lock().unwrap().push(7));
        rl.with_or(|| Some(Handle(7)), |_| ());
    });
    drop(job);
    let freeing_thread = RankId::current();
    rl.reclaim_exited_blocking();
    assert_eq!(
        registry.with_for(id, |r| r.lock().unwrap().clone()),
        Some(vec![]),
        "the drop did not deregister from its own rank's registry"
    );
    assert_eq!(
        registry.with_for(freeing_thread, |_| ()),
        None,
        "the drop made an instance for the freeing thread's rank"
    );
}

/// A swept value's panicking `Drop` never comes out of another rank's `get`/`with`: the first
/// touch that ran the sweep returns normally, the panic comes out of the next explicit
/// reclamation call, and every other value was dropped exactly once.
fn a_swept_values_drop_panic_surfaces_at_an_explicit_call<B: Backend>() {
    let drops = common::counter(); // the 40 swept values
    let others = common::counter(); // the first touches' own values
    let rl = RankLocal::<Bomb<'static>, B>::new();
    let ranks: Vec<Rank> = (0..40).map(|_| Rank::new()).collect();
    for (i, r) in ranks.iter().enumerate() {
        on_behalf_of(r.id(), || {
            rl.with_or(
                || Bomb::new(drops, false),
                |b| b.armed.store(i == 3, Ordering::SeqCst),
            );
        });
    }
    drop(ranks);
    // unrelated first touches run the sweep (and, once the grace period passed, its free)
    let unrelated = Rank::new();
    let first_touch = catch_unwind(AssertUnwindSafe(|| {
        common::patiently(
            || drops.load(Ordering::SeqCst) == 40,
            || {
                let r = Rank::new();
                on_behalf_of(r.id(), || {
                    rl.with_or(|| Bomb::new(others, false), |_| ());
                });
                on_behalf_of(unrelated.id(), || {
                    rl.with_or(|| Bomb::new(others, false), |_| ());
                });
                drop(r);
            },
        )
    }));
    let got_there =
        first_touch.expect("a swept value's panic came out of an unrelated first touch");
    assert!(got_there, "the sweep never freed the 40 values");
    // the panic was kept: the next explicit call re-raises it, after dropping what it drops
    let payload = catch_unwind(AssertUnwindSafe(|| rl.reclaim_exited()))
        .expect_err("the kept panic was lost");
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"Bomb::drop panics on purpose")
    );
    assert!(
        catch_unwind(AssertUnwindSafe(|| rl.reclaim_exited())).is_ok(),
        "re-raised twice"
    );
    assert_eq!(
        drops.load(Ordering::SeqCst),
        40,
        "a value was dropped twice"
    );
    drop(unrelated);
}

/// `reclaim_exited_blocking` returns only once every exited thread's scoped value was dropped:
/// a per-thread counter whose `Drop` folds into a total is exact right after it, over 1,000
/// short-lived threads.
fn blocking_reclaim_gives_exact_sums<B: Backend>() {
    struct Tally<'a> {
        total: &'a AtomicU64,
        n: AtomicU64,
    }
    impl Drop for Tally<'_> {
        fn drop(&mut self) {
            self.total
                .fetch_add(self.n.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
    let total = AtomicU64::new(0);
    let rl = RankLocal::<Tally<'_>, B>::new();
    let threads = if cfg!(miri) { 20 } else { 1000 };
    let new = || Tally {
        total: &total,
        n: AtomicU64::new(0),
    };
    for _ in 0..threads {
        std::thread::scope(|s| {
            s.spawn(|| rl.with_or(new, |t| t.n.fetch_add(3, Ordering::Relaxed)))
                .join() // joined: the thread has ended, so its rank has exited
                .unwrap();
        });
    }
    rl.reclaim_exited_blocking();
    assert_eq!(
        total.load(Ordering::Relaxed),
        3 * threads as u64,
        "a value was not yet dropped"
    );
    assert!(rl.is_empty());
}

/// Called inside a scoped read that holds a pin, the blocking form would wait for itself: it
/// panics with a clear message at the caller's line instead.
fn blocking_reclaim_inside_a_pinned_read_panics<B: Backend>() {
    let rl: &'static RankLocal<u64, B> = common::leak(RankLocal::new());
    let job = Rank::new();
    on_behalf_of(job.id(), || rl.with(|_| ()));
    let job = job.id();
    let err = common::within_deadline(move || {
        catch_unwind(AssertUnwindSafe(|| {
            rl.with_for(job, |_| rl.reclaim_exited_blocking());
        }))
        .expect_err("no panic")
    });
    let msg = panic_message(&*err);
    assert!(msg.contains("would wait for"), "unclear message: {msg}");
}

/// Formatting a `RankLocal` (and a key) hands out no `&T`: exited ranks' values stay
/// reclaimable after a `{:?}`.
fn debug_keeps_nothing_alive<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    let ranks: Vec<Rank> = (0..5).map(|_| Rank::new()).collect();
    for r in &ranks {
        on_behalf_of(r.id(), || rl.with(|_| ()));
    }
    rl.with(|_| ()); // this thread's own value, which `{:?}` shows (issue 28: only that one)
    let shown = format!("{rl:?}");
    assert!(shown.ends_with("len: 6, own: Some(0) }"), "{shown}");
    drop(ranks);
    assert_eq!(rl.reclaim_exited(), 5, "formatting escaped the instances");
}

common::backend_tests! {
    every_freeing_path_drops_as_the_values_rank,
    a_drop_reaches_its_own_ranks_state,
    a_swept_values_drop_panic_surfaces_at_an_explicit_call,
    #[cfg_attr(miri, ignore = "1,000 threads; the small form runs natively and under TSan")]
    blocking_reclaim_gives_exact_sums,
    blocking_reclaim_inside_a_pinned_read_panics,
    debug_keeps_nothing_alive,
    a_drop_asking_for_its_own_value_panics_at_the_explicit_call,
    blocking_reclaim_from_inside_a_drop_returns,
    blocking_reclaims_in_drops_on_two_threads_both_return,
    blocking_reclaim_never_returns_early_beside_other_sweeps,
    a_sweep_nested_in_a_drop_restores_its_rank_and_the_own_value_guard,
    a_panic_payload_that_panics_when_dropped_stays_inside_the_free,
    what_a_delegates_with_sweeps_is_dropped_after_its_pin_ends,
    debug_survives_a_fmt_that_writes_and_sweeps_the_same_map,
    blocking_reclaim_does_not_wait_for_a_first_touchs_closure,
    #[cfg_attr(any(miri, not(target_os = "linux")), ignore = "sees a waiting thread in Linux's /proc")]
    a_nested_free_keeps_the_outer_batch_waited_for,
    clear_purge_and_drop_free_the_batches_still_waiting,
    a_first_touch_inside_a_read_drops_nothing,
}

thread_local! {
    /// `true` while this thread runs inside an outer scoped read (a test's `with_for` or
    /// `for_each` closure).
    static INSIDE_READ: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Counts its drops, and those that ran inside an outer scoped read of the dropping thread.
struct ReadProbe(Arc<(AtomicUsize, AtomicUsize)>);

impl Drop for ReadProbe {
    fn drop(&mut self) {
        self.0 .0.fetch_add(1, SeqCst);
        if INSIDE_READ.with(std::cell::Cell::get) {
            self.0 .1.fetch_add(1, SeqCst);
        }
    }
}

/// Nothing a sweep readied is dropped while the thread is inside an outer scoped read: scoped
/// and plain first touches of ranks that then exit, half of them inside `with_for` or `for_each`
/// of a kept rank. A value's `Drop` may wait for a grace period, which would wait for that read
/// (a deadlock), or call `reclaim_exited_blocking`, which panics inside a read. Found in a review
/// of the batched reclamation: 32–64 of 96–192 drops ran inside the outer read before the fix
/// (this test failed on every backend).
fn a_first_touch_inside_a_read_drops_nothing<B: Backend>() {
    let rounds = if cfg!(miri) { 48 } else { 600 };
    let counts = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let make = || ReadProbe(Arc::clone(&counts));
    let rl: RankLocal<ReadProbe, B> = RankLocal::new();
    let keeper = Rank::new();
    on_behalf_of(keeper.id(), || rl.with_or(make, |_| ()));
    let mut scoped = 0;
    for round in 0..rounds {
        let rank = Rank::new();
        let touch = || {
            on_behalf_of(rank.id(), || {
                if round % 4 == 3 {
                    let _ = rl.get_or(make); // a plain first touch: kept, but it sweeps
                } else {
                    rl.with_or(make, |_| ()); // a scoped first touch (pinned on the way)
                }
            })
        };
        scoped += usize::from(round % 4 != 3);
        let inside = |f: &dyn Fn()| {
            INSIDE_READ.with(|i| i.set(true));
            f();
            INSIDE_READ.with(|i| i.set(false));
        };
        match round % 3 {
            0 => touch(),
            1 => assert!(rl.with_for(keeper.id(), |_| inside(&touch)).is_some()),
            _ => {
                let mut once = Some(&touch);
                rl.for_each(|_, _| {
                    if let Some(t) = once.take() {
                        inside(t);
                    }
                });
            }
        }
        drop(rank);
    }
    rl.reclaim_exited_blocking();
    assert_eq!(
        counts.1.load(SeqCst),
        0,
        "values were dropped inside an outer scoped read"
    );
    assert_eq!(
        counts.0.load(SeqCst),
        scoped,
        "every exited scoped value dropped once"
    );
}

/// A value's `Drop` that asks for its own rank's value on the same `RankLocal` would make it
/// again (and, dropped in turn, again, without end): the first touch panics with a clear message
/// instead, which — a panic in a `Drop` the crate runs — comes out of the explicit reclamation
/// call after every value was dropped.
fn a_drop_asking_for_its_own_value_panics_at_the_explicit_call<B: Backend>() {
    struct AsksAgain<B: Backend>(&'static RankLocal<AsksAgain<B>, B>);
    impl<B: Backend> Drop for AsksAgain<B> {
        fn drop(&mut self) {
            self.0.with_or(|| AsksAgain(self.0), |_| ()); // as its own rank: itself, again
        }
    }
    let rl: &'static RankLocal<AsksAgain<B>, B> = common::leak(RankLocal::new());
    let job = Rank::new();
    on_behalf_of(job.id(), || rl.with_or(|| AsksAgain(rl), |_| ()));
    drop(job);
    let err = catch_unwind(AssertUnwindSafe(|| rl.reclaim_exited_blocking()))
        .expect_err("the drop's first touch of its own rank did not panic");
    let msg = panic_message(&*err);
    assert!(
        msg.contains("from inside its own drop"),
        "unclear message: {msg}"
    );
    assert!(rl.is_empty(), "the value was made again");
}

// ---------------------------------------------------------------------------------------------
// `reclaim_exited_blocking` called from drops, and beside other threads' sweeps.

/// A `T::drop` that calls `reclaim_exited_blocking` on its own `RankLocal` returns (it does not
/// wait for the batch its own sweep is dropping), and every value is dropped once, as its own
/// rank.
///
/// Found in review 5 (adversarial), an attack the implementation withstood.
fn blocking_reclaim_from_inside_a_drop_returns<B: Backend>() {
    struct Reenters<B: Backend> {
        rl: &'static RankLocal<Reenters<B>, B>,
        owner: RankId,
        log: &'static Mutex<Vec<(RankId, RankId)>>,
    }
    impl<B: Backend> Drop for Reenters<B> {
        fn drop(&mut self) {
            self.rl.reclaim_exited_blocking();
            self.log
                .lock()
                .unwrap()
                .push((self.owner, RankId::current()));
        }
    }
    let rl: &'static RankLocal<Reenters<B>, B> = common::leak(RankLocal::new());
    let log = common::leak(Mutex::new(Vec::new()));
    let n = if cfg!(miri) { 3 } else { 40 };
    let ranks: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
    for r in &ranks {
        let owner = r.id();
        on_behalf_of(owner, || rl.with_or(|| Reenters { rl, owner, log }, |_| ()));
    }
    drop(ranks);
    common::within_deadline(move || rl.reclaim_exited_blocking());
    let log = log.lock().unwrap();
    assert_eq!(log.len(), n);
    assert!(log.iter().all(|(o, r)| o == r), "dropped as another rank");
}

/// Meets the other value's drop at a barrier, then waits for every batch retired so far.
struct WaitsInDrop<B: Backend> {
    rl: &'static RankLocal<WaitsInDrop<B>, B>,
    started: &'static AtomicUsize,
    barrier: &'static Barrier,
}

impl<B: Backend> Drop for WaitsInDrop<B> {
    fn drop(&mut self) {
        self.started.fetch_add(1, SeqCst);
        self.barrier.wait();
        self.rl.reclaim_exited_blocking();
    }
}

/// Two values' drops, run by sweeps on two threads at once, both call `reclaim_exited_blocking`
/// on their `RankLocal`: both calls return. Thread A frees batch 0 and, inside its value's drop,
/// waits; thread B frees batch 1 and, inside its value's drop, waits. (The barrier only makes the
/// interleaving certain; without it the same cycle is a race.)
///
/// Found in review 5 (adversarial). Before the fix, a blocking call inside a drop waited for every
/// batch another thread was in the middle of freeing, so each drop waited for the other's batch
/// forever.
fn blocking_reclaims_in_drops_on_two_threads_both_return<B: Backend>() {
    let rl: &'static RankLocal<WaitsInDrop<B>, B> = common::leak(RankLocal::new());
    let started = common::counter();
    let barrier = common::leak(Barrier::new(2));
    let make = move || WaitsInDrop {
        rl,
        started,
        barrier,
    };
    common::within_deadline(move || {
        let r0 = Rank::new();
        on_behalf_of(r0.id(), || rl.with_or(make, |_| ()));
        drop(r0);
        // A: sweeps r0 (batch 0) and, once its grace period passed, drops it: stops at the barrier
        let a = thread::spawn(move || {
            while started.load(SeqCst) == 0 {
                rl.reclaim_exited();
                thread::yield_now();
            }
        });
        while started.load(SeqCst) == 0 {
            thread::yield_now();
        }
        // B: sweeps r1 (batch 1) and drops it: meets A at the barrier
        let r1 = Rank::new();
        on_behalf_of(r1.id(), || rl.with_or(make, |_| ()));
        drop(r1);
        let b = thread::spawn(move || {
            while started.load(SeqCst) < 2 {
                rl.reclaim_exited();
                thread::yield_now();
            }
        });
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// `reclaim_exited_blocking` never returns early, also while other threads' first touches sweep
/// (their amortized sweeps take the inbox and the ready batches to free them) and another thread
/// calls it too: every rank that had exited before a call began has had its value dropped when
/// the call returns.
///
/// Found in review 5 (adversarial), an attack the implementation withstood.
fn blocking_reclaim_never_returns_early_beside_other_sweeps<B: Backend>() {
    let n = if cfg!(miri) { 12 } else { 1_500 };
    /// Sets its slot to 2 (dropped) when dropped.
    struct Flag(Option<(usize, &'static [AtomicUsize])>);
    impl Drop for Flag {
        fn drop(&mut self) {
            if let Some((i, flags)) = self.0 {
                flags[i].store(2, SeqCst);
            }
        }
    }
    // slot i: 0 = live, 1 = exited, 2 = value dropped (set by the value itself)
    let flags: &'static [AtomicUsize] =
        Box::leak((0..2 * n).map(|_| AtomicUsize::new(0)).collect());
    let values: &'static RankLocal<Flag, B> = common::leak(RankLocal::new());
    let stop = common::leak(AtomicBool::new(false));
    // escaped first touches elsewhere: their amortized sweeps race the blocking calls
    let toucher = thread::spawn(move || {
        let mut keep = Vec::new();
        while !stop.load(SeqCst) {
            let r = Rank::new();
            on_behalf_of(r.id(), || values.get_or(|| Flag(None)));
            keep.push(r);
            if keep.len() > 2_000 {
                keep.clear();
            }
            thread::yield_now();
        }
    });
    let worker = move |base: usize| {
        for i in 0..n {
            let slot = base + i;
            let r = Rank::new();
            on_behalf_of(r.id(), || {
                values.with_or(|| Flag(Some((slot, flags))), |_| ())
            });
            drop(r);
            // 1 unless a concurrent sweep already dropped it (2)
            let _ = flags[slot].compare_exchange(0, 1, SeqCst, SeqCst);
            if i % 5 == 4 {
                let exited: Vec<usize> =
                    (0..2 * n).filter(|&j| flags[j].load(SeqCst) != 0).collect();
                values.reclaim_exited_blocking();
                for j in exited {
                    assert_eq!(
                        flags[j].load(SeqCst),
                        2,
                        "reclaim_exited_blocking returned before value {j} (exited before the \
                         call) was dropped"
                    );
                }
            }
        }
    };
    let a = thread::spawn(move || worker(0));
    let b = thread::spawn(move || worker(n));
    let ra = a.join();
    let rb = b.join();
    stop.store(true, SeqCst);
    toucher.join().unwrap();
    ra.unwrap();
    rb.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Drops that re-enter the crate, and panics out of drops.

/// A value's drop that re-enters the sweep (`reclaim_exited`, which may drop other values nested
/// in it) is still its own rank afterwards, and the guard against a drop asking for its own
/// rank's value is restored by the nested drops: asking for its own value still panics.
///
/// Found in review 5 (adversarial), an attack the implementation withstood.
fn a_sweep_nested_in_a_drop_restores_its_rank_and_the_own_value_guard<B: Backend>() {
    struct Nested<B: Backend> {
        rl: &'static RankLocal<Nested<B>, B>,
        owner: RankId,
        log: &'static Mutex<Vec<(RankId, RankId, bool)>>,
    }
    impl<B: Backend> Drop for Nested<B> {
        fn drop(&mut self) {
            let _ = catch_unwind(AssertUnwindSafe(|| self.rl.reclaim_exited()));
            let now = RankId::current();
            let rl = self.rl;
            let asked_again = catch_unwind(AssertUnwindSafe(|| {
                rl.with_or(|| unreachable!("made again"), |_| ());
            }))
            .is_err();
            self.log
                .lock()
                .unwrap()
                .push((self.owner, now, asked_again));
        }
    }
    let rl: &'static RankLocal<Nested<B>, B> = common::leak(RankLocal::new());
    let log = common::leak(Mutex::new(Vec::new()));
    let n = if cfg!(miri) { 4 } else { 64 };
    for _ in 0..n {
        let r = Rank::new();
        let owner = r.id();
        on_behalf_of(owner, || rl.with_or(|| Nested { rl, owner, log }, |_| ()));
        drop(r);
        let _ = catch_unwind(AssertUnwindSafe(|| rl.reclaim_exited()));
    }
    let ok = common::patiently(
        || log.lock().unwrap().len() >= n,
        || {
            let _ = catch_unwind(AssertUnwindSafe(|| rl.reclaim_exited()));
        },
    );
    assert!(ok, "never all dropped");
    for &(owner, now, asked_again) in log.lock().unwrap().iter() {
        assert_eq!(
            owner, now,
            "after a nested sweep, {owner}'s drop runs as {now}"
        );
        assert!(asked_again, "{owner}'s drop made its own value again");
    }
    assert!(rl.is_empty());
}

/// A panic payload whose own drop panics.
struct PanickyPayload;

impl Drop for PanickyPayload {
    fn drop(&mut self) {
        panic!("a panic payload's own drop panics on purpose");
    }
}

/// A swept value: quiet (its drop counted), or panicking in `drop`, plainly or with a payload
/// whose own drop panics.
enum Boom {
    Quiet(&'static AtomicUsize),
    Plain,
    PayloadPanicsOnDrop,
}

impl Drop for Boom {
    fn drop(&mut self) {
        match self {
            Boom::Quiet(drops) => {
                drops.fetch_add(1, SeqCst);
            }
            Boom::Plain => panic!("Boom::Plain panics on purpose"),
            Boom::PayloadPanicsOnDrop => std::panic::panic_any(PanickyPayload),
        }
    }
}

/// Two values of one swept batch panic in `drop`, the second with a payload whose own `Drop`
/// panics: no panic comes out of the unrelated first touches that free the batch, every other
/// value of the batch is dropped, and `reclaim_exited_blocking` on another thread then returns
/// (re-raising the kept panic).
///
/// Found in review 5 (adversarial). Before the fix, keeping the first payload dropped the second
/// outside any `catch_unwind`: its panic escaped into an unrelated rank's `get`, leaked the rest
/// of the batch, and left the batch marked as being freed, so every later blocking call waited
/// for it forever.
fn a_panic_payload_that_panics_when_dropped_stays_inside_the_free<B: Backend>() {
    let rl: &'static RankLocal<Boom, B> = common::leak(RankLocal::new());
    let quiet = common::counter();
    // 16 exited ranks' scoped values, the plain bomb first, the payload bomb second
    let ranks: Vec<Rank> = (0..16).map(|_| Rank::new()).collect();
    for (i, r) in ranks.iter().enumerate() {
        let v = match i {
            0 => Boom::Plain,
            1 => Boom::PayloadPanicsOnDrop,
            _ => Boom::Quiet(quiet),
        };
        on_behalf_of(r.id(), || rl.with_or(|| v, |_| ()));
    }
    drop(ranks);
    // Unrelated ranks' first touches: the first one sweeps (16 exits), later ones free the batch.
    // Escaped first touches do not pin the collector on every backend: an unrelated map's scoped
    // first touches and explicit reclamation drive it.
    let others = common::counter();
    let flusher: &'static RankLocal<u8, B> = common::leak(RankLocal::new());
    let mut keep = Vec::new();
    let escaped: RefCell<Option<String>> = RefCell::new(None);
    let freed = common::patiently(
        || escaped.borrow().is_some() || quiet.load(SeqCst) >= 14,
        || {
            let r = Rank::new();
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| {
                on_behalf_of(r.id(), || rl.get_or(|| Boom::Quiet(others)));
            })) {
                *escaped.borrow_mut() = Some(panic_message(&*p));
            }
            keep.push(r);
            let f = Rank::new();
            on_behalf_of(f.id(), || flusher.with(|_| ()));
            drop(f);
            flusher.reclaim_exited();
        },
    );
    assert_eq!(
        escaped.into_inner(),
        None,
        "a swept value's drop panic came out of an unrelated first touch"
    );
    assert!(freed, "the batch was never freed");
    assert_eq!(quiet.load(SeqCst), 14, "a quiet value was not dropped once");
    common::within_deadline(move || {
        let _ = catch_unwind(AssertUnwindSafe(|| rl.reclaim_exited_blocking()));
    });
    drop(keep);
}

/// A swept value whose drop (unless `quiet`) calls `reclaim_exited_blocking` on an unrelated
/// `RankLocal`, recording how the call ended.
struct CallsBlocking<B: Backend> {
    quiet: bool,
    other: &'static RankLocal<u8, B>,
    seen: &'static Mutex<Vec<String>>,
}

impl<B: Backend> Drop for CallsBlocking<B> {
    fn drop(&mut self) {
        if !self.quiet {
            let other = self.other;
            let r = catch_unwind(AssertUnwindSafe(|| other.reclaim_exited_blocking()));
            self.seen.lock().unwrap().push(match r {
                Ok(_) => "returned".into(),
                Err(p) => panic_message(&*p),
            });
        }
    }
}

/// The values a delegate's scoped first touch (`with` for another rank) sweeps are dropped after
/// that touch's pin ends: a `T::drop` that calls `reclaim_exited_blocking` on an unrelated
/// `RankLocal`, with none of the user's code inside a scoped read, returns.
///
/// Found in review 5 (adversarial). Before the fix, the delegate's first touch dropped what its
/// sweep had freed while still holding the pin it takes for `f`, so such a drop panicked with
/// "called inside a scoped read" (and every such drop held back the epoch).
fn what_a_delegates_with_sweeps_is_dropped_after_its_pin_ends<B: Backend>() {
    let rl: &'static RankLocal<CallsBlocking<B>, B> = common::leak(RankLocal::new());
    let other: &'static RankLocal<u8, B> = common::leak(RankLocal::new());
    let seen = common::leak(Mutex::new(Vec::new()));
    let make = |quiet| move || CallsBlocking { quiet, other, seen };
    let ranks: Vec<Rank> = (0..16).map(|_| Rank::new()).collect();
    for r in &ranks {
        on_behalf_of(r.id(), || rl.with_or(make(false), |_| ()));
    }
    drop(ranks);
    let mut keep = Vec::new();
    let done = common::patiently(
        || seen.lock().unwrap().len() >= 16,
        || {
            let r = Rank::new();
            on_behalf_of(r.id(), || rl.with_or(make(true), |_| ()));
            keep.push(r);
        },
    );
    assert!(done, "never freed");
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|s| s == "returned"),
        "a T::drop run by a delegate's with() was inside its pin: {:?}",
        seen.first()
    );
    drop(keep);
}

/// `Debug` formats the thread's own value (issue 28): a value whose `Debug` first-touches another
/// rank of the same map and sweeps it (writes, and a sweep of exited ranks, while the own value is
/// lent) neither deadlocks nor frees what is being formatted (Miri: no use after free).
///
/// Found in review 5 (adversarial), an attack the implementation withstood.
fn debug_survives_a_fmt_that_writes_and_sweeps_the_same_map<B: Backend>() {
    struct Loud<B: Backend> {
        rl: &'static RankLocal<Loud<B>, B>,
        n: u64,
    }
    impl<B: Backend> std::fmt::Debug for Loud<B> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            // a first touch of a fresh, already exited rank while the visit is pinned
            let r = Rank::new();
            let id = r.id();
            drop(r);
            let rl = self.rl;
            on_behalf_of(id, || rl.with_or(|| Loud { rl, n: 0 }, |_| ()));
            let _ = rl.reclaim_exited();
            write!(f, "{}", self.n)
        }
    }
    let rl: &'static RankLocal<Loud<B>, B> = common::leak(RankLocal::new());
    let ranks: Vec<Rank> = (0..20).map(|_| Rank::new()).collect();
    for (i, r) in ranks.iter().enumerate().rev() {
        on_behalf_of(r.id(), || {
            rl.with_or(
                || Loud {
                    rl,
                    n: 1000 + i as u64,
                },
                |_| (),
            )
        });
    }
    // the other values' ranks exit first: the `fmt`'s `reclaim_exited` sweeps them while the
    // own value is lent
    drop(ranks);
    let shown = common::within_deadline(move || {
        rl.with_or(|| Loud { rl, n: 1999 }, |_| ());
        format!("{rl:?}")
    });
    let numbers: Vec<u64> = shown
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .filter(|&n| (1000..2000).contains(&n))
        .collect();
    assert_eq!(numbers, [1999], "{shown}");
    let ok = common::patiently(
        || rl.is_empty(),
        || {
            rl.reclaim_exited();
        },
    );
    assert!(ok, "the exited ranks' values were never reclaimed");
}

/// `reclaim_exited_blocking` on one thread does not wait for the closure of a scoped first touch
/// on another thread whose sweep found ready batches, neither a delegate's (`with` for another
/// rank, pinned during `f`) nor an owner's (its own rank, no pin): the batches are freed before
/// `f` runs, or stay queued where the blocking call frees them. Here `f` waits for the blocking
/// call to return, so a blocking call that waited for `f` would deadlock (the closure gives up
/// after [`common::DEADLOCK`], and the test fails).
///
/// Found in review 6 (adversarial). Before the fix, a first touch took the ready batches out and
/// held them, listed as being freed by its thread, until its `f` returned.
fn blocking_reclaim_does_not_wait_for_a_first_touchs_closure<B: Backend>() {
    for delegate in [false, true] {
        let rl: &'static RankLocal<Counted<'static>, B> = common::leak(RankLocal::new());
        let drops = common::counter();
        // 20 exited ranks' values retired while another thread holds a pin: not ready yet
        let holder = Rank::new();
        on_behalf_of(holder.id(), || common::touch_scoped(rl, drops));
        let hid = holder.id();
        let (pinned_tx, pinned_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let h = thread::spawn(move || {
            rl.with_for(hid, |_| {
                pinned_tx.send(()).unwrap();
                let _ = release_rx.recv();
            });
        });
        pinned_rx.recv().unwrap();
        for _ in 0..20 {
            let r = Rank::new();
            on_behalf_of(r.id(), || common::touch_scoped(rl, drops));
        }
        rl.reclaim_exited();
        assert_eq!(drops.load(SeqCst), 0, "freed under a held pin");
        drop(release_tx);
        h.join().unwrap();
        // the grace period passes (pins on another map), with nothing sweeping `rl`
        let other: RankLocal<u64, B> = RankLocal::new();
        let nobody = Rank::new();
        for _ in 0..if cfg!(miri) { 2_000 } else { 20_000 } {
            other.with_for(nobody.id(), |_| ());
        }
        // U: a scoped first touch whose sweep finds the ready batch; its `f` waits for T
        let (in_f_tx, in_f_rx) = mpsc::channel();
        let (t_done_tx, t_done_rx) = mpsc::channel::<()>();
        let u = thread::spawn(move || {
            let touch = || {
                rl.with_or(
                    || Counted::new(drops),
                    |_| {
                        in_f_tx.send(()).unwrap();
                        t_done_rx.recv_timeout(common::DEADLOCK).is_ok()
                    },
                )
            };
            if delegate {
                on_behalf_of(Rank::new().id(), touch)
            } else {
                touch()
            }
        });
        in_f_rx.recv().unwrap();
        rl.reclaim_exited_blocking(); // T
        let dropped = drops.load(SeqCst);
        let _ = t_done_tx.send(());
        let t_returned_first = u.join().unwrap();
        let who = if delegate {
            "a delegate's"
        } else {
            "an owner's"
        };
        assert!(
            t_returned_first,
            "reclaim_exited_blocking waited for {who} first-touch closure"
        );
        assert_eq!(dropped, 20, "reclaim_exited_blocking returned early");
        drop(holder);
    }
}

/// What a value's drop shares with the test: the nested rank it exits, the channel that starts
/// the other thread's blocking call, and what that call saw when it returned.
struct Nest {
    /// The rank the first value's drop drops (its value makes the nested batch).
    nested: Mutex<Option<Rank>>,
    /// Set by the first outer value to drop, which does the nesting.
    nesting_done: AtomicBool,
    start_other: Mutex<Option<mpsc::Sender<()>>>,
    /// Outer values dropped so far.
    outer_dropped: AtomicUsize,
    other_returned: AtomicBool,
    /// The other thread, to see it wait.
    other: Mutex<Option<Blocked>>,
    /// Set by the nesting drop once it saw the other thread's call wait or return.
    other_seen: AtomicBool,
}

struct Nests<B: Backend> {
    rl: &'static RankLocal<Nests<B>, B>,
    nest: &'static Nest,
    outer: bool,
}

impl<B: Backend> Drop for Nests<B> {
    fn drop(&mut self) {
        if !self.outer {
            return;
        }
        if !self.nest.nesting_done.swap(true, SeqCst) {
            // the nested rank exits; this thread sweeps it (batch 1) and frees it itself
            drop(self.nest.nested.lock().unwrap().take());
            self.rl.reclaim_exited_blocking();
            // the other thread's blocking call must now wait for the rest of batch 0
            if let Some(tx) = self.nest.start_other.lock().unwrap().take() {
                tx.send(()).unwrap();
            }
            // Let the rest of batch 0 be dropped only once the other thread's call either
            // returned (early: the bug) or is seen sleeping in its wait loop's backoff, the only
            // sleep on its path: it found a batch it must wait for (when the code is right,
            // batch 0's rest). Either shows within the bound; `other_seen` says which did not.
            let other = self
                .nest
                .other
                .lock()
                .unwrap()
                .take()
                .expect("the other thread");
            let seen = common::patiently(
                || self.nest.other_returned.load(SeqCst) || other.in_sleep(),
                || (),
            );
            self.nest.other_seen.store(seen, SeqCst);
        }
        self.nest.outer_dropped.fetch_add(1, SeqCst);
    }
}

/// A value's drop that frees another batch of the same `RankLocal` (a nested
/// `reclaim_exited_blocking`, which sweeps a rank the drop exits and frees that batch itself)
/// leaves the outer batch listed as being freed: a `reclaim_exited_blocking` on another thread,
/// started after the nested free, returns only once every value of the outer batch was dropped.
///
/// Found by mutation testing (issue 21 of the project's tracker): with `free_ready`'s
/// bookkeeping dropping every batch its thread was freeing (`t != me || ..` → `&&`) instead of
/// only the ones it freed, no test failed; this one does (the other thread returns while the
/// first value's drop is still running, with the rest of the outer batch not dropped).
///
/// The first value's drop goes on only once the other thread's call returned or is seen (Linux's
/// `/proc`) sleeping in its wait loop, so the test costs no fixed window (before: 300 ms, every
/// run, to give a buggy call time to return).
fn a_nested_free_keeps_the_outer_batch_waited_for<B: Backend>() {
    let rl: &'static RankLocal<Nests<B>, B> = common::leak(RankLocal::new());
    let nest: &'static Nest = common::leak(Nest {
        nested: Mutex::new(None),
        nesting_done: AtomicBool::new(false),
        start_other: Mutex::new(None),
        outer_dropped: AtomicUsize::new(0),
        other_returned: AtomicBool::new(false),
        other: Mutex::new(None),
        other_seen: AtomicBool::new(false),
    });
    let n = if cfg!(miri) { 3 } else { 8 };
    let outer: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
    for r in &outer {
        on_behalf_of(r.id(), || {
            rl.with_or(
                || Nests {
                    rl,
                    nest,
                    outer: true,
                },
                |_| (),
            )
        });
    }
    let nested = Rank::new();
    on_behalf_of(nested.id(), || {
        rl.with_or(
            || Nests {
                rl,
                nest,
                outer: false,
            },
            |_| (),
        )
    });
    *nest.nested.lock().unwrap() = Some(nested);
    let (tx, rx) = mpsc::channel();
    *nest.start_other.lock().unwrap() = Some(tx);
    let (blocked_tx, blocked_rx) = mpsc::channel();
    let other = thread::spawn(move || {
        blocked_tx.send(Blocked::this_thread()).unwrap();
        rx.recv().unwrap();
        rl.reclaim_exited_blocking();
        let seen = nest.outer_dropped.load(SeqCst);
        nest.other_returned.store(true, SeqCst);
        seen
    });
    *nest.other.lock().unwrap() = Some(blocked_rx.recv().unwrap());
    drop(outer); // the outer ranks exit
    common::within_deadline(move || rl.reclaim_exited_blocking()); // frees batch 0
    let seen = other.join().unwrap();
    assert!(
        nest.other_seen.load(SeqCst),
        "the other thread's reclaim_exited_blocking neither waited nor returned"
    );
    assert_eq!(
        seen, n,
        "a reclaim_exited_blocking on another thread returned with {seen} of the {n} values of a \
         batch this thread was freeing dropped"
    );
}

/// `clear`, `purge_exited` and the `RankLocal`'s drop free the batches a sweep retired that are
/// still waiting for their grace period (a reader of another map holds a pin): `&mut` excludes
/// every reader of this one, so nothing is left behind, and every value is dropped once.
///
/// Found by mutation testing (issue 21 of the project's tracker): with the exclusive paths
/// forgetting the waiting batches (`take_all` → an empty list), no test failed: their values were
/// never dropped.
fn clear_purge_and_drop_free_the_batches_still_waiting<B: Backend>() {
    for how in ["clear", "purge_exited", "drop"] {
        let drops = common::counter();
        let mut rl: RankLocal<Counted<'static>, B> = RankLocal::new();
        // a pin held on another thread, through another map: no batch gets ready meanwhile
        let other: RankLocal<u64, B> = RankLocal::new();
        let holder = Rank::new();
        on_behalf_of(holder.id(), || other.with(|_| ()));
        let hid = holder.id();
        let (pinned_tx, pinned_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        thread::scope(|s| {
            let other = &other;
            s.spawn(move || {
                other.with_for(hid, |_| {
                    pinned_tx.send(()).unwrap();
                    let _ = release_rx.recv();
                })
            });
            pinned_rx.recv().unwrap();
            let n = 5;
            for _ in 0..n {
                let r = Rank::new();
                on_behalf_of(r.id(), || common::touch_scoped(&rl, drops));
            }
            assert_eq!(
                rl.reclaim_exited(),
                n,
                "{how}: the sweep took {n} exited ranks"
            );
            assert_eq!(drops.load(SeqCst), 0, "{how}: freed under a held pin");
            match how {
                "clear" => rl.clear(),
                "purge_exited" => assert_eq!(rl.purge_exited(), 0),
                _ => drop(rl),
            }
            assert_eq!(
                drops.load(SeqCst),
                n,
                "{how} left values of a batch that waited for its grace period"
            );
            drop(release_tx);
        });
    }
}
