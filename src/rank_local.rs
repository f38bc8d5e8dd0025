//! [`RankLocal`]: one `T` per rank, on a pluggable map [`Backend`].
//!
//! # How a lookup works
//! 1. **Thread cache** ([`crate::cache`]): the thread's current rank (its own, or the one it acts
//!    for inside [`on_behalf_of`](crate::on_behalf_of)) and the `RankLocal`'s uid index a small
//!    thread-local table. A hit returns at once: no pin, no lock, no shared write.
//! 2. **Map** (cold): the backend's lookup (`Epoch`: pin, load the snapshot, descend its trie). A hit fills
//!    the thread cache.
//! 3. **First touch** (cold): the init protocol below, then publish a new snapshot.
//!
//! # Init protocol (spec semantic 4)
//! Writers (first touches) serialize on a small mutex that readers never touch. Under it a writer
//! re-checks the map, and *claims* the rank by recording `(rank, thread)` in a pending list; then
//! it drops the mutex and runs `init` with no lock held, so a slow `init` delays no reader and no
//! writer of another rank. A second thread wanting the same rank waits on a condvar for the claim
//! to end (init runs at most once); the *same* thread wanting it again is a reentrant `init`, and
//! panics with a clear message instead of deadlocking. When `init` returns, the writer re-takes
//! the mutex, publishes, and ends the claim; if `init` panics or errs, a drop guard ends the claim
//! and nothing is inserted, so the next call tries again.
//!
//! # Invariants
//! The `// SAFETY:` comments of the crate cite these.
//! - **I1 (stable instances)** Every instance is its own `Box<T>` allocation, made by the
//!   `RankLocal` and freed only through `&mut RankLocal` or by value (`clear`, `purge_exited`,
//!   `into_iter`, drop). While a `&RankLocal` lives, every pointer ever published in its map stays
//!   valid and no `&mut T` to it exists.
//! - **I2 (publication)** An instance is fully built before its pointer is published; `Epoch`
//!   publishes with a Release store, `ArcSwap` with a SeqCst swap, `Baseline` under the write lock;
//!   readers Acquire (load or read lock) before they dereference.
//! - **I3 (snapshots)** A published version — its header and every trie node reachable from it — is
//!   never mutated. Only the (serialized) writer that replaces a version retires it, exactly once;
//!   how its header and nodes are freed is I12–I17.
//! - **I4 (cache keys)** A thread-cache entry `(uid, rank, ptr)` holds a pointer read from the map
//!   of the `RankLocal` whose uid is `uid`. Uids are unique in the process and never reused, and a
//!   `RankLocal` takes a fresh uid whenever it removes an instance. So a hit for `(self.uid, rank)`
//!   is a pointer that I1 keeps valid for the `&self` borrow.
//! - **I5 (erased types)** Every pointer in the map of a `RankLocal<T, B>` points to a `T` that
//!   this `RankLocal` allocated as a `Box<T>`.
//! - **I6 (exclusive access)** `&mut RankLocal` excludes every reader, iterator and in-flight init
//!   of that `RankLocal` (they all borrow it), so instances and snapshots may be freed at once.
//! - **I7 (thread safety)** `RankLocal<T, B>` is `Send` only if `T: Send` and `Sync` only if
//!   `T: Send + Sync`: instances are built on one thread, shared by reference across threads, and
//!   dropped on whichever thread drops the `RankLocal`.
//! - **I8 (static slots)** A [`rank_local!`](crate::rank_local) slot caches a pointer into its own
//!   `static RankLocal`, which is never dropped nor mutably borrowed, so by I1 it is valid for
//!   `'static`; it is only filled and read while the thread acts as its own rank.
//! - **I12 (path copying)** Every trie node records the sequence number of the first version that
//!   contained it (its *birth*). A write building version `s` mutates in place only nodes born at
//!   `s` — nodes it created, which nobody else can see before it publishes — and copies every older
//!   node on its path, recording the original as *replaced at `s`*. So a node born at `b` and
//!   replaced at `d` is reachable from versions `b..d` only, and each node is replaced at most
//!   once.
//! - **I13 (freeing nodes)** A node is freed only by the writer, once every version in `b..d` is
//!   dead (I14), or under exclusive access (I6). While a version is not dead, every node reachable
//!   from it is alive.
//! - **I14 (dead versions)** A replaced version is *dead* once no reader can be inside it and no
//!   iterator holds it. On `Epoch` its header count is down to the writer's own reference: the
//!   epoch reference is given up by a closure that the collector runs only after every thread
//!   pinned at the unlinking has unpinned. On `ArcSwap` the writer's `Arc` is the last one after
//!   the swap (arc-swap turns readers' debts into counts in the swap). Nothing can load a replaced
//!   version, so a dead version stays dead; the writer observes it with Acquire, after every
//!   holder's Release.
//! - **I15 (iterators)** An iterator takes a count on its version while the version is still
//!   protected — under a pin, before unpinning (`Epoch`), or by `load_full` (`ArcSwap`) — holds it
//!   until dropped, and reads only that version's nodes. It holds no pin, so it keeps its own
//!   version alive and nothing else.
//! - **I16 (one writer)** Every write to a map — publishing a version and the bookkeeping of
//!   replaced versions and nodes — happens under the map's writer mutex (the `RankLocal`'s claims
//!   mutex already serializes them) or under exclusive access, so each published version's sequence
//!   number is its predecessor's plus one and the writer knows exactly which nodes each write
//!   replaced.
//! - **I17 (header counts)** An `Epoch` version header counts its references: one while published
//!   (the epoch reference, handed to the collector when the version is replaced), one for the
//!   writer's bookkeeping, one per iterator. Whoever gives up the last one frees the header; a
//!   holder reads the header only while it holds a reference.

