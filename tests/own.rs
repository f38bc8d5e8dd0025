//! The owner-only family (`get_own`, `get_own_or`, `try_get_own`, `with_own`, `with_own_or`,
//! `try_with_own`) on values that are `Send` but not `Sync`, and dropping at thread exit what only
//! `with_own` reached (issue 28, SPEC item 14, I39). Every test here fails before issue 28: the
//! family did not exist (and a `RefCell` or `Cell` was rejected); the exit-drop tests counted 0
//! drops at `join` where std's `thread_local!` counts all.

mod common;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;

use ranklocal::{on_behalf_of, Backend, OwnRef, Rank, RankId, RankLocal};

common::backend_tests! {
    the_family_on_refcell_and_cell,
    own_inside_on_behalf_of_is_the_os_threads_own,
    with_own_and_with_reach_the_same_instance,
    with_own_values_are_dropped_at_exit_before_join,
    with_own_values_of_many_maps_are_dropped_at_exit_before_join,
    exit_drops_run_on_the_thread_as_its_rank,
    leaked_get_own_values_are_kept_after_exit,
    with_upgraded_values_wait_for_a_sweep,
    with_for_that_joins_the_owner_does_not_deadlock,
    exit_drop_while_the_rank_local_is_dropped,
    exit_drop_while_mut_operations_run,
    a_tombstone_is_refilled_and_never_iterated,
    mut_access_never_yields_a_tombstone,
    a_value_iter_mut_took_from_its_owner_is_swept_after_the_owner_exits,
    a_value_made_by_a_late_destructor_is_swept,
    debug_shows_the_own_value_only,
    tombstones_wait_for_a_held_iterator_and_do_not_pile_up,
    a_scoped_refill_of_a_tombstone_runs_init_unpinned,
}

/// A scoped first touch (another rank's `with`) that finds the rank's tombstone refills it after
/// an `init` that runs outside every read, as any first touch's: `reclaim_exited_blocking`, which
/// panics inside a read, works in that `init`. It panicked when the first touch pinned before it
/// saw the tombstone (and kept the pin through the claim and `init`).
fn a_scoped_refill_of_a_tombstone_runs_init_unpinned<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let other = RankLocal::<AtomicUsize, B>::new();
    let id = thread::scope(|s| {
        s.spawn(|| {
            rl.with_own(|v| v.store(1, SeqCst));
            RankId::current()
        })
        .join()
        .unwrap() // the thread ended: its exit work left a tombstone
    });
    assert_eq!(rl.len(), 1);
    let init = || {
        other.reclaim_exited_blocking();
        AtomicUsize::new(7)
    };
    let seen = on_behalf_of(id, || rl.with_or(init, |v| v.load(SeqCst)));
    assert_eq!(seen, 7);
    assert_eq!(rl.len(), 1, "the tombstone was refilled in place");
}

/// The slots of values dropped at exit (tombstones) are freed once no `iter()` that may hold them
/// in its snapshot lives: a held iterator keeps the ones its snapshot holds (and only while it
/// lives; `len` counts them meanwhile), and threads that come and go between iterations leave
/// nothing behind. `iter` never yields a tombstone.
fn tombstones_wait_for_a_held_iterator_and_do_not_pile_up<B: Backend>() {
    use std::sync::atomic::AtomicU64;
    let rl = RankLocal::<AtomicU64, B>::new();
    let visit = |rl: &RankLocal<AtomicU64, B>| {
        thread::scope(|s| {
            s.spawn(|| rl.with_own(|v| v.fetch_add(1, SeqCst)))
                .join()
                .unwrap();
        })
    };
    let rounds = if cfg!(miri) { 20 } else { 200 };
    for _ in 0..rounds {
        visit(&rl);
        assert_eq!(rl.iter().count(), 0, "iter yielded a value dropped at exit");
    }
    rl.reclaim_exited_blocking(); // `len` counts what waits for its grace period
    assert_eq!(rl.len(), 0, "tombstones piled up behind the iterations");
    // a thread whose value is in a held iterator's snapshot exits: its tombstone waits for it
    let (touched_tx, touched_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let held = thread::scope(|s| {
        let rl = &rl;
        let h = s.spawn(move || {
            rl.with_own(|v| v.fetch_add(1, SeqCst));
            touched_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        });
        touched_rx.recv().unwrap();
        let held = rl.iter(); // its snapshot holds the value, then the tombstone
        go_tx.send(()).unwrap();
        h.join().unwrap();
        held
    });
    rl.reclaim_exited();
    assert_eq!(
        rl.len(),
        1,
        "a sweep freed a tombstone a live iterator holds"
    );
    assert_eq!(held.count(), 0); // reads the tombstone's state: alive (Miri checks it)
    rl.reclaim_exited_blocking();
    assert_eq!(
        rl.len(),
        0,
        "a dropped iterator still held a tombstone back"
    );
}

/// Threads × values per thread for the exit-drop tests (small under Miri).
const THREADS: usize = if cfg!(miri) { 2 } else { 8 };
const PER_THREAD: usize = if cfg!(miri) { 3 } else { 1000 };

/// A per-thread tally that is `Send` but not `Sync` (a `Cell`), whose drop flushes its count into
/// a shared sink: the pattern of a per-thread buffer flushed at thread exit.
struct Tally<'a> {
    n: Cell<usize>,
    sink: &'a AtomicUsize,
    drops: &'a AtomicUsize,
}

