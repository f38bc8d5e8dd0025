//! The raw layer: the one place under `rank_local/` that types an instance pointer back and reads
//! through it. Every other module of `rank_local` is `#![deny(unsafe_code)]` and holds instances
//! only as references tied to the protection that keeps them alive, so the borrow checker, not a
//! comment, says how long each may be used:
//!
//! | protection | made by | what it hands out | why the instance stays alive |
//! |---|---|---|---|
//! | a pin ([`Pinned`]) | `Pinned::new` | [`Inst`]`<'pin>` from the map, its pinned cache entry or a snapshot | a sweep retires behind an epoch grace period, after storing a fresh uid (I32–I34) |
//! | the writer lock ([`Locked`]) | `Locked::new`/`try_new` | `Inst<'lock>` from [`Locked::get`] and [`Locked::publish`]; the sweep's takes | every write, retirement included, happens under it (I16, I30) |
//! | the live owner ([`LiveOwner`]) | `LiveOwner::new` on the owner's own thread | `Inst<'owner>` of its own rank; its owner cache entries | a live rank's instance is never swept (I35) |
//! | an escape | [`Inst::escaped`] | [`Escaped`], whose `&'rl T` lasts as long as the `RankLocal` is borrowed | an ESCAPED instance is kept until `&mut` or drop (I31) |
//! | a held pin ([`Reading`]) | `Reading::new` (`T: Sync + Send`), pinned at its first lookup | `&'reading T` of the map now, SCOPED | as for a pin, held until the reading drops (I32, I33, I40) |
//! | a walk ([`Walk`]) | [`Locked::walk`] | escaped `&'rl T` of a snapshot | a batch retired while the walk lives waits for it if the walk's snapshot may hold one of its instances (I31, I39) |
//! | an owner guard count ([`Held`], then [`OwnRef`]) | [`RankLocal::own_entry_ref`], [`Inst::own_ref`], [`Inst::lingering_ref`], on the instance's own thread | `&'rl T` while the guard lives | the exit work leaves a counted value to its last guard; an uncounted one is ESCAPED (I31, I41) |
//! | the gate's free list | a recycling map's exit work or last guard ([`Locked::adopt`] pops it) | the VACANT instance, re-keyed to the adopting rank | only `&mut` and the drop free a recycling map's instances, and `&mut` removals leave the list first (I42) |
//! | `&mut RankLocal` | the `&mut` methods | [`Removed`], `&mut T` | no other user exists (I6) |
//! | a grace period | a [`Batch`] whose token the collector set | [`Removed`] | no reader can still see it (I32) |
//! | the limbo | a sweep inside a read ([`Locked::defer_ready`]) | instances its thread's drain drops at the end of its outermost read | taken out of the batch queue, each taken from the limbo once (I32) |
//!
//! What a protection cannot know — that a rank handed to the sweep has exited (I36), that a gate
//! entry is its thread's own (I39) — is checked here or established by the code that makes the
//! protection, which lives here too. Removed instances travel as owned values: [`Taken`] (taken
//! by a sweep, still published) → [`Batch`] (unpublished, waiting for its grace period, kept in
//! the sweep's queue) → [`Removed`] (no reader left) → dropped ([`Removed::drop_all`]).
//!
//! One file per protection: `pinned.rs` (a pin), `locked.rs` (the writer lock, what it guards,
//! the sweep), `owner.rs` (the live owner and its cache entries), `walk.rs` (a walk), `removed.rs`
//! (`&mut` access and removed instances), `reading.rs` (a held pin), `own_ref.rs` (an owner
//! guard count), `gate.rs` (the gate), `limbo.rs` (the limbo); `instance.rs` is the allocation.
//! This file keeps what they share: the core, [`Inst`] and [`Escaped`].

// The one module of `rank_local` where `unsafe` is allowed.
#![allow(unsafe_code)]

mod gate;
mod instance;
mod limbo;
mod locked;
mod own_ref;
mod owner;
mod pinned;
mod reading;
mod removed;
mod walk;

use core::any::Any;
use core::marker::PhantomData;

