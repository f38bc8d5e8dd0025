//! Properties no result shows, asserted with the test-only counters of `crate::counters`: the
//! owner's scoped hit takes no pin and makes no map lookup (and its miss takes no writer lock
//! when the instance exists), `Baseline` never caches a delegated lookup (it measures the C++
//! design) and `Epoch` caches a scoped one, `with_for` of the caller's own rank takes the owner's
//! pin-free path, a first touch sweeps only when enough ranks exited and wakes waiters only when
//! a thread waits, a `rank_local!` key's owner `get` is served by its slot, a new rank's first
//! touch makes no lookup before the writer lock (so a thread that only first-touches new ranks
//! registers no epoch participant), and a rank the map holds is never served by a first touch.

use crate::backend::{Backend, Baseline, Epoch};
use crate::counters::{
    self, BATCH_SCANS, CLAIM_NOTIFIES, EXIT_WORK_PRUNES, HELPS, INSERTS, KEY_SLOW, LIVE_LOCKS,
    MAP_LOOKUPS, OWNER_LOOKUPS, OWN_FLUSHES, PINS, SCOPED_MAP_LOOKUPS, SWEEPS, UNPINNED_LOOKUPS,
    WALKED_UNDER_LOCK, WATCHER_PRUNES,
};
use crate::identity::{Rank, RankId};
use crate::{on_behalf_of, RankLocal};

/// Runs `f` on a fresh thread (its own cache, its own counters) and returns what it returns.
fn on_fresh_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| s.spawn(f).join().expect("the test thread panicked"))
}

/// How many `counter` events `f` made on this thread.
fn events(counter: &'static counters::Counter, f: impl FnOnce()) -> u64 {
    let before = counters::get(counter);
    f();
    counters::get(counter) - before
}

fn owner_with_is_a_pin_free_hit<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    on_fresh_thread(|| {
        rl.with(|v| assert_eq!(*v, 0)); // first touch: fills the owner entry
        let pins = events(&PINS, || {
            let lookups = events(&MAP_LOOKUPS, || {
                for _ in 0..10 {
                    rl.with(|v| assert_eq!(*v, 0));
                }
            });
            assert_eq!(lookups, 0, "the owner's with looked the map up");
        });
        assert_eq!(
            pins, 0,
            "the owner's with pinned (it needs no pin while the rank is live)"
        );
    });
}

#[test]
fn owner_with_is_a_pin_free_hit_epoch() {
    owner_with_is_a_pin_free_hit::<Epoch>();
}

#[test]
fn owner_with_is_a_pin_free_hit_baseline() {
    owner_with_is_a_pin_free_hit::<Baseline>();
}

#[cfg(feature = "arc-swap")]
#[test]
fn owner_with_is_a_pin_free_hit_arc_swap() {
    owner_with_is_a_pin_free_hit::<crate::ArcSwap>();
}

fn with_for_of_own_rank_takes_the_owner_path<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    on_fresh_thread(|| {
        let me = RankId::current();
        rl.get_or(|| 7); // a plain entry: the scoped owner entry is still empty
                         // the owner branch of the slow path: a map lookup (a pin on `Epoch`), then an owner entry
        assert_eq!(rl.with_for(me, |v| *v), Some(7));
        let pins = events(&PINS, || {
            let lookups = events(&MAP_LOOKUPS, || {
                assert_eq!(rl.with_for(me, |v| *v), Some(7)); // an owner-entry hit
            });
            assert_eq!(lookups, 0);
        });
        assert_eq!(
            pins, 0,
            "with_for of the live owner's own rank did not fill the owner entry"
        );
    });
}

#[test]
fn with_for_of_own_rank_takes_the_owner_path_epoch() {
    with_for_of_own_rank_takes_the_owner_path::<Epoch>();
}

#[test]
fn with_for_of_own_rank_takes_the_owner_path_baseline() {
    with_for_of_own_rank_takes_the_owner_path::<Baseline>();
}

