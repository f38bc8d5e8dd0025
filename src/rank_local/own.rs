//! Owner-only access — `get_own`, `get_own_or`, `try_get_own` (as [`OwnRef`] guards), `with_own`,
//! `with_own_or`, `try_with_own`, `with_own_existing` — and dropping, at its thread's exit, an
//! instance only this family reached (I39, I41).
//!
//! The family always reaches the calling OS thread's own instance (`identity::own_raw`), also
//! inside `on_behalf_of`, so it needs `T: Send` only: no other thread can reach the instance but
//! through the rank-aware methods, which need `T: Sync` ([`SyncValue`]).
//!
//! # Exit drop
//! An instance only this family reached so far is OWNED: its thread's exit hook drops it on that
//! thread, as its own rank, as std's `thread_local!` does, or leaves it to the last live
//! `OwnRef` (I41); any other access moves it on first (the gate in `raw`, I39).

#![deny(unsafe_code)]

use core::convert::Infallible;
use core::fmt;

use super::infallible;
use super::init::Access;
use super::raw::{Held, Inst, LiveOwner, OwnRank, OwnRef, OwnerTag, Pinned};
use super::{AccessError, RankLocal};
use crate::backend::Backend;
use crate::identity;

/// The values a rank-aware method can hand to another thread than their owner's: `Send + Sync`.
/// Implemented for every such type; bounding the methods on it (rather than on `Sync`) lets the
/// compiler's error for a `RefCell` or `Cell` name the method that fits — from Rust 1.85 also for
/// a struct that holds one (the impl is marked `#[diagnostic::do_not_recommend]`, so the error is
/// about the struct and this trait, not about the field's `Sync`).
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
#[cfg_attr(
    ranklocal_diagnostic,
    diagnostic::on_unimplemented(
        message = "`{Self}` is not `Sync`: this `RankLocal` method can hand the value to another thread",
        label = "needs a `Sync` value: another thread may read it",
        note = "for state only its own thread touches (a `RefCell`, a `Cell`), use the owner-only \
                methods `with_own`/`get_own` (also `with_own_or`, `get_own_or`; `try_get_own` and \
                `with_own_existing` never create, as the `thread_local` crate's `get()`): they \
                reach the calling thread's own instance and need `Send` only",
        note = "for state other threads read (`get_for`, `iter`, `on_behalf_of`), use a thread-safe \
                type: a `Mutex`, an `RwLock`, an atomic",
        note = "a struct or enum is `Sync` only if every field is: a `Cell` or `RefCell` field \
                makes it not `Sync`, and `with_own`/`get_own` are the methods for it"
    )
)]
pub trait SyncValue: Send + Sync {}

