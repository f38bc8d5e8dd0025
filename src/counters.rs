//! Test-only event counters (unit tests only: `cfg(test)`): properties the crate's claims rest on
//! that no result shows — a hit that makes no map lookup, a path that takes no pin, a sweep that
//! runs only when due — are asserted by counting events on the current thread. Production code
//! bumps them with [`bump`]; in normal builds the calls compile to nothing.

#[cfg(all(test, not(ranklocal_loom)))]
use core::cell::Cell;

/// A per-thread event count.
#[cfg(all(test, not(ranklocal_loom)))]
pub(crate) type Counter = std::thread::LocalKey<Cell<u64>>;

#[cfg(all(test, not(ranklocal_loom)))]
std::thread_local! {
    /// Map lookups made by `RankLocal::lookup_slow` (a thread-cache miss of a plain lookup).
    pub(crate) static MAP_LOOKUPS: Cell<u64> = const { Cell::new(0) };
    /// Map lookups made by a scoped lookup on behalf of another rank (`Pinned::lookup` missed the
    /// cache's pinned entries).
    pub(crate) static SCOPED_MAP_LOOKUPS: Cell<u64> = const { Cell::new(0) };
    /// Pins of this thread's participant (`collector::pin`).
    pub(crate) static PINS: Cell<u64> = const { Cell::new(0) };
    /// Sweeps that ran (took their inbox), on any `RankLocal`.
    pub(crate) static SWEEPS: Cell<u64> = const { Cell::new(0) };
    /// Slow paths of a `rank_local!` key's `get` (its slot missed).
    pub(crate) static KEY_SLOW: Cell<u64> = const { Cell::new(0) };
    /// Locks of the process-wide live-rank registry (`identity`).
    pub(crate) static LIVE_LOCKS: Cell<u64> = const { Cell::new(0) };
    /// Entries a writer's full rescan examined (`trie::Reclaimer::collect_all`).
    pub(crate) static RESCANNED: Cell<u64> = const { Cell::new(0) };
    /// Prunes of a live rank's exit watchers (`identity::Watchers::add`).
    pub(crate) static WATCHER_PRUNES: Cell<u64> = const { Cell::new(0) };
    /// Flushes of this thread's own bag by `collector::count_pin`.
    pub(crate) static OWN_FLUSHES: Cell<u64> = const { Cell::new(0) };
    /// First touches that helped a waiting batch's grace period along (`RankLocal::free_ready`).
    pub(crate) static HELPS: Cell<u64> = const { Cell::new(0) };
    /// Wake-ups of threads waiting for a claim to end (`claim_ended.notify_all`, a futex call).
    pub(crate) static CLAIM_NOTIFIES: Cell<u64> = const { Cell::new(0) };
    /// Full scans of a `RankLocal`'s waiting batches (`raw::Tracks::take_ready`).
    pub(crate) static BATCH_SCANS: Cell<u64> = const { Cell::new(0) };
    /// First touches (`RankLocal::first_touch`): a lookup that takes the writer lock (a first
    /// touch, or one that found nothing in the map).
    pub(crate) static INSERTS: Cell<u64> = const { Cell::new(0) };
    /// Map lookups made under a free writer lock instead of a pin (`Locked::try_new`).
    pub(crate) static UNPINNED_LOOKUPS: Cell<u64> = const { Cell::new(0) };
    /// Map entries walked while holding a `RankLocal`'s writer lock (by `iter`, a sweep, ...).
    pub(crate) static WALKED_UNDER_LOCK: Cell<u64> = const { Cell::new(0) };
    /// Map lookups of the live owner's own instance by a plain map read (`LiveOwner::get`: a
    /// miss of the owner-only family's thread-cache entry).
    pub(crate) static OWNER_LOOKUPS: Cell<u64> = const { Cell::new(0) };
    /// Prunes of a thread's exit work list (`identity::add_exit_work`).
    pub(crate) static EXIT_WORK_PRUNES: Cell<u64> = const { Cell::new(0) };
}

/// Counts one event (unit tests only).
macro_rules! bump {
    ($counter:ident) => {
        #[cfg(all(test, not(ranklocal_loom)))]
        $crate::counters::$counter.with(|n| n.set(n.get() + 1));
    };
}
pub(crate) use bump;

/// The count of `counter` on this thread.
#[cfg(all(test, not(ranklocal_loom)))]
pub(crate) fn get(counter: &'static Counter) -> u64 {
    counter.with(Cell::get)
}
