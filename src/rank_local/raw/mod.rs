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

// The one module of `rank_local` where `unsafe` is allowed.
#![allow(unsafe_code)]

mod gate;
mod instance;
mod limbo;
mod own_ref;
mod reading;

use core::any::Any;
use core::marker::PhantomData;
use std::collections::VecDeque;

use super::{fresh_uid, RankLocal, Writer};
use crate::backend::Backend;
use crate::cache;
use crate::collector::{self, Pin};
use crate::erased::Erased;
use crate::fifo::Fifo;
use crate::identity::{self, Inbox};
use crate::primitive::{lock, try_lock, Arc, AtomicBool, AtomicUsize, Mutex, MutexGuard, Ordering};

use self::gate::Gate;
pub(super) use self::instance::{check_not_dropping, drop_payload, is_dropping};
use self::instance::{InstancePtr, Meta, ESCAPED, LINGERING, OWNED, SCOPED};
pub(super) use self::own_ref::Held;
pub use self::own_ref::OwnRef;
pub(super) use self::reading::Reading;

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
    /// `RankLocal::recycling()`: an ended rank's owner-only value stays, for a new rank to adopt
    /// (I42); no exit is watched, so nothing is swept.
    recycling: bool,
    /// Typed for its `RankLocal`'s `T`: a core cannot be moved to a `RankLocal` of another `T`.
    _t: PhantomData<fn(T) -> T>,
}

impl<T, B: Backend> Core<T, B> {
    /// A `RankLocal`'s empty core; `const` except under loom, whose primitives are not.
    #[cfg(not(loom))]
    pub(super) const fn new(map: B::Map, recycling: bool) -> Self {
        Core {
            map,
            uid: cache::AtomicUid::new(cache::NO_UID),
            walking: Mutex::new(Vec::new()),
            retired: AtomicUsize::new(0),
            limbo: Mutex::new(None),
            recycling,
            _t: PhantomData,
        }
    }

    /// A `RankLocal`'s empty core (loom's primitives cannot be built in a `const`).
    #[cfg(loom)]
    pub(super) fn new(map: B::Map, recycling: bool) -> Self {
        Core {
            map,
            uid: cache::AtomicUid::new(cache::NO_UID),
            walking: Mutex::new(Vec::new()),
            retired: AtomicUsize::new(0),
            limbo: Mutex::new(None),
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

    /// The limbo, if made.
    fn limbo(&self) -> Option<Arc<Limbo>> {
        lock(&self.limbo).clone()
    }

    /// The ranks with an entry, from one snapshot.
    pub(super) fn ranks(&self) -> Vec<u64> {
        B::iter(&self.map).map(|(rank, _)| rank).collect()
    }
}

/// What the writer lock guards: the facade's [`Writer`] (claims, the sweep's timing), which a
/// [`Locked`] derefs to, and this module's [`Tracks`], which only its methods reach.
pub(super) struct Guarded<T> {
    w: Writer,
    tracks: Tracks<T>,
}

impl<T> Guarded<T> {
    /// What an empty `RankLocal`'s writer lock guards.
    pub(super) const fn new(w: Writer) -> Self {
        Guarded {
            w,
            tracks: Tracks::NEW,
        }
    }
}

/// What the writer lock guards that the protections here rely on, private to this module: the walk
/// count, the gate, and the sweep's inbox of exited ranks and queue of retired batches.
struct Tracks<T> {
    /// How many times `iter` took a snapshot (I31): an instance published at a lower count may
    /// be in an iterator's snapshot, and counts as escaped. Each instance records the count it
    /// was published at, so `iter` marks nothing: O(1) under the lock.
    walks: u64,
    /// Shared with the exit hooks of threads that have an OWNED instance here; made by the first
    /// `with_own` first touch (I39).
    gate: Option<Arc<Gate>>,
    /// Where the exits of ranks with a scoped or owner-only instance here are delivered; made by
    /// the first such first touch (I36). The sweep takes only what it delivers: exited ranks.
    inbox: Option<Arc<Inbox>>,
    /// Unpublished instances waiting for their grace period (I32), by ascending serial.
    batches: Fifo<Batch>,
    /// The serial of the next batch.
    next_serial: u64,
    /// The queue length at which taking the ready batches scans them all, not just the front.
    scan_at: usize,
    /// Typed for its `RankLocal`'s `T`: its batches are that `T`'s instances.
    _t: PhantomData<fn(T) -> T>,
}

impl<T> Tracks<T> {
    const NEW: Tracks<T> = Tracks {
        walks: 0,
        gate: None,
        inbox: None,
        batches: Fifo::NEW,
        next_serial: 0,
        scan_at: 8,
        _t: PhantomData,
    };

    /// Asks for `rank`'s exit, whose instance the writer just published (I36).
    fn watch_exit(&mut self, rank: u64) {
        let inbox = self.inbox.get_or_insert_with(Inbox::new);
        identity::watch_exit(rank, inbox);
    }

    /// Exits delivered and not swept yet.
    fn pending(&self) -> usize {
        self.inbox.as_ref().map_or(0, |i| i.len())
    }

    /// For the `RankLocal`'s drop: no more deliveries; the live ranks' registrations get pruned.
    fn close_inbox(&self) {
        if let Some(inbox) = &self.inbox {
            inbox.close();
        }
    }

    /// `true` while no batch waits for its grace period.
    fn no_batches(&self) -> bool {
        self.batches.is_empty()
    }

    /// The serial the next batch will get.
    fn next_serial(&self) -> u64 {
        self.next_serial
    }

    /// `true` while a batch with a serial below `upto` is queued, unless it only waits for a
    /// walk (ready, but a live `Iter` in `walking` may hold it: an `Iter` may be held for ever).
    /// A batch that became ready since the caller's [`take_ready`](Self::take_ready) (the
    /// collector marks batches ready without the writer lock) still holds: the caller takes it
    /// next round.
    fn graces_before(&self, upto: u64, walking: &[u64]) -> bool {
        self.batches
            .iter()
            .take_while(|b| b.serial < upto)
            .any(|b| !(b.is_ready() && b.held_by(walking)))
    }

    /// Takes out the batches whose grace period passed (I32) and that no live walk may hold
    /// (`walking`, the live walks' numbers, ascending; I31, I39), in amortized O(1) per batch:
    /// the collector runs deferred closures roughly in the order they were deferred, so the
    /// front is checked every time and the rest only once the queue has doubled since the last
    /// scan.
    fn take_ready(&mut self, walking: &[u64]) -> Vec<Batch> {
        let free = |b: &Batch| b.is_ready() && !b.held_by(walking);
        let mut out = Vec::new();
        while self.batches.front().map_or(false, free) {
            out.extend(self.batches.pop_front());
        }
        if self.batches.len() >= self.scan_at {
            crate::counters::bump!(BATCH_SCANS);
            let (now, later): (VecDeque<Batch>, VecDeque<Batch>) =
                self.batches.take_all().into_iter().partition(free);
            out.extend(now);
            self.batches = later.into();
            self.scan_at = (2 * self.batches.len()).max(8);
        }
        out
    }

    /// `true` while tombstones wait for a sweep to unpublish them (I39).
    fn has_tombs(&self) -> bool {
        self.gate.as_ref().map_or(false, |g| g.has_tombs())
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
            // I4: an ESCAPED instance of this map, under its current uid.
            cache::store(self.rl.uid_or_assign(), self.rank, self.p.erased());
        }
        self.value()
    }
}

/// A pin of the crate's collector, taken for lookups of one `RankLocal` (I33): the instances
/// found under it stay alive while it is held.
pub(super) struct Pinned<'rl, T: Send, B: Backend> {
    rl: &'rl RankLocal<T, B>,
    /// The uid loaded after the pin ([`Pinned::for_lookup`]), or [`cache::NO_UID`].
    uid: cache::Uid,
    pin: Pin,
}

