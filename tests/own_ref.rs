//! `OwnRef`, the guard `get_own`, `get_own_or` and `try_get_own` return (SPEC item 16): a value
//! only guards and `with_own` reached is dropped when its thread exits, on that thread, before
//! `join` returns; if a guard of it is alive then (held by another thread-local's destructor),
//! when the last guard is dropped, on that thread; `OwnRef::leak` keeps it. Every test here
//! failed before the guard existed: `get_own` handed out a `&T` and kept the value until the
//! map's drop.

mod common;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use ranklocal::{on_behalf_of, Backend, OwnRef, Rank, RankId, RankLocal};

common::backend_tests! {
    get_own_values_are_dropped_at_exit_before_join,
    a_guard_held_by_a_late_destructor_defers_the_drop_to_it,
    a_guard_leaked_by_a_late_destructor_keeps_the_value,
    a_value_a_reader_moved_on_is_kept_while_a_late_guard_lives,
    a_sync_value_lent_to_a_scoped_thread_from_a_guard,
    guards_forward_debug_and_display,
    a_guard_after_mut_access_keeps_what_left_the_gate,
    a_late_guards_tombstone_is_swept_after_its_ranks_exit_was,
    a_late_guard_dropped_for_another_rank_drops_the_value_as_its_own,
    a_late_guard_dropped_after_another_was_leaked_keeps_the_value,
    try_get_own_finds_a_value_made_by_with_or_get,
    the_owner_only_family_makes_values_in_a_late_destructor,
}

const THREADS: usize = if cfg!(miri) { 2 } else { 8 };
const PER_THREAD: usize = if cfg!(miri) { 3 } else { 1000 };

/// A per-thread tally (`Send`, not `Sync`) whose drop flushes its count and records where it ran.
struct Tally {
    n: Cell<usize>,
    sink: &'static AtomicUsize,
    drops: &'static AtomicUsize,
    dropped_on: &'static Mutex<Vec<thread::ThreadId>>,
}

impl Tally {
    fn new(sink: &'static AtomicUsize, drops: &'static AtomicUsize) -> Self {
        Tally {
            n: Cell::new(0),
            sink,
            drops,
            dropped_on: common::leak(Mutex::new(Vec::new())),
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.sink.fetch_add(self.n.get(), SeqCst);
        self.drops.fetch_add(1, SeqCst);
        self.dropped_on.lock().unwrap().push(thread::current().id());
    }
}

/// Closures run by a thread-local's destructor that runs after the crate's exit work: touched
/// first on its thread, so registered before the crate's exit hook and run after it.
struct Late(RefCell<Vec<Box<dyn FnOnce()>>>);

impl Drop for Late {
    fn drop(&mut self) {
        for f in self.0.take() {
            f();
        }
    }
}

thread_local! {
    static LATE: Late = const { Late(RefCell::new(Vec::new())) };
}

fn register_late() {
    LATE.with(|_| ());
}

/// Runs `f` in this thread's `Late` destructor; what it returns (or its panic's message) comes out
/// of the receiver, so that a failed check fails the test instead of aborting the process.
#[must_use]
fn at_late_exit(f: impl FnOnce() + 'static) -> mpsc::Receiver<Result<(), String>> {
    let (tx, rx) = mpsc::channel();
    let run = move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .map_err(|p| common::panic_message(&*p));
        let _ = tx.send(r);
    };
    LATE.with(|l| l.0.borrow_mut().push(Box::new(run)));
    rx
}

/// The result of a closure [`at_late_exit`] registered on a thread that was joined.
fn late_result(rx: mpsc::Receiver<Result<(), String>>) {
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(())) => {}
        Ok(Err(msg)) => panic!("in the late destructor: {msg}"),
        Err(_) => panic!("the late destructor did not run"),
    }
}