use super::{fresh_uid, RankLocal};
use crate::backend::Backend;
use crate::cache;
use crate::erased::Erased;
use crate::identity;
use crate::primitive::{lock, Arc, AtomicU64, AtomicUsize, Mutex, Ordering};

pub(super) use self::instance::{check_not_dropping, drop_payload, is_dropping};
use self::instance::{InstancePtr, Meta, ESCAPED, LINGERING, OWNED, SCOPED};
use self::locked::Tracks;
pub(super) use self::locked::{Guarded, Locked};
pub(super) use self::own_ref::Held;
pub use self::own_ref::OwnRef;
pub(super) use self::owner::{LiveOwner, OwnerTag};
pub(super) use self::pinned::Pinned;
pub(super) use self::reading::Reading;
use self::removed::{Batch, Taken};
pub(super) use self::removed::{Removed, ValuesMut};
pub(super) use self::walk::Walk;

/// How a first touch hands its instance out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::rank_local) enum Access {
    /// As a plain `&T` (`get` and friends): the instance is ESCAPED, kept until `&mut` (I31).
    Escaped,
    /// To a closure (`with`) on the live owner's thread: the instance stays SCOPED, and needs no
    /// pin while the thread runs (I35).
    Owner,
    /// To a closure (`with`) of any other thread: SCOPED, protected by a pin until the closure
    /// returns (I33).
    Scoped,
    /// To a closure (`with_own`) on the live owner's thread: OWNED, dropped by the thread's exit
    /// work unless another access moves it on first (I39).
    Own,
}
use self::limbo::Limbo;

/// A panic payload, kept to re-raise at an explicit reclamation call.
pub(super) type Payload = Box<dyn Any + Send>;

// SAFETY: `&RankLocal` lets any thread create an instance that another thread later drops or
// moves out, hence `T: Send`; every method that can hand a `&T` to another thread than the
// instance's owner's requires `T: Sync` itself ([`SyncValue`](super::SyncValue)), and the
// `T: Send` ones reach only the calling OS thread's own instance (I7, I39). The other fields are
// `Sync`.
unsafe impl<T: Send, B: Backend> Sync for RankLocal<T, B> {}

/// What a `RankLocal` holds that the protections here rely on, private to this module: the map
/// (I1, I5, I16), the thread-cache key (I4), the live walks (I31, I39).
pub(super) struct Core<T, B: Backend> {
    /// rank → instance (I1, I5).
    map: B::Map,
    /// The thread-cache key (I4); [`cache::NO_UID`] until first used, replaced when an instance
    /// is removed; never 0.
    uid: cache::AtomicUid,
    /// The numbers of the walks (`Iter`s) alive, ascending (I31, I39): a batch retired at walk
    /// count `r` whose oldest instance was published at walk count `b` may be in the snapshot of
    /// a live walk numbered in `b + 1..=r`, and is not freed while one lives. Pushed under the
    /// writer lock by [`Locked::walk`] (numbers grow under that lock, so the list stays sorted),
    /// removed by the walk's drop, on any thread.
    walking: Mutex<Vec<u64>>,
    /// Instances a sweep unpublished and nobody freed yet (queued batches, I32): counted by
    /// `len`, so that what waits for a grace period or a later call shows.
    retired: AtomicUsize,
    /// Where a sweep inside a read puts the batches it found ready, for the thread to drop at the
    /// end of its outermost read (or any call outside every read); made on first use.
    limbo: Mutex<Option<Arc<Limbo>>>,
    /// The largest rank id this map ever inserted (0 while none), never lowered: a rank above
    /// it has no entry unless a first touch inserted it since the load. A hint for a first touch
    /// by id, which then skips the lookup before its claim (the writer lock's re-check finds
    /// what was inserted meanwhile); a stale value costs one lookup more or less, never a
    /// wrong answer. Written under the writer lock.
    max_rank: AtomicU64,
    /// `RankLocal::recycling()`: an ended rank's owner-only value stays, for a new rank to adopt
    /// (I42); no exit is watched, so nothing is swept.
    recycling: bool,
    /// Typed for its `RankLocal`'s `T`: a core cannot be moved to a `RankLocal` of another `T`.
    _t: PhantomData<fn(T) -> T>,
}

