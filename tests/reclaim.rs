//! When, by whom and as which rank the crate drops what it reclaims, and how a reclamation call
//! ends: every freeing path drops a value as its own rank; a swept value's panicking `Drop` never
//! comes out of an unrelated rank's access; `reclaim_exited_blocking` returns only once every
//! exited rank's scoped-only value is dropped; formatting a `RankLocal` keeps nothing alive.
//! Stamped over every backend.
//!
//! Regressions of the churn review (issue 19 of the project's tracker): formatting went through
//! `iter()` and kept every instance forever; a swept value's `Drop` panic came out of another
//! rank's first touch; values were dropped as whatever rank the freeing thread acted for; nothing
//! told a caller when reclamation was done.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{count_defaults_in, Bomb};
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
    static REGISTRY: std::sync::OnceLock<RankLocal<Mutex<Vec<u32>>>> = std::sync::OnceLock::new();
    let registry = REGISTRY.get_or_init(RankLocal::new);
    struct Handle(u32);
    impl Drop for Handle {
        fn drop(&mut self) {
            // a plain access as the current rank: the value's own, if dropped as it
            let registry = REGISTRY.get().unwrap();
            registry.with(|r| r.lock().unwrap().retain(|&h| h != self.0));
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
            count_defaults_in(drops);
            rl.with(|b| b.armed.store(i == 3, Ordering::SeqCst));
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
                    count_defaults_in(others);
                    rl.with(|_| ());
                });
                on_behalf_of(unrelated.id(), || {
                    count_defaults_in(others);
                    rl.with(|_| ());
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
    let msg = err
        .downcast_ref::<&str>()
        .copied()
        .unwrap_or_default()
        .to_string()
        + err.downcast_ref::<String>().map_or("", |s| s.as_str());
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
    let shown = format!("{rl:?}");
    assert!(
        shown.contains(&format!("{:?}: 0", ranks[0].id())),
        "{shown}"
    );
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
    let msg = err
        .downcast_ref::<String>()
        .map_or("", String::as_str)
        .to_string();
    assert!(
        msg.contains("from inside its own drop"),
        "unclear message: {msg}"
    );
    assert!(rl.is_empty(), "the value was made again");
}