use core::fmt;
use core::marker::PhantomData;

use crate::backend::{Backend, Epoch};
use crate::cache;
use crate::identity::{self, RankId};
use crate::primitive::{global, lock, AtomicU64, Condvar, Mutex, Ordering};
use crate::snapshot::Erased;

global! {
    /// The next `RankLocal` uid (I4); 0 means "none assigned yet".
    static NEXT_UID: AtomicU64 = AtomicU64::new(1);
}

/// A rank whose `init` is running, and the OS thread (its own rank id) running it.
struct Claim {
    rank: u64,
    thread: u64,
}

/// One `T` per rank — per logical thread — created on first use; a thread acting
/// [`on_behalf_of`](crate::on_behalf_of) a rank sees that rank's instance.
///
/// This is PyTorch c10d's `RankLocal<T>` with a lock-free read path: the owner thread and
/// delegates hit a thread-local cache; a miss reads an immutable snapshot of the rank map
/// published by the backend `B` ([`Epoch`] by default).
///
/// ```
/// use ranklocal::{on_behalf_of, RankId, RankLocal};
/// use std::sync::Mutex;
///
/// static WORKS: RankLocal<Mutex<Vec<&'static str>>> = RankLocal::new();
///
/// WORKS.get().lock().unwrap().push("forward");
/// let me = RankId::current();
/// std::thread::spawn(move || {
///     on_behalf_of(me, || WORKS.get().lock().unwrap().push("backward"));
///     assert!(WORKS.get().lock().unwrap().is_empty()); // its own rank's instance
/// })
/// .join()
/// .unwrap();
/// assert_eq!(*WORKS.get().lock().unwrap(), ["forward", "backward"]);
/// ```
pub struct RankLocal<T, B: Backend = Epoch> {
    /// rank → instance (I1, I5).
    map: B::Map,
    /// The thread-cache key (I4); 0 until first used, reset to 0 when an instance is removed.
    uid: AtomicU64,
    /// Ranks whose `init` is running; also serializes the backend's `insert`s.
    claims: Mutex<Vec<Claim>>,
    /// Signalled whenever a claim ends.
    claim_ended: Condvar,
    /// Owns `T`s (drop check; `Send` only if `T: Send`, I7).
    _owns: PhantomData<T>,
}

// SAFETY: `&RankLocal` hands out `&T` to any thread and lets any thread create an instance that
// another thread later drops, hence `T: Send + Sync` (I7). The other fields are `Sync`.
unsafe impl<T: Send + Sync, B: Backend> Sync for RankLocal<T, B> {}

/// Builds an empty `RankLocal`; `const` except under loom, whose primitives are not.
macro_rules! empty_rank_local {
    ($map:expr) => {
        RankLocal {
            map: $map,
            uid: AtomicU64::new(0),
            claims: Mutex::new(Vec::new()),
            claim_ended: Condvar::new(),
            _owns: PhantomData,
        }
    };
}