impl<'rl, T: Send, B: Backend> Pinned<'rl, T, B> {
    /// Pins, for a visit of the map's snapshot (no cache use); counts the pin as a slow path's.
    pub(super) fn new(rl: &'rl RankLocal<T, B>) -> Self {
        let pin = collector::pin();
        collector::count_pin(&pin);
        Pinned {
            rl,
            uid: cache::NO_UID,
            pin,
        }
    }

    /// Pins, then loads the uid (I34): the pinned cache entries of that uid are alive while the
    /// pin is held. Does not count the pin: a hit is the fast part of a scoped lookup.
    #[inline]
    pub(super) fn for_lookup(rl: &'rl RankLocal<T, B>) -> Self {
        rl.uid_or_assign(); // non-zero from now on, so fills never use 0
        let pin = collector::pin();
        // SeqCst, after the pin's SeqCst fence: a sweeper that stored a fresh uid before
        // retiring something this pin does not protect is seen here (I34).
        let uid = rl.core.uid.load(Ordering::SeqCst);
        Pinned { rl, uid, pin }
    }

    /// Counts the pin as a slow path's (a lookup that missed the cache).
    #[inline]
    pub(super) fn count(&self) {
        collector::count_pin(&self.pin);
    }

    /// `rank`'s instance in the map.
    #[inline]
    pub(super) fn get(&self, rank: u64) -> Option<Inst<'_, 'rl, T, B>> {
        let p = B::get(&self.rl.core.map, rank)?;
        // SAFETY: an instance of this map, loaded under this pin: a sweep that unpublishes it
        // retires it behind a grace period that waits for the pin (I32, I33).
        Some(unsafe { Inst::new(self.rl, rank, p) })
    }

    /// A scoped lookup of `rank` (I33, I34): the thread cache's pinned entry for the uid loaded
    /// after the pin, else the map (counting the pin as a slow path's), moving an OWNED instance
    /// on to SCOPED (I39); a hit in the map is remembered as the pinned entry. The value is lent
    /// for as long as the pin is borrowed.
    #[inline(always)] // once, in `with_pinned`: keeps the scoped hit as short as a plain one
    pub(super) fn lookup(&self, rank: u64) -> Option<&T>
    where
        T: Sync,
    {
        // No cache without the uid loaded after the pin (a `Pinned::new`, for visits).
        let cacheable = self.uid != cache::NO_UID && RankLocal::<T, B>::uses_thread_cache(rank);
        if cacheable {
            if let Some(p) = cache::lookup(self.uid, rank | cache::PINNED_TAG) {
                // SAFETY: a pinned entry of the uid current after this pin holds an instance of
                // this map (I34, I5) published when the uid was current: a sweep stores a fresh
                // uid before it retires, so what it retires waits for this pin (I32, I34). Only
                // a scoped instance is stored (below), and a SCOPED or ESCAPED value is never moved
                // out (I39); a `T` of this map (I5, I9).
                return Some(unsafe { InstancePtr::<T>::new(Erased::from_non_null(p)).value() });
            }
        }
        self.count(); // a miss: the slow part of a scoped lookup
        crate::counters::bump!(SCOPED_MAP_LOOKUPS);
        let i = self.get(rank)?;
        // being reclaimed, or a tombstone: gone (I30, I39)
        let v = i.scope()?;
        if cacheable {
            cache::store(self.uid, rank | cache::PINNED_TAG, i.erased());
        }
        Some(v)
    }

