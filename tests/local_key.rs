//! std `LocalKey`'s shapes on `RankLocal` and on `rank_local!` keys, with std's meaning: `try_with`
//! and `try_with_own` create (and fail only once the thread's storage is torn down), the
//! never-creating forms are `with_existing`/`with_own_existing`; `set`, `take`, `replace`,
//! `with_borrow`, `with_borrow_mut`, `get_cell` on the calling thread's own `Cell`/`RefCell`,
//! dropped at its exit before `join`; `with_capacity`; `UnwindSafe`/`RefUnwindSafe` where `T` is.
//! Stamped over every backend where a backend is involved.

mod common;

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe, RefUnwindSafe, UnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use ranklocal::{
    on_behalf_of, rank_local, AccessError, Backend, Iter, Rank, RankLocal, RankLocalKey,
};

/// A std program ported as is: `X.try_with(|c| c.get()).unwrap_or(0)` reads 5 with std, so it must
/// here (it read 0 when `try_with` never created).
fn try_with_creates_as_std_does<B: Backend>() {
    let cells = RankLocal::<Cell<u32>, B>::new();
    assert_eq!(cells.try_with_own(|c| c.replace(5)).unwrap_or(9), 0);
    assert_eq!(cells.try_with_own(Cell::get).unwrap_or(0), 5);
    let counts = RankLocal::<AtomicU32, B>::new();
    assert_eq!(
        counts.try_with(|c| c.fetch_add(1, Ordering::Relaxed)),
        Ok(0)
    );
    assert_eq!(counts.len(), 1, "try_with creates the value");
    // the never-creating forms keep names that say so
    let fresh = RankLocal::<Cell<u32>, B>::new();
    assert_eq!(fresh.with_own_existing(Cell::get), None);
    let fresh = RankLocal::<AtomicU32, B>::new();
    assert_eq!(fresh.with_existing(|c| c.load(Ordering::Relaxed)), None);
    assert!(fresh.is_empty());
}

/// Runs its closure when this thread's thread-locals are destroyed.
struct RunOnDrop(RefCell<Option<Box<dyn FnOnce()>>>);

impl Drop for RunOnDrop {
    fn drop(&mut self) {
        if let Some(f) = self.0.borrow_mut().take() {
            f();
        }
    }
}

thread_local! {
    static LATE: RunOnDrop = const { RunOnDrop(RefCell::new(None)) };
}

/// From a thread-local destructor that runs after the crate's exit work, `try_with_own` and
/// `try_with` fail with `AccessError` (std's: the storage is torn down) instead of making a value
/// no exit drop will see; a destructor of the same thread that runs before it still succeeds.
fn try_with_fails_once_the_thread_is_torn_down<B: Backend>() {
    let rl: &'static RankLocal<Cell<u32>, B> = common::leak(RankLocal::new());
    let sync: &'static RankLocal<AtomicU32, B> = common::leak(RankLocal::new());
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        // Registered before the crate's first use on this thread: std runs thread-local
        // destructors in reverse order of registration, so this one runs after the crate's exit
        // hook, which the thread's first use below registers.
        LATE.with(|l| {
            *l.0.borrow_mut() = Some(Box::new(move || {
                let own = rl.try_with_own(Cell::get);
                let any = sync.try_with(|c| c.load(Ordering::Relaxed));
                let _ = tx.send((own, any));
            }))
        });
        assert_eq!(rl.try_with_own(|c| c.replace(1)), Ok(0));
    })
    .join()
    .unwrap();
    let (own, any) = rx.recv().expect("the late destructor ran");
    assert!(own.is_err(), "try_with_own after the exit work: {own:?}");
    assert!(any.is_err(), "try_with after the exit work: {any:?}");
    assert_eq!(
        sync.len(),
        0,
        "try_with created a value after the exit work"
    );
}

