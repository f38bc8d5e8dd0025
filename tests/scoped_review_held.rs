//! Review 3 (adversarial): attacks on scoped access that the implementation withstood. Each test
//! would fail if the protection it names were missing.
use ranklocal::{on_behalf_of, Rank, RankLocal};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

static DROPS: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

/// A value that counts its drops in its own counter `N` (tests run in parallel).
#[derive(Default)]
struct Probe<const N: usize>(Box<u64>);

impl<const N: usize> Drop for Probe<N> {
    fn drop(&mut self) {
        DROPS[N].fetch_add(1, SeqCst);
    }
}

fn drops(n: usize) -> usize {
    DROPS[n].load(SeqCst)
}

/// Calls `step` until `done()` holds, for up to 20 s (a generous bound for epoch grace periods on
/// a loaded 2-core machine, where the other tests of this binary pin the same collector): first
/// yields, then 1 ms sleeps. Returns whether `done()` held.
fn patiently(mut step: impl FnMut(), done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut round = 0u32;
    while std::time::Instant::now() < deadline {
        step();
        if done() {
            return true;
        }
        round += 1;
        if round < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    false
}

/// Sweeps until `n` drops were seen (other tests' pins may delay the grace period).
fn reclaim_until<const N: usize>(rl: &RankLocal<Probe<N>>, n: usize) {
    if patiently(
        || {
            rl.reclaim_exited();
        },
        || drops(N) >= n,
    ) {
        return;
    }
    panic!("never reclaimed");
}

/// A `Rank` dropped inside its own `with` (pinned path), then a sweep inside `f`: the instance
/// lent to `f` is unpublished but not dropped until `f` returns.
#[test]
fn rank_dropped_inside_its_own_with_then_swept() {
    let rl: RankLocal<Probe<0>> = RankLocal::new();
    let rank = Rank::new();
    let id = rank.id();
    on_behalf_of(id, || rl.with(|v| assert_eq!(*v.0, 0))); // created while live
    let mut rank = Some(rank);
    on_behalf_of(id, || {
        rl.with(|v| {
            drop(rank.take());
            for _ in 0..10 {
                rl.reclaim_exited();
            }
            assert_eq!(rl.len(), 0, "unpublished");
            assert_eq!(drops(0), 0, "dropped while lent to f");
            assert_eq!(*v.0, 0);
        })
    });
    reclaim_until(&rl, 1);
    assert_eq!(drops(0), 1);
}

/// `with` nested in `for_each`, whose inner first touch (another rank) sweeps: the instance the
/// outer `f` holds (an exited rank's) survives until `for_each` returns.
#[test]
fn first_touch_inside_for_each_sweeps_but_outer_borrow_survives() {
    let rl: RankLocal<Probe<1>> = RankLocal::new();
    let dead = Rank::new();
    let dead_id = dead.id();
    on_behalf_of(dead_id, || rl.with(|_| ()));
    drop(dead);
    for _ in 0..40 {
        drop(Rank::new()); // make the amortized sweep due
    }
    let fresh = Rank::new();
    let mut seen = 0;
    rl.for_each(|rank, v| {
        assert_eq!(rank, dead_id);
        on_behalf_of(fresh.id(), || rl.with(|_| ())); // first touch: sweeps `dead`'s
        for _ in 0..10 {
            rl.reclaim_exited();
        }
        assert_eq!(drops(1), 0, "dropped while for_each lent it");
        assert_eq!(*v.0, 0);
        seen += 1;
    });
    assert_eq!(seen, 1);
    reclaim_until(&rl, 1);
}

/// A delegate's `with_for` of an exited rank, a sweep inside `f`: kept until `f` returns.
#[test]
fn with_for_of_exited_rank_survives_sweep_inside_f() {
    let rl: RankLocal<Probe<2>> = RankLocal::new();
    let dead = Rank::new();
    let id = dead.id();
    on_behalf_of(id, || rl.with(|_| ()));
    drop(dead);
    let r = rl.with_for(id, |v| {
        rl.reclaim_exited();
        rl.reclaim_exited();
        assert_eq!(drops(2), 0);
        *v.0
    });
    assert_eq!(r, Some(0));
    reclaim_until(&rl, 1);
    assert!(rl.with_for(id, |_| ()).is_none());
}

/// A plain `&T` (`get_for`) of an exited rank's scoped instance escapes it: never swept.
#[test]
fn get_for_escapes_before_sweep() {
    let rl: RankLocal<Probe<3>> = RankLocal::new();
    let dead = Rank::new();
    let id = dead.id();
    on_behalf_of(id, || rl.with(|_| ()));
    drop(dead);
    let v = rl.get_for(id).unwrap();
    for _ in 0..20 {
        assert_eq!(rl.reclaim_exited(), 0);
    }
    assert_eq!(drops(3), 0);
    assert_eq!(*v.0, 0);
}

static RE: RankLocal<Reenter> = RankLocal::new();
static RE_DROPS: AtomicUsize = AtomicUsize::new(0);

#[derive(Default)]
struct Reenter;

impl Drop for Reenter {
    fn drop(&mut self) {
        RE_DROPS.fetch_add(1, SeqCst);
        // re-enters the same RankLocal from the sweep's free: must not deadlock
        RE.with(|_| ());
        let r = Rank::new();
        on_behalf_of(r.id(), || RE.with(|_| ()));
        RE.reclaim_exited();
    }
}

/// `T::drop` run by a sweep re-enters the same `static RankLocal` (first touch, sweep):
/// no deadlock (the free runs outside the claims mutex).
#[test]
fn drop_reentering_the_same_rank_local_does_not_deadlock() {
    let dead = Rank::new();
    on_behalf_of(dead.id(), || RE.with(|_| ()));
    drop(dead);
    assert!(
        patiently(
            || {
                RE.reclaim_exited();
            },
            || RE_DROPS.load(SeqCst) > 0
        ),
        "never reclaimed"
    );
}

static PANICKY_DROPS: AtomicUsize = AtomicUsize::new(0);

/// Panics in its drop when its value is 1.
#[derive(Default)]
struct Panicky(std::sync::atomic::AtomicU64);

impl Drop for Panicky {
    fn drop(&mut self) {
        PANICKY_DROPS.fetch_add(1, SeqCst);
        if self.0.load(SeqCst) == 1 {
            panic!("Panicky::drop");
        }
    }
}

/// A `T::drop` that panics during a sweep's free: every retired instance is still dropped
/// exactly once, and a panic inside `f` leaks nothing.
#[test]
fn panicking_drop_in_sweep_and_panic_in_f() {
    let rl: RankLocal<Panicky> = RankLocal::new();
    let ranks: Vec<Rank> = (0..4).map(|_| Rank::new()).collect();
    for (i, r) in ranks.iter().enumerate() {
        on_behalf_of(r.id(), || rl.with(|v| v.0.store((i == 1) as u64, SeqCst)));
    }
    let id3 = ranks[3].id();
    drop(ranks);
    // a panic inside a delegate's `f`
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rl.with_for(id3, |_| panic!("in f"))
    }));
    assert!(r.is_err());
    let mut panics = 0;
    patiently(
        || {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rl.reclaim_exited()))
                .is_err()
            {
                panics += 1;
            }
        },
        || PANICKY_DROPS.load(SeqCst) >= 4,
    );
    assert_eq!(panics, 1, "the panicking drop propagated once");
    assert_eq!(PANICKY_DROPS.load(SeqCst), 4, "each dropped exactly once");
    assert_eq!(rl.len(), 0);
    drop(rl);
    assert_eq!(PANICKY_DROPS.load(SeqCst), 4);
}