impl<T, B: Backend> Core<T, B> {
    /// A `RankLocal`'s empty core; `const` except under loom, whose primitives are not.
    #[cfg(not(ranklocal_loom))]
    pub(super) const fn new(map: B::Map, recycling: bool) -> Self {
        Core {
            map,
            uid: cache::AtomicUid::new(cache::NO_UID),
            walking: Mutex::new(Vec::new()),
            retired: AtomicUsize::new(0),
            limbo: Mutex::new(None),
            max_rank: AtomicU64::new(0),
            recycling,
            _t: PhantomData,
        }
    }

    /// A `RankLocal`'s empty core (loom's primitives cannot be built in a `const`).
    #[cfg(ranklocal_loom)]
    pub(super) fn new(map: B::Map, recycling: bool) -> Self {
        Core {
            map,
            uid: cache::AtomicUid::new(cache::NO_UID),
            walking: Mutex::new(Vec::new()),
            retired: AtomicUsize::new(0),
            limbo: Mutex::new(None),
            max_rank: AtomicU64::new(0),
            recycling,
            _t: PhantomData,
        }
    }

    /// Number of entries in the map.
    pub(super) fn len(&self) -> usize {
        B::len(&self.map)
    }

    /// Number of instances not freed yet: the map's entries, and the ones sweeps unpublished that
    /// wait for their grace period, for a walk, or for a call that frees them.
    pub(super) fn kept(&self) -> usize {
        // The map first: a sweep counts what it retires before it unpublishes it, so a count taken
        // meanwhile counts it twice rather than not at all. Relaxed: a count, ordering nothing.
        let in_map = self.len();
        let limbo = lock(&self.limbo).as_ref().map_or(0, |l| l.kept());
        in_map + self.retired.load(Ordering::Relaxed) + limbo
    }

    /// `true` if no entry of this map can have `rank`: it is above every rank id the map ever
    /// inserted, as far as this thread has seen. A first touch of such a rank (a new rank's:
    /// rank ids are drawn in increasing order) takes the writer lock at once, whose re-check
    /// serves one inserted meanwhile.
    #[inline]
    pub(super) fn above_every_rank(&self, rank: u64) -> bool {
        // Relaxed: a hint; the writer lock's re-check decides.
        rank > self.max_rank.load(Ordering::Relaxed)
    }

    /// Records that the writer inserts `rank` (under the writer lock).
    #[inline]
    fn inserting(&self, rank: u64) {
        // Relaxed: a hint (`above_every_rank`); only the writer, under its lock, writes it.
        if rank > self.max_rank.load(Ordering::Relaxed) {
            self.max_rank.store(rank, Ordering::Relaxed);
        }
    }

    /// The limbo, if made.
    fn limbo(&self) -> Option<Arc<Limbo>> {
        lock(&self.limbo).clone()
    }

    /// The ranks with an entry, from one snapshot.
    pub(super) fn ranks(&self) -> Vec<u64> {
        B::iter(&self.map).map(|(rank, _)| rank).collect()
    }
}

/// Whose values a lookup may hand to the calling thread: any rank's ([`AnyRank`], `T: Sync`) or
/// only the thread's own ([`OwnRank`], for the owner-only family). A type parameter, not a
/// function pointer, so that each lookup is compiled for one of them.
pub(super) trait Reach<T, B: Backend> {
    /// [`Inst::escaped`] or [`Inst::escaped_own`].
    fn escaped<'a>(i: Inst<'_, 'a, T, B>) -> Option<Escaped<'a, T, B>>;
    /// [`Inst::scope`] or [`Inst::scope_own`].
    fn scope<'g>(i: Inst<'g, '_, T, B>) -> Option<&'g T>;
}

/// Any rank's value: `T: Sync`.
pub(super) struct AnyRank;

/// The calling thread's own rank's value only.
pub(super) struct OwnRank;

