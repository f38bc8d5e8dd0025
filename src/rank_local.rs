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
//! - **I1 (stable instances)** Every instance is its own `Box<Inst<T>>` allocation (the `T`
//!   first, then its state, I30), made by the `RankLocal` and freed only through `&mut RankLocal`
//!   or by value (`clear`, `purge_exited`, `into_iter`, drop) — or, if it never escaped, by the
//!   reclamation protocol I30–I35. While a `&RankLocal` lives, every escaped pointer ever
//!   published in its map stays valid and no `&mut T` to it exists.
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
//! - **I5 (erased types)** Every pointer in the map of a `RankLocal<T, B>` points to an `Inst<T>`
//!   that this `RankLocal` allocated as a `Box<Inst<T>>`; `Inst` is `repr(C)` with the `T` first,
//!   so the pointer cast to `*const T` addresses the value.
//! - **I6 (exclusive access)** `&mut RankLocal` excludes every reader, iterator and in-flight init
//!   of that `RankLocal` (they all borrow it), so instances and snapshots may be freed at once.
//! - **I7 (thread safety)** `RankLocal<T, B>` is `Send` only if `T: Send` and `Sync` only if
//!   `T: Send + Sync`: instances are built on one thread, shared by reference across threads, and
//!   dropped on whichever thread drops the `RankLocal`.
//! - **I8 (static slots)** A [`rank_local!`](crate::rank_local) slot caches a pointer into its own
//!   `static RankLocal`, which is never dropped nor mutably borrowed, so by I1 it is valid for
//!   `'static`; it is only filled and read while the thread acts as its own rank. A slot and its
//!   `static RankLocal` are declared by one `rank_local!` expansion, for that key alone, and only
//!   that expansion calls the `unsafe` constructor `RankLocalKey::__new` with them.
//! - **I9 (variance)** `RankLocal<T, B>` and `RankLocalKey<T>` are *invariant* in `T` (they hand
//!   out `&T` and insert `T` through `&self`, like `Cell<T>`), and so is `IterMut`; so no safe
//!   coercion can insert a value under a shorter lifetime than the one it is later read at. `Iter`
//!   is covariant (it only reads existing instances, like `slice::Iter`), `OnBehalfOf<F>` is
//!   covariant in `F` (it owns one `F`, like `Box<F>`).
//! - **I10 (drops keep going)** Freeing removed instances (`clear`, `purge_exited`, drop) frees
//!   each exactly once even if a `T::drop` panics: the rest are freed during the unwind, then the
//!   panic propagates. `into_iter` moves instances out without dropping them.
//! - **I11 (the delegated future)** `OnBehalfOf`'s inner future sits in a `ManuallyDrop` that is
//!   structurally pinned: it is polled only through `Pin<&mut OnBehalfOf>`, dropped in place
//!   exactly once by `OnBehalfOf`'s drop (inside `on_behalf_of(rank)`), or moved out exactly once
//!   by `into_inner`, which owns the unpinned wrapper and forgets it without running its drop.
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
//! - **I18 (the crate's collector)** Every pin of the `Epoch` backend is of the crate's own
//!   crossbeam-epoch `Collector`, never of crossbeam's process-wide default one (and so is every
//!   pin of scoped readers and sweeps, I32, I33), and the only closures deferred to it release
//!   version headers (I17) or set a retired batch's token (I32): they run no user code. So a pin or a
//!   flush made while the writer holds the claims or writer mutex never runs user code that
//!   could re-enter the `RankLocal` and deadlock.
//! - **I23 (thread-cache cells)** Each thread's cache ([`crate::cache`]) is a `const`-initialized
//!   thread-local array of `Cell`s holding plain `Copy` entries, with no destructor. Only its own
//!   thread reads or writes it, and no reference into an entry outlives the cache function that
//!   took it, so reading an entry's field through the cell's raw pointer is `Cell::get`, and the
//!   cache stays usable while the thread exits.
//! - **I30 (instance states)** Every instance carries a state: SCOPED (no plain `&T` handed out yet),
//!   ESCAPED, or RECLAIMING. It only moves SCOPED → ESCAPED (a reader, while the instance is
//!   protected by I33 or the claims mutex) or SCOPED → RECLAIMING (the sweeper only, under the claims
//!   mutex, for a rank absent from the live set); both are compare-exchanges from SCOPED on one
//!   atomic, so exactly one wins, and ESCAPED and RECLAIMING are final. The sweeper unpublishes a
//!   RECLAIMING instance in the same claims critical section, so under the claims mutex every
//!   instance in the map is SCOPED or ESCAPED.
//! - **I31 (escaped instances are kept)** Every plain `&T` (`get`, `get_or`, `get_or_try`,
//!   `try_get`, `get_for`, `iter`, a key's slot) and every untagged thread-cache entry is of an
//!   ESCAPED instance, marked before it is handed out or cached. An ESCAPED instance is freed only
//!   through `&mut` or by value, as I1 says. `iter` marks the whole map under the claims mutex,
//!   skipping the walk while `all_escaped` is set: it is accessed only under that mutex, cleared
//!   by every SCOPED insert before it publishes and set after a marking walk, and states never
//!   return to SCOPED, so while it is set every instance in the map is ESCAPED.
//! - **I32 (retirement)** A RECLAIMING instance is freed only (a) after the sweeper, having
//!   unpublished it, stored a fresh uid (SeqCst) and then deferred to crossbeam-epoch a closure that
//!   sets its batch's `done` token (Release) — the collector runs it only after every thread pinned
//!   at the deferral has unpinned — and a later sweep saw `done` set (Acquire); or (b) under
//!   exclusive access (I6). The deferred closure owns only the `'static` token, never a `T`: every
//!   `T` is dropped by the `RankLocal` itself, before it is gone.
//! - **I33 (scoped readers)** A scoped reader that is not the live owner (I35) pins the epoch before
//!   it loads the uid, the cache or the map, and holds the pin until `f` returns; so an instance it
//!   reads was published in the map or a cache entry it may use at a time its pin already covered,
//!   and by I32 it is freed only after the reader unpinned. `for_each` pins across the snapshot's
//!   load and the whole visit; `get`'s slow path runs the escape (I30) inside the map lookup's
//!   protection (`Backend::get_with`: the lookup's pin, or `Baseline`'s read lock, which the
//!   sweeper's remove waits for); a scoped first touch pins before it publishes and sweeps (the
//!   sweep may take the instance).
//! - **I34 (scoped cache entries)** Scoped entries are keyed by a tagged rank, so they never answer
//!   a `get` lookup nor a `get` entry a scoped one. An *owner* entry is filled only by a thread for
//!   its own rank while that rank is live (`identity::own_alive`), and the thread's exit hook clears
//!   `own_alive` and wipes the thread's cache before making the rank exited. A *pinned* entry is
//!   filled under the pin that protects its instance, keyed by the non-zero uid loaded after that
//!   pin; it is used only under a pin, with the uid loaded after it. Since a sweeper stores a fresh
//!   uid (never reused) after unpublishing and before retiring, a reader that loads the old uid
//!   after pinning was pinned before the retirement's deferral, so the entry's instance outlives it.
//! - **I35 (the live owner)** A thread's own rank is in the live set from before its id is handed
//!   out until its exit hook runs, and `own_alive` is set only while the hook is registered and has
//!   not started. The sweeper reclaims only ranks absent from the live set, read under the claims
//!   mutex after the instance was found in the map; so while `own_alive` holds on a thread, its own
//!   rank's instance is never RECLAIMING and needs no pin.

