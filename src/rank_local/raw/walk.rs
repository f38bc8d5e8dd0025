//! A walk ([`Walk`]): an `iter()`'s snapshot, and what its batches wait for.

use core::marker::PhantomData;

use super::instance::InstancePtr;
use super::Locked;
use crate::backend::Backend;
use crate::primitive::{lock, Mutex};

impl<'rl, T: Send, B: Backend> Locked<'rl, T, B> {
    /// Numbers a walk, records it as live and hands out its snapshot
    /// ([`RankLocal::iter`](crate::rank_local::RankLocal::iter)):
    /// every instance in it was published at a lower walk count, and a sweep that unpublishes one
    /// while the walk lives retires it at this number or later, so its batch waits for the walk
    /// (I31, I39).
    pub(in crate::rank_local) fn walk(mut self) -> Walk<'rl, T, B>
    where
        T: Sync,
    {
        self.w.tracks.walks += 1;
        let n = self.w.tracks.walks;
        // Under the writer lock: numbers grow, so the list stays sorted; a sweep (under the same
        // lock) sees the walk from now on.
        lock(&self.rl.core.walking).push(n);
        Walk {
            inner: B::iter(&self.rl.core.map),
            live: &self.rl.core.walking,
            n,
            _t: PhantomData,
        }
    }
}

/// An `iter()`'s walk of one snapshot (made by [`Locked::walk`]): yields the entries it escapes;
/// the batches retired while it lives that its snapshot may hold wait for its drop.
///
/// Covariant in `T`, as `Iter` is: it holds no `&RankLocal<T, _>`, only what it reads.
pub(in crate::rank_local) struct Walk<'rl, T, B: Backend> {
    inner: B::Iter<'rl>,
    /// The `RankLocal`'s live walks, which this one leaves on drop (I31, I39).
    live: &'rl Mutex<Vec<u64>>,
    /// This walk's number.
    n: u64,
    _t: PhantomData<&'rl T>,
}

impl<'rl, T, B: Backend> Walk<'rl, T, B> {
    /// The next entry of the snapshot that is not being reclaimed nor a tombstone, escaped.
    #[inline]
    pub(in crate::rank_local) fn next_escaped(&mut self) -> Option<(u64, &'rl T)> {
        loop {
            let (rank, p) = self.inner.next()?;
            let p = InstancePtr::<T>::new(p);
            // Marked as it is yielded: SCOPED and OWNED move to ESCAPED unless a sweep took it
            // (RECLAIMING) or its thread's exit work did (a tombstone) first: then it is skipped
            // (I30, I31, I39).
            // SAFETY:
            // - `meta`: an instance of the walked map in the walk's snapshot: published before
            //   the walk was numbered, so a sweep that unpublishes it does so at this walk's
            //   number or later, and its batch is not freed while this walk is live (I31, I39);
            //   only `&mut` could free it otherwise, which the `'rl` borrow excludes;
            // - `value`: as just said, and now ESCAPED: kept while the `RankLocal` is borrowed,
            //   never moved out (I31, I39); a `T` of this map (I5, I9).
            let v = unsafe { p.meta().escape().then(|| p.value()) };
            if let Some(v) = v {
                return Some((rank, v));
            }
        }
    }
}

impl<T, B: Backend> Drop for Walk<'_, T, B> {
    fn drop(&mut self) {
        // The mutex orders this walk's reads of its snapshot's instances before the take that no
        // longer finds its number (I31, I39). O(live walks).
        let mut live = lock(self.live);
        if let Ok(i) = live.binary_search(&self.n) {
            live.remove(i);
        }
    }
}
