//! `rank_local!` statics: the same semantics through the macro form's own thread-local slot (I8).
//! The macro form has no backend parameter (its `RankLocalKey` holds an `Epoch` `RankLocal`).

mod common;

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Barrier};
use std::thread;

use common::addr;
use ranklocal::{on_behalf_of, rank_local, Rank, RankId};

static INITS: AtomicUsize = AtomicUsize::new(0);

rank_local! {
    /// A per-rank counter whose init is counted.
    static COUNTER: AtomicUsize = { INITS.fetch_add(1, Ordering::SeqCst); AtomicUsize::new(0) };
    pub(crate) static NAME: String = format!("{}", RankId::current());
    static REENTRANT: u32 = *REENTRANT.get() + 1;
    /// Its rank's id, with its inits counted apart from the other statics'.
    static RACED: u64 = { RACED_INITS.fetch_add(1, Ordering::SeqCst); RankId::current().as_u64() };
}

static RACED_INITS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn each_thread_gets_its_own_static_instance_and_delegates_reach_it() {
    let (tx, rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let owner = thread::spawn(move || {
        COUNTER.get().fetch_add(1, Ordering::SeqCst);
        tx.send((RankId::this_thread(), addr(COUNTER.get())))
            .unwrap();
        release_rx.recv().unwrap();
        assert_eq!(COUNTER.get().load(Ordering::SeqCst), 11);
        assert_eq!(NAME.get(), &format!("{}", RankId::this_thread()));
    });
    let (rank, owner_addr) = rx.recv().unwrap();
    // this thread caches its own instance first: delegation must still route to `rank`
    let mine = addr(COUNTER.get());
    assert_ne!(mine, owner_addr);
    for _ in 0..10 {
        on_behalf_of(rank, || {
            assert_eq!(addr(COUNTER.get()), owner_addr);
            COUNTER.get().fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(addr(COUNTER.get()), mine);
    }
    assert_eq!(addr(COUNTER.get_for(rank).unwrap()), owner_addr);
    assert_eq!(addr(COUNTER.try_get().unwrap()), mine);
    // the delegate created the name of `rank`: it is the rank's, not the delegate's
    let name = on_behalf_of(rank, || NAME.get().clone());
    assert_eq!(name, format!("{rank}"));
    release_tx.send(()).unwrap();
    owner.join().unwrap();
    let ranks: HashSet<RankId> = COUNTER.iter().map(|(r, _)| r).collect();
    assert!(ranks.contains(&rank) && ranks.contains(&RankId::this_thread()));
}

#[test]
fn static_init_runs_once_per_rank() {
    let before = INITS.load(Ordering::SeqCst);
    let ids: Vec<RankId> = (0..8)
        .map(|_| {
            thread::spawn(|| {
                for _ in 0..100 {
                    COUNTER.get().fetch_add(1, Ordering::Relaxed);
                }
                assert!(COUNTER.try_get().is_some());
                RankId::this_thread()
            })
            .join()
            .unwrap()
        })
        .collect();
    assert!(INITS.load(Ordering::SeqCst) >= before + 8);
    for id in ids {
        assert_eq!(COUNTER.get_for(id).unwrap().load(Ordering::Relaxed), 100);
    }
}

#[test]
fn try_get_on_a_fresh_thread_is_none() {
    thread::spawn(|| {
        assert!(COUNTER.try_get().is_none());
        assert!(on_behalf_of(RankId::this_thread(), || COUNTER.try_get()).is_none());
    })
    .join()
    .unwrap();
}

#[test]
fn reentrant_static_init_panics_clearly() {
    // within a deadline: a reentrancy check that stopped working would deadlock, not panic
    let msg = common::within_deadline(|| {
        let err = catch_unwind(AssertUnwindSafe(|| *REENTRANT.get())).unwrap_err();
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    });
    assert!(msg.contains("reentrant"), "{msg:?}");
}

/// A new rank (above every rank the static's map holds) first-touched through the key by several
/// threads at once, with `get` and `with`, round after round: one `init` per rank, one instance.
/// A delegated new rank's reentrant `init` panics clearly, as the thread's own.
#[test]
fn a_new_rank_first_touched_through_the_key_by_many_threads_inits_once() {
    const ROUNDS: usize = if cfg!(miri) { 2 } else { 200 };
    const THREADS: usize = if cfg!(miri) { 3 } else { 8 };
    let ranks: &'static [Rank] = Box::leak((0..ROUNDS).map(|_| Rank::new()).collect());
    let seen: Vec<Vec<usize>> = common::within_deadline(move || {
        let barrier: &'static Barrier = Box::leak(Box::new(Barrier::new(THREADS)));
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                thread::spawn(move || {
                    let (mut seen, mut failure) = (Vec::new(), None);
                    for rank in ranks {
                        barrier.wait();
                        // a failed round is recorded, not unwound: the other racers would wait
                        // for this one at the barrier until the watchdog fires
                        let got = catch_unwind(AssertUnwindSafe(|| {
                            on_behalf_of(rank.id(), || {
                                let v = if t % 2 == 0 {
                                    addr(RACED.get())
                                } else {
                                    RACED.with(addr)
                                };
                                assert_eq!(*RACED.get(), rank.id().as_u64());
                                v
                            })
                        }));
                        match got {
                            Ok(v) => seen.push(v),
                            Err(p) => {
                                failure.get_or_insert_with(|| common::panic_message(&*p));
                                seen.push(0);
                            }
                        }
                    }
                    if let Some(failure) = failure {
                        panic!("thread {t}: {failure}");
                    }
                    seen
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        RACED_INITS.load(Ordering::SeqCst),
        ROUNDS,
        "init ran more than once per rank"
    );
    for (round, rank) in ranks.iter().enumerate() {
        let instance = addr(RACED.get_for(rank.id()).expect("published"));
        assert!(
            seen.iter().all(|s| s[round] == instance),
            "round {round}: two instances for one rank"
        );
    }
    let job = Rank::new();
    let msg = common::within_deadline(move || {
        let err = catch_unwind(AssertUnwindSafe(|| {
            on_behalf_of(job.id(), || *REENTRANT.get())
        }))
        .unwrap_err();
        common::panic_message(&*err)
    });
    assert!(msg.contains("reentrant"), "{msg:?}");
}
