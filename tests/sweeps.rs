//! Reclamation of exited ranks' scoped-only instances without `&mut` (I30–I35): `reclaim_exited`
//! and the amortized sweep of a first touch drop what no plain `&T` escaped, exactly once (first
//! touches alone, with no explicit call, drop everything their sweeps took), and never while a
//! scoped reader (`with`, `with_for`, `for_each`) or a delegate's cache entry can still reach it;
//! plain `&T`s (`get`, `get_for`, `iter`) racing sweeps stay alive. `purge_exited` (with `&mut`)
//! is `exited.rs`'s subject.

mod common;

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, Ordering::SeqCst};
use std::sync::{mpsc, Mutex};
use std::thread;

use common::{
    counter, exit_ranks, leak, patiently, reclaim_until, touch_scoped, Counted, SWEEPS_WHILE_LENT,
};
use ranklocal::{on_behalf_of, Backend, Rank, RankId, RankLocal};

common::backend_tests! {
    a_dropped_ranks_scoped_instance_is_reclaimed,
    the_first_touch_after_many_exits_sweeps,
    churned_threads_stay_bounded,
    a_delegate_reading_while_the_rank_exits_keeps_the_value,
    a_delegates_cache_never_returns_a_reclaimed_instance,
    a_rank_dropped_inside_its_own_with_then_swept,
    a_first_touch_inside_for_each_sweeps_but_the_outer_borrow_survives,
    with_for_of_an_exited_rank_survives_a_sweep_inside_f,
    get_for_escapes_before_a_sweep,
    a_drop_run_by_a_sweep_may_reenter_the_same_rank_local,
    a_scoped_first_touch_of_an_exited_rank_outlives_f,
    a_scoped_first_touch_of_an_exited_rank_is_readable_after_a_sweep_inside_f,
    get_for_races_a_sweep,
    iter_races_scoped_inserts,
    a_delegates_get_of_an_exited_rank_races_a_sweep,
    first_touches_alone_drop_every_value_their_sweeps_took,
    an_iter_snapshot_keeps_what_it_holds_and_nothing_later,
}

/// What an `iter()` snapshot holds is kept after its rank exits (it counts as handed out), also
/// once the iterator is dropped; a scoped instance published after the snapshot is not in it and
/// is still reclaimed. `iter` marks nothing itself: each instance carries the walk count it was
/// published at, and the sweep keeps those an `iter` since may hold.
fn an_iter_snapshot_keeps_what_it_holds_and_nothing_later<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let (before, after) = (Rank::new(), Rank::new());
    on_behalf_of(before.id(), || touch_scoped(&rl, drops));
    let held: Vec<_> = rl.iter().map(|(rank, _)| rank).collect();
    assert_eq!(held, [before.id()]);
    on_behalf_of(after.id(), || touch_scoped(&rl, drops));
    drop(before);
    drop(after);
    assert_eq!(
        rl.reclaim_exited_blocking(),
        1,
        "only the later instance is swept"
    );
    assert_eq!(drops.load(SeqCst), 1);
    assert_eq!(rl.len(), 1);
    assert_eq!(rl.reclaim_exited(), 0, "the snapshot's instance stays kept");
}

/// A dropped `Rank`'s scoped-only instance is reclaimed by `reclaim_exited` (a live rank's is
/// kept), and dropped exactly once.
fn a_dropped_ranks_scoped_instance_is_reclaimed<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || touch_scoped(&rl, drops));
    assert_eq!(rl.len(), 1);
    assert_eq!(rl.reclaim_exited(), 0, "a live rank's instance is kept");
    drop(job);
    assert_eq!(rl.reclaim_exited(), 1);
    assert!(rl.with_for(id, |_| ()).is_none());
    reclaim_until(&rl, drops, 1);
    drop(rl);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped exactly once");
}