impl<'a> Tally<'a> {
    fn new(sink: &'a AtomicUsize, drops: &'a AtomicUsize) -> Self {
        Tally {
            n: Cell::new(0),
            sink,
            drops,
        }
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        self.sink.fetch_add(self.n.get(), SeqCst);
        self.drops.fetch_add(1, SeqCst);
    }
}

fn the_family_on_refcell_and_cell<B: Backend>() {
    let rl = RankLocal::<RefCell<Vec<u32>>, B>::new();
    assert!(
        rl.with_own_existing(|_| ()).is_none(),
        "try_with_own created one"
    );
    assert!(rl.try_get_own().is_none(), "try_get_own created one");
    assert!(rl.is_empty());
    rl.with_own(|v| v.borrow_mut().push(1));
    rl.with_own_or(|| unreachable!("exists"), |v| v.borrow_mut().push(2));
    assert_eq!(
        rl.with_own_existing(|v| v.borrow().clone()),
        Some(vec![1, 2])
    );
    let r = rl.get_own();
    assert!(std::ptr::eq(
        &*r,
        &*rl.get_own_or(|| unreachable!("exists"))
    ));
    assert!(std::ptr::eq(&*r, &*rl.try_get_own().unwrap()));
    assert_eq!(*r.borrow(), [1, 2]);
    assert_eq!(rl.len(), 1);

    let cells = RankLocal::<Cell<u64>, B>::new();
    cells.get_own_or(|| Cell::new(40)).set(41);
    cells.with_own(|c| c.set(c.get() + 1));
    assert_eq!(cells.with_own_existing(Cell::get), Some(42));
    // every thread has its own
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                assert_eq!(cells.with_own_existing(Cell::get), None);
                cells.with_own(|c| c.set(7));
                assert_eq!(cells.get_own().get(), 7);
            });
        }
    });
    assert_eq!(cells.get_own().get(), 42);
}

fn own_inside_on_behalf_of_is_the_os_threads_own<B: Backend>() {
    let rl = RankLocal::<Cell<u32>, B>::new();
    rl.with_own(|c| c.set(1));
    let job = Rank::new();
    on_behalf_of(job.id(), || {
        rl.with_own(|c| c.set(c.get() + 1));
        assert_eq!(rl.get_own().get(), 2);
        assert_eq!(rl.with_own_existing(Cell::get), Some(2));
    });
    assert_eq!(rl.len(), 1, "the job got an instance");
    // the initializer runs as the rank it builds for, the thread's own
    let built_as = RankLocal::<Cell<Option<RankId>>, B>::new();
    on_behalf_of(job.id(), || {
        built_as.with_own_or(|| Cell::new(Some(RankId::current())), |_| ());
        built_as.get_own_or(|| unreachable!("exists"));
    });
    assert_eq!(built_as.with_own(Cell::get), Some(RankId::this_thread()));
    // a delegate of this thread's rank, on another thread, reaches *its* own instance
    let me = RankId::current();
    thread::scope(|s| {
        s.spawn(|| on_behalf_of(me, || rl.with_own(|c| c.set(10))));
    });
    assert_eq!(rl.get_own().get(), 2);
    assert_eq!(rl.len(), 2);
}