impl<T: Sync, B: Backend> Reach<T, B> for AnyRank {
    #[inline]
    fn escaped<'a>(i: Inst<'_, 'a, T, B>) -> Option<Escaped<'a, T, B>> {
        i.escaped()
    }
    #[inline]
    fn scope<'g>(i: Inst<'g, '_, T, B>) -> Option<&'g T> {
        i.scope()
    }
}

impl<T, B: Backend> Reach<T, B> for OwnRank {
    #[inline]
    fn escaped<'a>(i: Inst<'_, 'a, T, B>) -> Option<Escaped<'a, T, B>> {
        i.escaped_own()
    }
    #[inline]
    fn scope<'g>(i: Inst<'g, '_, T, B>) -> Option<&'g T> {
        i.scope_own()
    }
}

/// One instance of the map of `rl`, alive for `'g` (the borrow of the protection it came from),
/// in a `RankLocal` borrowed for `'rl`. Only this module makes one. Not `Send`: a protection is
/// this thread's.
pub(super) struct Inst<'g, 'rl, T, B: Backend> {
    p: InstancePtr<T>,
    meta: &'g Meta,
    rank: u64,
    rl: &'rl RankLocal<T, B>,
}

impl<T, B: Backend> Clone for Inst<'_, '_, T, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, B: Backend> Copy for Inst<'_, '_, T, B> {}

impl<'g, 'rl, T, B: Backend> Inst<'g, 'rl, T, B> {
    /// Types back `p`, an entry of `rl`'s map for `rank`.
    ///
    /// # Safety
    /// - `p` is an instance of `rl`'s map (I5), here from a slot, snapshot or cache entry of it;
    /// - the caller's protection keeps it allocated for `'g` (the table in the module docs).
    #[inline]
    unsafe fn new(rl: &'rl RankLocal<T, B>, rank: u64, p: Erased) -> Self {
        let p = InstancePtr::new(p);
        Inst {
            p,
            // SAFETY: the caller's contract.
            meta: unsafe { p.meta() },
            rank,
            rl,
        }
    }

    /// The rank whose instance this is.
    pub(super) fn rank(self) -> u64 {
        self.rank
    }

