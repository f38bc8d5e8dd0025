//! The spec's numbered semantics of lookups (README, "Semantics"): which instance a thread or a
//! delegate gets (1–3), no stale instance after a rebuild (6), rank ids (9), and `iter`'s
//! snapshot. Test names start with the semantic they check (`s1_`…). The init protocol (4, 5) is
//! in `init.rs`, drops (6) in `drops.rs`, exited ranks in `exited.rs`, async (2) in `ranks.rs`.

mod common;

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Barrier};
use std::thread;

use common::{addr, parked_rank};
use ranklocal::{on_behalf_of, Backend, Iter, IterMut, Rank, RankId, RankLocal};

common::backend_tests! {
    miri_every_backend;
    s1_threads_see_distinct_instances_and_the_same_one_each_call,
    s1_try_get_and_get_for_never_create,
    s2_delegation_sees_the_rank_even_after_caching_own,
    s2_delegation_nests_and_restores_on_unwind,
    s3_an_instance_made_by_a_delegate_belongs_to_the_rank,
    s6_a_new_rank_local_in_the_same_place_sees_no_old_instance,
    s9_rank_ids_are_unique_and_never_reused,
    iter_is_one_consistent_snapshot,
    a_held_iterator_is_its_snapshot_after_purge_clear_and_sweep,
    iter_crosses_threads_and_keeps_its_snapshot,
    first_touches_after_a_snapshot_stay_out_of_it,
    first_touches_in_new_leaves_after_a_snapshot_stay_out_of_it,
    len_counts_every_first_touch,
    len_agrees_with_lookups_during_a_first_touch,
}

/// Threads for the multi-threaded tests: oversubscribes a 2-core machine.
const THREADS: usize = if cfg!(miri) { 4 } else { 16 };

fn s1_threads_see_distinct_instances_and_the_same_one_each_call<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let barrier = Barrier::new(THREADS);
    let addrs: Vec<usize> = thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let first = addr(rl.get());
                    for _ in 0..100 {
                        assert_eq!(addr(rl.get()), first, "instance changed between calls");
                        rl.get().fetch_add(1, Ordering::Relaxed);
                    }
                    assert_eq!(addr(rl.try_get().unwrap()), first);
                    assert_eq!(addr(rl.get_for(RankId::current()).unwrap()), first);
                    first
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: HashSet<_> = addrs.iter().collect();
    assert_eq!(distinct.len(), THREADS, "two threads shared an instance");
    assert_eq!(rl.len(), THREADS);
    assert!(!rl.is_empty());
    assert!(rl.iter().all(|(_, v)| v.load(Ordering::Relaxed) == 100));
}

fn s1_try_get_and_get_for_never_create<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    assert!(rl.is_empty());
    assert!(rl.try_get().is_none());
    assert!(rl.get_for(RankId::current()).is_none());
    assert_eq!(rl.len(), 0);
    assert_eq!(*rl.get_or(|| 7), 7);
    assert_eq!(rl.try_get(), Some(&7));
    assert_eq!(*rl.get_or(|| 8), 7, "init ran again for an existing rank");
}

fn s2_delegation_sees_the_rank_even_after_caching_own<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let (rank_a, release, h) = parked_rank();
    let a = addr(on_behalf_of(rank_a, || rl.get()));
    // this thread caches its own instance first (the C++ fast path would then misroute)
    let own = addr(rl.get());
    assert_ne!(own, a);
    for _ in 0..3 {
        on_behalf_of(rank_a, || {
            assert_eq!(RankId::current(), rank_a);
            assert_ne!(RankId::this_thread(), rank_a);
            assert_eq!(
                addr(rl.get()),
                a,
                "delegated get returned the cached own instance"
            );
            assert_eq!(addr(rl.try_get().unwrap()), a);
        });
        assert_eq!(
            addr(rl.get()),
            own,
            "own instance not restored after delegation"
        );
    }
    assert_eq!(addr(rl.get_for(rank_a).unwrap()), a);
    drop(release);
    h.join().unwrap();
}

