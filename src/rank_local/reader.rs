//! [`Reader`]: many lookups of other ranks under one pin (`RankLocal::pin`), as papaya's `pin()`
//! and crossbeam's `Guard` amortize theirs.

#![deny(unsafe_code)]

use core::fmt;

use super::raw::Reading;
use super::{RankLocal, SyncValue};
use crate::backend::{Backend, Epoch};
use crate::identity::RankId;

/// Reads any rank's value under one held pin: what [`RankLocal::pin`] returns.
///
/// A batch of lookups through one reader (a collective reading every rank's state, a monitor)
/// pays for the pin once, on its first lookup, instead of once per lookup. Each
/// [`get_for`](Self::get_for) reads the map as it is then — a rank first touched after the reader
/// was made is found — and the reference it returns lives as long as the reader: the reader
/// holds what protects the values it hands out, even if their rank exits and a sweep on another
/// thread unpublishes them meanwhile.
///
/// What it hands out stays *scoped*: like [`with_for`](RankLocal::with_for), and unlike
/// [`get_for`](RankLocal::get_for), a lookup through a reader does not keep the value for the
/// `RankLocal`'s lifetime, so it is dropped after its rank exits, once no reader holds it.
///
/// Not `Send`: a reader is its thread's. While one is alive, the values that sweeps unpublish —
/// of every `RankLocal` in the process — wait for it before they are dropped (the thread holds
/// an epoch pin), and a [`reclaim_exited_blocking`](RankLocal::reclaim_exited_blocking) on the
/// same thread panics instead of waiting for itself; so keep a reader for a batch of lookups, not
/// for the life of a thread. On other threads only a `reclaim_exited_blocking` waits for it (it
/// returns once the reader is dropped; a reader leaked with `mem::forget` keeps it waiting, as a
/// forgotten epoch guard would); a first touch made while it is held (on any thread, any rank)
/// neither blocks nor drops a value inside it.
///
/// ```
/// use ranklocal::{on_behalf_of, Rank, RankLocal};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// let sent: RankLocal<AtomicU64> = RankLocal::new();
/// let jobs: Vec<Rank> = (0..4).map(|_| Rank::new()).collect();
/// for (i, job) in jobs.iter().enumerate() {
///     on_behalf_of(job.id(), || sent.with(|n| n.store(i as u64, Ordering::Relaxed)));
/// }
/// let reader = sent.pin();
/// let total: u64 = jobs
///     .iter()
///     .filter_map(|job| reader.get_for(job.id()))
///     .map(|n| n.load(Ordering::Relaxed))
///     .sum();
/// assert_eq!(total, 6);
/// assert!(reader.get_for(Rank::new().id()).is_none()); // never creates
/// ```
pub struct Reader<'a, T, B: Backend = Epoch> {
    raw: Reading<'a, T, B>,
}

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// A [`Reader`] of this `RankLocal`: lookups of any rank under one pin, for a batch of them.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let names: RankLocal<String> = RankLocal::new();
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || names.with_or(|| "job".to_string(), |_| ()));
    /// let reader = names.pin();
    /// assert_eq!(reader.get_for(job.id()).map(String::as_str), Some("job"));
    /// ```
    #[must_use]
    pub fn pin(&self) -> Reader<'_, T, B>
    where
        T: SyncValue,
    {
        Reader {
            raw: Reading::new(self),
        }
    }
}

impl<'a, T, B: Backend> Reader<'a, T, B> {
    /// `rank`'s value if it has one now; never creates one. The reference lives as long as the
    /// reader, whatever happens to the rank meanwhile.
    ///
    /// ```
    /// use ranklocal::{RankId, RankLocal};
    ///
    /// let rl: RankLocal<u32> = RankLocal::new();
    /// let reader = rl.pin();
    /// assert_eq!(reader.get_for(RankId::current()), None);
    /// rl.get_or(|| 7); // a first touch while a reader is held
    /// assert_eq!(reader.get_for(RankId::current()), Some(&7)); // seen by the same reader
    /// ```
    #[inline]
    pub fn get_for(&self, rank: RankId) -> Option<&T> {
        self.raw.get(rank.as_u64())
    }
}

impl<T, B: Backend> fmt::Debug for Reader<'_, T, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("backend", &B::NAME)
            .finish_non_exhaustive()
    }
}
