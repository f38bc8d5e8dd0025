//! The thread cache (`crate::cache`) as `RankLocal` uses it: hits counted by `MAP_LOOKUPS` (none
//! once filled). Here, not in `cache.rs`, so that the cache imports nothing from `rank_local`.

use core::cell::Cell;

use super::fresh_uid;
use crate::cache::{set_index, Uid, SETS, WAYS};
use crate::counters::MAP_LOOKUPS;
use crate::identity::{self, RankId};
use crate::RankLocal;

fn map_lookups() -> u64 {
    MAP_LOOKUPS.with(Cell::get)
}

/// `k` fresh `RankLocal`s whose uids share the low six bits, so that for this thread's rank
/// they collided in the old 64-entry direct-mapped cache (`(rank ^ uid) & 63`), and share one
/// set of the new cache. The uids are drawn from the global counter like any other (a few
/// are skipped), so they are unique and never reused (I4).
fn colliding(k: usize) -> Vec<RankLocal<u64>> {
    let rank = identity::current_raw();
    let mut classes: Vec<Vec<Uid>> = vec![Vec::new(); 64];
    loop {
        let uid = fresh_uid();
        let old_index = ((rank ^ uid.get()) & 63) as usize;
        let class = &mut classes[old_index];
        class.push(uid);
        if class.len() == k {
            assert!(class
                .iter()
                .all(|&u| set_index(u, rank) == set_index(class[0], rank)));
            return class.iter().map(|&u| RankLocal::with_uid(u)).collect();
        }
    }
}

/// Fills the cache with each of `rls`, then uses them in turn `rounds` times; returns the map
/// lookups those rounds made.
fn lookups_in_turn(rls: &[RankLocal<u64>], rounds: usize) -> u64 {
    for (i, rl) in rls.iter().enumerate() {
        assert_eq!(*rl.get_or(|| i as u64), i as u64);
    }
    let before = map_lookups();
    for _ in 0..rounds {
        for (i, rl) in rls.iter().enumerate() {
            assert_eq!(*rl.get(), i as u64);
        }
    }
    map_lookups() - before
}

#[test]
fn two_rank_locals_colliding_in_the_old_index_never_evict_each_other() {
    std::thread::spawn(|| assert_eq!(lookups_in_turn(&colliding(2), 100), 0))
        .join()
        .unwrap();
}

#[test]
fn four_rank_locals_sharing_a_set_never_evict_each_other() {
    std::thread::spawn(|| assert_eq!(lookups_in_turn(&colliding(WAYS), 100), 0))
        .join()
        .unwrap();
}

/// The limit, and a check that the counter counts: one more key than a set holds, used in
/// turn, misses on every lookup (each fill drops the next one to be used).
#[test]
fn one_more_than_a_set_holds_misses_every_time() {
    std::thread::spawn(|| {
        let rounds = 10;
        let n = WAYS + 1;
        assert_eq!(lookups_in_turn(&colliding(n), rounds), (rounds * n) as u64);
    })
    .join()
    .unwrap();
}

/// A delegate cycling through 64 ranks of one `RankLocal` (one rank per set) keeps them all,
/// next to the thread's own entries.
#[test]
fn a_delegate_cycling_through_64_ranks_keeps_them_all() {
    let rl = RankLocal::<u64>::new();
    let uid = rl.uid_or_assign();
    // Ranks of exited threads, one per set (other tests spawn threads meanwhile, so the ids
    // handed out here need not be consecutive).
    let mut by_set: Vec<Option<RankId>> = vec![None; SETS];
    let mut spawned = 0;
    while by_set.iter().any(Option::is_none) {
        let r = std::thread::spawn(RankId::this_thread).join().unwrap();
        by_set[set_index(uid, r.as_u64())].get_or_insert(r);
        spawned += 1;
        assert!(spawned < 100_000, "could not find a rank for every set");
    }
    let ranks: Vec<RankId> = by_set.into_iter().flatten().collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            for &r in &ranks {
                crate::on_behalf_of(r, || rl.get_or(|| r.as_u64()));
            }
            let _own = rl.get_or(|| 0);
            let before = map_lookups();
            for _ in 0..10 {
                for &r in &ranks {
                    assert_eq!(*rl.get_for(r).unwrap(), r.as_u64());
                    crate::on_behalf_of(r, || assert_eq!(*rl.get(), r.as_u64()));
                }
            }
            assert_eq!(map_lookups() - before, 0);
        });
    });
}

/// `n` fresh ranks, each with its id as its value in `rl`.
fn ranks_with_values(rl: &RankLocal<u64>, n: usize) -> Vec<crate::Rank> {
    let ranks: Vec<crate::Rank> = (0..n).map(|_| crate::Rank::new()).collect();
    for r in &ranks {
        crate::on_behalf_of(r.id(), || rl.get_or(|| r.id().as_u64()));
    }
    ranks
}

/// A scan over more ranks than the cache holds (a monitor reading every rank's value with
/// `get_for`) leaves the thread's own entry in it, and keeps hitting the entries it finds: a
/// churning set is not filled again until its oldest entry has aged (the two scans together
/// make fewer misses than that age).
#[test]
fn a_scan_of_many_ranks_keeps_the_threads_own_entry_and_some_of_its_own() {
    const N: usize = if cfg!(miri) { 600 } else { 1_500 };
    let rl = RankLocal::<u64>::new();
    let ranks = ranks_with_values(&rl, N);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _own = rl.get_or(|| 0);
            let mut per_scan = Vec::new();
            for scan in 0..2 {
                let before = map_lookups();
                for r in &ranks {
                    assert_eq!(*rl.get_for(r.id()).unwrap(), r.id().as_u64());
                }
                per_scan.push(map_lookups() - before);
                let before = map_lookups();
                assert_eq!(*rl.get(), 0);
                let own = map_lookups() - before;
                assert_eq!(own, 0, "scan {scan} evicted the thread's own entry");
            }
            // the second scan hits what the first one left: with a fill on every miss, it would
            // hit nothing (each fill evicts what the scan needs next)
            let cached = crate::cache::SETS * WAYS;
            assert!(
                per_scan[1] as usize <= N - cached / 2,
                "{} of {N} lookups missed",
                per_scan[1]
            );
        });
    });
}

/// A worker serving many ranks in bursts — several lookups of one rank, then the next rank's —
/// gets each rank cached within its burst: a set that churns (the cache holds fewer ranks than
/// the worker serves) is still filled for a rank that misses twice in a row.
#[test]
fn bursts_over_many_ranks_are_cached_within_each_burst() {
    const N: usize = if cfg!(miri) { 400 } else { 3_000 };
    const BURST: u64 = 16;
    let rl = RankLocal::<u64>::new();
    let ranks = ranks_with_values(&rl, N);
    std::thread::scope(|s| {
        s.spawn(|| {
            let before = map_lookups();
            for r in &ranks {
                for _ in 0..BURST {
                    assert_eq!(*rl.get_for(r.id()).unwrap(), r.id().as_u64());
                }
            }
            let misses = map_lookups() - before;
            assert!(
                misses <= 2 * N as u64,
                "{misses} misses in {N} bursts of {BURST} lookups"
            );
        });
    });
}