use core::fmt;
use core::marker::PhantomData;

use crossbeam_epoch as epoch;

use crate::backend::{Backend, Epoch};
use crate::cache;
use crate::identity::{self, RankId};
use crate::primitive::{
    global, lock, Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering,
};
use crate::snapshot::Erased;

global! {
    /// The next `RankLocal` uid (I4); 0 means "none assigned yet".
    static NEXT_UID: AtomicU64 = AtomicU64::new(1);
}

/// Makes a type that mentions it invariant in `T`, adding no auto-trait bound (a `fn` pointer is
/// `Send`, `Sync` and `Unpin` whatever `T` is); see I9.
type Invariant<T> = fn(T) -> T;

/// State of an instance no plain `&T` was handed out for: it may be reclaimed once its rank
/// exited (I30).
const SCOPED: usize = 0;
/// State of an instance a plain `&T` was handed out for: kept until `&mut` or drop (I30, I31).
const ESCAPED: usize = 1;
/// State of an instance the sweeper took: unpublished, freed after a grace period (I30, I32).
const RECLAIMING: usize = 2;

/// One allocation per instance (I1, I5): the value first (`repr(C)`: a pointer to the `Inst` is
/// a pointer to its `T`, so caches and slots hand out `&T` by a plain cast) and its state (I30).
#[repr(C)]
pub(crate) struct Inst<T> {
    value: T,
    state: AtomicUsize,
}

/// The state of the instance behind `p` (I30).
///
/// # Safety
/// `p` is an `Inst<T>` of a `RankLocal<T, _>`'s map (I5) that is alive: protected by a pin or
/// the claims mutex as I32/I33 say, or escaped (I31).
unsafe fn state<'a, T>(p: Erased) -> &'a AtomicUsize {
    // SAFETY: the caller's contract (I5, I32, I33); only the atomic is referenced.
    unsafe { &(*p.as_ptr::<Inst<T>>().as_ptr()).state }
}

/// Moves the instance behind `p` to ESCAPED unless it is being reclaimed; `false` if it is (the
/// caller then treats the rank's instance as absent) (I30, I31).
///
/// # Safety
/// As for [`state`]: `p` is protected while this runs.
unsafe fn escape<T>(p: Erased) -> bool {
    // SAFETY: the caller's contract (I32, I33).
    let st = unsafe { state::<T>(p) };
    // Acquire/Relaxed: the state carries no data (the instance was published under I2); what
    // matters is that exactly one of this CAS and the sweeper's succeeds (I30), which is a
    // property of the single modification order of `state`, whatever the orderings.
    match st.load(Ordering::Acquire) {
        ESCAPED => true,
        RECLAIMING => false,
        _ => match st.compare_exchange(SCOPED, ESCAPED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(now) => now == ESCAPED,
        },
    }
}

/// Instances the sweeper unpublished, freed once `done` is set: by a deferred epoch closure that
/// runs after every thread pinned when it was deferred has unpinned (I32).
struct Batch {
    done: Arc<AtomicBool>,
    entries: Vec<(u64, Erased)>,
}

/// The sweeper's bookkeeping (only touched under the claims mutex, or with `&mut`).
struct Sweep {
    /// `identity::exits()` at the last sweep: the amortization trigger.
    exits_seen: u64,
    /// Unpublished instances waiting for their grace period (I32).
    retired: Vec<Batch>,
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
///
/// **Why `T: Send + Sync`.** Unlike a thread-local, a rank's instance is shared between threads. A
/// delegate inside `on_behalf_of(rank, ..)` (or a future polled with `.on_behalf_of(rank)`) gets
/// `&T` to the same instance the rank's own thread may be using at that moment, and `get_for`
/// hands out another rank's `&T`: so `T` must be `Sync`. The instance is dropped by `clear`,
/// `purge_exited` or the `RankLocal`'s drop, and moved out by `into_iter` or `iter_mut`, on
/// whichever thread does that, usually not the one that created it: so `T` must be `Send`. The
/// C++ `RankLocal` notes that it "doesn't make the underlying objects thread-safe" and leaves that
/// to the caller; here the compiler checks it. Put mutable per-rank state behind `Mutex`, `RwLock`
/// or atomics (`RefCell` and `Cell` are not `Sync`); state no other thread may ever see belongs in
/// `std::thread_local!`.
///
/// ```compile_fail
/// // `Cell` is not `Sync`: a delegate on another thread could race the owner through `&Cell`
/// let counts: ranklocal::RankLocal<std::cell::Cell<u32>> = ranklocal::RankLocal::new();
/// counts.get().set(1);
/// ```
/// ```
/// // the thread-safe twin
/// use std::sync::atomic::{AtomicU32, Ordering};
/// let counts: ranklocal::RankLocal<AtomicU32> = ranklocal::RankLocal::new();
/// counts.get().store(1, Ordering::Relaxed);
/// assert_eq!(counts.get().load(Ordering::Relaxed), 1);
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
    /// Reclamation of scoped-only instances of exited ranks (I30-I35); locked only while
    /// `claims` is held, or with `&mut`.
    sweep: Mutex<Sweep>,
    /// `true` when every instance in the map is ESCAPED, so `iter` need not mark any (I31).
    /// Read and written only under the claims mutex: cleared by every SCOPED insert before it
    /// publishes, set by `iter` after marking the map.
    all_escaped: AtomicBool,
    /// Owns `T`s (drop check; `Send` only if `T: Send`, I7) and makes `RankLocal` *invariant* in
    /// `T` (I9): `fn(T) -> T` is Send, Sync and invariant, so it adds nothing else.
    _owns: PhantomData<(T, Invariant<T>)>,
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
            sweep: Mutex::new(Sweep {
                exits_seen: 0,
                retired: Vec::new(),
            }),
            all_escaped: AtomicBool::new(true),
            _owns: PhantomData,
        }
    };
}

