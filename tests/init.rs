//! The init protocol (spec semantics 4 and 5): `init` runs at most once per rank, a panicking or
//! failing `init` inserts nothing and is retried, a reentrant `init` panics clearly, and a slow
//! `init` delays no reader and no writer of another rank while a second asker of the same rank
//! waits for it (and every waiter wakes, also after panicking and failing inits). Test names start
//! with the semantic they check.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Barrier};
use std::thread;

use common::{
    addr, bytes_of, exited_thread_rank, panic_message, parked_rank, patiently, within_deadline,
    Blocked, Counted,
};
use ranklocal::{on_behalf_of, Backend, Rank, RankId, RankLocal};

common::backend_tests! {
    s4_init_runs_once_per_rank_under_a_race,
    s4_panicking_init_inserts_nothing_and_is_retried,
    s4_failing_get_or_try_inserts_nothing,
    s4_reentrant_init_panics_with_a_clear_message,
    s5_a_slow_init_delays_no_reader_and_no_other_writer,
    #[cfg_attr(any(miri, not(target_os = "linux")), ignore = "sees a waiting thread in Linux's /proc")]
    s5_a_second_asker_waits_for_the_running_init,
    s5_panicking_and_failing_inits_wake_every_waiter,
    #[cfg_attr(any(miri, not(target_os = "linux")), ignore = "sees a waiting thread in Linux's /proc")]
    a_get_that_waits_for_a_scoped_first_touch_escapes_the_instance,
    a_new_rank_first_touched_by_many_threads_at_once_inits_once,
    a_removed_rank_first_touched_again_inits_again,
    a_recycling_maps_new_ranks_adopt_each_ended_value_once,
    a_tombstoned_rank_first_touched_by_a_delegate_is_refilled_once,
    a_new_ranks_reentrant_init_panics_on_every_path,
    many_new_ranks_first_touched_by_several_threads,
}

/// Threads for the multi-threaded tests: oversubscribes a 2-core machine.
const THREADS: usize = if cfg!(miri) { 4 } else { 16 };