    /// The state machine (I30, I31, I39).
    fn meta(self) -> &'g Meta {
        self.meta
    }

    /// Marks the instance ESCAPED (I31): from here on it is kept while the `RankLocal` is
    /// borrowed, whatever protection found it; `None` if it is being reclaimed or a tombstone.
    /// Any rank's value may reach this thread so: `T: Sync` (I7).
    #[inline]
    pub(super) fn escaped(self) -> Option<Escaped<'rl, T, B>>
    where
        T: Sync,
    {
        self.escape_any()
    }

    /// [`escaped`](Self::escaped) for the calling thread's own rank, which needs no `T: Sync`
    /// (I7, I39); `None` for any other rank's instance.
    #[inline]
    pub(super) fn escaped_own(self) -> Option<Escaped<'rl, T, B>> {
        if self.rank != identity::own_raw() {
            return None;
        }
        let e = self.escape_any()?;
        // Still this thread's: not adopted by another rank since its lookup (I42; the CAS above
        // ordered an adoption's owner write before this read).
        (self.meta.owner() == self.rank).then_some(e)
    }

    #[inline]
    fn escape_any(self) -> Option<Escaped<'rl, T, B>> {
        self.meta.escape().then_some(Escaped {
            p: self.p,
            rank: self.rank,
            rl: self.rl,
        })
    }

    /// Makes the instance usable by a scoped reader (OWNED moves on to SCOPED) and lends its
    /// value for `'g`; `None` if it is being reclaimed or a tombstone (I30, I39). Any rank's
    /// value may reach this thread so: `T: Sync` (I7).
    #[inline]
    pub(super) fn scope(self) -> Option<&'g T>
    where
        T: Sync,
    {
        self.scope_any()
    }

    /// [`scope`](Self::scope) for the calling thread's own rank, which needs no `T: Sync` (I7,
    /// I39); `None` for any other rank's instance.
    #[inline]
    pub(super) fn scope_own(self) -> Option<&'g T> {
        if self.rank != identity::own_raw() {
            return None;
        }
        let v = self.scope_any()?;
        // Still this thread's: not adopted by another rank since its lookup (I42; the state load
        // or CAS above ordered an adoption's owner write before this read).
        (self.meta.owner() == self.rank).then_some(v)
    }

    #[inline]
    fn scope_any(self) -> Option<&'g T> {
        if !self.meta.scope() {
            return None;
        }
        // SAFETY: alive for `'g`; SCOPED or ESCAPED, whose value is never moved out (I39); a `T`
        // of this map (I5, I9).
        Some(unsafe { self.p.value() })
    }

    /// The value as the owner-only family uses it, on the instance's own OS thread: an OWNED
    /// value is used as it is (its exit work runs on this thread, never during this use); `None`
    /// for a tombstone or an instance being reclaimed (I39).
    pub(super) fn own(self) -> Option<&'g T> {
        if self.rank != identity::own_raw() {
            return None; // not this thread's own: only `scope`/`escape` may use it
        }
        let st = self.meta.state();
        // ... and still this thread's: not adopted by another rank since its lookup (I42).
        if !matches!(st, SCOPED | ESCAPED | OWNED) || self.meta.owner() != self.rank {
            return None;
        }
        // SAFETY: alive for `'g`; SCOPED or ESCAPED (never moved out), or OWNED, whose value
        // only this thread's exit work moves out, which does not run while this thread uses it
        // (I39); a `T` of this map (I5, I9).
        Some(unsafe { self.p.value() })
    }

    /// A counted [`OwnRef`] of the calling thread's own instance (`None` for another rank's, a
    /// tombstone, or one being reclaimed), lasting as long as the `RankLocal` is borrowed: an
    /// OWNED or LINGERING instance stays in place while counted (its exit work, or its last guard,
    /// drops it, I41); any other is escaped first and kept (I31), its count unused.
    pub(super) fn own_ref(self) -> Option<Held<'rl, T>> {
        if self.rank != identity::own_raw() {
            return None;
        }
        if !matches!(self.meta.state(), OWNED | LINGERING) {
            self.escape_any()?;
        }
        if self.meta.owner() != self.rank {
            return None; // adopted by another rank since its lookup (I42)
        }
        // SAFETY: this thread's own instance (checked above), so this thread alone touches its
        // guard count (I41). The count keeps the value in place for `'rl`: an OWNED instance is in
        // the gate until its exit work, which leaves a counted instance to its last guard
        // (LINGERING) or, if a reader moved it on meanwhile, keeps it (ESCAPED); a LINGERING one
        // moves only by its last guard's drop; an ESCAPED one is kept; `&mut` and the drop are
        // excluded by the `'rl` borrow (I31, I41). A reader's CAS racing the load above only moves
        // OWNED on, which the exit work then sees with the count (I41).
        Some(unsafe {
            self.meta.hold();
            Held::new(self.p)
        })
    }

    /// An [`OwnRef`] of the calling thread's own instance if it is LINGERING (its exit work left
    /// it to the last guard, I41): what the owner-only family uses past the exit hook instead of
    /// the bare value, so that a guard dropped inside the closure cannot drop it under it.
    pub(super) fn lingering_ref(self) -> Option<Held<'rl, T>> {
        if self.rank != identity::own_raw() || self.meta.state() != LINGERING {
            return None;
        }
        // SAFETY: this thread's own LINGERING instance: only this thread touches its count, and
        // only its last guard's drop moves its value out (I41).
        Some(unsafe {
            self.meta.hold();
            Held::new(self.p)
        })
    }

    /// `true` if the instance was handed out as `&T`: ESCAPED (an `iter()` marks what it yields,
    /// I31).
    pub(super) fn handed_out(self) -> bool {
        self.meta.state() == ESCAPED
    }

    /// The erased pointer, for the gate, the sweep and the cache fills made here.
    fn erased(self) -> Erased {
        self.p.erased()
    }
}

/// An instance this thread marked ESCAPED ([`Inst::escaped`]): kept until `&mut` or the drop,
/// so valid while the `RankLocal` is borrowed for `'rl`, with no other protection (I31).
pub(super) struct Escaped<'rl, T, B: Backend> {
    p: InstancePtr<T>,
    rank: u64,
    rl: &'rl RankLocal<T, B>,
}

