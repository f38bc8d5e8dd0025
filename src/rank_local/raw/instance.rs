//! One instance: its allocation (I1), the typed pointer the raw layer reads it through (I5), its
//! state machine (I30, I31, I39), and dropping removed instances — each as its own rank, and so
//! that a panicking `T::drop` does not stop the others (I10).

use core::any::Any;
use core::cell::Cell;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::panic::AssertUnwindSafe;
use core::ptr::NonNull;

use crate::delegation::on_behalf_of;
use crate::erased::Erased;
use crate::identity::RankId;
use crate::primitive::{tls, AtomicU64, AtomicUsize, Ordering, OwnerCell};

/// State of an instance no plain `&T` was handed out for: it may be reclaimed once its rank
/// exited (I30).
pub(super) const SCOPED: usize = 0;
/// State of an instance a plain `&T` was handed out for: kept until `&mut` or drop (I30, I31).
pub(super) const ESCAPED: usize = 1;
/// State of an instance the sweeper took: unpublished, freed after a grace period (I30, I32).
pub(super) const RECLAIMING: usize = 2;
/// State of an instance only `with_own`/`try_with_own` reached so far: its thread's exit work
/// drops it (I39).
pub(super) const OWNED: usize = 3;
/// Transient: the owner's exit work is moving the value out, under its gate lock (I39).
pub(super) const EXITING: usize = 4;
/// A tombstone: the value was moved out (and dropped) by its thread's exit work; the allocation
/// stays in the map until a sweep or `&mut` takes it, or a first touch refills it (I39).
pub(super) const DROPPED: usize = 5;
/// A tombstone the sweeper took: unpublished, its allocation freed after a grace period, its
/// value never dropped again (I39).
pub(super) const REAPED: usize = 6;
/// An instance whose thread's exit work found an `OwnRef` of it alive (held by another
/// thread-local's destructor): the last such guard's drop moves the value out and drops it, on
/// that thread (I41). No other access uses it meanwhile.
pub(super) const LINGERING: usize = 7;
/// An ended rank's value in a recycling `RankLocal`: in place, published under the ended rank,
/// waiting in the gate's free list for a new rank to adopt it (I42). Readers treat it as OWNED:
/// one that reaches it moves it on (then it is kept under its rank and never adopted).
pub(super) const VACANT: usize = 8;
/// Transient: a first touch is adopting a VACANT instance for another rank (I42); readers treat
/// it as gone, and the owner-only family of the ended rank no longer reaches it.
pub(super) const ADOPTING: usize = 9;

/// The offset of `Meta::guards` while the exit work has not left the drop to the guards: the
/// cell holds `NOT_LINGERING + count`, and the exit work that defers the drop subtracts it, so
/// the last guard's drop is the one that brings the cell to 0 (one decrement and one branch on
/// the hit path's drop, I41). Counts stay far below it.
const NOT_LINGERING: usize = 1 << (usize::BITS - 2);

/// What the exit work records for the last guard's drop of a LINGERING instance (I41): the gate
/// (address) of the `RankLocal` and the instance's rank.
#[derive(Clone, Copy)]
pub(super) struct Linger {
    pub(super) gate: usize,
    pub(super) rank: u64,
}

/// One allocation per instance (I1, I5): the value first (`repr(C)`: a pointer to the `Instance`
/// is a pointer to its `T`, so caches and slots hand out `&T` by a plain cast; `ManuallyDrop` is
/// `repr(transparent)`), then its [`Meta`]. The value is a `ManuallyDrop` so that a tombstone's
/// allocation (its value already moved out at its thread's exit, I39) is freed without dropping
/// it again.
#[repr(C)]
struct Instance<T> {
    value: ManuallyDrop<T>,
    meta: Meta,
}