    /// Every instance of one snapshot, loaded under this pin.
    pub(super) fn iter(&self) -> impl Iterator<Item = Inst<'_, 'rl, T, B>> + '_ {
        B::iter(&self.rl.core.map).map(|(rank, p)| {
            // SAFETY: an instance of this map, in a snapshot loaded under this pin (I32, I33).
            unsafe { Inst::new(self.rl, rank, p) }
        })
    }
}

/// The writer lock, held: what it guards ([`Writer`]) and the writer's view of the map (I16).
pub(super) struct Locked<'rl, T: Send, B: Backend> {
    rl: &'rl RankLocal<T, B>,
    w: MutexGuard<'rl, Guarded<T>>,
}

impl<T: Send, B: Backend> core::ops::Deref for Locked<'_, T, B> {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.w.w
    }
}

impl<T: Send, B: Backend> core::ops::DerefMut for Locked<'_, T, B> {
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.w.w
    }
}

impl<'rl, T: Send, B: Backend> Locked<'rl, T, B> {
    /// Takes the writer lock.
    pub(super) fn new(rl: &'rl RankLocal<T, B>) -> Self {
        Locked {
            rl,
            w: lock(&rl.writer),
        }
    }

    /// Takes the writer lock if it is free.
    pub(super) fn try_new(rl: &'rl RankLocal<T, B>) -> Option<Self> {
        Some(Locked {
            rl,
            w: try_lock(&rl.writer)?,
        })
    }

