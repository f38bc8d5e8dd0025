//! Construction and access: `new`, the lookups (`get`, `get_or`, `get_or_try`, `try_get`,
//! `get_for`), scoped access (`with`, `with_or`, `try_with`, `with_existing`, `with_for`) and
//! `len`, each `#[inline]`
//! thread-cache probe followed by its `#[cold]` slow path. First in the module tree, so that
//! rustdoc lists these methods first on the `RankLocal` page.

#![deny(unsafe_code)]

use core::convert::Infallible;

use super::infallible;
use super::raw::{AnyRank, Escaped, Locked, OwnerTag, Reach};
use super::{AccessError, RankLocal, SyncValue};
use crate::backend::Backend;
use crate::collector;
use crate::counters;
use crate::identity::{self, RankId};

// Construction and access: each lookup probes the thread cache inline and falls back to a
// `#[cold]` path.
impl<T: Send, B: Backend> RankLocal<T, B> {
    /// An empty `RankLocal`, usable in a `static`.
    ///
    /// ```
    /// use ranklocal::{Baseline, RankLocal};
    /// use std::sync::atomic::AtomicU64;
    ///
    /// static BYTES_SENT: RankLocal<AtomicU64> = RankLocal::new(); // `const`: fine in a static
    /// let scratch: RankLocal<Vec<u8>, Baseline> = RankLocal::new(); // any backend
    /// assert!(BYTES_SENT.is_empty() && scratch.is_empty());
    /// ```
    #[cfg(not(ranklocal_loom))]
    #[must_use]
    pub const fn new() -> Self {
        empty_rank_local!(B::EMPTY, false)
    }

    /// An empty `RankLocal` (not `const` in the crate's own loom models).
    #[cfg(all(ranklocal_loom, crossbeam_loom))]
    #[must_use]
    pub fn new() -> Self {
        empty_rank_local!(B::empty(), false)
    }

    /// An empty `RankLocal` (`const` in a dependent's loom build: built on first use in each
    /// execution).
    #[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
    #[must_use]
    pub const fn new() -> Self {
        model_rank_local!(false)
    }

    /// An empty `RankLocal` with the `thread_local` crate's lifecycle, made sound: a thread's
    /// value outlives its thread, and a new thread adopts it instead of building its own.
    ///
    /// A value only the owner-only family reached (`get_own*` guards, `with_own*`) is not
    /// dropped when its thread exits: it stays in the map, so `iter`, `iter_mut`, `into_iter`
    /// and `len` see it and a sum after `join` counts every thread; and the first touch of a new
    /// rank adopts it, as it is, instead of calling `init` — never while the ended thread still
    /// holds an [`OwnRef`](crate::OwnRef) of it, never to two ranks at once, the most recently
    /// ended first. So the map holds at most as many such values as threads were alive at once,
    /// and all are dropped with the map (or by `&mut` access). A value another thread reached
    /// (`get`, `get_for`, `iter`, `with`, `with_for`, `for_each`) is kept under its own rank
    /// instead, and never handed on; values are never dropped by a sweep.
    /// [`new`](Self::new) never hands a value to another rank.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    /// use std::sync::Arc;
    ///
    /// // was: Arc<thread_local::ThreadLocal<Cell<u64>>>
    /// let tls = Arc::new(RankLocal::<Cell<u64>>::recycling());
    /// let threads: Vec<_> = (0..5)
    ///     .map(|_| {
    ///         let tls = Arc::clone(&tls);
    ///         std::thread::spawn(move || {
    ///             let cell = tls.get_own_or(|| Cell::new(0)); // was: tls.get_or(..)
    ///             cell.set(cell.get() + 1);
    ///         })
    ///     })
    ///     .collect();
    /// for t in threads {
    ///     t.join().unwrap();
    /// }
    /// let tls = Arc::try_unwrap(tls).unwrap();
    /// let total: u64 = tls.into_iter().map(|(_, c)| c.get()).sum();
    /// assert_eq!(total, 5); // every thread counted, after `join`
    /// ```
    #[cfg(not(ranklocal_loom))]
    #[must_use]
    pub const fn recycling() -> Self {
        empty_rank_local!(B::EMPTY, true)
    }

