//! Owner-only access — `get_own`, `get_own_or`, `try_get_own`, `with_own`, `with_own_or`,
//! `try_with_own` — and dropping, at its thread's exit, an instance only `with_own` reached (I39).
//!
//! The family always reaches the calling OS thread's own instance (`identity::own_raw`), also
//! inside `on_behalf_of`, so it needs `T: Send` only: no other thread can reach the instance but
//! through the rank-aware methods, which need `T: Sync` ([`SyncValue`]).
//!
//! # Exit drop
//! An instance only `with_own` reached so far is OWNED: its thread's exit hook drops it on that
//! thread, as its own rank, as std's `thread_local!` does; any other access moves it on first
//! (the gate in `raw`, I39).

#![deny(unsafe_code)]

use core::convert::Infallible;
use core::fmt;

use super::init::Access;
use super::raw::{Inst, LiveOwner, OwnRank, OwnerTag, Pinned};
use super::RankLocal;
use crate::backend::Backend;
use crate::identity;

/// The values a rank-aware method can hand to another thread than their owner's: `Send + Sync`.
/// Implemented for every such type; bounding the methods on it (rather than on `Sync`) lets the
/// compiler's error for a `RefCell` or `Cell` name the method that fits.
///
/// ```
/// fn sum<T: ranklocal::SyncValue + Copy + Into<u64>>(rl: &ranklocal::RankLocal<T>) -> u64 {
///     let mut total = 0;
///     rl.for_each(|_, v| total += (*v).into());
///     total
/// }
/// let rl = ranklocal::RankLocal::<u32>::new();
/// rl.get_or(|| 5);
/// assert_eq!(sum(&rl), 5);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `Sync`: this `RankLocal` method can hand the value to another thread",
    label = "needs a `Sync` value: another thread may read it",
    note = "for state only its own thread touches (a `RefCell`, a `Cell`), use the owner-only \
            methods `with_own`/`get_own` (also `with_own_or`, `try_with_own`, `get_own_or`, \
            `try_get_own`): they reach the calling thread's own instance and need `Send` only",
    note = "for state other threads read (`get_for`, `iter`, `on_behalf_of`), use a thread-safe \
            type: a `Mutex`, an `RwLock`, an atomic"
)]
pub trait SyncValue: Send + Sync {}

impl<T: Send + Sync + ?Sized> SyncValue for T {}

/// Runs `init` as `rank` (the thread's own), also inside another rank's `on_behalf_of`: an
/// instance is built as the rank it is for, as it is dropped as that rank (I10).
fn as_own<T>(rank: u64, init: impl FnOnce() -> T) -> T {
    if identity::current_raw() == rank {
        init()
    } else {
        crate::delegation::on_behalf_of(identity::RankId::from_raw(rank), init)
    }
}

