//! A pin ([`Pinned`]): the instances found under it stay alive while it is held.

use super::instance::InstancePtr;
use super::Inst;
use crate::backend::Backend;
use crate::cache;
use crate::collector::{self, Pin};
use crate::erased::Erased;
use crate::primitive::Ordering;
use crate::rank_local::RankLocal;

/// A pin of the crate's collector, taken for lookups of one `RankLocal` (I33): the instances
/// found under it stay alive while it is held.
pub(in crate::rank_local) struct Pinned<'rl, T: Send, B: Backend> {
    pub(super) rl: &'rl RankLocal<T, B>,
    /// The uid loaded after the pin ([`Pinned::for_lookup`]), or [`cache::NO_UID`].
    uid: cache::Uid,
    pin: Pin,
}

impl<'rl, T: Send, B: Backend> Pinned<'rl, T, B> {
    /// Pins, for a visit of the map's snapshot (no cache use); counts the pin as a slow path's.
    pub(in crate::rank_local) fn new(rl: &'rl RankLocal<T, B>) -> Self {
        let pin = collector::pin();
        collector::count_pin(&pin);
        Pinned {
            rl,
            uid: cache::NO_UID,
            pin,
        }
    }

    /// Pins, then loads the uid (I34): the pinned cache entries of that uid are alive while the
    /// pin is held. Does not count the pin: a hit is the fast part of a scoped lookup.
    #[inline]
    pub(in crate::rank_local) fn for_lookup(rl: &'rl RankLocal<T, B>) -> Self {
        rl.uid_or_assign(); // non-zero from now on, so fills never use 0
        let pin = collector::pin();
        // SeqCst, after the pin's SeqCst fence: a sweeper that stored a fresh uid before
        // retiring something this pin does not protect is seen here (I34).
        let uid = rl.core.uid.load(Ordering::SeqCst);
        Pinned { rl, uid, pin }
    }

    /// Counts the pin as a slow path's (a lookup that missed the cache).
    #[inline]
    pub(in crate::rank_local) fn count(&self) {
        collector::count_pin(&self.pin);
    }

    /// `rank`'s instance in the map.
    #[inline]
    pub(in crate::rank_local) fn get(&self, rank: u64) -> Option<Inst<'_, 'rl, T, B>> {
        let p = B::get(&self.rl.core.map, rank)?;
        // SAFETY: an instance of this map, loaded under this pin: a sweep that unpublishes it
        // retires it behind a grace period that waits for the pin (I32, I33).
        Some(unsafe { Inst::new(self.rl, rank, p) })
    }

    /// A scoped lookup of `rank` (I33, I34): the thread cache's pinned entry for the uid loaded
    /// after the pin, else the map (counting the pin as a slow path's), moving an OWNED instance
    /// on to SCOPED (I39); a hit in the map is remembered as the pinned entry. The value is lent
    /// for as long as the pin is borrowed.
    #[inline(always)] // once, in `with_pinned`: keeps the scoped hit as short as a plain one
    pub(in crate::rank_local) fn lookup(&self, rank: u64) -> Option<&T>
    where
        T: Sync,
    {
        // No cache without the uid loaded after the pin (a `Pinned::new`, for visits).
        let cacheable = self.uid != cache::NO_UID && RankLocal::<T, B>::uses_thread_cache(rank);
        if cacheable {
            if let Some(p) = cache::lookup(self.uid, rank | cache::PINNED_TAG) {
                // SAFETY: a pinned entry of the uid current after this pin holds an instance of
                // this map (I34, I5) published when the uid was current: a sweep stores a fresh
                // uid before it retires, so what it retires waits for this pin (I32, I34). Only
                // a scoped instance is stored (below), and a SCOPED or ESCAPED value is never moved
                // out (I39); a `T` of this map (I5, I9).
                return Some(unsafe { InstancePtr::<T>::new(Erased::from_non_null(p)).value() });
            }
        }
        self.count(); // a miss: the slow part of a scoped lookup
        crate::counters::bump!(SCOPED_MAP_LOOKUPS);
        let i = self.get(rank)?;
        // being reclaimed, or a tombstone: gone (I30, I39)
        let v = i.scope()?;
        if cacheable {
            // another rank's scoped lookup (or the thread's own, not live): a scan of many
            // ranks leaves a churning set alone
            cache::store_unless_churning(self.uid, rank | cache::PINNED_TAG, i.erased());
        }
        Some(v)
    }

    /// Every instance of one snapshot, loaded under this pin.
    pub(in crate::rank_local) fn iter(&self) -> impl Iterator<Item = Inst<'_, 'rl, T, B>> + '_ {
        B::iter(&self.rl.core.map).map(|(rank, p)| {
            // SAFETY: an instance of this map, in a snapshot loaded under this pin (I32, I33).
            unsafe { Inst::new(self.rl, rank, p) }
        })
    }
}
