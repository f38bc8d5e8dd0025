//! Iteration: `iter` (one snapshot; marks what it hands out ESCAPED, I31), `iter_mut` and
//! `into_iter` (exclusive access, I6), and the iterator types.

#![deny(unsafe_code)]

use core::iter::FusedIterator;

use super::raw::{Locked, ValuesMut, Walk};
use super::{RankLocal, SyncValue};
use crate::backend::Backend;
use crate::identity::RankId;

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// Every `(rank, instance)`, from one consistent snapshot taken when called (ranks inserted
    /// later are not seen). Order is unspecified (ascending rank on [`Epoch`](crate::Epoch) and
    /// [`ArcSwap`]). The
    /// iterator keeps its own snapshot alive by a count, not by an epoch pin, so a long-lived
    /// iterator does not stop reclamation elsewhere in the process.
    ///
    /// **What it yields is kept.** Each `&T` lives as long as the `RankLocal`, so a value it
    /// yields counts as handed out, like one `get` returned: it is kept until `&mut` access
    /// ([`purge_exited`](Self::purge_exited), [`clear`](Self::clear)) or drop, even after its
    /// rank exits. Only what it yields: the scoped values of ranks that have exited are freed
    /// first (the snapshot does not hold them), and a value of a rank that exits while the
    /// iterator is held is skipped if it is freed before the iterator reaches it. So a monitor
    /// that sums the workers' values with `iter()` keeps the values of the workers it saw alive,
    /// and nothing of the others; use [`for_each`](Self::for_each), which lends each value to a
    /// closure and keeps nothing (so does `{:?}`), to keep none at all.
    ///
    /// A held iterator keeps only what its snapshot holds: an instance it may still yield that a
    /// sweep unpublished (or the slot of an owner-only value dropped at its thread's exit, see
    /// [`with_own`](Self::with_own)) is freed once the iterator is dropped, and counted by
    /// [`len`](Self::len) until then. Iterators that always overlap, or one that is forgotten,
    /// keep no more than that: ranks that first touch the map after an iterator was taken are
    /// freed after their exit as if it did not exist.
    ///
    /// `&RankLocal` is `IntoIterator` too: `for (rank, v) in &rl` is `rl.iter()`.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let rl: RankLocal<u64> = RankLocal::new();
    /// let (a, b) = (Rank::new(), Rank::new());
    /// for r in [&a, &b] {
    ///     on_behalf_of(r.id(), || rl.get_or(|| r.id().as_u64() * 10));
    /// }
    /// let mut seen: Vec<_> = rl.iter().map(|(rank, v)| (rank, *v)).collect();
    /// seen.sort(); // order is unspecified
    /// assert_eq!(seen, [(a.id(), a.id().as_u64() * 10), (b.id(), b.id().as_u64() * 10)]);
    /// assert!((&rl).into_iter().all(|(rank, v)| *v == rank.as_u64() * 10));
    /// ```
    #[cfg_attr(
        all(feature = "arc-swap", not(loom)),
        doc = "[`ArcSwap`]: crate::ArcSwap"
    )]
    #[cfg_attr(
        not(all(feature = "arc-swap", not(loom))),
        doc = "[`ArcSwap`]: crate#features"
    )]
    pub fn iter(&self) -> Iter<'_, T, B>
    where
        T: SyncValue,
    {
        // Under the writer lock the map cannot change (I16) and holds no RECLAIMING instance
        // (I30). First the exits delivered so far are swept, so the snapshot holds no instance
        // of a rank known to have exited; then the walk is numbered, and a batch a later sweep
        // retires waits for it if its snapshot may hold one of its instances (I31). O(k log n)
        // under the lock for k exits not swept yet, each swept once.
        let mut w = Locked::new(self);
        let ready = Self::sweep_before_walk(&mut w);
        let walk = w.walk();
        self.free_ready(ready); // outside the lock; the walk holds no pin
        Iter { walk }
    }

    /// Every `(rank, &mut instance)`.
    ///
    /// `&mut RankLocal` is `IntoIterator` too: `for (rank, v) in &mut rl` is `rl.iter_mut()`.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let mut totals: RankLocal<u64> = RankLocal::new();
    /// totals.get_or(|| 40);
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || totals.get_or(|| 1));
    /// for (_, total) in totals.iter_mut() {
    ///     *total += 1; // no lock: `&mut self` excludes every other user
    /// }
    /// for (_, total) in &mut totals {
    ///     *total += 1;
    /// }
    /// assert_eq!(totals.try_get(), Some(&42));
    /// assert_eq!(totals.get_for(job.id()), Some(&3));
    /// ```
    pub fn iter_mut(&mut self) -> IterMut<'_, T, B> {
        // No exit work touches what is lent, no tombstone is left (I39).
        IterMut {
            inner: self.values_mut(),
        }
    }
}