#[cfg_attr(ranklocal_do_not_recommend, diagnostic::do_not_recommend)]
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
    /// This OS thread's own instance, created with `T::default()` on first use, as an
    /// [`OwnRef`]: a guard that derefs to `T` and stays on this thread. Unlike
    /// [`get`](Self::get) it ignores [`on_behalf_of`](crate::on_behalf_of) — it is always the
    /// calling thread's own — so it needs `T: Send` only: a `RefCell` or `Cell` is fine.
    ///
    /// The guard can be held across calls (a searcher, an iterator). A value only ever reached
    /// through `OwnRef`s and [`with_own`](Self::with_own) is dropped when its thread exits, on
    /// that thread, before `join` returns — or, if an `OwnRef` of it is still alive then (kept by
    /// another thread-local's destructor), when the last one is dropped, on that thread.
    /// [`OwnRef::leak`] makes it a plain `&T`, and the value a kept one (like `get`'s: until
    /// `&mut` access or the `RankLocal`'s drop). The hit path is one thread-cache probe and a
    /// count the guard's drop takes back: no lock, no atomic read-modify-write, no allocation.
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
    pub fn get_own(&self) -> OwnRef<'_, T>
    where
        T: Default + 'static,
    {
        self.get_own_or(T::default)
    }

    /// This OS thread's own instance, created with `init` on first use, as an [`OwnRef`]; see
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
    pub fn get_own_or(&self, init: impl FnOnce() -> T) -> OwnRef<'_, T>
    where
        T: 'static,
    {
        let held = match self.own_entry_ref(identity::own_raw_or_zero()) {
            Some(h) => h,
            None => self.get_own_slow(init),
        };
        OwnRef::held(held)
    }

    /// This OS thread's own instance as an [`OwnRef`], created with `init` on first use if it
    /// succeeds; if `init` fails, nothing is inserted, the error is returned, and the next call
    /// tries again. The owner-only form of [`get_or_try`](Self::get_or_try): `T: Send` only.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    ///
    /// let conns: RankLocal<RefCell<Vec<u8>>> = RankLocal::new();
    /// assert_eq!(conns.get_own_or_try(|| Err::<_, &str>("refused")).err(), Some("refused"));
    /// assert!(conns.try_get_own().is_none()); // nothing inserted
    /// let c = conns.get_own_or_try(|| Ok::<_, &str>(RefCell::new(vec![1]))).unwrap();
    /// assert_eq!(*c.borrow(), [1]);
    /// ```
    ///
    /// # Panics
    /// As [`get_or`](Self::get_or).
    #[inline]
    #[track_caller]
    pub fn get_own_or_try<E>(&self, init: impl FnOnce() -> Result<T, E>) -> Result<OwnRef<'_, T>, E>
    where
        T: 'static,
    {
        let held = match self.own_entry_ref(identity::own_raw_or_zero()) {
            Some(h) => h,
            None => self.get_own_slow_try(init)?,
        };
        Ok(OwnRef::held(held))
    }

    /// `get_own_or` after the `with_own` entry missed: the live owner looks up (or creates
    /// OWNED) its instance and caches it; a thread past its exit hook (a late thread-local
    /// destructor) gets a LINGERING instance counted, and any other kept (I41).
    #[cold]
    #[track_caller]
    fn get_own_slow(&self, init: impl FnOnce() -> T) -> Held<'_, T> {
        infallible(self.get_own_slow_try(|| Ok::<T, Infallible>(init())))
    }

    /// [`get_own_slow`](Self::get_own_slow) with a fallible `init`: an error inserts nothing.
    #[cold]
    #[track_caller]
    fn get_own_slow_try<E>(&self, init: impl FnOnce() -> Result<T, E>) -> Result<Held<'_, T>, E> {
        let fresh = identity::own_raw_or_zero() == 0;
        let rank = identity::own_raw();
        let init = || as_own(rank, init);
        if let Some(owner) = LiveOwner::new(self, rank) {
            let found = if fresh { None } else { owner.get() };
            let i = match found {
                Some(i) => i,
                None => self.first_touch_owner(&owner, init, Access::Own)?,
            };
            owner.cache(i, OwnerTag::Own);
            return Ok(owner
                .own_ref(i)
                .expect("ranklocal: the live owner's instance is in use"));
        }
        if let Some(g) = self.own_ref_late(rank) {
            return Ok(g);
        }
        // escaped (kept), then found again as a counted guard
        self.first_touch_escaped::<OwnRank, _>(rank, init)?;
        Ok(self
            .own_ref_late(rank)
            .expect("ranklocal: an escaped instance stays in the map"))
    }

    /// Past the exit hook (or under loom, where thread liveness is not tracked): the thread's
    /// own instance under a pin, a LINGERING one counted, any other kept (I41).
    fn own_ref_late(&self, rank: u64) -> Option<Held<'_, T>> {
        Pinned::new(self).get(rank).and_then(Inst::own_ref)
    }

    /// This OS thread's own instance if it exists, as an [`OwnRef`] (see
    /// [`get_own`](Self::get_own)); never creates one.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let rl: RankLocal<Cell<u8>> = RankLocal::new();
    /// assert!(rl.try_get_own().is_none());
    /// rl.with_own(|c| c.set(3));
    /// assert_eq!(rl.try_get_own().map(|c| c.get()), Some(3));
    /// ```
    #[inline]
    pub fn try_get_own(&self) -> Option<OwnRef<'_, T>> {
        let rank = identity::own_raw_or_zero();
        if rank == 0 {
            return None; // no id yet: no map holds an instance of it
        }
        let held = match self.own_entry_ref(rank) {
            Some(h) => h,
            None => self.try_get_own_slow(rank)?,
        };
        Some(OwnRef::held(held))
    }

    #[cold]
    fn try_get_own_slow(&self, rank: u64) -> Option<Held<'_, T>> {
        if let Some(owner) = LiveOwner::new(self, rank) {
            let i = owner.get()?;
            let g = owner.own_ref(i)?;
            owner.cache(i, OwnerTag::Own);
            return Some(g);
        }
        self.own_ref_late(rank)
    }

    /// This OS thread's own instance, created with `T::default()` on first use, lent to `f`:
    /// the owner-only form of `std::thread::LocalKey::with`, for a `RefCell`, a `Cell` or any
    /// `T: Send`. It ignores [`on_behalf_of`](crate::on_behalf_of).
    ///
    /// An instance only ever reached by `with_own` (and [`try_with_own`](Self::try_with_own),
    /// [`with_own_existing`](Self::with_own_existing)) is
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
    /// `T: 'static`, as for std's `thread_local!`: a value dropped at its thread's exit may outlive
    /// everything but `'static` data (the map may have been forgotten meanwhile).
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
        T: Default + 'static,
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
    pub fn with_own_or<R>(&self, init: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R
    where
        T: 'static,
    {
        let rank = identity::own_raw_or_zero();
        match self.with_owner_entry(rank, OwnerTag::Own, f) {
            Ok(r) => r,
            Err(f) => self
                .with_own_slow(Some(init), f)
                .expect("ranklocal: with_own_slow with an init returns"),
        }
    }

    /// This OS thread's own instance, created with `T::default()` on first use, lent to `f` — or
    /// [`AccessError`] while this thread's own storage is being or has been torn down (from a
    /// thread-local destructor that runs after the crate's exit work): std's
    /// `LocalKey::try_with`, on the owner-only family. To look without creating, use
    /// [`with_own_existing`](Self::with_own_existing).
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let rl: RankLocal<Cell<u32>> = RankLocal::new();
    /// assert_eq!(rl.try_with_own(|c| c.replace(5)), Ok(0)); // created, as std's does
    /// assert_eq!(rl.try_with_own(Cell::get), Ok(5));
    /// ```
    ///
    /// # Panics
    /// As [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn try_with_own<R>(&self, f: impl FnOnce(&T) -> R) -> Result<R, AccessError>
    where
        T: Default + 'static,
    {
        if identity::own_storage_torn_down() {
            return Err(AccessError::new());
        }
        Ok(self.with_own(f))
    }

    /// This OS thread's own instance lent to `f` if it exists, else `None`: never creates one and
    /// hands out no `&T` that outlives `f`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let rl: RankLocal<Cell<u32>> = RankLocal::new();
    /// assert_eq!(rl.with_own_existing(Cell::get), None);
    /// rl.with_own(|c| c.set(9));
    /// assert_eq!(rl.with_own_existing(Cell::get), Some(9));
    /// ```
    #[inline]
    pub fn with_own_existing<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let rank = identity::own_raw_or_zero();
        match self.with_owner_entry(rank, OwnerTag::Own, f) {
            Ok(r) => Some(r),
            Err(f) => self.with_own_slow(None::<fn() -> T>, f),
        }
    }

    /// `with_own`/`with_own_existing` after the own entry missed: the live owner looks up (or, with
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
                    let i = infallible(self.first_touch_owner(&owner, init?, Access::Own));
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
        if let Some(i) = pin.get(rank) {
            // LINGERING: lent through a counted guard, so that a guard dropped inside `f` cannot
            // drop the value under it (I41).
            if let Some(h) = i.lingering_ref() {
                drop(pin);
                return Some(f(&OwnRef::held(h)));
            }
            if let Some(v) = i.own() {
                return Some(f(v));
            }
        }
        drop(pin);
        let r = infallible(self.first_touch_scoped::<OwnRank, _, _>(rank, init?, f));
        Some(r)
    }
}

/// Shows the count and the calling thread's own value (as [`RankLocal::with_own_existing`]
/// reaches it: never another thread's, never escaping, never creating), as the `thread_local`
/// crate's `Debug` does; so a struct holding a `RankLocal` of a `RefCell` can derive `Debug`.
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
        let r = self.with_own_existing(|v| {
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