/// An instance's state machine (I30, I31, I39): only atomics, so a `&Meta` may be held while
/// the value next to it is moved out or written (a tombstone's exit work, a refill).
pub(super) struct Meta {
    state: AtomicUsize,
    /// The `RankLocal`'s walk count when the instance was published: an `iter()` that ran since
    /// (a higher count) may hold it in its snapshot, so it counts as escaped (I31). Written once,
    /// before publication: the sweep reads it under the writer lock, `kept_exited` under a pin
    /// after the Acquire load that found the instance.
    born: AtomicU64,
    /// The rank that owns the instance (I42): its key's rank, until an adoption re-keys it.
    /// Written before publication, or by the adoption while ADOPTING; read after an Acquire of
    /// the state (or a successful CAS of it) that follows that write.
    owner: AtomicU64,
    /// Owner-only, touched only by the instance's own OS thread (I41): the count of its live
    /// counted guards, plus [`NOT_LINGERING`] until the exit work left the drop to the last one.
    guards: OwnerCell<usize>,
    /// Owner-only (I41): what the last guard's drop needs, set when `NOT_LINGERING` is taken off.
    linger: OwnerCell<Linger>,
}

impl Meta {
    /// Counts a new guard (I41).
    ///
    /// # Safety
    /// Called on the instance's own OS thread (the only one that touches the owner-only cells,
    /// I41).
    #[inline]
    pub(super) unsafe fn hold(&self) {
        // SAFETY: the caller's contract (I41).
        unsafe { self.guards.set(self.guards.get() + 1) }
    }

    /// Ends a guard; `true` if it was the last one of an instance whose drop the exit work left
    /// to it (I41).
    ///
    /// # Safety
    /// As for [`hold`](Self::hold), for a guard `hold` counted.
    #[inline]
    pub(super) unsafe fn release(&self) -> bool {
        // SAFETY: the caller's contract (I41).
        unsafe {
            let n = self.guards.get() - 1;
            self.guards.set(n);
            n == 0
        }
    }

    /// The count of live counted guards (I41).
    ///
    /// # Safety
    /// As for [`hold`](Self::hold).
    pub(super) unsafe fn guards(&self) -> usize {
        // SAFETY: the caller's contract (I41).
        unsafe { self.guards.get() & (NOT_LINGERING - 1) }
    }

    /// For the exit work that leaves the drop to the last guard: records the gate and rank it
    /// needs (I41).
    ///
    /// # Safety
    /// As for [`hold`](Self::hold).
    pub(super) unsafe fn set_linger(&self, gate: usize, rank: u64) {
        // SAFETY: the caller's contract (I41).
        unsafe {
            self.guards.set(self.guards.get() - NOT_LINGERING);
            self.linger.set(Linger { gate, rank });
        }
    }

    /// For the last guard's drop: what [`set_linger`](Self::set_linger) recorded, cleared.
    ///
    /// # Safety
    /// As for [`hold`](Self::hold).
    pub(super) unsafe fn take_linger(&self) -> Linger {
        // SAFETY: the caller's contract (I41).
        unsafe {
            self.guards.set(self.guards.get() + NOT_LINGERING);
            self.linger.get()
        }
    }