/// After many exits a writer's first touch sweeps the exited ranks' scoped instances on its own,
/// with no `reclaim_exited` call.
fn the_first_touch_after_many_exits_sweeps<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    // enough exits that the first touch's amortized sweep is due (at least 16, and half of `len`)
    let n = if cfg!(miri) { 20 } else { 40 };
    let ranks: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
    for r in &ranks {
        on_behalf_of(r.id(), || touch_scoped(&rl, drops));
    }
    let ids: Vec<RankId> = ranks.iter().map(Rank::id).collect();
    drop(ranks);
    // no `reclaim_exited`: a writer sweeps on its own
    let fresh = Rank::new();
    on_behalf_of(fresh.id(), || touch_scoped(&rl, drops));
    // unpublished; `len` counts them until they are dropped
    assert!(ids.iter().all(|&id| rl.with_for(id, |_| ()).is_none()));
    reclaim_until(&rl, drops, n);
    assert_eq!(rl.len(), 1, "the first touch swept the exited ranks");
    drop(rl);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        n + 1,
        "each dropped exactly once"
    );
}

/// Short-lived threads' scoped instances are reclaimed: the map stays bounded and ends empty.
fn churned_threads_stay_bounded<B: Backend>() {
    let rl = RankLocal::<Vec<u8>, B>::new();
    let rounds = if cfg!(miri) { 2 } else { 50 };
    let mut max_len = 0;
    for _ in 0..rounds {
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| rl.with(|v| assert!(v.is_empty())));
            }
        });
        max_len = max_len.max(rl.len());
    }
    // `thread::scope` returns when the closures are done, maybe before the threads' exit hooks ran
    patiently(
        || rl.is_empty(),
        || {
            rl.reclaim_exited();
        },
    );
    assert_eq!(rl.len(), 0, "every churned thread's instance was reclaimed");
    assert!(max_len <= 4 + 16 + 200, "len grew to {max_len}");
}

/// A delegate inside `with_for` while the rank exits and is swept: the value outlives `f` (I33)
/// and is dropped after it.
fn a_delegate_reading_while_the_rank_exits_keeps_the_value<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || touch_scoped(&rl, drops));
    let rl = &rl;
    let (inside_tx, inside_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    thread::scope(|s| {
        let reader = s.spawn(move || {
            rl.with_for(id, |v| {
                inside_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                // the rank exited and was swept meanwhile; the value is still alive
                assert_eq!(v.drops.load(Ordering::SeqCst), 0);
                std::ptr::eq(v.drops, drops)
            })
        });
        inside_rx.recv().unwrap();
        drop(job);
        assert_eq!(rl.reclaim_exited(), 1);
        for _ in 0..(if cfg!(miri) { 20 } else { 100 }) {
            rl.reclaim_exited();
        }
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "freed while a reader is inside"
        );
        go_tx.send(()).unwrap();
        assert_eq!(reader.join().unwrap(), Some(true));
    });
    reclaim_until(rl, drops, 1);
}