/// The owner-only family: `T: Send` only.
impl<T: Send, B: Backend> RankLocal<T, B> {
    /// This OS thread's own instance, created with `T::default()` on first use, as a `&T` that
    /// lives as long as the `RankLocal`. Unlike [`get`](Self::get) it ignores
    /// [`on_behalf_of`](crate::on_behalf_of) — it is always the calling thread's own — so it needs
    /// `T: Send` only: a `RefCell` or `Cell` is fine. The instance is kept (like `get`'s) until
    /// `&mut` access or the `RankLocal`'s drop.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    /// use std::cell::Cell;
    ///
    /// static HITS: RankLocal<Cell<u32>> = RankLocal::new();
    /// HITS.get_own().set(HITS.get_own().get() + 1);
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || HITS.get_own().set(HITS.get_own().get() + 1)); // still ours
    /// assert_eq!(HITS.get_own().get(), 2);
    /// ```
    ///
    /// # Panics
    /// As [`get`](Self::get).
    #[inline]
    #[track_caller]
    pub fn get_own(&self) -> &T
    where
        T: Default,
    {
        self.get_own_or(T::default)
    }

    /// This OS thread's own instance, created with `init` on first use; see
    /// [`get_own`](Self::get_own).
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    ///
    /// let names: RankLocal<RefCell<String>> = RankLocal::new();
    /// names.get_own_or(|| RefCell::new("main".into())).borrow_mut().push_str(" thread");
    /// assert_eq!(*names.get_own_or(|| unreachable!()).borrow(), "main thread");
    /// ```
    ///
    /// # Panics
    /// As [`get_or`](Self::get_or).
    #[inline]
    #[track_caller]
    pub fn get_own_or(&self, init: impl FnOnce() -> T) -> &T {
        if let Some(v) = self.cached_own() {
            return v;
        }
        self.get_own_slow(identity::own_raw_or_zero(), init)
    }

    #[cold]
    #[track_caller]
    fn get_own_slow(&self, rank: u64, init: impl FnOnce() -> T) -> &T {
        let rank = if rank == 0 {
            identity::own_raw()
        } else {
            if let Some(v) = self.lookup_slow::<OwnRank>(rank) {
                return v;
            }
            rank
        };
        let init = || Ok::<T, Infallible>(as_own(rank, init));
        // escaped, and cached under the thread's own rank
        let Ok(v) = self.first_touch_escaped::<OwnRank, _>(rank, init);
        v
    }

    /// This OS thread's own instance if it exists, as a `&T` that is kept (see
    /// [`get_own`](Self::get_own)); never creates one.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let rl: RankLocal<Cell<u8>> = RankLocal::new();
    /// assert!(rl.try_get_own().is_none());
    /// rl.with_own(|c| c.set(3));
    /// assert_eq!(rl.try_get_own().map(Cell::get), Some(3));
    /// ```
    #[inline]
    pub fn try_get_own(&self) -> Option<&T> {
        let rank = identity::own_raw_or_zero();
        if rank == 0 {
            return None; // no id yet: no map holds an instance of it
        }
        self.cached_own()
            .or_else(|| self.lookup_slow::<OwnRank>(rank))
    }

    /// This OS thread's own instance, created with `T::default()` on first use, lent to `f`:
    /// the owner-only form of `std::thread::LocalKey::with`, for a `RefCell`, a `Cell` or any
    /// `T: Send`. It ignores [`on_behalf_of`](crate::on_behalf_of).
    ///
    /// An instance only ever reached by `with_own` (and [`try_with_own`](Self::try_with_own)) is
    /// **dropped when its thread exits, on that thread, before `join` returns**, as std's
    /// `thread_local!` drops its values; one also reached by a rank-aware call is dropped as
    /// that call says ([`with`](Self::with): by a sweep after the rank exits; [`get`](Self::get)
    /// and the other `&T`s: kept until `&mut` access or drop). Outside `on_behalf_of`, `with_own`
    /// and `with` reach the same instance. The hit path is one thread-cache probe, as `with`'s.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// static FLUSHED: AtomicUsize = AtomicUsize::new(0);
    /// #[derive(Default)]
    /// struct Buffer(RefCell<Vec<u8>>);
    /// impl Drop for Buffer {
    ///     fn drop(&mut self) {
    ///         FLUSHED.fetch_add(self.0.borrow().len(), Ordering::Relaxed);
    ///     }
    /// }
    ///
    /// static BUFFERS: RankLocal<Buffer> = RankLocal::new();
    /// std::thread::spawn(|| BUFFERS.with_own(|b| b.0.borrow_mut().extend([1, 2, 3])))
    ///     .join()
    ///     .unwrap();
    /// assert_eq!(FLUSHED.load(Ordering::Relaxed), 3); // dropped at the thread's exit
    /// ```
    ///
    /// Two exceptions to "on that thread, before `join` returns":
    /// - **Scoped threads whose map is dropped at the scope's end.** `std::thread::scope` returns
    ///   once its threads' closures have returned, possibly before their thread-local destructors
    ///   ran; a `RankLocal` dropped right after the scope drops those values itself, on the
    ///   dropping thread (still exactly once, and before its drop returns). A scoped thread joined
    ///   through its handle has run its exit drops.
    /// - **A late thread-local destructor.** A value first created by another thread-local's
    ///   destructor that runs after this crate's own exit work is not dropped at exit but by a
    ///   later sweep, after its rank exited.
    ///
    /// A value's `Drop` at exit may release the last `Arc` of its own `RankLocal`, or of another
    /// one whose values other exiting threads are dropping: that `RankLocal`'s drop then does not
    /// wait for those drops (the drop of the map that owned the value waits for them instead), so
    /// neither blocks.
    ///
    /// # Panics
    /// As [`get`](Self::get). A panic in `f` propagates; nothing is leaked. A value's `Drop` that
    /// panics at thread exit aborts the process, as a panicking destructor of std's
    /// `thread_local!` does ("thread local panicked on drop"), after the thread's other values of
    /// this kind were dropped.
    #[inline]
    #[track_caller]
    pub fn with_own<R>(&self, f: impl FnOnce(&T) -> R) -> R
    where
        T: Default,
    {
        self.with_own_or(T::default, f)
    }

    /// [`with_own`](Self::with_own) with an initializer, for a `T` without `Default`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    ///
    /// let stack: RankLocal<RefCell<Vec<u64>>> = RankLocal::new();
    /// let new = || RefCell::new(Vec::with_capacity(16));
    /// stack.with_own_or(new, |s| s.borrow_mut().push(7));
    /// assert_eq!(stack.with_own_or(new, |s| s.borrow_mut().pop()), Some(7));
    /// ```
    ///
    /// # Panics
    /// As [`get_or`](Self::get_or). A panic in `f` propagates; nothing is leaked.
    #[inline]
    #[track_caller]
    pub fn with_own_or<R>(&self, init: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R {
        let rank = identity::own_raw_or_zero();
        match self.with_owner_entry(rank, OwnerTag::Own, f) {
            Ok(r) => r,
            Err(f) => self
                .with_own_slow(Some(init), f)
                .expect("ranklocal: with_own_slow with an init returns"),
        }
    }

    /// This OS thread's own instance lent to `f` if it exists, else `None`: never creates one and
    /// hands out no `&T` that outlives `f`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let rl: RankLocal<Cell<u32>> = RankLocal::new();
    /// assert_eq!(rl.try_with_own(Cell::get), None);
    /// rl.with_own(|c| c.set(9));
    /// assert_eq!(rl.try_with_own(Cell::get), Some(9));
    /// ```
    #[inline]
    pub fn try_with_own<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let rank = identity::own_raw_or_zero();
        match self.with_owner_entry(rank, OwnerTag::Own, f) {
            Ok(r) => Some(r),
            Err(f) => self.with_own_slow(None::<fn() -> T>, f),
        }
    }

    /// `with_own`/`try_with_own` after the own entry missed: the live owner looks up (or, with
    /// `init`, creates OWNED) its instance and caches it; a thread past its exit hook (a late
    /// thread-local destructor) reads pinned, and creates a SCOPED instance that a later sweep
    /// drops (I39).
    #[cold]
    #[track_caller]
    fn with_own_slow<R>(
        &self,
        init: Option<impl FnOnce() -> T>,
        f: impl FnOnce(&T) -> R,
    ) -> Option<R> {
        let fresh = identity::own_raw_or_zero() == 0;
        if fresh && init.is_none() {
            return None; // no id yet: no map holds an instance of it
        }
        let rank = identity::own_raw();
        let init = init.map(|init| move || Ok::<T, Infallible>(as_own(rank, init)));
        if let Some(owner) = LiveOwner::new(self, rank) {
            let found = if fresh { None } else { owner.get() };
            let i = match found {
                Some(i) => i,
                None => {
                    let Ok(i) = self.first_touch_owner(&owner, init?, Access::Own);
                    i
                }
            };
            // The live owner's: neither reclaimed (I35) nor a tombstone (only its own exit work
            // makes one, I39) while the thread runs.
            let v = i
                .own()
                .expect("ranklocal: the live owner's instance is in use");
            owner.cache(i, OwnerTag::Own);
            return Some(f(v));
        }
        // Past the exit hook (or under loom, where thread liveness is not tracked): pinned, as a
        // non-owner's scoped read (I33); an instance made now is SCOPED and swept (I39). Only
        // this thread acts on its own instance through this family, so an OWNED one is used as it
        // is: its exit work runs on this thread, after this read (I39).
        let pin = Pinned::new(self);
        if let Some(v) = pin.get(rank).and_then(Inst::own) {
            return Some(f(v));
        }
        drop(pin);
        let Ok(r) = self.first_touch_scoped::<OwnRank, _, _>(rank, init?, f);
        Some(r)
    }
}

