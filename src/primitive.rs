//! The one place the crate gets its synchronization primitives from.
//!
//! Every atomic, `UnsafeCell`-like cell, lock, global and thread-local the crate uses comes from
//! here (crossbeam-epoch's `primitive` module is the model). In a normal build they are std's; under
//! `--cfg loom` with the `loom` feature (`cfg(ranklocal_loom)`, set by build.rs) they are loom's,
//! so that loom sees every shared access and every thread-local is per *loom* thread (a std
//! thread-local under loom would silently model all threads as one). `clippy-loom.toml` forbids
//! the std versions under the loom cfgs, so a bypass fails CI.
//!
//! Two loom builds: the crate's own models (`--cfg crossbeam_loom` too: crossbeam-epoch on loom)
//! and a dependent's (*dependent mode*, without it), where [`epoch`] is the crate's own loom-made
//! collector, [`Arc`] std's and a `RankLocal`'s parts `ModelLazy` (design.md, "Loom for
//! dependents").
//!
//! Two differences loom forces on the rest of the crate:
//! - loom's atomics and locks are not `const`, so globals are declared with [`global!`] (a plain
//!   `static` normally, `loom::lazy_static!` under loom) and `RankLocal::new` is only `const` in
//!   normal builds and dependent mode;
//! - loom's `thread_local!` has no `const { }` initializer, so thread-locals are declared with
//!   [`tls!`], which keeps the `const` form (no lazy-init check, no destructor) in normal builds.

#![allow(clippy::disallowed_types, clippy::disallowed_macros)]

#[cfg(not(ranklocal_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering},
    Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// Only the `ArcSwap` backend (feature `arc-swap`, absent under loom) needs a fence.
#[cfg(all(not(ranklocal_loom), feature = "arc-swap"))]
pub(crate) use std::sync::atomic::fence;

#[cfg(ranklocal_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// loom's `Arc` in the crate's own models, which check its reference counts and report one
/// leaked. In a dependent's loom build (dependent mode, see [`epoch`]) std's: the crate's
/// thread-locals and globals hold `Arc`s, and when a model fails loom drops those outside the
/// model, where dropping a loom `Arc` panics again and aborts the test binary (what the user must
/// see is their own assertion and the test summary). Nothing the crate keeps in an `Arc` is read
/// through a loom cell by its drop, so loom loses no check of the dependent's code.
#[cfg(all(ranklocal_loom, crossbeam_loom))]
pub(crate) use loom::sync::Arc;
#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
pub(crate) use std::sync::Arc;

/// Under loom only: the trie's reclamation canaries (see `trie::Canary`).
#[cfg(ranklocal_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// Under loom only: the trie's leak canaries (see `trie::Canary`). In dependent mode a no-op, for
/// the reason [`Arc`] is std's there: a failed model drops trie nodes outside the model.
#[cfg(all(ranklocal_loom, crossbeam_loom))]
pub(crate) use loom::alloc::Track;