fn with_own_and_with_reach_the_same_instance<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    rl.with_own(|v| v.store(3, SeqCst));
    assert_eq!(rl.with(|v| v.load(SeqCst)), 3);
    let a = rl.with_own(|v| v as *const AtomicUsize as usize);
    let b = rl.with(|v| v as *const AtomicUsize as usize);
    assert_eq!(a, b);
    assert!(std::ptr::eq(rl.get(), &*rl.get_own()));
    // and the other way round, on a fresh thread
    thread::scope(|s| {
        s.spawn(|| {
            rl.with(|v| v.store(9, SeqCst));
            assert_eq!(rl.with_own(|v| v.load(SeqCst)), 9);
            assert_eq!(rl.len(), 2);
        });
    });
}

/// std's `thread_local!` guarantee: a value only `with_own` reached is dropped when its thread
/// exits, before `join` returns (before issue 28: 0 of 8,000 after `join`).
fn with_own_values_are_dropped_at_exit_before_join<B: Backend>() {
    let sink: &'static AtomicUsize = common::leak(AtomicUsize::new(0));
    let drops: &'static AtomicUsize = common::leak(AtomicUsize::new(0));
    let rl: &'static RankLocal<Tally<'static>, B> = common::leak(RankLocal::new());
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            thread::spawn(move || {
                for _ in 0..PER_THREAD {
                    rl.with_own_or(|| Tally::new(sink, drops), |t| t.n.set(t.n.get() + 1));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(sink.load(SeqCst), THREADS * PER_THREAD, "flushed at exit");
    assert_eq!(drops.load(SeqCst), THREADS);
    // the tombstones' slots are freed by a sweep, without dropping anything again
    rl.reclaim_exited_blocking();
    assert_eq!(rl.len(), 0);
    assert_eq!(drops.load(SeqCst), THREADS, "a value dropped twice");
}

/// One thread's values in many live `RankLocal`s (more than its exit hook's first pruning
/// length, 4) are all dropped at its exit, before `join` returns: the hook's pruning keeps the
/// exit work of every live `RankLocal`. Found by mutation testing: a pruning that dropped live
/// `RankLocal`s' exit work survived (no test touched more than 4 with `with_own` on one thread).
fn with_own_values_of_many_maps_are_dropped_at_exit_before_join<B: Backend>() {
    let maps = if cfg!(miri) { 9 } else { 64 };
    let sink: &'static AtomicUsize = common::leak(AtomicUsize::new(0));
    let drops: &'static AtomicUsize = common::leak(AtomicUsize::new(0));
    let rls: Vec<&'static RankLocal<Tally<'static>, B>> =
        (0..maps).map(|_| common::leak(RankLocal::new())).collect();
    let touched = rls.clone();
    thread::spawn(move || {
        for rl in touched {
            rl.with_own_or(|| Tally::new(sink, drops), |t| t.n.set(1));
        }
    })
    .join()
    .unwrap();
    assert_eq!(
        drops.load(SeqCst),
        maps,
        "values not dropped at their thread's exit"
    );
    assert_eq!(sink.load(SeqCst), maps);
    for rl in rls {
        rl.reclaim_exited_blocking();
        assert_eq!(rl.len(), 0);
    }
}

fn exit_drops_run_on_the_thread_as_its_rank<B: Backend>() {
    struct Where(Arc<std::sync::Mutex<Vec<(thread::ThreadId, RankId)>>>);
    impl Drop for Where {
        fn drop(&mut self) {
            let mut seen = self.0.lock().unwrap();
            seen.push((thread::current().id(), RankId::current()));
        }
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let rl = RankLocal::<Where, B>::new();
    let (id, rank) = thread::scope(|s| {
        let t = s.spawn(|| {
            rl.with_own_or(|| Where(Arc::clone(&seen)), |_| ());
            (thread::current().id(), RankId::current())
        });
        let id = t.thread().id();
        let r = t.join().unwrap();
        assert_eq!(id, r.0);
        assert_eq!(seen.lock().unwrap().len(), 1, "not dropped before join");
        r
    });
    assert_eq!(*seen.lock().unwrap(), [(id, rank)]);
}

/// `OwnRef::leak` keeps the value (as `get_own` did before it returned a guard).
fn leaked_get_own_values_are_kept_after_exit<B: Backend>() {
    let sink = common::counter();
    let drops = common::counter();
    let rl = RankLocal::<Tally<'_>, B>::new();
    thread::scope(|s| {
        s.spawn(|| {
            rl.with_own_or(|| Tally::new(sink, drops), |t| t.n.set(1));
            OwnRef::leak(rl.get_own_or(|| unreachable!("exists")))
                .n
                .set(2); // kept
        })
        .join()
        .unwrap();
        s.spawn(|| {
            let _ = rl.try_get_own(); // nothing to keep: this thread has none
            OwnRef::leak(rl.get_own_or(|| Tally::new(sink, drops)))
                .n
                .set(3);
        })
        .join()
        .unwrap();
    });
    rl.reclaim_exited_blocking();
    assert_eq!(drops.load(SeqCst), 0, "an escaped value was dropped");
    assert_eq!(rl.len(), 2);
    drop(rl);
    assert_eq!(drops.load(SeqCst), 2);
    assert_eq!(sink.load(SeqCst), 5);
}

/// A rank-aware scoped read (`with`, `with_for`, `for_each`) makes the value wait for a sweep
/// after its rank exits (SPEC item 10), as before issue 28.
fn with_upgraded_values_wait_for_a_sweep<B: Backend>() {
    struct Flag(Arc<AtomicUsize>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let rl: &'static RankLocal<Flag, B> = common::leak(RankLocal::new());
    let d = Arc::clone(&drops);
    let new = move || Flag(Arc::clone(&d));
    let (tx, rx) = mpsc::channel();
    // one upgraded by its own `with`, one by another thread's `with_for`, one by `for_each`
    let mut ts = Vec::new();
    for how in 0..3 {
        let (new, tx) = (new.clone(), tx.clone());
        let (go_tx, go_rx) = mpsc::channel::<()>();
        ts.push(thread::spawn(move || {
            rl.with_own_or(new.clone(), |_| ());
            if how == 0 {
                rl.with_or(|| unreachable!("exists"), |_| ());
            }
            tx.send(RankId::current()).unwrap();
            go_rx.recv().unwrap();
        }));
        let rank = rx.recv().unwrap();
        match how {
            1 => assert!(rl.with_for(rank, |_| ()).is_some()),
            2 => rl.for_each(|_, _| ()),
            _ => {}
        }
        go_tx.send(()).unwrap();
    }
    for t in ts {
        t.join().unwrap();
    }
    assert_eq!(
        drops.load(SeqCst),
        0,
        "an upgraded value was dropped at exit"
    );
    rl.reclaim_exited_blocking();
    assert_eq!(drops.load(SeqCst), 3, "the sweep did not drop them");
    assert_eq!(rl.len(), 0);
}

/// A `with_for` on another thread that joins the owner: the owner's exit never waits for that
/// read (the read moved the value on first, I39), so nothing deadlocks.
fn with_for_that_joins_the_owner_does_not_deadlock<B: Backend>() {
    let rl: &'static RankLocal<AtomicUsize, B> = common::leak(RankLocal::new());
    common::within_deadline(move || {
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let owner = thread::spawn(move || {
            rl.with_own(|v| v.store(5, SeqCst));
            tx.send(RankId::current()).unwrap();
            go_rx.recv().unwrap();
        });
        let rank = rx.recv().unwrap();
        let mut owner = Some(owner);
        let seen = rl.with_for(rank, |v| {
            go_tx.send(()).unwrap();
            owner.take().unwrap().join().unwrap(); // the owner exits while this reads
            v.load(SeqCst)
        });
        assert_eq!(seen, Some(5));
        rl.reclaim_exited_blocking();
        assert_eq!(rl.len(), 0);
    });
}

/// Exactly one drop per value when the `RankLocal` (a local, or in an `Arc`) is dropped before,
/// while or after its threads exit: the drop waits for values the exit work is dropping, so
/// every value is dropped when it returns.
fn exit_drop_while_the_rank_local_is_dropped<B: Backend>() {
    for round in 0..if cfg!(miri) { 2 } else { 20 } {
        let sink = common::counter();
        let drops = common::counter();
        let barrier = Barrier::new(THREADS + 1);
        thread::scope(|s| {
            let rl = Arc::new(RankLocal::<Tally<'_>, B>::new());
            for i in 0..THREADS {
                let rl = Arc::clone(&rl);
                let (sink, drops, barrier) = (sink, drops, &barrier);
                s.spawn(move || {
                    rl.with_own_or(|| Tally::new(sink, drops), |t| t.n.set(1));
                    barrier.wait();
                    if (i + round) % 2 == 0 {
                        drop(rl); // before this thread's exit work, maybe the last one
                    } // else with the closure's captures, just before it
                });
            }
            barrier.wait();
            drop(rl); // while the threads exit
        });
        // `scope` may return before the threads' exit work ran, but not before the `RankLocal`
        // was dropped, which waited for or did every drop
        assert_eq!(drops.load(SeqCst), THREADS, "round {round}");
        assert_eq!(sink.load(SeqCst), THREADS, "round {round}");
    }
}

/// `clear`, `iter_mut` and `into_iter` race the exit work of scoped threads (whose thread-local
/// destructors may run after `scope` returns): every value is dropped exactly once, and no
/// `&mut T` lent is dropped under it.
fn exit_drop_while_mut_operations_run<B: Backend>() {
    for op in 0..3 {
        let sink = common::counter();
        let drops = common::counter();
        let mut rl = RankLocal::<Tally<'_>, B>::new();
        thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| rl.with_own_or(|| Tally::new(sink, drops), |t| t.n.set(1)));
            }
        });
        match op {
            0 => {
                rl.clear();
                drop(rl);
            }
            1 => {
                for (_, t) in rl.iter_mut() {
                    t.n.set(t.n.get() + 1);
                }
                drop(rl);
            }
            _ => drop(rl.into_iter().collect::<Vec<_>>()),
        }
        let ok = common::patiently(|| drops.load(SeqCst) == THREADS, || {});
        assert!(ok, "op {op}: {} drops", drops.load(SeqCst));
        assert!(sink.load(SeqCst) >= THREADS, "op {op}");
    }
}

/// `iter_mut` while an owner that reached its value only by `with_own` is still alive: the value
/// leaves the exit work's reach (as any `&mut` access's does) and becomes an ordinary one, which a
/// sweep drops once the owner has exited. Found by mutation testing: `&mut` access that left it
/// owner-only (so neither the exit work nor any sweep ever dropped it) survived.
fn a_value_iter_mut_took_from_its_owner_is_swept_after_the_owner_exits<B: Backend>() {
    let drops: &'static AtomicUsize = common::leak(AtomicUsize::new(0));
    let sink: &'static AtomicUsize = common::leak(AtomicUsize::new(0));
    let rl = Arc::new(std::sync::Mutex::new(RankLocal::<Tally<'static>, B>::new()));
    let (touched_tx, touched_rx) = mpsc::channel::<()>();
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    let owner = {
        let rl = Arc::clone(&rl);
        thread::spawn(move || {
            rl.lock()
                .unwrap()
                .with_own_or(|| Tally::new(sink, drops), |t| t.n.set(1));
            touched_tx.send(()).unwrap();
            exit_rx.recv().unwrap();
        })
    };
    touched_rx.recv().unwrap();
    {
        let mut rl = rl.lock().unwrap();
        let n: usize = rl.iter_mut().map(|(_, t)| t.n.get()).sum();
        assert_eq!(n, 1);
    }
    exit_tx.send(()).unwrap();
    owner.join().unwrap();
    assert_eq!(
        drops.load(SeqCst),
        0,
        "dropped by the exit work after iter_mut took it"
    );
    let rl = rl.lock().unwrap();
    rl.reclaim_exited_blocking();
    assert_eq!(drops.load(SeqCst), 1, "not dropped after its owner exited");
    assert_eq!(rl.len(), 0);
}

/// After its owner exits, a rank's slot is a tombstone: `iter` never yields it, a delegate of the
/// exited rank gets a fresh instance (refilled in place), and sweeps free the slots.
fn a_tombstone_is_refilled_and_never_iterated<B: Backend>() {
    let drops = Arc::new(AtomicUsize::new(0));
    struct D(Arc<AtomicUsize>, u32);
    impl Drop for D {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let rl = RankLocal::<D, B>::new();
    let ranks: Vec<RankId> = (0..2)
        .map(|i| {
            let d = Arc::clone(&drops);
            thread::scope(|s| {
                s.spawn(|| {
                    rl.with_own_or(|| D(d, i), |_| ());
                    RankId::current()
                })
                .join()
                .unwrap()
            })
        })
        .collect();
    assert_eq!(drops.load(SeqCst), 2, "dropped at exit");
    assert!(rl.get_for(ranks[0]).is_none(), "a tombstone was handed out");
    assert!(rl.with_for(ranks[0], |_| ()).is_none());
    let mut n = 0;
    rl.for_each(|_, _| n += 1);
    assert_eq!(n, 0, "for_each lent a tombstone");
    // a delegate of an exited rank makes a new instance in the tombstone's slot
    let d = Arc::clone(&drops);
    on_behalf_of(ranks[0], || assert_eq!(rl.get_or(|| D(d, 7)).1, 7));
    assert_eq!(rl.get_for(ranks[0]).map(|d| d.1), Some(7));
    assert_eq!(rl.iter().map(|(_, d)| d.1).collect::<Vec<_>>(), [7]);
    // the other tombstone's slot is freed by a sweep once no iterator lives (`len` counts it
    // until then)
    rl.reclaim_exited();
    assert_eq!(rl.len(), 1, "a sweep left the other tombstone");
    drop(rl);
    assert_eq!(drops.load(SeqCst), 3);
}

/// `iter_mut` and `into_iter` right after owners exited (their slots are tombstones, not swept
/// yet) yield only the values still in place, and free the tombstones without dropping anything
/// again. Found by mutation testing: `&mut` access that kept the tombstones in the map (and so
/// handed out their moved-out values) survived.
fn mut_access_never_yields_a_tombstone<B: Backend>() {
    let drops = Arc::new(AtomicUsize::new(0));
    struct D(Arc<AtomicUsize>, u32);
    impl Drop for D {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let mut rl = RankLocal::<D, B>::new();
    let exit_owners = |rl: &RankLocal<D, B>| {
        for i in 0..2 {
            let d = Arc::clone(&drops);
            thread::scope(|s| {
                s.spawn(|| rl.with_own_or(|| D(d, i), |_| ()))
                    .join()
                    .unwrap(); // joined: its exit work has run
            });
        }
    };
    rl.with_own_or(|| D(Arc::clone(&drops), 9), |_| ()); // this thread's, in place
    exit_owners(&rl);
    assert_eq!(drops.load(SeqCst), 2, "dropped at exit");
    let seen: Vec<u32> = rl.iter_mut().map(|(_, d)| d.1).collect();
    assert_eq!(seen, [9], "iter_mut yielded a tombstone");
    assert_eq!(rl.len(), 1, "iter_mut left the tombstones");
    exit_owners(&rl);
    assert_eq!(drops.load(SeqCst), 4, "dropped at exit");
    let owned: Vec<(RankId, u32)> = rl.into_iter().map(|(r, d)| (r, d.1)).collect();
    assert_eq!(
        owned,
        [(RankId::current(), 9)],
        "into_iter yielded a tombstone"
    );
    assert_eq!(drops.load(SeqCst), 5, "a value dropped twice or not at all");
}

/// A value made by a thread-local destructor that runs after the crate's exit work is dropped by
/// a later sweep (std's thread-locals registered before the crate's run after it on the usual
/// platforms; if not, it is dropped at exit: either way exactly once).
fn a_value_made_by_a_late_destructor_is_swept<B: Backend>() {
    /// Runs its closure when the thread's thread-locals are destroyed.
    struct OnExit(Cell<Option<Box<dyn FnOnce()>>>);
    impl Drop for OnExit {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    thread_local! {
        static ON_EXIT: OnExit = const { OnExit(Cell::new(None)) };
    }
    let sink: &'static AtomicUsize = common::leak(AtomicUsize::new(0));
    let drops: &'static AtomicUsize = common::leak(AtomicUsize::new(0));
    let rl: &'static RankLocal<Tally<'static>, B> = common::leak(RankLocal::new());
    thread::spawn(move || {
        // registered before the crate's exit hook (the thread has no rank id yet)
        ON_EXIT.with(|o| {
            o.0.set(Some(Box::new(move || {
                rl.with_own_or(|| Tally::new(sink, drops), |t| t.n.set(t.n.get() + 1));
                rl.with_own_or(
                    || unreachable!("made just above"),
                    |t| t.n.set(t.n.get() + 1),
                );
            })))
        });
        let _ = RankId::current(); // the crate's exit hook, registered after
    })
    .join()
    .unwrap();
    common::reclaim_until(rl, drops, 1);
    assert_eq!(sink.load(SeqCst), 2);
    assert_eq!(rl.len(), 0);
}

fn debug_shows_the_own_value_only<B: Backend>() {
    let rl = RankLocal::<RefCell<u32>, B>::new();
    let name = B::NAME;
    assert_eq!(
        format!("{rl:?}"),
        format!("RankLocal {{ backend: {name:?}, len: 0, own: None }}")
    );
    let job = Rank::new();
    on_behalf_of(job.id(), || rl.with_own(|v| *v.borrow_mut() = 5)); // still this thread's own
    thread::scope(|s| {
        s.spawn(|| {
            rl.get_own_or(|| RefCell::new(6));
        });
    });
    assert_eq!(
        format!("{rl:?}"),
        format!("RankLocal {{ backend: {name:?}, len: 2, own: Some(RefCell {{ value: 5 }}) }}")
    );
    // and nothing escaped: the own value is still dropped at exit
    let shown = thread::scope(|s| {
        s.spawn(|| {
            rl.with_own(|v| *v.borrow_mut() = 8);
            format!("{rl:?}")
        })
        .join()
        .unwrap()
    });
    assert!(
        shown.ends_with("own: Some(RefCell { value: 8 }) }"),
        "{shown}"
    );
}

static KEY_SINK: AtomicUsize = AtomicUsize::new(0);

/// A `rank_local!` value that is `Send` but not `Sync`, flushed when dropped.
struct KeyTally(Cell<usize>);

impl Drop for KeyTally {
    fn drop(&mut self) {
        KEY_SINK.fetch_add(self.0.get(), SeqCst);
    }
}

ranklocal::rank_local! {
    static KEY_SPANS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    static KEY_TALLY: KeyTally = KeyTally(Cell::new(0));
}

/// `rank_local!` takes a `RefCell`/`Cell` value (issue 28: rejected before) and its key has the
/// family: the OS thread's own instance also inside `on_behalf_of`, dropped at exit before `join`.
#[test]
fn a_keys_own_family_and_exit_drop() {
    KEY_SPANS.with_own(|s| s.borrow_mut().push(1));
    let job = Rank::new();
    on_behalf_of(job.id(), || KEY_SPANS.with_own(|s| s.borrow_mut().push(2)));
    assert_eq!(*KEY_SPANS.get_own().borrow(), [1, 2]);
    assert!(std::ptr::eq(
        &*KEY_SPANS.get_own(),
        &*KEY_SPANS.try_get_own().unwrap()
    ));
    on_behalf_of(job.id(), || {
        assert_eq!(KEY_SPANS.with_own_existing(|s| s.borrow().len()), Some(2));
        assert_eq!(KEY_SPANS.get_own().borrow().len(), 2);
    });
    assert_eq!(KEY_SPANS.len(), 1, "the job got an instance");
    assert!(format!("{KEY_SPANS:?}").ends_with("own: Some(RefCell { value: [1, 2] }) }"));

    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            thread::spawn(|| {
                for _ in 0..PER_THREAD {
                    KEY_TALLY.with_own(|t| t.0.set(t.0.get() + 1));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(KEY_SINK.load(SeqCst), THREADS * PER_THREAD);
    assert_eq!(KEY_TALLY.with_own_existing(|t| t.0.get()), None);
}
