//! `kept_exited`: the values kept for exited ranks because they were handed out as `&T` (the
//! `get` trap: such a value is kept until `&mut` access or drop) are counted; values only reached
//! through scoped access, and values of live ranks, are not. Stamped over every backend; the
//! `rank_local!` key's method has no backend.

mod common;

use ranklocal::{on_behalf_of, rank_local, Backend, Rank, RankLocal};

/// Ranks per test: fewer under Miri, where each first touch is slow and the paths are the same.
const N: usize = if cfg!(miri) { 16 } else { 100 };

common::backend_tests! {
    values_handed_out_to_exited_ranks_are_counted_until_purged,
    scoped_values_of_exited_ranks_are_not_counted,
    values_of_live_ranks_are_counted_once_they_exit,
    a_value_reached_both_ways_counts_as_handed_out,
    an_exited_threads_value_is_counted,
    values_an_iter_held_are_counted,
    #[cfg_attr(miri, ignore)] // 1,100 ranks: slow under Miri, and the paths are the ones above
    a_map_past_the_warning_threshold_counts_exactly,
}

fn values_handed_out_to_exited_ranks_are_counted_until_purged<B: Backend>() {
    let mut rl: RankLocal<u64, B> = RankLocal::new();
    for _ in 0..N {
        let rank = Rank::new();
        on_behalf_of(rank.id(), || {
            rl.get();
        });
    } // each Rank is dropped: its rank exits
    assert_eq!(rl.kept_exited(), N);
    assert_eq!(
        rl.reclaim_exited(),
        0,
        "a value handed out as &T is not reclaimable"
    );
    assert_eq!(rl.kept_exited(), N);
    assert_eq!(rl.purge_exited(), N);
    assert_eq!(rl.kept_exited(), 0);
    assert!(rl.is_empty());
}

fn scoped_values_of_exited_ranks_are_not_counted<B: Backend>() {
    let rl: RankLocal<u64, B> = RankLocal::new();
    for _ in 0..N {
        let rank = Rank::new();
        on_behalf_of(rank.id(), || rl.with(|v| assert_eq!(*v, 0)));
    }
    assert_eq!(rl.kept_exited(), 0);
    rl.reclaim_exited(); // what the first touches' sweeps left
    assert_eq!(rl.kept_exited(), 0);
    rl.reclaim_exited_blocking(); // `len` counts what waits for its grace period
    assert_eq!(rl.len(), 0);
}

fn values_of_live_ranks_are_counted_once_they_exit<B: Backend>() {
    let rl: RankLocal<u64, B> = RankLocal::new();
    let ranks: Vec<Rank> = (0..10).map(|_| Rank::new()).collect();
    for rank in &ranks {
        on_behalf_of(rank.id(), || {
            rl.get();
        });
    }
    rl.get(); // this thread's own rank, live throughout
    assert_eq!(rl.kept_exited(), 0);
    drop(ranks);
    assert_eq!(rl.kept_exited(), 10);
    assert_eq!(rl.len(), 11);
}

fn a_value_reached_both_ways_counts_as_handed_out<B: Backend>() {
    let rl: RankLocal<u64, B> = RankLocal::new();
    let rank = Rank::new();
    on_behalf_of(rank.id(), || {
        rl.with(|_| ());
        rl.get();
    });
    drop(rank);
    assert_eq!(rl.kept_exited(), 1);
}

fn an_exited_threads_value_is_counted<B: Backend>() {
    let rl: RankLocal<u64, B> = RankLocal::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            rl.get();
        })
        .join() // the thread has ended, its rank exited
        .unwrap();
    });
    assert_eq!(rl.kept_exited(), 1);
}

/// Past 1,024 instances a debug build checks the count (and warns once on stderr); the count and
/// the map are unaffected.
fn a_map_past_the_warning_threshold_counts_exactly<B: Backend>() {
    let mut rl: RankLocal<u64, B> = RankLocal::new();
    for _ in 0..1_100 {
        let rank = Rank::new();
        on_behalf_of(rank.id(), || {
            rl.get();
        });
    }
    assert_eq!(rl.len(), 1_100);
    assert_eq!(rl.kept_exited(), 1_100);
    assert_eq!(rl.purge_exited(), 1_100);
}

rank_local! {
    static HANDED_OUT: u64 = 0;
}

#[test]
fn a_keys_values_handed_out_to_exited_ranks_are_counted() {
    let rank = Rank::new();
    on_behalf_of(rank.id(), || {
        HANDED_OUT.get();
    });
    HANDED_OUT.with(|_| ()); // this thread's own, live rank
    assert_eq!(HANDED_OUT.kept_exited(), 0);
    drop(rank);
    assert_eq!(HANDED_OUT.kept_exited(), 1);
}

/// `iter()` hands out every value of its snapshot: those count as kept once their ranks exit,
/// even if they were only reached through scoped access before; a scoped value published after
/// the `iter()` does not.
fn values_an_iter_held_are_counted<B: Backend>() {
    let rl: RankLocal<u64, B> = RankLocal::new();
    let ranks: Vec<Rank> = (0..10).map(|_| Rank::new()).collect();
    for rank in &ranks {
        on_behalf_of(rank.id(), || rl.with(|_| ()));
    }
    assert_eq!(rl.iter().count(), 10);
    let later = Rank::new();
    on_behalf_of(later.id(), || rl.with(|_| ()));
    drop(ranks);
    drop(later);
    assert_eq!(rl.kept_exited(), 10);
    rl.reclaim_exited_blocking();
    assert_eq!(
        rl.len(),
        10,
        "only the value published after the iter() was freed"
    );
}