/// A delegate's pinned cache entry is never used after a sweep reclaimed its instance (I34): the
/// next `with_for` finds nothing, the next `with` makes a fresh instance.
fn a_delegates_cache_never_returns_a_reclaimed_instance<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let job = Rank::new();
    let id = job.id();
    let (tx, rx) = mpsc::channel::<()>();
    let (back_tx, back_rx) = mpsc::channel::<Option<usize>>();
    let rl = &rl;
    thread::scope(|s| {
        s.spawn(move || {
            // fills this thread's pinned cache entry for `id`
            on_behalf_of(id, || rl.with(|v| v.store(7, Ordering::SeqCst)));
            assert_eq!(rl.with_for(id, |v| v.load(Ordering::SeqCst)), Some(7));
            back_tx.send(None).unwrap(); // filled
            rx.recv().unwrap();
            back_tx
                .send(rl.with_for(id, |v| v.load(Ordering::SeqCst)))
                .unwrap();
            back_tx
                .send(on_behalf_of(id, || rl.with(|v| v.load(Ordering::SeqCst))).into())
                .unwrap();
        });
        assert_eq!(back_rx.recv().unwrap(), None);
        drop(job);
        let swept = rl.reclaim_exited();
        tx.send(()).unwrap();
        assert_eq!(swept, 1);
        assert_eq!(
            back_rx.recv().unwrap(),
            None,
            "a stale cache entry was used"
        );
        assert_eq!(
            back_rx.recv().unwrap(),
            Some(0),
            "a fresh instance for the exited rank"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// A sweep while `f` holds the borrow. Found in review 3 (adversarial), which attacked scoped
// access; the implementation withstood these, and each would fail if the protection it names were
// missing.

/// A `Rank` dropped inside its own `with` (pinned path), then a sweep inside `f`: the instance
/// lent to `f` is unpublished but not dropped until `f` returns.
///
/// Found in review 3 (adversarial), an attack the implementation withstood.
fn a_rank_dropped_inside_its_own_with_then_swept<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let rank = Rank::new();
    let id = rank.id();
    // created while live
    on_behalf_of(id, || {
        rl.with_or(|| Counted::new(drops), |v| assert_eq!(v.value(), 0))
    });
    let mut rank = Some(rank);
    on_behalf_of(id, || {
        rl.with_or(
            || Counted::new(drops),
            |v| {
                drop(rank.take());
                for _ in 0..10 {
                    rl.reclaim_exited();
                }
                assert!(rl.with_for(id, |_| ()).is_none(), "unpublished");
                assert_eq!(rl.len(), 1, "len counts the value until it is dropped");
                assert_eq!(drops.load(SeqCst), 0, "dropped while lent to f");
                assert_eq!(v.value(), 0);
            },
        )
    });
    reclaim_until(&rl, drops, 1);
    assert_eq!(drops.load(SeqCst), 1);
}

/// `with` nested in `for_each`, whose inner first touch (another rank) sweeps: the instance the
/// outer `f` holds (an exited rank's) survives until `for_each` returns.
///
/// Found in review 3 (adversarial), an attack the implementation withstood.
fn a_first_touch_inside_for_each_sweeps_but_the_outer_borrow_survives<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let dead = Rank::new();
    let dead_id = dead.id();
    on_behalf_of(dead_id, || rl.with_or(|| Counted::new(drops), |_| ()));
    drop(dead);
    exit_ranks(40); // make the amortized sweep due
    let fresh = Rank::new();
    let mut seen = 0;
    rl.for_each(|rank, v| {
        assert_eq!(rank, dead_id);
        // first touch: sweeps `dead`'s
        on_behalf_of(fresh.id(), || rl.with_or(|| Counted::new(drops), |_| ()));
        for _ in 0..10 {
            rl.reclaim_exited();
        }
        assert_eq!(drops.load(SeqCst), 0, "dropped while for_each lent it");
        assert_eq!(v.value(), 0);
        seen += 1;
    });
    assert_eq!(seen, 1);
    reclaim_until(&rl, drops, 1);
}

/// A delegate's `with_for` of an exited rank, a sweep inside `f`: kept until `f` returns.
///
/// Found in review 3 (adversarial), an attack the implementation withstood.
fn with_for_of_an_exited_rank_survives_a_sweep_inside_f<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let dead = Rank::new();
    let id = dead.id();
    on_behalf_of(id, || rl.with_or(|| Counted::new(drops), |_| ()));
    drop(dead);
    let r = rl.with_for(id, |v| {
        rl.reclaim_exited();
        rl.reclaim_exited();
        assert_eq!(drops.load(SeqCst), 0);
        v.value()
    });
    assert_eq!(r, Some(0));
    reclaim_until(&rl, drops, 1);
    assert!(rl.with_for(id, |_| ()).is_none());
}

/// A plain `&T` (`get_for`) of an exited rank's scoped instance escapes it: never swept.
///
/// Found in review 3 (adversarial), an attack the implementation withstood.
fn get_for_escapes_before_a_sweep<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let dead = Rank::new();
    let id = dead.id();
    on_behalf_of(id, || rl.with_or(|| Counted::new(drops), |_| ()));
    drop(dead);
    let v = rl.get_for(id).unwrap();
    for _ in 0..20 {
        assert_eq!(rl.reclaim_exited(), 0);
    }
    assert_eq!(drops.load(SeqCst), 0);
    assert_eq!(v.value(), 0);
}

