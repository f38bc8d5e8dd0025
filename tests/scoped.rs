//! Scoped access (`with`, `with_for`, `for_each`) and the reclamation of exited ranks'
//! scoped-only instances (issue 12, spec semantic 10), stamped over every backend.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

use ranklocal::{on_behalf_of, Backend, Rank, RankId, RankLocal};

/// Counts drops of its instances (and knows which counter: a non-`'static` borrow).
struct Counted<'a>(&'a AtomicUsize);
impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Drops counted through a `'static` counter (for leaked statics and TLS destructors).
static STATIC_DROPS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

#[derive(Default)]
struct StaticCounted(usize);
impl Drop for StaticCounted {
    fn drop(&mut self) {
        STATIC_DROPS[self.0].fetch_add(1, Ordering::SeqCst);
    }
}

/// Runs `step` until `done()` holds, for up to 30 s: epoch grace periods wait for every thread
/// pinned on the crate's collector, and under TSan, Miri or a loaded 2-core machine the other tests
/// of this binary pin it often. First yields, then 1 ms sleeps.
fn patiently(done: impl Fn() -> bool, mut step: impl FnMut()) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut round = 0u32;
    while !done() && std::time::Instant::now() < deadline {
        step();
        round += 1;
        if round < 1000 {
            thread::yield_now();
        } else {
            thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Calls `reclaim_exited` until `drops` reaches `want` (the epoch may need other test threads to
/// unpin first); panics if it never does.
fn reclaim_until<T: Send + Sync, B: Backend>(
    rl: &RankLocal<T, B>,
    drops: &AtomicUsize,
    want: usize,
) {
    patiently(
        || drops.load(Ordering::SeqCst) >= want,
        || {
            rl.reclaim_exited();
        },
    );
    assert_eq!(drops.load(Ordering::SeqCst), want);
}

fn a_dropped_ranks_scoped_instance_is_reclaimed<B: Backend>() {
    let drops: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || rl.with_or_counted(drops));
    assert_eq!(rl.len(), 1);
    assert_eq!(rl.reclaim_exited(), 0, "a live rank's instance is kept");
    drop(job);
    assert_eq!(rl.reclaim_exited(), 1);
    assert!(rl.with_for(id, |_| ()).is_none());
    reclaim_until(&rl, drops, 1);
    drop(rl);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped exactly once");
}

/// `with` with a counting initializer, for `Counted` (which has no `Default`).
trait WithCounted {
    fn with_or_counted(&self, drops: &'static AtomicUsize);
}
impl<B: Backend> WithCounted for RankLocal<Counted<'static>, B> {
    fn with_or_counted(&self, drops: &'static AtomicUsize) {
        // `get_or` would escape it: create through a scoped first touch instead. A scoped first
        // touch with a custom init is what `rank_local!`'s `with` does; on a plain `RankLocal`
        // the init is `Default`, so wrap the counter in a thread-local for the default.
        COUNTER.with(|c| c.set(Some(drops)));
        self.with(|_| ());
    }
}

thread_local! {
    static COUNTER: std::cell::Cell<Option<&'static AtomicUsize>> = const { std::cell::Cell::new(None) };
}

impl Default for Counted<'_> {
    fn default() -> Self {
        Counted(COUNTER.with(|c| c.get().expect("COUNTER set")))
    }
}

fn the_first_touch_after_many_exits_sweeps<B: Backend>() {
    let drops: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let rl = RankLocal::<Counted<'_>, B>::new();
    let n = 40;
    let ranks: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
    for r in &ranks {
        on_behalf_of(r.id(), || rl.with_or_counted(drops));
    }
    let ids: Vec<RankId> = ranks.iter().map(Rank::id).collect();
    drop(ranks);
    // no `reclaim_exited`: a writer sweeps on its own
    let fresh = Rank::new();
    on_behalf_of(fresh.id(), || rl.with_or_counted(drops));
    assert_eq!(rl.len(), 1, "the first touch swept the exited ranks");
    assert!(ids.iter().all(|&id| rl.with_for(id, |_| ()).is_none()));
    reclaim_until(&rl, drops, n);
    drop(rl);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        n + 1,
        "each dropped exactly once"
    );
}

fn get_after_with_keeps_it<B: Backend>() {
    let drops: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || rl.with_or_counted(drops));
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