    /// The `RankLocal` this lock belongs to.
    pub(super) fn rl(&self) -> &'rl RankLocal<T, B> {
        self.rl
    }

    /// `true` while tombstones wait for a sweep to unpublish them (I39).
    pub(super) fn has_tombs(&self) -> bool {
        self.w.tracks.has_tombs()
    }

    /// Asks for `rank`'s exit, whose instance this writer just published (I36).
    pub(super) fn watch_exit(&mut self, rank: u64) {
        if self.rl.core.recycling {
            return; // values outlive their rank: nothing to sweep (I42)
        }
        self.w.tracks.watch_exit(rank);
    }

    /// A recycling `RankLocal`'s first touch of `rank` (absent, claimed by nobody): adopts the
    /// most recently ended rank's VACANT value instead of running `init` (I42) — VACANT → the
    /// state `access` publishes, the same allocation unpublished under its ended rank and
    /// published under `rank`. `None` if there is none (entries a reader moved on are skipped).
    pub(super) fn adopt(&self, rank: u64, access: Access) -> Option<Inst<'_, 'rl, T, B>> {
        if !self.rl.core.recycling || self.get(rank).is_some() {
            return None;
        }
        let gate = self.w.tracks.gate.as_ref()?;
        loop {
            let (old, p) = lock(&gate.inner).free.pop()?;
            // SAFETY: an entry of the gate's free list is an instance of this map, published
            // under `old`, alive: only `&mut` access or the drop frees a VACANT instance, and
            // they take it out of the free list first; the writer lock serializes this with every
            // other adoption (I42).
            let i = unsafe { Inst::new(self.rl, old, p) };
            let own = access == Access::Own
                && LiveOwner::new(self.rl, rank).is_some()
                && gate::add_exit_gate(gate);
            let to = match access {
                Access::Escaped => ESCAPED,
                Access::Own if own => OWNED,
                _ => SCOPED,
            };
            if !i.meta.adopt(to, rank) {
                continue; // a reader moved it on: kept under its rank (I42)
            }
            B::remove(&self.rl.core.map, &[old]);
            B::insert(&self.rl.core.map, rank, p);
            if own {
                lock(&gate.inner).owned.insert(rank, p);
            }
            return self.get(rank);
        }
    }

    /// Exits delivered and not swept yet.
    pub(super) fn pending(&self) -> usize {
        self.w.tracks.pending()
    }

    /// `true` while no batch waits for its grace period.
    pub(super) fn no_batches(&self) -> bool {
        self.w.tracks.no_batches()
    }

    /// The serial the next batch will get.
    pub(super) fn next_serial(&self) -> u64 {
        self.w.tracks.next_serial()
    }

    /// `true` while a batch with a serial below `upto` waits for its grace period; one that only
    /// waits for a walk (an `Iter` still alive) does not count.
    pub(super) fn graces_before(&self, upto: u64) -> bool {
        let walking = lock(&self.rl.core.walking);
        self.w.tracks.graces_before(upto, &walking)
    }

    /// For a sweep inside a read (this thread holds a pin): moves the batches whose grace period
    /// passed and that no live walk may hold to the limbo, which this thread drains at the end of
    /// its outermost read (I32). Nothing is dropped here.
    pub(super) fn defer_ready(&mut self) {
        if self.w.tracks.no_batches() {
            return;
        }
        let (_, removed) = self.take_ready();
        if removed.len() == 0 {
            return;
        }
        let limbo = lock(&self.rl.core.limbo)
            .get_or_insert_with(|| Limbo::new::<T>(self.rl as *const _ as usize))
            .clone();
        Limbo::defer(&limbo, removed);
    }

    /// For a call outside every read: what waits in the limbo (to drop after the lock is
    /// released), and, if `panic`, the `T::drop` panic a drain kept.
    pub(super) fn take_deferred(&mut self, panic: bool) -> (Removed<T>, Option<Payload>) {
        let (entries, panic) = self
            .rl
            .core
            .limbo()
            .map(|l| l.take(false, panic))
            .unwrap_or_default();
        (self.rl.removed(entries), panic)
    }

    /// `true` while another thread's drain drops instances it took from the limbo.
    pub(super) fn deferred_in_flight(&self) -> bool {
        self.rl.core.limbo().map_or(false, |l| l.in_flight())
    }

    /// Takes out the batches whose grace period passed (I32) and that no live walk may hold
    /// (I31, I39): their serials, and their instances to drop after the lock is released.
    pub(super) fn take_ready(&mut self) -> (Vec<u64>, Removed<T>) {
        let ready = {
            // Walks end on any thread; the mutex orders a walk's last read of an instance before
            // the removal of its number, and that before this check (I31, I39).
            let walking = lock(&self.rl.core.walking);
            self.w.tracks.take_ready(&walking)
        };
        let serials = ready.iter().map(Batch::serial).collect();
        let entries: Vec<_> = ready.into_iter().flat_map(|b| b.entries).collect();
        // Relaxed: a count (see `Core::kept`).
        self.rl
            .core
            .retired
            .fetch_sub(entries.len(), Ordering::Relaxed);
        (serials, self.rl.removed(entries))
    }

    /// Waits on `cv` (the lock is released meanwhile).
    pub(super) fn wait(self, cv: &crate::primitive::Condvar) -> Self {
        Locked {
            rl: self.rl,
            w: crate::primitive::wait(cv, self.w),
        }
    }

    /// `rank`'s instance, as the map's only writer sees it: no pin, no lock of the backend's.
    #[inline]
    pub(super) fn get(&self, rank: u64) -> Option<Inst<'_, 'rl, T, B>> {
        // SAFETY:
        // - `get_by_writer`: under the writer lock, which serializes every write to the map (I16);
        // - `Inst::new`: an instance of this map, in it under the writer lock: no write
        //   unpublishes it and no retirement starts its grace period while the lock is held, and
        //   the borrow of `self` ends before any `&mut self` method (which may unpublish) runs
        //   (I16, I30, I32).
        unsafe { B::get_by_writer(&self.rl.core.map, rank).map(|p| Inst::new(self.rl, rank, p)) }
    }

    /// `rank`'s instance, looked up under this lock and kept alive by `pin`: the pin exists while
    /// the lock is held, and what the map holds now is not retired before the lock is released,
    /// so its grace period, if it is ever retired, waits for `pin` (I32, I33).
    pub(super) fn protect<'p>(
        &self,
        rank: u64,
        pin: &'p Pinned<'rl, T, B>,
    ) -> Option<Inst<'p, 'rl, T, B>> {
        assert!(core::ptr::eq(pin.rl, self.rl));
        let p = self.get(rank)?.erased();
        // SAFETY: as just said; an instance of this map (I5).
        Some(unsafe { Inst::new(self.rl, rank, p) })
    }

    /// Publishes `value` as `rank`'s instance, in the state `access` asks for, at the current walk
    /// count (I2, I31): into the rank's tombstone if it has one (I39), else as a new entry. The
    /// claim excludes every other first touch of `rank`.
    ///
    /// An OWNED instance (`Access::Own`) is recorded in the gate ([`make_gate`](Self::make_gate)
    /// first) and the gate in the thread's exit hook, for the thread's exit work (I39) — only if
    /// `rank` is the calling thread's own and live, and its exit hook took the gate; otherwise
    /// it is published SCOPED, and a sweep drops it after the rank exits.
    pub(super) fn publish(&self, rank: u64, value: T, access: Access) -> Inst<'_, 'rl, T, B> {
        let state = match access {
            Access::Escaped => ESCAPED,
            Access::Owner | Access::Scoped => SCOPED,
            Access::Own => OWNED,
        };
        // OWNED only for the live owner's own rank, if its exit hook takes the gate: only its
        // exit work may move an OWNED value out (I39). Otherwise SCOPED, swept after the exit.
        let own = access == Access::Own
            && LiveOwner::new(self.rl, rank).is_some()
            && gate::add_exit_gate(
                self.w
                    .tracks
                    .gate
                    .as_ref()
                    .expect("ranklocal: `make_gate` before an OWNED publish"),
            );
        let state = if access == Access::Own && !own {
            SCOPED
        } else {
            state
        };
        let i = self.publish_state(rank, value, state);
        if own {
            let gate = self.w.tracks.gate.as_ref().expect("made above");
            lock(&gate.inner).owned.insert(rank, i.erased());
        }
        i
    }

    /// The gate, made on first use (I39).
    pub(super) fn make_gate(&mut self) {
        let recycling = self.rl.core.recycling;
        self.w
            .tracks
            .gate
            .get_or_insert_with(|| Gate::new::<T>(recycling));
    }

    fn publish_state(&self, rank: u64, value: T, state: usize) -> Inst<'_, 'rl, T, B> {
        // Only exit work through the gate makes a tombstone, and only for an OWNED instance,
        // which is published only once the gate exists (I39): without a gate the claimed rank
        // has no entry (the claim excludes every other first touch of it), and no lookup is
        // needed to know it.
        let old = if self.w.tracks.gate.is_some() {
            self.get(rank)
        } else {
            None
        };
        let Some(old) = old else {
            let p = InstancePtr::alloc(value, state, self.w.tracks.walks, rank);
            B::insert(&self.rl.core.map, rank, p.erased());
            // The instance just inserted, not looked up again: one map descent less per first
            // touch.
            // SAFETY: `p` is now `rank`'s instance in this map (inserted just above, under the
            // writer lock, I5); as for `get`'s, no write unpublishes it and no retirement starts
            // its grace period while the lock is held, and the returned borrow of `self` ends
            // before any `&mut self` method (which may unpublish) runs (I16, I30, I32).
            return unsafe { Inst::new(self.rl, rank, p.erased()) };
        };
        let meta = old.meta;
        if meta.state() == instance::EXITING {
            // The exit work is moving the value out under the gate lock: wait for that short
            // critical section (no user code) to end.
            if let Some(g) = &self.w.tracks.gate {
                drop(lock(&g.inner));
            }
        }
        assert!(
            meta.state() != LINGERING,
            "ranklocal: {} asked for its own value on this RankLocal through a method other than \
             the owner-only family (`with_own*`, `get_own*`) after its exit work, while an OwnRef \
             of the value is still alive; use the owner-only family in thread-local destructors",
            identity::RankId::from_raw(rank)
        );
        assert_eq!(
            meta.state(),
            instance::DROPPED,
            "ranklocal: a claimed rank's entry is a tombstone"
        );
        // A refilled tombstone keeps its walk count: an `iter` since may hold it (I39).
        // SAFETY: under the writer lock, in this map and DROPPED (checked just above; the gate
        // lock ordered the exit work's move before this, and the claim excludes every other
        // first touch of `rank`, I39).
        unsafe { old.p.refill(value, state) };
        old
    }

    /// Numbers a walk, records it as live and hands out its snapshot ([`RankLocal::iter`]):
    /// every instance in it was published at a lower walk count, and a sweep that unpublishes one
    /// while the walk lives retires it at this number or later, so its batch waits for the walk
    /// (I31, I39).
    pub(super) fn walk(mut self) -> Walk<'rl, T, B>
    where
        T: Sync,
    {
        self.w.tracks.walks += 1;
        let n = self.w.tracks.walks;
        // Under the writer lock: numbers grow, so the list stays sorted; a sweep (under the same
        // lock) sees the walk from now on.
        lock(&self.rl.core.walking).push(n);
        Walk {
            inner: B::iter(&self.rl.core.map),
            live: &self.rl.core.walking,
            n,
            _t: PhantomData,
        }
    }

    /// The sweep (I30, I32, I36, I39): takes the instances of the ranks in the sweep's inbox
    /// (exited ranks: their exits were delivered there, I36), SCOPED → RECLAIMING or DROPPED →
    /// REAPED, and the tombstones exit work left (whether or not their exits arrived yet), then
    /// unpublishes them all in one write, draws a fresh uid and queues them as one batch behind an
    /// epoch grace period and the live walks that may hold them (I31). Returns how many it
    /// retired.
    pub(super) fn sweep_exited(&mut self) -> usize {
        let mut taken = Taken::default();
        if let Some(inbox) = self.w.tracks.inbox.clone() {
            self.take_exited(&inbox, &mut taken);
        }
        self.take_tombstones(&mut taken);
        let n = taken.entries.len();
        self.retire(taken);
        n
    }

    /// The sweep's take of the exited ranks in `inbox`, into `taken`.
    fn take_exited(&mut self, inbox: &Inbox, taken: &mut Taken) {
        for rank in inbox.take() {
            crate::counters::bump!(WALKED_UNDER_LOCK);
            let Some(i) = self.get(rank) else {
                continue; // removed by `&mut`, never made, or a repeated exit
            };
            // Its rank has exited (I36), so no live owner reads it without a pin (I35).
            if i.meta.take_for_sweep() {
                taken.push(i);
            }
        }
    }

    /// Unpublishes what `taken` holds in one write, draws a fresh uid and queues it as one batch
    /// behind an epoch grace period and the walks alive now that may hold it (I31, I32, I34,
    /// I39).
    fn retire(&mut self, taken: Taken) {
        let Taken {
            ranks,
            entries,
            born,
        } = taken;
        if entries.is_empty() {
            return;
        }
        // Counted before it leaves the map (see `Core::kept`). Relaxed: a count.
        self.rl
            .core
            .retired
            .fetch_add(entries.len(), Ordering::Relaxed);
        let removed = B::remove(&self.rl.core.map, &ranks);
        debug_assert_eq!(removed, entries.len());
        // A fresh uid before retiring: pinned scoped entries keyed by the old one are dead for
        // every reader that pins after this store (I34).
        self.rl.core.uid.store(fresh_uid(), Ordering::SeqCst);
        let done = Arc::new(AtomicBool::new(false));
        // The collector sets the token only after every thread pinned now has unpinned (I32,
        // I37), at once, whoever swept: batched with the writers' other retirements it could wait
        // for 15 more sweeps process-wide on the backends whose writes retire nothing else.
        collector::retire_token(Arc::clone(&done));
        let q = &mut self.w.tracks;
        q.batches.push_back(Batch {
            serial: q.next_serial,
            done,
            entries,
            // a walk numbered `born + 1..=walks` may hold one of them: it started after the
            // oldest was published and before they were unpublished (here, under the lock)
            walks: (born, q.walks),
        });
        q.next_serial += 1;
    }
}

