//! No call blocks forever in a documented use of the exit drop (SPEC item 17, I39): a value's
//! `Drop` at thread exit may release the last `Arc` of its own map, or of another map whose values
//! another exiting thread is dropping. Each test runs its scenario under a watchdog
//! (`common::within_deadline`): a hang fails the test, it never stalls the suite.

mod common;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;

use common::{patiently, within_deadline, Blocked};
use ranklocal::{Backend, RankLocal};

common::backend_tests! {
    #[cfg_attr(any(miri, not(target_os = "linux")), ignore = "reads Linux's /proc")]
    last_arc_of_its_own_map_released_while_another_thread_exits,
    last_arc_of_its_own_map_released_by_exiting_threads,
    two_maps_owning_each_others_last_arc_exit_together,
    a_map_dropped_inside_an_exit_drop_still_outlives_its_values,
}

type Map<B> = Arc<RankLocal<BackRef<B>, B>>;
type OnDrop<B> = Box<dyn FnOnce(&mut Option<Map<B>>) + Send>;

/// A per-thread value that points back at its registry: it holds an `Arc` of the map it lives in,
/// and its `Drop` runs `on_drop` first (with the `Arc` still held, so it can release it early).
struct BackRef<B: Backend> {
    map: RefCell<Option<Map<B>>>,
    on_drop: Option<OnDrop<B>>,
    drops: &'static AtomicUsize,
}

impl<B: Backend> Drop for BackRef<B> {
    fn drop(&mut self) {
        if let Some(f) = self.on_drop.take() {
            f(self.map.get_mut());
        }
        self.drops.fetch_add(1, SeqCst);
    }
}

/// Issue 39's F1, deterministic: threads A and B each hold a `with_own` value that holds an `Arc`
/// of the map, and exit together. A's value, dropped by A's exit work, releases its `Arc` and
/// stays in flight; B's value then releases the last one, so the map is dropped inside B's exit
/// drop and waits for A's; A's drop returns only once B waits. It hung (the watchdog fired, 3 of
/// 3 runs): the landing of A's drop took the in-flight count from 2 to 1 and notified only at 0,
/// while the waiting drop counted itself and waited for 1.
fn last_arc_of_its_own_map_released_while_another_thread_exits<B: Backend>() {
    within_deadline(|| {
        let drops = common::counter();
        let map = Arc::new(RankLocal::<BackRef<B>, B>::new());
        let (a_released_tx, a_released_rx) = mpsc::channel::<()>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (blocked_tx, blocked_rx) = mpsc::channel::<Blocked>();
        let on_a: OnDrop<B> = Box::new(move |arc| {
            drop(arc.take()); // not the last
            a_released_tx.send(()).unwrap();
            go_rx.recv().unwrap(); // B waits in the map's drop
        });
        let on_b: OnDrop<B> = Box::new(move |arc| {
            a_released_rx.recv().unwrap(); // A's drop is in flight
            blocked_tx.send(Blocked::this_thread()).unwrap();
            drop(arc.take()); // the last: the map's drop runs here
        });
        let (touched_tx, touched_rx) = mpsc::channel::<()>();
        let mut exit = Vec::new();
        let mut spawn = |on_drop| {
            let map = Arc::clone(&map);
            let touched = touched_tx.clone();
            let (exit_tx, exit_rx) = mpsc::channel::<()>();
            exit.push(exit_tx);
            thread::spawn(move || {
                let back = Arc::clone(&map);
                map.with_own_or(
                    || BackRef {
                        map: RefCell::new(None),
                        on_drop: Some(on_drop),
                        drops,
                    },
                    |v| *v.map.borrow_mut() = Some(back),
                );
                drop(map);
                touched.send(()).unwrap();
                exit_rx.recv().unwrap(); // the caller dropped its `Arc`
            })
        };
        let a = spawn(on_a);
        let b = spawn(on_b);
        touched_rx.recv().unwrap();
        touched_rx.recv().unwrap();
        drop(map);
        for e in exit {
            e.send(()).unwrap();
        }
        let blocked = blocked_rx.recv().unwrap();
        // B blocks in the map's drop (a futex wait), or finishes (nothing to wait for)
        assert!(patiently(
            || blocked.in_futex_wait() || b.is_finished(),
            || {}
        ));
        go_tx.send(()).unwrap();
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(drops.load(SeqCst), 2);
    });
}

/// The natural form of F1: 8 threads hold a value that holds an `Arc` of the map, drop their
/// other `Arc`s and exit together, many rounds; whichever value is dropped last drops the map
/// from inside its thread's exit drop, while other threads may still be dropping theirs.
fn last_arc_of_its_own_map_released_by_exiting_threads<B: Backend>() {
    const THREADS: usize = 8;
    let rounds = if cfg!(miri) { 2 } else { 300 };
    within_deadline(move || {
        for _ in 0..rounds {
            let drops = common::counter();
            let map = Arc::new(RankLocal::<BackRef<B>, B>::new());
            let barrier = Arc::new(Barrier::new(THREADS));
            let threads: Vec<_> = (0..THREADS)
                .map(|_| {
                    let map = Arc::clone(&map);
                    let barrier = Arc::clone(&barrier);
                    thread::spawn(move || {
                        let back = Arc::clone(&map);
                        map.with_own_or(
                            || BackRef {
                                map: RefCell::new(None),
                                on_drop: None,
                                drops,
                            },
                            |v| *v.map.borrow_mut() = Some(back),
                        );
                        drop(map);
                        barrier.wait();
                    })
                })
                .collect();
            drop(map);
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(drops.load(SeqCst), THREADS);
        }
    });
}
/// A value of `map` held by this thread, dropped by its exit work: it holds `held` (an `Arc` of
/// a map) and runs `on_drop` first.
fn hold<B: Backend>(
    map: &RankLocal<BackRef<B>, B>,
    held: Map<B>,
    drops: &'static AtomicUsize,
    on_drop: impl FnOnce(&mut Option<Map<B>>) + Send + 'static,
) {
    map.with_own_or(
        || BackRef {
            map: RefCell::new(Some(held)),
            on_drop: Some(Box::new(on_drop)),
            drops,
        },
        |_| (),
    );
}