/// The owner's `with` whose owner entry missed while its instance is in the map — here after a
/// `get`, which fills a plain entry — finds the instance with a map lookup, not through a first touch (`first_touch`):
/// readers never take the writer lock (design.md, "first touch").
///
/// Found by mutation testing (issue 21 of the project's tracker): with `with_slow`'s `fresh`
/// inverted (`== 0` → `!= 0`), every such `with` went through a first touch, under the writer lock,
/// found the same instance there, and no test failed.
fn owner_with_after_get_takes_no_writer_lock<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    on_fresh_thread(|| {
        rl.get_or(|| 7); // first touch; a plain entry: the scoped owner entry is still empty
        let inserts = events(&INSERTS, || rl.with(|v| assert_eq!(*v, 7)));
        assert_eq!(
            inserts, 0,
            "the owner's with went through insert (the writer lock) for an instance in the map"
        );
        // and `get_own`, whose own entry is empty too: `get_own_slow_try`'s `fresh` inverted the
        // same way survived mutation testing as well
        let inserts = events(&INSERTS, || {
            assert_eq!(*rl.get_own_or(|| unreachable!("exists")), 7);
        });
        assert_eq!(
            inserts, 0,
            "the owner's get_own went through insert (the writer lock) for an instance in the map"
        );
    });
    on_fresh_thread(|| {
        rl.get_or(|| 8);
        // `with_own` likewise (`with_own_slow`'s `fresh` inverted survived too)
        let inserts = events(&INSERTS, || {
            rl.with_own_or(|| unreachable!(), |v| assert_eq!(*v, 8))
        });
        assert_eq!(
            inserts, 0,
            "the owner's with_own went through insert (the writer lock) for an instance in the map"
        );
    });
}

#[test]
fn owner_with_after_get_takes_no_writer_lock_epoch() {
    owner_with_after_get_takes_no_writer_lock::<Epoch>();
}

#[test]
fn owner_with_after_get_takes_no_writer_lock_baseline() {
    owner_with_after_get_takes_no_writer_lock::<Baseline>();
}

/// The owner's `with`, `with_own` and `get_own`, after their first call, are served by the thread
/// cache's owner entries: no map lookup (pinned or under the writer lock). Found by mutation
/// testing: the owner entries' keys built with `&` instead of `|`, and the `get_own` entry's
/// lookup answering `None`, and the own entry filled only for the instances it must not be filled
/// for (keys or lookups that never hit: every call took the slow path, with the same values)
/// survived.
fn owner_scoped_reads_hit_the_thread_cache<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    let owned = RankLocal::<u64, B>::new(); // reached by the owner-only family alone
    on_fresh_thread(|| {
        rl.with_or(|| 5, |_| ());
        owned.with_own_or(|| 6, |_| ());
        let reads = || {
            for _ in 0..5 {
                rl.with(|v| assert_eq!(*v, 5));
                rl.with_own(|v| assert_eq!(*v, 5));
                assert_eq!(*rl.get_own(), 5);
                assert_eq!(*owned.get_own(), 6);
                owned.with_own(|v| assert_eq!(*v, 6));
            }
        };
        reads(); // each call's first: fills the entries
        let (mut unpinned, mut owner) = (0, 0);
        let pinned = events(&MAP_LOOKUPS, || {
            unpinned = events(&UNPINNED_LOOKUPS, || owner = events(&OWNER_LOOKUPS, reads))
        });
        assert_eq!(
            (pinned, unpinned, owner),
            (0, 0, 0),
            "the owner's scoped reads missed the thread cache"
        );
    });
}

#[test]
fn owner_scoped_reads_hit_the_thread_cache_epoch() {
    owner_scoped_reads_hit_the_thread_cache::<Epoch>();
}

#[test]
fn owner_scoped_reads_hit_the_thread_cache_baseline() {
    owner_scoped_reads_hit_the_thread_cache::<Baseline>();
}

/// `Baseline` is the C++ design: the read lock for every delegated lookup, never the cache.
#[test]
fn baseline_never_caches_a_delegated_lookup_and_epoch_does() {
    fn lookups<B: Backend>() -> u64 {
        let rl = RankLocal::<u64, B>::new();
        let job = Rank::new();
        on_behalf_of(job.id(), || rl.get_or(|| 3));
        on_fresh_thread(|| {
            events(&MAP_LOOKUPS, || {
                for _ in 0..5 {
                    assert_eq!(rl.get_for(job.id()), Some(&3));
                }
            })
        })
    }
    assert_eq!(
        lookups::<Baseline>(),
        5,
        "Baseline served a delegated lookup from the cache"
    );
    assert_eq!(
        lookups::<Epoch>(),
        1,
        "Epoch did not cache the delegated lookup"
    );
}

/// A scoped lookup on behalf of another rank fills the cache's pinned entry: the next one, on
/// the same thread, is served from it with no map lookup (`Baseline` never caches it).
#[test]
fn a_delegated_scoped_lookup_is_cached_on_epoch_and_not_on_baseline() {
    fn lookups<B: Backend>() -> (u64, u64) {
        let rl = RankLocal::<u64, B>::new();
        let job = Rank::new();
        on_behalf_of(job.id(), || rl.get_or(|| 3));
        on_fresh_thread(|| {
            let first = events(&SCOPED_MAP_LOOKUPS, || {
                assert_eq!(rl.with_for(job.id(), |v| *v), Some(3));
            });
            let again = events(&SCOPED_MAP_LOOKUPS, || {
                assert_eq!(rl.with_for(job.id(), |v| *v), Some(3));
                on_behalf_of(job.id(), || rl.with(|v| assert_eq!(*v, 3)));
            });
            (first, again)
        })
    }
    assert_eq!(
        lookups::<Epoch>(),
        (1, 0),
        "Epoch's second scoped lookup missed the cache"
    );
    assert_eq!(
        lookups::<Baseline>(),
        (1, 2),
        "Baseline served a scoped delegated lookup from the cache"
    );
}

