//! `RankLocal::recycling()` (SPEC item 16): the `thread_local` crate's lifecycle, made sound. A
//! value outlives its rank (a sum after `join` counts every thread) and the first touch of a new
//! rank adopts an ended rank's value instead of calling `init`: never while the ended thread still
//! holds an `OwnRef` of it, never to two ranks at once, the most recently ended first; `new()`
//! never hands a value to another rank. Every test here failed before `recycling()` existed (it
//! did not compile; with `new()` in its place the aggregator summed to 0: every value was dropped
//! at its thread's exit).

mod common;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::Duration;

use ranklocal::{Backend, RankLocal};

common::backend_tests! {
    the_thread_local_crates_aggregator_sums_exactly,
    a_with_own_aggregator_sums_exactly,
    sequential_threads_reuse_one_value,
    the_most_recently_ended_value_first,
    no_two_live_ranks_share_a_value,
    never_adopted_while_an_own_ref_lives,
    new_never_hands_a_value_on,
    mut_access_takes_ended_values_off_the_free_list,
    a_late_destructor_claims_its_value_back,
}

const THREADS: usize = if cfg!(miri) { 4 } else { 2_000 };
const RUNS: usize = if cfg!(miri) { 1 } else { 20 };

/// The `thread_local` crate's canonical aggregator, ported by README's table: `ThreadLocal::new()`
/// → `RankLocal::recycling()`, `tls.get_or(|| Cell::new(0))` → `rl.get_own_or(..)`, the sum after
/// `join` by `into_iter`. Exact at 2,000 threads, 20 runs.
fn the_thread_local_crates_aggregator_sums_exactly<B: Backend>() {
    for run in 0..RUNS {
        let tls = Arc::new(RankLocal::<Cell<u64>, B>::recycling());
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let tls = Arc::clone(&tls);
                thread::spawn(move || {
                    let cell = tls.get_own_or(|| Cell::new(0));
                    cell.set(cell.get() + 1);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let tls = Arc::try_unwrap(tls).unwrap_or_else(|_| panic!("a thread kept the map"));
        let total: u64 = tls.into_iter().map(|(_, c)| c.get()).sum();
        assert_eq!(
            total, THREADS as u64,
            "run {run}: a thread's count was lost"
        );
    }
}

/// The same with `with_own` (std's idiom) and a `Sync` value summed by `iter()`.
fn a_with_own_aggregator_sums_exactly<B: Backend>() {
    for run in 0..RUNS.min(3) {
        let counts = RankLocal::<AtomicUsize, B>::recycling();
        thread::scope(|s| {
            let hs: Vec<_> = (0..THREADS)
                .map(|_| s.spawn(|| counts.with_own(|c| c.fetch_add(1, SeqCst))))
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        });
        let total: usize = counts.iter().map(|(_, c)| c.load(SeqCst)).sum();
        assert_eq!(total, THREADS, "run {run}: a thread's count was lost");
        assert!(counts.len() <= THREADS);
    }
}

/// Threads that run one after another share one value: `init` runs once, `len` stays 1, and the
/// value carries every thread's work.
fn sequential_threads_reuse_one_value<B: Backend>() {
    let inits = AtomicUsize::new(0);
    let rl = RankLocal::<RefCell<Vec<usize>>, B>::recycling();
    let n = if cfg!(miri) { 4 } else { 2_000 };
    for i in 0..n {
        thread::scope(|s| {
            s.spawn(|| {
                let v = rl.get_own_or(|| {
                    inits.fetch_add(1, SeqCst);
                    RefCell::new(Vec::new())
                });
                v.borrow_mut().push(i);
            })
            .join() // the OS thread's join: its exit work ran (a scope's own wait may not)
            .unwrap();
        });
        assert_eq!(rl.len(), 1, "thread {i}: the map grew");
    }
    assert_eq!(
        inits.load(SeqCst),
        1,
        "init ran for a thread that could adopt"
    );
    let mut rl = rl;
    let (_, v) = rl.iter_mut().next().unwrap();
    assert_eq!(v.get_mut().len(), n);
}

/// Two values ended, A's then B's: the next first touch adopts B's, the one after it A's.
fn the_most_recently_ended_value_first<B: Backend>() {
    let rl = RankLocal::<Cell<u32>, B>::recycling();
    let (b_go_tx, b_go_rx) = mpsc::channel::<()>();
    let both = Barrier::new(2);
    thread::scope(|s| {
        let a = s.spawn(|| {
            rl.get_own_or(|| Cell::new(1));
            both.wait();
        });
        let (rl, both) = (&rl, &both);
        let b = s.spawn(move || {
            rl.get_own_or(|| Cell::new(2));
            both.wait();
            b_go_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("A did not end");
        });
        a.join().unwrap(); // A's exit work ran before `join` returned
        b_go_tx.send(()).unwrap();
        b.join().unwrap();
    });
    let (first, second) = thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let (hold_tx, hold_rx) = mpsc::channel::<()>();
        let rl = &rl;
        let h = s.spawn(move || {
            let v = rl.get_own_or(|| Cell::new(99));
            tx.send(v.get()).unwrap();
            let _ = hold_rx.recv_timeout(Duration::from_secs(60));
        });
        let first = rx.recv().unwrap();
        let second = s
            .spawn(|| rl.get_own_or(|| Cell::new(99)).get())
            .join()
            .unwrap();
        hold_tx.send(()).unwrap();
        h.join().unwrap();
        (first, second)
    });
    assert_eq!((first, second), (2, 1), "not the most recently ended first");
    assert_eq!(rl.len(), 2, "a value was made while two waited");
}