impl<T: Send + Sync, B: Backend> RankLocal<T, B> {
    /// An empty `RankLocal`, usable in a `static`.
    #[cfg(not(loom))]
    #[must_use]
    pub const fn new() -> Self {
        empty_rank_local!(B::EMPTY)
    }

    /// An empty `RankLocal` (not `const` under loom).
    #[cfg(loom)]
    #[must_use]
    pub fn new() -> Self {
        empty_rank_local!(B::empty())
    }

    /// The current rank's instance, created with `T::default()` on first use.
    ///
    /// The current rank is [`RankId::current`]: the thread's own, or the one it acts for inside
    /// [`on_behalf_of`](crate::on_behalf_of).
    ///
    /// # Panics
    /// If called for a rank from inside that rank's own `init` on this `RankLocal` (reentrant
    /// initialization), or if `T::default()` panics.
    #[inline]
    pub fn get(&self) -> &T
    where
        T: Default,
    {
        self.get_or(T::default)
    }

    /// The current rank's instance, created with `init` on first use.
    ///
    /// `init` runs at most once per rank, with no lock held; other ranks' readers and writers
    /// proceed meanwhile, and another thread asking for the same rank waits for it. If `init`
    /// panics, nothing is inserted and the next call tries again.
    ///
    /// # Panics
    /// If called for a rank from inside that rank's own `init` on this `RankLocal`, or if `init`
    /// panics.
    #[inline]
    pub fn get_or(&self, init: impl FnOnce() -> T) -> &T {
        match self.get_or_try(|| Ok::<T, core::convert::Infallible>(init())) {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// The current rank's instance, created with `init` on first use; if `init` fails, nothing is
    /// inserted and its error is returned (the next call tries again).
    ///
    /// # Panics
    /// As [`get_or`](Self::get_or).
    #[inline]
    pub fn get_or_try<E>(&self, init: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        // 0 if the thread has no id yet: the cache then misses and the slow path assigns one.
        let rank = identity::current_raw_or_zero();
        if let Some(v) = self.cached(rank) {
            return Ok(v);
        }
        self.get_or_try_slow(rank, init)
    }

    /// The current rank's instance if it exists; never creates one.
    #[inline]
    pub fn try_get(&self) -> Option<&T> {
        self.get_for(RankId::current())
    }

    /// `rank`'s instance if it exists; never creates one. Works for any rank, including one
    /// whose thread has exited (until [`purge_exited`](Self::purge_exited)).
    #[inline]
    pub fn get_for(&self, rank: RankId) -> Option<&T> {
        let rank = rank.as_u64();
        self.cached(rank).or_else(|| self.lookup_slow(rank))
    }

    /// Number of ranks with an instance.
    pub fn len(&self) -> usize {
        B::len(&self.map)
    }

    /// `true` if no rank has an instance.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every `(rank, instance)`, from one consistent snapshot taken when called (ranks inserted
    /// later are not seen). Order is unspecified (ascending rank on `Epoch` and `ArcSwap`). The
    /// iterator keeps its own snapshot alive by a count, not by an epoch pin, so a long-lived
    /// iterator does not stop reclamation elsewhere in the process.
    pub fn iter(&self) -> Iter<'_, T, B> {
        Iter {
            inner: B::iter(&self.map),
            _rl: PhantomData,
        }
    }

    /// Every `(rank, &mut instance)`.
    pub fn iter_mut(&mut self) -> IterMut<'_, T, B> {
        IterMut {
            inner: B::iter(&self.map),
            _rl: PhantomData,
        }
    }

    /// Drops every instance.
    pub fn clear(&mut self) {
        self.remove_where(&mut |_| false);
    }

    /// Drops the instances of ranks whose thread has exited, returning how many.
    ///
    /// A thread counts as exited once its thread-local destructors have started; threads whose
    /// destructors never run (the main thread at process exit) never count as exited.
    pub fn purge_exited(&mut self) -> usize {
        // Collect the live set first: dropping instances may touch rank ids (and its lock).
        let live = identity::with_live(|live| live.clone());
        self.remove_where(&mut |rank| live.contains(&rank))
    }

    /// Removes (and drops) the instances `keep` rejects; returns how many.
    fn remove_where(&mut self, keep: &mut dyn FnMut(u64) -> bool) -> usize {
        let removed = B::retain(&mut self.map, keep);
        if !removed.is_empty() {
            // Relaxed: `&mut self`, ordered by whatever handed it to us. A fresh uid is drawn
            // on next use, so no thread cache can hit a removed instance (I4).
            self.uid.store(0, Ordering::Relaxed);
        }
        let n = removed.len();
        for (_, p) in removed {
            // SAFETY: `p` came out of this map (I5), is no longer in it, and `&mut self`
            // excludes every other user (I6); the uid reset makes cached copies dead (I4).
            drop(unsafe { Box::from_raw(p.as_ptr::<T>().as_ptr()) });
        }
        n
    }

