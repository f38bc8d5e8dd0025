//! Stress under oversubscription, stamped over every backend: owner gets, delegated gets,
//! `get_for` and `iter` while new ranks first-touch (64 threads on 2 cores), and 16 owners served
//! by one delegate. Every lookup must return the right rank's instance and the counters must sum
//! exactly.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Barrier};
use std::thread;
use std::time::Instant;

use common::{slot, Slot};
use ranklocal::{on_behalf_of, Backend, RankId, RankLocal};

common::backend_tests! {
    oversubscribed_mixed_load,
    threads_and_delegates_agree,
}

/// Threads of `oversubscribed_mixed_load`: 32 per core on a 2-core machine.
const THREADS: usize = if cfg!(miri) { 4 } else { 64 };
/// Owner gets per thread in `oversubscribed_mixed_load`.
const OPS: usize = if cfg!(miri) { 10 } else { 20_000 };

fn oversubscribed_mixed_load<B: Backend>() {
    let rl = RankLocal::<Slot, B>::new();
    let ranks: Vec<once_cell::sync::OnceCell<RankId>> = (0..THREADS)
        .map(|_| once_cell::sync::OnceCell::new())
        .collect();
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

/// Owners in `threads_and_delegates_agree`: oversubscribes a 2-core machine.
const OWNERS: usize = if cfg!(miri) { 4 } else { 16 };

/// `OWNERS` owners, each also served by one shared worker acting for them through
/// `on_behalf_of`: the counters must sum.
fn threads_and_delegates_agree<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let per: usize = if cfg!(miri) { 5 } else { 2000 };
    let (tx, rx) = mpsc::channel::<RankId>();
    thread::scope(|s| {
        let rl = &rl;
        let worker = s.spawn(move || {
            let mut served = 0;
            for rank in rx {
                on_behalf_of(rank, || rl.get().fetch_add(1, Ordering::Relaxed));
                assert!(rl.get_for(rank).is_some());
                served += 1;
            }
            served
        });
        for _ in 0..OWNERS {
            let tx = tx.clone();
            s.spawn(move || {
                let me = RankId::current();
                for i in 0..per {
                    rl.get().fetch_add(1, Ordering::Relaxed);
                    if i % 10 == 0 {
                        tx.send(me).unwrap();
                    }
                }
            });
        }
        drop(tx);
        assert_eq!(worker.join().unwrap(), OWNERS * ((per + 9) / 10));
    });
    let total: usize = rl.iter().map(|(_, v)| v.load(Ordering::Relaxed)).sum();
    assert_eq!(total, OWNERS * (per + (per + 9) / 10));
    assert_eq!(rl.len(), OWNERS);
}