/// A first touch of a rank above every rank the map holds — a new rank's: ids are drawn in
/// increasing order — makes no lookup before its claim on a backend whose lookups pin (the
/// writer lock's re-check serves one inserted meanwhile); an older rank's absent instance is
/// still looked up first, and `Baseline` keeps the C++ design's read-locked lookup. Returns the
/// map lookups of `get_or` for a new and an older rank, and the scoped ones of a new rank's
/// `with`.
fn a_new_ranks_first_touch_skips_the_lookup<B: Backend>() -> (u64, u64, u64) {
    let rl = RankLocal::<u64, B>::new();
    let older = Rank::new();
    let held = Rank::new();
    on_behalf_of(held.id(), || rl.get_or(|| 1));
    let (new, newer) = (Rank::new(), Rank::new());
    on_fresh_thread(|| {
        let touch = |r: &Rank, v: u64| on_behalf_of(r.id(), || assert_eq!(*rl.get_or(|| v), v));
        let fresh = events(&MAP_LOOKUPS, || touch(&new, 2));
        let old = events(&MAP_LOOKUPS, || touch(&older, 3));
        let scoped = events(&SCOPED_MAP_LOOKUPS, || {
            on_behalf_of(newer.id(), || rl.with_or(|| 4, |v| assert_eq!(*v, 4)))
        });
        (fresh, old, scoped)
    })
}

#[test]
fn a_new_ranks_first_touch_skips_the_lookup_on_epoch_and_not_on_baseline() {
    assert_eq!(
        a_new_ranks_first_touch_skips_the_lookup::<Epoch>(),
        (0, 1, 0),
        "Epoch: (new rank's get_or, older rank's get_or, new rank's with) lookups"
    );
    assert_eq!(
        a_new_ranks_first_touch_skips_the_lookup::<Baseline>(),
        (1, 1, 1),
        "Baseline: (new rank's get_or, older rank's get_or, new rank's with) lookups"
    );
}

/// A cache-missing `get_or`/`with_or` of a rank the map holds, by a delegate on a fresh thread,
/// never goes through a first touch (the writer lock), however the rank got there: the largest
/// rank id the map inserted is kept when an older rank is inserted after a newer one, and is
/// raised by a recycling map's adoption (which inserts an ended rank's value under a new rank).
/// Checked by planting bugs: `above_every_rank` always `true`, `inserting` storing every rank
/// (lowering the largest) and `adopt_recycled` not calling `inserting` each make a first touch
/// here, and nothing else fails for them (the first touch's re-check serves the instance).
fn an_existing_ranks_touch_takes_no_first_touch<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    let (older, newer) = (Rank::new(), Rank::new());
    on_behalf_of(newer.id(), || rl.get_or(|| 2));
    on_behalf_of(older.id(), || rl.with_or(|| 1, |_| ())); // inserted last, below the largest
    let recycling = RankLocal::<u64, B>::recycling();
    // an owner-only value its thread leaves at its end, adopted by a newer rank's first touch
    on_fresh_thread(|| recycling.with_own_or(|| 7, |_| ()));
    let adopter = Rank::new();
    on_behalf_of(adopter.id(), || {
        assert_eq!(
            *recycling.get_or(|| unreachable!("adopts the ended value")),
            7
        );
    });
    let touched = [
        (&rl, &older, 1),
        (&rl, &newer, 2),
        (&recycling, &adopter, 7),
    ];
    // each call on a thread whose cache has never seen the rank: one thread per entry point
    let get = on_fresh_thread(|| {
        touched.map(|(map, rank, v)| {
            events(&INSERTS, || {
                on_behalf_of(rank.id(), || assert_eq!(*map.get_or(|| unreachable!()), v));
            })
        })
    });
    let with = on_fresh_thread(|| {
        touched.map(|(map, rank, v)| {
            events(&INSERTS, || {
                on_behalf_of(rank.id(), || {
                    map.with_or(|| unreachable!(), |x| assert_eq!(*x, v));
                });
            })
        })
    });
    assert_eq!(
        (get, with),
        ([0; 3], [0; 3]),
        "{}: (get_or, with_or) of an older rank, a newer one, an adopter went through a first \
         touch",
        B::NAME
    );
}