    /// Whether lookups of `rank` go through the thread cache on this backend.
    #[inline]
    fn cacheable(rank: u64) -> bool {
        B::CACHES_DELEGATED || rank == identity::own_raw()
    }

    /// The thread cache's entry for `rank` (step 1).
    #[inline]
    fn cached(&self, rank: u64) -> Option<&T> {
        if !Self::cacheable(rank) {
            return None;
        }
        // Relaxed: the uid is only a name; the pointer's validity was established by this
        // thread's own Acquire when it filled the entry (I4).
        let uid = self.uid.load(Ordering::Relaxed);
        let p = cache::lookup(uid, rank)?;
        // SAFETY: a hit for this `RankLocal`'s current uid is one of its published instances
        // (I4, I5), valid for the `&self` borrow and never mutably aliased (I1).
        Some(unsafe { p.cast::<T>().as_ref() })
    }

    /// This `RankLocal`'s uid, drawing a fresh one if it has none (I4).
    fn uid(&self) -> u64 {
        // Relaxed everywhere: uids carry no data, they only have to be unique.
        let uid = self.uid.load(Ordering::Relaxed);
        if uid != 0 {
            return uid;
        }
        // Multiplying by an odd constant is a bijection on u64, so uids stay unique and non-zero
        // while their top bits are well mixed (the thread cache indexes with them, I4).
        let fresh = crate::snapshot::mix(NEXT_UID.fetch_add(1, Ordering::Relaxed));
        match self
            .uid
            .compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => fresh,
            Err(current) => current,
        }
    }

    /// Looks `rank` up in the map and fills the thread cache on a hit (step 2).
    #[cold]
    fn lookup_slow(&self, rank: u64) -> Option<&T> {
        let p = B::get(&self.map, rank)?;
        if Self::cacheable(rank) {
            cache::store(self.uid(), rank, p);
        }
        // SAFETY: `p` is a published instance of this map (I2, I5), valid while `&self` lives
        // (I1).
        Some(unsafe { p.as_ptr::<T>().as_ref() })
    }

    #[cold]
    fn get_or_try_slow<E>(&self, rank: u64, init: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        let rank = if rank == 0 {
            identity::current_raw()
        } else {
            rank
        };
        if let Some(v) = self.lookup_slow(rank) {
            return Ok(v);
        }
        let p = self.insert(rank, init)?;
        if Self::cacheable(rank) {
            cache::store(self.uid(), rank, p);
        }
        // SAFETY: `p` was just published in this map (I2, I5); valid while `&self` lives (I1).
        Ok(unsafe { p.as_ptr::<T>().as_ref() })
    }

    /// First touch of `rank` (step 3): the init protocol in the module docs.
    fn insert<E>(&self, rank: u64, init: impl FnOnce() -> Result<T, E>) -> Result<Erased, E> {
        let me = identity::own_raw();
        let mut claims = lock(&self.claims);
        loop {
            if let Some(p) = B::get(&self.map, rank) {
                return Ok(p); // published by another thread meanwhile
            }
            match claims.iter().find(|c| c.rank == rank) {
                None => break,
                Some(c) if c.thread == me => {
                    drop(claims);
                    panic!(
                        "ranklocal: reentrant initialization: the init of {} on this RankLocal \
                         asked for the same rank's instance (get/get_or from inside its own init)",
                        RankId::from_raw(rank)
                    );
                }
                Some(_) => {
                    claims = self
                        .claim_ended
                        .wait(claims)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
        }
        claims.push(Claim { rank, thread: me });
        drop(claims);

        let claim = ClaimGuard { rl: self, rank };
        let value = init()?; // on panic or error, `claim` ends the claim; nothing is inserted
        let p = Erased::new(Box::new(value));
        {
            let _writers = lock(&self.claims);
            B::insert(&self.map, rank, p);
        }
        drop(claim);
        Ok(p)
    }
}

/// Ends a claim when dropped (normal return, error or unwind) and wakes waiters.
struct ClaimGuard<'a, T: Send + Sync, B: Backend> {
    rl: &'a RankLocal<T, B>,
    rank: u64,
}