impl<T: Send + Sync, B: Backend> RankLocal<T, B> {
    /// An empty `RankLocal`, usable in a `static`.
    ///
    /// ```
    /// use ranklocal::{Baseline, RankLocal};
    /// use std::sync::atomic::AtomicU64;
    ///
    /// static BYTES_SENT: RankLocal<AtomicU64> = RankLocal::new(); // `const`: fine in a static
    /// let scratch: RankLocal<Vec<u8>, Baseline> = RankLocal::new(); // any backend
    /// assert!(BYTES_SENT.is_empty() && scratch.is_empty());
    /// ```
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
    /// [`on_behalf_of`](crate::on_behalf_of). If that rank has exited, this still returns (or
    /// creates) its instance; [`purge_exited`](Self::purge_exited) drops it.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let calls: RankLocal<AtomicU32> = RankLocal::new();
    /// calls.get().fetch_add(1, Ordering::Relaxed);
    /// assert_eq!(calls.get().load(Ordering::Relaxed), 1); // the same instance again
    /// let job = Rank::new();
    /// // another rank gets its own, fresh instance
    /// on_behalf_of(job.id(), || assert_eq!(calls.get().load(Ordering::Relaxed), 0));
    /// assert_eq!(calls.len(), 2);
    /// ```
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

    /// The current rank's instance, created with `T::default()` on first use: the same as
    /// [`get`](Self::get), under the name the `thread_local` crate uses.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let hits: RankLocal<AtomicU32> = RankLocal::new();
    /// hits.get_or_default().fetch_add(1, Ordering::Relaxed);
    /// assert_eq!(hits.get_or_default().load(Ordering::Relaxed), 1);
    /// assert!(std::ptr::eq(hits.get_or_default(), hits.get()));
    /// ```
    ///
    /// # Panics
    /// As [`get`](Self::get).
    #[inline]
    pub fn get_or_default(&self) -> &T
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
    /// # Deadlock
    /// What is guaranteed, exactly: a `get` from inside the same rank's `init` *on the same
    /// thread* panics ("reentrant initialization") instead of deadlocking, and an `init` never
    /// waits for a lock or for another rank. What is not (as with `std::sync::OnceLock`): an
    /// `init` that waits for another thread which asks for the same rank of the same `RankLocal`
    /// deadlocks — that thread waits for the `init` to finish, the `init` waits for it. For
    /// example, an `init` that hands its own rank to a worker and joins it,
    /// `thread::scope(|s| s.spawn(move || on_behalf_of(me, || RL.get())).join())`, never returns;
    /// so do two `init`s on two threads that wait for each other's ranks.
    ///
    /// ```
    /// use ranklocal::{RankId, RankLocal};
    ///
    /// let names: RankLocal<String> = RankLocal::new();
    /// let name = names.get_or(|| format!("worker {}", RankId::current()));
    /// // `init` ran once for this rank; later calls return the same instance
    /// let again = names.get_or(|| unreachable!());
    /// assert!(std::ptr::eq(name, again));
    /// assert_eq!(*name, format!("worker {}", RankId::current()));
    /// ```
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
    /// ```
    /// use ranklocal::RankLocal;
    ///
    /// let port: RankLocal<u16> = RankLocal::new();
    /// assert!(port.get_or_try(|| "http".parse::<u16>()).is_err());
    /// assert!(port.try_get().is_none()); // the failed init inserted nothing
    /// assert_eq!(port.get_or_try(|| "8080".parse::<u16>()), Ok(&8080));
    /// ```
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
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let buf: RankLocal<Vec<u8>> = RankLocal::new();
    /// assert!(buf.try_get().is_none());
    /// assert!(buf.try_get().is_none()); // still none: `try_get` created nothing
    /// buf.get_or(|| vec![1, 2]);
    /// assert_eq!(buf.try_get(), Some(&vec![1, 2]));
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || assert!(buf.try_get().is_none())); // not for another rank
    /// ```
    #[inline]
    pub fn try_get(&self) -> Option<&T> {
        self.get_for(RankId::current())
    }

    /// `rank`'s instance if it exists; never creates one. Works for any rank, including one that
    /// has exited — its thread ended or its [`Rank`](crate::Rank) was dropped — until
    /// [`purge_exited`](Self::purge_exited) drops the instance.
    ///
    /// ```
    /// use ranklocal::{RankId, RankLocal};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let score: RankLocal<AtomicU32> = RankLocal::new();
    /// let worker = std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         score.get().store(7, Ordering::Relaxed);
    ///         RankId::current()
    ///     })
    ///     .join()
    ///     .unwrap()
    /// });
    /// // the worker has exited; its instance stays until `purge_exited`
    /// assert_eq!(score.get_for(worker).unwrap().load(Ordering::Relaxed), 7);
    /// assert!(score.get_for(RankId::current()).is_none()); // this thread never touched it
    /// ```
    #[inline]
    pub fn get_for(&self, rank: RankId) -> Option<&T> {
        let rank = rank.as_u64();
        self.cached(rank).or_else(|| self.lookup_slow(rank))
    }

    /// Number of ranks with an instance.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let rl: RankLocal<u32> = RankLocal::new();
    /// assert_eq!(rl.len(), 0);
    /// rl.get_or(|| 1);
    /// rl.get_or(|| 2); // same rank: no new instance
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || rl.get_or(|| 3));
    /// assert_eq!(rl.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        B::len(&self.map)
    }

    /// `true` if no rank has an instance.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    ///
    /// let mut rl: RankLocal<String> = RankLocal::new();
    /// assert!(rl.is_empty());
    /// rl.get();
    /// assert!(!rl.is_empty());
    /// rl.clear();
    /// assert!(rl.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every `(rank, instance)`, from one consistent snapshot taken when called (ranks inserted
    /// later are not seen). Order is unspecified (ascending rank on `Epoch` and `ArcSwap`). The
    /// iterator keeps its own snapshot alive by a count, not by an epoch pin, so a long-lived
    /// iterator does not stop reclamation elsewhere in the process.
    ///
    /// `&RankLocal` is `IntoIterator` too: `for (rank, v) in &rl` is `rl.iter()`.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let rl: RankLocal<u64> = RankLocal::new();
    /// let (a, b) = (Rank::new(), Rank::new());
    /// for r in [&a, &b] {
    ///     on_behalf_of(r.id(), || rl.get_or(|| r.id().as_u64() * 10));
    /// }
    /// let mut seen: Vec<_> = rl.iter().map(|(rank, v)| (rank, *v)).collect();
    /// seen.sort(); // order is unspecified
    /// assert_eq!(seen, [(a.id(), a.id().as_u64() * 10), (b.id(), b.id().as_u64() * 10)]);
    /// assert!((&rl).into_iter().all(|(rank, v)| *v == rank.as_u64() * 10));
    /// ```
    pub fn iter(&self) -> Iter<'_, T, B> {
        // Under the claims mutex the map cannot change (I16) and holds no RECLAIMING instance
        // (I30): mark the snapshot's instances ESCAPED, then hand out the same snapshot (I31).
        let _claims = lock(&self.claims);
        // Relaxed: the flag is only accessed under the claims mutex, which orders it (I31).
        if !self.all_escaped.load(Ordering::Relaxed) {
            for (_, p) in B::iter(&self.map) {
                // SAFETY: in the map under the claims mutex: alive (I30, I32).
                let st = unsafe { state::<T>(p) };
                // Relaxed: as in `insert` (I30). A load first: no write to an escaped
                // instance's line (another thread's, most often).
                if st.load(Ordering::Relaxed) != ESCAPED {
                    st.store(ESCAPED, Ordering::Relaxed);
                }
            }
            self.all_escaped.store(true, Ordering::Relaxed);
        }
        Iter {
            inner: B::iter(&self.map),
            _rl: PhantomData,
        }
    }

    /// Every `(rank, &mut instance)`.
    ///
    /// `&mut RankLocal` is `IntoIterator` too: `for (rank, v) in &mut rl` is `rl.iter_mut()`.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let mut totals: RankLocal<u64> = RankLocal::new();
    /// totals.get_or(|| 40);
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || totals.get_or(|| 1));
    /// for (_, total) in totals.iter_mut() {
    ///     *total += 1; // no lock: `&mut self` excludes every other user
    /// }
    /// for (_, total) in &mut totals {
    ///     *total += 1;
    /// }
    /// assert_eq!(totals.try_get(), Some(&42));
    /// assert_eq!(totals.get_for(job.id()), Some(&3));
    /// ```
    pub fn iter_mut(&mut self) -> IterMut<'_, T, B> {
        IterMut {
            inner: B::iter(&self.map),
            _rl: PhantomData,
        }
    }

    /// Drops every instance.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    ///
    /// let mut rl: RankLocal<String> = RankLocal::new();
    /// rl.get_or(|| "old".to_string());
    /// rl.clear();
    /// assert!(rl.try_get().is_none());
    /// assert_eq!(rl.get_or(|| "new".to_string()), "new"); // the next use runs `init` again
    /// ```
    pub fn clear(&mut self) {
        self.remove_where(&mut |_| false);
    }

    /// Drops the instances of ranks that have exited, returning how many.
    ///
    /// A thread's rank counts as exited once its thread-local destructors have started; threads
    /// whose destructors never run (the main thread at process exit) never count as exited. A
    /// [`Rank`](crate::Rank)'s rank counts as exited once the `Rank` is dropped, and is live
    /// until then, whether or not any thread acts for it. An exited rank can still be acted for;
    /// an instance made for it afterwards is dropped by the next purge (see the crate docs'
    /// "Exited ranks").
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let mut sessions: RankLocal<String> = RankLocal::new();
    /// let (a, b) = (Rank::new(), Rank::new());
    /// on_behalf_of(a.id(), || sessions.get_or(|| "a".into()));
    /// on_behalf_of(b.id(), || sessions.get_or(|| "b".into()));
    /// sessions.get_or(|| "main".into()); // the main thread never counts as exited
    /// let a_id = a.id();
    /// drop(a); // rank `a` exits
    /// assert_eq!(sessions.purge_exited(), 1);
    /// assert!(sessions.get_for(a_id).is_none());
    /// assert_eq!(sessions.len(), 2); // `b` (still live) and this thread
    /// ```
    pub fn purge_exited(&mut self) -> usize {
        // Collect the live set first: dropping instances may touch rank ids (and its lock).
        let live = identity::with_live(|live| live.clone());
        self.remove_where(&mut |rank| live.contains(&rank))
    }

    /// Removes (and drops) the instances `keep` rejects; returns how many.
    fn remove_where(&mut self, keep: &mut dyn FnMut(u64) -> bool) -> usize {
        let mut removed = B::retain(&mut self.map, keep);
        let n = removed.len();
        // Retired batches go too: `&mut self` excludes every reader (I6, I32).
        removed.extend(take_retired(&self.sweep));
        if !removed.is_empty() {
            // Relaxed: `&mut self`, ordered by whatever handed it to us. A fresh uid is drawn
            // on next use, so no thread cache can hit a removed instance (I4).
            self.uid.store(0, Ordering::Relaxed);
        }
        // SAFETY: every entry came out of this map (I5) and is no longer in it, and `&mut self`
        // excludes every other user (I6); the uid reset makes cached copies dead (I4).
        unsafe { free_all::<T>(removed) };
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
        // (I4, I5), valid for the `&self` borrow and never mutably aliased (I1); it is a `T` of
        // exactly this type, lifetimes included, since `RankLocal` is invariant in `T` (I9).
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
        #[cfg(all(test, not(loom)))]
        tests::MAP_LOOKUPS.with(|n| n.set(n.get() + 1));
        // The escape runs inside the lookup's protection (one pin on Epoch, the read lock on
        // Baseline), which keeps `p` alive from the map load to the escape (I33).
        let p = B::get_with(&self.map, rank, |p| {
            // SAFETY: `p` was read from the map and is protected while this runs (I33).
            unsafe { escape::<T>(p) }.then_some(p)
        })?;
        // `None`: being reclaimed, the rank's instance is gone (I30)
        let p = p?;
        if Self::cacheable(rank) {
            cache::store(self.uid(), rank, p);
        }
        // SAFETY: `p` is a published instance of this map (I2, I5), now escaped, so valid while
        // `&self` lives (I1, I31), inserted as this very `T` (invariance, I9).
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
        let (p, _guard) = self.insert(rank, init, true)?;
        if Self::cacheable(rank) {
            cache::store(self.uid(), rank, p);
        }
        // SAFETY: `p` was just published in this map (I2, I5), escaped (I31), so valid while
        // `&self` lives (I1); the same `T` every reader of this `RankLocal` reads (I9).
        Ok(unsafe { p.as_ptr::<T>().as_ref() })
    }

    /// First touch of `rank` (step 3): the init protocol in the module docs. Returns the instance,
    /// ESCAPED if `escaped` (I31), and a pin taken under the claims mutex, so no sweep can have
    /// retired the instance before it (I33).
    fn insert<E>(
        &self,
        rank: u64,
        init: impl FnOnce() -> Result<T, E>,
        escaped: bool,
    ) -> Result<(Erased, epoch::Guard), E> {
        let me = identity::own_raw();
        let mut claims = lock(&self.claims);
        loop {
            if let Some(p) = B::get(&self.map, rank) {
                // published by another thread meanwhile
                if escaped {
                    // SAFETY: in the map under the claims mutex, so not RECLAIMING and alive
                    // (I30, I32).
                    let st = unsafe { state::<T>(p) };
                    // Relaxed: under the mutex the state is SCOPED or ESCAPED and only moves
                    // to ESCAPED (I30); the mutex orders it before any later sweep.
                    st.store(ESCAPED, Ordering::Relaxed);
                }
                return Ok((p, crate::backend::pin()));
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
        let p = Erased::new(Box::new(Inst {
            value,
            state: AtomicUsize::new(if escaped { ESCAPED } else { SCOPED }),
        }));
        let (guard, ready) = {
            let _writers = lock(&self.claims);
            // Pinned before the sweep below may retire `p` (an exited rank's scoped instance):
            // its deferral then waits for this pin (I32, I33).
            let guard = crate::backend::pin();
            if !escaped {
                // Relaxed: under the claims mutex, like every access to the flag (I31).
                self.all_escaped.store(false, Ordering::Relaxed);
            }
            B::insert(&self.map, rank, p);
            // Writers sweep exited ranks' scoped-only instances, amortized (I32).
            let (_, ready) = self.sweep_locked(false);
            (guard, ready)
        };
        drop(claim);
        // SAFETY: batches whose grace period passed (I32); outside the claims mutex.
        unsafe { free_batches::<T>(ready) };
        Ok((p, guard))
    }

    /// The sweep (I30, I32), under the claims mutex: if `force`, or if enough ranks exited since
    /// the last one (half of `len`, at least 16: amortized O(1) per exit), moves the SCOPED
    /// instances of exited ranks to RECLAIMING, unpublishes them, draws a fresh uid and retires
    /// them as one batch behind an epoch grace period. Returns how many it retired and the
    /// earlier batches now ready to free (the caller frees them after dropping the mutex).
    fn sweep_locked(&self, force: bool) -> (usize, Vec<Batch>) {
        let mut sw = lock(&self.sweep);
        let exits = identity::exits();
        let due =
            force || exits.wrapping_sub(sw.exits_seen) >= (B::len(&self.map) as u64 / 2).max(16);
        let mut n = 0;
        if due {
            sw.exits_seen = exits;
            let mut found: Vec<(u64, Erased)> = B::iter(&self.map).collect();
            identity::with_live(|live| found.retain(|(rank, _)| !live.contains(rank)));
            let mut batch = Vec::new();
            for (rank, p) in found {
                // SAFETY: in the map under the claims mutex: alive (I30, I32).
                let st = unsafe { state::<T>(p) };
                // SeqCst (Relaxed would do for the one-winner property, I30): keeps the
                // argument about readers local.
                if st
                    .compare_exchange(SCOPED, RECLAIMING, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
                {
                    let removed = B::remove(&self.map, rank);
                    debug_assert!(removed.is_some());
                    batch.push((rank, p));
                }
            }
            n = batch.len();
            if !batch.is_empty() {
                // A fresh uid before retiring: pinned scoped entries keyed by the old one are
                // dead for every reader that pins after this store (I34).
                let fresh = crate::snapshot::mix(NEXT_UID.fetch_add(1, Ordering::Relaxed));
                self.uid.store(fresh, Ordering::SeqCst);
                let done = Arc::new(AtomicBool::new(false));
                let flag = Arc::clone(&done);
                let guard = crate::backend::pin();
                // Release: pairs with the Acquire in `take_ready`; the collector runs this only
                // after every thread pinned now has unpinned (I32). Only a `'static` token is
                // deferred, never a `T`: the closure runs no user code (I18).
                guard.defer(move || flag.store(true, Ordering::Release));
                guard.flush();
                sw.retired.push(Batch {
                    done,
                    entries: batch,
                });
            }
        }
        (n, take_ready(&mut sw))
    }

    /// The instances of exited ranks that were only ever reached through scoped access
    /// ([`with`](Self::with), [`with_for`](Self::with_for), [`for_each`](Self::for_each)): unpublishes them
    /// now and returns how many; each is dropped once no reader can still see it, by this call,
    /// a later sweep or the `RankLocal`'s drop. Instances ever handed out as `&T` are kept.
    ///
    /// Writers (first touches) sweep on their own, amortized, so memory stays bounded without
    /// calling this; it is for dropping promptly.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let rl: RankLocal<Vec<u8>> = RankLocal::new();
    /// let job = Rank::new();
    /// let id = job.id();
    /// on_behalf_of(id, || rl.with(|buf| assert!(buf.is_empty()))); // scoped only
    /// assert_eq!(rl.len(), 1);
    /// drop(job); // the rank exits
    /// assert_eq!(rl.reclaim_exited(), 1);
    /// assert_eq!(rl.len(), 0);
    /// assert!(rl.with_for(id, |_| ()).is_none());
    /// ```
    pub fn reclaim_exited(&self) -> usize {
        let (n, mut ready) = {
            let _claims = lock(&self.claims);
            self.sweep_locked(true)
        };
        // Help the grace period along (each flush may advance the epoch once); whatever is not
        // ready yet goes with a later sweep.
        for _ in 0..3 {
            if lock(&self.sweep).retired.is_empty() {
                break;
            }
            crate::backend::pin().flush();
            let _claims = lock(&self.claims);
            ready.extend(take_ready(&mut lock(&self.sweep)));
        }
        // SAFETY: batches whose grace period passed (I32); outside the claims mutex.
        unsafe { free_batches::<T>(ready) };
        n
    }

    /// The current rank's instance, created with `T::default()` on first use, lent to `f`: scoped
    /// access, like `std::thread::LocalKey::with`.
    ///
    /// Unlike [`get`](Self::get), whose `&T` lives as long as the `RankLocal` (forever, for a
    /// `static`), the borrow cannot escape `f`; so an instance only ever reached this way is
    /// dropped after its rank exits — without `&mut`, statics included (spec semantic 10). Use
    /// `with` for per-thread state of short-lived threads; use `get` when you need the reference
    /// outside a closure (the instance is then kept until `&mut` access or drop). The owner's
    /// `with` is a thread-cache hit, as `get`; a delegate's holds an epoch pin during `f`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// static SENT: RankLocal<AtomicU64> = RankLocal::new();
    ///
    /// for _ in 0..100 {
    ///     std::thread::spawn(|| SENT.with(|n| n.fetch_add(1, Ordering::Relaxed))).join().unwrap();
    /// }
    /// SENT.reclaim_exited(); // writers also do this on their own, amortized
    /// assert_eq!(SENT.len(), 0); // the exited threads' instances are gone
    /// ```
    ///
    /// # Panics
    /// As [`get`](Self::get). A panic in `f` propagates; nothing is leaked.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R
    where
        T: Default,
    {
        self.with_or(T::default, f)
    }

    /// [`with`](Self::with) with an explicit initializer (the `rank_local!` key's `with`).
    #[inline]
    pub(crate) fn with_or<R>(&self, init: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R {
        let rank = identity::current_raw_or_zero();
        if let Some(v) = self.cached_owner(rank) {
            return f(v);
        }
        self.with_slow(init, f)
    }

    /// `rank`'s instance lent to `f`, or `None` if it has none (never creates one); scoped
    /// access as [`with`](Self::with). For a rank other than the thread's own, the instance is
    /// kept alive by an epoch pin during `f`, even if the rank exits meanwhile.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    /// use std::sync::Mutex;
    ///
    /// let logs: RankLocal<Mutex<Vec<&str>>> = RankLocal::new();
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || logs.with(|l| l.lock().unwrap().push("step")));
    /// assert_eq!(logs.with_for(job.id(), |l| l.lock().unwrap().len()), Some(1));
    /// assert_eq!(logs.with_for(Rank::new().id(), |_| ()), None);
    /// ```
    #[inline]
    pub fn with_for<R>(&self, rank: RankId, f: impl FnOnce(&T) -> R) -> Option<R> {
        let rank = rank.as_u64();
        if let Some(v) = self.cached_owner(rank) {
            return Some(f(v));
        }
        self.with_for_slow(rank, f)
    }

    /// Lends every instance to `f` in turn, from one snapshot (scoped visiting: the borrows
    /// cannot escape, so exited ranks' instances stay reclaimable). Holds an epoch pin for the
    /// whole visit; keep `f` short.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// let bytes: RankLocal<AtomicU64> = RankLocal::new();
    /// bytes.with(|b| b.store(3, Ordering::Relaxed));
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || bytes.with(|b| b.store(4, Ordering::Relaxed)));
    /// let mut total = 0;
    /// bytes.for_each(|_, b| total += b.load(Ordering::Relaxed));
    /// assert_eq!(total, 7);
    /// ```
    pub fn for_each(&self, mut f: impl FnMut(RankId, &T)) {
        // The pin covers the snapshot's load and the whole visit (I33).
        let _guard = crate::backend::pin();
        for (rank, p) in B::iter(&self.map) {
            // SAFETY: read from a snapshot loaded under `_guard` (I33).
            if unsafe { state::<T>(p) }.load(Ordering::Acquire) == RECLAIMING {
                continue;
            }
            // SAFETY: alive while `_guard` is held (I32, I33); a `T` of this map (I5, I9); the
            // borrow ends with `f`'s call.
            f(RankId::from_raw(rank), unsafe { p.as_ptr::<T>().as_ref() });
        }
    }

    /// The owner's scoped entry for `rank`: a hit only for this thread's own, live rank (I34).
    #[inline]
    fn cached_owner(&self, rank: u64) -> Option<&T> {
        // Relaxed: the uid is only a name here; an owner entry stays valid whatever the uid
        // (I34, I35).
        let uid = self.uid.load(Ordering::Relaxed);
        let p = cache::lookup(uid, rank | cache::OWNER_TAG)?;
        // SAFETY: an owner entry was filled by this thread for its own rank while it was alive
        // and is wiped before the rank exits (I34), so the instance is not reclaimed (I35) and
        // stays valid for `&self` (I1); a `T` of this map (I5, I9).
        Some(unsafe { p.cast::<T>().as_ref() })
    }

    /// `true` if `rank` is this thread's own rank and live: its instance cannot be reclaimed
    /// while the thread runs (I35).
    fn is_live_owner(rank: u64) -> bool {
        rank == identity::own_raw() && identity::own_alive()
    }

    /// A non-owner's scoped lookup: pins, then loads the uid, then probes the cache's pinned
    /// entries and the map (I33, I34). The instance is alive while the returned guard is held.
    fn pinned_lookup(&self, rank: u64) -> Option<(Erased, epoch::Guard)> {
        self.uid(); // non-zero from now on (only `&mut` resets it), so fills never use 0
        let guard = crate::backend::pin();
        // SeqCst, after the pin's SeqCst fence: a sweeper that stored a fresh uid before
        // retiring something this pin does not protect is seen here (I34).
        let uid = self.uid.load(Ordering::SeqCst);
        if Self::cacheable(rank) {
            if let Some(p) = cache::lookup(uid, rank | cache::PINNED_TAG) {
                return Some((Erased::from_non_null(p), guard));
            }
        }
        let p = B::get(&self.map, rank)?;
        // SAFETY: read from the map under `guard` (I33).
        if unsafe { state::<T>(p) }.load(Ordering::Acquire) == RECLAIMING {
            return None; // being reclaimed: gone (I30)
        }
        if Self::cacheable(rank) {
            cache::store(uid, rank | cache::PINNED_TAG, p);
        }
        Some((p, guard))
    }

    #[cold]
    fn with_slow<R>(&self, init: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R {
        let rank = identity::current_raw();
        let init = || Ok::<T, core::convert::Infallible>(init());
        if Self::is_live_owner(rank) {
            let p = match B::get(&self.map, rank) {
                Some(p) => p,
                None => match self.insert(rank, init, false) {
                    Ok((p, _guard)) => p,
                    Err(never) => match never {},
                },
            };
            cache::store(self.uid(), rank | cache::OWNER_TAG, p);
            // SAFETY: the live owner's instance is not reclaimed while the thread runs (I35),
            // valid for `&self` (I1); a `T` of this map (I5, I9).
            return f(unsafe { p.as_ptr::<T>().as_ref() });
        }
        let (p, _guard) = match self.pinned_lookup(rank) {
            Some(found) => found,
            None => match self.insert(rank, init, false) {
                Ok(found) => found,
                Err(never) => match never {},
            },
        };
        // SAFETY: alive while `_guard` is held (I33); a `T` of this map (I5, I9).
        f(unsafe { p.as_ptr::<T>().as_ref() })
    }

    #[cold]
    fn with_for_slow<R>(&self, rank: u64, f: impl FnOnce(&T) -> R) -> Option<R> {
        if Self::is_live_owner(rank) {
            let p = B::get(&self.map, rank)?;
            cache::store(self.uid(), rank | cache::OWNER_TAG, p);
            // SAFETY: as in `with_slow` (I35, I1, I5, I9).
            return Some(f(unsafe { p.as_ptr::<T>().as_ref() }));
        }
        let (p, _guard) = self.pinned_lookup(rank)?;
        // SAFETY: alive while `_guard` is held (I33); a `T` of this map (I5, I9).
        Some(f(unsafe { p.as_ptr::<T>().as_ref() }))
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
        let mut removed = B::retain(&mut self.map, &mut |_| false);
        removed.extend(take_retired(&self.sweep));
        // SAFETY: dropping the `RankLocal` — no other user exists (I6, I32); each pointer is a
        // `Box<Inst<T>>` of this map (I5), removed from it or retired (I32). The uid dies with `self` and is never
        // reused, so cached copies are dead (I4).
        unsafe { free_all::<T>(removed) };
    }
}

/// Frees every instance in `entries`, each exactly once, even if a `T::drop` panics (I10): the
/// rest are still dropped, then the first panic propagates (a second one aborts, as in std).
///
/// # Safety
/// Every entry must be a `Box<Inst<T>>` allocation of a `RankLocal<T, _>`'s map (I5) that was removed
/// from it, with no reference to it left (I6, I4).
unsafe fn free_all<T>(entries: Vec<(u64, Erased)>) {
    /// On unwind out of one instance's drop, frees the instances not yet freed (I10).
    struct FreeRest<'a, T> {
        rest: &'a mut std::vec::IntoIter<(u64, Erased)>,
        _t: PhantomData<T>,
    }
    impl<T> Drop for FreeRest<'_, T> {
        fn drop(&mut self) {
            for (_, p) in &mut *self.rest {
                // SAFETY: an entry of `free_all`'s argument, not yet freed: the iterator yields
                // each once (I10), and the caller's contract covers it (I5, I6).
                drop(unsafe { Box::from_raw(p.as_ptr::<Inst<T>>().as_ptr()) });
            }
        }
    }
    let mut entries = entries.into_iter();
    while let Some((_, p)) = entries.next() {
        let guard = FreeRest::<T> {
            rest: &mut entries,
            _t: PhantomData,
        };
        // SAFETY: as for `FreeRest::drop`: the caller's contract (I5, I6), each entry once (I10).
        drop(unsafe { Box::from_raw(p.as_ptr::<Inst<T>>().as_ptr()) });
        core::mem::forget(guard);
    }
}