fn s2_delegation_nests_and_restores_on_unwind<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    let (ra, rel_a, ha) = parked_rank();
    let (rb, rel_b, hb) = parked_rank();
    let me = RankId::current();
    on_behalf_of(ra, || {
        rl.get_or(|| 1);
        on_behalf_of(rb, || {
            assert_eq!(RankId::current(), rb);
            assert_eq!(*rl.get_or(|| 2), 2);
        });
        assert_eq!(RankId::current(), ra);
        assert_eq!(*rl.get_or(|| 99), 1);
        let r = catch_unwind(AssertUnwindSafe(|| {
            on_behalf_of(rb, || panic!("boom"));
        }));
        assert!(r.is_err());
        assert_eq!(RankId::current(), ra, "rank not restored on unwind");
    });
    assert_eq!(RankId::current(), me);
    assert!(
        rl.try_get().is_none(),
        "this thread never touched its own rank"
    );
    drop((rel_a, rel_b));
    ha.join().unwrap();
    hb.join().unwrap();
}

fn s3_an_instance_made_by_a_delegate_belongs_to_the_rank<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    thread::scope(|s| {
        let (rank_tx, rank_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<usize>();
        let rl = &rl;
        let owner = s.spawn(move || {
            rank_tx.send(RankId::this_thread()).unwrap();
            let delegated_addr = go_rx.recv().unwrap();
            let v = rl.get_or(|| AtomicUsize::new(999));
            assert_eq!(addr(v), delegated_addr, "owner got a different instance");
            v.load(Ordering::SeqCst)
        });
        let rank = rank_rx.recv().unwrap();
        let v = on_behalf_of(rank, || rl.get_or(|| AtomicUsize::new(5)));
        v.fetch_add(1, Ordering::SeqCst);
        go_tx.send(addr(v)).unwrap();
        assert_eq!(owner.join().unwrap(), 6);
    });
    assert_eq!(rl.len(), 1);
}

fn s6_a_new_rank_local_in_the_same_place_sees_no_old_instance<B: Backend>() {
    let mut rl = RankLocal::<u32, B>::new();
    for round in 0..4u32 {
        let place = addr(&rl);
        assert!(rl.try_get().is_none(), "round {round}: stale instance seen");
        assert_eq!(*rl.get_or(|| round), round);
        assert_eq!(*rl.get(), round);
        rl = RankLocal::new(); // dropped and rebuilt at the same address
        assert_eq!(addr(&rl), place);
    }
    // the same through clear(): the thread cache must not hand back a freed instance
    assert_eq!(*rl.get_or(|| 1), 1);
    rl.clear();
    assert!(rl.try_get().is_none());
    assert_eq!(*rl.get_or(|| 2), 2);
}

fn s9_rank_ids_are_unique_and_never_reused<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    let mut seen = HashSet::new();
    seen.insert(RankId::this_thread());
    for _ in 0..(if cfg!(miri) { 8 } else { 200 }) {
        let id = thread::spawn(RankId::this_thread).join().unwrap();
        assert!(seen.insert(id), "rank id {id} reused");
        assert!(rl.get_for(id).is_none());
    }
    let me = RankId::this_thread();
    assert_eq!(me, RankId::this_thread());
    assert_eq!(me.as_u64(), RankId::this_thread().as_u64());
    assert!(format!("{me}").contains(&me.as_u64().to_string()));
}