/// Eight threads alive at once after eight ended: each has a value of its own.
fn no_two_live_ranks_share_a_value<B: Backend>() {
    let rl = RankLocal::<Cell<usize>, B>::recycling();
    let n = 8;
    let first = Barrier::new(n);
    thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    rl.get_own_or(|| Cell::new(0)).set(1);
                    first.wait(); // eight values, alive at once
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap(); // the OS thread's join: its exit work ran
        }
    });
    let all = Barrier::new(n);
    let addrs: Vec<usize> = thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    let v = rl.get_own_or(|| Cell::new(0));
                    v.set(v.get() + 1);
                    let a = common::addr(&*v);
                    all.wait(); // every thread holds its value at once
                    a
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut distinct = addrs.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), n, "two live ranks shared a value");
    let mut rl = rl;
    assert_eq!(rl.len(), n);
    let vals: Vec<usize> = rl.iter_mut().map(|(_, c)| c.get()).collect();
    assert!(
        vals.iter().all(|&v| v == 2),
        "a value was not adopted: {vals:?}"
    );
}

/// A thread-local destructor of an ended thread holds an `OwnRef`: a new thread does not adopt
/// that value while the guard lives; after the guard's drop the next one does.
fn never_adopted_while_an_own_ref_lives<B: Backend>() {
    struct Late(RefCell<Option<Box<dyn FnOnce()>>>);
    impl Drop for Late {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    thread_local! {
        static LATE: Late = const { Late(RefCell::new(None)) };
    }
    let rl: &'static RankLocal<Cell<u32>, B> = common::leak(RankLocal::recycling());
    let (in_late_tx, in_late_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = thread::spawn(move || {
        LATE.with(|_| ()); // registered before the crate's exit hook: runs after it
        let g = rl.get_own_or(|| Cell::new(1));
        LATE.with(|l| {
            *l.0.borrow_mut() = Some(Box::new(move || {
                in_late_tx.send(()).unwrap();
                let _ = go_rx.recv_timeout(Duration::from_secs(60));
                g.set(g.get() + 10); // still this thread's value
                drop(g);
            }))
        });
    });
    in_late_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the late destructor did not run");
    let seen = thread::spawn(move || rl.get_own_or(|| Cell::new(2)).get())
        .join()
        .unwrap();
    assert_eq!(
        seen, 2,
        "adopted a value whose ended thread still holds a guard"
    );
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    let (a, b) = thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let (hold_tx, hold_rx) = mpsc::channel::<()>();
        let h = s.spawn(move || {
            let v = rl.get_own_or(|| Cell::new(3));
            tx.send(v.get()).unwrap();
            let _ = hold_rx.recv_timeout(Duration::from_secs(60));
        });
        let a = rx.recv().unwrap();
        let b = s
            .spawn(|| rl.get_own_or(|| Cell::new(3)).get())
            .join()
            .unwrap();
        hold_tx.send(()).unwrap();
        h.join().unwrap();
        (a, b)
    });
    // the holder's value (11) ended last, then the other (2): most recent first
    assert_eq!((a, b), (11, 2));
    assert_eq!(rl.len(), 2);
}

