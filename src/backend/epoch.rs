//! `Epoch` (the default): copy-on-write snapshots behind a crossbeam-epoch `Atomic`.
//!
//! - Read: pin, `load(Acquire)`, probe. A pin writes only this thread's own epoch slot, never a
//!   line other readers write.
//! - Publish (one writer at a time, serialized by the `RankLocal`): build the new snapshot,
//!   `store(Release)`, `defer_destroy` the old one, `flush` so the garbage does not sit in this
//!   thread's local bag.
//! - Exclusive access (`&mut`): no reader can exist, so snapshots are replaced and freed at once.

use core::sync::atomic::Ordering;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};

use super::{Backend, Sealed};
use crate::snapshot::{Erased, Snapshot};

/// Copy-on-write snapshots reclaimed by crossbeam-epoch (the default backend).
///
/// Readers pin the epoch (a thread-local write), load the current snapshot and probe it; they
/// never lock, never write a shared cache line and never allocate. A first touch copies the
/// snapshot with one more entry and retires the old one to the epoch collector.
///
/// ```
/// use ranklocal::{Epoch, RankLocal};
///
/// // the default backend: `RankLocal<T>` is `RankLocal<T, Epoch>`
/// let rl: RankLocal<u32, Epoch> = RankLocal::<u32>::new();
/// assert_eq!(*rl.get_or(|| 7), 7);
/// assert!(format!("{rl:?}").contains(r#"backend: "epoch""#));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Epoch;

impl Sealed for Epoch {}

/// The published snapshot; null while the map is empty.
#[doc(hidden)]
pub struct EpochMap {
    head: Atomic<Snapshot>,
}

impl Drop for EpochMap {
    fn drop(&mut self) {
        // SAFETY: `&mut self` — no reader holds or can load `head` (I6), and retired snapshots
        // are never `head` (I3), so freeing it now frees it exactly once.
        unsafe {
            // Relaxed: `&mut self` was handed over with a happens-before edge already.
            let head = self.head.load(Ordering::Relaxed, epoch::unprotected());
            if !head.is_null() {
                drop(head.into_owned());
            }
        }
    }
}

/// Iterates one snapshot, kept alive by the pin it owns.
#[doc(hidden)]
pub struct EpochIter<'a> {
    // Field order: `snap` is only dereferenced while `_guard` is alive (it is dropped last).
    snap: Shared<'a, Snapshot>,
    pos: usize,
    _guard: Guard,
}

impl Iterator for EpochIter<'_> {
    type Item = (u64, Erased);

    #[inline]
    fn next(&mut self) -> Option<(u64, Erased)> {
        // SAFETY: `snap` was loaded (Acquire) from `head` while `_guard` was pinned, and the
        // guard is still pinned: a snapshot retired after that load is only freed once this pin
        // ends (I3). Snapshots are immutable once published (I3), so sharing is fine.
        let snap = unsafe { self.snap.as_ref() }?;
        snap.next_entry(&mut self.pos)
    }
}

impl Backend for Epoch {
    const NAME: &'static str = "epoch";
    const CACHES_DELEGATED: bool = true;
    type Map = EpochMap;
    type Iter<'a> = EpochIter<'a>;

    #[cfg(not(loom))]
    #[allow(clippy::declare_interior_mutable_const)] // a fresh map per use is the point
    const EMPTY: EpochMap = EpochMap {
        head: Atomic::null(),
    };

    #[cfg(loom)]
    fn empty() -> EpochMap {
        EpochMap {
            head: Atomic::null(),
        }
    }

    #[inline]
    fn get(map: &EpochMap, rank: u64) -> Option<Erased> {
        let guard = epoch::pin();
        // Acquire: pairs with the writer's Release store, so the snapshot's slots and the
        // instance they point to (initialized before publication, I2) are visible.
        let snap = map.head.load(Ordering::Acquire, &guard);
        // SAFETY: loaded under `guard`; a retired snapshot outlives every pin that could have
        // loaded it (I3), and published snapshots are immutable (I3).
        unsafe { snap.as_ref() }?.get(rank)
    }

    fn insert(map: &EpochMap, rank: u64, ptr: Erased) {
        let guard = epoch::pin();
        // Relaxed would do (writers are serialized by a mutex, which orders them), Acquire
        // keeps the reasoning local: we read the slots of the snapshot we copy.
        let old = map.head.load(Ordering::Acquire, &guard);
        // SAFETY: loaded under `guard` (I3); only this (serialized) writer can retire it.
        let new = Snapshot::with_added(unsafe { old.as_ref() }, rank, ptr);
        // Release: publishes the new snapshot's slots and the instance behind `ptr` (I2).
        map.head.store(Owned::new(new), Ordering::Release);
        if !old.is_null() {
            // SAFETY: `old` is unlinked (`head` no longer points to it and no writer can
            // re-publish it), so no reader can load it any more; readers that loaded it before
            // are pinned and the collector waits for them (I3). Retired exactly once: only the
            // writer that replaced it retires it.
            unsafe { guard.defer_destroy(old) };
        }
        // Do not strand the retired snapshot in this thread's bag: a thread that inserts once
        // and then only reads would otherwise never hand it to the global queue.
        guard.flush();
    }

    fn len(map: &EpochMap) -> usize {
        let guard = epoch::pin();
        let snap = map.head.load(Ordering::Acquire, &guard);
        // SAFETY: loaded under `guard` (I3).
        unsafe { snap.as_ref() }.map_or(0, Snapshot::len)
    }

    fn iter(map: &EpochMap) -> EpochIter<'_> {
        let guard = epoch::pin();
        let snap = map.head.load(Ordering::Acquire, &guard);
        // Re-borrow the pointer for the map's lifetime: it is only dereferenced in `next`, while
        // `guard`, moved into the iterator, is still pinned (I3).
        let snap = Shared::from(snap.as_raw());
        EpochIter {
            snap,
            pos: 0,
            _guard: guard,
        }
    }

    fn retain(map: &mut EpochMap, keep: &mut dyn FnMut(u64) -> bool) -> Vec<(u64, Erased)> {
        // SAFETY: `&mut` — no reader exists (I6); the current snapshot is freed right here, once.
        unsafe {
            let guard = epoch::unprotected();
            // Relaxed (load and store): exclusive access, ordered by whatever gave us `&mut`.
            let old = map.head.load(Ordering::Relaxed, guard);
            let Some(snap) = old.as_ref() else {
                return Vec::new();
            };
            let (kept, removed) = snap.partition(keep);
            let new = if kept.len() == 0 {
                Shared::null()
            } else {
                Owned::new(kept).into_shared(guard)
            };
            map.head.store(new, Ordering::Relaxed);
            drop(old.into_owned());
            removed
        }
    }
}