/// The `Cell` shortcuts act on the calling thread's own value, also inside `on_behalf_of`; `set`
/// on a fresh thread stores the value without building `T::default()`.
fn cell_shortcuts_as_std<B: Backend>() {
    let rl = RankLocal::<Cell<u64>, B>::new();
    assert_eq!(rl.get_cell(), 0);
    rl.set(7);
    assert_eq!(rl.get_cell(), 7);
    assert_eq!(rl.replace(8), 7);
    assert_eq!(rl.take(), 8);
    assert_eq!(rl.get_cell(), 0);
    let job = Rank::new();
    on_behalf_of(job.id(), || rl.set(3)); // still the thread's own
    assert_eq!(rl.get_cell(), 3);
    assert_eq!(rl.len(), 1);
    thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(rl.get_cell(), 0, "another thread's own value");
            rl.set(11);
        });
    });
    assert_eq!(rl.get_cell(), 3);

    /// A value whose `Default` must not run when `set` fills an empty slot.
    struct NoDefault(u32);
    impl Default for NoDefault {
        fn default() -> Self {
            panic!("set built T::default()");
        }
    }
    let nd = RankLocal::<Cell<Option<Box<NoDefault>>>, B>::new();
    let nd2 = RankLocal::<RefCell<Vec<u32>>, B>::new();
    nd.set(Some(Box::new(NoDefault(1))));
    assert_eq!(nd.take().map(|b| b.0), Some(1));
    nd2.set(vec![1]);
    assert_eq!(nd2.take(), [1]);
}

/// The `RefCell` shortcuts as std's, and a borrow conflict panics as `RefCell` does.
fn refcell_shortcuts_as_std<B: Backend>() {
    let rl = RankLocal::<RefCell<Vec<u32>>, B>::new();
    rl.with_borrow_mut(|v| v.push(1));
    rl.with_borrow_mut(|v| v.push(2));
    assert_eq!(rl.with_borrow(|v| v.clone()), [1, 2]);
    assert_eq!(rl.replace(vec![3]), [1, 2]);
    rl.set(vec![4, 5]);
    assert_eq!(rl.take(), [4, 5]);
    assert!(rl.with_borrow(Vec::is_empty));
    let conflict = catch_unwind(AssertUnwindSafe(|| {
        rl.with_borrow(|_| rl.with_borrow_mut(|v| v.push(9)));
    }));
    assert!(
        conflict.is_err(),
        "a mutable borrow inside a borrow must panic"
    );
}

