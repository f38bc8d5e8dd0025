//! Removed instances ([`Taken`] → [`Batch`] → [`Removed`]) and the `&mut` paths.

use core::marker::PhantomData;

use super::instance::{self, InstancePtr};
use super::{gate, Inst, Payload};
use crate::backend::Backend;
use crate::cache;
use crate::erased::Erased;
use crate::primitive::{Arc, AtomicBool, Ordering};
use crate::rank_local::{RankLocal, Writer};

/// Instances a sweep took (RECLAIMING, or REAPED tombstones) and has not unpublished yet: made and
/// retired inside [`Locked::sweep_exited`](super::Locked::sweep_exited), never outside this
/// module.
#[must_use = "what a sweep took is retired in the same critical section"]
pub(super) struct Taken {
    pub(super) ranks: Vec<u64>,
    pub(super) entries: Vec<(u64, Erased)>,
    /// The lowest walk count any of them was published at (I31).
    pub(super) born: u64,
}

impl Default for Taken {
    fn default() -> Self {
        Taken {
            ranks: Vec::new(),
            entries: Vec::new(),
            born: u64::MAX,
        }
    }
}

impl Taken {
    pub(super) fn push<T, B: Backend>(&mut self, i: Inst<'_, '_, T, B>) {
        self.ranks.push(i.rank);
        self.entries.push((i.rank, i.erased()));
        // A refilled tombstone kept the count of its first publication: a walk since may hold it.
        self.born = self.born.min(i.meta.born());
    }
}

/// Unpublished instances of the `RankLocal` whose sweep queue holds it, freed once `done` is
/// set: the collector sets it after every thread pinned at the retirement has unpinned (I32).
pub(super) struct Batch {
    /// Sweeps number their batches (`reclaim_exited_blocking` waits for the ones retired
    /// before it returns).
    pub(super) serial: u64,
    pub(super) done: Arc<AtomicBool>,
    pub(super) entries: Vec<(u64, Erased)>,
    /// `(b, r)`: its instances were published at walk counts `b` or later and unpublished at
    /// walk count `r`, so only a walk numbered in `b + 1..=r` may hold one in its snapshot
    /// (I31, I39).
    pub(super) walks: (u64, u64),
}

impl Batch {
    /// The batch's number.
    pub(super) fn serial(&self) -> u64 {
        self.serial
    }

    /// `true` once its grace period passed. Acquire: pairs with the collector's Release store.
    pub(super) fn is_ready(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// `true` if a walk whose number is in `walking` (ascending) may hold one of its instances.
    pub(super) fn held_by(&self, walking: &[u64]) -> bool {
        let (born, retired) = self.walks;
        // the first live walk numbered above `born`
        let i = walking.partition_point(|&n| n <= born);
        walking.get(i).map_or(false, |&n| n <= retired)
    }
}

/// Removed instances no reader can reach any more: unpublished, and either past their grace
/// period or removed under `&mut` (I6, I32). The only way out is dropping them or moving their
/// values out, each once.
#[must_use = "removed instances are dropped with `drop_all`"]
pub(in crate::rank_local) struct Removed<T> {
    entries: Vec<(u64, Erased)>,
    /// The address of the `RankLocal` they came from (for `check_not_dropping`).
    owner: usize,
    _t: PhantomData<fn(T) -> T>,
}

impl<T> Removed<T> {
    /// How many instances it holds.
    pub(in crate::rank_local) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Adds `other`'s instances.
    pub(in crate::rank_local) fn extend(&mut self, other: Removed<T>) {
        self.entries.extend(other.entries);
    }

    /// The `RankLocal`'s address and the instances, for the limbo.
    pub(super) fn into_entries(self) -> (usize, Vec<(u64, Erased)>) {
        (self.owner, self.entries)
    }

    /// Drops every instance, each as its own rank, and returns the first `T::drop` panic after
    /// dropping the rest (I10); never unwinds.
    #[must_use = "a `T::drop` panic is returned to be re-raised"]
    pub(in crate::rank_local) fn drop_all(self) -> Option<Payload> {
        // SAFETY: removed instances of a `RankLocal<T, _>` (I5) with no reference left: no reader
        // can reach them (the type's invariant, I6, I32); each listed once (I10).
        unsafe { instance::drop_all::<T>(self.owner, self.entries) }
    }

    /// Moves every value out, with its rank (no `T::drop` runs); a tombstone's allocation is
    /// freed, with no value to move (I39).
    pub(in crate::rank_local) fn into_values(self) -> Vec<(u64, T)> {
        let mut out = Vec::with_capacity(self.entries.len());
        for (rank, p) in self.entries {
            // SAFETY: as in `drop_all`: removed, unreachable, each once (the type's invariant).
            let value = unsafe { InstancePtr::<T>::new(p).into_value() };
            out.extend(value.map(|v| (rank, v)));
        }
        out
    }
}

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// `&mut` access: `rank`'s instance's state machine, or `None`.
    pub(in crate::rank_local) fn state_mut(&mut self, rank: u64) -> Option<usize> {
        // SAFETY: `&mut self` excludes every other writer (I6, I16), and keeps the instance
        // found alive (I6).
        let i = unsafe { B::get_by_writer(&self.core.map, rank).map(|p| Inst::new(self, rank, p)) };
        i.map(|i| i.meta.state())
    }

