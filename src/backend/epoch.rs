//! `Epoch` (the default): versions of a persistent radix trie ([`crate::trie`]) behind a
//! crossbeam-epoch `Atomic`.
//!
//! - Read: pin, `load(Acquire)` the current version, descend the trie (2 levels up to 4,095
//!   ranks, 3 up to 262,143). A pin writes only this thread's own epoch slot.
//! - Fill (a first touch whose trie leaf exists and was born after the newest version any
//!   snapshot was taken of — an `iter`, a `for_each`, a `Debug`, I38): store the
//!   instance's pointer into its empty slot of the published leaf, Release (I38). If the leaf is
//!   missing but the deepest node on its path exists (and is as young), a new leaf holding the
//!   pointer (with any missing node above it) is built and hung into that node's empty slot by
//!   the same Release store. Nothing is copied, published or
//!   retired.
//! - Publish (one writer at a time: the `RankLocal` serializes them, and the map's own writer
//!   mutex makes that a local fact): path-copy the trie (O(log n) nodes), `store(Release)` a new
//!   version header, and hand the old header's *epoch reference* to the collector
//!   (`defer_unchecked`), which releases it once every thread pinned at the unlinking has
//!   unpinned. The replaced nodes go to the writer's [`Reclaimer`], which frees each once every
//!   version containing it is dead (I13, I14).
//! - Iterate: under the reclaimer lock, for one load and one increment, freeze the published
//!   version (no later first touch fills a slot of its nodes, I38) and take a count on its header (I15);
//!   the iterator then holds that one version, not the epoch: it does not stall reclamation of
//!   anything else in the process. No user code runs while the mutex is held.
//! - Exclusive access (`&mut`): no reader can exist, so everything is freed at once.
//!
//! Every pin here is of the crate's own collector ([`crate::collector`], I18).

use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::primitive::epoch::{self, Atomic, Shared};

use super::{Backend, Sealed};
use crate::collector::{self, pin, Flush, Retired};
use crate::erased::Erased;
use crate::primitive::{lock, mutex_mut, AtomicUsize, Mutex, Ordering};
use crate::trie::{Cursor, Reclaimer, ReplacedVersion, Trie, Version, Write};

/// Persistent-trie snapshots reclaimed through crossbeam-epoch (the default backend).
///
/// Readers pin the epoch (a thread-local write), load the current version and descend its trie;
/// they never lock, never write a shared cache line and never allocate. A first touch fills its
/// empty slot of the published trie leaf in place, or hangs a new leaf into the deepest published
/// node on its path; one whose deepest existing node was in a version some iteration took as its
/// snapshot, or beyond the trie's range, copies the O(log n) nodes on the new rank's path and
/// retires only the nodes it replaced. Iteration, `for_each`, `Debug` and `len` take the
/// map's reclaimer lock for a moment (no user code runs under it).
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

/// A published version and its reference count.
struct EpochVersion {
    v: Version,
    /// References (I17): one for being published (the *epoch reference*, released by the
    /// collector after the version is replaced), one for the writer's bookkeeping, one per
    /// iterator holding it.
    refs: AtomicUsize,
}

/// Drops one reference to `v`; the last one frees the header (I17).
///
/// # Safety
/// The caller owns one of `v`'s references and gives it up.
unsafe fn release(v: NonNull<EpochVersion>) {
    // SAFETY: the caller's reference keeps the header alive until this decrement (I17).
    let refs = unsafe { &v.as_ref().refs };
    // AcqRel: Release so that this holder's reads of the version happen before the free;
    // Acquire so that the last holder's free happens after every other holder's reads.
    if refs.fetch_sub(1, Ordering::AcqRel) == 1 {
        // SAFETY: that was the last reference: no one else can reach the header (I17); it was
        // allocated by `Box` in `insert`/`retain`.
        drop(unsafe { Box::from_raw(v.as_ptr()) });
    }
}

/// [`release`] of a type-erased header, for [`Retired::Version`].
///
/// # Safety
/// As for [`release`]: `v` is an `EpochVersion` whose reference the caller gives up.
unsafe fn release_erased(v: NonNull<()>) {
    // SAFETY: the caller's contract: an `EpochVersion` header and one of its references (I17).
    unsafe { release(v.cast()) }
}

