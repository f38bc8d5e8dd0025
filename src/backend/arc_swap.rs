//! `ArcSwap`: the same copy-on-write snapshots as [`Epoch`](super::Epoch), published through
//! `arc_swap::ArcSwapOption` and reclaimed by reference counting. Not available under loom
//! (arc-swap does not support it).

use std::sync::Arc;

use ::arc_swap::ArcSwapOption;

use super::{Backend, Sealed};
use crate::snapshot::{Erased, Snapshot};

/// Copy-on-write snapshots behind [`arc_swap::ArcSwapOption`](::arc_swap::ArcSwapOption).
///
/// Readers take arc-swap's thread-local debt slot instead of an epoch pin; the old snapshot is
/// freed when its last `Arc` goes.
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

#[doc(hidden)]
pub struct ArcSwapIter {
    snap: Option<Arc<Snapshot>>,
    pos: usize,
}

impl Iterator for ArcSwapIter {
    type Item = (u64, Erased);
    #[inline]
    fn next(&mut self) -> Option<(u64, Erased)> {
        self.snap.as_ref()?.next_entry(&mut self.pos)
    }
}

impl Backend for ArcSwap {
    const NAME: &'static str = "arc-swap";
    const CACHES_DELEGATED: bool = true;
    type Map = ArcSwapOption<Snapshot>;
    type Iter<'a> = ArcSwapIter;

    #[allow(clippy::declare_interior_mutable_const)] // a fresh map per use is the point
    const EMPTY: ArcSwapOption<Snapshot> = ArcSwapOption::const_empty();

    #[inline]
    fn get(map: &Self::Map, rank: u64) -> Option<Erased> {
        map.load().as_ref()?.get(rank)
    }

    fn insert(map: &Self::Map, rank: u64, ptr: Erased) {
        // Writers are serialized by the caller, so load-then-store loses no update.
        let old = map.load_full();
        let new = Snapshot::with_added(old.as_deref(), rank, ptr);
        map.store(Some(Arc::new(new)));
    }

    fn len(map: &Self::Map) -> usize {
        map.load().as_ref().map_or(0, |s| s.len())
    }

    fn iter(map: &Self::Map) -> ArcSwapIter {
        ArcSwapIter {
            snap: map.load_full(),
            pos: 0,
        }
    }

    fn retain(map: &mut Self::Map, keep: &mut dyn FnMut(u64) -> bool) -> Vec<(u64, Erased)> {
        let Some(old) = map.load_full() else {
            return Vec::new();
        };
        let (kept, removed) = old.partition(keep);
        map.store((kept.len() > 0).then(|| Arc::new(kept)));
        removed
    }
}
