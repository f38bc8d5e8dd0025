//! Reclamation: the sweep of exited ranks' scoped-only instances through `&self` (I30, I32,
//! I36), `reclaim_exited` and its blocking form, and the `&mut` removals — `clear`,
//! `purge_exited`, drop — that free at once (I6, I10).
//!
//! # The sweep
//! A scoped first touch asks for its rank's exit ([`identity::watch_exit`]): when the rank exits,
//! its id lands in this `RankLocal`'s [`Inbox`](crate::identity::Inbox). A sweep runs under the writer lock when the
//! inbox holds enough exits (max(16, len/2): a first touch's amortized sweep) or at once
//! (`reclaim_exited`). It takes the inbox, moves each of those ranks' SCOPED instances to
//! RECLAIMING, unpublishes all of them in **one** write (one new version: each trie node on
//! their paths is copied once), stores a fresh uid (so pinned cache entries keyed by the old one
//! are dead, I34) and retires them as one *batch* whose token the crate's collector sets after a
//! grace period. A later sweep that sees the token set frees the batch, outside the lock. So a
//! sweep of k exits costs O(k log n) and never looks at the rest of the map.
//!
//! # Dropping
//! Every instance the crate frees is dropped as its own rank (inside `on_behalf_of(rank, ..)`),
//! and a panicking `T::drop` stops nothing: the rest are dropped, then the first panic is
//! re-raised — at once by the `&mut` operations and the drop, and by the next explicit
//! reclamation call (`reclaim_exited*`, `purge_exited`, `clear`, drop) for a sweep a first touch
//! ran, so that an unrelated rank's `get`/`with` never panics with another value's panic.

#![deny(unsafe_code)]

use super::raw::{drop_payload, is_dropping, Locked, Payload, Removed};
use super::RankLocal;
use crate::backend::Backend;
use crate::collector;
use crate::identity;

/// The sweeper's bookkeeping of when to sweep and what is being freed (part of what the writer
/// lock guards); the inbox and the queue of retired batches are `raw`'s (`Tracks`).
pub(super) struct Sweep {
    /// Batches taken out to be freed and not freed yet: (serial, the freeing thread's own rank).
    freeing: Vec<(u64, u64)>,
    /// The first panic of a `T::drop` in a sweep's free, not re-raised yet.
    panic: Option<Payload>,
    /// Amortized sweeps that found batches waiting, since the last help (mod [`HELP_EVERY`]).
    waited: u32,
}

impl Sweep {
    pub(super) const NEW: Sweep = Sweep {
        freeing: Vec::new(),
        panic: None,
        waited: 0,
    };

    /// `true` every [`HELP_EVERY`]th time a first touch finds batches still waiting: it then
    /// flushes the retiring participant, which tries to advance the epoch. Nothing else may: on
    /// `Baseline`, and on `ArcSwap` without readers, first touches pin nothing, so a batch retired
    /// by the last sweep of a quiet spell would wait for the next explicit call (found in review:
    /// 16 of 64 values never dropped over 10,000 first touches). Costs a flush (a walk of the
    /// registered threads) per 8 first touches only while batches wait.
    fn help_due(&mut self) -> bool {
        self.waited += 1;
        if self.waited >= HELP_EVERY {
            self.waited = 0;
            true
        } else {
            false
        }
    }
}

/// Takes out the batches whose grace period passed, listed as being freed by this thread (`me`)
/// until [`RankLocal::free_ready`] has freed them, and what a sweep inside a read left in the
/// limbo (its drain's kept panic goes with the sweep's).
fn take_ready<T: Send, B: Backend>(w: &mut Locked<'_, T, B>, me: u64, help: bool) -> Ready<T> {
    let (serials, mut removed) = w.take_ready();
    w.sweep.freeing.extend(serials.iter().map(|&s| (s, me)));
    // a drain's kept panic only if none is kept here (else it stays in the limbo: no payload is
    // dropped under the lock)
    let (deferred, panic) = w.take_deferred(w.sweep.panic.is_none());
    removed.extend(deferred);
    if panic.is_some() {
        w.sweep.panic = panic;
    }
    Ready {
        serials,
        removed: Some(removed),
        help,
    }
}

/// `true` while a batch with a serial below `upto` waits for its grace period, or is being freed
/// by a thread other than `me` — unless `in_drop` (`reclaim_exited_blocking`'s wait, see there).
/// A batch that only waits for a live `Iter` does not hold: an iterator may be held for ever.
fn holds_before<T: Send, B: Backend>(
    w: &Locked<'_, T, B>,
    upto: u64,
    me: u64,
    in_drop: bool,
) -> bool {
    w.graces_before(upto)
        || (!in_drop
            && (w.sweep.freeing.iter().any(|&(s, t)| s < upto && t != me)
                || w.deferred_in_flight()))
}