/// `new()` hands no value to another rank: every thread runs `init`.
fn new_never_hands_a_value_on<B: Backend>() {
    let inits = AtomicUsize::new(0);
    let rl = RankLocal::<Cell<u32>, B>::new();
    for _ in 0..50 {
        thread::scope(|s| {
            s.spawn(|| {
                let v = rl.get_own_or(|| {
                    inits.fetch_add(1, SeqCst);
                    Cell::new(7)
                });
                assert_eq!(v.get(), 7, "a value came from another rank");
                v.set(8);
            })
            .join()
            .unwrap();
        });
    }
    assert_eq!(inits.load(SeqCst), 50);
}

/// `clear` and `purge_exited` free ended threads' values: a later thread never adopts one of them
/// (it builds its own), and nothing is dropped twice.
fn mut_access_takes_ended_values_off_the_free_list<B: Backend>() {
    struct Flag(Vec<u8>, Arc<AtomicUsize>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.1.fetch_add(1, SeqCst);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let mut rl = RankLocal::<Flag, B>::recycling();
    let run = |rl: &RankLocal<Flag, B>, tag: u8| {
        thread::scope(|s| {
            s.spawn(|| rl.get_own_or(|| Flag(vec![tag; 64], Arc::clone(&drops))).0[0])
                .join()
                .unwrap()
        })
    };
    assert_eq!(run(&rl, 1), 1);
    rl.clear();
    assert_eq!(drops.load(SeqCst), 1);
    assert_eq!(run(&rl, 2), 2, "adopted a value `clear` dropped");
    assert_eq!(rl.purge_exited(), 1);
    assert_eq!(drops.load(SeqCst), 2);
    assert_eq!(run(&rl, 3), 3, "adopted a value `purge_exited` dropped");
    assert_eq!(run(&rl, 4), 3, "the ended value was not adopted");
    drop(rl);
    assert_eq!(drops.load(SeqCst), 3, "dropped twice or leaked");
}

/// An ended thread's late thread-local destructor reaches for its value after the exit work made
/// it adoptable: it gets its own value back (kept under its rank), and a later thread builds its
/// own instead of adopting it.
fn a_late_destructor_claims_its_value_back<B: Backend>() {
    struct Late(RefCell<Option<Box<dyn FnOnce()>>>);
    impl Drop for Late {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    thread_local! {
        static LATE: Late = const { Late(RefCell::new(None)) };
    }
    let rl: &'static RankLocal<Cell<u32>, B> = common::leak(RankLocal::recycling());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        LATE.with(|_| ()); // registered before the crate's exit hook: runs after it
        rl.get_own_or(|| Cell::new(1)).set(5);
        LATE.with(|l| {
            *l.0.borrow_mut() = Some(Box::new(move || {
                let v = rl.get_own_or(|| Cell::new(0)).get();
                tx.send(v).unwrap();
            }))
        });
    })
    .join()
    .unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(60)).unwrap(),
        5,
        "the late destructor did not get its own value"
    );
    let seen = thread::spawn(move || rl.get_own_or(|| Cell::new(2)).get())
        .join()
        .unwrap();
    assert_eq!(seen, 2, "adopted a value its ended owner claimed back");
    assert_eq!(rl.len(), 2);
}
