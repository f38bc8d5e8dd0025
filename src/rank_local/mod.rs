//! [`RankLocal`]: one `T` per rank, on a pluggable map [`Backend`].
//!
//! # How a lookup works
//! 1. **Thread cache** ([`crate::cache`]): the thread's current rank (its own, or the one it acts
//!    for inside [`on_behalf_of`](crate::on_behalf_of)) and the `RankLocal`'s uid index a small
//!    thread-local table. A hit returns at once: no pin, no lock, no shared write.
//! 2. **Map** (cold): the backend's lookup (`Epoch`: pin, load the snapshot, descend its trie). A
//!    hit fills the thread cache.
//! 3. **First touch** (cold): the init protocol (`init`), then publish a new snapshot.
//!
//! # Where each part lives
//! - this file: the struct, its fields and how uids are drawn;
//! - `access`: construction and the hot path — each `#[inline]` cache probe followed by its
//!   `#[cold]` slow path — then `len`;
//! - `raw`: the only module that types an instance pointer back and reads through it: instances
//!   as references tied to their protection (a pin, the writer lock, the live owner, an escape,
//!   `&mut`), an instance's allocation and state machine, removed instances as owned batches,
//!   the exit drop's gate (I1, I5, I10, I30–I39); every other module is `#![deny(unsafe_code)]`;
//! - `init`: first touch — the writer lock, claims, publication (I2, I16);
//! - `scoped`: `with`/`with_for` off the owner's hit path, and `for_each` (I33–I35);
//! - `reclaim`: sweeps of exited ranks, `reclaim_exited`, the `&mut` removals and drop (I6, I10,
//!   I32);
//! - `iter`: `iter`, `iter_mut`, `into_iter` (I15, I31);
//! - `kept`: `kept_exited` and its debug-build warning;
//! - `own`: the owner-only family (`with_own`, `get_own`, ...), [`SyncValue`] and `Debug`;
//! - `reader`: [`Reader`] (`pin`): lookups of any rank under one held pin (I40).
//!
//! The invariants the `// SAFETY:` comments cite (I1, I2, ...) are stated once, in
//! papers/design.md §4, rendered as [`crate::design`].

// The modules whose `impl RankLocal` blocks hold public methods are declared in the order a user
// reads the `RankLocal` page, which rustdoc follows: construct and access (`access`), scoped
// visits, owner-only access, iteration, reclamation.
#![deny(unsafe_code)]

#[cfg(all(test, not(ranklocal_loom)))]
mod cache_tests;
mod init;
mod raw;
#[cfg(all(test, not(ranklocal_loom)))]
mod tests;

use core::marker::PhantomData;

use crate::backend::{Backend, Epoch};
use crate::cache;
use crate::primitive::{global, AtomicU64, Condvar, Mutex, Ordering, Part};

use self::init::Claim;
pub use self::iter::{Iter, IterMut};
pub use self::local_key::AccessError;
pub use self::own::SyncValue;
pub use self::raw::OwnRef;
pub use self::reader::Reader;
use self::reclaim::Sweep;

global! {
    /// The counter behind uids (I4); 0 means "none assigned yet".
    static NEXT_UID: AtomicU64 = AtomicU64::new(1);
}

/// A uid never handed out before, neither 0 nor [`cache::NO_UID`] (I4). Multiplying the counter
/// (which starts at 1) by an odd constant is a bijection on u64, so uids stay unique and non-zero
/// while their top bits are well mixed (the thread cache indexes with them).
pub(crate) fn fresh_uid() -> cache::Uid {
    loop {
        // Relaxed: uids carry no data, they only have to be unique.
        let uid = NEXT_UID
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        if let Some(uid) = cache::Uid::fresh(uid) {
            return uid;
        }
    }
}

/// The value of a `Result` that cannot be an error (`let Ok(v) = r;` needs Rust 1.82).
#[inline(always)]
fn infallible<T>(r: Result<T, core::convert::Infallible>) -> T {
    match r {
        Ok(v) => v,
        Err(never) => match never {},
    }
}