    /// An empty recycling `RankLocal` (not `const` in the crate's own loom models).
    #[cfg(all(ranklocal_loom, crossbeam_loom))]
    #[must_use]
    pub fn recycling() -> Self {
        empty_rank_local!(B::empty(), true)
    }

    /// An empty recycling `RankLocal` (`const` in a dependent's loom build).
    #[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
    #[must_use]
    pub const fn recycling() -> Self {
        model_rank_local!(true)
    }

    /// An empty `RankLocal`, for code ported from the `thread_local` crate's
    /// `ThreadLocal::with_capacity`. `capacity` is a hint only, and this map ignores it: its
    /// snapshot grows one trie path per rank, so there is no table to pre-size, and a first
    /// touch costs the same with or without it.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    ///
    /// let per_worker: RankLocal<Vec<u8>> = RankLocal::with_capacity(16);
    /// assert!(per_worker.is_empty());
    /// ```
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        let _ = capacity;
        Self::new()
    }

    /// The current rank's instance, created with `T::default()` on first use.
    ///
    /// The current rank is [`RankId::current`]: the thread's own, or the one it acts for inside
    /// [`on_behalf_of`](crate::on_behalf_of). If that rank has exited, this still returns (or
    /// creates) its instance; [`purge_exited`](Self::purge_exited) drops it.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let calls: RankLocal<AtomicU32> = RankLocal::new();
    /// calls.get().fetch_add(1, Ordering::Relaxed);
    /// assert_eq!(calls.get().load(Ordering::Relaxed), 1); // the same instance again
    /// let job = Rank::new();
    /// // another rank gets its own, fresh instance
    /// on_behalf_of(job.id(), || assert_eq!(calls.get().load(Ordering::Relaxed), 0));
    /// assert_eq!(calls.len(), 2);
    /// ```
    ///
    /// # Panics
    /// If called for a rank from inside that rank's own `init` on this `RankLocal` (reentrant
    /// initialization), or if `T::default()` panics.
    #[inline]
    #[track_caller]
    pub fn get(&self) -> &T
    where
        T: Default + SyncValue,
    {
        self.get_or(T::default)
    }

    /// The current rank's instance, created with `T::default()` on first use: the same as
    /// [`get`](Self::get), under the name the `thread_local` crate uses.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let hits: RankLocal<AtomicU32> = RankLocal::new();
    /// hits.get_or_default().fetch_add(1, Ordering::Relaxed);
    /// assert_eq!(hits.get_or_default().load(Ordering::Relaxed), 1);
    /// assert!(std::ptr::eq(hits.get_or_default(), hits.get()));
    /// ```
    ///
    /// # Panics
    /// As [`get`](Self::get).
    #[inline]
    #[track_caller]
    pub fn get_or_default(&self) -> &T
    where
        T: Default + SyncValue,
    {
        self.get_or(T::default)
    }

    /// The current rank's instance, created with `init` on first use.
    ///
    /// `init` runs at most once per rank, with no lock held; other ranks' readers and writers
    /// proceed meanwhile, and another thread asking for the same rank waits for it. If `init`
    /// panics, nothing is inserted and the next call tries again.
    ///
    /// # Deadlock
    /// What is guaranteed, exactly: a `get` from inside the same rank's `init` *on the same
    /// thread* panics ("reentrant initialization") instead of deadlocking, and an `init` never
    /// waits for a lock or for another rank. What is not (as with `std::sync::OnceLock`): an
    /// `init` that waits for another thread which asks for the same rank of the same `RankLocal`
    /// deadlocks — that thread waits for the `init` to finish, the `init` waits for it. For
    /// example, an `init` that hands its own rank to a worker and joins it,
    /// `thread::scope(|s| s.spawn(move || on_behalf_of(me, || RL.get())).join())`, never returns;
    /// so do two `init`s on two threads that wait for each other's ranks.
    ///
    /// ```
    /// use ranklocal::{RankId, RankLocal};
    ///
    /// let names: RankLocal<String> = RankLocal::new();
    /// let name = names.get_or(|| format!("worker {}", RankId::current()));
    /// // `init` ran once for this rank; later calls return the same instance
    /// let again = names.get_or(|| unreachable!());
    /// assert!(std::ptr::eq(name, again));
    /// assert_eq!(*name, format!("worker {}", RankId::current()));
    /// ```
    ///
    /// # Panics
    /// If called for a rank from inside that rank's own `init` on this `RankLocal`, or if `init`
    /// panics.
    #[inline]
    #[track_caller]
    pub fn get_or(&self, init: impl FnOnce() -> T) -> &T
    where
        T: SyncValue,
    {
        let v = infallible(self.get_or_try(|| Ok::<T, Infallible>(init())));
        v
    }

    /// The current rank's instance, created with `init` on first use; if `init` fails, nothing is
    /// inserted and its error is returned (the next call tries again).
    ///
    /// ```
    /// use ranklocal::RankLocal;
    ///
    /// let port: RankLocal<u16> = RankLocal::new();
    /// assert!(port.get_or_try(|| "http".parse::<u16>()).is_err());
    /// assert!(port.try_get().is_none()); // the failed init inserted nothing
    /// assert_eq!(port.get_or_try(|| "8080".parse::<u16>()), Ok(&8080));
    /// ```
    ///
    /// # Panics
    /// As [`get_or`](Self::get_or).
    #[inline]
    #[track_caller]
    pub fn get_or_try<E>(&self, init: impl FnOnce() -> Result<T, E>) -> Result<&T, E>
    where
        T: SyncValue,
    {
        // 0 if the thread has no id yet: the cache then misses and the slow path assigns one.
        let rank = identity::current_raw_or_zero();
        if let Some(v) = self.cached(rank) {
            return Ok(v);
        }
        self.get_or_try_slow(rank, init)
    }

    #[cold]
    #[track_caller]
    fn get_or_try_slow<E>(&self, rank: u64, init: impl FnOnce() -> Result<T, E>) -> Result<&T, E>
    where
        T: Sync,
    {
        // 0: the thread had no id, so `current_raw` assigns one now that nobody else has seen:
        // no map can hold it, and the lookup (a pin on `Epoch`) is skipped.
        let rank = if rank == 0 {
            identity::current_raw()
        } else {
            // The thread's own rank: no pin, whatever the thread did before (a first touch
            // takes the writer lock anyway).
            let own = B::LOOKUP_PINS && rank == identity::own_raw();
            if own {
                counters::bump!(MAP_LOOKUPS);
            }
            let found = match own
                .then(|| self.lookup_escaped_unpinned::<AnyRank>(rank))
                .flatten()
            {
                Some(found) => found,
                None if self.skips_lookup_before_lock(rank) => None, // a new rank's first touch
                None => self.lookup_slow::<AnyRank>(rank),
            };
            if let Some(v) = found {
                return Ok(v);
            }
            rank
        };
        self.first_touch_escaped::<AnyRank, _>(rank, init) // no pin: the sweep's frees are done
    }

    /// The current rank's instance if it exists; never creates one.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let buf: RankLocal<Vec<u8>> = RankLocal::new();
    /// assert!(buf.try_get().is_none());
    /// assert!(buf.try_get().is_none()); // still none: `try_get` created nothing
    /// buf.get_or(|| vec![1, 2]);
    /// assert_eq!(buf.try_get(), Some(&vec![1, 2]));
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || assert!(buf.try_get().is_none())); // not for another rank
    /// ```
    #[inline]
    pub fn try_get(&self) -> Option<&T>
    where
        T: SyncValue,
    {
        self.get_for(RankId::current())
    }

    /// `rank`'s instance if it exists; never creates one. Works for any rank, including one that
    /// has exited — its thread ended or its [`Rank`](crate::Rank) was dropped — until
    /// [`purge_exited`](Self::purge_exited) drops the instance.
    ///
    /// ```
    /// use ranklocal::{RankId, RankLocal};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let score: RankLocal<AtomicU32> = RankLocal::new();
    /// let worker = std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         score.get().store(7, Ordering::Relaxed);
    ///         RankId::current()
    ///     })
    ///     .join()
    ///     .unwrap()
    /// });
    /// // the worker has exited; its instance stays until `purge_exited`
    /// assert_eq!(score.get_for(worker).unwrap().load(Ordering::Relaxed), 7);
    /// assert!(score.get_for(RankId::current()).is_none()); // this thread never touched it
    /// ```
    #[inline]
    pub fn get_for(&self, rank: RankId) -> Option<&T>
    where
        T: SyncValue,
    {
        let rank = rank.as_u64();
        self.cached(rank)
            .or_else(|| self.lookup_slow::<AnyRank>(rank))
    }

    /// Looks `rank` up in the map and fills the thread cache on a hit (step 2).
    ///
    /// On a backend whose lookups pin (`Epoch`, `ArcSwap`), a thread with no participant on the
    /// crate's collector looks ranks up (its first few such lookups) with no pin, under the
    /// writer lock when it is free ([`lookup_escaped_unpinned`](Self::lookup_escaped_unpinned)):
    /// a thread's first pin registers it, and crossbeam then walks every registered thread,
    /// O(registered threads). So a thread that looks up a few ranks with `get`/`get_for` never
    /// registers (`get`'s slow path does the same for the thread's own rank, whatever the thread
    /// did before). A registered thread (or one that keeps missing), and any thread while
    /// another holds the lock, looks up under a pin, lock-free. Never waits for the lock.
    #[cold]
    pub(super) fn lookup_slow<R: Reach<T, B>>(&self, rank: u64) -> Option<&T> {
        counters::bump!(MAP_LOOKUPS);
        if B::LOOKUP_PINS && !collector::prefers_pin() {
            if let Some(found) = self.lookup_escaped_unpinned::<R>(rank) {
                return found;
            }
        }
        // The escape runs inside the lookup's protection (one pin on Epoch, the read lock on
        // Baseline), which keeps the instance alive from the map load to the escape (I33).
        self.lookup_escaped::<R>(rank)
    }

    /// [`lookup_slow`](Self::lookup_slow) under a free writer lock: `None` if another thread
    /// holds it. Out of line, so that the pinned lookup's code stays as it was.
    #[cold]
    #[inline(never)]
    fn lookup_escaped_unpinned<R: Reach<T, B>>(&self, rank: u64) -> Option<Option<&T>> {
        // Under the writer lock the map cannot change and its version's nodes stay alive (I16,
        // I17), so no pin is needed for the lookup. The escape is a CAS: an owner-only
        // instance's exit work may move it on meanwhile, under its gate lock, not this one (I39);
        // a tombstone counts as absent.
        let w = Locked::try_new(self)?;
        counters::bump!(UNPINNED_LOOKUPS);
        let found = w.get(rank).and_then(R::escaped);
        drop(w); // the cache is filled outside the lock
        Some(found.map(Escaped::cached))
    }

    /// Whether a first touch of `rank` that missed the thread cache skips the lookup before the
    /// writer lock: `rank` is a new rank's, above every rank the map inserted (whose re-check
    /// under the lock serves one inserted meanwhile), on a backend whose lookups pin. `Baseline`
    /// keeps the C++ design's read-locked lookup.
    #[inline]
    pub(super) fn skips_lookup_before_lock(&self, rank: u64) -> bool {
        B::LOOKUP_PINS && self.core.above_every_rank(rank)
    }

    /// Whether lookups of `rank` go through the thread cache on this backend.
    #[inline]
    pub(super) fn uses_thread_cache(rank: u64) -> bool {
        B::CACHES_DELEGATED || rank == identity::own_raw()
    }

    /// The current rank's instance, created with `T::default()` on first use, lent to `f`: scoped
    /// access, like `std::thread::LocalKey::with`.
    ///
    /// Unlike [`get`](Self::get), whose `&T` lives as long as the `RankLocal` (forever, for a
    /// `static`), the borrow cannot escape `f`; so an instance only ever reached this way is
    /// dropped after its rank exits — without `&mut`, statics included. Use
    /// `with` for per-thread state of short-lived threads; use `get` when you need the reference
    /// outside a closure (the instance is then kept until `&mut` access or drop). The owner's
    /// `with` is a thread-cache hit, as `get`; a delegate's holds an epoch pin during `f`.
    ///
    /// `T` must be `Sync` ([`SyncValue`]): a delegate on another thread may read the value while
    /// its owner does. For state only its own thread touches — a `Cell`, a `RefCell`, or a struct
    /// that holds one (`struct Stats { hits: Cell<u64> }`) — use
    /// [`with_own`](Self::with_own), the one-to-one port of std's `LocalKey::with`: it needs
    /// `Send` only, keeps the `Cell`, and drops the value when its thread exits. (From Rust 1.85
    /// the compiler's error on `with` says so, also for such a struct; older compilers name the
    /// field and suggest an atomic or a lock, which only state other threads read needs.)
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// static SENT: RankLocal<AtomicU64> = RankLocal::new();
    ///
    /// for _ in 0..100 {
    ///     std::thread::spawn(|| SENT.with(|n| n.fetch_add(1, Ordering::Relaxed))).join().unwrap();
    /// }
    /// SENT.reclaim_exited(); // writers also do this on their own, amortized
    /// assert_eq!(SENT.len(), 0); // the exited threads' instances are gone
    /// ```
    ///
    /// # Panics
    /// As [`get`](Self::get). A panic in `f` propagates; nothing is leaked.
    #[inline]
    #[track_caller]
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R
    where
        T: Default + SyncValue,
    {
        self.with_or(T::default, f)
    }

    /// The current rank's instance, created with `init` on first use, lent to `f`: scoped access
    /// as [`with`](Self::with), for a `T` without `Default` (what a `rank_local!` key's `with`
    /// does with its initializer).
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::sync::Mutex;
    ///
    /// struct Conn {
    ///     peer: String,
    ///     sent: Mutex<u64>,
    /// }
    ///
    /// static CONNS: RankLocal<Conn> = RankLocal::new();
    ///
    /// let open = || Conn { peer: "10.0.0.1".into(), sent: Mutex::new(0) };
    /// CONNS.with_or(open, |c| *c.sent.lock().unwrap() += 1);
    /// let sent = CONNS.with_or(|| unreachable!("exists"), |c| *c.sent.lock().unwrap());
    /// assert_eq!(sent, 1);
    /// assert_eq!(CONNS.with_or(open, |c| c.peer.clone()), "10.0.0.1");
    /// ```
    ///
    /// # Panics
    /// As [`get_or`](Self::get_or). A panic in `f` propagates; nothing is leaked.
    #[inline]
    #[track_caller]
    pub fn with_or<R>(&self, init: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R
    where
        T: SyncValue,
    {
        let rank = identity::current_raw_or_zero();
        match self.with_owner_entry(rank, OwnerTag::Owner, f) {
            Ok(r) => r,
            Err(f) => self.with_slow(init, f),
        }
    }

    /// The current rank's instance, created with `T::default()` on first use, lent to `f` — or
    /// [`AccessError`] while this thread's own storage is being or has been torn down: std's
    /// `LocalKey::try_with`. It fails only when the thread acts for its own rank from a
    /// thread-local destructor that runs after the crate's exit work (another rank's instance,
    /// inside [`on_behalf_of`](crate::on_behalf_of), is still reached). Scoped access as
    /// [`with`](Self::with); to look without creating, use
    /// [`with_existing`](Self::with_existing).
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let hits: RankLocal<AtomicU32> = RankLocal::new();
    /// assert_eq!(hits.try_with(|h| h.fetch_add(1, Ordering::Relaxed)), Ok(0)); // created
    /// assert_eq!(hits.try_with(|h| h.load(Ordering::Relaxed)), Ok(1));
    /// ```
    ///
    /// # Panics
    /// As [`with`](Self::with).
    #[inline]
    #[track_caller]
    pub fn try_with<R>(&self, f: impl FnOnce(&T) -> R) -> Result<R, AccessError>
    where
        T: Default + SyncValue,
    {
        if identity::own_storage_torn_down() && identity::acting_as_self() {
            return Err(AccessError::new());
        }
        Ok(self.with(f))
    }

    /// The current rank's instance lent to `f` if it exists, else `None`: never creates one, and,
    /// like [`with`](Self::with), hands out no `&T` that outlives `f` (the instance stays
    /// reclaimable after its rank exits). The scoped form of [`try_get`](Self::try_get), as
    /// `with_for(RankId::current(), f)`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let hits: RankLocal<AtomicU32> = RankLocal::new();
    /// assert_eq!(hits.with_existing(|h| h.load(Ordering::Relaxed)), None); // nothing created
    /// assert!(hits.is_empty());
    /// hits.with(|h| h.fetch_add(1, Ordering::Relaxed));
    /// assert_eq!(hits.with_existing(|h| h.load(Ordering::Relaxed)), Some(1));
    /// ```
    #[inline]
    pub fn with_existing<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R>
    where
        T: SyncValue,
    {
        self.with_for(RankId::current(), f)
    }

    /// `rank`'s instance lent to `f`, or `None` if it has none (never creates one); scoped
    /// access as [`with`](Self::with). For a rank other than the thread's own, the instance is
    /// kept alive by an epoch pin during `f`, even if the rank exits meanwhile.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    /// use std::sync::Mutex;
    ///
    /// let logs: RankLocal<Mutex<Vec<&str>>> = RankLocal::new();
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || logs.with(|l| l.lock().unwrap().push("step")));
    /// assert_eq!(logs.with_for(job.id(), |l| l.lock().unwrap().len()), Some(1));
    /// assert_eq!(logs.with_for(Rank::new().id(), |_| ()), None);
    /// ```
    #[inline]
    pub fn with_for<R>(&self, rank: RankId, f: impl FnOnce(&T) -> R) -> Option<R>
    where
        T: SyncValue,
    {
        let rank = rank.as_u64();
        match self.with_owner_entry(rank, OwnerTag::Owner, f) {
            Ok(r) => Some(r),
            Err(f) => self.with_for_slow(rank, f),
        }
    }
}

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// Number of instances not yet freed: every rank's in the map, and the ones of exited ranks
    /// that a sweep took out of it and that wait to be dropped — for a grace period (a reader
    /// may still see them), for a held [`Iter`](crate::Iter) whose snapshot holds them, or for a
    /// call made outside every scoped read (a first touch inside another `RankLocal`'s
    /// `with_for` or `for_each` drops nothing). So `len` shows what the map keeps: a dashboard
    /// built on it sees a leak. A value that its thread's exit dropped (see
    /// [`with_own`](Self::with_own)) leaves its slot counted until a sweep or a `&mut` call frees
    /// it (or a first touch of the rank fills it again). Values kept for ranks that exited
    /// because they were handed out as `&T` are counted here too;
    /// [`kept_exited`](Self::kept_exited) counts those alone.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let rl: RankLocal<u32> = RankLocal::new();
    /// assert_eq!(rl.len(), 0);
    /// rl.get_or(|| 1);
    /// rl.get_or(|| 2); // same rank: no new instance
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || rl.get_or(|| 3));
    /// assert_eq!(rl.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.core.kept()
    }

    /// `true` if no rank has an instance.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    ///
    /// let mut rl: RankLocal<String> = RankLocal::new();
    /// assert!(rl.is_empty());
    /// rl.get();
    /// assert!(!rl.is_empty());
    /// rl.clear();
    /// assert!(rl.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