/// A value whose drop re-enters the `RankLocal` it lives in: a first touch of the current rank
/// and of a fresh one, then a sweep. Built by `Default` (for `with`) from [`REENTER_INTO`].
struct Reenter {
    rl: &'static dyn Reenterable,
    drops: &'static AtomicUsize,
}

/// A `'static` `RankLocal<Reenter, B>` of any backend.
trait Reenterable: Sync {
    fn reenter(&self);
}

impl<B: Backend> Reenterable for RankLocal<Reenter, B> {
    /// Runs inside the drop, as the dropped value's own (exited) rank: first touches of other
    /// ranks, and a sweep. (Its own rank's value would be made again: that panics, see
    /// `a_drop_asking_for_its_own_value_panics_at_the_explicit_call`.)
    fn reenter(&self) {
        let r = Rank::new();
        on_behalf_of(r.id(), || self.with(|_| ()));
        let s = Rank::new();
        on_behalf_of(s.id(), || self.with(|_| ()));
        drop(r);
        self.reclaim_exited();
        drop(s);
    }
}

type ReenterInto = Option<(&'static dyn Reenterable, &'static AtomicUsize)>;

thread_local! {
    /// The `RankLocal` and drop counter of the `Reenter`s this thread builds.
    static REENTER_INTO: Cell<ReenterInto> = const { Cell::new(None) };
}

impl Default for Reenter {
    fn default() -> Self {
        let (rl, drops) = REENTER_INTO.with(Cell::get).expect("REENTER_INTO set");
        Reenter { rl, drops }
    }
}

impl Drop for Reenter {
    fn drop(&mut self) {
        // re-enters the same RankLocal from the sweep's free: must not deadlock. Only the first
        // drop does (the values it makes would re-enter in turn, without end).
        if self.drops.fetch_add(1, SeqCst) == 0 {
            self.rl.reenter();
        }
    }
}

/// `T::drop` run by a sweep re-enters the same `'static` `RankLocal` (first touch, sweep): no
/// deadlock (the free runs outside the claims mutex). The `RankLocal` is leaked rather than a
/// `static`, which cannot be generic over the backend.
///
/// Found in review 3 (adversarial), an attack the implementation withstood.
fn a_drop_run_by_a_sweep_may_reenter_the_same_rank_local<B: Backend>() {
    let drops = counter();
    let rl: &'static RankLocal<Reenter, B> = leak(RankLocal::new());
    REENTER_INTO.with(|c| c.set(Some((rl, drops))));
    let dead = Rank::new();
    on_behalf_of(dead.id(), || rl.with(|_| ()));
    drop(dead);
    assert!(
        patiently(
            || drops.load(SeqCst) > 0,
            || {
                rl.reclaim_exited();
            },
        ),
        "never reclaimed"
    );
}

// ---------------------------------------------------------------------------------------------
// A scoped first touch that sweeps its own instance.

/// An exited rank, after enough exits that the next first touch's amortized sweep is due.
fn exited_rank_with_a_sweep_due() -> RankId {
    exit_ranks(20);
    Rank::new().id() // dropped at once: exited
}