/// [`Track`] in dependent mode: holds the value, tracks nothing.
#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
pub(crate) struct Track<T>(#[allow(dead_code)] T);

#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
impl<T> Track<T> {
    pub(crate) fn new(v: T) -> Track<T> {
        Track(v)
    }
}

/// A cell that one thread at a time reads and writes, by a protocol its users state (an
/// instance's owner-only guard count, touched only by the instance's own OS thread): no
/// synchronization of its own. A std `UnsafeCell` normally, loom's under loom, so that loom
/// reports two threads touching it without a happens-before edge.
pub(crate) struct OwnerCell<T: Copy> {
    #[cfg(not(ranklocal_loom))]
    cell: core::cell::UnsafeCell<T>,
    #[cfg(ranklocal_loom)]
    cell: loom::cell::UnsafeCell<T>,
}

// SAFETY: the cell's users promise that only one thread touches it at a time, with a
// happens-before edge between successive threads (`OwnerCell::get`/`set`'s contract); `T: Send`
// for the value to move between those threads.
unsafe impl<T: Copy + Send> Sync for OwnerCell<T> {}

impl<T: Copy> OwnerCell<T> {
    pub(crate) fn new(v: T) -> Self {
        OwnerCell {
            #[cfg(not(ranklocal_loom))]
            cell: core::cell::UnsafeCell::new(v),
            #[cfg(ranklocal_loom)]
            cell: loom::cell::UnsafeCell::new(v),
        }
    }

    /// The value.
    ///
    /// # Safety
    /// No other thread writes the cell meanwhile, and any earlier write by another thread
    /// happens before this read.
    #[inline]
    pub(crate) unsafe fn get(&self) -> T {
        #[cfg(not(ranklocal_loom))]
        // SAFETY: the caller's contract: no write races this read.
        return unsafe { *self.cell.get() };
        #[cfg(ranklocal_loom)]
        // SAFETY: as above.
        return self.cell.with(|p| unsafe { *p });
    }

    /// Writes the value.
    ///
    /// # Safety
    /// No other thread reads or writes the cell meanwhile, and every earlier access by another
    /// thread happens before this write.
    #[inline]
    pub(crate) unsafe fn set(&self, v: T) {
        #[cfg(not(ranklocal_loom))]
        // SAFETY: the caller's contract: no access races this write.
        unsafe {
            *self.cell.get() = v;
        }
        #[cfg(ranklocal_loom)]
        // SAFETY: as above.
        self.cell.with_mut(|p| unsafe { *p = v });
    }
}

/// The epoch-based reclamation the `Epoch` backend and [`crate::collector`] pin and defer
/// through: crossbeam-epoch's, except in a dependent's loom build.
///
/// crossbeam-epoch builds on loom's primitives only under its own `--cfg crossbeam_loom` (the
/// crate's own models pass it, with `crossbeam_sanitize`). A crate that depends on ranklocal and
/// model-checks its own code passes `--cfg loom` alone: crossbeam-epoch would then synchronize on
/// std atomics that loom does not see, while the versions it protects hold loom's, and loom
/// reports a false causality violation inside ranklocal. In that build (*dependent mode*,
/// `cfg(all(loom, not(crossbeam_loom)))`) this module is a small quiescence collector made of
/// loom primitives only (design.md, "Loom for dependents").
pub(crate) mod epoch {
    #[cfg(not(all(ranklocal_loom, not(crossbeam_loom))))]
    pub(crate) use crossbeam_epoch::{unprotected, Atomic, Collector, Guard, LocalHandle, Shared};

    #[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
    pub(crate) use self::quiescent::{unprotected, Atomic, Collector, Guard, LocalHandle, Shared};

    /// Dependent mode's collector: one loom mutex counts the threads that hold a pin; a deferred
    /// closure runs when that count drops to zero (at once if it is zero): every pin alive when it
    /// was deferred has ended by then, which is all crossbeam-epoch promises. Coarser (a closure
    /// waits for pins taken after it too) and slower, but every edge it relies on is a loom
    /// mutex's, so loom sees why a freed version is no longer read. Only the API the crate uses.
    #[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
    mod quiescent {
        use core::cell::Cell;
        use core::marker::PhantomData;
        use std::rc::Rc;

        use super::super::{lock, Arc, AtomicPtr, Mutex, Ordering};

        type Deferred = Box<dyn FnOnce() + Send>;

        /// Threads pinned now, and what waits for them all to unpin.
        struct State {
            pinned: usize,
            deferred: Vec<Deferred>,
        }

        /// The collector: a handle on the shared [`State`].
        pub struct Collector {
            state: Arc<Mutex<State>>,
        }

        impl Collector {
            pub(crate) fn new() -> Self {
                Collector {
                    state: Arc::new(Mutex::new(State {
                        pinned: 0,
                        deferred: Vec::new(),
                    })),
                }
            }

            /// A participant for the calling thread.
            pub(crate) fn register(&self) -> LocalHandle {
                LocalHandle {
                    local: Rc::new(Local {
                        state: Arc::clone(&self.state),
                        guards: Cell::new(0),
                    }),
                }
            }
        }

        /// A thread's participant: how many of its guards are alive (only the outermost counts
        /// in [`State::pinned`]). Thread-confined (`Rc`), as crossbeam's.
        struct Local {
            state: Arc<Mutex<State>>,
            guards: Cell<usize>,
        }

        pub struct LocalHandle {
            local: Rc<Local>,
        }

        impl LocalHandle {
            pub(crate) fn pin(&self) -> Guard {
                let n = self.local.guards.get();
                if n == 0 {
                    lock(&self.local.state).pinned += 1;
                }
                self.local.guards.set(n + 1);
                Guard {
                    local: Some(Rc::clone(&self.local)),
                }
            }

            pub(crate) fn is_pinned(&self) -> bool {
                self.local.guards.get() > 0
            }
        }

        /// A pin; `local` is `None` for [`unprotected`]'s.
        pub struct Guard {
            local: Option<Rc<Local>>,
        }

        impl Guard {
            /// Runs `f` once every thread pinned now has unpinned; at once under
            /// [`unprotected`].
            ///
            /// # Safety
            /// As crossbeam's: what `f` touches stays valid until it runs.
            pub(crate) unsafe fn defer_unchecked<F: FnOnce() + Send + 'static>(&self, f: F) {
                match &self.local {
                    Some(l) => lock(&l.state).deferred.push(Box::new(f)),
                    None => f(),
                }
            }

            /// Nothing to hand over: deferred closures go to the shared state at once.
            pub(crate) fn flush(&self) {}
        }

        impl Drop for Guard {
            fn drop(&mut self) {
                let Some(l) = self.local.take() else {
                    return;
                };
                let n = l.guards.get() - 1;
                l.guards.set(n);
                if n == 0 {
                    let due = {
                        let mut s = lock(&l.state);
                        s.pinned -= 1;
                        if s.pinned == 0 {
                            core::mem::take(&mut s.deferred)
                        } else {
                            Vec::new()
                        }
                    };
                    for f in due {
                        f(); // the crate's closures: no user code, no lock of the collector
                    }
                }
            }
        }

        /// A guard that protects nothing, for accesses something else keeps alive.
        ///
        /// # Safety
        /// As crossbeam's.
        pub(crate) unsafe fn unprotected() -> &'static Guard {
            const UNPROTECTED: &Guard = &Guard { local: None };
            UNPROTECTED
        }

        /// An atomic pointer loaded under a [`Guard`].
        pub struct Atomic<T> {
            ptr: AtomicPtr<T>,
        }

        impl<T> Atomic<T> {
            pub(crate) fn null() -> Self {
                Atomic {
                    ptr: AtomicPtr::new(core::ptr::null_mut()),
                }
            }

            pub(crate) fn load<'g>(&self, ord: Ordering, _guard: &'g Guard) -> Shared<'g, T> {
                Shared {
                    ptr: self.ptr.load(ord),
                    _guard: PhantomData,
                }
            }

            pub(crate) fn store(&self, new: Shared<'_, T>, ord: Ordering) {
                self.ptr.store(new.ptr, ord);
            }
        }

        /// A pointer loaded under a guard of lifetime `'g`.
        pub struct Shared<'g, T> {
            ptr: *mut T,
            _guard: PhantomData<&'g T>,
        }

        impl<'g, T> Shared<'g, T> {
            pub(crate) fn null() -> Self {
                Shared {
                    ptr: core::ptr::null_mut(),
                    _guard: PhantomData,
                }
            }

            pub(crate) fn as_raw(&self) -> *const T {
                self.ptr
            }

            /// # Safety
            /// As crossbeam's: the pointee is alive for `'g`.
            pub(crate) unsafe fn as_ref(&self) -> Option<&'g T> {
                // SAFETY: the caller's contract: non-null means alive for `'g`.
                unsafe { self.ptr.as_ref() }
            }
        }

        impl<T> From<*const T> for Shared<'_, T> {
            fn from(p: *const T) -> Self {
                Shared {
                    ptr: p.cast_mut(),
                    _guard: PhantomData,
                }
            }
        }
    }
}