/// The writer's reference to a replaced version ([`ReplacedVersion`]).
struct VersionRef(NonNull<EpochVersion>);

// SAFETY: a counted reference to an immutable header (I3, I17); releasing it from any thread is
// what the count is for.
unsafe impl Send for VersionRef {}

impl VersionRef {
    /// The header, without giving up the reference (the caller now owns it).
    fn into_raw(self) -> NonNull<EpochVersion> {
        let p = self.0;
        core::mem::forget(self);
        p
    }
}

impl ReplacedVersion for VersionRef {
    const REUSED: bool = true;

    fn is_dead(&self) -> bool {
        // SAFETY: this reference keeps the header alive (I17).
        let refs = unsafe { &self.0.as_ref().refs };
        // Acquire: synchronizes with the collector's release of the epoch reference (after every
        // reader pinned at the unlinking unpinned) and with every iterator's release, so their
        // reads of the version's nodes happen before the writer frees them (I14).
        refs.load(Ordering::Acquire) == 1
    }
}

impl Drop for VersionRef {
    fn drop(&mut self) {
        // SAFETY: gives up the writer's reference, owned by `self` (I17).
        unsafe { release(self.0) };
    }
}

/// The published version (null while the map is empty) and the writer's bookkeeping.
#[doc(hidden)]
pub struct EpochMap {
    head: Atomic<EpochVersion>,
    reclaimer: Mutex<Reclaimer<VersionRef>>,
    /// Entries of the map: the published version's trie counts its own, not those filled in
    /// place since (I38). Written and read under `reclaimer` only (I16), so it agrees with the
    /// entries lookups see.
    len: AtomicUsize,
}

impl EpochMap {
    /// Unpublishes the current version and frees every replaced node; returns the published trie
    /// (its nodes are now the caller's).
    ///
    /// # Safety
    /// No reader or iterator of this map exists (I6).
    unsafe fn unpublish_all(&mut self) -> Option<Trie> {
        // SAFETY: exclusive access (I6): no version of this map can be read any more.
        unsafe { mutex_mut(&mut self.reclaimer).free_replaced() };
        // SAFETY: exclusive access (I6); `unprotected` is enough without concurrent readers.
        let head = unsafe {
            // Relaxed: `&mut self` was handed over with a happens-before edge already.
            let h = self.head.load(Ordering::Relaxed, epoch::unprotected());
            self.head.store(Shared::null(), Ordering::Relaxed);
            h
        };
        self.len.store(0, Ordering::Relaxed); // exclusive access (I6)
        let head = NonNull::new(head.as_raw().cast_mut())?;
        // SAFETY: the published header holds its epoch reference and the writer's (I17), both
        // ours under exclusive access, and no iterator exists (I6): freeing it frees it once.
        let v = unsafe { Box::from_raw(head.as_ptr()) };
        Some(v.v.trie)
    }

    /// The published version's header, read by the writer (the caller holds the reclaimer lock,
    /// as `_reclaimer` shows): alive while the mutex is held (I16, I17); `None` while nothing is
    /// published.
    fn published(&self, _reclaimer: &mut Reclaimer<VersionRef>) -> Option<NonNull<EpochVersion>> {
        // No pin: only writers replace `head`, under the reclaimer lock (I16), and a published
        // version keeps its epoch reference until it is replaced (I17), so the version loaded
        // here stays alive while the mutex is held. Relaxed would do (the mutex orders writers);
        // Acquire keeps the reasoning local: we read the nodes we copy.
        // SAFETY: `unprotected` is enough for a pointer the reclaimer lock keeps alive (I16, I17).
        let old = self
            .head
            .load(Ordering::Acquire, unsafe { epoch::unprotected() });
        NonNull::new(old.as_raw().cast_mut())
    }

