//! No call blocks forever in a documented use of the exit drop (SPEC item 17, I39): a value's
//! `Drop` at thread exit may release the last `Arc` of its own map, or of another map whose values
//! another exiting thread is dropping. Each test runs its scenario under a watchdog
//! (`common::within_deadline`): a hang fails the test, it never stalls the suite.

mod common;

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;

use common::{patiently, within_deadline, Blocked};
use ranklocal::{Backend, RankLocal};

common::backend_tests! {
    #[cfg_attr(any(miri, not(target_os = "linux")), ignore = "reads Linux's /proc")]
    last_arc_of_its_own_map_released_while_another_thread_exits,
    last_arc_of_its_own_map_released_by_exiting_threads,
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
