//! Reclamation: the sweep of exited ranks' scoped-only instances through `&self` (I30, I32),
//! `reclaim_exited`, and the `&mut` removals — `clear`, `purge_exited`, drop — that free at once
//! (I6, I10).
//!
//! A sweep runs under the writer lock: it moves the SCOPED instances of exited ranks to
//! RECLAIMING, unpublishes them, stores a fresh uid (so pinned cache entries keyed by the old one
//! are dead, I34) and retires them as one *batch* whose token the crate's collector sets after a
//! grace period; a later sweep that sees the token set frees the batch, outside the lock.

use super::instance::{drop_all, InstancePtr, RECLAIMING, SCOPED};
use super::{fresh_uid, RankLocal, Writer};
use crate::backend::Backend;
use crate::collector::pin;
use crate::erased::Erased;
use crate::identity;
use crate::primitive::{lock, mutex_mut, Arc, AtomicBool, Ordering};

/// Instances the sweeper unpublished, freed once `done` is set: by a deferred epoch closure that
/// runs after every thread pinned when it was deferred has unpinned (I32).
pub(super) struct Batch {
    done: Arc<AtomicBool>,
    entries: Vec<(u64, Erased)>,
}

/// The sweeper's bookkeeping (part of what the writer lock guards).
pub(super) struct Sweep {
    /// `identity::exits()` at the last sweep: the amortization trigger.
    exits_seen: u64,
    /// Unpublished instances waiting for their grace period (I32).
    batches: Vec<Batch>,
}

impl Sweep {
    pub(super) const NEW: Sweep = Sweep {
        exits_seen: 0,
        batches: Vec::new(),
    };

    /// Takes out the batches whose grace period passed (I32).
    fn take_ready(&mut self) -> Vec<Batch> {
        let mut ready = Vec::new();
        let mut i = 0;
        while i < self.batches.len() {
            // Acquire: pairs with the deferred Release store, which the collector runs after
            // every reader pinned at the retirement unpinned (I32).
            if self.batches[i].done.load(Ordering::Acquire) {
                ready.push(self.batches.swap_remove(i));
            } else {
                i += 1;
            }
        }
        ready
    }

    /// Every batch, ready or not (for exclusive access only, I6).
    fn take_all(&mut self) -> Vec<(u64, Erased)> {
        core::mem::take(&mut self.batches)
            .into_iter()
            .flat_map(|b| b.entries)
            .collect()
    }
}

/// When [`RankLocal::sweep`] sweeps.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SweepWhen {
    /// Only if enough ranks exited since the last sweep (a first touch's amortized sweep).
    Due,
    /// Now (`reclaim_exited`).
    Now,
}

/// Frees the instances of `batches` (I10's `drop_all`).
///
/// # Safety
/// Every batch's grace period passed (its `done` was seen set, I32), or no reader exists (I6).
pub(super) unsafe fn free_batches<T>(batches: Vec<Batch>) {
    if batches.is_empty() {
        return;
    }
    let entries = batches.into_iter().flat_map(|b| b.entries).collect();
    // SAFETY: retired instances of this map (I5), unpublished, their cached copies dead (I34)
    // and no reader left (I32), each in one batch once (I10).
    unsafe { drop_all::<T>(entries) };
}