impl<T: Send + Sync, B: Backend> Drop for ClaimGuard<'_, T, B> {
    fn drop(&mut self) {
        lock(&self.rl.claims).retain(|c| c.rank != self.rank);
        self.rl.claim_ended.notify_all();
    }
}

impl<T, B: Backend> Drop for RankLocal<T, B> {
    fn drop(&mut self) {
        for (_, p) in B::retain(&mut self.map, &mut |_| false) {
            // SAFETY: dropping the `RankLocal` — no other user exists (I6); each pointer is a
            // `Box<T>` of this map (I5), removed from it, freed once. The uid dies with `self`
            // and is never reused, so cached copies are dead (I4).
            drop(unsafe { Box::from_raw(p.as_ptr::<T>().as_ptr()) });
        }
    }
}

impl<T: Send + Sync, B: Backend> Default for RankLocal<T, B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + Sync + fmt::Debug, B: Backend> fmt::Debug for RankLocal<T, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Entries<'a, T: Send + Sync, B: Backend>(&'a RankLocal<T, B>);
        impl<T: Send + Sync + fmt::Debug, B: Backend> fmt::Debug for Entries<'_, T, B> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut entries: Vec<_> = self.0.iter().collect();
                entries.sort_by_key(|&(r, _)| r);
                f.debug_map().entries(entries).finish()
            }
        }
        f.debug_struct("RankLocal")
            .field("backend", &B::NAME)
            .field("instances", &Entries(self))
            .finish()
    }
}

/// Iterator over `(rank, &instance)` from one snapshot; see [`RankLocal::iter`].
pub struct Iter<'a, T, B: Backend> {
    inner: B::Iter<'a>,
    _rl: PhantomData<&'a RankLocal<T, B>>,
}

impl<'a, T: 'a, B: Backend> Iterator for Iter<'a, T, B> {
    type Item = (RankId, &'a T);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (rank, p) = self.inner.next()?;
        // SAFETY: an instance of the borrowed `RankLocal` (I5), valid while it is borrowed (I1).
        Some((RankId::from_raw(rank), unsafe { p.as_ptr::<T>().as_ref() }))
    }
}

/// Iterator over `(rank, &mut instance)`; see [`RankLocal::iter_mut`].
pub struct IterMut<'a, T, B: Backend> {
    inner: B::Iter<'a>,
    _rl: PhantomData<&'a mut RankLocal<T, B>>,
}

impl<'a, T: 'a, B: Backend> Iterator for IterMut<'a, T, B> {
    type Item = (RankId, &'a mut T);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (rank, p) = self.inner.next()?;
        // SAFETY: the `RankLocal` is mutably borrowed for 'a (I6), each rank has its own
        // allocation (I1, I5) and the snapshot yields each rank once, so the `&mut T`s are
        // disjoint and unaliased.
        Some((RankId::from_raw(rank), unsafe { p.as_ptr::<T>().as_mut() }))
    }
}

impl<'a, T: Send + Sync, B: Backend> IntoIterator for &'a RankLocal<T, B> {
    type Item = (RankId, &'a T);
    type IntoIter = Iter<'a, T, B>;
    fn into_iter(self) -> Iter<'a, T, B> {
        self.iter()
    }
}

impl<'a, T: Send + Sync, B: Backend> IntoIterator for &'a mut RankLocal<T, B> {
    type Item = (RankId, &'a mut T);
    type IntoIter = IterMut<'a, T, B>;
    fn into_iter(self) -> IterMut<'a, T, B> {
        self.iter_mut()
    }
}

impl<T: Send + Sync, B: Backend> IntoIterator for RankLocal<T, B> {
    type Item = (RankId, T);
    type IntoIter = std::vec::IntoIter<(RankId, T)>;

    /// Takes every instance out, in unspecified order.
    fn into_iter(mut self) -> Self::IntoIter {
        let entries = B::retain(&mut self.map, &mut |_| false);
        let owned: Vec<(RankId, T)> = entries
            .into_iter()
            .map(|(rank, p)| {
                // SAFETY: owned `self` (I6); a `Box<T>` of this map (I5), removed, moved out once.
                let b = unsafe { Box::from_raw(p.as_ptr::<T>().as_ptr()) };
                (RankId::from_raw(rank), *b)
            })
            .collect();
        owned.into_iter()
    }
}