    /// `&mut` access: every `(rank, &mut T)`, from one snapshot; settles owner-only instances and
    /// frees tombstones first, so every value is in place and no exit work touches it (I39).
    pub(in crate::rank_local) fn values_mut(&mut self) -> ValuesMut<'_, T, B> {
        self.settle_owned(true);
        ValuesMut {
            remaining: B::len(&self.core.map),
            inner: B::iter(&self.core.map),
            _rl: PhantomData,
        }
    }
}

// Also for the `RankLocal`'s drop, whose impl cannot require `T: Send`.
impl<T, B: Backend> RankLocal<T, B> {
    /// `&mut` access: unpublishes the instances `keep` rejects.
    /// Their entries in the gate go too, under its lock, so no exit work touches what is
    /// removed (an exit work that came first left a tombstone, which frees no value, I39).
    pub(in crate::rank_local) fn remove_where_mut(
        &mut self,
        keep: &mut dyn FnMut(u64) -> bool,
    ) -> Removed<T> {
        let entries = B::retain(&mut self.core.map, keep);
        gate::forget_owned(
            &crate::primitive::mutex_mut(&mut self.writer).tracks,
            &entries,
        );
        if !entries.is_empty() {
            // Relaxed: `&mut self`, ordered by whatever handed it to us. A fresh uid is drawn on
            // next use, so no thread cache can hit a removed instance (I4).
            self.core.uid.store(cache::NO_UID, Ordering::Relaxed);
        }
        self.removed(entries)
    }

    /// `&mut` access: what waits in the limbo, and the panic a drain kept; `close` (the drop):
    /// later drains do nothing (I32).
    pub(in crate::rank_local) fn take_deferred_mut(
        &mut self,
        close: bool,
    ) -> (Removed<T>, Option<Payload>) {
        let limbo = crate::primitive::mutex_mut(&mut self.core.limbo).clone();
        let (entries, panic) = limbo.map(|l| l.take(close, true)).unwrap_or_default();
        (self.removed(entries), panic)
    }

    /// `&mut` access: every batch the sweep queued, ready or not: no reader exists (I6, I32).
    pub(in crate::rank_local) fn take_batches_mut(&mut self) -> Removed<T> {
        let q = &mut crate::primitive::mutex_mut(&mut self.writer).tracks;
        let entries: Vec<_> = q
            .batches
            .take_all()
            .into_iter()
            .flat_map(|b| b.entries)
            .collect();
        // Relaxed: `&mut self`.
        self.core
            .retired
            .fetch_sub(entries.len(), Ordering::Relaxed);
        self.removed(entries)
    }

    /// `&mut` access to what the writer lock guards for the facade.
    pub(in crate::rank_local) fn writer_mut(&mut self) -> &mut Writer {
        &mut crate::primitive::mutex_mut(&mut self.writer).w
    }

    /// For the `RankLocal`'s drop: no more exit deliveries to its inbox; the live ranks'
    /// registrations get pruned.
    pub(in crate::rank_local) fn close_inbox(&mut self) {
        crate::primitive::mutex_mut(&mut self.writer)
            .tracks
            .close_inbox();
    }

    pub(super) fn removed(&self, entries: Vec<(u64, Erased)>) -> Removed<T> {
        Removed {
            entries,
            owner: self as *const Self as usize,
            _t: PhantomData,
        }
    }
}

/// `&mut` access's walk: every `(rank, &mut T)` of the map, each once ([`RankLocal::values_mut`]).
pub(in crate::rank_local) struct ValuesMut<'a, T, B: Backend> {
    inner: B::Iter<'a>,
    /// Instances not yet yielded: the map cannot change while it is mutably borrowed.
    remaining: usize,
    _rl: PhantomData<&'a mut RankLocal<T, B>>,
}

impl<'a, T: 'a, B: Backend> ValuesMut<'a, T, B> {
    /// The next entry.
    #[inline]
    pub(in crate::rank_local) fn next(&mut self) -> Option<(u64, &'a mut T)> {
        let (rank, p) = self.inner.next()?;
        self.remaining = self.remaining.saturating_sub(1);
        // SAFETY: the `RankLocal` is mutably borrowed for 'a (I6), and `values_mut` settled every
        // owner-only instance and unpublished every tombstone first (I39), so each value is in
        // place; each rank has its own allocation (I1, I5) and the snapshot yields each once, so
        // the `&mut T`s are disjoint and unaliased.
        Some((rank, unsafe { InstancePtr::<T>::new(p).value_mut() }))
    }

    /// Entries not yet yielded.
    pub(in crate::rank_local) fn remaining(&self) -> usize {
        self.remaining
    }
}
