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

#![deny(unsafe_code)]

use once_cell::unsync::OnceCell;

pub(super) use super::raw::Access;
use super::raw::{self, Inst, Locked, Pinned, Reach};
use super::reclaim::{Ready, SweepWhen};
use super::RankLocal;
use crate::backend::Backend;
use crate::identity::{self, RankId};

/// A rank whose `init` is running, and the OS thread (its own rank id) running it.
pub(super) struct Claim {
    rank: u64,
    thread: u64,
}

/// Ends a claim if `init` errs or unwinds (a first touch that publishes ends it in the same
/// critical section and forgets the guard), and wakes waiters.
struct ClaimGuard<'a, T: Send, B: Backend> {
    rl: &'a RankLocal<T, B>,
    rank: u64,
}

impl<T: Send, B: Backend> Drop for ClaimGuard<'_, T, B> {
    fn drop(&mut self) {
        let wake = end_claim(&mut Locked::new(self.rl), self.rank);
        if wake {
            crate::counters::bump!(CLAIM_NOTIFIES);
            self.rl.claim_ended.notify_all();
        }
    }
}

/// Ends `rank`'s claim, under the writer lock; `true` if a thread waits for a claim to end, so
/// the caller must notify `claim_ended` (after unlocking). Counting waiters under the lock saves
/// a futex system call per first touch when, as almost always, nobody waits.
fn end_claim<T: Send, B: Backend>(w: &mut Locked<'_, T, B>, rank: u64) -> bool {
    // A rank has one claim at most, so the first match is the only one.
    if let Some(at) = w.claims.iter().position(|c| c.rank == rank) {
        w.claims.swap_remove(at);
    }
    w.claim_waiters > 0
}

/// Frees, when dropped, what a scoped first touch's sweep left ready ([`RankLocal::free_after_unpin`]),
/// if it left any.
struct FreeAfterUnpin<'a, T: Send, B: Backend> {
    rl: &'a RankLocal<T, B>,
    waiting: bool,
}

