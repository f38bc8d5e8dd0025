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

use common::{addr, bytes_of, parked_rank, patiently, within_deadline, Blocked, Counted};
use ranklocal::{on_behalf_of, Backend, Rank, RankLocal};

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