/// When [`RankLocal::sweep`] sweeps.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SweepWhen {
    /// Only if enough ranks exited (a first touch's amortized sweep).
    Due,
    /// Now (`reclaim_exited`).
    Now,
}

/// Batches taken out of the bookkeeping to be freed outside the writer lock
/// ([`RankLocal::free_ready`]).
#[must_use = "taken batches are freed by `free_ready`"]
pub(super) struct Ready<T> {
    /// Their serials, listed in `freeing` until freed.
    serials: Vec<u64>,
    /// Their instances.
    removed: Option<Removed<T>>,
    /// Help the grace period along after freeing ([`Sweep::help_due`]).
    help: bool,
}

impl<T> Ready<T> {
    pub(super) const NONE: Ready<T> = Ready {
        serials: Vec::new(),
        removed: None,
        help: false,
    };
}

/// While batches wait for their grace period, every this many amortized sweeps (first touches)
/// help it along with a flush of the retiring participant (see [`Sweep::help_due`]).
const HELP_EVERY: u32 = 8;

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// [`sweep`](Self::sweep) without taking the ready batches out, for a caller that stays
    /// pinned after it unlocks: they stay in the queue, where any other sweep or a blocking call
    /// can take them, and the caller takes what is left once it unpinned
    /// ([`free_after_unpin`](Self::free_after_unpin)). Returns whether batches wait.
    ///
    /// They are not taken out while the pin is held: a value's `Drop` may wait for a grace
    /// period, which must not wait for this pin; and batches taken out are waited for by
    /// `reclaim_exited_blocking` on other threads, which must not wait for the caller's closure
    /// (found in review: a blocking call waited for a delegate's `with` to return).
    pub(super) fn sweep_leaving_ready(w: &mut Locked<'_, T, B>) -> bool {
        Self::unpublish_exited(w, SweepWhen::Due);
        !w.no_batches()
    }

    /// What a scoped first touch frees once it has unpinned: the ready batches its sweep left in
    /// the queue ([`sweep_leaving_ready`](Self::sweep_leaving_ready)), if another thread has not
    /// freed them meanwhile. If the thread is still inside an outer read (the first touch was
    /// nested in a `with_for`, a `for_each` or another rank's `with`), it drops nothing either
    /// ([`take_due`](Self::take_due)): the batches go to the limbo, which the thread drains when its
    /// outermost read ends.
    pub(super) fn free_after_unpin(&self) {
        let ready = Self::take_due(&mut Locked::new(self), SweepWhen::Due);
        self.free_ready(ready);
    }

    /// `iter`'s sweep, under the writer lock `w` just before it takes its snapshot: retires the
    /// instances of every rank whose exit was delivered (and the tombstones), so the snapshot
    /// holds none of them and the walk cannot escape them; returns the ready batches, which the
    /// caller frees after it dropped the lock. O(k log n) for k exits, each swept once.
    pub(super) fn sweep_before_walk(w: &mut Locked<'_, T, B>) -> Ready<T> {
        if w.pending() > 0 || w.has_tombs() {
            crate::counters::bump!(SWEEPS);
            w.sweep_exited();
        }
        Self::take_due(w, SweepWhen::Due)
    }

    /// The sweep (I30, I32, I36), under the writer lock `w`: now, or if enough ranks exited (at
    /// least 16 and half of `len`: O(len) exits between sweeps, so `len` stays within about twice
    /// the live ranks plus 16), takes the exits delivered to the inbox, moves those ranks'
    /// SCOPED instances to RECLAIMING, unpublishes them in one write, draws a fresh uid and
    /// retires them as one batch behind an epoch grace period. Returns how many it retired and
    /// the batches now ready to free, which the caller frees with
    /// [`free_ready`](Self::free_ready) after dropping the lock.
    pub(super) fn sweep(w: &mut Locked<'_, T, B>, when: SweepWhen) -> (usize, Ready<T>) {
        let n = Self::unpublish_exited(w, when);
        (n, Self::take_due(w, when))
    }

    /// The first half of [`sweep`](Self::sweep): retires the exited ranks' instances as one
    /// batch if due, and returns how many.
    fn unpublish_exited(w: &mut Locked<'_, T, B>, when: SweepWhen) -> usize {
        // `reclaim_exited` also unpublishes the tombstones exit work left (I39), whose exits a
        // sweep may have taken already (while an iterator held them back)
        let tombs = when == SweepWhen::Now && w.has_tombs();
        let pending = w.pending();
        let due = tombs
            || pending > 0
                && (when == SweepWhen::Now
                    || (pending >= 16 && pending as u64 >= w.rl().core.len() as u64 / 2));
        if !due {
            return 0;
        }
        crate::counters::bump!(SWEEPS);
        w.sweep_exited()
    }

    /// The batches whose grace period passed, taken out of the bookkeeping under the writer lock
    /// `w` for [`free_ready`](Self::free_ready) to free after the caller drops the lock; they
    /// are listed as being freed by this thread until then.
    ///
    /// Takes nothing while this thread holds a pin of the crate's collector (it is inside an outer
    /// scoped read — `with_for`, `for_each`, another rank's `with` — or a lookup): a value's
    /// `Drop` may wait for a grace period, which would wait for that pin, and a `Drop` may call
    /// `reclaim_exited_blocking`, which refuses to run inside a read. The ready batches go to the
    /// limbo instead, which this thread drains when its outermost read ends, and any call made
    /// outside every read, on any thread, before that.
    #[inline]
    fn take_due(w: &mut Locked<'_, T, B>, when: SweepWhen) -> Ready<T> {
        if w.nothing_to_take() {
            return Ready::NONE; // the common case, checked inline: nothing waits
        }
        if collector::is_pinned() {
            w.defer_ready();
            return Ready::NONE;
        }
        let mut ready = take_ready(w, identity::own_raw(), false);
        ready.help = when == SweepWhen::Due && !w.no_batches() && w.sweep.help_due();
        ready
    }

    /// Frees batches [`sweep`](Self::sweep) took out, outside the writer lock; a `T::drop` panic
    /// is kept for the next explicit reclamation call (see the module docs).
    #[inline]
    pub(super) fn free_ready(&self, ready: Ready<T>) {
        // The common case, checked inline: nothing taken out, no help due (`Ready::NONE`).
        if ready.help || ready.removed.is_some() {
            self.free_taken(ready);
        }
    }

    /// [`free_ready`](Self::free_ready) of batches taken out or a help due.
    #[inline(never)]
    fn free_taken(&self, ready: Ready<T>) {
        let Ready {
            mut serials,
            removed,
            help,
        } = ready;
        if help {
            crate::counters::bump!(HELPS);
            collector::flush_retirer(); // after this thread let go of its pin, if it had one
        }
        let Some(removed) = removed else {
            return;
        };
        if removed.len() == 0 {
            return;
        }
        serials.sort_unstable();
        let panic = removed.drop_all();
        // `drop_all` never unwinds, so the entries always leave `freeing`: one pass, O(freeing ·
        // log batches), whatever how many batches this frees.
        let mut w = Locked::new(self);
        let me = identity::own_raw();
        w.sweep
            .freeing
            .retain(|&(s, t)| t != me || serials.binary_search(&s).is_err());
        if w.sweep.panic.is_none() {
            w.sweep.panic = panic;
        } else if let Some(p) = panic {
            drop(w);
            drop_payload(p); // outside the lock: a payload's drop is user code
        }
    }

    /// Re-raises a `T::drop` panic a first touch's sweep kept, if any.
    fn resume_kept_panic(&self) {
        let panic = Locked::new(self).sweep.panic.take();
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
    }

    /// The instances of exited ranks that were only ever reached through scoped access
    /// ([`with`](Self::with), [`with_for`](Self::with_for), [`for_each`](Self::for_each)):
    /// unpublishes them now and returns how many. Each is dropped once no reader can still see it
    /// — by this call if the readers are already gone (it helps the grace period along a little),
    /// else by a later sweep, reclamation call or the `RankLocal`'s drop. Instances ever handed
    /// out as `&T` are kept. [`reclaim_exited_blocking`](Self::reclaim_exited_blocking) waits
    /// until they are dropped.
    ///
    /// Writers (first touches) sweep on their own, amortized, so memory stays bounded without
    /// calling this; it is for dropping promptly. Called inside a scoped read on this thread
    /// (inside `with_for`, `for_each` or another rank's `with`), it unpublishes but drops
    /// nothing: a value's `Drop` may wait for a grace period, which would wait for that read; the
    /// end of the outermost read on this thread drops them (or any call outside every read on any
    /// thread, before that). So a `RankLocal` whose every first touch happens inside another
    /// read stays bounded too. Each value is dropped as its own rank
    /// ([`RankId::current`](crate::RankId::current) inside `T::drop` is that rank).
    ///
    /// A thread's rank exits when its thread-local destructors run. `std::thread::scope` returns
    /// as soon as its threads' closures have returned, possibly before that: join the scoped
    /// threads' handles (`s.spawn(..).join()`), which wait for the threads to end, before
    /// reclaiming what they used.
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
    ///
    /// # Panics
    /// If a `T::drop` panicked while this call or an earlier sweep dropped values: every other
    /// value was dropped, then the first such panic is re-raised here.
    pub fn reclaim_exited(&self) -> usize {
        let (n, ready) = Self::sweep(&mut Locked::new(self), SweepWhen::Now);
        self.free_ready(ready);
        // Help the grace period along (each flush may advance the epoch once); whatever is not
        // ready yet goes with a later sweep.
        for _ in 0..3 {
            if Locked::new(self).no_batches() || collector::is_pinned() {
                break; // nothing waits, or inside a read: nothing could be freed here
            }
            collector::flush();
            let (_, ready) = Self::sweep(&mut Locked::new(self), SweepWhen::Due);
            self.free_ready(ready);
        }
        self.resume_kept_panic();
        n
    }

    /// [`reclaim_exited`](Self::reclaim_exited), then waits — like `synchronize_rcu` — until
    /// every instance it unpublished, and every one earlier sweeps unpublished, has been dropped:
    /// when it returns, every scoped-only instance of a rank that had exited when it was called
    /// is gone. Returns how many this call unpublished.
    ///
    /// It waits for the readers that may still see those instances (delegates inside
    /// [`with_for`](Self::with_for) or another rank's [`with`](Self::with), [`for_each`](Self::for_each),
    /// on any `RankLocal`) to leave their closures, and for every [`Reader`](crate::Reader) that
    /// has made a lookup to be dropped, so it blocks for as long as the longest such read. Called
    /// from inside such a read, or while such a reader lives, on this thread it would wait for
    /// itself, so it panics instead. Called from inside a `T::drop` that this crate runs (a sweep's, a
    /// `clear`'s, ...), it does not wait for values other sweeps are in the middle of dropping
    /// — two such drops on two threads would wait for each other — only for those not being
    /// dropped yet, which it drops itself if need be. Nor does it wait for an [`Iter`](crate::Iter)
    /// (which may be held for ever): an instance a live iterator may still yield is dropped once
    /// that iterator is dropped, by a later sweep or reclamation call, and counted by
    /// [`len`](Self::len) until then.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// static TOTAL: AtomicU64 = AtomicU64::new(0);
    /// struct Counter(AtomicU64);
    /// impl Default for Counter {
    ///     fn default() -> Self {
    ///         Counter(AtomicU64::new(0))
    ///     }
    /// }
    /// impl Drop for Counter {
    ///     fn drop(&mut self) {
    ///         TOTAL.fetch_add(self.0.load(Ordering::Relaxed), Ordering::Relaxed);
    ///     }
    /// }
    ///
    /// static COUNTS: RankLocal<Counter> = RankLocal::new();
    /// let workers: Vec<_> = (0..4)
    ///     .map(|_| std::thread::spawn(|| COUNTS.with(|c| c.0.fetch_add(10, Ordering::Relaxed))))
    ///     .collect();
    /// for w in workers {
    ///     w.join().unwrap(); // the thread has ended: its rank has exited
    /// }
    /// COUNTS.reclaim_exited_blocking();
    /// assert_eq!(TOTAL.load(Ordering::Relaxed), 40); // every worker's counter was folded in
    /// ```
    ///
    /// # Panics
    /// If called while this thread holds a pin of the crate's collector — inside `with_for`,
    /// `for_each` or another rank's `with`, or while a `Reader` of this thread that has made a
    /// lookup lives — and as [`reclaim_exited`](Self::reclaim_exited)
    /// if a `T::drop` panicked.
    #[track_caller]
    pub fn reclaim_exited_blocking(&self) -> usize {
        assert!(
            !collector::is_pinned(),
            "ranklocal: reclaim_exited_blocking called inside a scoped read (with_for, for_each, \
             or with for another rank) or while a Reader (RankLocal::pin) lives on this thread: \
             it would wait for that read to end; call it after the closure returns or the reader \
             is dropped"
        );
        let (n, upto) = {
            let mut w = Locked::new(self);
            let (n, ready) = Self::sweep(&mut w, SweepWhen::Now);
            let upto = w.next_serial();
            drop(w);
            self.free_ready(ready);
            (n, upto)
        };
        let me = identity::own_raw();
        // Inside a value's drop that this crate runs, batches other threads are freeing are not
        // waited for: two such drops on two threads, each waiting for the other's batch, would
        // never return. Batches still queued are freed by this call itself if need be.
        let in_drop = is_dropping();
        let mut spins = 0u32;
        loop {
            let (ready, waiting) = {
                let mut w = Locked::new(self);
                let ready = take_ready(&mut w, me, false);
                (ready, holds_before(&w, upto, me, in_drop))
            };
            if !ready.serials.is_empty() {
                spins = 0; // progress: the collector is moving, keep up with it
            }
            self.free_ready(ready);
            if !waiting {
                break;
            }
            // Help the collector: a flush tries to advance the epoch and runs what is due.
            collector::flush();
            backoff(&mut spins);
        }
        self.resume_kept_panic();
        n
    }

    /// Drops every instance.
    ///
    /// Each value is dropped as its own rank; if a `T::drop` panics, the others are still
    /// dropped, then the first panic propagates.
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
        self.settle_owned(false); // no exit work touches what is freed here (I39)
        self.remove_where(&mut |_| false);
    }

    /// Drops the instances of ranks that have exited, returning how many.
    ///
    /// A thread's rank counts as exited once its thread-local destructors have started; threads
    /// whose destructors never run (the main thread at process exit) never count as exited, and
    /// `std::thread::scope` may return before its threads' destructors ran (join the handles
    /// first, see [`reclaim_exited`](Self::reclaim_exited)). A [`Rank`](crate::Rank)'s rank counts
    /// as exited once the `Rank` is dropped, and is live until then, whether or not any thread
    /// acts for it. An exited rank can still be acted for; an instance made for it afterwards is
    /// dropped by the next purge (see the crate docs' "Exited ranks"). Each value is dropped as
    /// its own rank; a `T::drop` panic propagates after the others were dropped.
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
        // Ask about liveness first: dropping instances may touch rank ids (and the live set).
        let mut exited: Vec<u64> = self.core.ranks();
        identity::retain_exited(&mut exited);
        exited.sort_unstable();
        self.remove_where(&mut |rank| exited.binary_search(&rank).is_err())
    }

    /// Removes (and drops) the instances `keep` rejects; returns how many. Re-raises the first
    /// `T::drop` panic, this call's or one a sweep kept, after dropping everything.
    fn remove_where(&mut self, keep: &mut dyn FnMut(u64) -> bool) -> usize {
        let mut removed = self.remove_where_mut(keep);
        let n = removed.len();
        // Retired batches go too: `&mut self` excludes every reader (I6, I32).
        removed.extend(self.take_batches_mut());
        let (deferred, drained) = self.take_deferred_mut(false);
        removed.extend(deferred);
        let kept = first_of(self.writer_mut().sweep.panic.take(), drained);
        let panic = removed.drop_all();
        if let Some(p) = first_of(kept, panic) {
            std::panic::resume_unwind(p);
        }
        n
    }
}

