//! Scoped access off the owner's hit path: `with`/`with_for` when the owner entry misses, and
//! `for_each` (I33–I35).
//!
//! The live owner (a thread acting as its own, live rank) needs no pin: the sweeper never takes a
//! live rank's instance (I35), so its entry is cached under the rank tagged `OWNER_TAG`, and a hit
//! costs what `get`'s does. Every other scoped reader pins the crate's collector, then loads the
//! uid, then probes the cache's `PINNED_TAG` entry for that uid and then the map, and holds the
//! pin until `f` returns (I33, I34).

use super::init::{Access, Lent};
use super::instance::InstancePtr;
use super::reclaim::FreeLater;
use super::{RankLocal, SyncValue};
use crate::backend::Backend;
use crate::cache;
use crate::collector::{count_pin, pin, Pin};
use crate::counters;
use crate::erased::Erased;
use crate::identity::{self, RankId};
use crate::primitive::Ordering;

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// Lends every instance to `f` in turn, from one snapshot (scoped visiting: the borrows
    /// cannot escape, so exited ranks' instances stay reclaimable). Holds an epoch pin for the
    /// whole visit; keep `f` short.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// let bytes: RankLocal<AtomicU64> = RankLocal::new();
    /// bytes.with(|b| b.store(3, Ordering::Relaxed));
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || bytes.with(|b| b.store(4, Ordering::Relaxed)));
    /// let mut total = 0;
    /// bytes.for_each(|_, b| total += b.load(Ordering::Relaxed));
    /// assert_eq!(total, 7);
    /// ```
    pub fn for_each(&self, mut f: impl FnMut(RankId, &T))
    where
        T: SyncValue,
    {
        // The pin covers the snapshot's load and the whole visit (I33).
        let _guard = pin();
        count_pin(&_guard);
        for (rank, p) in B::iter(&self.map) {
            // SAFETY: an instance of this map (I5), read from a snapshot loaded under `_guard`
            // (I33).
            let p = unsafe { InstancePtr::<T>::new(p) };
            // SAFETY: as just said (I33). Moves OWNED on to SCOPED; skips what is being
            // reclaimed and tombstones (I30, I39).
            if !unsafe { p.scope() } {
                continue;
            }
            // SAFETY: alive while `_guard` is held (I32, I33); a `T` of this map (I5, I9); the
            // borrow ends with `f`'s call.
            f(RankId::from_raw(rank), unsafe { p.value() });
        }
    }

    /// `true` if `rank` is this thread's own rank and live: its instance cannot be reclaimed
    /// while the thread runs (I35).
    fn is_live_owner(rank: u64) -> bool {
        rank == identity::own_raw() && identity::own_alive()
    }

    /// A non-owner's scoped lookup: pins, then loads the uid, then probes the cache's pinned
    /// entries and the map (I33, I34). The instance is alive while the returned guard is held.
    fn pinned_lookup(&self, rank: u64) -> Option<(InstancePtr<T>, Pin)> {
        self.uid_or_assign(); // non-zero from now on, so fills never use 0
        let guard = pin();
        // SeqCst, after the pin's SeqCst fence: a sweeper that stored a fresh uid before
        // retiring something this pin does not protect is seen here (I34).
        let uid = self.uid.load(Ordering::SeqCst);
        if Self::uses_thread_cache(rank) {
            if let Some(p) = cache::lookup(uid, rank | cache::PINNED_TAG) {
                // SAFETY: a pinned entry for this uid holds an instance of this map (I34, I5).
                let p = unsafe { InstancePtr::new(Erased::from_non_null(p)) };
                return Some((p, guard));
            }
        }
        count_pin(&guard); // a miss: the slow part of a scoped lookup
        counters::bump!(SCOPED_MAP_LOOKUPS);
        // SAFETY: an instance of this map (I5), read from it under `guard` (I33).
        let p = unsafe { InstancePtr::<T>::new(B::get(&self.map, rank)?) };
        // SAFETY: as just said (I33). Moves OWNED on to SCOPED before the value is used or
        // cached (I39).
        if !unsafe { p.scope() } {
            return None; // being reclaimed, or a tombstone: gone (I30, I39)
        }
        if Self::uses_thread_cache(rank) {
            cache::store(uid, rank | cache::PINNED_TAG, p.erased());
        }
        Some((p, guard))
    }

    /// The live owner's lookup of its own instance, with no pin: under the writer lock if it is
    /// free (`None` if not) on the backends whose lookups pin; `Baseline`'s lookup takes its read
    /// lock and pins nothing, so it looks up as before. The live owner's instance needs no
    /// protection once found (I35).
    fn owner_lookup(&self, rank: u64) -> Option<Option<InstancePtr<T>>> {
        if B::LOOKUP_PINS {
            return self.lookup_unpinned(rank, false);
        }
        // SAFETY: an instance of this map (I5), the live owner's (I35).
        Some(B::get(&self.map, rank).map(|p| unsafe { InstancePtr::<T>::new(p) }))
    }

    /// `with` after the owner entry missed: the live owner looks up or creates its instance and
    /// caches it under `OWNER_TAG`; anyone else goes through [`pinned_lookup`](Self::pinned_lookup)
    /// or a scoped first touch, pinned until `f` returns.
    ///
    /// A thread that has no id yet gets one here, and then no map can hold its instance (the
    /// lookup is skipped).
    #[cold]
    #[track_caller]
    pub(super) fn with_slow<R>(&self, init: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R {
        let fresh = identity::current_raw_or_zero() == 0;
        let rank = identity::current_raw();
        let init = || Ok::<T, core::convert::Infallible>(init());
        if Self::is_live_owner(rank) {
            // No pin: under the writer lock if free, else in `insert`, which waits for it.
            let found = if fresh {
                None
            } else {
                self.owner_lookup(rank).flatten()
            };
            let p = match found {
                // The live owner's instance, not reclaimed while the thread runs (I35).
                Some(p) => p,
                None => {
                    let Ok(lent) = self.insert(rank, init, Access::Owner);
                    lent.p // no pin: what the sweep readied was freed in `insert`
                }
            };
            // SAFETY: the live owner's: neither reclaimed (I35) nor a tombstone (I39). OWNED
            // moves on to SCOPED: a rank-aware scoped read (I39).
            unsafe { p.scope() };
            cache::store(self.uid_or_assign(), rank | cache::OWNER_TAG, p.erased());
            // SAFETY: the live owner's instance is not reclaimed while the thread runs (I35),
            // valid for `&self` (I1); a `T` of this map (I5, I9).
            return f(unsafe { p.value() });
        }
        let lent = match self.pinned_lookup(rank) {
            Some((p, pin)) => Lent {
                p,
                pin: Some(pin),
                _frees: FreeLater::nothing(self),
            },
            None => {
                let Ok(lent) = self.insert(rank, init, Access::Scoped);
                lent
            }
        };
        debug_assert!(lent.pin.is_some(), "a scoped first touch returns its pin");
        // SAFETY: alive while `lent.pin` is held (I33); a `T` of this map (I5, I9). `lent` drops
        // after `f`: its pin first, then what a sweep readied is freed.
        f(unsafe { lent.p.value() })
    }

    /// `with_for` after the owner entry missed, as [`with_slow`](Self::with_slow) but never
    /// creating an instance.
    #[cold]
    pub(super) fn with_for_slow<R>(&self, rank: u64, f: impl FnOnce(&T) -> R) -> Option<R> {
        if Self::is_live_owner(rank) {
            // No pin: under the writer lock if free, else a plain lookup (the live owner's
            // instance needs no pin once found, I35; the lookup protects itself, as `Epoch`'s
            // pins).
            let p = match self.owner_lookup(rank) {
                Some(found) => found?,
                // SAFETY: an instance of this map (I5); the live owner's (I35).
                None => unsafe { InstancePtr::<T>::new(B::get(&self.map, rank)?) },
            };
            // SAFETY: as in `with_slow` (I35, I39).
            unsafe { p.scope() };
            cache::store(self.uid_or_assign(), rank | cache::OWNER_TAG, p.erased());
            // SAFETY: as in `with_slow` (I35, I1, I5, I9).
            return Some(f(unsafe { p.value() }));
        }
        let (p, _guard) = self.pinned_lookup(rank)?;
        // SAFETY: alive while `_guard` is held (I33); a `T` of this map (I5, I9).
        Some(f(unsafe { p.value() }))
    }
}