impl<'rl, T, B: Backend> Escaped<'rl, T, B> {
    /// The value, for as long as the `RankLocal` is borrowed.
    #[inline]
    pub(super) fn value(self) -> &'rl T {
        // SAFETY: ESCAPED: kept until `&mut` or drop, which the `'rl` borrow excludes (I31); an
        // ESCAPED value is never moved out (I39); a `T` of this map (I5, I9).
        unsafe { self.p.value() }
    }
}

impl<'rl, T: Send, B: Backend> Escaped<'rl, T, B> {
    /// [`value`](Self::value), and the thread cache remembers it for the rank (if the backend
    /// caches such lookups): a later `get` of the rank hits.
    #[inline]
    pub(super) fn cached(self) -> &'rl T {
        if RankLocal::<T, B>::uses_thread_cache(self.rank) {
            // I4: an ESCAPED instance of this map, under its current uid. The thread's own rank
            // is always kept; another rank's lookup leaves a churning set alone (a scan).
            let uid = self.rl.uid_or_assign();
            if self.rank == identity::own_raw() {
                cache::store(uid, self.rank, self.p.erased());
            } else {
                cache::store_unless_churning(uid, self.rank, self.p.erased());
            }
        }
        self.value()
    }
}

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// The uid, drawing one on first use (it is [`cache::NO_UID`] until then). Relaxed
    /// everywhere: uids carry no data, they only have to be unique.
    pub(crate) fn uid_or_assign(&self) -> cache::Uid {
        let uid = self.core.uid.load(Ordering::Relaxed);
        if uid != cache::NO_UID {
            return uid;
        }
        let fresh = fresh_uid();
        match self.core.uid.compare_exchange(
            cache::NO_UID,
            fresh,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => fresh,
            Err(current) => current,
        }
    }

    /// Test-only: an empty `RankLocal` with the given uid (unique: drawn by [`fresh_uid`]).
    #[cfg(all(test, not(ranklocal_loom)))]
    pub(crate) fn with_uid(uid: cache::Uid) -> Self {
        let rl = Self::new();
        rl.core.uid.store(uid, Ordering::Relaxed);
        rl
    }

    /// The thread cache's escaped entry for `rank` (step 1 of a lookup). Any rank's value may
    /// reach this thread so: `T: Sync` (I7).
    #[inline]
    pub(super) fn cached(&self, rank: u64) -> Option<&T>
    where
        T: Sync,
    {
        if !Self::uses_thread_cache(rank) {
            return None;
        }
        // Relaxed: the uid is only a name; the pointer's validity was established by this
        // thread's own Acquire when it filled the entry (I4).
        let uid = self.core.uid.load(Ordering::Relaxed);
        let p = cache::lookup(uid, rank)?;
        // SAFETY: a hit for this `RankLocal`'s current uid is one of its published, ESCAPED
        // instances (I4, I5: only `Escaped::cached` fills such entries), valid for the
        // `&self` borrow and never mutably aliased (I1); it is a `T` of exactly this type,
        // lifetimes included, since `RankLocal` is invariant in `T` (I9).
        Some(unsafe { InstancePtr::<T>::new(Erased::from_non_null(p)).value() })
    }

    /// `rank`'s instance, escaped inside the backend lookup's own protection (one pin on `Epoch`
    /// and `ArcSwap`, the read lock on `Baseline`), which keeps it alive from the map load to
    /// the escape (I33); `None` if absent, being reclaimed or a tombstone.
    #[inline]
    pub(super) fn lookup_escaped<R: Reach<T, B>>(&self, rank: u64) -> Option<&T> {
        let escaped = B::get_with(&self.core.map, rank, |p| {
            // SAFETY: an instance of this map, protected while this closure runs (I33); the
            // `Inst` does not leave the closure, only what its escape makes.
            R::escaped(unsafe { Inst::new(self, rank, p) })
        })??;
        Some(escaped.cached())
    }
}