#[test]
fn an_existing_ranks_touch_takes_no_first_touch_epoch() {
    an_existing_ranks_touch_takes_no_first_touch::<Epoch>();
}

#[test]
fn an_existing_ranks_touch_takes_no_first_touch_baseline() {
    an_existing_ranks_touch_takes_no_first_touch::<Baseline>();
}

#[cfg(feature = "arc-swap")]
#[test]
fn an_existing_ranks_touch_takes_no_first_touch_arc_swap() {
    an_existing_ranks_touch_takes_no_first_touch::<crate::ArcSwap>();
}

/// A thread that only first-touches new ranks with `get_or` (more than the lookups a thread
/// makes without a participant before it pins) makes no map lookup and never registers with the
/// crate's epoch collector; what it does next on the same thread — a `Reader`, `with_for`,
/// `iter` — reads every value (registering then, as any pinned reader). With the hint off
/// (`above_every_rank` always `false`) the lookups before the writer lock register it.
fn first_touches_of_new_ranks_register_no_participant<B: Backend>() {
    // more than `collector::UNPINNED_LOOKUPS` natively; under Miri the lookup count alone
    const N: usize = if cfg!(miri) { 4 } else { 80 };
    let rl = RankLocal::<u64, B>::new();
    let ranks: Vec<Rank> = (0..N).map(|_| Rank::new()).collect();
    on_fresh_thread(|| {
        let lookups = events(&MAP_LOOKUPS, || {
            for r in &ranks {
                let id = r.id().as_u64();
                on_behalf_of(r.id(), || assert_eq!(*rl.get_or(|| id), id));
            }
        });
        assert_eq!(lookups, 0, "a new rank's first touch looked the map up");
        assert!(
            !crate::collector::registered(),
            "first touches of new ranks registered an epoch participant"
        );
        let reader = rl.pin();
        for r in &ranks {
            assert_eq!(reader.get_for(r.id()), Some(&r.id().as_u64()));
            assert_eq!(rl.with_for(r.id(), |v| *v), Some(r.id().as_u64()));
        }
        drop(reader);
        assert_eq!(rl.iter().count(), N);
    });
}

#[test]
fn first_touches_of_new_ranks_register_no_participant_epoch() {
    first_touches_of_new_ranks_register_no_participant::<Epoch>();
}

#[cfg(feature = "arc-swap")]
#[test]
fn first_touches_of_new_ranks_register_no_participant_arc_swap() {
    first_touches_of_new_ranks_register_no_participant::<crate::ArcSwap>();
}

/// A first touch sweeps only once the exits delivered reach max(16, len/2) (amortized O(1) per
/// exit); `reclaim_exited` sweeps at once.
fn first_touches_sweep_when_due<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    let scoped = |r: &Rank| on_behalf_of(r.id(), || rl.with(|_| ()));
    let live: Vec<Rank> = (0..100).map(|_| Rank::new()).collect();
    live.iter().for_each(scoped);
    let first_batch: Vec<Rank> = (0..40).map(|_| Rank::new()).collect();
    first_batch.iter().for_each(scoped);
    drop(first_batch); // 40 exits < 140 / 2
    let touch = || {
        let r = Rank::new();
        on_behalf_of(r.id(), || rl.with(|_| ()));
        r
    };
    let mut keep = Vec::new();
    let sweeps = events(&SWEEPS, || keep.push(touch()));
    assert_eq!(sweeps, 0, "a first touch swept before enough ranks exited");
    assert_eq!(rl.len(), 141);
    let second_batch: Vec<Rank> = (0..62).map(|_| Rank::new()).collect();
    second_batch.iter().for_each(scoped);
    drop(second_batch); // 102 exits >= 204 / 2 (the touch's own instance counted)
    let sweeps = events(&SWEEPS, || keep.push(touch()));
    assert_eq!(
        sweeps, 1,
        "the first touch after enough exits did not sweep"
    );
    // `len` also counts what waits for its grace period: ask the map
    assert_eq!(
        rl.core.len(),
        102,
        "the sweep did not take the 102 exited ranks"
    );
    let sweeps = events(&SWEEPS, || assert_eq!(rl.reclaim_exited(), 0));
    assert_eq!(sweeps, 0, "reclaim_exited swept with an empty inbox");
    drop(keep.pop());
    let sweeps = events(&SWEEPS, || assert_eq!(rl.reclaim_exited(), 1));
    assert_eq!(sweeps, 1, "reclaim_exited did not sweep at once");
    drop(live);
}

#[test]
fn first_touches_sweep_when_due_epoch() {
    first_touches_sweep_when_due::<Epoch>();
}

#[test]
fn first_touches_sweep_when_due_baseline() {
    first_touches_sweep_when_due::<Baseline>();
}