/// A scoped first touch for an exited rank publishes an instance that its own insert's amortized
/// sweep takes at once; a sweep while `f` runs must not drop the instance lent to `f`.
///
/// Found in review 3 (adversarial): the pin that protects the instance lent to `f` was taken only
/// *after* the sweep's deferral, so a sweep while `f` held the borrow freed it (a use after free
/// from safe code). Fixed: the insert pins before it publishes and sweeps (I33); this failed
/// before the fix.
fn a_scoped_first_touch_of_an_exited_rank_outlives_f<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let dead = exited_rank_with_a_sweep_due();
    let before = drops.load(SeqCst);
    on_behalf_of(dead, || {
        rl.with_or(
            || Counted::new(drops),
            |_v| {
                // any sweep while `f` runs (here an explicit one; another thread's first touch does
                // the same); other tests' pins may delay the grace period, so sweep a while
                for _ in 0..SWEEPS_WHILE_LENT {
                    rl.reclaim_exited();
                    if drops.load(SeqCst) != before {
                        break;
                    }
                    std::thread::yield_now();
                }
                assert_eq!(
                    drops.load(SeqCst),
                    before,
                    "the instance lent to `with`'s f was dropped while f borrowed it"
                );
            },
        )
    });
}

/// The same, reading the value lent to `f` after a sweep inside `f`: it must still be alive.
/// Natively a read of freed memory shows nothing, so the value is a [`Tracked`] (as in the races
/// below): its drop records its serial, and the test fails on that record, before it reads the
/// value, if a sweep inside `f` dropped it. The read then checks the canary, and under Miri a read
/// of the freed value is the use after free that review 3 found (see above), reported as
/// undefined behaviour.
fn a_scoped_first_touch_of_an_exited_rank_is_readable_after_a_sweep_inside_f<B: Backend>() {
    let dropped = leak(Mutex::new(HashSet::new()));
    let drops = counter();
    let rl = RankLocal::<Tracked, B>::new();
    let dead = exited_rank_with_a_sweep_due();
    let read = on_behalf_of(dead, || {
        rl.with_or(
            || Tracked::new(dropped, drops),
            |v| {
                let serial = v.check(); // lent to `f`: alive here
                                        // other tests' pins may delay the grace period that would expose a drop, so
                                        // sweep a while (as above)
                for _ in 0..SWEEPS_WHILE_LENT {
                    rl.reclaim_exited();
                    if dropped.lock().unwrap().contains(&serial) {
                        break;
                    }
                    std::thread::yield_now();
                }
                assert!(
                    !dropped.lock().unwrap().contains(&serial),
                    "the instance lent to `with`'s f was dropped by a sweep inside f"
                );
                assert_eq!(v.check(), serial);
                serial
            },
        )
    });
    drop(rl);
    assert!(
        dropped.lock().unwrap().contains(&read),
        "the value read was not this RankLocal's"
    );
}

// Plain `&T`s racing sweeps. Found in review 4 (adversarial), which raced `get`'s slow path
// (escaping inside `Backend::get_with`) and `iter`'s escape of its snapshot against sweeps of exited
// ranks' scoped instances.
//
// Detection without reading freed memory natively: every instance has a unique serial; its drop
// records the serial; every serial handed out as a plain `&T` (get_for, iter) is recorded too. A
// handed-out instance must never be dropped while the `RankLocal` lives. Under Miri the canary
// reads after sweeps are the use-after-free check itself.

/// The next `Tracked` serial.
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// An instance with a unique serial and a canary its drop overwrites.
struct Tracked {
    serial: u64,
    canary: AtomicU64,
    dropped: &'static Mutex<HashSet<u64>>,
    drops: &'static AtomicUsize,
}

impl Tracked {
    fn new(dropped: &'static Mutex<HashSet<u64>>, drops: &'static AtomicUsize) -> Self {
        Tracked {
            serial: SERIAL.fetch_add(1, SeqCst),
            canary: AtomicU64::new(0xC0FFEE),
            dropped,
            drops,
        }
    }
    fn check(&self) -> u64 {
        assert_eq!(
            self.canary.load(SeqCst),
            0xC0FFEE,
            "read a dropped instance"
        );
        self.serial
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.canary.store(0xDEAD, SeqCst);
        self.drops.fetch_add(1, SeqCst);
        assert!(
            self.dropped.lock().unwrap().insert(self.serial),
            "double drop"
        );
    }
}

/// Rounds of each race.
fn iters() -> usize {
    if cfg!(miri) {
        3
    } else {
        300
    }
}

