//! `rank_local!` statics: the same semantics through the macro form's own thread-local slot (I8).
//! The macro form has no backend parameter (its `RankLocalKey` holds an `Epoch` `RankLocal`).

mod common;

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

use common::addr;
use ranklocal::{on_behalf_of, rank_local, RankId};

static INITS: AtomicUsize = AtomicUsize::new(0);

rank_local! {
    /// A per-rank counter whose init is counted.
    static COUNTER: AtomicUsize = { INITS.fetch_add(1, Ordering::SeqCst); AtomicUsize::new(0) };
    pub(crate) static NAME: String = format!("{}", RankId::current());
    static REENTRANT: u32 = *REENTRANT.get() + 1;
}

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