/// A `RankLocal` with a gate (an owner's first touch made one) and no tombstone sweeps no more
/// than one without: `reclaim_exited` and `iter` with nothing exited take no sweep. Found by
/// mutation testing: the gate's "tombstones wait" answering `true` always (a sweep under the
/// writer lock at every `iter` and `reclaim_exited`) survived.
fn no_tombstone_no_sweep<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    rl.with_own_or(|| 7, |_| ());
    let sweeps = events(&SWEEPS, || {
        assert_eq!(rl.reclaim_exited(), 0);
        assert_eq!(rl.iter().count(), 1);
    });
    assert_eq!(sweeps, 0, "a sweep with no exit and no tombstone");
}

#[test]
fn no_tombstone_no_sweep_epoch() {
    no_tombstone_no_sweep::<Epoch>();
}

#[test]
fn no_tombstone_no_sweep_baseline() {
    no_tombstone_no_sweep::<Baseline>();
}

crate::rank_local! {
    static SLOTTED: u64 = 5;
}

/// A `rank_local!` key's owner `get` is a read of its own thread-local slot after the first.
#[test]
fn a_keys_owner_get_is_served_by_its_slot() {
    on_fresh_thread(|| {
        let slow = events(&KEY_SLOW, || {
            for _ in 0..10 {
                assert_eq!(*SLOTTED.get(), 5);
            }
        });
        assert_eq!(
            slow, 1,
            "the key's slot did not serve the owner's later gets"
        );
        let job = Rank::new();
        let slow = events(&KEY_SLOW, || {
            on_behalf_of(job.id(), || assert_eq!(*SLOTTED.get(), 5));
            on_behalf_of(job.id(), || assert_eq!(*SLOTTED.get(), 5));
        });
        assert_eq!(slow, 2, "a delegate was served the owner's slot");
    });
}

/// A sweep looks only at the ranks whose exits were delivered to it: it never takes the
/// process-wide live-rank registry (which `Rank::new`, thread starts and exits elsewhere wait
/// for), and it takes no longer for a bigger map. `purge_exited` asks about liveness a few dozen
/// ranks per lock hold.
fn sweeps_never_hold_the_live_registry<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    let n_live: u64 = if cfg!(miri) { 130 } else { 300 }; // more than 2 x 64 either way
    let live: Vec<Rank> = (0..n_live).map(|_| Rank::new()).collect();
    for r in &live {
        on_behalf_of(r.id(), || rl.with(|_| ()));
    }
    let gone: Vec<Rank> = (0..20).map(|_| Rank::new()).collect();
    for r in &gone {
        on_behalf_of(r.id(), || rl.with(|_| ()));
    }
    drop(gone);
    let locks = events(&LIVE_LOCKS, || assert_eq!(rl.reclaim_exited(), 20));
    assert_eq!(locks, 0, "the sweep locked the live-rank registry");
    let mut rl = rl;
    let locks = events(&LIVE_LOCKS, || assert_eq!(rl.purge_exited(), 0));
    assert_eq!(
        locks,
        (n_live + 63) / 64,
        "purge_exited held the registry for more than 64 ranks"
    );
    drop(live);
}

#[test]
fn sweeps_never_hold_the_live_registry_epoch() {
    sweeps_never_hold_the_live_registry::<Epoch>();
}

#[test]
fn sweeps_never_hold_the_live_registry_baseline() {
    sweeps_never_hold_the_live_registry::<Baseline>();
}

/// A sweep that takes nothing (every exited rank's value had escaped) keeps the uid, so the
/// threads' cached entries of this map stay valid: only a sweep that unpublished something must
/// make them miss (I34). (`Baseline` caches no delegated lookup, so `Epoch` only.)
#[test]
fn a_sweep_that_takes_nothing_keeps_the_thread_caches() {
    let rl = RankLocal::<u64, Epoch>::new();
    let live = Rank::new();
    on_behalf_of(live.id(), || rl.get_or(|| 1));
    let gone = Rank::new();
    on_behalf_of(gone.id(), || rl.with(|_| ())); // asks for its exit
    on_behalf_of(gone.id(), || rl.get()); // escapes: no sweep may take it
    drop(gone);
    on_fresh_thread(|| {
        assert_eq!(rl.get_for(live.id()), Some(&1)); // fills this thread's entry
        assert_eq!(rl.reclaim_exited(), 0);
        let lookups = events(&MAP_LOOKUPS, || assert_eq!(rl.get_for(live.id()), Some(&1)));
        assert_eq!(lookups, 0, "a sweep that took nothing made the cache miss");
    });
}