    /// One write (I16): begins a [`Write`] on the published version, lets `f` change it, and
    /// publishes the result unless `f` returns `None` (then nothing was changed); the replaced
    /// version's epoch reference goes to the collector and the version itself to the writer's
    /// [`Reclaimer`].
    fn publish<R>(&self, f: impl FnOnce(&mut Write<'_, VersionRef>) -> Option<R>) -> Option<R> {
        let mut w = lock(&self.reclaimer);
        self.publish_locked(&mut w, f)
    }

    /// [`publish`](Self::publish) with the reclaimer lock held.
    fn publish_locked<R>(
        &self,
        w: &mut Reclaimer<VersionRef>,
        f: impl FnOnce(&mut Write<'_, VersionRef>) -> Option<R>,
    ) -> Option<R> {
        let old = self.published(w);
        // SAFETY: alive while the mutex is held (I16, I17).
        let (mut base, seq) = old.map_or((Trie::EMPTY, 0), |o| unsafe {
            (o.as_ref().v.trie, o.as_ref().v.seq)
        });
        // the fills since the version was published are in its nodes, not in its count (I38)
        base.set_len(self.len.load(Ordering::Relaxed));
        // SAFETY: the reclaimer lock makes this the only writer (I16); the current version's nodes
        // are alive (I13) and every published node is born at `seq` or earlier (I12).
        let mut write = unsafe { w.write(base, seq) };
        let r = f(&mut write)?;
        // Relaxed: a count, read for `len` only; the reclaimer lock orders the writers' accesses.
        self.len.store(write.trie().len(), Ordering::Relaxed);
        let header = EpochVersion {
            v: Version::new(write.trie(), write.seq()),
            refs: AtomicUsize::new(2), // published + the writer's (I17)
        };
        let new = match write.reuse_version() {
            Some(dead) => {
                let p = dead.into_raw().as_ptr();
                // SAFETY: `dead` was seen dead (I14): it held the version's last reference
                // (I17), which we now own, so no reader, iterator or deferred closure can reach
                // the header — reusing it is freeing it and allocating it again, without the
                // allocator:
                // - the old header is dropped in place once (its reference dies with it);
                // - the new one is written over it before anything can see it: it is published
                //   below, with Release (I2).
                unsafe {
                    p.drop_in_place();
                    p.write(header);
                }
                p
            }
            None => Box::into_raw(Box::new(header)),
        };
        // Release: publishes the new header, its nodes and the instances they point to (I2).
        self.head
            .store(Shared::from(new.cast_const()), Ordering::Release);
        // From the raw pointer: the header is freed through it (I17).
        if let Some(old) = old {
            // gives up the epoch reference, run by the collector
            let header = old.cast();
            let retired = Retired::Version {
                release: release_erased,
                header,
            };
            // SAFETY: `old` is unlinked: `head` no longer points to it and nothing can re-publish
            // it, so only threads pinned now can hold it; the collector runs `retired` after
            // they all unpinned (I14, I37). `retired` owns the epoch reference and gives it up
            // (I17); it touches only the header, which that reference keeps alive, and runs no
            // user code, so running it inside any pin or flush of our collector is harmless (I18).
            // Through the retiring participant, not this thread's: a thread that only writes
            // registers no participant and strands nothing in a bag of its own (I37).
            unsafe { collector::retire(retired, Flush::Batched) };
        }
        // SAFETY: version `seq + 1` is published in place of `seq`; `VersionRef` is the writer's
        // reference and tells when it is dead (I14).
        unsafe { write.retire(old.map(VersionRef)) };
        Some(r)
    }
}

impl Drop for EpochMap {
    fn drop(&mut self) {
        // SAFETY: `&mut self` — no reader or iterator exists (I6); the published trie's nodes
        // are then reachable from no other live version (`unpublish_all` freed the replaced
        // ones, I13).
        unsafe {
            if let Some(trie) = self.unpublish_all() {
                trie.free_nodes();
            }
        }
    }
}

/// Iterates one version, kept alive by the count it holds (not by a pin).
#[doc(hidden)]
pub struct EpochIter<'a> {
    version: Option<NonNull<EpochVersion>>,
    cursor: Cursor,
    _map: PhantomData<&'a EpochMap>,
}

// SAFETY: an `EpochIter` holds a counted reference to a frozen version (I3, I15, I17, I38): its
// nodes change no more (no fill or hang lands in a frozen version's nodes) and their slots are read
// with atomic loads, so reading them is sound from any thread, and giving the count
// up is an atomic decrement (and, for the last holder, a free) that any thread may make. What it
// yields are `Erased` pointers (`Send + Sync`, I7).
unsafe impl Send for EpochIter<'_> {}
// SAFETY: as for `Send`; `&EpochIter` allows no access at all (I15).
unsafe impl Sync for EpochIter<'_> {}

impl Iterator for EpochIter<'_> {
    type Item = (u64, Erased);