/// A delegate's `get_for` (lookup_slow -> get_with -> escape) races a sweep of the exited rank.
/// Either it gets the instance (escaped: must stay alive) or None (reclaimed).
///
/// Found in review 4 (adversarial), a race the implementation withstood.
fn get_for_races_a_sweep<B: Backend>() {
    let dropped = leak(Mutex::new(HashSet::new()));
    let drops = counter();
    let rl = RankLocal::<Tracked, B>::new();
    let mut handed = Vec::new();
    let mut kept: Vec<&Tracked> = Vec::new();
    let mut made = 0;
    for _ in 0..iters() {
        let job = Rank::new();
        let id = job.id();
        on_behalf_of(id, || {
            rl.with_tracked(dropped, drops);
        });
        made += 1;
        let got = std::thread::scope(|s| {
            let r = s.spawn(|| {
                let mut got = None;
                for _ in 0..3 {
                    if let Some(v) = rl.get_for(id) {
                        v.check();
                        got = Some(v);
                    }
                }
                got
            });
            drop(job);
            rl.reclaim_exited();
            r.join().unwrap()
        });
        if let Some(v) = got {
            handed.push(v.check());
            kept.push(v);
        }
        rl.reclaim_exited();
        for v in &kept {
            v.check();
        }
    }
    let d = dropped.lock().unwrap().clone();
    for s in &handed {
        assert!(
            !d.contains(s),
            "instance {s} handed out by get_for was dropped"
        );
    }
    drop(kept);
    drop(rl);
    assert_eq!(drops.load(SeqCst), made, "leak or double drop");
}

/// A scoped first touch (`with`) whose instance records its drop in `dropped` and `drops`.
trait WithTracked {
    fn with_tracked(&self, dropped: &'static Mutex<HashSet<u64>>, drops: &'static AtomicUsize);
}

impl<B: Backend> WithTracked for RankLocal<Tracked, B> {
    fn with_tracked(&self, dropped: &'static Mutex<HashSet<u64>>, drops: &'static AtomicUsize) {
        // a scoped first touch builds `Tracked::default()`, which takes its counters from FACTORY
        FACTORY.with(|f| *f.borrow_mut() = Some((dropped, drops)));
        self.with(|v| {
            v.check();
        });
    }
}

type Factory = Option<(&'static Mutex<HashSet<u64>>, &'static AtomicUsize)>;

std::thread_local! {
    static FACTORY: std::cell::RefCell<Factory> = const { std::cell::RefCell::new(None) };
}

impl Default for Tracked {
    fn default() -> Self {
        let (d, n) = FACTORY.with(|f| f.borrow().expect("factory set"));
        Tracked::new(d, n)
    }
}

/// `iter` (which marks nothing, counting its walk) races scoped first touches of exited ranks and sweeps;
/// every instance `iter` handed out must stay alive.
///
/// Found in review 4 (adversarial), a race the implementation withstood.
fn iter_races_scoped_inserts<B: Backend>() {
    let dropped = leak(Mutex::new(HashSet::new()));
    let drops = counter();
    let rl = RankLocal::<Tracked, B>::new();
    let made = AtomicUsize::new(0);
    let handed = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        // writers: scoped instances for ranks that exit right after (sweeps amortized + forced)
        for _ in 0..2 {
            s.spawn(|| {
                FACTORY.with(|f| *f.borrow_mut() = Some((dropped, drops)));
                for i in 0..iters() * 2 {
                    let job = Rank::new();
                    on_behalf_of(job.id(), || rl.with(|v| v.check()));
                    made.fetch_add(1, SeqCst);
                    drop(job);
                    if i % 3 == 0 {
                        rl.reclaim_exited();
                    }
                }
            });
        }
        // iterators: hand out &T, keep them, re-check after later sweeps
        s.spawn(|| {
            let mut kept: Vec<&Tracked> = Vec::new();
            for _ in 0..iters() {
                for (_, v) in rl.iter() {
                    handed.lock().unwrap().push(v.check());
                    kept.push(v);
                }
                for v in &kept {
                    v.check();
                }
            }
        });
    });
    for _ in 0..10 {
        rl.reclaim_exited();
    }
    let d = dropped.lock().unwrap().clone();
    for s in handed.lock().unwrap().iter() {
        assert!(
            !d.contains(s),
            "instance {s} handed out by iter was dropped"
        );
    }
    drop(rl);
    assert_eq!(drops.load(SeqCst), made.load(SeqCst), "leak or double drop");
}

