//! The map backends: where a `RankLocal` keeps its rank → instance map.
//!
//! All three implement [`Backend`] over the same type-erased entries (rank id → pointer to a
//! stable `Box<T>`), so the same `RankLocal` code, tests and benchmarks run on each:
//!
//! | backend | read (`get` on a cache miss) | publish (first touch) | reclamation |
//! |---|---|---|---|
//! | [`Epoch`] (default) | pin, load version, descend the trie | path-copy O(log n) nodes, store, defer the old version's epoch reference | epoch + the writer frees replaced nodes once their versions are dead |
//! | [`ArcSwap`] | `arc_swap` load (debt slot), descend the trie | path-copy O(log n) nodes, store | `Arc` count on versions + the writer frees replaced nodes |
//! | [`Baseline`] | read lock, `HashMap` probe | write lock, insert | none needed |
//!
//! Writers are serialized by the `RankLocal` (its init lock), so a backend's `insert` never races
//! another `insert`; readers race everything. `Baseline` is the C++ design ported faithfully for
//! comparison (read lock, then write lock); it is correct, just not lock-free.

#[cfg(all(feature = "arc-swap", not(ranklocal_loom)))]
mod arc_swap;
mod baseline;
mod epoch;

#[cfg(all(feature = "arc-swap", not(ranklocal_loom)))]
pub use self::arc_swap::ArcSwap;
pub use self::baseline::Baseline;
pub use self::epoch::Epoch;

use crate::erased::Erased;

mod sealed {
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// A map backend for [`RankLocal`](crate::RankLocal): [`Epoch`], [`ArcSwap`] (feature
/// `arc-swap`) or [`Baseline`].
///
/// The trait is sealed: its items are the crate's internal protocol (type-erased entries, a
/// single serialized writer) and are hidden from the docs. Pick a backend with the second type
/// parameter, e.g. `RankLocal<T, Baseline>`.
///
/// ```
/// use ranklocal::{Backend, Baseline, Epoch, RankLocal};
///
/// // code generic over the backend, as the crate's tests and benchmarks are
/// fn first_touch<B: Backend>() -> (&'static str, u32) {
///     let rl: RankLocal<u32, B> = RankLocal::new();
///     (B::NAME, *rl.get_or(|| 1))
/// }
/// assert_eq!(first_touch::<Epoch>(), ("epoch", 1));
/// assert_eq!(first_touch::<Baseline>(), ("baseline", 1));
/// ```
///
#[cfg_attr(
    not(all(feature = "arc-swap", not(loom))),
    doc = "[`ArcSwap`]: crate#features"
)]
pub trait Backend: Sealed + Sized + Send + Sync + 'static {
    /// A short name for tables and `Debug` output.
    const NAME: &'static str;

    /// Whether lookups for a rank other than the thread's own (delegated `get`, `get_for`) may
    /// be served from the thread cache. `false` only for [`Baseline`], which, like the C++
    /// original, caches the owner's instance only and takes the read lock for every delegated
    /// lookup.
    #[doc(hidden)]
    const CACHES_DELEGATED: bool;

    /// Whether a lookup (`get_with`) pins the crate's epoch collector. On such a backend a
    /// thread's first pin would register it, so the lookups that need not stay pinned may go
    /// under a free writer lock instead (`RankLocal::lookup_slow`). `false` only for
    /// [`Baseline`], whose lookups take its read lock, as the C++ design's do.
    #[doc(hidden)]
    const LOOKUP_PINS: bool;

    #[doc(hidden)]
    type Map: Send + Sync;

    #[doc(hidden)]
    type Iter<'a>: Iterator<Item = (u64, Erased)> + Send + Sync;

    /// An empty map (a `const` so that `RankLocal::new` is `const`).
    #[doc(hidden)]
    #[cfg(not(ranklocal_loom))]
    const EMPTY: Self::Map;

    /// An empty map (loom's primitives cannot be built in a `const`).
    #[doc(hidden)]
    #[cfg(ranklocal_loom)]
    fn empty() -> Self::Map;

    /// The entry for `rank`. Never blocks on the `Epoch` and `ArcSwap` backends.
    #[doc(hidden)]
    fn get(map: &Self::Map, rank: u64) -> Option<Erased>;

    /// The entry for `rank`, passed to `f` while the lookup still protects it from the sweeper
    /// (I33): inside the lookup's own epoch pin (`Epoch`), inside a pin taken around the load
    /// (`ArcSwap`: arc-swap's guard protects the version, not the instance), or under the read
    /// lock (`Baseline`: the sweeper's remove takes the write lock, and it frees only what it
    /// removed, I32). The crate passes only the escape CAS as `f`; an `f` that called back into
    /// a `Baseline` map's writer would deadlock (never UB). Sound for any input: an `Erased` is
    /// only a pointer, nothing here dereferences it, and a map built outside the crate is empty.
    #[doc(hidden)]
    fn get_with<R>(map: &Self::Map, rank: u64, f: impl FnOnce(Erased) -> R) -> Option<R>;

    /// The entry for `rank`, looked up under `guard`, a pin the caller holds: on `Epoch` the
    /// version is loaded under it (no pin of its own, so a reader that holds one across many
    /// lookups pays for it once); `ArcSwap` takes arc-swap's guard for the descent, `Baseline` its
    /// read lock for the probe. What protects the instance found is the caller's business (I33).
    ///
    /// # Safety
    /// `guard` is a pin of the crate's own collector (`collector::pin`, I18): the collector the
    /// `Epoch` backend retires its versions' epoch references through.
    #[doc(hidden)]
    unsafe fn get_pinned(
        map: &Self::Map,
        rank: u64,
        guard: &crate::primitive::epoch::Guard,
    ) -> Option<Erased>;

    /// The entry for `rank`, looked up by the map's serialized writer without any protection of
    /// its own (no pin, no lock): a first touch's re-check and the sweep's lookups.
    ///
    /// # Safety
    /// The caller holds, for as long as it uses the result's map state, the lock that serializes
    /// every write to this map (the `RankLocal`'s writer lock, I16): nothing it reads can be
    /// replaced or freed meanwhile.
    #[doc(hidden)]
    unsafe fn get_by_writer(map: &Self::Map, rank: u64) -> Option<Erased>;

    /// Publishes `rank -> ptr`; `rank` is absent. Callers serialize all `insert`s.
    #[doc(hidden)]
    fn insert(map: &Self::Map, rank: u64, ptr: Erased);

    /// Unpublishes the entries of `ranks`, all in one write (one new version on the snapshot
    /// backends, so each trie node on their paths is copied once), and returns how many were
    /// present. The instances themselves are not freed. Callers serialize it with every `insert`
    /// (the `RankLocal`'s writer lock, I16); readers may race it.
    #[doc(hidden)]
    fn remove(map: &Self::Map, ranks: &[u64]) -> usize;

    /// Number of entries.
    #[doc(hidden)]
    fn len(map: &Self::Map) -> usize;

    /// Every entry, from one consistent snapshot that the iterator keeps alive (on `Epoch`, no
    /// later first touch fills a slot of it in place, I38).
    #[doc(hidden)]
    fn iter(map: &Self::Map) -> Self::Iter<'_>;

    /// Removes the entries `keep` rejects and returns them (exclusive access: no reader exists).
    #[doc(hidden)]
    fn retain(map: &mut Self::Map, keep: &mut dyn FnMut(u64) -> bool) -> Vec<(u64, Erased)>;
}
