//! [`rank_local!`](crate::rank_local) statics: a `RankLocal` in a `static` plus a thread-local slot
//! of their own, so the owner's `get` is one thread-local read and the delegation check.

// No `unsafe` block here: the two `Sync` impls below are the only `unsafe`, each allowed by name.
#![deny(unsafe_code)]

use core::cell::Cell;

use crate::identity::{self, RankId};
use crate::primitive::LocalKey;
use crate::rank_local::{AccessError, Iter, OwnRef, RankLocal, SyncValue};

// std `LocalKey`'s `Cell`/`RefCell` shortcuts on keys, through the owner-only family
mod cells;
// `rank_local!`, which builds the keys
mod macros;

/// A rank-local static declared with [`rank_local!`](crate::rank_local); use it like a
/// `std::thread::LocalKey`, but with `'static` references and delegation.
///
/// *Invariant* in `T`, like the [`RankLocal`] it holds: a `&'static RankLocalKey<&'static str>`
/// cannot be used as a key of shorter-lived `&str`s (one could then store a `&str` that dies
/// while the key still hands it out as `&'static str`).
/// Only the expansion of [`rank_local!`](crate::rank_local) can build one.
pub struct RankLocalKey<T: 'static> {
    // Only shared references and a `fn` pointer: the key itself has no interior mutability, so
    // the compiler treats the `static` as a constant and folds `slot` into the hit path.
    inner: &'static KeyStorage<T>,
    /// This thread's own instance once it was handed out (I8). Holding only `&'static T`s, the
    /// slot needs no promise from whoever declares it: whatever it holds is a live value.
    slot: &'static LocalKey<Cell<Option<&'static T>>>,
    init: fn() -> T,
}

// The one `unsafe` this file allows: an auto-trait impl, argued below.
#[allow(unsafe_code)]
// SAFETY: a `KeyStorage<T>` only exists if `T: RankLocalValue`, i.e. `T: Send` (its only
// constructor requires it), so every `RankLocalKey<T>` refers to a `RankLocal<T>` that is `Sync`
// (I7) and to a per-thread slot of `&'static T`s that only its own thread reads or fills (a `&T`
// of a `T` that is not `Sync` cannot reach another thread's slot, I8); the methods that hand a
// `&T` to another thread require `T: SyncValue` themselves. Declared without the bound so that a
// `!Send` `T` in `rank_local!` gives one readable error instead of one more per item of the
// expansion.
unsafe impl<T: 'static> Sync for RankLocalKey<T> {}

/// The `RankLocal` of one `rank_local!` static, in a `static` of its own. Not public API.
#[doc(hidden)]
pub struct KeyStorage<T>(RankLocal<T>);

// The one `unsafe` this file allows: an auto-trait impl, argued below.
#[allow(unsafe_code)]
// SAFETY: only `KeyStorage::new` builds one, and it requires `T: Send`, which makes the
// `RankLocal<T>` inside `Sync` (I7). Unbounded for the same one-error reason as `RankLocalKey`.
unsafe impl<T> Sync for KeyStorage<T> {}

impl<T: RankLocalValue> KeyStorage<T> {
    /// Empty storage for one `rank_local!` static; the check that its type is `Send`.
    #[allow(clippy::new_without_default)] // only the macro builds one, in a `static`
    pub const fn new() -> Self {
        KeyStorage(RankLocal::new())
    }
}

/// What [`rank_local!`](crate::rank_local) requires of its values: `Send`, as [`RankLocal`] does
/// (whichever thread frees an instance drops it). The methods that can hand a value to another
/// thread (`get`, `with`, `get_for`, `iter`, ...) require [`SyncValue`](crate::SyncValue) too;
/// the owner-only family (`with_own`, `get_own`, ...) does not. Implemented for every such type.
#[cfg_attr(
    ranklocal_diagnostic,
    diagnostic::on_unimplemented(
        message = "`rank_local!` values must be `Send`: `{Self}` is not",
        label = "a `rank_local!` value must be `Send`",
        note = "whichever thread frees an instance drops it: use a `Send` type (an `Arc` instead of an \
                `Rc`, ...)"
    )
)]
pub trait RankLocalValue: Send + 'static {}