    #[inline]
    fn next(&mut self) -> Option<(u64, Erased)> {
        let version = self.version?;
        // SAFETY: the iterator holds a reference to this version (I15), so the header is alive
        // (I17) and the version is not dead, so its nodes are alive (I13, I14); the cursor was
        // only used with this version (I15).
        unsafe { version.as_ref().v.next_entry(&mut self.cursor) }
    }
}

impl Drop for EpochIter<'_> {
    fn drop(&mut self) {
        if let Some(v) = self.version {
            // SAFETY: gives up the reference `iter` took (I15, I17).
            unsafe { release(v) };
        }
    }
}

impl Backend for Epoch {
    const NAME: &'static str = "epoch";
    const CACHES_DELEGATED: bool = true;
    const LOOKUP_PINS: bool = true;
    type Map = EpochMap;
    type Iter<'a> = EpochIter<'a>;

    #[cfg(not(ranklocal_loom))]
    #[allow(clippy::declare_interior_mutable_const)] // a fresh map per use is the point
    const EMPTY: EpochMap = EpochMap {
        head: Atomic::null(),
        reclaimer: Mutex::new(Reclaimer::NEW),
        len: AtomicUsize::new(0),
    };

    #[cfg(ranklocal_loom)]
    fn empty() -> EpochMap {
        EpochMap {
            head: Atomic::null(),
            reclaimer: Mutex::new(Reclaimer::NEW),
            len: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn get(map: &EpochMap, rank: u64) -> Option<Erased> {
        Self::get_with(map, rank, |p| p)
    }

    #[inline]
    fn get_with<R>(map: &EpochMap, rank: u64, f: impl FnOnce(Erased) -> R) -> Option<R> {
        let guard = pin();
        // Acquire: pairs with the writer's Release store, so the version, its nodes and the
        // instances they point to (initialized before publication, I2) are visible.
        let v = map.head.load(Ordering::Acquire, &guard);
        // SAFETY: loaded under `guard`: the epoch reference is released only after this pin
        // ends (I14), so the header is alive (I17) and the version not dead, so its nodes are
        // alive (I13); published versions are immutable but for fills of empty slots (an
        // instance, or a hung leaf), which the slot loads see whole (I3, I12, I38).
        let p = unsafe { v.as_ref()?.v.get(rank) }?;
        // still pinned: the crate's collector is the sweeper's too (I18, I33)
        let r = f(p);
        drop(guard);
        Some(r)
    }

    #[inline]
    unsafe fn get_pinned(map: &EpochMap, rank: u64, guard: &epoch::Guard) -> Option<Erased> {
        // Acquire: as in `get_with`.
        let v = map.head.load(Ordering::Acquire, guard);
        // SAFETY: loaded under `guard`, a pin of the crate's collector (the caller's contract),
        // through which the writer retires the epoch reference (I18): as in `get_with`, the
        // header is alive (I17), its version not dead and so its nodes alive (I13), and slot
        // loads see fills whole (I3, I12, I38).
        unsafe { v.as_ref()?.v.get(rank) }
    }

    unsafe fn get_by_writer(map: &EpochMap, rank: u64) -> Option<Erased> {
        // SAFETY: the caller excludes every write (I16), and a published version keeps its epoch
        // reference until a write replaces it (I17), so `unprotected` is enough; its nodes are
        // alive (I13), and only the writer — the caller — fills their slots (I3, I38).
        unsafe {
            let v = map.head.load(Ordering::Acquire, epoch::unprotected());
            v.as_ref()?.v.get(rank)
        }
    }

    fn insert(map: &EpochMap, rank: u64, ptr: Erased) {
        let mut w = lock(&map.reclaimer);
        if let Some(v) = map.published(&mut w) {
            // SAFETY: the reclaimer lock makes this the only writer (I16); the published version's
            // header and nodes are alive while it is held (I13, I17); the caller initialized the
            // instance (I2).
            if unsafe { w.fill(&v.as_ref().v.trie, rank, ptr) } {
                // Relaxed: as in `publish_locked`.
                let len = map.len.load(Ordering::Relaxed);
                map.len.store(len + 1, Ordering::Relaxed);
                return;
            }
        }
        map.publish_locked(&mut w, |w| {
            let prev = w.insert(rank, ptr);
            debug_assert!(prev.is_none(), "rank inserted twice");
            Some(())
        });
    }

    fn remove(map: &EpochMap, ranks: &[u64]) -> usize {
        map.publish(|w| {
            let n = ranks.iter().filter(|&&r| w.remove(r).is_some()).count();
            (n > 0).then_some(n)
        })
        .unwrap_or(0)
    }

    fn len(map: &EpochMap) -> usize {
        // Under the reclaimer lock: the count and the entries are written in one critical section
        // (a fill or a publication), so a lookup after `len` sees every entry it counts, and a
        // `len` after a lookup counts what the lookup found (the mutex orders the reader after
        // the write it observed). A lock-free read of the counter would give neither: it is a
        // second location, not part of the published version (found in review).
        let _w = lock(&map.reclaimer);
        // Relaxed: written under the same mutex.
        map.len.load(Ordering::Relaxed)
    }

    fn iter(map: &EpochMap) -> EpochIter<'_> {
        // Under the reclaimer lock, for as long as one load and one increment take: no write can
        // publish or fill meanwhile (I16), so the version taken is frozen before any later write
        // (I38) and stays a snapshot. No user code runs while the mutex is held.
        let mut w = lock(&map.reclaimer);
        let version = map.published(&mut w);
        if let Some(v) = version {
            // SAFETY: alive while the reclaimer lock is held (I16, I17).
            let v = unsafe { v.as_ref() };
            w.freeze(v.v.seq);
            // Relaxed, as `Arc::clone`: the epoch reference keeps the count above zero, and the
            // writer reads the count (`is_dead`) only under the mutex, after this (I15, I16).
            let before = v.refs.fetch_add(1, Ordering::Relaxed);
            // As `Arc`: a count that could wrap (2^63 leaked iterators on 64-bit, 2^31 on
            // 32-bit) would free a header in use; abort long before that.
            if before > isize::MAX as usize {
                std::process::abort();
            }
        }
        drop(w); // the iterator holds its version by count (I15)
        EpochIter {
            version,
            cursor: Cursor::START,
            _map: PhantomData,
        }
    }

    fn retain(map: &mut EpochMap, keep: &mut dyn FnMut(u64) -> bool) -> Vec<(u64, Erased)> {
        // Relaxed: exclusive access, ordered by whatever gave us `&mut`.
        // SAFETY: `&mut` — no reader exists (I6), so `unprotected` will do, and the published
        // version is alive.
        let seq = unsafe {
            map.head
                .load(Ordering::Relaxed, epoch::unprotected())
                .as_ref()
        }
        .map(|v| v.v.seq);
        let Some(seq) = seq else {
            return Vec::new();
        };
        // SAFETY: `&mut` — no reader or iterator exists (I6); the published trie's nodes are then
        // alive and shared by no other live version: `unpublish_all` freed the replaced ones and
        // the header (I13).
        let Some((trie, removed)) =
            (unsafe { map.unpublish_all().map(|old| old.rebuild(seq + 1, keep)) })
        else {
            return Vec::new();
        };
        if let Some(trie) = trie {
            let new = Box::into_raw(Box::new(EpochVersion {
                v: Version::new(trie, seq + 1),
                refs: AtomicUsize::new(2), // published + the writer's (I17)
            }));
            // Relaxed: exclusive access; whatever ends `&mut` orders it for later readers.
            map.head
                .store(Shared::from(new.cast_const()), Ordering::Relaxed);
            map.len.store(trie.len(), Ordering::Relaxed);
        }
        removed
    }
}