fn with_after_get_keeps_it<B: Backend>() {
    let drops: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    let p = on_behalf_of(id, || rl.get_or(|| Counted(drops)) as *const Counted<'_>);
    on_behalf_of(id, || rl.with(|v| assert!(std::ptr::eq(v, p))));
    drop(job);
    assert_eq!(rl.reclaim_exited(), 0);
    assert_eq!(rl.len(), 1);
    assert!(rl.iter().any(|(r, v)| r == id && std::ptr::eq(v, p)));
    drop(rl);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

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
    assert_eq!(rl.len(), 2);
    assert!(seen.iter().all(|&r| rl.get_for(r).is_some()));
}

fn a_delegate_reading_while_the_rank_exits_keeps_the_value<B: Backend>() {
    let drops: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || rl.with_or_counted(drops));
    let rl = &rl;
    let (inside_tx, inside_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    thread::scope(|s| {
        let reader = s.spawn(move || {
            rl.with_for(id, |v| {
                inside_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                // the rank exited and was swept meanwhile; the value is still alive
                assert_eq!(v.0.load(Ordering::SeqCst), 0);
                std::ptr::eq(v.0, drops)
            })
        });
        inside_rx.recv().unwrap();
        drop(job);
        assert_eq!(rl.reclaim_exited(), 1);
        for _ in 0..100 {
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

fn a_panic_inside_f_leaks_nothing<B: Backend>() {
    let drops: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let rl = RankLocal::<Counted<'_>, B>::new();
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || rl.with_or_counted(drops));
    for _ in 0..3 {
        let r = catch_unwind(AssertUnwindSafe(|| rl.with_for(id, |_| panic!("in f"))));
        assert!(r.is_err());
        let r = catch_unwind(AssertUnwindSafe(|| {
            on_behalf_of(id, || rl.with(|_| panic!("f")))
        }));
        assert!(r.is_err());
    }
    assert_eq!(rl.with_for(id, |_| 1), Some(1));
    drop(job);
    assert_eq!(rl.reclaim_exited(), 1);
    reclaim_until(&rl, drops, 1); // the pins of the panicking calls were released
}

fn churned_threads_stay_bounded<B: Backend>() {
    let rl = RankLocal::<Vec<u8>, B>::new();
    let rounds = if cfg!(miri) { 3 } else { 50 };
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

fn access_from_tls_destructors_after_the_exit_hook<B: Backend>() {
    let rl: &'static RankLocal<StaticCounted, B> = Box::leak(Box::new(RankLocal::new()));
    let idx = match B::NAME {
        "epoch" => 0,
        "arc-swap" | "arc_swap" | "arcswap" => 1,
        _ => 2,
    };
    struct Late<B: Backend>(&'static RankLocal<StaticCounted, B>, usize);
    impl<B: Backend> Drop for Late<B> {
        fn drop(&mut self) {
            // runs after the exit hook (registered later, destructors run in reverse order):
            // the pinned path, never a stale owner entry
            let me = RankId::this_thread();
            let a = self.0.with(|v| v as *const StaticCounted as usize);
            let b = self.0.with_for(me, |v| v as *const StaticCounted as usize);
            assert!(b.is_none() || b == Some(a));
            self.0.with(|v| assert!(v.0 == 0 || v.0 == self.1));
        }
    }
    thread_local! {
        static LATE: RefCell<Option<Box<dyn std::any::Any>>> = const { RefCell::new(None) };
    }
    let h = thread::spawn(move || {
        LATE.with(|l| *l.borrow_mut() = Some(Box::new(Late::<B>(rl, idx))));
        rl.with(|_| ()); // the thread's id and exit hook come after LATE's registration
        rl.with(|_| ()); // owner entry filled
    });
    h.join().unwrap(); // `join` waits for the thread's destructors
    rl.reclaim_exited();
    assert_eq!(
        rl.len(),
        0,
        "the thread's instance (maybe re-created by `Late`) was reclaimed"
    );
    let _ = &STATIC_DROPS[idx]; // drops of `StaticCounted::default()` land in slot 0
}

fn every_instance_is_dropped_exactly_once_in_mixed_use<B: Backend>() {
    let drops: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let made = {
        let rl = RankLocal::<Counted<'_>, B>::new();
        let ranks: Vec<Rank> = (0..10).map(|_| Rank::new()).collect();
        for (i, r) in ranks.iter().enumerate() {
            on_behalf_of(r.id(), || {
                if i % 2 == 0 {
                    rl.with_or_counted(drops);
                } else {
                    rl.get_or(|| Counted(drops));
                }
            });
        }
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| rl.with_or_counted(drops));
            }
        });
        drop(ranks);
        rl.reclaim_exited();
        let live = rl.len();
        assert!(live >= 5, "escaped instances are kept: {live}");
        14
    };
    assert_eq!(drops.load(Ordering::SeqCst), made);
}

fn a_non_static_t_is_reclaimed_before_its_borrow_ends<B: Backend>() {
    let names = vec![String::from("a"), String::from("b")];
    let drops = AtomicUsize::new(0);
    {
        let rl = RankLocal::<std::sync::Mutex<Option<&String>>, B>::new();
        let job = Rank::new();
        on_behalf_of(job.id(), || {
            rl.with(|v| *v.lock().unwrap() = Some(&names[1]))
        });
        assert_eq!(
            rl.with_for(job.id(), |v| v.lock().unwrap().cloned()),
            Some(Some("b".into()))
        );
        drop(job);
        assert_eq!(rl.reclaim_exited(), 1);
        let counted = RankLocal::<Counted<'_>, B>::new();
        let r2 = Rank::new();
        on_behalf_of(r2.id(), || counted.get_or(|| Counted(&drops)));
        drop(counted); // the `RankLocal` frees its instances, retired or not, before `drops` dies
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(names);
}

macro_rules! backend_suite {
    ($($module:ident: $b:ty),* $(,)?) => {$(
        mod $module {
            backend_suite!(@tests $b;
                a_dropped_ranks_scoped_instance_is_reclaimed,
                the_first_touch_after_many_exits_sweeps,
                get_after_with_keeps_it,
                with_after_get_keeps_it,
                iter_escapes_what_it_hands_out,
                iter_marks_again_after_a_new_scoped_instance,
                a_delegate_reading_while_the_rank_exits_keeps_the_value,
                a_delegates_cache_never_returns_a_reclaimed_instance,
                with_inside_with,
                a_panic_inside_f_leaks_nothing,
                churned_threads_stay_bounded,
                access_from_tls_destructors_after_the_exit_hook,
                every_instance_is_dropped_exactly_once_in_mixed_use,
                a_non_static_t_is_reclaimed_before_its_borrow_ends,
            );
        }
    )*};
    (@tests $b:ty; $($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            super::$name::<$b>();
        }
    )*};
}

backend_suite! {
    epoch: ranklocal::Epoch,
    arc_swap: ranklocal::ArcSwap,
    baseline: ranklocal::Baseline,
}
