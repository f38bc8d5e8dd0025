//! Scoped access (`with`, `with_for`, `for_each`): which instances stay scoped and which escape
//! (a plain `&T` from `get`, `get_for` or `iter` keeps an instance for good, I31), nesting, and
//! panics inside `f`. Reclaiming exited ranks' scoped-only instances is `sweeps.rs`'s subject.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use std::thread;

use common::{counter, leak, reclaim_until, touch_scoped, Counted};
use ranklocal::{on_behalf_of, Backend, Rank, RankId, RankLocal};

common::backend_tests! {
    get_after_with_keeps_it,
    with_after_get_keeps_it,
    iter_escapes_what_it_hands_out,
    iter_marks_again_after_a_new_scoped_instance,
    with_inside_with,
    a_panic_inside_f_leaks_nothing,
    a_plain_lookup_after_scoped_ones_escapes,
    a_tls_destructor_inside_with_outlives_a_concurrent_sweep,
}

/// A plain `&T` (`get_for`) of a scoped instance escapes it: kept after its rank exits (I31).
fn get_after_with_keeps_it<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || touch_scoped(&rl, drops));
    let escaped: &Counted<'_> = rl.get_for(id).unwrap(); // a plain `&T`: kept from now on
    drop(job);
    assert_eq!(rl.reclaim_exited(), 0);
    assert!(std::ptr::eq(rl.get_for(id).unwrap(), escaped));
    assert_eq!(
        rl.with_for(id, |v| v as *const _),
        Some(escaped as *const _)
    );
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(rl);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

/// `with` after `get` lends the escaped instance, which stays kept after its rank exits.
fn with_after_get_keeps_it<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    let p = on_behalf_of(id, || {
        rl.get_or(|| Counted::new(drops)) as *const Counted<'_>
    });
    on_behalf_of(id, || {
        rl.with_or(|| Counted::new(drops), |v| assert!(std::ptr::eq(v, p)))
    });
    drop(job);
    assert_eq!(rl.reclaim_exited(), 0);
    assert_eq!(rl.len(), 1);
    assert!(rl.iter().any(|(r, v)| r == id && std::ptr::eq(v, p)));
    drop(rl);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

/// `iter` hands out plain `&T`s: what it yielded is kept after the rank exits (I31).
fn iter_escapes_what_it_hands_out<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || rl.with(|_| ()));
    let seen: Vec<(RankId, &u64)> = rl.iter().collect();
    drop(job);
    assert_eq!(rl.reclaim_exited(), 0, "iter handed out a plain &T: kept");
    assert_eq!(seen, [(id, &0)]);
}

/// `iter` skips its marking walk while every instance is already escaped; a scoped first touch
/// after an `iter` must make the next `iter` mark again, and an instance no `iter` saw stays
/// reclaimable.
fn iter_marks_again_after_a_new_scoped_instance<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    rl.get_or(|| 1); // this thread's own: escaped
    assert_eq!(rl.iter().count(), 1); // nothing to mark: the walk is skipped from now on
    let (a, b) = (Rank::new(), Rank::new());
    on_behalf_of(a.id(), || rl.with(|_| ())); // scoped, after that `iter`
    let seen: Vec<RankId> = rl.iter().map(|(r, _)| r).collect(); // must mark `a`'s
    on_behalf_of(b.id(), || rl.with(|_| ())); // scoped, no `iter` since
    assert_eq!(seen.len(), 2);
    drop((a, b));
    assert_eq!(
        rl.reclaim_exited(),
        1,
        "only b's instance was never handed out as a plain &T"
    );
    rl.reclaim_exited_blocking(); // `len` counts b's until it is dropped
    assert_eq!(rl.len(), 2);
    assert!(seen.iter().all(|&r| rl.get_for(r).is_some()));
}

/// `with` inside `with` (same rank: the same instance; another rank: its own), `with_for` inside
/// a delegation, and `with` inside `for_each`.
fn with_inside_with<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let other = Rank::new();
    rl.with(|outer| {
        outer.fetch_add(1, Ordering::SeqCst);
        rl.with(|inner| {
            assert!(std::ptr::eq(outer, inner), "same rank: same instance");
            inner.fetch_add(1, Ordering::SeqCst);
        });
        on_behalf_of(other.id(), || {
            rl.with(|o| {
                assert!(!std::ptr::eq(outer, o));
                o.fetch_add(10, Ordering::SeqCst);
                rl.with_for(RankId::this_thread(), |mine| {
                    assert!(std::ptr::eq(mine, outer))
                });
            })
        });
    });
    assert_eq!(rl.with(|v| v.load(Ordering::SeqCst)), 2);
    assert_eq!(
        rl.with_for(other.id(), |v| v.load(Ordering::SeqCst)),
        Some(10)
    );
    let mut seen = 0;
    rl.for_each(|_, v| {
        seen += v.load(Ordering::SeqCst);
        rl.with(|_| ()); // scoped access inside the visit
    });
    assert_eq!(seen, 12);
}

