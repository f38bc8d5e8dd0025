//! `ArcSwap`: the same persistent-trie versions as [`Epoch`](super::Epoch), published through
//! `arc_swap::ArcSwapOption` and held by reference count. Not available under loom (arc-swap does
//! not support it).

use std::sync::Arc;

use ::arc_swap::ArcSwapOption;

use super::{Backend, Sealed};
use crate::collector::pin;
use crate::erased::Erased;
use crate::primitive::{fence, lock, mutex_mut, Mutex, Ordering};
use crate::trie::{Cursor, Reclaimer, ReplacedVersion, Trie, Version, Write};

/// Persistent-trie snapshots behind [`arc_swap::ArcSwapOption`](::arc_swap::ArcSwapOption).
///
/// Readers take arc-swap's thread-local debt slot instead of an epoch pin; a replaced version's
/// nodes are freed by the writer once the version's last `Arc` is the writer's own.
///
/// Needs the `arc-swap` feature (off by default): the backend exists for comparison with
/// [`Epoch`](super::Epoch), and most users need not compile arc-swap.
///
/// ```
/// # #[cfg(feature = "arc-swap")] {
/// use ranklocal::{on_behalf_of, ArcSwap, Rank, RankLocal};
///
/// let rl: RankLocal<String, ArcSwap> = RankLocal::new();
/// rl.get_or(|| "owner".to_string());
/// let job = Rank::new();
/// on_behalf_of(job.id(), || rl.get_or(|| "job".to_string()));
/// assert_eq!(rl.get_for(job.id()).map(String::as_str), Some("job"));
/// assert_eq!(rl.len(), 2);
/// assert!(format!("{rl:?}").contains(r#"backend: "arc-swap""#));
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "arc-swap")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct ArcSwap;

impl Sealed for ArcSwap {}

impl ReplacedVersion for Arc<Version> {
    fn is_dead(&self) -> bool {
        // arc-swap's `store` pays every reader's debt on the old pointer (turns it into a
        // strong count) before it returns, so after the swap the strong count counts every
        // reader and iterator; only the writer's own `Arc` left means none (I14).
        if Arc::strong_count(self) == 1 {
            // Acquire fence after the (Relaxed) count: synchronizes with every holder's
            // Release decrement, so their reads of the nodes happen before the writer frees.
            fence(Ordering::Acquire);
            true
        } else {
            false
        }
    }
}

/// The published version and the writer's bookkeeping.
#[doc(hidden)]
pub struct ArcSwapMap {
    head: ArcSwapOption<Version>,
    reclaimer: Mutex<Reclaimer<Arc<Version>>>,
}

impl ArcSwapMap {
    /// Unpublishes the current version and frees every replaced node; returns the trie it held
    /// (its nodes are now the caller's).
    ///
    /// # Safety
    /// No reader or iterator of this map exists (I6).
    unsafe fn unpublish_all(&mut self) -> Option<Trie> {
        // SAFETY: exclusive access (I6).
        unsafe { mutex_mut(&mut self.reclaimer).free_replaced() };
        self.head.swap(None).map(|v| v.trie)
    }