/// A long-lived rank watched by many live `RankLocal`s (the main thread touching thousands of
/// maps through `with`) prunes its list of exit watchers a logarithmic number of times: each
/// prune doubles the length the next one waits for, so registering is amortized O(log n), not
/// O(n) per registration (a whole-list scan on every one).
#[test]
fn a_ranks_exit_watchers_are_pruned_at_doubling_lengths() {
    on_fresh_thread(|| {
        let n: u32 = if cfg!(miri) { 64 } else { 4_096 };
        let maps: Vec<RankLocal<u64, Epoch>> = (0..n).map(|_| RankLocal::new()).collect();
        let prunes = events(&WATCHER_PRUNES, || {
            for rl in &maps {
                rl.with(|_| ()); // the owner's scoped first touch asks for this rank's exit
            }
        });
        // at lengths 4, 8, 16, ..., n / 2: one per doubling, not one per registration
        assert!(
            prunes <= u64::from(u32::BITS - 1 - n.leading_zeros()),
            "{prunes} prunes for {n} watchers"
        );
    });
}

/// The same for a thread's exit work list: a thread that reaches thousands of live maps through
/// `with_own` (each registers its exit work) prunes the list a logarithmic number of times. Found
/// by mutation testing: the next prune length `2 * len` turned into `2 + len` or `2 / len`, and
/// the check `len >= prune_at` into `<` (a prune, a scan and a sort of the whole list, at every
/// registration or every other one) survived.
#[test]
fn a_threads_exit_work_is_pruned_at_doubling_lengths() {
    on_fresh_thread(|| {
        let n: u32 = if cfg!(miri) { 64 } else { 4_096 };
        let maps: Vec<RankLocal<u64, Epoch>> = (0..n).map(|_| RankLocal::new()).collect();
        let prunes = events(&EXIT_WORK_PRUNES, || {
            for rl in &maps {
                rl.with_own(|_| ()); // the owner-only first touch registers its exit work
            }
        });
        assert!(
            prunes <= u64::from(u32::BITS - 1 - n.leading_zeros()),
            "{prunes} prunes for {n} registrations"
        );
    });
}

/// A thread whose reads pin (scoped visits, a delegate's scoped reads that miss its cache) hands
/// its own bag to the collector every 128 such pins, so what crossbeam frees through that bag
/// (its global queue's nodes) does not wait for 64 of them or the thread's exit.
#[test]
fn slow_path_pins_flush_the_threads_bag_every_128() {
    let rl = RankLocal::<u64, Epoch>::new();
    rl.with(|_| ());
    let pins = if cfg!(miri) { 256 } else { 1_280 };
    let flushes = on_fresh_thread(|| {
        events(&OWN_FLUSHES, || {
            for _ in 0..pins {
                rl.for_each(|_, _| ()); // one counted pin each
            }
        })
    });
    assert_eq!(flushes, pins / 128, "flushes for {pins} counted pins");
}

/// A delegate's scoped read that misses its thread cache counts its pin as well (on `Baseline`
/// a delegated lookup is never cached, so each `with_for` here is such a miss): 128 of them flush
/// the thread's bag once, as 128 visits do.
#[test]
fn scoped_misses_count_their_pins() {
    let rl = RankLocal::<u64, Baseline>::new();
    let other = Rank::new();
    on_behalf_of(other.id(), || rl.with(|_| ()));
    let pins = if cfg!(miri) { 256 } else { 1_280 };
    let flushes = on_fresh_thread(|| {
        events(&OWN_FLUSHES, || {
            for _ in 0..pins {
                rl.with_for(other.id(), |_| ()); // a scoped miss: one counted pin each
            }
        })
    });
    assert_eq!(flushes, pins / 128, "flushes for {pins} scoped misses");
}

/// While a retired batch waits for its grace period, every 8th first touch helps it along (a
/// flush of the retiring participant, which walks the registered threads): not every first touch
/// (that walk would be paid on every one), and not none (on `Baseline` nothing else would advance
/// the epoch while only first touches run).
fn first_touches_help_a_waiting_batch_every_8th<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    let holder = Rank::new();
    on_behalf_of(holder.id(), || rl.with(|_| ()));
    let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let hid = holder.id();
        let rl = &rl;
        s.spawn(move || {
            rl.with_for(hid, |_| {
                pinned_tx.send(()).unwrap();
                let _ = release_rx.recv();
            })
        });
        pinned_rx.recv().unwrap();
        let gone: Vec<Rank> = (0..20).map(|_| Rank::new()).collect();
        for r in &gone {
            on_behalf_of(r.id(), || rl.with(|_| ()));
        }
        drop(gone);
        assert_eq!(rl.reclaim_exited(), 20); // one batch, held back by the pin
        let live: Vec<Rank> = (0..64).map(|_| Rank::new()).collect();
        let helps = events(&HELPS, || {
            for r in &live {
                on_behalf_of(r.id(), || rl.get_or(|| 0));
            }
        });
        drop(release_tx);
        assert_eq!(helps, 8, "helps in 64 first touches while a batch waits");
    });
    // and none once nothing waits (found by mutation testing: "no batch waits" answering `false`
    // always, so every 8th first touch flushed the collector for nothing, survived)
    rl.reclaim_exited_blocking();
    let more: Vec<Rank> = (0..64).map(|_| Rank::new()).collect();
    let helps = events(&HELPS, || {
        for r in &more {
            on_behalf_of(r.id(), || rl.get_or(|| 0));
        }
    });
    assert_eq!(helps, 0, "helps in 64 first touches while nothing waits");
}