/// Makes a type that mentions it invariant in `T`, adding no auto-trait bound (a `fn` pointer is
/// `Send`, `Sync` and `Unpin` whatever `T` is); see I9.
type Invariant<T> = fn(T) -> T;

/// One `T` per rank — per logical thread — created on first use; a thread acting
/// [`on_behalf_of`](crate::on_behalf_of) a rank sees that rank's instance.
///
/// This is PyTorch c10d's `RankLocal<T>` with a lock-free read path: the owner thread and
/// delegates hit a thread-local cache; a miss reads a snapshot of the rank map published by the
/// backend `B` ([`Epoch`] by default), whose only change in place is a first touch filling an
/// empty slot.
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
/// **`T: Send`, and `T: Sync` for what crosses threads.** Unlike a thread-local, a rank's instance
/// can be shared between threads. A delegate inside `on_behalf_of(rank, ..)` (or a future polled
/// with `.on_behalf_of(rank)`) gets `&T` to the same instance the rank's own thread may be using at
/// that moment, and `get_for`, `with_for`, `iter` and `for_each` hand out other ranks' `&T`: so
/// those rank-aware methods (and `get`, `with` and the rest, which resolve the current rank)
/// require `T: Sync` ([`SyncValue`]). The instance is dropped by `clear`, `purge_exited`, a sweep
/// or the `RankLocal`'s drop, and moved out by `into_iter`, on whichever thread does that: so `T`
/// must be `Send`, and that is all the owner-only family needs — [`with_own`](Self::with_own),
/// [`get_own`](Self::get_own) and their variants reach the calling OS thread's own instance, which
/// no other thread can reach without `Sync`. Per-rank state other threads read goes behind a
/// `Mutex`, `RwLock` or atomics; state only its own thread touches can be a `RefCell` or `Cell`
/// with the owner-only family (dropped at its thread's exit, as std's `thread_local!` does).
///
/// ```compile_fail
/// // `Cell` is not `Sync`: a delegate on another thread could race the owner through `&Cell`
/// let counts: ranklocal::RankLocal<std::cell::Cell<u32>> = ranklocal::RankLocal::new();
/// counts.get().set(1);
/// ```
/// ```
/// // the owner-only twin: the calling thread's own instance, never another thread's
/// let counts: ranklocal::RankLocal<std::cell::Cell<u32>> = ranklocal::RankLocal::new();
/// counts.get_own().set(1);
/// assert_eq!(counts.with_own(|c| c.get()), 1);
/// ```
/// ```
/// // the thread-safe twin
/// use std::sync::atomic::{AtomicU32, Ordering};
/// let counts: ranklocal::RankLocal<AtomicU32> = ranklocal::RankLocal::new();
/// counts.get().store(1, Ordering::Relaxed);
/// assert_eq!(counts.get().load(Ordering::Relaxed), 1);
/// ```
pub struct RankLocal<T, B: Backend = Epoch> {
    /// The map, the thread-cache key and the count of live walks: what `raw`'s protections rely
    /// on, private to it.
    core: Part<raw::Core<T, B>>,
    /// The writer lock: serializes every write to the map (I16) and guards what only writers
    /// touch — claims, the sweeper's bookkeeping, the walk count. Readers never take it.
    writer: Part<Mutex<raw::Guarded<T>>>,
    /// Signalled whenever a claim ends (`init`).
    claim_ended: Part<Condvar>,
    /// Set once a debug build warned about values kept for exited ranks (`kept`).
    #[cfg(all(debug_assertions, not(ranklocal_loom)))]
    kept_warned: crate::primitive::AtomicBool,
    /// Owns `T`s (drop check; `Send` only if `T: Send`, I7) and makes `RankLocal` *invariant* in
    /// `T` (I9): `fn(T) -> T` is Send, Sync and invariant, so it adds nothing else.
    _owns: PhantomData<(T, Invariant<T>)>,
}

