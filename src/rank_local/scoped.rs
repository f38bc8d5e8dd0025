//! Scoped access off the owner's hit path: `with`/`with_for` when the owner entry misses, and
//! `for_each` (I33–I35).
//!
//! The live owner (a thread acting as its own, live rank) needs no pin: the sweeper never takes a
//! live rank's instance (I35), so its entry is cached under the rank tagged `OWNER_TAG`, and a hit
//! costs what `get`'s does. Every other scoped reader pins the crate's collector, then loads the
//! uid, then probes the cache's `PINNED_TAG` entry for that uid and then the map, and holds the
//! pin until `f` returns (I33, I34).

#![deny(unsafe_code)]

use core::convert::Infallible;

use super::infallible;
use super::init::Access;
use super::raw::{AnyRank, Inst, LiveOwner, Locked, OwnerTag, Pinned};
use super::{RankLocal, SyncValue};
use crate::backend::Backend;
use crate::counters;
use crate::identity::{self, RankId};

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
        let pin = Pinned::new(self);
        for i in pin.iter() {
            // Moves OWNED on to SCOPED; skips what is being reclaimed and tombstones (I30, I39).
            if let Some(v) = i.scope() {
                f(RankId::from_raw(i.rank()), v);
            }
        }
    }

    /// A non-owner's scoped read: lends `rank`'s instance to `f` under a pin held until `f`
    /// returns ([`Pinned::lookup`]); gives `f` back if there is none.
    #[inline]
    fn with_pinned<R, F: FnOnce(&T) -> R>(&self, rank: u64, f: F) -> Result<R, F>
    where
        T: Sync,
    {
        let pin = Pinned::for_lookup(self);
        match pin.lookup(rank) {
            Some(v) => Ok(f(v)),
            None => Err(f),
        }
    }

    /// The live owner's lookup of its own instance, with no pin: under the writer lock if it is
    /// free (`None` if not) on the backends whose lookups pin; `Baseline`'s lookup takes its read
    /// lock and pins nothing, so it looks up as before. The live owner's instance needs no
    /// protection once found (I35).
    fn owner_lookup<'o>(
        &'o self,
        owner: &'o LiveOwner<'o, T, B>,
    ) -> Option<Option<Inst<'o, 'o, T, B>>> {
        if B::LOOKUP_PINS {
            let w = Locked::try_new(self)?;
            counters::bump!(UNPINNED_LOOKUPS);
            return Some(w.get(owner.rank()).and_then(|i| owner.adopt(i)));
        }
        Some(owner.get())
    }

    /// `with` after the owner entry missed: the live owner looks up or creates its instance and
    /// caches it under `OWNER_TAG`; anyone else goes through [`with_pinned`](Self::with_pinned)
    /// or a scoped first touch, pinned until `f` returns.
    ///
    /// A thread that has no id yet gets one here, and then no map can hold its instance (the
    /// lookup is skipped).
    #[cold]
    #[track_caller]
    pub(super) fn with_slow<R>(&self, init: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R
    where
        T: Sync,
    {
        let fresh = identity::current_raw_or_zero() == 0;
        let rank = identity::current_raw();
        let init = || Ok::<T, Infallible>(init());
        if let Some(owner) = LiveOwner::new(self, rank) {
            // No pin: under the writer lock if free, else in `first_touch_owner`, which waits for it.
            let found = if fresh {
                None
            } else {
                self.owner_lookup(&owner).flatten()
            };
            let i = match found {
                Some(i) => i,
                None => {
                    let i = infallible(self.first_touch_owner(&owner, init, Access::Owner));
                    i
                }
            };
            return self.lend_owner(&owner, i, f);
        }
        let f = if self.skips_lookup_before_lock(rank) {
            f
        } else {
            match self.with_pinned(rank, f) {
                Ok(r) => return r,
                Err(f) => f,
            }
        };
        infallible(self.first_touch_scoped::<AnyRank, _, _>(rank, init, f))
    }

    /// `with_for` after the owner entry missed, as [`with_slow`](Self::with_slow) but never
    /// creating an instance.
    #[cold]
    pub(super) fn with_for_slow<R>(&self, rank: u64, f: impl FnOnce(&T) -> R) -> Option<R>
    where
        T: Sync,
    {
        if let Some(owner) = LiveOwner::new(self, rank) {
            // No pin: under the writer lock if free, else a plain lookup (the live owner's
            // instance needs no pin once found, I35; the lookup protects itself, as `Epoch`'s
            // pins).
            let i = match self.owner_lookup(&owner) {
                Some(found) => found?,
                None => owner.get()?,
            };
            return Some(self.lend_owner(&owner, i, f));
        }
        self.with_pinned(rank, f).ok()
    }

    /// Lends the live owner's instance `i` to `f`, moving OWNED on to SCOPED (a rank-aware
    /// scoped read, I39), and caches it under `OWNER_TAG`: the owner's next `with` is a hit.
    fn lend_owner<'o, R>(
        &'o self,
        owner: &'o LiveOwner<'o, T, B>,
        i: Inst<'o, 'o, T, B>,
        f: impl FnOnce(&T) -> R,
    ) -> R {
        // The live owner's: neither reclaimed (I35) nor a tombstone (only its own exit work makes
        // one, I39).
        let v = i
            .scope_own()
            .expect("ranklocal: the live owner's instance is in use");
        owner.cache(i, OwnerTag::Owner);
        f(v)
    }
}