#[test]
fn first_touches_help_a_waiting_batch_every_8th_epoch() {
    first_touches_help_a_waiting_batch_every_8th::<Epoch>();
}

#[test]
fn first_touches_help_a_waiting_batch_every_8th_baseline() {
    first_touches_help_a_waiting_batch_every_8th::<Baseline>();
}

/// A first touch wakes the threads waiting for a claim (`notify_all`, a futex system call) only
/// when one waits: not when nobody does, and not after the last waiter was served.
///
/// Found by mutation testing (issue 21 of the project's tracker): always notifying
/// (`claim_waiters > 0` → `>=`) and never counting a waiter out (`-=` → `+=`) both survived; they
/// cost a system call per first touch, most of `Baseline`'s first touch before the count.
#[test]
fn first_touches_notify_only_when_a_thread_waits() {
    let rl = RankLocal::<u64, Epoch>::new();
    let touch_new = |rl: &RankLocal<u64, Epoch>| {
        let r = Rank::new();
        on_behalf_of(r.id(), || rl.get_or(|| 1));
    };
    let quiet = events(&CLAIM_NOTIFIES, || (0..10).for_each(|_| touch_new(&rl)));
    assert_eq!(quiet, 0, "first touches nobody waited for woke waiters");
    let contested = Rank::new();
    let id = contested.id();
    let woke = events(&CLAIM_NOTIFIES, || {
        std::thread::scope(|s| {
            on_behalf_of(id, || {
                rl.get_or(|| {
                    // `init` runs with no lock held: another thread asks for the same rank and
                    // waits for this claim to end
                    let waiter = s.spawn(|| on_behalf_of(id, || *rl.get_or(|| 2)));
                    while super::raw::Locked::new(&rl).claim_waiters == 0 {
                        std::thread::yield_now();
                    }
                    drop(waiter); // joined by the scope
                    1
                })
            });
        });
    });
    assert_eq!(
        woke, 1,
        "the claim a thread waited for woke it {woke} times"
    );
    let after = events(&CLAIM_NOTIFIES, || (0..10).for_each(|_| touch_new(&rl)));
    assert_eq!(
        after, 0,
        "first touches after the waiter was served still woke waiters"
    );
}

/// While retired batches wait for their grace period (a pin held elsewhere), the sweeps scan all
/// of them for ready ones only when their number has doubled since the last scan: O(log n) full
/// scans over n waiting batches, so each sweep costs amortized O(1) per batch, not O(n).
///
/// Found by mutation testing (issue 21 of the project's tracker): rescanning once the queue grew
/// by two (`2 * len` → `2 + len`) survived.
#[test]
fn waiting_batches_are_rescanned_at_doubling_lengths() {
    let rl = RankLocal::<u64, Epoch>::new();
    let other = RankLocal::<u64, Epoch>::new();
    let holder = Rank::new();
    on_behalf_of(holder.id(), || other.with(|_| ()));
    let hid = holder.id();
    let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let n: u64 = if cfg!(miri) { 64 } else { 256 };
    std::thread::scope(|s| {
        let other = &other;
        s.spawn(move || {
            other.with_for(hid, |_| {
                pinned_tx.send(()).unwrap();
                let _ = release_rx.recv();
            })
        });
        pinned_rx.recv().unwrap();
        let scans = events(&BATCH_SCANS, || {
            for _ in 0..n {
                let r = Rank::new();
                on_behalf_of(r.id(), || rl.with(|_| ()));
                drop(r);
                assert_eq!(rl.reclaim_exited(), 1); // one more batch, waiting
            }
        });
        assert!(
            scans <= 2 * u64::from(u64::BITS - 1 - n.leading_zeros()),
            "{scans} full scans while {n} batches piled up"
        );
        drop(release_tx);
    });
}