/// Two maps, each owning the other's last `Arc` through a value that its thread's exit work
/// drops: both drops are in flight when each releases the other map. It hung in round 0 (the
/// watchdog fired): each map's drop waited for the other thread's exit drop, which waited in the
/// other map's drop. Now a map dropped inside an exit drop hands what is in flight to that exit
/// drop and returns.
fn two_maps_owning_each_others_last_arc_exit_together<B: Backend>() {
    let rounds = if cfg!(miri) { 1 } else { 50 };
    within_deadline(move || {
        for _ in 0..rounds {
            let drops = common::counter();
            let m1 = Arc::new(RankLocal::<BackRef<B>, B>::new());
            let m2 = Arc::new(RankLocal::<BackRef<B>, B>::new());
            let both_in_flight = Arc::new(Barrier::new(2));
            let (touched_tx, touched_rx) = mpsc::channel::<()>();
            let mut go = Vec::new();
            let threads: Vec<_> = [(&m1, &m2), (&m2, &m1)]
                .into_iter()
                .map(|(mine, other)| {
                    let (mine, other) = (Arc::clone(mine), Arc::clone(other));
                    let both = Arc::clone(&both_in_flight);
                    let touched = touched_tx.clone();
                    let (go_tx, go_rx) = mpsc::channel::<()>();
                    go.push(go_tx);
                    thread::spawn(move || {
                        hold(&mine, other, drops, move |other| {
                            both.wait(); // both exit drops are in flight
                            drop(other.take()); // the last `Arc` of the other map
                        });
                        drop(mine);
                        touched.send(()).unwrap();
                        go_rx.recv().unwrap(); // the caller dropped its `Arc`s
                    })
                })
                .collect();
            touched_rx.recv().unwrap();
            touched_rx.recv().unwrap();
            drop((m1, m2));
            for g in go {
                g.send(()).unwrap();
            }
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(drops.load(SeqCst), 2);
        }
    });
}

/// The outer map's drop still waits for a value of an inner map that was dropped inside one of
/// the outer map's exit drops: thread B's value of the inner map is in flight (its drop runs at
/// B's exit, and may borrow what dies with the outer map) when thread A's exit drop of an outer
/// value releases the inner map's last `Arc`. That inner drop returns at once (it cannot wait
/// there without closing a cycle), so the outer map's drop, on another thread, must not return
/// before B's drop has. Before, A's inner drop waited for B (the test's watchdog fired: B waits
/// for the outer drop to start); a drop inside an exit drop that just returned, without handing
/// its flights over, fails the assertion.
fn a_map_dropped_inside_an_exit_drop_still_outlives_its_values<B: Backend>() {
    within_deadline(|| {
        let drops = common::counter();
        let outer = Arc::new(RankLocal::<BackRef<B>, B>::new());
        let inner = Arc::new(RankLocal::<BackRef<B>, B>::new());
        let done: &'static AtomicBool = common::leak(AtomicBool::new(false));
        let (b_in_flight_tx, b_in_flight_rx) = mpsc::channel::<()>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (inner_dropped_tx, inner_dropped_rx) = mpsc::channel::<()>();
        let (touched_tx, touched_rx) = mpsc::channel::<()>();
        let b = {
            let inner = Arc::clone(&inner);
            let touched = touched_tx.clone();
            thread::spawn(move || {
                let unrelated = Arc::new(RankLocal::<BackRef<B>, B>::new());
                hold(&inner, unrelated, drops, move |_| {
                    b_in_flight_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    done.store(true, SeqCst);
                });
                touched.send(()).unwrap();
            })
        };
        touched_rx.recv().unwrap();
        let a = {
            let outer = Arc::clone(&outer);
            thread::spawn(move || {
                hold(&outer, inner, drops, move |inner| {
                    b_in_flight_rx.recv().unwrap();
                    drop(inner.take()); // the inner map's last `Arc`
                    inner_dropped_tx.send(()).unwrap();
                });
            })
        };
        inner_dropped_rx.recv().unwrap();
        a.join().unwrap();
        let (blocked_tx, blocked_rx) = mpsc::channel::<Option<Blocked>>();
        let d = thread::spawn(move || {
            let linux = cfg!(all(target_os = "linux", not(miri)));
            blocked_tx.send(linux.then(Blocked::this_thread)).unwrap();
            drop(outer); // the last `Arc`: waits for B's value
            assert!(
                done.load(SeqCst),
                "the outer map's drop returned while a value of a map it owned was being dropped"
            );
        });
        if let Some(blocked) = blocked_rx.recv().unwrap() {
            assert!(patiently(
                || blocked.in_futex_wait() || d.is_finished(),
                || {}
            ));
        }
        go_tx.send(()).unwrap();
        d.join().unwrap();
        b.join().unwrap();
        assert_eq!(drops.load(SeqCst), 2);
    });
}