/// Instances a sweep took (RECLAIMING, or REAPED tombstones) and has not unpublished yet: made and
/// retired inside [`Locked::sweep_exited`], never outside this module.
#[must_use = "what a sweep took is retired in the same critical section"]
struct Taken {
    ranks: Vec<u64>,
    entries: Vec<(u64, Erased)>,
    /// The lowest walk count any of them was published at (I31).
    born: u64,
}

impl Default for Taken {
    fn default() -> Self {
        Taken {
            ranks: Vec::new(),
            entries: Vec::new(),
            born: u64::MAX,
        }
    }
}

impl Taken {
    fn push<T, B: Backend>(&mut self, i: Inst<'_, '_, T, B>) {
        self.ranks.push(i.rank);
        self.entries.push((i.rank, i.erased()));
        // A refilled tombstone kept the count of its first publication: a walk since may hold it.
        self.born = self.born.min(i.meta.born());
    }
}

/// Unpublished instances of the `RankLocal` whose sweep queue holds it, freed once `done` is
/// set: the collector sets it after every thread pinned at the retirement has unpinned (I32).
struct Batch {
    /// Sweeps number their batches (`reclaim_exited_blocking` waits for the ones retired
    /// before it returns).
    serial: u64,
    done: Arc<AtomicBool>,
    entries: Vec<(u64, Erased)>,
    /// `(b, r)`: its instances were published at walk counts `b` or later and unpublished at
    /// walk count `r`, so only a walk numbered in `b + 1..=r` may hold one in its snapshot
    /// (I31, I39).
    walks: (u64, u64),
}