fn iter_is_one_consistent_snapshot<B: Backend>() {
    let mut rl = RankLocal::<usize, B>::new();
    let ranks: Vec<RankId> = thread::scope(|s| {
        (0..8)
            .map(|i| {
                let rl = &rl;
                s.spawn(move || {
                    rl.get_or(|| i);
                    RankId::this_thread()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect()
    });
    let it = rl.iter();
    rl.get_or(|| 100); // inserted after the snapshot was taken
    let got: Vec<_> = it.collect();
    assert_eq!(got.len(), 8, "iterator saw an insert made after it started");
    let got_ranks: HashSet<_> = got.iter().map(|&(r, _)| r).collect();
    assert_eq!(got_ranks, ranks.iter().copied().collect());
    for (r, v) in &got {
        assert_eq!(rl.get_for(*r), Some(*v));
    }
    assert_eq!(rl.iter().count(), 9);
    for (_, v) in rl.iter_mut() {
        *v += 1;
    }
    for (_, v) in &mut rl {
        *v += 1;
    }
    assert_eq!(*rl.get(), 102);
    let mut sum: usize = (&rl).into_iter().map(|(_, v)| *v).sum();
    sum -= 102;
    assert_eq!(sum, (0..8).map(|i| i + 2).sum::<usize>());
    let dbg = format!("{rl:?}");
    assert!(dbg.contains(B::NAME) && dbg.contains("102"), "{dbg}");
    let d: RankLocal<u8, B> = Default::default();
    assert!(d.is_empty());
}

/// An iterator is its snapshot, also when the version it holds was written by a `purge_exited`,
/// a `clear` or a sweep: a later first touch in the same trie leaf copies the leaf instead of
/// changing it in place (found by mutation testing: with the rebuilt or swept version numbered
/// like its predecessor, the next write mutated the published leaf and the held iterator saw
/// the new rank).
fn a_held_iterator_is_its_snapshot_after_purge_clear_and_sweep<B: Backend>() {
    let ids = |it: ranklocal::Iter<'_, u64, B>| -> Vec<RankId> {
        let mut v: Vec<RankId> = it.map(|(r, _)| r).collect();
        v.sort();
        v
    };
    let mut rl = RankLocal::<u64, B>::new();
    let keep: Vec<Rank> = (0..4).map(|_| Rank::new()).collect();
    let gone = Rank::new();
    for r in keep.iter().chain([&gone]) {
        on_behalf_of(r.id(), || rl.get_or(|| 1));
    }
    drop(gone);
    for round in 0..3 {
        match round {
            0 => assert_eq!(rl.purge_exited(), 1),
            1 => {
                rl.clear();
                for r in &keep {
                    on_behalf_of(r.id(), || rl.get_or(|| 1));
                }
            }
            _ => {
                let swept = Rank::new();
                on_behalf_of(swept.id(), || rl.with(|_| ()));
                drop(swept);
                assert_eq!(rl.reclaim_exited(), 1);
            }
        }
        let before: Vec<RankId> = {
            let mut v: Vec<RankId> = keep.iter().map(Rank::id).collect();
            v.sort();
            v
        };
        let held = rl.iter(); // the version the purge, clear or sweep wrote
        let newcomer = Rank::new(); // an id next to the others: the same leaf
        on_behalf_of(newcomer.id(), || rl.get_or(|| 2));
        let another = Rank::new();
        on_behalf_of(another.id(), || rl.get_or(|| 3));
        assert_eq!(
            ids(held),
            before,
            "round {round}: the held iterator saw a later write"
        );
        assert_eq!(rl.iter().count(), keep.len() + 2);
        drop((newcomer, another));
        assert_eq!(rl.purge_exited(), 2);
    }
}

/// The iterators' auto traits (I7): `Iter` is `Send + Sync` for a `Sync` value, `IterMut` is
/// `Send` for a `Send` value. An `Iter` moved to another thread and consumed there while the map
/// is written keeps its snapshot (I15); `IterMut`'s exact size counts down as it is consumed.
///
/// Found in review 5 (adversarial), an attack the implementation withstood.
fn iter_crosses_threads_and_keeps_its_snapshot<B: Backend>() {
    fn send_sync<X: Send + Sync>(_: &X) {}
    fn send<X: Send>(_: &X) {}
    let mut rl = RankLocal::<AtomicUsize, B>::new();
    let ranks: Vec<Rank> = (0..8).map(|_| Rank::new()).collect();
    for r in &ranks {
        on_behalf_of(r.id(), || {
            rl.get().store(r.id().as_u64() as usize, Ordering::SeqCst)
        });
    }
    {
        let it: Iter<'_, AtomicUsize, B> = rl.iter();
        send_sync(&it);
        let rl = &rl;
        thread::scope(|s| {
            let h = s.spawn(move || {
                let mut n = 0;
                for (rank, v) in it {
                    assert_eq!(v.load(Ordering::SeqCst), rank.as_u64() as usize);
                    n += 1;
                }
                n
            });
            // writes meanwhile: new versions, replaced nodes
            let more: Vec<Rank> = (0..64).map(|_| Rank::new()).collect();
            for r in &more {
                on_behalf_of(r.id(), || {
                    rl.get().store(r.id().as_u64() as usize, Ordering::SeqCst)
                });
            }
            assert_eq!(h.join().unwrap(), 8, "the iterator saw another snapshot");
        });
    }
    let mut it: IterMut<'_, AtomicUsize, B> = rl.iter_mut();
    send(&it);
    let total = it.len();
    for left in (0..total).rev() {
        assert!(it.next().is_some());
        assert_eq!(it.len(), left);
    }
    assert!(it.next().is_none());
    assert_eq!(total, 72);
}

/// A first touch whose trie leaf exists fills its slot of the published leaf in place on `Epoch`
/// (I38). No snapshot may see it: not a held `iter()` (whose instances were marked when it was
/// taken, I31), not a `for_each` in progress. Many ranks with consecutive ids, so they share
/// leaves, touched by this thread and others after each snapshot was taken.
fn first_touches_after_a_snapshot_stay_out_of_it<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    let ranks: Vec<Rank> = (0..40).map(|_| Rank::new()).collect();
    let touch = |r: &Rank| on_behalf_of(r.id(), || *rl.get_or(|| r.id().as_u64()));
    ranks[..4].iter().for_each(|r| {
        touch(r);
    });
    let before: HashSet<RankId> = ranks[..4].iter().map(Rank::id).collect();
    let held = rl.iter();
    ranks[4..12].iter().for_each(|r| {
        touch(r);
    });
    thread::scope(|s| {
        s.spawn(|| {
            ranks[12..20].iter().for_each(|r| {
                touch(r);
            })
        });
    });
    let seen: HashSet<RankId> = held.map(|(r, _)| r).collect();
    assert_eq!(
        seen, before,
        "a held iterator saw first touches made after it was taken"
    );
    let before: HashSet<RankId> = ranks[..20].iter().map(Rank::id).collect();
    let mut visited = HashSet::new();
    let mut next = ranks[20..].iter();
    rl.for_each(|r, v| {
        assert_eq!(*v, r.as_u64());
        visited.insert(r);
        if let Some(n) = next.next() {
            touch(n); // the same leaves, while the visit is on
        }
    });
    assert_eq!(
        visited, before,
        "for_each visited first touches made during the visit"
    );
    assert_eq!(rl.iter().count(), 40);
}

/// Live ranks whose ids fall in `n` distinct blocks of 64 ids (distinct trie leaves on `Epoch`),
/// one per block, in id order, and every rank made to find them (kept alive).
fn ranks_in_distinct_leaves(n: usize) -> (Vec<Rank>, Vec<RankId>) {
    let made: Vec<Rank> = (0..64 * (n + 1)).map(|_| Rank::new()).collect();
    let mut picked: Vec<RankId> = Vec::new();
    for r in &made {
        let block = r.id().as_u64() / 64;
        if picked.last().map_or(true, |p| p.as_u64() / 64 != block) {
            picked.push(r.id());
        }
    }
    assert!(picked.len() >= n, "ids in {} blocks only", picked.len());
    picked.truncate(n);
    (made, picked)
}

/// A first touch whose trie leaf does not exist hangs a new leaf under the published parent on
/// `Epoch` (I38), unless a snapshot holds that parent: no held `iter()` and no `for_each` in
/// progress may see it. Each rank here is in a leaf of its own.
fn first_touches_in_new_leaves_after_a_snapshot_stay_out_of_it<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    // under Miri fewer (each leaf takes 64 `Rank::new`s to find)
    let (n, b, c) = if cfg!(miri) { (8, 4, 5) } else { (24, 8, 12) };
    let (_made, ranks) = ranks_in_distinct_leaves(n);
    let touch = |r: RankId| on_behalf_of(r, || *rl.get_or(|| r.as_u64()));
    ranks[..2].iter().for_each(|&r| {
        touch(r);
    });
    let held = rl.iter();
    ranks[2..b].iter().for_each(|&r| {
        touch(r);
    });
    thread::scope(|s| {
        s.spawn(|| {
            ranks[b..c].iter().for_each(|&r| {
                touch(r);
            })
        });
    });
    let seen: HashSet<RankId> = held.map(|(r, _)| r).collect();
    assert_eq!(
        seen,
        ranks[..2].iter().copied().collect(),
        "a held iterator saw first touches made after it was taken"
    );
    let mut visited = HashSet::new();
    let mut next = ranks[c..].iter();
    rl.for_each(|r, v| {
        assert_eq!(*v, r.as_u64());
        visited.insert(r);
        if let Some(&n) = next.next() {
            touch(n); // new leaves, while the visit is on
        }
    });
    assert_eq!(
        visited,
        ranks[..c].iter().copied().collect(),
        "for_each visited first touches made during the visit"
    );
    assert_eq!(rl.iter().count(), n);
    assert_eq!(rl.len(), n);
}

/// `len` counts every instance, whether its first touch wrote a new version or filled a slot of
/// the published one in place (I38), across removals and the writes after them.
fn len_counts_every_first_touch<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    let mut ranks: Vec<Rank> = (0..100).map(|_| Rank::new()).collect();
    for (i, r) in ranks.iter().enumerate() {
        on_behalf_of(r.id(), || rl.with(|_| ()));
        assert_eq!(rl.len(), i + 1);
    }
    ranks.truncate(50); // 50 exit
    assert_eq!(rl.reclaim_exited(), 50);
    assert_eq!(rl.len(), 50);
    let more: Vec<Rank> = (0..30).map(|_| Rank::new()).collect();
    for (i, r) in more.iter().enumerate() {
        on_behalf_of(r.id(), || rl.get_or(|| 1));
        assert_eq!(rl.len(), 51 + i);
        if i % 7 == 0 {
            assert_eq!(rl.iter().count(), 51 + i); // a snapshot: the next touch writes a version
        }
    }
    assert_eq!(rl.len(), rl.iter().count());
    assert_eq!(rl.len(), 80);
}