    /// One write (I16), as `EpochMap::publish`: `f` changes a [`Write`] on the published
    /// version; unless it returns `None`, the result is published and the replaced version goes
    /// to the writer's [`Reclaimer`].
    fn publish<R>(&self, f: impl FnOnce(&mut Write<'_, Arc<Version>>) -> Option<R>) -> Option<R> {
        let mut w = lock(&self.reclaimer);
        let old = self.head.load_full();
        let (base, seq) = old.as_ref().map_or((Trie::EMPTY, 0), |o| (o.trie, o.seq));
        // SAFETY: the reclaimer lock makes this the only writer (I16); `old` is held, so its nodes
        // are alive (I13), and every published node is born at `seq` or earlier (I12).
        let mut write = unsafe { w.write(base, seq) };
        let r = f(&mut write)?;
        // SeqCst (arc-swap's): publishes the new version, its nodes and the instances (I2).
        self.head
            .store(Some(Arc::new(Version::new(write.trie(), write.seq()))));
        // SAFETY: version `seq + 1` is published in place of `seq`; the writer's `Arc` tells
        // when it is dead (I14).
        unsafe { write.retire(old) };
        Some(r)
    }
}

impl Drop for ArcSwapMap {
    fn drop(&mut self) {
        // SAFETY: `&mut self` — no reader or iterator exists (I6); no other live version then
        // shares the published trie's nodes (I13).
        unsafe {
            if let Some(trie) = self.unpublish_all() {
                trie.free_nodes();
            }
        }
    }
}

#[doc(hidden)]
pub struct ArcSwapIter {
    snap: Option<Arc<Version>>,
    cursor: Cursor,
}

impl Iterator for ArcSwapIter {
    type Item = (u64, Erased);
    #[inline]
    fn next(&mut self) -> Option<(u64, Erased)> {
        // SAFETY: the `Arc` keeps the version from being dead, so its nodes are alive (I13,
        // I14, I15); the cursor was only used with it.
        unsafe { self.snap.as_ref()?.next_entry(&mut self.cursor) }
    }
}

impl Backend for ArcSwap {
    const NAME: &'static str = "arc-swap";
    const CACHES_DELEGATED: bool = true;
    const LOOKUP_PINS: bool = true;
    type Map = ArcSwapMap;
    type Iter<'a> = ArcSwapIter;

    #[allow(clippy::declare_interior_mutable_const)] // a fresh map per use is the point
    const EMPTY: ArcSwapMap = ArcSwapMap {
        head: ArcSwapOption::const_empty(),
        reclaimer: Mutex::new(Reclaimer::NEW),
    };

    #[inline]
    fn get(map: &ArcSwapMap, rank: u64) -> Option<Erased> {
        let guard = map.head.load();
        // SAFETY: the guard keeps the version from being dead while we descend (I14), so its
        // nodes are alive (I13); published versions are immutable (I3, I12).
        unsafe { guard.as_ref()?.get(rank) }
    }

    #[inline]
    fn get_with<R>(map: &ArcSwapMap, rank: u64, f: impl FnOnce(Erased) -> R) -> Option<R> {
        // arc-swap's guard keeps the version's nodes alive, not the instance: pin for it (I33)
        let guard = pin();
        let r = Self::get(map, rank).map(f);
        drop(guard);
        r
    }

    #[inline]
    unsafe fn get_pinned(
        map: &ArcSwapMap,
        rank: u64,
        _guard: &crate::primitive::epoch::Guard,
    ) -> Option<Erased> {
        Self::get(map, rank)
    }

    unsafe fn get_by_writer(map: &ArcSwapMap, rank: u64) -> Option<Erased> {
        Self::get(map, rank)
    }

    fn insert(map: &ArcSwapMap, rank: u64, ptr: Erased) {
        map.publish(|w| {
            let prev = w.insert(rank, ptr);
            debug_assert!(prev.is_none(), "rank inserted twice");
            Some(())
        });
    }

    fn remove(map: &ArcSwapMap, ranks: &[u64]) -> usize {
        map.publish(|w| {
            let n = ranks.iter().filter(|&&r| w.remove(r).is_some()).count();
            (n > 0).then_some(n)
        })
        .unwrap_or(0)
    }

    fn len(map: &ArcSwapMap) -> usize {
        map.head.load().as_ref().map_or(0, |v| v.len())
    }

    fn iter(map: &ArcSwapMap) -> ArcSwapIter {
        ArcSwapIter {
            snap: map.head.load_full(),
            cursor: Cursor::START,
        }
    }

    fn retain(map: &mut ArcSwapMap, keep: &mut dyn FnMut(u64) -> bool) -> Vec<(u64, Erased)> {
        let seq = map.head.load().as_ref().map_or(0, |v| v.seq);
        // SAFETY: `&mut` — no reader or iterator exists (I6); the published trie's nodes are then
        // alive and shared by no other live version: only replaced nodes were freed (I13).
        let Some((trie, removed)) =
            (unsafe { map.unpublish_all().map(|old| old.rebuild(seq + 1, keep)) })
        else {
            return Vec::new();
        };
        if let Some(trie) = trie {
            map.head.store(Some(Arc::new(Version::new(trie, seq + 1))));
        }
        removed
    }
}