/// What the writer lock guards for this facade (`raw::Guarded` holds it next to what only `raw`
/// reaches): read and written only by a thread holding it (through `raw::Locked`), or through
/// `&mut`.
struct Writer {
    /// Ranks whose `init` is running (the init protocol, `init`).
    claims: Vec<Claim>,
    /// Threads waiting on `claim_ended` for a claim to end.
    claim_waiters: usize,
    /// The sweeper's bookkeeping (`reclaim`, I32).
    sweep: Sweep,
}

/// Builds an empty `RankLocal`; `const` except under loom, whose primitives are not.
#[cfg(not(all(ranklocal_loom, not(crossbeam_loom))))]
macro_rules! empty_rank_local {
    ($map:expr, $recycling:expr) => {
        $crate::rank_local::RankLocal {
            core: $crate::rank_local::raw::Core::new($map, $recycling),
            writer: $crate::primitive::Mutex::new($crate::rank_local::raw::Guarded::new(
                $crate::rank_local::Writer {
                    claims: Vec::new(),
                    claim_waiters: 0,
                    sweep: $crate::rank_local::reclaim::Sweep::NEW,
                },
            )),
            claim_ended: $crate::primitive::Condvar::new(),
            #[cfg(all(debug_assertions, not(ranklocal_loom)))]
            kept_warned: $crate::primitive::AtomicBool::new(false),
            _owns: core::marker::PhantomData,
        }
    };
}

/// Builds an empty `RankLocal` in dependent mode (`--cfg loom` without `crossbeam_loom`): `const`,
/// its parts built on first use in each loom execution ([`crate::primitive::ModelLazy`]).
#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
macro_rules! model_rank_local {
    ($recycling:literal) => {
        $crate::rank_local::RankLocal {
            core: $crate::primitive::ModelLazy::new(
                $crate::rank_local::model_core::<T, B, $recycling>,
            ),
            writer: $crate::primitive::ModelLazy::new($crate::rank_local::model_writer::<T>),
            claim_ended: $crate::primitive::ModelLazy::new($crate::primitive::Condvar::new),
            _owns: core::marker::PhantomData,
        }
    };
}

/// A dependent-mode `RankLocal`'s core ([`model_rank_local!`]).
#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
fn model_core<T, B: Backend, const RECYCLING: bool>() -> raw::Core<T, B> {
    raw::Core::new(B::empty(), RECYCLING)
}

/// A dependent-mode `RankLocal`'s writer lock ([`model_rank_local!`]).
#[cfg(all(ranklocal_loom, not(crossbeam_loom)))]
fn model_writer<T>() -> Mutex<raw::Guarded<T>> {
    Mutex::new(raw::Guarded::new(Writer {
        claims: Vec::new(),
        claim_waiters: 0,
        sweep: reclaim::Sweep::NEW,
    }))
}

// Unwind safety as the `thread_local` crate's `ThreadLocal<T: Send + UnwindSafe>`: a panic that
// unwinds out of any method leaves the map as it was or with the rank's instance published (a
// claim is released on unwind, `init`), never half-written, so observing a `RankLocal` after a
// caught panic shows no broken invariant of its own; what `T` holds is `T`'s unwind safety.
impl<T: core::panic::UnwindSafe, B: Backend> core::panic::UnwindSafe for RankLocal<T, B> {}
impl<T: core::panic::UnwindSafe, B: Backend> core::panic::RefUnwindSafe for RankLocal<T, B> {}

impl<T: Send, B: Backend> Default for RankLocal<T, B> {
    fn default() -> Self {
        Self::new()
    }
}

// after `empty_rank_local!`, which `access` uses
mod access;
mod iter;
mod kept;
mod own;
// after `own`: std `LocalKey`'s shortcuts, listed after the family they go through
mod local_key;
mod reader;
mod reclaim;
mod scoped;
