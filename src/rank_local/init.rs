//! First touch: the init protocol (`init` runs at most once per rank, with no lock held) and
//! publication (I2, I16).
//!
//! Writers serialize on the `RankLocal`'s writer lock, which readers never take. Under it a
//! writer re-checks the map and *claims* the rank by recording `(rank, thread)`; then it drops
//! the lock and runs `init` with no lock held, so a slow `init` delays no reader and no writer of
//! another rank. A second thread wanting the same rank waits on a condvar for the claim to end
//! (`init` runs at most once); the *same* thread wanting it again is a reentrant `init`, and
//! panics with a clear message instead of deadlocking. When `init` returns, the writer re-takes
//! the lock, publishes, and ends the claim; if `init` panics or errs, a drop guard ends the claim
//! and nothing is inserted, so the next call tries again.

use super::instance::{self, InstancePtr, ESCAPED, OWNED, SCOPED};
use super::reclaim::{FreeLater, Ready, SweepWhen};
use super::{RankLocal, Writer};
use crate::backend::Backend;
use crate::collector::{count_pin, pin, Pin};
use crate::identity::{self, RankId};
use crate::primitive::{lock, wait, Ordering};

/// A rank whose `init` is running, and the OS thread (its own rank id) running it.
pub(super) struct Claim {
    rank: u64,
    thread: u64,
}

/// How a first touch hands its instance out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// As a plain `&T` (`get` and friends): the instance is ESCAPED, kept until `&mut` (I31).
    Escaped,
    /// To a closure (`with`) on the live owner's thread: the instance stays SCOPED, and needs no
    /// pin while the thread runs (I35).
    Owner,
    /// To a closure (`with`) of any other thread: SCOPED, protected by a pin until the closure
    /// returns (I33).
    Scoped,
    /// To a closure (`with_own`) on the live owner's thread: OWNED, dropped by the thread's exit
    /// work unless another access moves it on first (I39).
    Own,
}

/// Ends a claim if `init` errs or unwinds (a first touch that publishes ends it in the same
/// critical section and forgets the guard), and wakes waiters.
struct ClaimGuard<'a, T: Send, B: Backend> {
    rl: &'a RankLocal<T, B>,
    rank: u64,
}

impl<T: Send, B: Backend> Drop for ClaimGuard<'_, T, B> {
    fn drop(&mut self) {
        let wake = end_claim(&mut lock(&self.rl.writer), self.rank);
        if wake {
            crate::counters::bump!(CLAIM_NOTIFIES);
            self.rl.claim_ended.notify_all();
        }
    }
}

/// Ends `rank`'s claim, under the writer lock; `true` if a thread waits for a claim to end, so
/// the caller must notify `claim_ended` (after unlocking). Counting waiters under the lock saves
/// a futex system call per first touch when, as almost always, nobody waits.
fn end_claim(w: &mut Writer, rank: u64) -> bool {
    w.claims.retain(|c| c.rank != rank);
    w.claim_waiters > 0
}