impl Batch {
    /// The batch's number.
    fn serial(&self) -> u64 {
        self.serial
    }

    /// `true` once its grace period passed. Acquire: pairs with the collector's Release store.
    fn is_ready(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// `true` if a walk whose number is in `walking` (ascending) may hold one of its instances.
    fn held_by(&self, walking: &[u64]) -> bool {
        let (born, retired) = self.walks;
        // the first live walk numbered above `born`
        let i = walking.partition_point(|&n| n <= born);
        walking.get(i).map_or(false, |&n| n <= retired)
    }
}

/// Removed instances no reader can reach any more: unpublished, and either past their grace
/// period or removed under `&mut` (I6, I32). The only way out is dropping them or moving their
/// values out, each once.
#[must_use = "removed instances are dropped with `drop_all`"]
pub(super) struct Removed<T> {
    entries: Vec<(u64, Erased)>,
    /// The address of the `RankLocal` they came from (for `check_not_dropping`).
    owner: usize,
    _t: PhantomData<fn(T) -> T>,
}

impl<T> Removed<T> {
    /// How many instances it holds.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Adds `other`'s instances.
    pub(super) fn extend(&mut self, other: Removed<T>) {
        self.entries.extend(other.entries);
    }

    /// The `RankLocal`'s address and the instances, for the limbo.
    fn into_entries(self) -> (usize, Vec<(u64, Erased)>) {
        (self.owner, self.entries)
    }

    /// Drops every instance, each as its own rank, and returns the first `T::drop` panic after
    /// dropping the rest (I10); never unwinds.
    #[must_use = "a `T::drop` panic is returned to be re-raised"]
    pub(super) fn drop_all(self) -> Option<Payload> {
        // SAFETY: removed instances of a `RankLocal<T, _>` (I5) with no reference left: no reader
        // can reach them (the type's invariant, I6, I32); each listed once (I10).
        unsafe { instance::drop_all::<T>(self.owner, self.entries) }
    }

    /// Moves every value out, with its rank (no `T::drop` runs); a tombstone's allocation is
    /// freed, with no value to move (I39).
    pub(super) fn into_values(self) -> Vec<(u64, T)> {
        let mut out = Vec::with_capacity(self.entries.len());
        for (rank, p) in self.entries {
            // SAFETY: as in `drop_all`: removed, unreachable, each once (the type's invariant).
            let value = unsafe { InstancePtr::<T>::new(p).into_value() };
            out.extend(value.map(|v| (rank, v)));
        }
        out
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
    #[cfg(all(test, not(loom)))]
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

    /// Lends the value of the thread cache's owner entry `tag` for `rank` to `f`; gives `f` back
    /// on a miss. An owner entry stays valid whatever the uid (I34, I35), so the uid is only a
    /// name here.
    #[inline]
    pub(super) fn with_owner_entry<R, F: FnOnce(&T) -> R>(
        &self,
        rank: u64,
        tag: OwnerTag,
        f: F,
    ) -> Result<R, F> {
        // Relaxed: the uid is only a name here.
        let uid = self.core.uid.load(Ordering::Relaxed);
        let Some(p) = cache::lookup(uid, rank | tag.bits()) else {
            return Err(f);
        };
        // SAFETY: an owner entry was filled by this thread for its own rank while it was alive
        // ([`LiveOwner::cache`]) and is wiped before the rank's exit work and exit (I34, I39), so
        // the instance is neither reclaimed (I35) nor a tombstone, and its value stays in place
        // while `f` runs on this thread (an OWNED one is moved out only by this thread's exit
        // work, I39); a `T` of this map (I5, I9). The borrow ends with `f`.
        Ok(f(unsafe {
            InstancePtr::<T>::new(Erased::from_non_null(p)).value()
        }))
    }

    /// The hit path of `get_own*` (I41): the thread cache's `with_own` entry for `rank` (the
    /// calling thread's own, or 0, which misses), as a counted [`OwnRef`]; `None` on a miss. No
    /// atomic read-modify-write, no lock, no allocation, no state check: an own entry is filled
    /// only for an instance that is OWNED (so in the gate) or ESCAPED ([`LiveOwner::cache`]), and
    /// dropped (by a fresh uid) when `&mut` access takes instances out of the gate.
    #[inline]
    pub(super) fn own_entry_ref(&self, rank: u64) -> Option<Held<'_, T>> {
        // Relaxed: the uid is only a name here (as in `with_owner_entry`).
        let uid = self.core.uid.load(Ordering::Relaxed);
        let p = cache::lookup(uid, rank | OwnerTag::Own.bits())?;
        let p = InstancePtr::<T>::new(Erased::from_non_null(p));
        // SAFETY: an own entry was filled by this thread for its own rank while it was alive, for
        // an instance then OWNED or ESCAPED, and is wiped before its exit work (I34, I39, I41):
        // the instance is neither reclaimed (I35) nor a tombstone, and this thread alone touches
        // its guard count. If it was OWNED it is in the gate, whatever a reader moved it to since
        // (only `&mut` takes it out, and that draws a fresh uid, so this entry no longer hits):
        // its exit work sees the count (I41); an ESCAPED one is kept while the `RankLocal` is
        // borrowed (I31). A `T` of this map (I5, I9).
        unsafe {
            p.meta().hold();
            Some(Held::new(p))
        }
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

    /// `&mut` access: `rank`'s instance's state machine, or `None`.
    pub(super) fn state_mut(&mut self, rank: u64) -> Option<usize> {
        // SAFETY: `&mut self` excludes every other writer (I6, I16), and keeps the instance
        // found alive (I6).
        let i = unsafe { B::get_by_writer(&self.core.map, rank).map(|p| Inst::new(self, rank, p)) };
        i.map(|i| i.meta.state())
    }

    /// `&mut` access: every `(rank, &mut T)`, from one snapshot; settles owner-only instances and
    /// frees tombstones first, so every value is in place and no exit work touches it (I39).
    pub(super) fn values_mut(&mut self) -> ValuesMut<'_, T, B> {
        self.settle_owned(true);
        ValuesMut {
            remaining: B::len(&self.core.map),
            inner: B::iter(&self.core.map),
            _rl: PhantomData,
        }
    }
}

// Also for the `RankLocal`'s drop, whose impl cannot require `T: Send`.
impl<T, B: Backend> RankLocal<T, B> {
    /// `&mut` access: unpublishes the instances `keep` rejects.
    /// Their entries in the gate go too, under its lock, so no exit work touches what is
    /// removed (an exit work that came first left a tombstone, which frees no value, I39).
    pub(super) fn remove_where_mut(&mut self, keep: &mut dyn FnMut(u64) -> bool) -> Removed<T> {
        let entries = B::retain(&mut self.core.map, keep);
        gate::forget_owned(
            &crate::primitive::mutex_mut(&mut self.writer).tracks,
            &entries,
        );
        if !entries.is_empty() {
            // Relaxed: `&mut self`, ordered by whatever handed it to us. A fresh uid is drawn on
            // next use, so no thread cache can hit a removed instance (I4).
            self.core.uid.store(cache::NO_UID, Ordering::Relaxed);
        }
        self.removed(entries)
    }

