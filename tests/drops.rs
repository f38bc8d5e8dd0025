//! Drops: every instance is dropped exactly once — by `clear`, `purge_exited`, a sweep, drop or
//! `into_iter`, also when one `T::drop` panics (I10) — and values that belong to a rank are
//! dropped as that rank (`OnBehalfOf`'s future, I11; a bound closure's captures).

mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::Context;
use std::thread;

use common::{
    counter, exited_thread_rank, patiently, touch_scoped, Bomb, Counted, DropsAs, YieldOnce,
};
use ranklocal::{on_behalf_of, Backend, OnBehalfExt, Rank, RankId, RankLocal};

common::backend_tests! {
    miri_every_backend;
    s6_every_instance_is_dropped_exactly_once,
    every_instance_is_dropped_exactly_once_in_mixed_use,
    a_non_static_t_is_reclaimed_before_its_borrow_ends,
    clear_keeps_dropping_after_a_panic,
    purge_exited_keeps_dropping_after_a_panic,
    drop_keeps_dropping_after_a_panic,
    into_iter_keeps_dropping_after_a_panic,
    a_panicking_drop_in_a_sweep_and_a_panic_in_f_leak_nothing,
}

/// Spec semantic 6: `clear`, drop and `into_iter` each drop every instance exactly once
/// (`into_iter` hands them out instead).
fn s6_every_instance_is_dropped_exactly_once<B: Backend>() {
    let drops = AtomicUsize::new(0);
    let mut rl = RankLocal::<Counted, B>::new();
    let mk = |rl: &RankLocal<_, B>| {
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| rl.get_or(|| Counted::new(&drops)));
            }
        })
    };
    mk(&rl);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    rl.clear();
    assert_eq!(drops.load(Ordering::SeqCst), 4, "clear");
    assert!(rl.is_empty());
    mk(&rl);
    drop(rl);
    assert_eq!(drops.load(Ordering::SeqCst), 8, "drop");
    let rl = RankLocal::<Counted, B>::new();
    mk(&rl);
    let taken: Vec<_> = rl.into_iter().collect();
    assert_eq!(taken.len(), 4);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        8,
        "into_iter dropped values it returned"
    );
    drop(taken);
    assert_eq!(drops.load(Ordering::SeqCst), 12, "into_iter");
}

/// Scoped and escaped instances, reclaimed or not, are each dropped exactly once by the end.
fn every_instance_is_dropped_exactly_once_in_mixed_use<B: Backend>() {
    let drops = counter();
    let made = {
        let rl = RankLocal::<Counted<'_>, B>::new();
        let ranks: Vec<Rank> = (0..10).map(|_| Rank::new()).collect();
        for (i, r) in ranks.iter().enumerate() {
            on_behalf_of(r.id(), || {
                if i % 2 == 0 {
                    touch_scoped(&rl, drops);
                } else {
                    rl.get_or(|| Counted::new(drops));
                }
            });
        }
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| touch_scoped(&rl, drops));
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

/// A `T` that borrows: the `RankLocal` frees its instances, reclaimed or not, before the borrow
/// ends.
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
        on_behalf_of(r2.id(), || counted.get_or(|| Counted::new(&drops)));
        drop(counted); // the `RankLocal` frees its instances, retired or not, before `drops` dies
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(names);
}

// ---------------------------------------------------------------------------------------------
// A panicking `T::drop` must not leak the instances after it (I10): all `N` drops are observed,
// then the panic propagates. Found in review (issue 10, wrong results): each failed before its fix.

/// Instances in `filled`.
const N: usize = 8;

/// A `RankLocal` holding `N` instances, one of exited thread each; the 4th panics when dropped.
fn filled<B: Backend>(drops: &AtomicUsize) -> RankLocal<Bomb<'_>, B> {
    let rl = RankLocal::<Bomb<'_>, B>::new();
    thread::scope(|s| {
        for i in 0..N {
            let rl = &rl;
            s.spawn(move || {
                rl.get_or(|| Bomb::new(drops, i == 3));
            })
            .join()
            .unwrap();
        }
    });
    assert_eq!(rl.len(), N);
    rl
}

/// Runs `f`, which must panic (with `T::drop`'s panic) after dropping all `N` instances.
fn assert_all_dropped_then_panicked(drops: &AtomicUsize, f: impl FnOnce()) {
    let r = catch_unwind(AssertUnwindSafe(f));
    assert!(r.is_err(), "the panic of T::drop was not propagated");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        N,
        "instances after the panicking one were leaked"
    );
}

/// `clear` drops every instance once although one `T::drop` panics.
/// Found in review (issue 10, wrong results): failed before its fix.
fn clear_keeps_dropping_after_a_panic<B: Backend>() {
    let drops = AtomicUsize::new(0);
    let mut rl = filled::<B>(&drops);
    assert_all_dropped_then_panicked(&drops, || rl.clear());
    assert!(rl.is_empty());
    assert_eq!(
        drops.load(Ordering::SeqCst),
        N,
        "an instance was dropped twice"
    );
}

/// `purge_exited` drops every instance once although one `T::drop` panics.
/// Found in review (issue 10, wrong results): failed before its fix.
fn purge_exited_keeps_dropping_after_a_panic<B: Backend>() {
    let drops = AtomicUsize::new(0);
    let mut rl = filled::<B>(&drops);
    assert_all_dropped_then_panicked(&drops, || {
        rl.purge_exited();
    });
    assert!(rl.is_empty());
    drop(rl);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        N,
        "an instance was dropped twice"
    );
}

/// `drop` drops every instance once although one `T::drop` panics.
/// Found in review (issue 10, wrong results): failed before its fix.
fn drop_keeps_dropping_after_a_panic<B: Backend>() {
    let drops = AtomicUsize::new(0);
    let rl = filled::<B>(&drops);
    assert_all_dropped_then_panicked(&drops, || drop(rl));
}

