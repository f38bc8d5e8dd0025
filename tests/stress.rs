//! Stress under oversubscription (64 threads on 2 cores), stamped over every backend: owner gets,
//! delegated gets, `get_for` and `iter` while new ranks first-touch. Every lookup must return the
//! right rank's instance and the counters must sum exactly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Instant;

use ranklocal::{on_behalf_of, Backend, RankId, RankLocal};

const THREADS: usize = if cfg!(miri) { 6 } else { 64 };
const OPS: usize = if cfg!(miri) { 20 } else { 20_000 };

/// An instance that knows whose it is.
struct Slot {
    rank: RankId,
    hits: AtomicUsize,
}

fn slot() -> Slot {
    Slot {
        rank: RankId::current(),
        hits: AtomicUsize::new(0),
    }
}

fn oversubscribed_mixed_load<B: Backend>() {
    let rl = RankLocal::<Slot, B>::new();
    let ranks: Vec<std::sync::OnceLock<RankId>> =
        (0..THREADS).map(|_| std::sync::OnceLock::new()).collect();
    let iterated = AtomicUsize::new(0);
    let delegated = AtomicUsize::new(0);
    let barrier = Barrier::new(THREADS);
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..THREADS {
            let (rl, ranks, iterated, delegated, barrier) =
                (&rl, &ranks, &iterated, &delegated, &barrier);
            s.spawn(move || {
                barrier.wait();
                // staggered first touches: half the threads start with other work
                if t % 2 == 1 {
                    let _ = rl.iter().count();
                }
                let me = RankId::current();
                ranks[t].set(me).unwrap();
                for i in 0..OPS {
                    let own = rl.get_or(slot);
                    assert_eq!(own.rank, me, "owner got another rank's instance");
                    own.hits.fetch_add(1, Ordering::Relaxed);
                    // work on behalf of some other thread that already has a rank
                    let other = (t + 1 + i % (THREADS - 1)) % THREADS;
                    if let Some(&r) = ranks[other].get() {
                        let got = on_behalf_of(r, || {
                            let v = rl.get_or(slot);
                            assert_eq!(RankId::current(), r);
                            v
                        });
                        assert_eq!(got.rank, r, "delegate got the wrong instance");
                        got.hits.fetch_add(1, Ordering::Relaxed);
                        delegated.fetch_add(1, Ordering::Relaxed);
                        if let Some(v) = rl.get_for(r) {
                            assert_eq!(v.rank, r, "get_for returned the wrong instance");
                        }
                    }
                    if i % 500 == 0 {
                        let mut seen = std::collections::HashSet::new();
                        for (r, v) in rl.iter() {
                            assert_eq!(v.rank, r, "iter paired a rank with another's instance");
                            assert!(seen.insert(r), "iter yielded {r} twice");
                        }
                        iterated.fetch_add(seen.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let total: usize = rl.iter().map(|(_, v)| v.hits.load(Ordering::Relaxed)).sum();
    let delegated = delegated.load(Ordering::Relaxed);
    assert_eq!(
        rl.len(),
        THREADS,
        "a delegate created an instance for the wrong rank"
    );
    assert!(delegated > 0, "no delegated access happened");
    assert_eq!(total, THREADS * OPS + delegated, "an increment was lost");
    eprintln!(
        "{}: {THREADS} threads x {OPS} owner gets + {delegated} delegated gets (+ as many get_for), \
         {} entries iterated, in {elapsed:.2?}",
        B::NAME,
        iterated.load(Ordering::Relaxed)
    );
}

/// A delegate may target a rank whose thread has exited: it works until `purge_exited`.
fn delegate_to_an_exited_rank<B: Backend>() {
    let mut rl = RankLocal::<Slot, B>::new();
    let gone = thread::scope(|s| {
        s.spawn(|| {
            rl.get_or(slot).hits.fetch_add(1, Ordering::Relaxed);
            RankId::this_thread()
        })
        .join()
        .unwrap()
    });
    let v = on_behalf_of(gone, || rl.get_or(slot));
    assert_eq!(v.rank, gone);
    assert_eq!(
        v.hits.load(Ordering::Relaxed),
        1,
        "delegate got a fresh instance"
    );
    assert!(rl.get_for(gone).is_some());
    assert_eq!(rl.purge_exited(), 1);
    assert!(rl.get_for(gone).is_none());
    // and a delegate can recreate it afterwards (a new instance for the same rank)
    assert_eq!(
        on_behalf_of(gone, || rl.get_or(slot).hits.load(Ordering::Relaxed)),
        0
    );
}

macro_rules! backend_suite {
    ($($module:ident: $backend:ty),* $(,)?) => {$(
        mod $module {
            #[test]
            fn oversubscribed_mixed_load() {
                super::oversubscribed_mixed_load::<$backend>();
            }
            #[test]
            fn delegate_to_an_exited_rank() {
                super::delegate_to_an_exited_rank::<$backend>();
            }
        }
    )*};
}

backend_suite! {
    epoch: ranklocal::Epoch,
    arc_swap: ranklocal::ArcSwap,
    baseline: ranklocal::Baseline,
}