    /// OWNED → LINGERING, for the exit work that finds a guard alive (I41); `false` if a reader
    /// moved it on first.
    pub(super) fn linger(&self) -> bool {
        // SeqCst: as `begin_exit` (I39).
        self.state
            .compare_exchange(OWNED, LINGERING, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// `from` → VACANT, for the exit work (OWNED) or the last guard's drop (LINGERING) of a
    /// recycling `RankLocal` (I42); `false` if a reader moved it on first (or it was kept).
    pub(super) fn vacate(&self, from: usize) -> bool {
        // SeqCst: as `begin_exit` (I39).
        self.state
            .compare_exchange(from, VACANT, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// VACANT → ADOPTING → `to`, recording `owner` in between, for the first touch that adopts
    /// the value for `owner` (I42); `false` if a reader moved it on first.
    pub(super) fn adopt(&self, to: usize, owner: u64) -> bool {
        // SeqCst: as `begin_exit` (I39); the value and the owner-only cells were handed over by
        // the gate lock (I42).
        if self
            .state
            .compare_exchange(VACANT, ADOPTING, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Relaxed: published by the Release store below; while ADOPTING nobody uses the value.
        self.owner.store(owner, Ordering::Relaxed);
        // Release: a reader whose Acquire load (or CAS) sees `to` sees the new owner.
        self.state.store(to, Ordering::Release);
        true
    }

    /// The rank that owns the instance (I42). Relaxed: read after an Acquire of the state (or a
    /// successful CAS of it), which ordered the adoption's write before it.
    #[inline]
    pub(super) fn owner(&self) -> u64 {
        self.owner.load(Ordering::Relaxed)
    }

    /// LINGERING → EXITING, for the last guard's drop (I41); `false` if the value was kept since
    /// (`OwnRef::leak`).
    pub(super) fn end_linger(&self) -> bool {
        // SeqCst: as `begin_exit` (I39).
        self.state
            .compare_exchange(LINGERING, EXITING, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// For `OwnRef::leak` (and the exit work that finds a guard alive on a value a reader moved
    /// on): makes an instance its own thread holds a guard of ESCAPED, kept until `&mut` or the
    /// drop (I31, I41). OWNED, SCOPED and LINGERING move on; `false` for anything else.
    pub(super) fn keep(&self) -> bool {
        let mut now = self.state();
        loop {
            if now == ESCAPED {
                return true;
            }
            if !matches!(now, OWNED | SCOPED | LINGERING) {
                return false;
            }
            // AcqRel/Acquire: as in `upgrade`.
            match self
                .state
                .compare_exchange(now, ESCAPED, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    /// The state, Acquire: pairs with the Release/AcqRel transitions below, so a reader that
    /// sees a (refilled) instance's state sees its value (I39).
    #[inline]
    pub(super) fn state(&self) -> usize {
        self.state.load(Ordering::Acquire)
    }

    /// The walk count the instance was published at (I31). Relaxed: written before publication
    /// and read after the Acquire that found the instance, or under the writer lock.
    #[inline]
    pub(super) fn born(&self) -> u64 {
        self.born.load(Ordering::Relaxed)
    }

    /// Moves the instance to ESCAPED unless it is being reclaimed or is a tombstone; `false` if it
    /// is (the caller then treats the rank's instance as absent) (I30, I31, I39).
    #[inline]
    pub(super) fn escape(&self) -> bool {
        // Acquire: as in `upgrade`. An escaped instance (every hit of a map lookup after the
        // first) costs one load and no call.
        self.state() == ESCAPED || self.upgrade(ESCAPED)
    }

    /// Makes the instance usable by a scoped reader: SCOPED and ESCAPED stay, OWNED moves to
    /// SCOPED (so its thread's exit work leaves it to a sweep, I39); `false` for an instance
    /// being reclaimed or a tombstone (the caller treats it as absent).
    #[inline]
    pub(super) fn scope(&self) -> bool {
        // The usual states cost one load and no call.
        matches!(self.state(), SCOPED | ESCAPED) || self.upgrade(SCOPED)
    }

    /// The CAS loop of [`escape`](Self::escape) (`to` = ESCAPED) and [`scope`](Self::scope)
    /// (`to` = SCOPED).
    #[cold]
    #[inline(never)]
    fn upgrade(&self, to: usize) -> bool {
        // Acquire/Relaxed would do for the one-winner property (I30, I39): exactly one of this
        // CAS, the sweeper's and the exit work's succeeds from a given state, a property of the
        // single modification order of `state` whatever the orderings. AcqRel/Acquire: a reader
        // that sees a refilled instance's state (I39) sees its value.
        let mut now = self.state();
        loop {
            let next = match now {
                ESCAPED => return true,
                SCOPED if to == SCOPED => return true,
                SCOPED | OWNED | VACANT => to,
                _ => return false, // RECLAIMING or a tombstone: gone (I30, I39)
            };
            match self
                .state
                .compare_exchange(now, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    /// OWNED → SCOPED, for an instance no exit work may touch any more (`&mut` access, I39); a
    /// loss means it moved on already.
    pub(super) fn settle(&self) {
        // SeqCst: as the exit work's CAS (I39).
        let _ = self
            .state
            .compare_exchange(OWNED, SCOPED, Ordering::SeqCst, Ordering::Relaxed);
    }

    /// The sweeper's take of an exited rank's instance (I30, I39): SCOPED → RECLAIMING (its value
    /// is dropped after the grace period) or a DROPPED tombstone → REAPED (only its allocation is
    /// freed); `false` for anything else, which the sweep leaves. An `iter()` whose snapshot
    /// holds it yields it only if its own CAS to ESCAPED wins, and the batch waits for that walk
    /// (I31).
    ///
    /// Memory-safe anywhere (it only moves a state); the sweep calls it under the writer lock,
    /// for exited ranks only (I30, I32, I35, I36), which is what makes the take *right*.
    pub(super) fn take_for_sweep(&self) -> bool {
        // SeqCst (Relaxed would do for the one-winner property, I30): keeps the argument about
        // readers local.
        self.state
            .compare_exchange(SCOPED, RECLAIMING, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
            || self.reap()
    }

    /// Takes a DROPPED tombstone for unpublishing (DROPPED → REAPED); `false` for anything else
    /// (refilled since, or taken already) (I39).
    pub(super) fn reap(&self) -> bool {
        // SeqCst: as in `take_for_sweep`.
        self.state
            .compare_exchange(DROPPED, REAPED, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// OWNED → EXITING for the exit work (I39); `false` if a reader moved it on first.
    pub(super) fn begin_exit(&self) -> bool {
        // SeqCst (AcqRel would do): exactly one of this CAS and a reader's upgrade wins (I39).
        self.state
            .compare_exchange(OWNED, EXITING, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }
}

/// A pointer to an `Instance<T>` of a `RankLocal<T, _>`'s map: an [`Erased`] typed back. Private
/// to the raw layer: [`Inst`](super::Inst) is what the rest of `rank_local` holds.
pub(super) struct InstancePtr<T> {
    p: NonNull<Instance<T>>,
    _t: PhantomData<*const T>,
}

impl<T> Clone for InstancePtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for InstancePtr<T> {}

impl<T> InstancePtr<T> {
    /// A fresh instance of `value` in state `state`, not yet published (I1), published at the
    /// walk count `born` (I31).
    pub(super) fn alloc(value: T, state: usize, born: u64, owner: u64) -> Self {
        let p = Erased::new(Box::new(Instance {
            value: ManuallyDrop::new(value),
            meta: Meta {
                state: AtomicUsize::new(state),
                born: AtomicU64::new(born),
                owner: AtomicU64::new(owner),
                guards: OwnerCell::new(NOT_LINGERING),
                linger: OwnerCell::new(Linger { gate: 0, rank: 0 }),
            },
        }));
        InstancePtr {
            p: p.as_ptr(),
            _t: PhantomData,
        }
    }

    /// Types back a pointer read from a map, a cache entry or a gate. Only a pointer: using it
    /// needs the protections of [`meta`](Self::meta) and [`value`](Self::value).
    #[inline]
    pub(super) fn new(p: Erased) -> Self {
        InstancePtr {
            p: p.as_ptr(),
            _t: PhantomData,
        }
    }

    /// The value's address: an `OwnRef` holds it, and types the instance back from it (the value
    /// is the instance's first field, I5).
    #[inline]
    pub(super) fn value_ptr(self) -> NonNull<T> {
        self.p.cast()
    }

    /// The instance whose value is at `v` ([`value_ptr`](Self::value_ptr)'s inverse).
    #[inline]
    pub(super) fn from_value_ptr(v: NonNull<T>) -> Self {
        InstancePtr {
            p: v.cast(),
            _t: PhantomData,
        }
    }

    /// The pointer as maps and caches hold it.
    #[inline]
    pub(super) fn erased(self) -> Erased {
        Erased::from_non_null(self.p.cast())
    }

    /// The state machine.
    ///
    /// # Safety
    /// - `self` points to an `Instance<T>` allocated by [`alloc`](Self::alloc) for a
    ///   `RankLocal<T, _>` of exactly this `T` (I5, I9);
    /// - it stays allocated for `'a` (the caller's protection: a pin, the writer lock, an
    ///   escape, the live owner, `&mut`; I31–I35).
    #[inline]
    pub(super) unsafe fn meta<'a>(self) -> &'a Meta {
        // SAFETY: the caller's contract; only the atomics are referenced, never the value (which
        // exit work may move out meanwhile, I39).
        unsafe { &(*self.p.as_ptr()).meta }
    }

    /// The value.
    ///
    /// # Safety
    /// - as for [`meta`](Self::meta), for `'a`;
    /// - the value is in place for `'a` (not a tombstone: the state was SCOPED, ESCAPED, or
    ///   OWNED read by its own thread, none of which moves out while the instance is alive,
    ///   I30, I39), and no `&mut T` to it exists meanwhile (I1, I6).
    #[inline]
    pub(super) unsafe fn value<'a>(self) -> &'a T {
        // SAFETY: the caller's contract; `Instance` is `repr(C)` with the `T` first (I5).
        unsafe { self.p.cast::<T>().as_ref() }
    }

    /// The value, mutably.
    ///
    /// # Safety
    /// As for [`value`](Self::value), and nothing else refers to the instance meanwhile (I6).
    pub(super) unsafe fn value_mut<'a>(self) -> &'a mut T {
        // SAFETY: the caller's contract (I6); `Instance` is `repr(C)` with the `T` first (I5).
        unsafe { self.p.cast::<T>().as_mut() }
    }

    /// Moves the value out of an instance the exit work just moved to EXITING (I39), then makes
    /// it a DROPPED tombstone.
    ///
    /// # Safety
    /// As for [`meta`](Self::meta); this thread moved the instance to EXITING, so nothing else
    /// reads or writes the value (I39).
    pub(super) unsafe fn take_value(self) -> T {
        // SAFETY: the caller's contract (I39): the instance is alive, `value` is initialized (not
        // a tombstone) and is read out once, after which the allocation is a tombstone whose value
        // is never read (I39).
        let (value, meta) = unsafe {
            (
                ManuallyDrop::take(&mut (*self.p.as_ptr()).value),
                self.meta(),
            )
        };
        // Release: pairs with the Acquire of whoever later frees or refills the tombstone.
        meta.state.store(DROPPED, Ordering::Release);
        value
    }

    /// Writes a new value into a DROPPED tombstone and publishes it with `state` (I39).
    ///
    /// # Safety
    /// As for [`meta`](Self::meta); under the writer lock, the instance is in this map and
    /// DROPPED (so no value is in it and no reader touches its value until it sees the new
    /// state) (I39).
    pub(super) unsafe fn refill(self, value: T, state: usize) {
        // SAFETY: the caller's contract (I39): the instance is alive, the slot holds no value and
        // no reference to it exists; writing through the raw pointer touches only the value field
        // (I39).
        let meta = unsafe {
            core::ptr::addr_of_mut!((*self.p.as_ptr()).value).write(ManuallyDrop::new(value));
            self.meta()
        };
        // Release: a reader whose Acquire load sees `state` sees the value written above (I39).
        meta.state.store(state, Ordering::Release);
    }

    /// Moves the value out — `None` for a tombstone, whose value its thread's exit work already
    /// moved out (I39) — and frees the allocation.
    ///
    /// # Safety
    /// The instance is alive, unpublished, and no reference to it is left (I6); this is its only
    /// release.
    pub(super) unsafe fn into_value(self) -> Option<T> {
        // SAFETY: allocated as a `Box<Instance<T>>` by `alloc` (I5); the caller's contract.
        let b = unsafe { Box::from_raw(self.p.as_ptr()) };
        // Acquire: as in `free`.
        (!is_tombstone(b.meta.state.load(Ordering::Acquire)))
            .then(|| ManuallyDrop::into_inner(b.value))
    }

    /// Drops the value — unless the instance is a tombstone, whose value its thread's exit work
    /// already moved out (I39) — and frees the allocation.
    ///
    /// # Safety
    /// The instance is alive, unpublished, and no reference to it is left (I6); this is its only
    /// release.
    pub(super) unsafe fn free(self) {
        // SAFETY: allocated as a `Box<Instance<T>>` by `alloc` (I5); the caller's contract.
        let mut b = unsafe { Box::from_raw(self.p.as_ptr()) };
        // Under loom, an unsynchronized write to the state word, as freeing it is: an access by a
        // thread that did not synchronize with this free is reported (a use after free).
        #[cfg(ranklocal_loom)]
        b.meta.state.with_mut(|_| ());
        // Acquire: pairs with the exit work's Release store of DROPPED (I39); no tombstone is
        // EXITING here (the exit work moves the value out under its gate lock, which every
        // path that frees took since, I39).
        if !is_tombstone(b.meta.state.load(Ordering::Acquire)) {
            // SAFETY: the value is initialized (not a tombstone, I39) and dropped once, here (I10).
            unsafe { ManuallyDrop::drop(&mut b.value) };
        }
    }
}

/// `true` for a tombstone's state: its value was (or is being) moved out at its thread's exit
/// (I39).
#[inline]
pub(super) fn is_tombstone(state: usize) -> bool {
    matches!(state, EXITING | DROPPED | REAPED)
}

/// Frees every instance in `entries`, each exactly once and each as its own rank (inside
/// `on_behalf_of(rank, ..)`, I10), even if a `T::drop` panics: the rest are still dropped, and
/// the first panic's payload is returned for the caller to re-raise (later ones are dropped, and
/// one whose own `Drop` panics is forgotten). It never unwinds.
///
/// # Safety
/// Every entry is an instance of a `RankLocal<T, _>`'s map (I5) that was removed from it, with no
/// reference to it left (I6, I4), paired with its rank.
///
/// `owner` names the `RankLocal` (its address): while one of its values is dropped, a first
/// touch of the same rank on it panics ([`check_not_dropping`]).
#[must_use = "a `T::drop` panic is returned to be re-raised"]
pub(super) unsafe fn drop_all<T>(
    owner: usize,
    entries: Vec<(u64, Erased)>,
) -> Option<Box<dyn Any + Send>> {
    let mut first = None;
    for (rank, p) in entries {
        let drop_one = || {
            /// Restores the outer value on return and unwind.
            struct Restore((usize, u64));
            impl Drop for Restore {
                fn drop(&mut self) {
                    let _ = DROPPING.try_with(|d| d.set(self.0));
                }
            }
            let outer = DROPPING.try_with(|d| d.replace((owner, rank)));
            let _restore = outer.map(Restore);
            // SAFETY: an entry of the argument, freed once (the loop takes each once, I10); the
            // caller's contract covers the rest (I5, I6).
            on_behalf_of(RankId::from_raw(rank), || unsafe {
                InstancePtr::<T>::new(p).free()
            });
        };
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(drop_one)) {
            match first {
                None => first = Some(panic),
                Some(_) => drop_payload(panic),
            }
        }
    }
    first
}

/// Drops a panic payload that will not be re-raised, without letting its own `Drop` unwind out
/// of [`drop_all`] (which would leave the rest of the batch undropped): a payload whose drop
/// panics is forgotten, as is that second panic's payload.
pub(in crate::rank_local) fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        core::mem::forget(again);
    }
}

tls! {
    /// The `RankLocal` (address) and rank whose value this thread is dropping, `(0, 0)` if none.
    static DROPPING: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
}

/// `true` while this thread drops a value for the crate (inside [`drop_all`], on any
/// `RankLocal`).
pub(in crate::rank_local) fn is_dropping() -> bool {
    DROPPING.try_with(Cell::get).map_or(false, |d| d != (0, 0))
}

/// Panics if this thread is dropping `owner`'s value of `rank`: a first touch from inside that
/// drop would make a new value for the rank, whose drop would make another, without end (std's
/// `thread_local!` refuses an access from its own destructor too).
#[inline]
#[track_caller]
pub(in crate::rank_local) fn check_not_dropping(owner: usize, rank: u64) {
    if DROPPING.try_with(Cell::get).ok() == Some((owner, rank)) {
        dropping_panic(rank);
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn dropping_panic(rank: u64) -> ! {
    panic!(
        "ranklocal: the value of {} on this RankLocal was asked for from inside its own drop \
         (it would be made again, and dropped again, without end)",
        RankId::from_raw(rank)
    );
}