/// `into_iter` drops every instance once although one `T::drop` panics.
/// Found in review (issue 10, wrong results): failed before its fix.
fn into_iter_keeps_dropping_after_a_panic<B: Backend>() {
    let drops = AtomicUsize::new(0);
    let rl = filled::<B>(&drops);
    assert_all_dropped_then_panicked(&drops, || {
        let it = rl.into_iter();
        drop(it);
    });
    let rl = filled::<B>(&drops);
    drops.store(0, Ordering::SeqCst);
    assert_all_dropped_then_panicked(&drops, || {
        for (_, v) in rl {
            drop(v);
        }
    });
}

/// A `T::drop` that panics during a sweep's free: every retired instance is still dropped
/// exactly once, and a panic inside `f` leaks nothing. Found in review 3 (adversarial), which
/// attacked scoped access; withstood.
fn a_panicking_drop_in_a_sweep_and_a_panic_in_f_leak_nothing<B: Backend>() {
    let drops = counter();
    let rl = RankLocal::<Bomb<'_>, B>::new();
    let ranks: Vec<Rank> = (0..4).map(|_| Rank::new()).collect();
    for (i, r) in ranks.iter().enumerate() {
        on_behalf_of(r.id(), || {
            rl.with_or(
                || Bomb::new(drops, false),
                |v| v.armed.store(i == 1, SeqCst),
            )
        });
    }
    let id3 = ranks[3].id();
    drop(ranks);
    // a panic inside a delegate's `f`
    let r = catch_unwind(AssertUnwindSafe(|| rl.with_for(id3, |_| panic!("in f"))));
    assert!(r.is_err());
    let mut panics = 0;
    patiently(
        || drops.load(SeqCst) >= 4,
        || {
            if catch_unwind(AssertUnwindSafe(|| rl.reclaim_exited())).is_err() {
                panics += 1;
            }
        },
    );
    assert_eq!(panics, 1, "the panicking drop propagated once");
    assert_eq!(drops.load(SeqCst), 4, "each dropped exactly once");
    assert_eq!(rl.len(), 0);
    drop(rl);
    assert_eq!(drops.load(SeqCst), 4);
}

// ---------------------------------------------------------------------------------------------
// Values dropped as their rank: `OnBehalfOf` drops its inner future inside the rank (I11; found in
// review, issue 10: failed before its fix), and a bound closure drops its captures inside it.

/// An `OnBehalfOf` cancelled while pending drops its future's state inside the rank.
/// Found in review (issue 10, wrong results): failed before its fix.
#[test]
fn on_behalf_of_drops_a_polled_future_inside_the_rank() {
    let rank = exited_thread_rank();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let guard = DropsAs(seen.clone());
    let mut fut = Box::pin(
        async move {
            let _guard = guard;
            YieldOnce(false).await;
        }
        .on_behalf_of(rank),
    );
    let waker = common::noop_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    drop(fut); // cancelled while pending: the guard lives in the future's state
    assert_eq!(
        *seen.lock().unwrap(),
        [rank],
        "inner future dropped outside the rank"
    );
    assert_eq!(
        RankId::current(),
        RankId::this_thread(),
        "rank not restored after drop"
    );
}

/// An `OnBehalfOf` dropped before its first poll drops its future inside the rank.
/// Found in review (issue 10, wrong results): failed before its fix.
#[test]
fn on_behalf_of_drops_an_unpolled_future_inside_the_rank() {
    let rank = exited_thread_rank();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let guard = DropsAs(seen.clone());
    let fut = async move {
        let _guard = guard;
    }
    .on_behalf_of(rank);
    drop(fut);
    assert_eq!(
        *seen.lock().unwrap(),
        [rank],
        "inner future dropped outside the rank"
    );
}

/// `into_inner` hands the future back without dropping it; dropped later, it drops as whoever drops it.
#[test]
fn into_inner_hands_the_future_back_undropped() {
    let rank = exited_thread_rank();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let guard = DropsAs(seen.clone());
    let fut = async move {
        let _guard = guard;
        RankId::current()
    }
    .on_behalf_of(rank);
    assert_eq!(fut.rank(), rank);
    let inner = fut.into_inner();
    assert!(
        seen.lock().unwrap().is_empty(),
        "into_inner dropped the future"
    );
    drop(inner);
    assert_eq!(*seen.lock().unwrap(), [RankId::this_thread()]);
}

/// A panic in the inner future's drop still restores the dropping thread's rank.
#[test]
fn a_panicking_inner_drop_restores_the_rank() {
    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("inner drop panics");
        }
    }
    let rank = exited_thread_rank();
    let p = PanicOnDrop;
    let fut = async move {
        let _p = p;
    }
    .on_behalf_of(rank);
    assert!(catch_unwind(AssertUnwindSafe(|| drop(fut))).is_err());
    assert_eq!(RankId::current(), RankId::this_thread());
}

/// A `bind` closure drops its captures as the rank, called or not, on whichever thread drops it.
#[test]
fn a_bound_closure_drops_its_captures_as_the_rank() {
    let rank = Rank::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    // called: the captures are dropped when `f` returns, inside the rank
    let guard = DropsAs(seen.clone());
    rank.id().bind(move || drop(guard))();
    // never called (a cancelled job): still dropped as the rank, on whichever thread drops it
    let guard = DropsAs(seen.clone());
    let uncalled = rank.id().bind(move || drop(guard));
    thread::spawn(move || drop(uncalled)).join().unwrap();
    assert_eq!(*seen.lock().unwrap(), [rank.id(), rank.id()]);
    assert_eq!(RankId::current(), RankId::this_thread());
}