/// `len` and lookups agree while another thread's first touch runs: a `len` that counts the new
/// rank is followed by lookups that find it, and a lookup that found it by a `len` that counts
/// it. Half the trials hold an `iter()`, so the touch publishes a new version instead of filling
/// a slot in place (I38). Found in review: with `Epoch`'s count read without the writer mutex,
/// 9 (filling) and 50 (publishing) of 20,000 trials saw `len() == 2` and then missed the rank.
fn len_agrees_with_lookups_during_a_first_touch<B: Backend>() {
    let trials = if cfg!(miri) { 8 } else { 4_000 };
    for i in 0..trials {
        let rl = RankLocal::<u64, B>::new();
        let (a, b) = (Rank::new(), Rank::new());
        on_behalf_of(a.id(), || rl.get_or(|| 1));
        let held = (i % 2 == 0).then(|| rl.iter());
        let bid = b.id();
        thread::scope(|s| {
            s.spawn(|| on_behalf_of(bid, || *rl.get_or(|| 2)));
            loop {
                let n = rl.len();
                let found = rl.get_for(bid).is_some();
                if n == 2 {
                    assert!(found, "trial {i}: len counted a rank a later lookup missed");
                    break;
                }
                if found {
                    assert_eq!(rl.len(), 2, "trial {i}: a lookup found a rank len missed");
                    break;
                }
                thread::yield_now();
            }
        });
        drop(held);
    }
}
