//! `Baseline`: the C++ design ported faithfully — one `RwLock<HashMap>`, read lock for lookups,
//! write lock for inserts. Kept for comparison; its map hashes rank ids with [`RankHasher`], the
//! one-multiply hasher every map arm of the benchmarks uses too (so comparisons measure
//! synchronization, not hashing).

use core::hash::{BuildHasherDefault, Hasher};
use std::collections::HashMap;

use super::{Backend, Sealed};
use crate::erased::Erased;
use crate::primitive::{read, rwlock_mut, write, RwLock};

/// Multiplier for Fibonacci hashing: 2^64 / golden ratio, odd.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// A `Hasher` for `u64` rank ids: one multiply by an odd constant (Fibonacci hashing).
#[derive(Default, Clone, Copy)]
pub struct RankHasher(u64);

impl Hasher for RankHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for non-u64 keys, which this crate never hashes; fold bytes for totality.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(GOLDEN);
        }
    }
    #[inline]
    fn write_u64(&mut self, key: u64) {
        self.0 = key.wrapping_mul(GOLDEN);
    }
}

/// `RwLock<HashMap>` backend: the C++ `shared_mutex` + `unordered_map` design, for comparison.
///
/// Lookups take the read lock (a shared reader count every reader writes), first touches the
/// write lock. Unlike the C++ original, `init` runs outside the lock.
///
/// ```
/// use ranklocal::{on_behalf_of, Baseline, Rank, RankLocal};
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// static LEGACY: RankLocal<AtomicU32, Baseline> = RankLocal::new();
///
/// LEGACY.get().fetch_add(1, Ordering::Relaxed);
/// let job = Rank::new();
/// // a delegated lookup takes the read lock, a first touch the write lock
/// on_behalf_of(job.id(), || LEGACY.get().fetch_add(10, Ordering::Relaxed));
/// assert_eq!(LEGACY.get().load(Ordering::Relaxed), 1);
/// assert_eq!(LEGACY.get_for(job.id()).unwrap().load(Ordering::Relaxed), 10);
/// assert!(format!("{LEGACY:?}").contains(r#"backend: "baseline""#));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Baseline;

#[doc(hidden)]
pub type BaselineMap = RwLock<Table>;

/// The C++ design's `unordered_map`, absent until the first insert: an empty `HashMap` can be
/// built in a `const` (what `RankLocal::new` needs, for a `static`) only from Rust 1.85 on, and
/// the crate builds on 1.65. An empty `HashMap` allocates nothing either way.
#[doc(hidden)]
#[derive(Default)]
pub struct Table(Option<HashMap<u64, Erased, BuildHasherDefault<RankHasher>>>);

impl Table {
    #[inline]
    fn get(&self, rank: u64) -> Option<Erased> {
        self.0.as_ref()?.get(&rank).copied()
    }

    fn map(&mut self) -> &mut HashMap<u64, Erased, BuildHasherDefault<RankHasher>> {
        self.0.get_or_insert_with(HashMap::default)
    }

    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, HashMap::len)
    }
}

impl Sealed for Baseline {}

impl Backend for Baseline {
    const NAME: &'static str = "baseline";
    const CACHES_DELEGATED: bool = false;
    const LOOKUP_PINS: bool = false;
    type Map = BaselineMap;
    type Iter<'a> = std::vec::IntoIter<(u64, Erased)>;

    #[cfg(not(ranklocal_loom))]
    #[allow(clippy::declare_interior_mutable_const)] // a fresh map per use is the point
    const EMPTY: BaselineMap = RwLock::new(Table(None));

    #[cfg(ranklocal_loom)]
    fn empty() -> BaselineMap {
        RwLock::new(Table(None))
    }

    #[inline]
    fn get(map: &BaselineMap, rank: u64) -> Option<Erased> {
        read(map).get(rank)
    }

    #[inline]
    fn get_with<R>(map: &BaselineMap, rank: u64, f: impl FnOnce(Erased) -> R) -> Option<R> {
        let m = read(map);
        // under the read lock: the sweeper's remove waits for it (I33)
        let r = m.get(rank).map(f);
        drop(m);
        r
    }

    #[inline]
    unsafe fn get_pinned(
        map: &BaselineMap,
        rank: u64,
        _guard: &crate::primitive::epoch::Guard,
    ) -> Option<Erased> {
        Self::get(map, rank)
    }

    unsafe fn get_by_writer(map: &BaselineMap, rank: u64) -> Option<Erased> {
        Self::get(map, rank)
    }

    fn insert(map: &BaselineMap, rank: u64, ptr: Erased) {
        write(map).map().insert(rank, ptr);
    }

    fn remove(map: &BaselineMap, ranks: &[u64]) -> usize {
        let mut m = write(map);
        let m = m.map();
        ranks.iter().filter(|r| m.remove(r).is_some()).count()
    }

    fn len(map: &BaselineMap) -> usize {
        read(map).len()
    }

    /// Copies the entries out under the read lock: holding the lock while the caller iterates
    /// would deadlock a `get` that inserts from inside the loop.
    fn iter(map: &BaselineMap) -> Self::Iter<'_> {
        let m = read(map);
        let entries: Vec<_> = match &m.0 {
            Some(m) => m.iter().map(|(&k, &p)| (k, p)).collect(),
            None => Vec::new(),
        };
        drop(m);
        entries.into_iter()
    }

    fn retain(map: &mut BaselineMap, keep: &mut dyn FnMut(u64) -> bool) -> Vec<(u64, Erased)> {
        let map = rwlock_mut(map).map();
        let gone: Vec<u64> = map.keys().copied().filter(|&k| !keep(k)).collect();
        let removed = gone
            .into_iter()
            .filter_map(|k| map.remove(&k).map(|p| (k, p)))
            .collect();
        map.shrink_to_fit(); // memory follows the number of ranks, as for the snapshots
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::hash::BuildHasher;

    /// The map hashes rank ids to distinct, spread values: the C++ design's `unordered_map`, not a
    /// list (a constant or truncated hash would make every lookup a scan).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "arithmetic in safe code, nothing for Miri to check; 4,096 hashes and two sorts \
                  take half a minute under it"
    )]
    fn rank_ids_hash_to_distinct_spread_values() {
        let build = BuildHasherDefault::<RankHasher>::default();
        let hashes: Vec<u64> = (1..=4096u64)
            .map(|id| {
                let mut h = build.build_hasher();
                h.write_u64(id);
                h.finish()
            })
            .collect();
        let mut distinct = hashes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), hashes.len(), "two rank ids hash alike");
        // the top 7 bits (what hashbrown's control bytes use) take many values
        let mut tops: Vec<u64> = hashes.iter().map(|h| h >> 57).collect();
        tops.sort_unstable();
        tops.dedup();
        assert!(
            tops.len() > 100,
            "hashes crowd in {} top-bit classes",
            tops.len()
        );
        // bytes (never hashed by the crate) fold into the state too
        let mut h = RankHasher::default();
        h.write(&[1, 2, 3]);
        let a = h.finish();
        let mut h = RankHasher::default();
        h.write(&[3, 2, 1]);
        assert_ne!(a, h.finish());
    }
}