/// Iterator over `(rank, &instance)` from one snapshot; see [`RankLocal::iter`].
///
/// *Covariant* in `T` (like `core::slice::Iter`): it only hands out `&'a T`s of instances that
/// already exist and can insert nothing, so reading a `&'a &'static str` as a `&'a &'short str`
/// is a plain subtyping of what it yields. It borrows the `RankLocal` for `'a`.
///
/// `Send` and `Sync` when `T: Sync` (it yields `&T`s, like `slice::Iter`): it holds a count on its
/// snapshot, not an epoch pin, and the count can be given up on any thread, so an `Iter`
/// may be held across an `.await` in a task that moves between threads. It is fused: once it
/// returns `None`, it keeps returning `None`.
///
/// ```
/// use ranklocal::{Iter, RankId, RankLocal};
///
/// let rl: RankLocal<&'static str> = RankLocal::new();
/// rl.get_or(|| "hello");
/// let it: Iter<'_, &'static str, ranklocal::Epoch> = rl.iter();
/// assert_eq!(it.collect::<Vec<_>>(), [(RankId::current(), &"hello")]);
/// // a rank inserted after `iter` was called is not seen by it (one snapshot)
/// let mut it = rl.iter();
/// let job = ranklocal::Rank::new();
/// ranklocal::on_behalf_of(job.id(), || rl.get_or(|| "later"));
/// assert_eq!(it.count(), 1);
/// assert_eq!(rl.iter().count(), 2);
/// ```
pub struct Iter<'a, T, B: Backend> {
    walk: Walk<'a, T, B>,
}

impl<'a, T: 'a, B: Backend> Iterator for Iter<'a, T, B> {
    type Item = (RankId, &'a T);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (rank, v) = self.walk.next_escaped()?;
        Some((RankId::from_raw(rank), v))
    }
}

/// Every backend's iterator keeps returning `None` once done (a finished cursor, a drained
/// `Vec`).
impl<'a, T: 'a, B: Backend> FusedIterator for Iter<'a, T, B> {}

// Unwind safety as the `RankLocal` it walks: a walk only reads one snapshot.
impl<T: core::panic::UnwindSafe, B: Backend> core::panic::UnwindSafe for Iter<'_, T, B> {}
impl<T: core::panic::UnwindSafe, B: Backend> core::panic::RefUnwindSafe for Iter<'_, T, B> {}

/// Iterator over `(rank, &mut instance)`; see [`RankLocal::iter_mut`].
///
/// *Invariant* in `T`, like `core::slice::IterMut`: it hands out `&mut T`, through which a
/// shorter-lived value could be written.
///
/// ```
/// use ranklocal::{IterMut, RankLocal};
///
/// let mut rl: RankLocal<Vec<u32>> = RankLocal::new();
/// rl.get_or(|| vec![1]);
/// let it: IterMut<'_, Vec<u32>, ranklocal::Epoch> = rl.iter_mut();
/// for (_, v) in it {
///     v.push(2);
/// }
/// assert_eq!(rl.try_get(), Some(&vec![1, 2]));
/// ```
pub struct IterMut<'a, T, B: Backend> {
    inner: ValuesMut<'a, T, B>,
}

impl<'a, T: 'a, B: Backend> Iterator for IterMut<'a, T, B> {
    type Item = (RankId, &'a mut T);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (rank, v) = self.inner.next()?;
        Some((RankId::from_raw(rank), v))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.inner.remaining();
        (n, Some(n))
    }
}

impl<'a, T: 'a, B: Backend> ExactSizeIterator for IterMut<'a, T, B> {}

/// Every backend's iterator keeps returning `None` once done (a finished cursor, a drained
/// `Vec`).
impl<'a, T: 'a, B: Backend> FusedIterator for IterMut<'a, T, B> {}

impl<'a, T: SyncValue, B: Backend> IntoIterator for &'a RankLocal<T, B> {
    type Item = (RankId, &'a T);
    type IntoIter = Iter<'a, T, B>;
    fn into_iter(self) -> Iter<'a, T, B> {
        self.iter()
    }
}

impl<'a, T: Send, B: Backend> IntoIterator for &'a mut RankLocal<T, B> {
    type Item = (RankId, &'a mut T);
    type IntoIter = IterMut<'a, T, B>;
    fn into_iter(self) -> IterMut<'a, T, B> {
        self.iter_mut()
    }
}

impl<T: Send, B: Backend> IntoIterator for RankLocal<T, B> {
    type Item = (RankId, T);
    type IntoIter = std::vec::IntoIter<(RankId, T)>;

    /// Takes every instance out, in unspecified order.
    ///
    /// ```
    /// use ranklocal::{RankId, RankLocal};
    ///
    /// let rl: RankLocal<String> = RankLocal::new();
    /// rl.get_or(|| "mine".to_string());
    /// let owned: Vec<(RankId, String)> = rl.into_iter().collect();
    /// assert_eq!(owned, [(RankId::current(), "mine".to_string())]);
    /// ```
    fn into_iter(mut self) -> Self::IntoIter {
        self.settle_owned(true); // no exit work touches what is moved out, no tombstone (I39)
        let owned: Vec<(RankId, T)> = self
            .remove_where_mut(&mut |_| false)
            .into_values()
            .into_iter()
            .map(|(rank, v)| (RankId::from_raw(rank), v))
            .collect();
        owned.into_iter()
    }
}