/// The panic to re-raise: `kept` (the earlier one) if any; the other is dropped as
/// [`drop_payload`] does, so that its own `Drop` cannot unwind from here.
fn first_of(kept: Option<Payload>, later: Option<Payload>) -> Option<Payload> {
    match (kept, later) {
        (Some(k), Some(l)) => {
            drop_payload(l);
            Some(k)
        }
        (k, l) => k.or(l),
    }
}

/// Waits a little longer each round: spins, then yields, then sleeps up to 1 ms.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins <= 8 {
        core::hint::spin_loop();
    } else if *spins <= 32 {
        std::thread::yield_now();
    } else {
        let micros = 1u64 << (*spins - 32).min(10);
        std::thread::sleep(std::time::Duration::from_micros(micros));
    }
}

impl<T, B: Backend> Drop for RankLocal<T, B> {
    fn drop(&mut self) {
        // First: no exit work starts any more, and the values it moved out are dropped (I39).
        self.close_gate();
        let mut removed = self.remove_where_mut(&mut |_| false);
        self.close_inbox();
        removed.extend(self.take_batches_mut());
        // Later drains do nothing: what a drain took already is its own (I32).
        let (deferred, drained) = self.take_deferred_mut(true);
        removed.extend(deferred);
        let kept = first_of(self.writer_mut().sweep.panic.take(), drained);
        // The uid dies with `self` and is never reused, so cached copies are dead (I4).
        let panic = removed.drop_all();
        if let Some(p) = first_of(kept, panic) {
            // Re-raised unless this drop runs during an unwind (a second panic would abort).
            if !std::thread::panicking() {
                std::panic::resume_unwind(p);
            }
        }
    }
}