/// Panics inside `with`'s and `with_for`'s `f` release their pins: the instance is still reclaimed.
fn a_panic_inside_f_leaks_nothing<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || touch_scoped(&rl, drops));
    for _ in 0..3 {
        let r = catch_unwind(AssertUnwindSafe(|| rl.with_for(id, |_| panic!("in f"))));
        assert!(r.is_err());
        let r = catch_unwind(AssertUnwindSafe(|| {
            on_behalf_of(id, || rl.with_or(|| Counted::new(drops), |_| panic!("f")))
        }));
        assert!(r.is_err());
    }
    assert_eq!(rl.with_for(id, |_| 1), Some(1));
    drop(job);
    assert_eq!(rl.reclaim_exited(), 1);
    reclaim_until(&rl, drops, 1); // the pins of the panicking calls were released
}

/// A plain lookup after scoped ones on the same thread escapes the instance: the scoped cache
/// entries (the owner's, a delegate's pinned one) are keyed apart from plain ones, so `get` and
/// `get_for` never hand out a `&T` through them without marking it kept (found by mutation
/// testing: with either tag 0, the plain lookup hit the scoped entry and the value was swept).
fn a_plain_lookup_after_scoped_ones_escapes<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Counted<'static>, B>::new();
    // the owner: `with`, then `get`, on its own thread, which then ends (joined: its rank exited)
    let owner = thread::scope(|s| {
        s.spawn(|| {
            touch_scoped(&rl, drops);
            rl.with_or(|| Counted::new(drops), |v| assert_eq!(v.value(), 0)); // an owner-entry hit
            let _kept: &Counted<'_> = rl.get_or(|| Counted::new(drops)); // must escape, not hit the owner entry
            RankId::current()
        })
        .join()
        .unwrap()
    });
    // a delegate: `with_for` twice (a pinned entry filled, then hit), then `get_for`
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || touch_scoped(&rl, drops));
    thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(rl.with_for(id, Counted::value), Some(0));
            assert_eq!(rl.with_for(id, Counted::value), Some(0));
            let _kept: &Counted<'_> = rl.get_for(id).unwrap(); // must escape
        })
        .join()
        .unwrap();
    });
    drop(job);
    assert_eq!(
        rl.reclaim_exited(),
        0,
        "a plain lookup through a scoped entry did not escape"
    );
    assert!(rl.get_for(owner).is_some() && rl.get_for(id).is_some());
    assert_eq!(drops.load(Ordering::SeqCst), 0);
}

/// A thread-local destructor that runs after the thread's exit hook, inside `with` on the
/// thread's own (now exited) rank, while another thread sweeps: the exit hook wiped the thread
/// cache, so `with` takes the pinned path and the sweep cannot free the value under it (found by
/// mutation testing: without the wipe, `with` used the owner entry without a pin and the sweeper
/// freed the value it was reading; Miri reports it, and natively the value's poisoned serial
/// shows it).
fn a_tls_destructor_inside_with_outlives_a_concurrent_sweep<B: Backend>() {
    use std::sync::atomic::AtomicU64;
    use std::sync::mpsc;
    /// A value with a serial number, poisoned (`u64::MAX`) by its drop.
    struct Serial(AtomicU64);
    impl Default for Serial {
        fn default() -> Self {
            Serial(AtomicU64::new(7))
        }
    }
    impl Drop for Serial {
        fn drop(&mut self) {
            self.0.store(u64::MAX, Ordering::SeqCst);
        }
    }
    struct AfterTheHook<B: Backend + 'static> {
        rl: &'static RankLocal<Serial, B>,
        go: mpsc::Sender<()>,
        swept: mpsc::Receiver<()>,
        seen: mpsc::Sender<u64>,
    }
    impl<B: Backend> Drop for AfterTheHook<B> {
        fn drop(&mut self) {
            let v = self.rl.with(|s| {
                self.go.send(()).unwrap(); // the sweeper may now try to free the value
                let _ = self.swept.recv(); // ... and has tried, for a while
                s.0.load(Ordering::SeqCst)
            });
            self.seen.send(v).unwrap();
        }
    }
    std::thread_local! {
        static HOOKED: core::cell::RefCell<Option<Box<dyn std::any::Any>>> =
            const { core::cell::RefCell::new(None) };
    }
    let rl: &'static RankLocal<Serial, B> = leak(RankLocal::new());
    let (go_tx, go_rx) = mpsc::channel();
    let (swept_tx, swept_rx) = mpsc::channel();
    let (seen_tx, seen_rx) = mpsc::channel();
    let sweeper = thread::spawn(move || {
        if go_rx.recv().is_ok() {
            for _ in 0..if cfg!(miri) { 20 } else { 2000 } {
                rl.reclaim_exited(); // never blocks: a pinned reader only delays the free
                thread::yield_now();
            }
        }
        let _ = swept_tx.send(());
    });
    thread::spawn(move || {
        let hook = AfterTheHook {
            rl,
            go: go_tx,
            swept: swept_rx,
            seen: seen_tx,
        };
        // registered before the crate's exit hook, so its destructor runs after it
        HOOKED.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
        rl.with(|_| ()); // the thread's rank, its exit hook and an owner entry
    })
    .join()
    .unwrap();
    sweeper.join().unwrap();
    let seen = seen_rx.recv().expect("the destructor did not run");
    assert_eq!(seen, 7, "with read a value the concurrent sweep had freed");
}