/// `iter()` walks nothing of the map under the writer lock, however many instances it holds and
/// however they were first touched (it sweeps only the exits delivered, here none): a scoped
/// first touch followed by `iter().next()` is O(1) under the lock at 10,000 entries. Before, every scoped insert made the next `iter()` mark the
/// whole map ESCAPED under the lock (10,000 entries walked per call here), stalling every first
/// touch on other threads (found in review: 0.5–0.83 s at 250,000–1,000,000 entries).
fn iter_walks_nothing_under_the_writer_lock<B: Backend>() {
    let n = if cfg!(miri) { 64 } else { 10_000 };
    let rl = RankLocal::<u64, B>::new();
    let ranks: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
    for r in &ranks {
        on_behalf_of(r.id(), || rl.with(|_| ()));
    }
    let mut more = Vec::new();
    let walked = events(&WALKED_UNDER_LOCK, || {
        for _ in 0..8 {
            let r = Rank::new();
            on_behalf_of(r.id(), || rl.with(|_| ())); // a scoped first touch
            more.push(r);
            assert!(rl.iter().next().is_some());
        }
    });
    assert_eq!(walked, 0, "iter() walked the map under the writer lock");
    assert_eq!(rl.iter().count(), n + 8);
}

#[test]
fn iter_walks_nothing_under_the_writer_lock_epoch() {
    iter_walks_nothing_under_the_writer_lock::<Epoch>();
}

#[test]
fn iter_walks_nothing_under_the_writer_lock_baseline() {
    iter_walks_nothing_under_the_writer_lock::<Baseline>();
}

#[cfg(feature = "arc-swap")]
#[test]
fn iter_walks_nothing_under_the_writer_lock_arc_swap() {
    iter_walks_nothing_under_the_writer_lock::<crate::ArcSwap>();
}

/// A thread's first contact with its own rank takes no pin and registers no participant on the
/// crate's collector, whatever the thread did before — it holds an id, acted for another rank,
/// touched another `RankLocal`: a first pin registers the thread and makes crossbeam walk every
/// registered thread, O(live threads). Before, every such lookup pinned (measured: 100–142 µs
/// for a first `get_or` with 4,096 live threads). This test failed before on `Epoch` (7 pins)
/// and `ArcSwap` (4); `Baseline` lookups never pinned.
fn first_contact_registers_no_participant<B: Backend>() {
    let (a, b) = (RankLocal::<u64, B>::new(), RankLocal::<u64, B>::new());
    // a first touch, lookups of an existing instance (plain and scoped), a scoped first touch
    let own_contact = |a: &RankLocal<u64, B>, me: RankId| {
        assert_eq!(*a.get_or(|| 3), 3);
        assert_eq!(a.with(|v| *v), 3);
        assert_eq!(a.with_for(me, |v| *v), Some(3));
        let c = RankLocal::<u64, B>::new();
        assert_eq!(c.with_or(|| 4, |v| *v), 4);
        assert_eq!(*c.get_or(|| unreachable!()), 4);
        assert_eq!(c.with_existing(|v| *v), Some(4));
    };
    let job = Rank::new();
    b.get_or(|| 5);
    on_behalf_of(job.id(), || b.get_or(|| 6));
    on_fresh_thread(|| {
        let me = RankId::current(); // holds an id before its first touch
        let mut unpinned = 0;
        let pins = events(&PINS, || {
            unpinned = events(&UNPINNED_LOOKUPS, || {
                assert_eq!(*b.get_or(|| 2), 2); // another RankLocal first
                                                // delegated lookups that escape, on a thread with no participant: no pin either
                assert_eq!(b.get_for(job.id()), Some(&6));
                assert_eq!(on_behalf_of(job.id(), || *b.get()), 6);
                own_contact(&a, me);
                assert_eq!(a.try_get(), Some(&3));
            });
        });
        assert_eq!(pins, 0, "a first contact pinned");
        // they looked the map up under the free writer lock (Baseline's lookups take its read lock)
        assert_eq!(unpinned > 0, B::LOOKUP_PINS, "unpinned lookups: {unpinned}");
        assert!(
            !crate::collector::registered(),
            "a first contact registered a participant"
        );
    });
    // a thread that holds a participant (a scoped read of another rank pins): its own first
    // contact still takes no pin
    on_fresh_thread(|| {
        assert_eq!(b.with_for(job.id(), |v| *v), Some(6));
        assert!(crate::collector::registered());
        let me = RankId::current();
        let pins = events(&PINS, || own_contact(&RankLocal::new(), me));
        assert_eq!(
            pins, 0,
            "a first contact after acting for another rank pinned"
        );
    });
}

#[test]
fn first_contact_registers_no_participant_epoch() {
    first_contact_registers_no_participant::<Epoch>();
}

#[test]
fn first_contact_registers_no_participant_baseline() {
    first_contact_registers_no_participant::<Baseline>();
}

#[cfg(feature = "arc-swap")]
#[test]
fn first_contact_registers_no_participant_arc_swap() {
    first_contact_registers_no_participant::<crate::ArcSwap>();
}