/// An instance lent to a caller: the pin that protects it, if it needs one (I33), and, with a
/// pin, the batches its sweep left ready in the queue ([`FreeLater`]). Fields drop in order: the
/// pin first, then what is still ready is taken and freed, so no other rank's value is dropped
/// while this one is pinned (a value's `Drop` may want to wait for a grace period).
pub(super) struct Lent<'a, T: Send, B: Backend> {
    pub(super) p: InstancePtr<T>,
    pub(super) pin: Option<Pin>,
    pub(super) _frees: FreeLater<'a, T, B>,
}

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// First touch of `rank` (step 3 of a lookup): the init protocol in the module docs. Returns
    /// the instance, ESCAPED for [`Access::Escaped`] (I31), and for [`Access::Scoped`] a pin taken
    /// under the writer lock, so no sweep can have retired the instance before it (I33). Pins
    /// nothing else: a thread whose first touches are its own registers no epoch participant.
    #[track_caller]
    pub(super) fn insert<E>(
        &self,
        rank: u64,
        init: impl FnOnce() -> Result<T, E>,
        access: Access,
    ) -> Result<Lent<'_, T, B>, E> {
        crate::counters::bump!(INSERTS);
        instance::check_not_dropping(self as *const Self as usize, rank);
        let me = identity::own_raw();
        let protect = || {
            (access == Access::Scoped).then(|| {
                let guard = pin();
                count_pin(&guard);
                guard
            })
        };
        let mut w = lock(&self.writer);
        loop {
            // SAFETY: under the writer lock, which serializes every write to the map (I16).
            if let Some(p) = unsafe { B::get_by_writer(&self.map, rank) } {
                // published by another thread meanwhile
                // SAFETY: an instance of this map (I5); in the map under the writer lock, so not
                // RECLAIMING and alive (I30, I32).
                let p = unsafe { InstancePtr::<T>::new(p) };
                // Moved on from OWNED as `access` needs (I30, I31, I39); a tombstone is absent
                // and refilled below.
                if Self::serves(p, access) {
                    return Ok(Lent {
                        p,
                        pin: protect(),
                        _frees: FreeLater::nothing(self),
                    });
                }
            }
            match w.claims.iter().find(|c| c.rank == rank) {
                None => break,
                Some(c) if c.thread == me => {
                    drop(w);
                    panic!(
                        "ranklocal: reentrant initialization: the init of {} on this RankLocal \
                         asked for the same rank's instance (get/get_or from inside its own init)",
                        RankId::from_raw(rank)
                    );
                }
                Some(_) => {
                    w.claim_waiters += 1;
                    w = wait(&self.claim_ended, w);
                    w.claim_waiters -= 1;
                }
            }
        }
        w.claims.push(Claim { rank, thread: me });
        drop(w);

        let claim = ClaimGuard { rl: self, rank };
        let value = init()?; // on panic or error, `claim` ends the claim; nothing is inserted
        let state = match access {
            Access::Escaped => ESCAPED,
            Access::Owner | Access::Scoped => SCOPED,
            Access::Own => OWNED,
        };
        let p = InstancePtr::alloc(value, state);
        let (p, guard, ready, waiting, wake) = {
            let mut w = lock(&self.writer);
            // Pinned before the sweep below may retire `p` (an exited rank's scoped instance):
            // its deferral then waits for this pin (I32, I33).
            let guard = protect();
            // Relaxed: read only under this lock, and published with the instance (I2, I31). A
            // refilled tombstone keeps its own count (an `iter` since may hold it, I39).
            // SAFETY: `p` was allocated above and is not published yet: alive (I1).
            unsafe { p.born() }.store(w.walks, Ordering::Relaxed);
            // into the rank's tombstone if it has one (I39)
            let p = self.publish(&w, rank, p, state);
            if access != Access::Escaped {
                Self::watch_exit(&mut w, rank); // after publishing: see I36
            }
            if access == Access::Own {
                Self::register_owned(&mut w, rank, p); // for the thread's exit work (I39)
            }
            // Writers sweep exited ranks' scoped-only instances, amortized (I32, I36). A caller
            // that stays pinned leaves the ready batches queued until it unpinned (`FreeLater`).
            let (ready, waiting) = if guard.is_some() {
                (Ready::NONE, self.sweep_leaving_ready(&mut w))
            } else {
                (self.sweep(&mut w, SweepWhen::Due).1, false)
            };
            (p, guard, ready, waiting, end_claim(&mut w, rank))
        };
        core::mem::forget(claim); // ended above, with the publication
        if wake {
            crate::counters::bump!(CLAIM_NOTIFIES);
            self.claim_ended.notify_all();
        }
        // Freed outside the writer lock and pinned by nothing; a `T::drop` panic is kept for an
        // explicit reclamation call.
        self.free_ready(ready);
        self.check_kept(access); // debug builds: warn once if many values are kept for exited ranks
        Ok(Lent {
            p,
            pin: guard,
            _frees: FreeLater::after_unpin(self, waiting),
        })
    }
}
