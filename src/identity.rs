//! Rank identities: one `u64` per OS thread, handed out from a process-wide counter and never
//! reused, plus the registry of live threads that [`RankLocal::purge_exited`] consults.
//!
//! The per-thread state is a `const`-initialized thread-local of plain `Cell`s with no destructor,
//! so it can be read at any point of a thread's life, including from another thread-local's
//! destructor while the thread exits (spec semantic 8).
//!
//! [`RankLocal::purge_exited`]: crate::RankLocal::purge_exited

use core::cell::Cell;
use core::fmt;
use std::collections::BTreeSet;

use crate::primitive::{global, lock, tls, AtomicU64, Mutex, Ordering};

/// A rank's identity: one per OS thread, unique for the life of the process and never reused,
/// even after the thread exits (as PyTorch's `RecordFunction::currentThreadId()`).
///
/// Ids are handed out on a thread's first use of the crate, starting at 1, in the order threads
/// first ask for them. A `RankId` can only be obtained from a running thread
/// ([`RankId::this_thread`], [`RankId::current`]); pass it to a worker and call
/// [`on_behalf_of`](crate::on_behalf_of) there to act for that rank.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct RankId(u64);

impl RankId {
    /// The rank this thread is acting for now: the innermost
    /// [`on_behalf_of`](crate::on_behalf_of) rank, or the thread's own rank when it is not
    /// delegating.
    #[inline]
    pub fn current() -> RankId {
        RankId(current_raw())
    }

    /// This OS thread's own rank, ignoring any delegation.
    #[inline]
    pub fn this_thread() -> RankId {
        RankId(own_raw())
    }

    /// The id as an integer (never 0).
    #[inline]
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// Wraps a raw id obtained from a [`RankId`] of this process.
    #[inline]
    pub(crate) fn from_raw(raw: u64) -> RankId {
        debug_assert_ne!(raw, 0);
        RankId(raw)
    }
}

impl fmt::Display for RankId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank#{}", self.0)
    }
}

/// A thread's identity state. `0` means "not assigned yet" in both fields.
pub(crate) struct ThreadState {
    /// This OS thread's own rank id, assigned on first use and never changed.
    own: Cell<u64>,
    /// The rank the thread acts for now: `own` outside delegation, the innermost
    /// `on_behalf_of` rank inside it; `0` only while `own` is unassigned and no delegation runs.
    current: Cell<u64>,
}

tls! {
    static STATE: ThreadState = const { ThreadState { own: Cell::new(0), current: Cell::new(0) } };
}

global! {
    /// The next rank id; ids start at 1 so that 0 can mean "none".
    static NEXT_RANK: AtomicU64 = AtomicU64::new(1);
}

global! {
    /// Ids of threads that have an id and have not run their exit hook yet.
    static LIVE: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());
}

/// The rank the current thread acts for (assigning its own id on first use).
#[inline]
pub(crate) fn current_raw() -> u64 {
    let cur = STATE.with(|s| s.current.get());
    if cur != 0 {
        cur
    } else {
        own_raw()
    }
}

/// The rank the current thread acts for, or 0 if the thread has no id yet (a thread cache lookup
/// with rank 0 misses, and the slow path then calls [`current_raw`]).
#[inline]
pub(crate) fn current_raw_or_zero() -> u64 {
    STATE.with(|s| s.current.get())
}

/// `true` when the thread acts for its own rank (not inside `on_behalf_of` another rank).
/// Also `true` before the thread has an id, when both fields are 0.
#[inline]
#[cfg_attr(loom, allow(dead_code))] // only the `rank_local!` form, absent under loom, asks
pub(crate) fn acting_as_self() -> bool {
    STATE.with(|s| s.current.get() == s.own.get())
}

/// This thread's own id, assigned on first use.
#[inline]
pub(crate) fn own_raw() -> u64 {
    let own = STATE.with(|s| s.own.get());
    if own != 0 {
        own
    } else {
        assign_own()
    }
}

#[cold]
fn assign_own() -> u64 {
    // Relaxed: the counter only has to hand out distinct values; nothing is published with it.
    let id = NEXT_RANK.fetch_add(1, Ordering::Relaxed);
    // u64::MAX marks empty thread-cache entries; 2^64 - 1 thread ids will not be handed out.
    assert!(id != u64::MAX, "ranklocal: rank ids exhausted");
    STATE.with(|s| {
        s.own.set(id);
        if s.current.get() == 0 {
            s.current.set(id);
        }
    });
    register_live(id);
    id
}

/// Makes the thread act for `rank`, returning the previous value (raw, possibly 0) for
/// [`restore_current`].
#[inline]
pub(crate) fn replace_current(rank: u64) -> u64 {
    STATE.with(|s| s.current.replace(rank))
}

/// Undoes [`replace_current`]. A previous value of 0 means "own rank, not assigned then"; the own
/// id may have been assigned meanwhile (inside the delegation), so restore to whatever it is now:
/// `current == 0` must imply `own == 0`, or [`acting_as_self`] would wrongly answer `false`.
#[inline]
pub(crate) fn restore_current(prev: u64) {
    STATE.with(|s| s.current.set(if prev != 0 { prev } else { s.own.get() }));
}

/// Dropped when the thread exits: removes its id from [`LIVE`].
#[cfg_attr(loom, allow(dead_code))]
struct ExitHook(u64);

impl Drop for ExitHook {
    fn drop(&mut self) {
        lock(&LIVE).remove(&self.0);
    }
}

tls! {
    #[cfg_attr(loom, allow(dead_code))]
    static EXIT_HOOK: Cell<Option<ExitHook>> = Cell::new(None);
}

/// Under loom the exit hook would run after loom has torn down its globals (the model's main
/// thread exits last), so liveness is not tracked there: `purge_exited` is not modeled.
#[cfg(loom)]
fn register_live(_id: u64) {}

#[cfg(not(loom))]
fn register_live(id: u64) {
    lock(&LIVE).insert(id);
    // A thread that gets its id while it is already being torn down cannot register a hook any
    // more: take it back out of LIVE right away, so it counts as exited (it is exiting).
    if EXIT_HOOK.try_with(|h| h.set(Some(ExitHook(id)))).is_err() {
        lock(&LIVE).remove(&id);
    }
}

/// Calls `f` with the set of live thread ids (cold path of `purge_exited`).
pub(crate) fn with_live<R>(f: impl FnOnce(&BTreeSet<u64>) -> R) -> R {
    f(&lock(&LIVE))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn own_id_assigned_inside_a_delegation_is_restored_as_current() {
        std::thread::spawn(|| {
            let other = std::thread::spawn(RankId::this_thread).join().unwrap();
            let prev = replace_current(other.as_u64());
            assert_eq!(prev, 0, "fresh thread has no rank yet");
            let own = own_raw(); // assigned while delegating
            assert_eq!(current_raw(), other.as_u64());
            assert!(!acting_as_self());
            restore_current(prev);
            assert_eq!(current_raw(), own);
            assert!(
                acting_as_self(),
                "own id assigned during delegation broke the fast path"
            );
        })
        .join()
        .unwrap();
    }
}