/// A part of a `RankLocal` (its core, its writer lock, its condition variable): the part itself
/// everywhere but in dependent mode, where it is a `ModelLazy` so that `RankLocal::new` is
/// `const` there and a `static RankLocal` (or a `rank_local!` key) can be model-checked.
#[cfg(not(all(ranklocal_loom, not(crossbeam_loom))))]
pub(crate) type Part<X> = X;

/// See the other definition.
#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
pub(crate) type Part<X> = model_lazy::ModelLazy<X>;

#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
pub(crate) use self::model_lazy::ModelLazy;

/// Dependent mode's lazily built parts (design.md, "Loom for dependents").
#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
mod model_lazy {
    use core::marker::PhantomData;
    use core::ptr::NonNull;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering as StdOrdering};

    /// A value built by `init` on first use in each loom execution, like a `loom::lazy_static!`
    /// (which needs a `&'static` and cannot be dropped early). It lives in the running execution's
    /// registry, under an id the `ModelLazy` draws on its first use and keeps when moved; its
    /// drop drops the value, and the registry drops at the end of the execution whatever is left:
    /// the parts of `static` `RankLocal`s, rebuilt by the next execution. A static's values are
    /// kept (a static is never dropped), as in a program: the parts hold instances by pointer only.
    pub struct ModelLazy<X> {
        init: fn() -> X,
        /// 0 until first used; then this value's key in every execution's registry.
        id: StdAtomicU64,
        /// Owns an `X` (drop check, auto traits), held in the registry.
        _x: PhantomData<X>,
    }

    /// A registered value: a leaked `Box<X>`, how to drop it, and its publication.
    struct Entry {
        ptr: NonNull<()>,
        drop: unsafe fn(NonNull<()>),
        /// What orders the value's construction (its loom primitives' creation, which loom
        /// counts as writes) before every other thread's use: the thread that built it
        /// initializes this `loom::lazy_static` right after, and every use reads it (a `Once`'s
        /// Release and Acquire, as a static's initialization before `main` would give). One per
        /// value, so it orders nothing else; leaked (a few bytes per value and execution) so that
        /// its address, loom's key, is never reused.
        published: &'static loom::lazy_static::Lazy<()>,
    }

    // SAFETY: only `ModelLazy::get` makes an `Entry`, of an `X: Send` (the bound on its impl).
    unsafe impl Send for Entry {}

    /// Drops the `Box<X>` an entry holds.
    ///
    /// # Safety
    /// `p` is a `Box<X>` leaked by `ModelLazy::get`, dropped once, with no reference to it left.
    unsafe fn drop_box<X>(p: NonNull<()>) {
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(p.cast::<X>().as_ptr()) });
    }

    /// The running execution's parts, by id.
    struct Registry(std::sync::Mutex<HashMap<u64, Entry>>);

    impl Registry {
        fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    impl Drop for Registry {
        fn drop(&mut self) {
            if std::thread::panicking() {
                // A failed model: loom drops its statics outside the model, where a part's
                // loom cells could not be touched. Leaked, so the user's own panic is what shows.
                return;
            }
            let map = core::mem::take(
                self.0
                    .get_mut()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            for (_, e) in map {
                // SAFETY: the end of the execution: every `ModelLazy` whose part this is was
                // never dropped (a static), and no code of this execution runs any more but
                // other statics' and the main thread's thread-locals' drops, which reach a part
                // only through `get` (this registry is gone by then: loom panics).
                unsafe { (e.drop)(e.ptr) };
            }
        }
    }

    loom::lazy_static! {
        static ref PARTS: Registry = Registry(std::sync::Mutex::new(HashMap::new()));
    }

    /// The ids `ModelLazy`s draw (never 0), process-wide: a static's id is the same in every
    /// execution and in concurrent models on other OS threads, whose registries are their own.
    static NEXT_ID: StdAtomicU64 = StdAtomicU64::new(1);

    impl<X: Send> ModelLazy<X> {
        pub(crate) const fn new(init: fn() -> X) -> Self {
            ModelLazy {
                init,
                id: StdAtomicU64::new(0),
                _x: PhantomData,
            }
        }

        /// This value's id, drawn on first use.
        fn id(&self) -> u64 {
            // Relaxed: the id only has to be unique and, once set, the same for every reader.
            let id = self.id.load(StdOrdering::Relaxed);
            if id != 0 {
                return id;
            }
            let new = NEXT_ID.fetch_add(1, StdOrdering::Relaxed);
            match self
                .id
                .compare_exchange(0, new, StdOrdering::Relaxed, StdOrdering::Relaxed)
            {
                Ok(_) => new,
                Err(id) => id,
            }
        }

        /// The running execution's value, built now if it has none.
        fn get(&self) -> NonNull<X> {
            let id = self.id();
            let found = PARTS.map().get(&id).map(|e| (e.ptr, e.published));
            if let Some((ptr, published)) = found {
                published.get(); // Acquire: the construction happens before this use
                return ptr.cast();
            }
            // Built outside the registry's lock: `init` only makes loom primitives (no loom
            // operation, so no other loom thread runs until `published` is set below).
            let ptr = NonNull::from(Box::leak(Box::new((self.init)())));
            let published: &'static loom::lazy_static::Lazy<()> =
                Box::leak(Box::new(loom::lazy_static::Lazy {
                    init: || (),
                    _p: PhantomData,
                }));
            let mut map = PARTS.map();
            let e = map.entry(id).or_insert(Entry {
                ptr: ptr.cast(),
                drop: drop_box::<X>,
                published,
            });
            let (got, published) = (e.ptr.cast(), e.published);
            drop(map);
            if got != ptr {
                // SAFETY: `ptr` was leaked just above and never shared.
                unsafe { drop_box::<X>(ptr.cast()) };
            }
            published.get(); // the builder's Release (first call) or another's Acquire
            got
        }
    }

    impl<X: Send> core::ops::Deref for ModelLazy<X> {
        type Target = X;
        fn deref(&self) -> &X {
            // SAFETY: the entry stays in the registry until `self` is dropped (which `&self`
            // excludes for the reference's lifetime) or the execution ends (see `Registry`'s
            // drop): alive for as long as the reference is used by the execution.
            unsafe { self.get().as_ref() }
        }
    }

    impl<X: Send> core::ops::DerefMut for ModelLazy<X> {
        fn deref_mut(&mut self) -> &mut X {
            // SAFETY: as in `deref`; `&mut self` makes the reference unique.
            unsafe { self.get().as_mut() }
        }
    }

    impl<X> Drop for ModelLazy<X> {
        fn drop(&mut self) {
            let id = *self.id.get_mut();
            if id == 0 {
                return; // never built
            }
            let e = PARTS.map().remove(&id);
            if let Some(e) = e {
                // SAFETY: this `ModelLazy`'s own entry, removed: dropped once, and `&mut self`
                // excludes any reference to it.
                unsafe { (e.drop)(e.ptr) };
            }
        }
    }
}

/// The key type of a [`tls!`] thread-local (only the `rank_local!` form names it, and that form
/// does not exist under loom).
#[cfg(not(ranklocal_loom))]
pub(crate) use std::thread::LocalKey;

/// The same under loom, for `rank_local!` keys in dependent mode: per loom thread.
#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
pub(crate) use loom::thread::LocalKey;

/// Declares a process-wide global: a `static` in normal builds, a `loom::lazy_static!` under loom
/// (loom primitives cannot be built in a `const` context, and loom resets them per execution).
macro_rules! global {
    ($(#[$attr:meta])* static $name:ident: $ty:ty = $init:expr;) => {
        #[cfg(not(ranklocal_loom))]
        $(#[$attr])*
        static $name: $ty = $init;
        #[cfg(ranklocal_loom)]
        loom::lazy_static! {
            $(#[$attr])*
            static ref $name: $ty = $init;
        }
    };
}
pub(crate) use global;

/// Declares a process-wide global built on first use: a `once_cell::sync::Lazy` (what std's
/// `LazyLock` became; std's needs Rust 1.80) in normal builds, a `loom::lazy_static!` under loom
/// (reset per execution).
macro_rules! lazy_global {
    ($(#[$attr:meta])* static $name:ident: $ty:ty = $init:expr;) => {
        #[cfg(not(ranklocal_loom))]
        $(#[$attr])*
        static $name: once_cell::sync::Lazy<$ty> = once_cell::sync::Lazy::new(|| $init);
        #[cfg(ranklocal_loom)]
        loom::lazy_static! {
            $(#[$attr])*
            static ref $name: $ty = $init;
        }
    };
}
pub(crate) use lazy_global;

/// Declares a thread-local with a `const` initializer in normal builds (no lazy-init branch and,
/// for types without drop glue, no destructor: it stays readable during thread teardown) and a
/// loom thread-local under loom.
macro_rules! tls {
    ($(#[$attr:meta])* static $name:ident: $ty:ty = const { $init:expr };) => {
        #[cfg(not(ranklocal_loom))]
        std::thread_local! {
            $(#[$attr])*
            static $name: $ty = const { $init };
        }
        #[cfg(ranklocal_loom)]
        loom::thread_local! {
            $(#[$attr])*
            static $name: $ty = $init;
        }
    };
    ($(#[$attr:meta])* static $name:ident: $ty:ty = $init:expr;) => {
        #[cfg(not(ranklocal_loom))]
        std::thread_local! {
            $(#[$attr])*
            static $name: $ty = $init;
        }
        #[cfg(ranklocal_loom)]
        loom::thread_local! {
            $(#[$attr])*
            static $name: $ty = $init;
        }
    };
}
pub(crate) use tls;

// Poisoning is ignored everywhere: every critical section in this crate leaves the protected data
// consistent before anything in it can panic, so a poisoned lock holds valid data. These helpers
// are the only places that say so.

/// Locks `m`, ignoring poisoning.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Locks `m` if no other thread holds it (ignoring poisoning); `None` if one does.
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Waits on `cv` with `guard`, ignoring poisoning.
pub(crate) fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The data of a mutex reached through `&mut` (no locking), ignoring poisoning.
pub(crate) fn mutex_mut<T>(m: &mut Mutex<T>) -> &mut T {
    m.get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Read-locks `l`, ignoring poisoning.
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write-locks `l`, ignoring poisoning.
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The data of a lock reached through `&mut` (no locking), ignoring poisoning.
pub(crate) fn rwlock_mut<T>(l: &mut RwLock<T>) -> &mut T {
    l.get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