impl<T: Send, B: Backend> Drop for FreeAfterUnpin<'_, T, B> {
    fn drop(&mut self) {
        if self.waiting {
            self.rl.free_after_unpin();
        }
    }
}

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// First touch of `rank` for a `&T` that escapes (`get` and friends): ESCAPED (I31), and
    /// remembered by the thread cache. Pins nothing.
    #[track_caller]
    pub(super) fn first_touch_escaped<R: Reach<T, B>, E>(
        &self,
        rank: u64,
        init: impl FnOnce() -> Result<T, E>,
    ) -> Result<&T, E> {
        let (v, _) = self.first_touch(rank, init, Access::Escaped, |_, i| R::escaped(i))?;
        Ok(v.cached()) // outside the writer lock
    }

    /// First touch of the live owner's own rank, for `with` ([`Access::Owner`]) or `with_own`
    /// ([`Access::Own`]): the instance needs no pin while the thread runs (I35).
    #[track_caller]
    pub(super) fn first_touch_owner<'o, E>(
        &'o self,
        owner: &'o raw::LiveOwner<'o, T, B>,
        init: impl FnOnce() -> Result<T, E>,
        access: Access,
    ) -> Result<Inst<'o, 'o, T, B>, E> {
        debug_assert!(matches!(access, Access::Owner | Access::Own));
        let (i, _) = self.first_touch(owner.rank(), init, access, |_, i| {
            let i = owner.adopt(i)?;
            // Moved on from OWNED as `access` needs; a tombstone serves nothing (I39).
            match access {
                Access::Own => i.own().map(|_| i),
                _ => i.scope_own().map(|_| i),
            }
        })?;
        Ok(i)
    }

    /// First touch of `rank` for a scoped read by anyone but the live owner: lends the value to
    /// `f` under a pin taken under the writer lock, so no sweep can have retired the instance
    /// before it (I33). Once the pin is released, frees what this first touch's sweep left ready
    /// (a value's `Drop` may wait for a grace period, which must not wait for this pin).
    #[track_caller]
    pub(super) fn first_touch_scoped<Q: Reach<T, B>, R, E>(
        &self,
        rank: u64,
        init: impl FnOnce() -> Result<T, E>,
        f: impl FnOnce(&T) -> R,
    ) -> Result<R, E> {
        // Declared before the pin, so that it drops after it also if `f` unwinds.
        let mut frees = FreeAfterUnpin {
            rl: self,
            waiting: false,
        };
        let pin = OnceCell::new();
        let (v, waiting) = self.first_touch(rank, init, Access::Scoped, |w, i| {
            // Pinned only for an instance that serves: a tombstone is refilled after an `init`
            // that runs unpinned.
            Q::scope(i)?;
            Q::scope(w.protect(rank, pin.get_or_init(|| Pinned::new(self)))?)
        })?;
        frees.waiting = waiting;
        let r = f(v);
        drop(pin); // first: no other rank's value is dropped while this one is pinned
        drop(frees);
        Ok(r)
    }

    /// First touch of `rank` (step 3 of a lookup): the init protocol in the module docs.
    /// `hand` gets the instance under the writer lock — one another thread published meanwhile,
    /// or the one published here — and makes it into what the caller keeps after the lock is
    /// released (an escaped `&T`, an instance under a pin or of the live owner), or `None` if it
    /// cannot serve (a tombstone, refilled then). Pins nothing itself: a thread whose first
    /// touches are its own registers no epoch participant. Returns also whether ready batches
    /// were left queued for [`free_after_unpin`](Self::free_after_unpin) (a scoped caller's).
    #[track_caller]
    fn first_touch<'a, E, H>(
        &'a self,
        rank: u64,
        init: impl FnOnce() -> Result<T, E>,
        access: Access,
        mut hand: impl FnMut(&Locked<'a, T, B>, Inst<'_, 'a, T, B>) -> Option<H>,
    ) -> Result<(H, bool), E> {
        crate::counters::bump!(INSERTS);
        raw::check_not_dropping(self as *const Self as usize, rank);
        let me = identity::own_raw();
        let mut w = Locked::new(self);
        loop {
            if let Some(i) = w.get(rank) {
                // published by another thread meanwhile; a tombstone is refilled below
                if let Some(h) = hand(&w, i) {
                    return Ok((h, false));
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
                    w = w.wait(&self.claim_ended);
                    w.claim_waiters -= 1;
                }
            }
        }
        // a recycling map's new rank adopts an ended rank's value instead of running `init`
        if let Some(i) = w.adopt(rank, access) {
            if let Some(h) = hand(&w, i) {
                return Ok((h, false));
            }
        }
        w.claims.push(Claim { rank, thread: me });
        drop(w);

        let claim = ClaimGuard { rl: self, rank };
        let value = init()?; // on panic or error, `claim` ends the claim; nothing is inserted
        let (h, ready, waiting, wake) = {
            let mut w = Locked::new(self);
            if access == Access::Own {
                w.make_gate(); // the thread's exit work reaches the instance through it (I39)
            }
            // into the rank's tombstone if it has one (I39)
            let h = hand(&w, w.publish(rank, value, access))
                .expect("ranklocal: a published instance serves its first touch");
            if access != Access::Escaped {
                w.watch_exit(rank); // after publishing: see I36
            }
            // Writers sweep exited ranks' scoped-only instances, amortized (I32, I36). A caller
            // that stays pinned leaves the ready batches queued until it unpinned.
            let (ready, waiting) = if access == Access::Scoped {
                (Ready::NONE, Self::sweep_leaving_ready(&mut w))
            } else {
                (Self::sweep(&mut w, SweepWhen::Due).1, false)
            };
            let wake = end_claim(&mut w, rank);
            (h, ready, waiting, wake)
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
        Ok((h, waiting))
    }
}