    /// `&mut` access: what waits in the limbo, and the panic a drain kept; `close` (the drop):
    /// later drains do nothing (I32).
    pub(super) fn take_deferred_mut(&mut self, close: bool) -> (Removed<T>, Option<Payload>) {
        let limbo = crate::primitive::mutex_mut(&mut self.core.limbo).clone();
        let (entries, panic) = limbo.map(|l| l.take(close, true)).unwrap_or_default();
        (self.removed(entries), panic)
    }

    /// `&mut` access: every batch the sweep queued, ready or not: no reader exists (I6, I32).
    pub(super) fn take_batches_mut(&mut self) -> Removed<T> {
        let q = &mut crate::primitive::mutex_mut(&mut self.writer).tracks;
        let entries: Vec<_> = q
            .batches
            .take_all()
            .into_iter()
            .flat_map(|b| b.entries)
            .collect();
        // Relaxed: `&mut self`.
        self.core
            .retired
            .fetch_sub(entries.len(), Ordering::Relaxed);
        self.removed(entries)
    }

    /// `&mut` access to what the writer lock guards for the facade.
    pub(super) fn writer_mut(&mut self) -> &mut Writer {
        &mut crate::primitive::mutex_mut(&mut self.writer).w
    }

    /// For the `RankLocal`'s drop: no more exit deliveries to its inbox; the live ranks'
    /// registrations get pruned.
    pub(super) fn close_inbox(&mut self) {
        crate::primitive::mutex_mut(&mut self.writer)
            .tracks
            .close_inbox();
    }

    fn removed(&self, entries: Vec<(u64, Erased)>) -> Removed<T> {
        Removed {
            entries,
            owner: self as *const Self as usize,
            _t: PhantomData,
        }
    }
}

/// Which owner entry of the thread cache: `with`'s or `with_own`'s (I34, I39).
#[derive(Clone, Copy)]
pub(super) enum OwnerTag {
    /// `with`/`with_for` of the live owner: `OWNER_TAG`.
    Owner,
    /// `with_own`/`try_with_own`: `OWN_TAG`.
    Own,
}

impl OwnerTag {
    #[inline]
    fn bits(self) -> u64 {
        match self {
            OwnerTag::Owner => cache::OWNER_TAG,
            OwnerTag::Own => cache::OWN_TAG,
        }
    }
}

/// The live owner: this OS thread, acting as its own rank while that rank is live (I35). Not
/// `Send`: it is this thread's.
pub(super) struct LiveOwner<'rl, T: Send, B: Backend> {
    rl: &'rl RankLocal<T, B>,
    rank: u64,
    _here: PhantomData<*const ()>,
}

impl<'rl, T: Send, B: Backend> LiveOwner<'rl, T, B> {
    /// `Some` if `rank` is this thread's own rank and live: its instance cannot be reclaimed
    /// while the thread runs (I35).
    #[inline]
    pub(super) fn new(rl: &'rl RankLocal<T, B>, rank: u64) -> Option<Self> {
        (rank == identity::own_raw() && identity::own_alive()).then_some(LiveOwner {
            rl,
            rank,
            _here: PhantomData,
        })
    }

    /// The owner's rank.
    pub(super) fn rank(&self) -> u64 {
        self.rank
    }

    /// The owner's instance, found however (a pin, the writer lock, the backend's own read
    /// protection), kept for as long as this owner is borrowed; `None` for another rank's or
    /// another map's.
    pub(super) fn adopt(&self, i: Inst<'_, 'rl, T, B>) -> Option<Inst<'_, 'rl, T, B>> {
        // Still live: a `LiveOwner` kept past the thread's exit hook proves nothing.
        if i.rank != self.rank || !core::ptr::eq(i.rl, self.rl) || !identity::own_alive() {
            return None;
        }
        // SAFETY: the live owner's instance of this map: never swept while its rank is live
        // (I35), and `&mut`/drop are excluded by the `'rl` borrow.
        Some(unsafe { Inst::new(self.rl, self.rank, i.erased()) })
    }