/// Values set through the shortcuts are dropped at the thread's exit, on that thread, before
/// `join` returns (std's guarantee), on every backend.
fn shortcut_values_drop_at_exit_before_join<B: Backend>() {
    let drops = common::counter();
    struct D(&'static AtomicUsize, thread::ThreadId);
    impl Drop for D {
        fn drop(&mut self) {
            assert_eq!(thread::current().id(), self.1, "dropped on another thread");
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let cells = Arc::new(RankLocal::<Cell<Option<D>>, B>::new());
    let refs = Arc::new(RankLocal::<RefCell<Option<D>>, B>::new());
    for i in 0..if cfg!(miri) { 4 } else { 100 } {
        let (cells, refs) = (Arc::clone(&cells), Arc::clone(&refs));
        thread::spawn(move || {
            cells.set(Some(D(drops, thread::current().id())));
            refs.with_borrow_mut(|r| *r = Some(D(drops, thread::current().id())));
        })
        .join()
        .unwrap();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            2 * (i + 1),
            "not dropped before join"
        );
    }
}

/// `get_own_or_try`: a failing `init` inserts nothing and is retried; a value made this way is an
/// owner-only one, dropped at its thread's exit before `join`.
fn get_own_or_try_inserts_nothing_on_error<B: Backend>() {
    let rl = RankLocal::<RefCell<Vec<u32>>, B>::new();
    let err = rl.get_own_or_try(|| Err::<RefCell<Vec<u32>>, _>("refused"));
    assert_eq!(err.err(), Some("refused"));
    assert!(rl.try_get_own().is_none(), "a failed init inserted a value");
    assert!(rl.is_empty());
    let ok = rl.get_own_or_try(|| Ok::<_, &str>(RefCell::new(vec![1])));
    assert_eq!(*ok.unwrap().borrow(), [1]);
    let again = rl.get_own_or_try(|| Err::<RefCell<Vec<u32>>, _>("not called"));
    assert_eq!(*again.unwrap().borrow(), [1], "init ran again");
    let drops = common::counter();
    struct D(&'static AtomicUsize);
    impl Drop for D {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let rl = Arc::new(RankLocal::<Cell<Option<D>>, B>::new());
    let rl2 = Arc::clone(&rl);
    thread::spawn(move || {
        let g = rl2.get_own_or_try(|| Ok::<_, ()>(Cell::new(Some(D(drops)))));
        assert!(g.is_ok());
    })
    .join()
    .unwrap();
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "not dropped at the thread's exit"
    );
}

/// `with_capacity` is a hint: an empty map like `new()`.
fn with_capacity_is_an_empty_map<B: Backend>() {
    let rl = RankLocal::<AtomicU32, B>::with_capacity(1 << 20);
    assert!(rl.is_empty());
    rl.get().fetch_add(1, Ordering::Relaxed);
    assert_eq!(rl.len(), 1);
}

fn assert_unwind_safe<T: UnwindSafe + RefUnwindSafe>() {}

/// Unwind safety as the `thread_local` crate's `ThreadLocal<T: Send + UnwindSafe>`: a `RefCell`
/// map (a `Regex`-shaped holder) passes `catch_unwind` by reference.
fn unwind_safe_where_t_is<B: Backend>() {
    assert_unwind_safe::<RankLocal<RefCell<Vec<u8>>, B>>();
    assert_unwind_safe::<RankLocal<Cell<u32>, B>>();
    assert_unwind_safe::<RankLocal<AtomicU32, B>>();
    assert_unwind_safe::<Iter<'static, AtomicU32, B>>();
    struct Holder<B: Backend> {
        cache: RankLocal<RefCell<Vec<u8>>, B>,
    }
    assert_unwind_safe::<Holder<B>>();
    let h = Holder::<B> {
        cache: RankLocal::new(),
    };
    let r = catch_unwind(|| h.cache.with_own(|c| c.borrow().len()));
    assert_eq!(r.ok(), Some(0));
}

common::backend_tests! {
    try_with_creates_as_std_does,
    try_with_fails_once_the_thread_is_torn_down,
    cell_shortcuts_as_std,
    refcell_shortcuts_as_std,
    shortcut_values_drop_at_exit_before_join,
    with_capacity_is_an_empty_map,
    get_own_or_try_inserts_nothing_on_error,
    unwind_safe_where_t_is,
}

rank_local! {
    static COUNT: Cell<u32> = const { Cell::new(5) };
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static NAMES: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
    static HITS: AtomicU32 = const { AtomicU32::new(2) };
}

/// The std trap program on a key: `try_with_own(..).unwrap_or(0)` reads the initializer's 5.
#[test]
fn key_try_with_creates_with_the_initializer() {
    thread::spawn(|| {
        assert_eq!(COUNT.try_with_own(|c| c.get()).unwrap_or(0), 5);
        assert_eq!(HITS.try_with(|h| h.load(Ordering::Relaxed)), Ok(2));
        assert_eq!(DEPTH.with_own_existing(Cell::get), None);
    })
    .join()
    .unwrap();
}

#[test]
fn key_shortcuts_as_std() {
    thread::spawn(|| {
        DEPTH.set(DEPTH.get_cell() + 1);
        assert_eq!(DEPTH.replace(4), 1);
        assert_eq!(DEPTH.take(), 4);
        NAMES.with_borrow_mut(|n| n.push("a"));
        assert_eq!(NAMES.with_borrow(|n| n.len()), 1);
        assert_eq!(NAMES.replace(vec!["b"]), ["a"]);
        NAMES.set(vec!["c", "d"]);
        assert_eq!(NAMES.take(), ["c", "d"]);
    })
    .join()
    .unwrap();
}

#[test]
fn keys_are_unwind_safe_where_t_is() {
    assert_unwind_safe::<RankLocalKey<RefCell<Vec<&'static str>>>>();
    assert_unwind_safe::<&'static RankLocalKey<Cell<u32>>>();
    let r = catch_unwind(|| NAMES.with_borrow(|n| n.len()));
    assert!(r.is_ok());
}

#[test]
fn access_error_is_an_error() {
    fn is_error<E: std::error::Error + Clone + Copy + Eq + Send + Sync + 'static>() {}
    is_error::<AccessError>();
}