/// Shows the count and the calling thread's own value (as [`RankLocal::try_with_own`] reaches it:
/// never another thread's, never escaping, never creating), as the `thread_local` crate's
/// `Debug` does; so a struct holding a `RankLocal` of a `RefCell` can derive `Debug`.
///
/// ```
/// use ranklocal::RankLocal;
/// use std::cell::RefCell;
///
/// let rl: RankLocal<RefCell<u32>> = RankLocal::new();
/// assert_eq!(format!("{rl:?}"), r#"RankLocal { backend: "epoch", len: 0, own: None }"#);
/// rl.with_own(|v| *v.borrow_mut() = 5);
/// std::thread::scope(|s| {
///     s.spawn(|| rl.with_own(|v| *v.borrow_mut() = 6));
/// });
/// assert_eq!(format!("{rl:?}"), r#"RankLocal { backend: "epoch", len: 2, own: Some(RefCell { value: 5 }) }"#);
/// ```
impl<T: Send + fmt::Debug, B: Backend> fmt::Debug for RankLocal<T, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = self.len();
        let mut shown = None;
        let r = self.try_with_own(|v| {
            let r = f
                .debug_struct("RankLocal")
                .field("backend", &B::NAME)
                .field("len", &len)
                .field("own", &Some(v))
                .finish();
            shown = Some(());
            r
        });
        match (r, shown) {
            (Some(r), Some(())) => r,
            _ => f
                .debug_struct("RankLocal")
                .field("backend", &B::NAME)
                .field("len", &len)
                .field("own", &None::<&T>)
                .finish(),
        }
    }
}