/// A value only `with_own` reached: dropped by the exit work, so the witness that the exit work
/// ran before a `Late` closure.
struct Witness(&'static AtomicUsize);

impl Drop for Witness {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// The `thread_local!` guarantee, through guards held across calls: every thread's value is
/// dropped (its count flushed) before `join` returns. Before: `get_own` kept every value (0 of 8
/// dropped after `join`).
fn get_own_values_are_dropped_at_exit_before_join<B: Backend>() {
    let sink = common::leak(AtomicUsize::new(0));
    let drops = common::leak(AtomicUsize::new(0));
    let rl: &'static RankLocal<Tally, B> = common::leak(RankLocal::new());
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            thread::spawn(move || {
                let held = rl.get_own_or(|| Tally::new(sink, drops)); // held across the loop
                for _ in 0..PER_THREAD {
                    let t = rl.get_own_or(|| unreachable!("exists"));
                    t.n.set(t.n.get() + 1);
                }
                assert_eq!(held.n.get(), PER_THREAD);
                assert!(rl.try_get_own().is_some());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(drops.load(SeqCst), THREADS, "not dropped at exit");
    assert_eq!(sink.load(SeqCst), THREADS * PER_THREAD, "flushed at exit");
    rl.reclaim_exited_blocking();
    assert_eq!(rl.len(), 0, "the tombstones were not swept");
    assert_eq!(drops.load(SeqCst), THREADS, "a value dropped twice");
}

/// A guard another thread-local's destructor holds past the crate's exit work: the value is not
/// dropped under it, `with_own` and `get_own` still reach it, and the last guard's drop drops it,
/// on that thread, before `join` returns.
fn a_guard_held_by_a_late_destructor_defers_the_drop_to_it<B: Backend>() {
    let sink = common::leak(AtomicUsize::new(0));
    let drops = common::leak(AtomicUsize::new(0));
    let witnessed = common::leak(AtomicUsize::new(0));
    let rl: &'static RankLocal<Tally, B> = common::leak(RankLocal::new());
    let witness: &'static RankLocal<Witness, B> = common::leak(RankLocal::new());
    let t = thread::spawn(move || {
        register_late();
        witness.with_own_or(|| Witness(witnessed), |_| ());
        let g = rl.get_own_or(|| Tally::new(sink, drops));
        g.n.set(5);
        let dropped_on = g.dropped_on;
        let late = at_late_exit(move || {
            assert_eq!(
                witnessed.load(SeqCst),
                1,
                "the late destructor ran before the crate's exit work (test setup)"
            );
            assert_eq!(drops.load(SeqCst), 0, "dropped under a live guard");
            assert_eq!(g.n.get(), 5);
            rl.with_own_or(|| unreachable!("exists"), |t| t.n.set(t.n.get() + 1)); // still ours
            let g2 = rl.get_own_or(|| unreachable!("exists"));
            assert!(std::ptr::eq(&*g, &*g2));
            drop(g);
            assert_eq!(drops.load(SeqCst), 0, "dropped under the second guard");
            drop(g2);
            assert_eq!(drops.load(SeqCst), 1, "the last guard did not drop it");
        });
        (thread::current().id(), dropped_on, late)
    });
    let id = t.thread().id();
    let (ran_on, dropped_on, late) = t.join().unwrap();
    late_result(late);
    assert_eq!(ran_on, id);
    assert_eq!(drops.load(SeqCst), 1, "not dropped before join");
    assert_eq!(sink.load(SeqCst), 6);
    assert_eq!(
        *dropped_on.lock().unwrap(),
        [id],
        "dropped on another thread"
    );
    rl.reclaim_exited_blocking();
    assert_eq!(rl.len(), 0, "the tombstone was not swept");
    assert_eq!(drops.load(SeqCst), 1, "dropped twice");
}

/// A sweep that takes the rank's exit while a late destructor's guard keeps the value finds
/// nothing to free; the last guard's drop then leaves a tombstone with no exit left to deliver, and
/// `reclaim_exited_blocking` still unpublishes it. Found by mutation testing: the gate's "tombstones
/// wait" answering `false` (only a delivered exit started a sweep) survived.
fn a_late_guards_tombstone_is_swept_after_its_ranks_exit_was<B: Backend>() {
    let drops = common::leak(AtomicUsize::new(0));
    let rl: &'static RankLocal<Tally, B> = common::leak(RankLocal::new());
    let t = thread::spawn(move || {
        register_late();
        let g = rl.get_own_or(|| Tally::new(common::leak(AtomicUsize::new(0)), drops));
        at_late_exit(move || {
            // the rank's exit is delivered: a sweep on another thread takes it, and leaves the
            // value under the guard
            let swept = thread::spawn(move || rl.reclaim_exited()).join().unwrap();
            assert_eq!(swept, 0, "a sweep took a value under a live guard");
            assert_eq!(rl.len(), 1);
            drop(g);
            assert_eq!(drops.load(SeqCst), 1, "the last guard did not drop it");
        })
    });
    let late = t.join().unwrap();
    late_result(late);
    rl.reclaim_exited_blocking();
    assert_eq!(rl.len(), 0, "the tombstone was not swept");
    assert_eq!(drops.load(SeqCst), 1, "dropped twice");
}

/// The last guard of a value whose drop the exit work left to it, dropped inside
/// `on_behalf_of(job, ..)` in a late destructor: the value is dropped as its own rank, not as the
/// job. Found by mutation testing: the last guard's drop that dropped it as whatever rank the
/// thread was acting as survived.
fn a_late_guard_dropped_for_another_rank_drops_the_value_as_its_own<B: Backend>() {
    struct AsWhom(&'static Mutex<Vec<RankId>>);
    impl Drop for AsWhom {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(RankId::current());
        }
    }
    let seen: &'static Mutex<Vec<RankId>> = common::leak(Mutex::new(Vec::new()));
    let rl: &'static RankLocal<AsWhom, B> = common::leak(RankLocal::new());
    let job = Rank::new();
    let job_id = job.id();
    let t = thread::spawn(move || {
        register_late();
        let g = rl.get_own_or(|| AsWhom(seen));
        let late = at_late_exit(move || on_behalf_of(job_id, move || drop(g)));
        (RankId::this_thread(), late)
    });
    let (own, late) = t.join().unwrap();
    late_result(late);
    assert_eq!(*seen.lock().unwrap(), [own], "dropped as another rank");
    drop(job);
}

/// `OwnRef::leak` in a late destructor: the value is kept, as a `get`'s is.
fn a_guard_leaked_by_a_late_destructor_keeps_the_value<B: Backend>() {
    let sink = common::leak(AtomicUsize::new(0));
    let drops = common::leak(AtomicUsize::new(0));
    let rl: &'static RankLocal<Tally, B> = common::leak(RankLocal::new());
    let late = thread::spawn(move || {
        register_late();
        let g = rl.get_own_or(|| Tally::new(sink, drops));
        at_late_exit(move || {
            let kept: &'static Tally = OwnRef::leak(g);
            kept.n.set(9);
        })
    })
    .join()
    .unwrap();
    late_result(late);
    rl.reclaim_exited_blocking();
    assert_eq!(drops.load(SeqCst), 0, "a leaked guard's value was dropped");
    assert_eq!(rl.len(), 1);
    assert_eq!(sink.load(SeqCst), 0);
}

/// Two guards held by a late destructor: one is leaked, then the other (the last) is dropped. The
/// value is kept, as the leaked `&T` needs, not dropped by the last guard. Found by mutation
/// testing: a last guard's drop that dropped the value whatever happened since survived.
fn a_late_guard_dropped_after_another_was_leaked_keeps_the_value<B: Backend>() {
    let sink = common::leak(AtomicUsize::new(0));
    let drops = common::leak(AtomicUsize::new(0));
    let rl: &'static RankLocal<Tally, B> = common::leak(RankLocal::new());
    let late = thread::spawn(move || {
        register_late();
        let g = rl.get_own_or(|| Tally::new(sink, drops));
        let g2 = rl.get_own_or(|| unreachable!("exists"));
        at_late_exit(move || {
            let kept: &'static Tally = OwnRef::leak(g);
            drop(g2); // the last counted guard
            assert_eq!(
                drops.load(SeqCst),
                0,
                "the last guard dropped a leaked value"
            );
            kept.n.set(9);
        })
    })
    .join()
    .unwrap();
    late_result(late);
    rl.reclaim_exited_blocking();
    assert_eq!(drops.load(SeqCst), 0, "a leaked guard's value was dropped");
    assert_eq!(rl.len(), 1);
}

/// `try_get_own` finds the thread's value however it was made: by `with` (its owner entry is not
/// the owner-only one) or by `get` (a kept value). Found by mutation testing: its slow path
/// answering `None` survived (every test made the value with the owner-only family first).
fn try_get_own_finds_a_value_made_by_with_or_get<B: Backend>() {
    let by_with = RankLocal::<AtomicUsize, B>::new();
    by_with.with(|v| v.store(3, SeqCst));
    assert_eq!(by_with.try_get_own().map(|v| v.load(SeqCst)), Some(3));
    let by_get = RankLocal::<AtomicUsize, B>::new();
    by_get.get_or(|| AtomicUsize::new(4));
    assert_eq!(by_get.try_get_own().map(|v| v.load(SeqCst)), Some(4));
    let none = RankLocal::<AtomicUsize, B>::new();
    assert!(none.try_get_own().is_none());
}

/// In a destructor that runs after the crate's exit work, `get_own_or` and `with_own_or` on maps
/// the thread never touched (or whose value its exit work dropped) make the values (std's
/// thread-locals would too) and reach them again;
/// a later sweep drops `with_own`'s, and `get_own`'s is kept (its guard escaped it). Found by mutation testing: the late paths' own-rank checks
/// answering `None` (or inverted) survived.
fn the_owner_only_family_makes_values_in_a_late_destructor<B: Backend>() {
    let sink = common::leak(AtomicUsize::new(0));
    let drops = common::leak(AtomicUsize::new(0));
    let by_get: &'static RankLocal<Tally, B> = common::leak(RankLocal::new());
    let by_with: &'static RankLocal<Tally, B> = common::leak(RankLocal::new());
    let again: &'static RankLocal<Tally, B> = common::leak(RankLocal::new());
    let late = thread::spawn(move || {
        register_late();
        again.with_own_or(|| Tally::new(sink, drops), |t| t.n.set(10)); // dropped at exit
        at_late_exit(move || {
            assert_eq!(
                drops.load(SeqCst),
                1,
                "the exit work did not drop it (test setup)"
            );
            // its slot is a tombstone: the value is made anew
            let mut made = false;
            again.with_own_or(
                || {
                    made = true;
                    Tally::new(sink, drops)
                },
                |t| assert_eq!(t.n.get(), 0, "a dropped value was lent"),
            );
            assert!(made, "with_own_or reached the value its exit work dropped");
            let g = by_get.get_own_or(|| Tally::new(sink, drops));
            g.n.set(1);
            let g2 = by_get.get_own_or(|| unreachable!("made just above"));
            assert!(std::ptr::eq(&*g, &*g2));
            drop((g, g2));
            by_with.with_own_or(|| Tally::new(sink, drops), |t| t.n.set(2));
            by_with.with_own_or(
                || unreachable!("made just above"),
                |t| t.n.set(t.n.get() + 1),
            );
        })
    })
    .join()
    .unwrap();
    late_result(late);
    assert_eq!(
        drops.load(SeqCst),
        1,
        "dropped before its rank's exit was swept"
    );
    by_get.reclaim_exited_blocking();
    by_with.reclaim_exited_blocking();
    again.reclaim_exited_blocking();
    // `with_own`'s are swept; `get_own`'s is kept (a late guard escapes it, as documented)
    assert_eq!(drops.load(SeqCst), 3, "a late with_own value was not swept");
    assert_eq!(sink.load(SeqCst), 13);
    assert_eq!((by_get.len(), by_get.kept_exited()), (1, 1));
    assert_eq!((by_with.len(), again.len()), (0, 0));
}

/// A `Sync` value another thread read (`with_for` moved it on from the owner-only state) while a
/// guard of it lives past the exit work: kept, so a sweep after the rank's exit cannot free it
/// under the guard.
fn a_value_a_reader_moved_on_is_kept_while_a_late_guard_lives<B: Backend>() {
    struct Flagged(AtomicUsize, &'static AtomicUsize);
    impl Drop for Flagged {
        fn drop(&mut self) {
            self.1.fetch_add(1, SeqCst);
        }
    }
    let drops = common::leak(AtomicUsize::new(0));
    let rl: &'static RankLocal<Flagged, B> = common::leak(RankLocal::new());
    let (id_tx, id_rx) = mpsc::channel();
    let (read_tx, read_rx) = mpsc::channel::<()>();
    let (late_tx, late_rx) = mpsc::channel::<()>();
    let (swept_tx, swept_rx) = mpsc::channel::<()>();
    let t = thread::spawn(move || {
        register_late();
        let g = rl.get_own_or(|| Flagged(AtomicUsize::new(3), drops));
        id_tx.send(RankId::current()).unwrap();
        read_rx.recv().unwrap();
        at_late_exit(move || {
            late_tx.send(()).unwrap();
            swept_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the sweep did not return");
            assert_eq!(drops.load(SeqCst), 0, "swept under a live guard");
            assert_eq!(g.0.load(SeqCst), 4);
        })
    });
    let id = id_rx.recv().unwrap();
    assert_eq!(rl.with_for(id, |v| v.0.fetch_add(1, SeqCst)), Some(3));
    read_tx.send(()).unwrap();
    late_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the late destructor did not run");
    rl.reclaim_exited(); // the rank exited: a SCOPED value would be swept here
    swept_tx.send(()).unwrap();
    late_result(t.join().unwrap());
    rl.reclaim_exited_blocking();
    assert_eq!(
        drops.load(SeqCst),
        0,
        "a value read through a guard was swept"
    );
    assert_eq!(rl.len(), 1);
}

/// A `Sync` value's `&T`, borrowed from a guard by a scoped thread: the borrow ends before the
/// guard's drop, on the owner thread, so the value is still dropped at its thread's exit.
fn a_sync_value_lent_to_a_scoped_thread_from_a_guard<B: Backend>() {
    struct Flagged(AtomicUsize, Arc<AtomicUsize>);
    impl Drop for Flagged {
        fn drop(&mut self) {
            self.1.fetch_add(self.0.load(SeqCst), SeqCst);
        }
    }
    let sink = Arc::new(AtomicUsize::new(0));
    let rl = RankLocal::<Flagged, B>::new();
    thread::scope(|s| {
        s.spawn(|| {
            let g = rl.get_own_or(|| Flagged(AtomicUsize::new(0), Arc::clone(&sink)));
            let v: &Flagged = &g;
            thread::scope(|inner| {
                for _ in 0..4 {
                    inner.spawn(move || v.0.fetch_add(1, SeqCst));
                }
            });
        })
        .join()
        .unwrap();
        assert_eq!(sink.load(SeqCst), 4, "not dropped at its thread's exit");
    });
}

fn guards_forward_debug_and_display<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    let g = rl.get_own_or(|| 7);
    assert_eq!(format!("{g:?} {g}"), "7 7");
    let names = RankLocal::<String, B>::new();
    assert_eq!(format!("{:?}", names.get_own_or(|| "a".into())), "\"a\"");
    assert_eq!(format!("{:>3}", names.get_own()), "  a");
}

/// `&mut` access (`iter_mut`) takes the thread's OWNED instance out of the gate (it becomes a
/// value a sweep drops after the rank's exit): a guard taken after it, held by a late destructor,
/// must not let that sweep free the value under it (the guard's hit path does not look at the
/// state, so the own cache entry must not survive the `&mut` access).
fn a_guard_after_mut_access_keeps_what_left_the_gate<B: Backend>() {
    struct Flagged(AtomicUsize, &'static AtomicUsize);
    impl Drop for Flagged {
        fn drop(&mut self) {
            self.1.fetch_add(1, SeqCst);
        }
    }
    let drops = common::leak(AtomicUsize::new(0));
    let (rl_tx, rl_rx) = mpsc::channel::<&'static RankLocal<Flagged, B>>();
    let (late_tx, late_rx) = mpsc::channel::<()>();
    let (swept_tx, swept_rx) = mpsc::channel::<()>();
    let t = thread::spawn(move || {
        register_late();
        let rl: &'static mut RankLocal<Flagged, B> = Box::leak(Box::new(RankLocal::new()));
        rl.with_own_or(|| Flagged(AtomicUsize::new(1), drops), |_| ()); // OWNED, cached
        assert_eq!(rl.iter_mut().count(), 1); // out of the gate
        let rl: &'static RankLocal<Flagged, B> = rl;
        let g = rl.get_own_or(|| unreachable!("exists"));
        rl_tx.send(rl).unwrap();
        at_late_exit(move || {
            late_tx.send(()).unwrap();
            swept_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the sweep did not return");
            assert_eq!(drops.load(SeqCst), 0, "swept under a live guard");
            assert_eq!(g.0.load(SeqCst), 1);
        })
    });
    let rl = rl_rx.recv().unwrap();
    late_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the late destructor did not run");
    rl.reclaim_exited(); // the rank exited: a value only scoped calls reached goes here
    swept_tx.send(()).unwrap();
    late_result(t.join().unwrap());
    rl.reclaim_exited_blocking();
    assert_eq!(
        drops.load(SeqCst),
        0,
        "a value read through a guard was swept"
    );
}
