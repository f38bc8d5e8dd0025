//! Exited ranks (a thread that exited, a dropped `Rank`): a delegate can still act for one,
//! `get` for one creates an instance it owns, and `purge_exited` drops exactly the exited ranks'
//! instances, after which acting for the rank starts from a fresh `init`. Scoped-only instances,
//! reclaimed without `&mut`, are `sweeps.rs`'s subject.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use common::{addr, parked_rank, slot, Counted, Slot};
use ranklocal::{on_behalf_of, Backend, Rank, RankId, RankLocal};

common::backend_tests! {
    s6_purge_exited_drops_only_exited_ranks,
    purge_keeps_live_ranks_and_drops_dropped_ones,
    acting_for_an_exited_rank,
    delegate_to_an_exited_rank,
}

fn s6_purge_exited_drops_only_exited_ranks<B: Backend>() {
    let drops = AtomicUsize::new(0);
    let mut rl = RankLocal::<Counted, B>::new();
    rl.get_or(|| Counted::new(&drops));
    let (live_rank, rel, h) = parked_rank();
    on_behalf_of(live_rank, || rl.get_or(|| Counted::new(&drops)));
    let exited: Vec<RankId> = (0..3)
        .map(|_| {
            thread::scope(|s| {
                s.spawn(|| {
                    rl.get_or(|| Counted::new(&drops));
                    RankId::this_thread()
                })
                .join()
                .unwrap()
            })
        })
        .collect();
    // a delegate can still reach an exited rank's instance until the purge
    assert!(rl.get_for(exited[0]).is_some());
    assert!(on_behalf_of(exited[1], || rl.try_get()).is_some());
    assert_eq!(rl.len(), 5);
    assert_eq!(rl.purge_exited(), 3);
    assert_eq!(drops.load(Ordering::SeqCst), 3);
    assert_eq!(rl.len(), 2);
    for r in &exited {
        assert!(rl.get_for(*r).is_none(), "exited rank survived the purge");
    }
    assert!(rl.try_get().is_some() && rl.get_for(live_rank).is_some());
    assert_eq!(rl.purge_exited(), 0);
    drop(rel);
    h.join().unwrap();
}

fn purge_keeps_live_ranks_and_drops_dropped_ones<B: Backend>() {
    let drops = AtomicUsize::new(0);
    let mut rl = RankLocal::<Counted, B>::new();
    let live = Rank::new();
    let dropped_here = Rank::new();
    let dropped_elsewhere = Rank::new();
    for r in [&live, &dropped_here, &dropped_elsewhere] {
        on_behalf_of(r.id(), || rl.get_or(|| Counted::new(&drops)));
    }
    let (dead_a, dead_b) = (dropped_here.id(), dropped_elsewhere.id());
    assert_eq!(rl.purge_exited(), 0, "purge dropped a live Rank's instance");
    assert_eq!(rl.len(), 3);
    drop(dropped_here);
    thread::spawn(move || drop(dropped_elsewhere)) // Rank is Send: dropped on another thread
        .join()
        .unwrap();
    assert_eq!(rl.purge_exited(), 2);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    assert!(rl.get_for(dead_a).is_none() && rl.get_for(dead_b).is_none());
    assert!(rl.get_for(live.id()).is_some());
    assert_eq!(rl.purge_exited(), 0);
    // an Arc<Rank> exits with its last owner
    let shared = Arc::new(Rank::new());
    on_behalf_of(shared.id(), || rl.get_or(|| Counted::new(&drops)));
    let other = shared.clone();
    drop(shared);
    assert_eq!(
        rl.purge_exited(),
        0,
        "rank exited while an Arc still held it"
    );
    drop(other);
    assert_eq!(rl.purge_exited(), 1);
    drop(live);
    assert_eq!(rl.purge_exited(), 1);
    assert!(rl.is_empty());
    assert_eq!(drops.load(Ordering::SeqCst), 4);
}

/// How the two kinds of rank exit.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Thread,
    Logical,
}

/// A rank that has exited, with an instance of `rl` made for it before it exited.
fn exited_rank<'a, B: Backend>(
    kind: Kind,
    rl: &RankLocal<Counted<'a>, B>,
    drops: &'a AtomicUsize,
) -> RankId {
    match kind {
        Kind::Thread => thread::scope(|s| {
            s.spawn(|| {
                rl.get_or(|| Counted::new(drops));
                RankId::this_thread()
            })
            .join()
            .unwrap()
        }),
        Kind::Logical => {
            let r = Rank::new();
            on_behalf_of(r.id(), || rl.get_or(|| Counted::new(drops)));
            r.id()
        }
    }
}

/// Acting for an exited rank is defined: until `purge_exited` its instance is reachable (`get_for`,
/// and `get` inside `on_behalf_of` returns it without running `init`); `get` for an exited rank
/// with no instance creates one, owned by that rank, and the next `purge_exited` drops it; after a
/// purge `get_for` is `None` and acting for the rank again starts from a fresh `init`.
fn acting_for_an_exited_rank<B: Backend>() {
    for kind in [Kind::Thread, Kind::Logical] {
        let drops = AtomicUsize::new(0);
        let inits = AtomicUsize::new(0);
        let mut rl = RankLocal::<Counted, B>::new();
        let dead = exited_rank(kind, &rl, &drops);
        let before = addr(rl.get_for(dead).expect("instance gone before any purge"));
        let got = on_behalf_of(dead, || {
            addr(rl.get_or(|| {
                inits.fetch_add(1, Ordering::SeqCst);
                Counted::new(&drops)
            }))
        });
        assert_eq!(
            got, before,
            "{kind:?}: acting for an exited rank re-ran init"
        );
        assert_eq!(inits.load(Ordering::SeqCst), 0);
        // a second RankLocal the rank never touched: acting for it creates an instance
        let mut fresh = RankLocal::<Counted, B>::new();
        on_behalf_of(dead, || fresh.get_or(|| Counted::new(&drops)));
        assert!(fresh.get_for(dead).is_some());
        assert_eq!(
            fresh.purge_exited(),
            1,
            "{kind:?}: instance of an exited rank kept"
        );
        assert_eq!(rl.purge_exited(), 1);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        assert!(
            rl.get_for(dead).is_none(),
            "{kind:?}: exited rank survived purge"
        );
        assert!(on_behalf_of(dead, || rl.try_get()).is_none());
        // after the purge, acting for it again runs init again; the next purge drops it again
        on_behalf_of(dead, || {
            rl.get_or(|| {
                inits.fetch_add(1, Ordering::SeqCst);
                Counted::new(&drops)
            })
        });
        assert_eq!(inits.load(Ordering::SeqCst), 1);
        assert_eq!(rl.purge_exited(), 1);
        assert_eq!(drops.load(Ordering::SeqCst), 3, "{kind:?}");
    }
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