fn s4_init_runs_once_per_rank_under_a_race<B: Backend>() {
    let rl: &'static RankLocal<usize, B> = common::leak(RankLocal::new());
    let inits: &'static AtomicUsize = common::leak(AtomicUsize::new(0));
    let (rank, release, h) = parked_rank();
    // within a deadline: a racer nobody wakes would hang the test, not fail it
    let addrs: Vec<usize> = within_deadline(move || {
        let barrier = Barrier::new(THREADS);
        thread::scope(|s| {
            let hs: Vec<_> = (0..THREADS)
                .map(|i| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        let v = on_behalf_of(rank, || {
                            rl.get_or(|| {
                                inits.fetch_add(1, Ordering::SeqCst);
                                thread::yield_now();
                                i
                            })
                        });
                        addr(v)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    });
    assert_eq!(inits.load(Ordering::SeqCst), 1, "init ran more than once");
    assert!(
        addrs.windows(2).all(|w| w[0] == w[1]),
        "racers saw different instances"
    );
    assert_eq!(rl.len(), 1);
    drop(release);
    h.join().unwrap();
}

fn s4_panicking_init_inserts_nothing_and_is_retried<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    let r = catch_unwind(AssertUnwindSafe(|| rl.get_or(|| panic!("init failed"))));
    assert!(r.is_err());
    assert!(rl.try_get().is_none());
    assert_eq!(rl.len(), 0);
    assert_eq!(*rl.get_or(|| 3), 3, "init was not retried");
    assert_eq!(rl.len(), 1);
}

fn s4_failing_get_or_try_inserts_nothing<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    assert_eq!(rl.get_or_try(|| Err::<u32, _>("nope")), Err("nope"));
    assert!(rl.try_get().is_none());
    assert_eq!(rl.get_or_try(|| Ok::<_, ()>(4)), Ok(&4));
    assert_eq!(rl.get_or_try(|| Err::<u32, _>("unused")), Ok(&4));
}

fn s4_reentrant_init_panics_with_a_clear_message<B: Backend>() {
    let rl: &'static RankLocal<u32, B> = Box::leak(Box::new(RankLocal::new()));
    let msg = within_deadline(move || {
        let err = catch_unwind(AssertUnwindSafe(|| {
            rl.get_or(|| *rl.get_or(|| 1) + 1);
        }))
        .expect_err("reentrant init did not panic");
        let msg = err
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        // and the RankLocal is still usable afterwards
        assert!(rl.try_get().is_none());
        assert_eq!(*rl.get_or(|| 9), 9);
        msg
    });
    assert!(msg.contains("reentrant"), "unclear panic message: {msg:?}");
}

fn s5_a_slow_init_delays_no_reader_and_no_other_writer<B: Backend>() {
    let rl: &'static RankLocal<u32, B> = Box::leak(Box::new(RankLocal::new()));
    let (rank_a, rel_a, ha) = parked_rank();
    on_behalf_of(rank_a, || rl.get_or(|| 1));
    let (in_init_tx, in_init_rx) = mpsc::channel();
    let (finish_tx, finish_rx) = mpsc::channel::<()>();
    let slow = thread::spawn(move || {
        *rl.get_or(|| {
            in_init_tx.send(()).unwrap();
            finish_rx.recv().unwrap();
            2
        })
    });
    in_init_rx.recv().unwrap(); // the slow init is running now
    within_deadline(move || {
        assert_eq!(rl.get_for(rank_a), Some(&1)); // a reader of another rank
        assert_eq!(on_behalf_of(rank_a, || *rl.get()), 1);
        assert_eq!(*rl.get_or(|| 3), 3); // a writer of another rank
        rl.iter().count()
    });
    finish_tx.send(()).unwrap();
    assert_eq!(slow.join().unwrap(), 2);
    assert_eq!(rl.len(), 3);
    drop(rel_a);
    ha.join().unwrap();
}

/// A second asker of a rank whose `init` is running waits for it and gets its value.
///
/// The second asker is let go only once it is seen waiting: blocked (Linux's `/proc`) on a futex
/// inside the `RankLocal` — its writer lock or its `claim_ended` condvar, both held inline — while
/// no thread holds that lock (the first asker runs its `init` without it, and nothing else touches
/// this `RankLocal`). So it waits on the condvar, for the claim: the state the test needs, which
/// no result of the API shows. (Before, a 20 ms sleep stood for it: a late second asker found the
/// value published and the test showed nothing.)
fn s5_a_second_asker_waits_for_the_running_init<B: Backend>() {
    let rl: &'static RankLocal<u32, B> = Box::leak(Box::new(RankLocal::new()));
    let (rank, rel, h) = parked_rank();
    let (in_init_tx, in_init_rx) = mpsc::channel();
    let (finish_tx, finish_rx) = mpsc::channel::<()>();
    let first = thread::spawn(move || {
        *on_behalf_of(rank, || {
            rl.get_or(|| {
                in_init_tx.send(()).unwrap();
                finish_rx.recv().unwrap();
                10
            })
        })
    });
    in_init_rx.recv().unwrap();
    let (blocked_tx, blocked_rx) = mpsc::channel();
    let second = thread::spawn(move || {
        blocked_tx.send(Blocked::this_thread()).unwrap();
        *on_behalf_of(rank, || rl.get_or(|| 20))
    });
    let blocked = blocked_rx.recv().unwrap();
    // a second asker that ran its own init finishes instead (then the assertion below fails)
    let waits = || blocked.in_futex_wait_within(bytes_of(rl)) || second.is_finished();
    assert!(
        patiently(waits, || ()),
        "the second asker neither waited nor returned"
    );
    finish_tx.send(()).unwrap();
    assert_eq!(first.join().unwrap(), 10);
    // within a deadline: a waiter nobody wakes would hang the test, not fail it
    let second = within_deadline(move || second.join().unwrap());
    assert_eq!(second, 10, "second asker ran its own init");
    drop(rel);
    h.join().unwrap();
}

/// A value with drop glue, as most real values have.
struct NeedsDrop;

impl Drop for NeedsDrop {
    fn drop(&mut self) {}
}

/// The claim protocol under panicking and failing inits: several threads ask for the same ranks;
/// each rank's first init panics, its second errs, its third succeeds. Every waiter wakes (no
/// lost wakeup), each rank ends with exactly one value, made by exactly one successful init.
///
/// Found in review 5 (adversarial), an attack the implementation withstood.
fn s5_panicking_and_failing_inits_wake_every_waiter<B: Backend>() {
    let ranks_n = if cfg!(miri) { 3 } else { 64 };
    let threads = if cfg!(miri) { 3 } else { 6 };
    let rl: &'static RankLocal<(usize, NeedsDrop), B> = common::leak(RankLocal::new());
    let ranks: &'static [Rank] = Box::leak((0..ranks_n).map(|_| Rank::new()).collect());
    let attempts: &'static [AtomicUsize] =
        Box::leak((0..ranks_n).map(|_| AtomicUsize::new(0)).collect());
    let successes = common::counter();
    within_deadline(move || {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                thread::spawn(move || {
                    for round in 0..3 {
                        for k in 0..ranks_n {
                            let i = (k + t * 7 + round) % ranks_n;
                            let r = catch_unwind(AssertUnwindSafe(|| {
                                on_behalf_of(ranks[i].id(), || {
                                    rl.get_or_try(|| {
                                        thread::yield_now(); // let the others queue up
                                        match attempts[i].fetch_add(1, Ordering::SeqCst) {
                                            0 => panic!("first init panics"),
                                            1 => Err("second init fails"),
                                            _ => {
                                                successes.fetch_add(1, Ordering::SeqCst);
                                                Ok((i, NeedsDrop))
                                            }
                                        }
                                    })
                                    .map(|v| v.0)
                                })
                            }));
                            if let Ok(Ok(v)) = r {
                                assert_eq!(v, i);
                            }
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
    for (i, r) in ranks.iter().enumerate() {
        // three rounds of asks made sure every rank has its value
        let v = on_behalf_of(r.id(), || {
            rl.get_or_try(|| Err::<(usize, NeedsDrop), &str>("no value after three rounds"))
                .map(|v| v.0)
        });
        assert_eq!(v, Ok(i));
    }
    assert_eq!(
        successes.load(Ordering::SeqCst),
        ranks_n,
        "an init succeeded twice"
    );
    assert_eq!(rl.len(), ranks_n);
}

/// A plain `get` that waits for another thread's scoped first touch of the same rank (`with`,
/// whose instance may be reclaimed once the rank exits), and then finds that instance published,
/// marks it escaped: the `&T` it returns is kept through the rank's exit and any sweep.
///
/// Found by mutation testing: with the escape mark skipped on this path, no test failed.
///
/// The plain `get` is seen waiting for the claim before the first touch may end: as in
/// `s5_a_second_asker_waits_for_the_running_init`, blocked on a futex inside the `RankLocal` while
/// no thread holds its writer lock. (Before, a 20 ms sleep stood for it: a late `get` took the
/// lookup path instead, which escapes too, and the test showed nothing.)
fn a_get_that_waits_for_a_scoped_first_touch_escapes_the_instance<B: Backend>() {
    let rl: &'static RankLocal<Counted<'static>, B> = common::leak(RankLocal::new());
    let drops = common::counter();
    let rank = Rank::new();
    let id = rank.id();
    let (in_init_tx, in_init_rx) = mpsc::channel();
    let (finish_tx, finish_rx) = mpsc::channel::<()>();
    let scoped = thread::spawn(move || {
        let init = || {
            in_init_tx.send(()).unwrap();
            finish_rx.recv().unwrap();
            Counted::new(drops)
        };
        on_behalf_of(id, || rl.with_or(init, |_| ()));
    });
    in_init_rx.recv().unwrap(); // the scoped first touch holds the claim
    let (blocked_tx, blocked_rx) = mpsc::channel();
    let plain = thread::spawn(move || {
        blocked_tx.send(Blocked::this_thread()).unwrap();
        on_behalf_of(id, || addr(rl.get_or(|| Counted::new(drops))))
    });
    let blocked = blocked_rx.recv().unwrap();
    let waits = || blocked.in_futex_wait_within(bytes_of(rl)) || plain.is_finished();
    assert!(
        patiently(waits, || ()),
        "the plain get neither waited nor returned"
    );
    assert!(
        !plain.is_finished(),
        "the plain get did not wait for the claim"
    );
    finish_tx.send(()).unwrap();
    scoped.join().unwrap();
    let got = within_deadline(move || plain.join().unwrap());
    drop(rank);
    assert_eq!(
        rl.reclaim_exited(),
        0,
        "the instance a plain get handed out was reclaimed"
    );
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    assert_eq!(
        got,
        addr(on_behalf_of(id, || rl.get_or(|| Counted::new(drops))))
    );
}

// ---------------------------------------------------------------------------------------------
// A new rank's first touch: a rank above every rank the map inserted goes to the writer lock with
// no lookup before it (on the backends whose lookups pin), and the re-check under the lock serves
// one another thread inserted meanwhile. These check the answers on every path into it.

/// Rounds of [`a_new_rank_first_touched_by_many_threads_at_once_inits_once`], a new rank each.
const NEW_RANK_ROUNDS: usize = if cfg!(miri) { 3 } else { 100 };

/// A new rank (drawn after every rank the map holds: above them all) first-touched by many
/// threads at once through every entry point — `get_or`, `with_or`, a `get_or_try` whose `init`
/// errs, a `get_or` whose `init` panics — beside readers (`get_for`, `with_for`, `iter`, `len`),
/// round after round: exactly one `init` succeeds per rank, every caller that got a value got
/// that one instance, and `len` and `iter` agree afterwards. A lost re-check under the writer
/// lock (the one check left once the lookup is skipped) runs a second `init`.
fn a_new_rank_first_touched_by_many_threads_at_once_inits_once<B: Backend>() {
    let rl: &'static RankLocal<(usize, Box<usize>), B> = common::leak(RankLocal::new());
    let old = Rank::new();
    on_behalf_of(old.id(), || rl.get_or(|| (usize::MAX, Box::new(0))));
    // drawn in order: each round's rank is above every rank inserted before its round
    let ranks: &'static [Rank] = Box::leak((0..NEW_RANK_ROUNDS).map(|_| Rank::new()).collect());
    let inits: &'static [AtomicUsize] =
        Box::leak((0..NEW_RANK_ROUNDS).map(|_| AtomicUsize::new(0)).collect());
    let seen: Vec<Vec<Option<usize>>> = within_deadline(move || {
        let barrier = common::leak(Barrier::new(THREADS));
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                thread::spawn(move || {
                    let mut seen = Vec::with_capacity(NEW_RANK_ROUNDS);
                    let mut failure = None;
                    for (round, rank) in ranks.iter().enumerate() {
                        let init = move || {
                            inits[round].fetch_add(1, Ordering::SeqCst);
                            (round, Box::new(round))
                        };
                        barrier.wait();
                        // a failed round is recorded, not unwound: the other racers would wait
                        // for this one at the barrier until the watchdog fires
                        let round_of = || {
                            let got = on_behalf_of(rank.id(), || match t % 6 {
                                0 => Some(addr(rl.get_or(init))),
                                1 => Some(rl.with_or(init, addr)),
                                2 => {
                                    // an error inserts nothing; a value another racer inserted is
                                    // returned instead
                                    match rl.get_or_try(|| Err::<(usize, Box<usize>), _>("no")) {
                                        Ok(v) => Some(addr(v)),
                                        Err(_) => Some(addr(rl.get_or(init))),
                                    }
                                }
                                3 => {
                                    let r = catch_unwind(AssertUnwindSafe(|| {
                                        addr(rl.get_or(|| panic!("this init panics")))
                                    }));
                                    Some(r.unwrap_or_else(|_| addr(rl.get_or(init))))
                                }
                                4 => {
                                    let a = rl.get_for(rank.id()).map(addr);
                                    let b = rl.with_for(rank.id(), addr);
                                    assert!(a.is_none() || b.is_none() || a == b);
                                    a.or(b)
                                }
                                _ => {
                                    let n = rl.len();
                                    let mine: Vec<usize> = rl
                                        .iter()
                                        .filter(|(r, _)| *r == rank.id())
                                        .map(|(_, v)| addr(v))
                                        .collect();
                                    assert!(mine.len() <= 1, "iter saw rank {round} twice");
                                    assert!(n <= round + 2, "len {n} in round {round}");
                                    mine.first().copied()
                                }
                            });
                            if got.is_some() {
                                // read through the instance's own heap allocation
                                let v = on_behalf_of(rank.id(), || *rl.get_or(init).1);
                                assert_eq!(v, round);
                            }
                            got
                        };
                        match catch_unwind(AssertUnwindSafe(round_of)) {
                            Ok(got) => seen.push(got),
                            Err(p) if failure.is_none() => {
                                failure = Some(format!("round {round}: {}", panic_message(&*p)));
                                seen.push(None);
                            }
                            Err(_) => seen.push(None),
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
    for (round, rank) in ranks.iter().enumerate() {
        assert_eq!(
            inits[round].load(Ordering::SeqCst),
            1,
            "round {round}: init ran more or less than once for one new rank"
        );
        let instance = addr(rl.get_for(rank.id()).expect("published"));
        for (t, s) in seen.iter().enumerate() {
            if let Some(a) = s[round] {
                assert_eq!(
                    a, instance,
                    "round {round}: thread {t} saw another instance"
                );
            }
        }
    }
    assert_eq!(rl.len(), NEW_RANK_ROUNDS + 1);
    let mut listed: Vec<(RankId, usize)> = rl.iter().map(|(r, v)| (r, v.0)).collect();
    listed.sort();
    let mut want: Vec<(RankId, usize)> =
        ranks.iter().enumerate().map(|(i, r)| (r.id(), i)).collect();
    want.push((old.id(), usize::MAX));
    want.sort();
    assert_eq!(listed, want, "iter disagrees with the first touches");
}

/// A rank whose instance was removed by `&mut` access (`clear`, `purge_exited`) is first-touched
/// again — the largest rank id the map inserted is never lowered, so such a rank takes the
/// lookup before the writer lock — by this thread (whose cache saw the old instance) and by a
/// fresh one, through `get_or` and `with_or`: `init` runs again, once, and the new value is
/// served, never the removed one.
fn a_removed_rank_first_touched_again_inits_again<B: Backend>() {
    let mut rl = RankLocal::<usize, B>::new();
    let (a, b) = (Rank::new(), Rank::new());
    assert_eq!(on_behalf_of(a.id(), || *rl.get_or(|| 1)), 1);
    assert_eq!(on_behalf_of(b.id(), || rl.with_or(|| 2, |v| *v)), 2);
    rl.clear();
    let inits = AtomicUsize::new(0);
    let init = |v: usize| {
        inits.fetch_add(1, Ordering::SeqCst);
        v
    };
    assert_eq!(on_behalf_of(a.id(), || *rl.get_or(|| init(10))), 10);
    thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(on_behalf_of(b.id(), || rl.with_or(|| init(20), |v| *v)), 20);
            assert_eq!(on_behalf_of(a.id(), || *rl.get_or(|| init(11))), 10);
        });
    });
    assert_eq!(on_behalf_of(b.id(), || rl.with_or(|| init(21), |v| *v)), 20);
    assert_eq!(inits.load(Ordering::SeqCst), 2);
    assert_eq!(rl.len(), 2);
    // an exited rank's instance purged, then first-touched again: by this thread and a fresh one
    let gone = exited_thread_rank();
    assert_eq!(on_behalf_of(gone, || *rl.get_or(|| 3)), 3);
    let newest = Rank::new(); // above every rank inserted so far
    assert_eq!(on_behalf_of(newest.id(), || *rl.get_or(|| 4)), 4);
    assert_eq!(rl.purge_exited(), 1);
    assert!(rl.get_for(gone).is_none());
    thread::scope(|s| {
        s.spawn(|| assert_eq!(on_behalf_of(gone, || rl.with_or(|| init(30), |v| *v)), 30));
    });
    assert_eq!(on_behalf_of(gone, || *rl.get_or(|| init(31))), 30);
    assert_eq!(on_behalf_of(newest.id(), || *rl.get_or(|| init(40))), 4);
    assert_eq!(inits.load(Ordering::SeqCst), 3);
    assert_eq!(rl.len(), 4);
}

/// A recycling map's new ranks — each above every rank the map inserted when drawn, and
/// adoption inserts the ended rank's value under the new rank — first-touched by several threads
/// at once: each ended value is adopted by exactly one new rank, the other new ranks run `init`,
/// no two ranks share an instance, and a fresh thread finds every rank's instance again without
/// an `init`.
fn a_recycling_maps_new_ranks_adopt_each_ended_value_once<B: Backend>() {
    let ended = if cfg!(miri) { 2 } else { 8 };
    let fresh = if cfg!(miri) { 2 } else { 8 };
    let rl: &'static RankLocal<AtomicUsize, B> = common::leak(RankLocal::recycling());
    // owner-only values of threads live at once (a thread started after another ended would
    // adopt its value), left for new ranks to adopt when the threads end
    let live = common::leak(Barrier::new(ended));
    let hs: Vec<_> = (0..ended)
        .map(|_| {
            thread::spawn(move || {
                rl.with_own_or(|| AtomicUsize::new(0), |_| ());
                live.wait();
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(rl.len(), ended);
    let inits = common::counter();
    let ranks: &'static [Rank] = Box::leak((0..ended + fresh).map(|_| Rank::new()).collect());
    let got: Vec<usize> = within_deadline(move || {
        let barrier = common::leak(Barrier::new(ranks.len()));
        let hs: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(i, rank)| {
                thread::spawn(move || {
                    barrier.wait();
                    on_behalf_of(rank.id(), || {
                        let init = || {
                            inits.fetch_add(1, Ordering::SeqCst);
                            AtomicUsize::new(0)
                        };
                        let mark = |v: &AtomicUsize| {
                            assert_eq!(v.swap(i + 1, Ordering::SeqCst), 0, "a shared instance");
                            addr(v)
                        };
                        if i % 2 == 0 {
                            mark(rl.get_or(init))
                        } else {
                            rl.with_or(init, mark)
                        }
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        inits.load(Ordering::SeqCst),
        fresh,
        "an ended value was adopted twice or never"
    );
    let mut distinct = got.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), got.len(), "two new ranks share an instance");
    thread::spawn(move || {
        for (i, rank) in ranks.iter().enumerate() {
            let v = on_behalf_of(rank.id(), || {
                rl.get_or(|| unreachable!("rank {i} has its instance"))
            });
            assert_eq!((addr(v), v.load(Ordering::SeqCst)), (got[i], i + 1));
        }
    })
    .join()
    .unwrap();
    assert_eq!(rl.len(), ended + fresh);
}

/// A rank whose owner-only value its thread's exit dropped (a tombstone is left in the map) is
/// first-touched by delegates on two threads at once (`get_or` and `with_or`): one `init`, one
/// instance, and the tombstone is never handed out.
fn a_tombstoned_rank_first_touched_by_a_delegate_is_refilled_once<B: Backend>() {
    let rl: &'static RankLocal<Counted<'static>, B> = common::leak(RankLocal::new());
    let drops = common::counter();
    let gone = thread::spawn(move || {
        rl.with_own_or(|| Counted::new(drops), |_| ());
        RankId::current()
    })
    .join()
    .unwrap();
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the exit dropped the owner-only value"
    );
    let inits = common::counter();
    let init = move || {
        inits.fetch_add(1, Ordering::SeqCst);
        Counted::new(drops)
    };
    let (x, y) = within_deadline(move || {
        let barrier = common::leak(Barrier::new(2));
        let a = thread::spawn(move || {
            barrier.wait();
            on_behalf_of(gone, || addr(rl.get_or(init)))
        });
        let b = thread::spawn(move || {
            barrier.wait();
            on_behalf_of(gone, || {
                rl.with_or(init, |v| {
                    assert_eq!(v.value(), 0); // read through its heap allocation
                    addr(v)
                })
            })
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(x, y, "two instances for one rank");
    assert_eq!(inits.load(Ordering::SeqCst), 1);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(rl.len(), 1);
}

/// A call that first-touches the current rank of a map.
type Touch<B> = fn(&RankLocal<usize, B>);

/// A new rank's `init` asking for the same rank (acting for it, on this thread) panics with the
/// clear "reentrant" message on every path — `get_or`, `with_or` (a delegate's scoped first
/// touch), `get_or_try`, and the owner-only family on a fresh thread's own rank — never a
/// deadlock; the claim is ended, so the rank is first-touched afterwards.
fn a_new_ranks_reentrant_init_panics_on_every_path<B: Backend>() {
    let rl: &'static RankLocal<usize, B> = common::leak(RankLocal::new());
    let paths: [(&str, Touch<B>); 5] = [
        ("get_or in get_or", |rl| {
            rl.get_or(|| *rl.get_or(|| 1) + 1);
        }),
        ("with_or in with_or", |rl| {
            rl.with_or(|| rl.with_or(|| 1, |v| *v) + 1, |_| ());
        }),
        ("get_or in with_or", |rl| {
            rl.with_or(|| *rl.get_or(|| 1) + 1, |_| ());
        }),
        ("with_or in get_or_try", |rl| {
            let _ = rl.get_or_try(|| Ok::<_, ()>(rl.with_or(|| 1, |v| *v) + 1));
        }),
        ("get_own_or in get_or (own rank)", |rl| {
            rl.get_or(|| *rl.get_own_or(|| 1) + 1);
        }),
    ];
    for (name, path) in paths {
        let rank = Rank::new();
        let id = rank.id();
        let own = name.ends_with("(own rank)");
        let msg = within_deadline(move || {
            let run = move || {
                let err = catch_unwind(AssertUnwindSafe(|| path(rl)))
                    .expect_err("a reentrant init did not panic");
                // the claim ended: the rank is first-touched now
                assert_eq!(*rl.get_or(|| 9), 9);
                panic_message(&*err)
            };
            if own {
                thread::spawn(run).join().unwrap() // a fresh thread: its own rank is new
            } else {
                on_behalf_of(id, run)
            }
        });
        assert!(
            msg.contains("reentrant"),
            "{name}: unclear panic message: {msg:?}"
        );
        drop(rank);
    }
}

/// 10,000 new ranks first-touched by four threads, each drawing its ranks as it goes (so a rank
/// is sometimes above every inserted rank, sometimes below one another thread just inserted),
/// through `get_or` and `with_or`: no stall (a watchdog), every rank once with its own value.
fn many_new_ranks_first_touched_by_several_threads<B: Backend>() {
    const PER_THREAD: usize = if cfg!(miri) { 4 } else { 2_500 };
    let rl: &'static RankLocal<u64, B> = common::leak(RankLocal::new());
    let ranks: Vec<Rank> = within_deadline(move || {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                thread::spawn(move || {
                    (0..PER_THREAD)
                        .map(|i| {
                            let rank = Rank::new();
                            let id = rank.id().as_u64();
                            let v = on_behalf_of(rank.id(), || {
                                if (i + t) % 2 == 0 {
                                    *rl.get_or(|| id)
                                } else {
                                    rl.with_or(|| id, |v| *v)
                                }
                            });
                            assert_eq!(v, id);
                            rank
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(rl.len(), 4 * PER_THREAD);
    let mut listed: Vec<u64> = rl
        .iter()
        .map(|(r, v)| {
            assert_eq!(r.as_u64(), *v);
            *v
        })
        .collect();
    listed.sort_unstable();
    let mut want: Vec<u64> = ranks.iter().map(|r| r.id().as_u64()).collect();
    want.sort_unstable();
    assert_eq!(listed, want);
}
