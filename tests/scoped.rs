//! Scoped access (`with`, `with_for`, `for_each`): which instances stay scoped and which escape
//! (a plain `&T` from `get`, `get_for` or `iter` keeps an instance for good, I31), nesting, and
//! panics inside `f`. Reclaiming exited ranks' scoped-only instances is `sweeps.rs`'s subject.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{counter, reclaim_until, touch_scoped, Counted};
use ranklocal::{on_behalf_of, Backend, Rank, RankId, RankLocal};

common::backend_tests! {
    get_after_with_keeps_it,
    with_after_get_keeps_it,
    iter_escapes_what_it_hands_out,
    iter_marks_again_after_a_new_scoped_instance,
    with_inside_with,
    a_panic_inside_f_leaks_nothing,
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
    on_behalf_of(id, || rl.with(|v| assert!(std::ptr::eq(v, p))));
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
            on_behalf_of(id, || rl.with(|_| panic!("f")))
        }));
        assert!(r.is_err());
    }
    assert_eq!(rl.with_for(id, |_| 1), Some(1));
    drop(job);
    assert_eq!(rl.reclaim_exited(), 1);
    reclaim_until(&rl, drops, 1); // the pins of the panicking calls were released
}