impl<T: Send + Sync, B: Backend> RankLocal<T, B> {
    /// The sweep (I30, I32), under the writer lock `w`: now, or if enough ranks exited since the
    /// last one (half of `len`, at least 16: amortized O(1) per exit), moves the SCOPED instances
    /// of exited ranks to RECLAIMING, unpublishes them, draws a fresh uid and retires them as one
    /// batch behind an epoch grace period. Returns how many it retired and the earlier batches now
    /// ready to free (the caller frees them after dropping the lock).
    pub(super) fn sweep(&self, w: &mut Writer, when: SweepWhen) -> (usize, Vec<Batch>) {
        let sw = &mut w.sweep;
        let exits = identity::exits();
        let due = when == SweepWhen::Now
            || exits.wrapping_sub(sw.exits_seen) >= (B::len(&self.map) as u64 / 2).max(16);
        let mut n = 0;
        if due {
            sw.exits_seen = exits;
            let mut found: Vec<(u64, Erased)> = B::iter(&self.map).collect();
            identity::with_live(|live| found.retain(|(rank, _)| !live.contains(rank)));
            let mut batch = Vec::new();
            for (rank, p) in found {
                // SAFETY: an instance of this map (I5), in it under the writer lock: alive (I30,
                // I32).
                let st = unsafe { InstancePtr::<T>::new(p).state() };
                // SeqCst (Relaxed would do for the one-winner property, I30): keeps the
                // argument about readers local.
                if st
                    .compare_exchange(SCOPED, RECLAIMING, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
                {
                    let removed = B::remove(&self.map, rank);
                    debug_assert!(removed.is_some());
                    batch.push((rank, p));
                }
            }
            n = batch.len();
            if !batch.is_empty() {
                // A fresh uid before retiring: pinned scoped entries keyed by the old one are
                // dead for every reader that pins after this store (I34).
                self.uid.store(fresh_uid(), Ordering::SeqCst);
                let done = Arc::new(AtomicBool::new(false));
                let flag = Arc::clone(&done);
                let guard = pin();
                // Release: pairs with the Acquire in `take_ready`; the collector runs this only
                // after every thread pinned now has unpinned (I32). Only a `'static` token is
                // deferred, never a `T`: the closure runs no user code (I18).
                guard.defer(move || flag.store(true, Ordering::Release));
                guard.flush();
                sw.batches.push(Batch {
                    done,
                    entries: batch,
                });
            }
        }
        (n, sw.take_ready())
    }

    /// The instances of exited ranks that were only ever reached through scoped access
    /// ([`with`](Self::with), [`with_for`](Self::with_for), [`for_each`](Self::for_each)): unpublishes them
    /// now and returns how many; each is dropped once no reader can still see it, by this call,
    /// a later sweep or the `RankLocal`'s drop. Instances ever handed out as `&T` are kept.
    ///
    /// Writers (first touches) sweep on their own, amortized, so memory stays bounded without
    /// calling this; it is for dropping promptly.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let rl: RankLocal<Vec<u8>> = RankLocal::new();
    /// let job = Rank::new();
    /// let id = job.id();
    /// on_behalf_of(id, || rl.with(|buf| assert!(buf.is_empty()))); // scoped only
    /// assert_eq!(rl.len(), 1);
    /// drop(job); // the rank exits
    /// assert_eq!(rl.reclaim_exited(), 1);
    /// assert_eq!(rl.len(), 0);
    /// assert!(rl.with_for(id, |_| ()).is_none());
    /// ```
    pub fn reclaim_exited(&self) -> usize {
        let (n, mut ready) = self.sweep(&mut lock(&self.writer), SweepWhen::Now);
        // Help the grace period along (each flush may advance the epoch once); whatever is not
        // ready yet goes with a later sweep.
        for _ in 0..3 {
            if lock(&self.writer).sweep.batches.is_empty() {
                break;
            }
            pin().flush();
            ready.extend(lock(&self.writer).sweep.take_ready());
        }
        // SAFETY: batches whose grace period passed (I32); outside the writer lock.
        unsafe { free_batches::<T>(ready) };
        n
    }

    /// Drops every instance.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    ///
    /// let mut rl: RankLocal<String> = RankLocal::new();
    /// rl.get_or(|| "old".to_string());
    /// rl.clear();
    /// assert!(rl.try_get().is_none());
    /// assert_eq!(rl.get_or(|| "new".to_string()), "new"); // the next use runs `init` again
    /// ```
    pub fn clear(&mut self) {
        self.remove_where(&mut |_| false);
    }

    /// Drops the instances of ranks that have exited, returning how many.
    ///
    /// A thread's rank counts as exited once its thread-local destructors have started; threads
    /// whose destructors never run (the main thread at process exit) never count as exited. A
    /// [`Rank`](crate::Rank)'s rank counts as exited once the `Rank` is dropped, and is live
    /// until then, whether or not any thread acts for it. An exited rank can still be acted for;
    /// an instance made for it afterwards is dropped by the next purge (see the crate docs'
    /// "Exited ranks").
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let mut sessions: RankLocal<String> = RankLocal::new();
    /// let (a, b) = (Rank::new(), Rank::new());
    /// on_behalf_of(a.id(), || sessions.get_or(|| "a".into()));
    /// on_behalf_of(b.id(), || sessions.get_or(|| "b".into()));
    /// sessions.get_or(|| "main".into()); // the main thread never counts as exited
    /// let a_id = a.id();
    /// drop(a); // rank `a` exits
    /// assert_eq!(sessions.purge_exited(), 1);
    /// assert!(sessions.get_for(a_id).is_none());
    /// assert_eq!(sessions.len(), 2); // `b` (still live) and this thread
    /// ```
    pub fn purge_exited(&mut self) -> usize {
        // Collect the live set first: dropping instances may touch rank ids (and its lock).
        let live = identity::with_live(|live| live.clone());
        self.remove_where(&mut |rank| live.contains(&rank))
    }

    /// Removes (and drops) the instances `keep` rejects; returns how many.
    fn remove_where(&mut self, keep: &mut dyn FnMut(u64) -> bool) -> usize {
        let mut removed = B::retain(&mut self.map, keep);
        let n = removed.len();
        // Retired batches go too: `&mut self` excludes every reader (I6, I32).
        removed.extend(mutex_mut(&mut self.writer).sweep.take_all());
        if !removed.is_empty() {
            // Relaxed: `&mut self`, ordered by whatever handed it to us. A fresh uid is drawn
            // on next use, so no thread cache can hit a removed instance (I4).
            self.uid.store(0, Ordering::Relaxed);
        }
        // SAFETY: every entry came out of this map (I5) and is no longer in it, and `&mut self`
        // excludes every other user (I6); the uid reset makes cached copies dead (I4).
        unsafe { drop_all::<T>(removed) };
        n
    }
}

impl<T, B: Backend> Drop for RankLocal<T, B> {
    fn drop(&mut self) {
        let mut removed = B::retain(&mut self.map, &mut |_| false);
        removed.extend(mutex_mut(&mut self.writer).sweep.take_all());
        // SAFETY: dropping the `RankLocal` — no other user exists (I6, I32); each pointer is an
        // instance of this map (I5), removed from it or retired (I32). The uid dies with `self`
        // and is never reused, so cached copies are dead (I4).
        unsafe { drop_all::<T>(removed) };
    }
}