#[cfg_attr(ranklocal_do_not_recommend, diagnostic::do_not_recommend)]
impl<T: Send + 'static> RankLocalValue for T {}

impl<T: 'static> RankLocalKey<T> {
    /// Builds the key of one `rank_local!` static. Not public API: only the macro calls it, with
    /// `inner` and `slot` declared for this key alone (I8). Any other input is sound too (the
    /// slot holds only `&'static T`s), just not a working key.
    #[doc(hidden)]
    pub const fn __new(
        inner: &'static KeyStorage<T>,
        slot: &'static LocalKey<Cell<Option<&'static T>>>,
        init: fn() -> T,
    ) -> Self {
        RankLocalKey { inner, slot, init }
    }
}

impl<T: Send + 'static> RankLocalKey<T> {
    /// The current rank's instance, created with the static's initializer on first use.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, rank_local, Rank};
    /// use std::sync::Mutex;
    ///
    /// rank_local! {
    ///     static LOG: Mutex<Vec<u32>> = Mutex::new(Vec::new());
    /// }
    ///
    /// LOG.get().lock().unwrap().push(1);
    /// assert_eq!(*LOG.get().lock().unwrap(), [1]); // this rank's instance, `'static`
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || assert!(LOG.get().lock().unwrap().is_empty())); // job's own
    /// ```
    ///
    /// # Panics
    /// As [`RankLocal::get_or`].
    #[inline]
    #[track_caller]
    pub fn get(&'static self) -> &'static T
    where
        T: SyncValue,
    {
        let p = self.slot.with(Cell::get);
        // Non-short-circuit `&`: both reads are plain TLS loads, so one branch instead of two.
        // The slot holds this thread's own instance (I8): read only while it acts as its own rank.
        if identity::acting_as_self() & p.is_some() {
            if let Some(v) = p {
                return v;
            }
        }
        self.get_slow()
    }

    #[cold]
    #[track_caller]
    fn get_slow(&'static self) -> &'static T
    where
        T: SyncValue,
    {
        crate::counters::bump!(KEY_SLOW);
        let v = self.inner.0.get_or(self.init);
        self.remember(v);
        v
    }

    /// Fills the slot if `v` is this thread's own instance (I8).
    #[inline]
    fn remember(&'static self, v: &'static T)
    where
        T: SyncValue,
    {
        if identity::acting_as_self() {
            self.slot.with(|s| s.set(Some(v)));
        }
    }

    /// The current rank's instance if it exists; never creates one.
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// rank_local! {
    ///     static LIMIT: AtomicU32 = AtomicU32::new(5);
    /// }
    ///
    /// assert!(LIMIT.try_get().is_none()); // the initializer has not run
    /// LIMIT.get();
    /// assert_eq!(LIMIT.try_get().map(|l| l.load(Ordering::Relaxed)), Some(5));
    /// ```
    #[inline]
    pub fn try_get(&'static self) -> Option<&'static T>
    where
        T: SyncValue,
    {
        if identity::acting_as_self() {
            if let Some(v) = self.slot.with(Cell::get) {
                return Some(v);
            }
        }
        let v = self.inner.0.try_get()?;
        self.remember(v);
        Some(v)
    }

    /// `rank`'s instance if it exists; never creates one.
    ///
    /// ```
    /// use ranklocal::{rank_local, RankId};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// rank_local! {
    ///     static DONE: AtomicU32 = const { AtomicU32::new(0) };
    /// }
    ///
    /// let worker = std::thread::spawn(|| {
    ///     DONE.get().store(3, Ordering::Relaxed);
    ///     RankId::current()
    /// })
    /// .join()
    /// .unwrap();
    /// assert_eq!(DONE.get_for(worker).map(|d| d.load(Ordering::Relaxed)), Some(3));
    /// assert!(DONE.get_for(RankId::current()).is_none());
    /// ```
    #[inline]
    pub fn get_for(&'static self, rank: RankId) -> Option<&'static T>
    where
        T: SyncValue,
    {
        self.inner.0.get_for(rank)
    }

    /// Every `(rank, instance)`, from one consistent snapshot.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, rank_local, Rank, RankId};
    ///
    /// rank_local! {
    ///     static OWNER: RankId = RankId::current();
    /// }
    ///
    /// OWNER.get();
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || OWNER.get());
    /// assert_eq!(OWNER.iter().count(), 2);
    /// assert!(OWNER.iter().all(|(rank, owner)| rank == *owner)); // built by each rank
    /// ```
    pub fn iter(&'static self) -> Iter<'static, T, crate::Epoch>
    where
        T: SyncValue,
    {
        self.inner.0.iter()
    }

    /// The current rank's instance, created with the static's initializer on first use, lent to
    /// `f`: scoped access (see [`RankLocal::with`]). An instance only ever reached this way is
    /// dropped after its rank exits; one handed out by [`get`](Self::get) is kept. Needs a `Sync`
    /// value: for a `Cell`, a `RefCell` or a struct holding one (std's `thread_local!` state),
    /// [`with_own`](Self::with_own) is std's `with`.
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::sync::Mutex;
    ///
    /// rank_local! {
    ///     static SCRATCH: Mutex<Vec<u8>> = Mutex::new(Vec::with_capacity(1 << 10));
    /// }
    ///
    /// let n = SCRATCH.with(|s| {
    ///     let mut s = s.lock().unwrap();
    ///     s.push(1);
    ///     s.len()
    /// });
    /// assert_eq!(n, 1);
    /// // a short-lived thread's instance is dropped after it exits
    /// std::thread::spawn(|| SCRATCH.with(|s| s.lock().unwrap().push(2))).join().unwrap();
    /// SCRATCH.as_rank_local().reclaim_exited();
    /// assert_eq!(SCRATCH.as_rank_local().len(), 1);
    /// ```
    ///
    /// # Panics
    /// As [`get`](Self::get).
    #[inline]
    #[track_caller]
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R
    where
        T: SyncValue,
    {
        let p = self.slot.with(Cell::get);
        // As in `get`; the slot only holds escaped instances (I31).
        if identity::acting_as_self() & p.is_some() {
            if let Some(v) = p {
                return f(v);
            }
        }
        self.inner.0.with_or(self.init, f)
    }

    /// `rank`'s instance lent to `f`, or `None` (never creates one); see
    /// [`RankLocal::with_for`].
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, rank_local, Rank};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// rank_local! {
    ///     static STEPS: AtomicU32 = const { AtomicU32::new(0) };
    /// }
    ///
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || STEPS.with(|s| s.fetch_add(2, Ordering::Relaxed)));
    /// assert_eq!(STEPS.with_for(job.id(), |s| s.load(Ordering::Relaxed)), Some(2));
    /// ```
    #[inline]
    pub fn with_for<R>(&'static self, rank: RankId, f: impl FnOnce(&T) -> R) -> Option<R>
    where
        T: SyncValue,
    {
        self.inner.0.with_for(rank, f)
    }

    /// The current rank's instance, created with the static's initializer on first use, lent to
    /// `f` — or [`AccessError`] while this thread's own storage is being or has been torn down:
    /// std's `LocalKey::try_with` (see [`RankLocal::try_with`]). To look without creating, use
    /// [`with_existing`](Self::with_existing).
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// rank_local! {
    ///     static RETRIES: AtomicU32 = const { AtomicU32::new(5) };
    /// }
    ///
    /// assert_eq!(RETRIES.try_with(|r| r.load(Ordering::Relaxed)), Ok(5)); // created, as std's
    /// ```
    ///
    /// # Panics
    /// As [`with`](Self::with).
    #[inline]
    #[track_caller]
    pub fn try_with<R>(&'static self, f: impl FnOnce(&T) -> R) -> Result<R, AccessError>
    where
        T: SyncValue,
    {
        if identity::own_storage_torn_down() && identity::acting_as_self() {
            return Err(AccessError::new());
        }
        Ok(self.with(f))
    }

    /// The current rank's instance lent to `f` if it exists, else `None`: never creates one and
    /// keeps nothing alive (see [`RankLocal::with_existing`]).
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// rank_local! {
    ///     static RETRIES: AtomicU32 = const { AtomicU32::new(0) };
    /// }
    ///
    /// assert_eq!(RETRIES.with_existing(|r| r.load(Ordering::Relaxed)), None);
    /// RETRIES.with(|r| r.fetch_add(1, Ordering::Relaxed));
    /// assert_eq!(RETRIES.with_existing(|r| r.load(Ordering::Relaxed)), Some(1));
    /// ```
    #[inline]
    pub fn with_existing<R>(&'static self, f: impl FnOnce(&T) -> R) -> Option<R>
    where
        T: SyncValue,
    {
        if identity::acting_as_self() {
            if let Some(v) = self.slot.with(Cell::get) {
                return Some(f(v));
            }
        }
        self.inner.0.with_existing(f)
    }

    /// This OS thread's own instance, created with the static's initializer on first use, as an
    /// [`OwnRef`] (see [`RankLocal::get_own`]): ignores `on_behalf_of`, needs `T: Send` only. A
    /// value only reached through `OwnRef`s and [`with_own`](Self::with_own) is dropped when its
    /// thread exits, as `thread_local!`'s are; [`OwnRef::leak`] gives a `&'static T` and keeps
    /// the value.
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::cell::Cell;
    ///
    /// rank_local! {
    ///     static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// }
    ///
    /// DEPTH.get_own().set(DEPTH.get_own().get() + 1);
    /// assert_eq!(DEPTH.get_own().get(), 1);
    /// ```
    ///
    /// # Panics
    /// As [`RankLocal::get_own`].
    #[inline]
    #[track_caller]
    pub fn get_own(&'static self) -> OwnRef<'static, T> {
        // The slot holds this thread's own, escaped instance (I8): whatever the delegation,
        // that is the instance `get_own` reaches, kept already.
        if let Some(v) = self.slot.with(Cell::get) {
            return OwnRef::kept(v);
        }
        self.inner.0.get_own_or(self.init)
    }

    /// This OS thread's own instance if it exists, as an [`OwnRef`]; never creates one (see
    /// [`RankLocal::try_get_own`]).
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::cell::Cell;
    ///
    /// rank_local! {
    ///     static SEEN: Cell<bool> = const { Cell::new(false) };
    /// }
    ///
    /// assert!(SEEN.try_get_own().is_none());
    /// SEEN.with_own(|s| s.set(true));
    /// assert_eq!(SEEN.try_get_own().map(|s| s.get()), Some(true));
    /// ```
    #[inline]
    pub fn try_get_own(&'static self) -> Option<OwnRef<'static, T>> {
        if let Some(v) = self.slot.with(Cell::get) {
            return Some(OwnRef::kept(v)); // as in `get_own` (I8)
        }
        self.inner.0.try_get_own()
    }

    /// This OS thread's own instance, created with the static's initializer on first use, lent
    /// to `f` (see [`RankLocal::with_own`]): the owner-only form of `LocalKey::with`, for a
    /// `RefCell` or a `Cell`. An instance only ever reached this way is dropped when its thread
    /// exits, on that thread, before `join` returns.
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::cell::RefCell;
    ///
    /// rank_local! {
    ///     static SPANS: RefCell<Vec<u64>> = RefCell::new(Vec::new());
    /// }
    ///
    /// SPANS.with_own(|s| s.borrow_mut().push(1));
    /// assert_eq!(SPANS.with_own(|s| s.borrow_mut().pop()), Some(1));
    /// ```
    ///
    /// # Panics
    /// As [`RankLocal::with_own`].
    #[inline]
    #[track_caller]
    pub fn with_own<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        self.inner.0.with_own_or(self.init, f)
    }

    /// This OS thread's own instance, created with the static's initializer on first use, lent
    /// to `f` — or [`AccessError`] while this thread's own storage is being or has been torn
    /// down: std's `LocalKey::try_with`, on the owner-only family (see
    /// [`RankLocal::try_with_own`]).
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::cell::Cell;
    ///
    /// rank_local! {
    ///     static COUNT: Cell<u32> = const { Cell::new(5) };
    /// }
    ///
    /// // std's `COUNT.try_with(|c| c.get()).unwrap_or(0)` ported: 5, as with std
    /// assert_eq!(COUNT.try_with_own(|c| c.get()).unwrap_or(0), 5);
    /// ```
    ///
    /// # Panics
    /// As [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn try_with_own<R>(&'static self, f: impl FnOnce(&T) -> R) -> Result<R, AccessError> {
        if identity::own_storage_torn_down() {
            return Err(AccessError::new());
        }
        Ok(self.with_own(f))
    }

    /// This OS thread's own instance lent to `f` if it exists, else `None` (see
    /// [`RankLocal::with_own_existing`]).
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::cell::RefCell;
    ///
    /// rank_local! {
    ///     static BUF: RefCell<String> = RefCell::new(String::new());
    /// }
    ///
    /// assert_eq!(BUF.with_own_existing(|b| b.borrow().len()), None); // nothing created
    /// BUF.with_own(|b| b.borrow_mut().push_str("hi"));
    /// assert_eq!(BUF.with_own_existing(|b| b.borrow().len()), Some(2));
    /// ```
    #[inline]
    pub fn with_own_existing<R>(&'static self, f: impl FnOnce(&T) -> R) -> Option<R> {
        self.inner.0.with_own_existing(f)
    }

    /// Number of ranks with an instance (see [`RankLocal::len`]).
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, rank_local, Rank};
    ///
    /// rank_local! {
    ///     static SEEN: u32 = 0;
    /// }
    ///
    /// assert!(SEEN.is_empty());
    /// SEEN.get();
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || SEEN.get());
    /// assert_eq!(SEEN.len(), 2);
    /// ```
    pub fn len(&'static self) -> usize {
        self.inner.0.len()
    }

    /// `true` if no rank has an instance (see [`RankLocal::is_empty`]).
    pub fn is_empty(&'static self) -> bool {
        self.inner.0.is_empty()
    }

    /// How many instances are kept for exited ranks because they were handed out as `&T` (by
    /// `get`, `try_get`, `get_for` or `iter`); O(n). See [`RankLocal::kept_exited`].
    pub fn kept_exited(&'static self) -> usize {
        self.inner.0.kept_exited()
    }

    /// Lends every instance to `f` in turn, from one snapshot, keeping nothing alive (see
    /// [`RankLocal::for_each`]).
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, rank_local, Rank};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// rank_local! {
    ///     static BYTES: AtomicU64 = const { AtomicU64::new(0) };
    /// }
    ///
    /// BYTES.with(|b| b.store(3, Ordering::Relaxed));
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || BYTES.with(|b| b.store(4, Ordering::Relaxed)));
    /// let mut total = 0;
    /// BYTES.for_each(|_, b| total += b.load(Ordering::Relaxed));
    /// assert_eq!(total, 7);
    /// ```
    pub fn for_each(&'static self, f: impl FnMut(RankId, &T))
    where
        T: SyncValue,
    {
        self.inner.0.for_each(f);
    }

    /// Unpublishes the scoped-only instances of exited ranks (see
    /// [`RankLocal::reclaim_exited`]).
    ///
    /// ```
    /// use ranklocal::rank_local;
    ///
    /// rank_local! {
    ///     static SCRATCH: Vec<u8> = Vec::new();
    /// }
    ///
    /// std::thread::spawn(|| SCRATCH.with(|s| s.len())).join().unwrap();
    /// assert_eq!(SCRATCH.reclaim_exited(), 1); // the exited thread's instance
    /// assert!(SCRATCH.is_empty());
    /// ```
    ///
    /// # Panics
    /// As [`RankLocal::reclaim_exited`].
    pub fn reclaim_exited(&'static self) -> usize {
        self.inner.0.reclaim_exited()
    }

    /// [`reclaim_exited`](Self::reclaim_exited), then waits until every such instance has been
    /// dropped (see [`RankLocal::reclaim_exited_blocking`]).
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// static TOTAL: AtomicU64 = AtomicU64::new(0);
    /// struct Tally(u64);
    /// impl Drop for Tally {
    ///     fn drop(&mut self) {
    ///         TOTAL.fetch_add(self.0, Ordering::Relaxed);
    ///     }
    /// }
    ///
    /// rank_local! {
    ///     static TALLY: Tally = Tally(5);
    /// }
    ///
    /// std::thread::spawn(|| TALLY.with(|_| ())).join().unwrap();
    /// TALLY.reclaim_exited_blocking();
    /// assert_eq!(TOTAL.load(Ordering::Relaxed), 5); // dropped before it returned
    /// ```
    ///
    /// # Panics
    /// As [`RankLocal::reclaim_exited_blocking`].
    #[track_caller]
    pub fn reclaim_exited_blocking(&'static self) -> usize {
        self.inner.0.reclaim_exited_blocking()
    }

    /// The underlying `RankLocal`.
    ///
    /// ```
    /// use ranklocal::rank_local;
    /// use std::sync::atomic::AtomicU32;
    ///
    /// rank_local! {
    ///     static HITS: AtomicU32 = AtomicU32::new(0);
    /// }
    ///
    /// let hits = HITS.get();
    /// let rl = HITS.as_rank_local();
    /// assert_eq!(rl.len(), 1);
    /// assert!(std::ptr::eq(rl.try_get().unwrap(), hits)); // the same instance
    /// ```
    pub fn as_rank_local(&'static self) -> &'static RankLocal<T> {
        &self.inner.0
    }
}

// Unwind safety as the `RankLocal` a key holds (and the `thread_local` crate's `ThreadLocal`): the
// slot only caches a reference to this thread's own instance.
impl<T: core::panic::UnwindSafe + 'static> core::panic::UnwindSafe for RankLocalKey<T> {}
impl<T: core::panic::UnwindSafe + 'static> core::panic::RefUnwindSafe for RankLocalKey<T> {}

/// Re-exports for the expansion of [`rank_local!`](crate::rank_local); not public API.
#[doc(hidden)]
pub mod __private {
    pub use super::{KeyStorage, RankLocalValue};
    /// In a dependent's loom build, loom's (per loom thread, reset per execution), which has no
    /// `const { }` initializer: the one form `rank_local!` uses is accepted and built lazily.
    #[cfg(ranklocal_loom)]
    pub use crate::__ranklocal_loom_thread_local as thread_local;
    pub use core::cell::Cell;
    pub use core::option::Option;
    #[cfg(ranklocal_loom)]
    pub use loom;
    #[cfg(not(ranklocal_loom))]
    pub use std::thread_local;
}

/// `rank_local!`'s slot under loom (dependent mode); not public API.
#[cfg(ranklocal_loom)]
#[doc(hidden)]
#[macro_export]
macro_rules! __ranklocal_loom_thread_local {
    (static $name:ident: $t:ty = const { $init:expr };) => {
        $crate::__private::loom::thread_local! {
            static $name: $t = $init;
        }
    };
}

impl<T: Send + core::fmt::Debug + 'static> core::fmt::Debug for RankLocalKey<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(&self.inner.0, f)
    }
}