/// Every retired instance, ready or not (for exclusive access only, I6).
fn take_retired(sweep: &Mutex<Sweep>) -> Vec<(u64, Erased)> {
    let retired = core::mem::take(&mut lock(sweep).retired);
    retired.into_iter().flat_map(|b| b.entries).collect()
}

/// Takes out the batches whose grace period passed (I32).
fn take_ready(sw: &mut Sweep) -> Vec<Batch> {
    let mut ready = Vec::new();
    let mut i = 0;
    while i < sw.retired.len() {
        // Acquire: pairs with the deferred Release store, which the collector runs after every
        // reader pinned at the retirement unpinned (I32).
        if sw.retired[i].done.load(Ordering::Acquire) {
            ready.push(sw.retired.swap_remove(i));
        } else {
            i += 1;
        }
    }
    ready
}

/// Frees the instances of `batches` (I10's `free_all`).
///
/// # Safety
/// Every batch's grace period passed (its `done` was seen set, I32), or no reader exists (I6).
unsafe fn free_batches<T>(batches: Vec<Batch>) {
    if batches.is_empty() {
        return;
    }
    let entries = batches.into_iter().flat_map(|b| b.entries).collect();
    // SAFETY: retired instances of this map (I5), unpublished, their cached copies dead (I34)
    // and no reader left (I32), each in one batch once (I10).
    unsafe { free_all::<T>(entries) };
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
///
/// *Covariant* in `T` (like `core::slice::Iter`): it only hands out `&'a T`s of instances that
/// already exist and can insert nothing, so reading a `&'a &'static str` as a `&'a &'short str`
/// is a plain subtyping of what it yields (I9). It borrows the `RankLocal` for `'a`. `Send` only
/// if the backend's iterator is: the `Epoch` one holds a raw pointer to its version header (a
/// count, not a pin, I15), so it is `!Send` (see `compile_fail_tests`).
///
/// ```
/// use ranklocal::{Iter, RankId, RankLocal};
///
/// let rl: RankLocal<&'static str> = RankLocal::new();
/// rl.get_or(|| "hello");
/// let it: Iter<'_, &'static str, ranklocal::Epoch> = rl.iter();
/// assert_eq!(it.collect::<Vec<_>>(), [(RankId::current(), &"hello")]);
/// // a rank inserted after `iter` was called is not seen by it (one snapshot)
/// let mut it = rl.iter();
/// let job = ranklocal::Rank::new();
/// ranklocal::on_behalf_of(job.id(), || rl.get_or(|| "later"));
/// assert_eq!(it.count(), 1);
/// assert_eq!(rl.iter().count(), 2);
/// ```
pub struct Iter<'a, T, B: Backend> {
    inner: B::Iter<'a>,
    _rl: PhantomData<(&'a T, &'a B)>,
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
///
/// *Invariant* in `T`, like `core::slice::IterMut`: it hands out `&mut T`, through which a
/// shorter-lived value could be written (I9).
///
/// ```
/// use ranklocal::{IterMut, RankLocal};
///
/// let mut rl: RankLocal<Vec<u32>> = RankLocal::new();
/// rl.get_or(|| vec![1]);
/// let it: IterMut<'_, Vec<u32>, ranklocal::Epoch> = rl.iter_mut();
/// for (_, v) in it {
///     v.push(2);
/// }
/// assert_eq!(rl.try_get(), Some(&vec![1, 2]));
/// ```
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
    ///
    /// ```
    /// use ranklocal::{RankId, RankLocal};
    ///
    /// let rl: RankLocal<String> = RankLocal::new();
    /// rl.get_or(|| "mine".to_string());
    /// let owned: Vec<(RankId, String)> = rl.into_iter().collect();
    /// assert_eq!(owned, [(RankId::current(), "mine".to_string())]);
    /// ```
    fn into_iter(mut self) -> Self::IntoIter {
        let entries = B::retain(&mut self.map, &mut |_| false);
        let owned: Vec<(RankId, T)> = entries
            .into_iter()
            .map(|(rank, p)| {
                // SAFETY: owned `self` (I6); a `Box<T>` of this map (I5), removed, moved out once;
                // moving out runs no `T::drop`, so no panic can strand the rest (I10).
                let b = unsafe { Box::from_raw(p.as_ptr::<Inst<T>>().as_ptr()) };
                (RankId::from_raw(rank), b.value)
            })
            .collect();
        owned.into_iter()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use core::cell::Cell;

    use super::*;

    std::thread_local! {
        /// Map lookups (`B::get_with` in `lookup_slow`) made by this thread: a thread-cache hit makes
        /// none, so a count that stays put proves hits without timing anything.
        pub(super) static MAP_LOOKUPS: Cell<u64> = const { Cell::new(0) };
    }

    fn map_lookups() -> u64 {
        MAP_LOOKUPS.with(Cell::get)
    }

    /// `k` fresh `RankLocal`s whose uids share the low six bits, so that for this thread's rank
    /// they collided in the old 64-entry direct-mapped cache (`(rank ^ uid) & 63`), and share one
    /// set of the new cache. The uids are drawn from the global counter like any other (a few
    /// are skipped), so they are unique and never reused (I4).
    fn colliding(k: usize) -> Vec<RankLocal<u64>> {
        let rank = identity::current_raw();
        let mut classes: Vec<Vec<u64>> = vec![Vec::new(); 64];
        loop {
            let uid = crate::snapshot::mix(NEXT_UID.fetch_add(1, Ordering::Relaxed));
            let old_index = ((rank ^ uid) & 63) as usize;
            let class = &mut classes[old_index];
            class.push(uid);
            if class.len() == k {
                assert!(class
                    .iter()
                    .all(|&u| cache::set_index(u, rank) == cache::set_index(class[0], rank)));
                return class
                    .iter()
                    .map(|&u| {
                        let rl = RankLocal::new();
                        rl.uid.store(u, Ordering::Relaxed);
                        rl
                    })
                    .collect();
            }
        }
    }

    /// Fills the cache with each of `rls`, then uses them in turn `rounds` times; returns the map
    /// lookups those rounds made.
    fn lookups_in_turn(rls: &[RankLocal<u64>], rounds: usize) -> u64 {
        for (i, rl) in rls.iter().enumerate() {
            assert_eq!(*rl.get_or(|| i as u64), i as u64);
        }
        let before = map_lookups();
        for _ in 0..rounds {
            for (i, rl) in rls.iter().enumerate() {
                assert_eq!(*rl.get(), i as u64);
            }
        }
        map_lookups() - before
    }

    #[test]
    fn two_rank_locals_colliding_in_the_old_index_never_evict_each_other() {
        std::thread::spawn(|| assert_eq!(lookups_in_turn(&colliding(2), 100), 0))
            .join()
            .unwrap();
    }

    #[test]
    fn four_rank_locals_sharing_a_set_never_evict_each_other() {
        std::thread::spawn(|| assert_eq!(lookups_in_turn(&colliding(cache::WAYS), 100), 0))
            .join()
            .unwrap();
    }

    /// The limit, and a check that the counter counts: one more key than a set holds, used in
    /// turn, misses on every lookup (each fill drops the next one to be used).
    #[test]
    fn one_more_than_a_set_holds_misses_every_time() {
        std::thread::spawn(|| {
            let rounds = 10;
            let n = cache::WAYS + 1;
            assert_eq!(lookups_in_turn(&colliding(n), rounds), (rounds * n) as u64);
        })
        .join()
        .unwrap();
    }

    /// A delegate cycling through 64 ranks of one `RankLocal` (one rank per set) keeps them all,
    /// next to the thread's own entries.
    #[test]
    fn a_delegate_cycling_through_64_ranks_keeps_them_all() {
        let rl = RankLocal::<u64>::new();
        let uid = rl.uid();
        // Ranks of exited threads, one per set (other tests spawn threads meanwhile, so the ids
        // handed out here need not be consecutive).
        let mut by_set: Vec<Option<RankId>> = vec![None; cache::SETS];
        let mut spawned = 0;
        while by_set.iter().any(Option::is_none) {
            let r = std::thread::spawn(RankId::this_thread).join().unwrap();
            by_set[cache::set_index(uid, r.as_u64())].get_or_insert(r);
            spawned += 1;
            assert!(spawned < 100_000, "could not find a rank for every set");
        }
        let ranks: Vec<RankId> = by_set.into_iter().flatten().collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                for &r in &ranks {
                    crate::on_behalf_of(r, || rl.get_or(|| r.as_u64()));
                }
                let _own = rl.get_or(|| 0);
                let before = map_lookups();
                for _ in 0..10 {
                    for &r in &ranks {
                        assert_eq!(*rl.get_for(r).unwrap(), r.as_u64());
                        crate::on_behalf_of(r, || assert_eq!(*rl.get(), r.as_u64()));
                    }
                }
                assert_eq!(map_lookups() - before, 0);
            });
        });
    }
}