/// `get` (plain &T) for a rank whose scoped instance is being swept, from a delegate acting for
/// the exited rank: lookup_slow may see RECLAIMING, then the first-touch path makes a new one.
///
/// Found in review 4 (adversarial), a race the implementation withstood.
fn a_delegates_get_of_an_exited_rank_races_a_sweep<B: Backend>() {
    let dropped = leak(Mutex::new(HashSet::new()));
    let drops = counter();
    let rl = RankLocal::<Tracked, B>::new();
    let mut handed = Vec::new();
    let mut kept: Vec<&Tracked> = Vec::new();
    for _ in 0..iters() {
        let job = Rank::new();
        let id = job.id();
        FACTORY.with(|f| *f.borrow_mut() = Some((dropped, drops)));
        on_behalf_of(id, || rl.with(|v| v.check()));
        drop(job);
        let got = std::thread::scope(|s| {
            let r = s.spawn(|| {
                FACTORY.with(|f| *f.borrow_mut() = Some((dropped, drops)));
                on_behalf_of(id, || rl.get())
            });
            rl.reclaim_exited();
            r.join().unwrap()
        });
        handed.push(got.check());
        kept.push(got);
        rl.reclaim_exited();
        for v in &kept {
            v.check();
        }
    }
    let d = dropped.lock().unwrap().clone();
    for s in &handed {
        assert!(!d.contains(s), "instance {s} handed out by get was dropped");
    }
}

// ---------------------------------------------------------------------------------------------
// Amortized sweeps with no explicit reclamation.

/// First touches alone, with no explicit reclamation call, drop every value their amortized
/// sweeps took: 64 exited ranks' scoped values are all dropped within 10,000 first touches of live
/// ranks (escaped ones: a first touch that lends no instance).
///
/// Found in review 5 (adversarial). Before the fix, a first touch's sweep left its batch's token
/// in the writers' shared bag, which on `ArcSwap` and `Baseline` (whose writes retire nothing
/// else) went to the collector only after 15 more sweeps process-wide, so the last sweeps' values
/// stayed for as long as the map stayed quiet. It runs alone in a child process: other tests'
/// pins and explicit reclamation in the same process would drive the collector for it (a
/// mutation that stops first touches from helping survived that way).
fn first_touches_alone_drop_every_value_their_sweeps_took<B: Backend>() {
    common::alone::<B>(
        "first_touches_alone_drop_every_value_their_sweeps_took",
        first_touches_drop_what_their_sweeps_took::<B>,
    );
}

fn first_touches_drop_what_their_sweeps_took<B: Backend>() {
    let exited = if cfg!(miri) { 32 } else { 64 };
    let touches = if cfg!(miri) { 500 } else { 10_000 };
    let drops = counter();
    let rl: RankLocal<Counted<'static>, B> = RankLocal::new();
    for _ in 0..exited {
        let r = Rank::new();
        on_behalf_of(r.id(), || rl.with_or(|| Counted::new(drops), |_| ()));
        drop(r);
    }
    let others = counter();
    let mut keep = Vec::new();
    for _ in 0..touches {
        if drops.load(SeqCst) == exited {
            break;
        }
        let r = Rank::new();
        on_behalf_of(r.id(), || rl.get_or(|| Counted::new(others)));
        keep.push(r);
    }
    assert_eq!(
        drops.load(SeqCst),
        exited,
        "after {} first touches (each may sweep), {} of {exited} exited ranks' values were dropped",
        keep.len(),
        drops.load(SeqCst)
    );
}