    /// The owner's instance, by a plain map lookup (whose own protection covers the load; once
    /// found, the owner's instance needs none, I35).
    pub(super) fn get(&self) -> Option<Inst<'_, 'rl, T, B>> {
        if !identity::own_alive() {
            return None; // see `adopt`
        }
        let p = B::get(&self.rl.core.map, self.rank)?;
        // SAFETY: as in `adopt`.
        Some(unsafe { Inst::new(self.rl, self.rank, p) })
    }

    /// An [`OwnRef`] of `i` (the owner's, checked), as [`Inst::own_ref`] makes it; `None` for
    /// another rank's or another map's instance.
    pub(super) fn own_ref(&self, i: Inst<'_, '_, T, B>) -> Option<Held<'rl, T>> {
        if i.rank != self.rank || !core::ptr::eq(i.rl, self.rl) || !identity::own_alive() {
            return None;
        }
        // SAFETY: as in `adopt`; `own_ref` then counts or escapes it for `'rl` (I41).
        unsafe { Inst::new(self.rl, self.rank, i.erased()) }.own_ref()
    }

    /// Remembers `i` (the owner's, checked) as its owner entry under `tag`, which
    /// [`RankLocal::with_owner_entry`] reads; nothing once the thread's exit hook has begun (the
    /// entry would outlive the wipe).
    pub(super) fn cache(&self, i: Inst<'_, 'rl, T, B>, tag: OwnerTag) {
        assert!(i.rank == self.rank && core::ptr::eq(i.rl, self.rl));
        // An own entry only for an OWNED (in the gate) or ESCAPED instance: `get_own`'s hit
        // counts a guard without looking at the state (I41).
        if matches!(tag, OwnerTag::Own) && !matches!(i.meta.state(), OWNED | ESCAPED) {
            return;
        }
        if identity::own_alive() {
            cache::store(self.rl.uid_or_assign(), self.rank | tag.bits(), i.erased());
        }
    }
}

/// An `iter()`'s walk of one snapshot (made by [`Locked::walk`]): yields the entries it escapes;
/// the batches retired while it lives that its snapshot may hold wait for its drop.
///
/// Covariant in `T`, as `Iter` is: it holds no `&RankLocal<T, _>`, only what it reads.
pub(super) struct Walk<'rl, T, B: Backend> {
    inner: B::Iter<'rl>,
    /// The `RankLocal`'s live walks, which this one leaves on drop (I31, I39).
    live: &'rl Mutex<Vec<u64>>,
    /// This walk's number.
    n: u64,
    _t: PhantomData<&'rl T>,
}

impl<'rl, T, B: Backend> Walk<'rl, T, B> {
    /// The next entry of the snapshot that is not being reclaimed nor a tombstone, escaped.
    #[inline]
    pub(super) fn next_escaped(&mut self) -> Option<(u64, &'rl T)> {
        loop {
            let (rank, p) = self.inner.next()?;
            let p = InstancePtr::<T>::new(p);
            // Marked as it is yielded: SCOPED and OWNED move to ESCAPED unless a sweep took it
            // (RECLAIMING) or its thread's exit work did (a tombstone) first: then it is skipped
            // (I30, I31, I39).
            // SAFETY:
            // - `meta`: an instance of the walked map in the walk's snapshot: published before
            //   the walk was numbered, so a sweep that unpublishes it does so at this walk's
            //   number or later, and its batch is not freed while this walk is live (I31, I39);
            //   only `&mut` could free it otherwise, which the `'rl` borrow excludes;
            // - `value`: as just said, and now ESCAPED: kept while the `RankLocal` is borrowed,
            //   never moved out (I31, I39); a `T` of this map (I5, I9).
            let v = unsafe { p.meta().escape().then(|| p.value()) };
            if let Some(v) = v {
                return Some((rank, v));
            }
        }
    }
}

impl<T, B: Backend> Drop for Walk<'_, T, B> {
    fn drop(&mut self) {
        // The mutex orders this walk's reads of its snapshot's instances before the take that no
        // longer finds its number (I31, I39). O(live walks).
        let mut live = lock(self.live);
        if let Ok(i) = live.binary_search(&self.n) {
            live.remove(i);
        }
    }
}

/// `&mut` access's walk: every `(rank, &mut T)` of the map, each once ([`RankLocal::values_mut`]).
pub(super) struct ValuesMut<'a, T, B: Backend> {
    inner: B::Iter<'a>,
    /// Instances not yet yielded: the map cannot change while it is mutably borrowed.
    remaining: usize,
    _rl: PhantomData<&'a mut RankLocal<T, B>>,
}

impl<'a, T: 'a, B: Backend> ValuesMut<'a, T, B> {
    /// The next entry.
    #[inline]
    pub(super) fn next(&mut self) -> Option<(u64, &'a mut T)> {
        let (rank, p) = self.inner.next()?;
        self.remaining = self.remaining.saturating_sub(1);
        // SAFETY: the `RankLocal` is mutably borrowed for 'a (I6), and `values_mut` settled every
        // owner-only instance and unpublished every tombstone first (I39), so each value is in
        // place; each rank has its own allocation (I1, I5) and the snapshot yields each once, so
        // the `&mut T`s are disjoint and unaliased.
        Some((rank, unsafe { InstancePtr::<T>::new(p).value_mut() }))
    }

    /// Entries not yet yielded.
    pub(super) fn remaining(&self) -> usize {
        self.remaining
    }
}
