//! The live owner ([`LiveOwner`]), its thread-cache entries and their hit paths.

use core::marker::PhantomData;

use super::instance::{InstancePtr, ESCAPED, OWNED};
use super::{Held, Inst};
use crate::backend::Backend;
use crate::cache;
use crate::erased::Erased;
use crate::identity;
use crate::primitive::Ordering;
use crate::rank_local::RankLocal;

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// Lends the value of the thread cache's owner entry `tag` for `rank` to `f`; gives `f` back
    /// on a miss. An owner entry stays valid whatever the uid (I34, I35), so the uid is only a
    /// name here.
    #[inline]
    pub(in crate::rank_local) fn with_owner_entry<R, F: FnOnce(&T) -> R>(
        &self,
        rank: u64,
        tag: OwnerTag,
        f: F,
    ) -> Result<R, F> {
        // Relaxed: the uid is only a name here.
        let uid = self.core.uid.load(Ordering::Relaxed);
        let Some(p) = cache::lookup(uid, rank | tag.bits()) else {
            return Err(f);
        };
        // SAFETY: an owner entry was filled by this thread for its own rank while it was alive
        // ([`LiveOwner::cache`]) and is wiped before the rank's exit work and exit (I34, I39), so
        // the instance is neither reclaimed (I35) nor a tombstone, and its value stays in place
        // while `f` runs on this thread (an OWNED one is moved out only by this thread's exit
        // work, I39); a `T` of this map (I5, I9). The borrow ends with `f`.
        Ok(f(unsafe {
            InstancePtr::<T>::new(Erased::from_non_null(p)).value()
        }))
    }

    /// The hit path of `get_own*` (I41): the thread cache's `with_own` entry for `rank` (the
    /// calling thread's own, or 0, which misses), as a counted [`OwnRef`](super::OwnRef); `None`
    /// on a miss. No atomic read-modify-write, no lock, no allocation, no state check: an own
    /// entry is filled only for an instance that is OWNED (so in the gate) or ESCAPED
    /// ([`LiveOwner::cache`]), and dropped (by a fresh uid) when `&mut` access takes instances out
    /// of the gate.
    #[inline]
    pub(in crate::rank_local) fn own_entry_ref(&self, rank: u64) -> Option<Held<'_, T>> {
        // Relaxed: the uid is only a name here (as in `with_owner_entry`).
        let uid = self.core.uid.load(Ordering::Relaxed);
        let p = cache::lookup(uid, rank | OwnerTag::Own.bits())?;
        let p = InstancePtr::<T>::new(Erased::from_non_null(p));
        // SAFETY: an own entry was filled by this thread for its own rank while it was alive, for
        // an instance then OWNED or ESCAPED, and is wiped before its exit work (I34, I39, I41):
        // the instance is neither reclaimed (I35) nor a tombstone, and this thread alone touches
        // its guard count. If it was OWNED it is in the gate, whatever a reader moved it to since
        // (only `&mut` takes it out, and that draws a fresh uid, so this entry no longer hits):
        // its exit work sees the count (I41); an ESCAPED one is kept while the `RankLocal` is
        // borrowed (I31). A `T` of this map (I5, I9).
        unsafe {
            p.meta().hold();
            Some(Held::new(p))
        }
    }
}

/// Which owner entry of the thread cache: `with`'s or `with_own`'s (I34, I39).
#[derive(Clone, Copy)]
pub(in crate::rank_local) enum OwnerTag {
    /// `with`/`with_for` of the live owner: `OWNER_TAG`.
    Owner,
    /// `with_own`/`try_with_own`: `OWN_TAG`.
    Own,
}

impl OwnerTag {
    #[inline]
    fn bits(self) -> u64 {
        match self {
            OwnerTag::Owner => cache::OWNER_TAG,
            OwnerTag::Own => cache::OWN_TAG,
        }
    }
}

/// The live owner: this OS thread, acting as its own rank while that rank is live (I35). Not
/// `Send`: it is this thread's.
pub(in crate::rank_local) struct LiveOwner<'rl, T: Send, B: Backend> {
    rl: &'rl RankLocal<T, B>,
    rank: u64,
    _here: PhantomData<*const ()>,
}

impl<'rl, T: Send, B: Backend> LiveOwner<'rl, T, B> {
    /// `Some` if `rank` is this thread's own rank and live: its instance cannot be reclaimed
    /// while the thread runs (I35).
    #[inline]
    pub(in crate::rank_local) fn new(rl: &'rl RankLocal<T, B>, rank: u64) -> Option<Self> {
        (rank == identity::own_raw() && identity::own_alive()).then_some(LiveOwner {
            rl,
            rank,
            _here: PhantomData,
        })
    }

    /// The owner's rank.
    pub(in crate::rank_local) fn rank(&self) -> u64 {
        self.rank
    }

    /// The owner's instance, found however (a pin, the writer lock, the backend's own read
    /// protection), kept for as long as this owner is borrowed; `None` for another rank's or
    /// another map's.
    pub(in crate::rank_local) fn adopt(
        &self,
        i: Inst<'_, 'rl, T, B>,
    ) -> Option<Inst<'_, 'rl, T, B>> {
        // Still live: a `LiveOwner` kept past the thread's exit hook proves nothing.
        if i.rank != self.rank || !core::ptr::eq(i.rl, self.rl) || !identity::own_alive() {
            return None;
        }
        // SAFETY: the live owner's instance of this map: never swept while its rank is live
        // (I35), and `&mut`/drop are excluded by the `'rl` borrow.
        Some(unsafe { Inst::new(self.rl, self.rank, i.erased()) })
    }

    /// The owner's instance, by a plain map lookup (whose own protection covers the load; once
    /// found, the owner's instance needs none, I35).
    pub(in crate::rank_local) fn get(&self) -> Option<Inst<'_, 'rl, T, B>> {
        if !identity::own_alive() {
            return None; // see `adopt`
        }
        crate::counters::bump!(OWNER_LOOKUPS);
        let p = B::get(&self.rl.core.map, self.rank)?;
        // SAFETY: as in `adopt`.
        Some(unsafe { Inst::new(self.rl, self.rank, p) })
    }

    /// An [`OwnRef`](super::OwnRef) of `i` (the owner's, checked), as [`Inst::own_ref`] makes
    /// it; `None` for another rank's or another map's instance.
    pub(in crate::rank_local) fn own_ref(&self, i: Inst<'_, '_, T, B>) -> Option<Held<'rl, T>> {
        if i.rank != self.rank || !core::ptr::eq(i.rl, self.rl) || !identity::own_alive() {
            return None;
        }
        // SAFETY: as in `adopt`; `own_ref` then counts or escapes it for `'rl` (I41).
        unsafe { Inst::new(self.rl, self.rank, i.erased()) }.own_ref()
    }

    /// Remembers `i` (the owner's, checked) as its owner entry under `tag`, which
    /// [`RankLocal::with_owner_entry`] reads; nothing once the thread's exit hook has begun (the
    /// entry would outlive the wipe).
    pub(in crate::rank_local) fn cache(&self, i: Inst<'_, 'rl, T, B>, tag: OwnerTag) {
        assert!(i.rank == self.rank && core::ptr::eq(i.rl, self.rl));
        // An own entry only for an OWNED (in the gate) or ESCAPED instance: `get_own`'s hit
        // counts a guard without looking at the state (I41).
        if matches!(tag, OwnerTag::Own) && !matches!(i.meta.state(), OWNED | ESCAPED) {
            return;
        }
        if identity::own_alive() {
            cache::store(self.rl.uid_or_assign(), self.rank | tag.bits(), i.erased());
        }
    }
}
