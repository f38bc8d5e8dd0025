//! One instance: its allocation (I1), the typed pointer every lookup hands out through (I5), its
//! state machine (I30, I31), and dropping removed instances — each as its own rank, and so that a
//! panicking `T::drop` does not stop the others (I10).

use core::any::Any;
use core::cell::Cell;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::panic::AssertUnwindSafe;
use core::ptr::NonNull;

use crate::delegation::on_behalf_of;
use crate::erased::Erased;
use crate::identity::RankId;
use crate::primitive::{tls, AtomicU64, AtomicUsize, Ordering};

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
/// stays in the map until a sweep, `iter` or `&mut` takes it, or a first touch refills it (I39).
pub(super) const DROPPED: usize = 5;
/// A tombstone the sweeper (or `iter`) took: unpublished, its allocation freed after a grace
/// period, its value never dropped again (I39).
pub(super) const REAPED: usize = 6;

/// One allocation per instance (I1, I5): the value first (`repr(C)`: a pointer to the `Instance`
/// is a pointer to its `T`, so caches and slots hand out `&T` by a plain cast; `ManuallyDrop` is
/// `repr(transparent)`) and its state (I30). The value is a `ManuallyDrop` so that a tombstone's
/// allocation (its value already moved out at its thread's exit, I39) is freed without dropping
/// it again.
#[repr(C)]
struct Instance<T> {
    value: ManuallyDrop<T>,
    state: AtomicUsize,
    /// The `RankLocal`'s walk count when the instance was published: an `iter()` that ran since
    /// (a higher count) may hold it in its snapshot, so it counts as escaped (I31). Written once,
    /// before publication: the sweep reads it under the writer lock, `kept_exited` under a pin
    /// after the Acquire load that found the instance.
    born: AtomicU64,
}

/// A pointer to an `Instance<T>` of a `RankLocal<T, _>`'s map: an [`Erased`] typed back. Building
/// one is where I5 is relied on, once; what it points to stays alive as long as the caller's
/// protection says (a pin, the writer lock, an escape, `&mut`).
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
    /// A fresh instance of `value` in state `state`, not yet published (I1).
    pub(super) fn alloc(value: T, state: usize) -> Self {
        let p = Erased::new(Box::new(Instance {
            value: ManuallyDrop::new(value),
            state: AtomicUsize::new(state),
            born: AtomicU64::new(0),
        }));
        InstancePtr {
            p: p.as_ptr(),
            _t: PhantomData,
        }
    }

    /// Types back a pointer read from a map or a cache entry.
    ///
    /// # Safety
    /// `p` points to an `Instance<T>` allocated by [`alloc`](Self::alloc) for a `RankLocal<T, _>`
    /// of exactly this `T` (I5, I9).
    #[inline]
    pub(super) unsafe fn new(p: Erased) -> Self {
        InstancePtr {
            p: p.as_ptr(),
            _t: PhantomData,
        }
    }

    /// The pointer as maps and caches hold it.
    #[inline]
    pub(super) fn erased(self) -> Erased {
        Erased::from_non_null(self.p.cast())
    }

    /// The value.
    ///
    /// # Safety
    /// The instance is alive for `'a` and no `&mut T` to it exists meanwhile (I1, and the
    /// caller's protection: escaped, pinned, or `&self` while nothing can free it).
    #[inline]
    pub(super) unsafe fn value<'a>(self) -> &'a T {
        // SAFETY: the caller's contract (I1); `Instance` is `repr(C)` with the `T` first (I5).
        unsafe { self.p.cast::<T>().as_ref() }
    }

    /// The value, mutably.
    ///
    /// # Safety
    /// The instance is alive for `'a` and nothing else refers to it meanwhile (I6).
    pub(super) unsafe fn value_mut<'a>(self) -> &'a mut T {
        // SAFETY: the caller's contract (I6); `Instance` is `repr(C)` with the `T` first (I5).
        unsafe { self.p.cast::<T>().as_mut() }
    }

    /// The instance's state (I30).
    ///
    /// # Safety
    /// The instance is alive for `'a`: protected by a pin or the writer lock as I32/I33 say, or
    /// escaped (I31).
    #[inline]
    pub(super) unsafe fn state<'a>(self) -> &'a AtomicUsize {
        // SAFETY: the caller's contract (I32, I33); only the atomic is referenced.
        unsafe { &(*self.p.as_ptr()).state }
    }

    /// The walk count the instance was published at (I31).
    ///
    /// # Safety
    /// As for [`state`](Self::state).
    #[inline]
    pub(super) unsafe fn born<'a>(self) -> &'a AtomicU64 {
        // SAFETY: the caller's contract (I32, I33); only the atomic is referenced.
        unsafe { &(*self.p.as_ptr()).born }
    }

    /// `true` if no `iter()` took a snapshot since the instance was published: `walks` is the
    /// `RankLocal`'s walk count, read under the writer lock (I31).
    ///
    /// # Safety
    /// As for [`state`](Self::state).
    unsafe fn unwalked(self, walks: u64) -> bool {
        // Relaxed: written before publication and read under the writer lock (I31).
        // SAFETY: the caller's contract.
        unsafe { self.born() }.load(Ordering::Relaxed) == walks
    }

    /// Moves the instance to ESCAPED unless it is being reclaimed or is a tombstone; `false` if it
    /// is (the caller then treats the rank's instance as absent) (I30, I31, I39).
    ///
    /// # Safety
    /// As for [`state`](Self::state): the instance is protected while this runs.
    #[inline]
    pub(super) unsafe fn escape(self) -> bool {
        // SAFETY: the caller's contract (I32, I33).
        let st = unsafe { self.state() };
        // Acquire: as in `upgrade`. An escaped instance (every hit of a map lookup after the
        // first) costs one load and no call.
        st.load(Ordering::Acquire) == ESCAPED
            // SAFETY: the caller's contract (I32, I33).
            || unsafe { self.upgrade(ESCAPED) }
    }

    /// Makes the instance usable by a scoped reader: SCOPED and ESCAPED stay, OWNED moves to
    /// SCOPED (so its thread's exit work leaves it to a sweep, I39); `false` for an instance
    /// being reclaimed or a tombstone (the caller treats it as absent).
    ///
    /// # Safety
    /// As for [`state`](Self::state): the instance is protected while this runs.
    #[inline]
    pub(super) unsafe fn scope(self) -> bool {
        // SAFETY: the caller's contract (I32, I33).
        let st = unsafe { self.state() };
        // Acquire: as in `upgrade`. The usual states cost one load and no call.
        matches!(st.load(Ordering::Acquire), SCOPED | ESCAPED)
            // SAFETY: the caller's contract (I32, I33).
            || unsafe { self.upgrade(SCOPED) }
    }

    /// The CAS loop of [`escape`](Self::escape) (`to` = ESCAPED) and [`scope`](Self::scope)
    /// (`to` = SCOPED).
    ///
    /// # Safety
    /// As for [`state`](Self::state).
    #[cold]
    #[inline(never)]
    unsafe fn upgrade(self, to: usize) -> bool {
        // SAFETY: the caller's contract (I32, I33).
        let st = unsafe { self.state() };
        // Acquire/Relaxed would do for the one-winner property (I30, I39): exactly one of this
        // CAS, the sweeper's and the exit work's succeeds from a given state, a property of the
        // single modification order of `state` whatever the orderings. AcqRel/Acquire: a reader
        // that sees a refilled instance's state (I39) sees its value.
        let mut now = st.load(Ordering::Acquire);
        loop {
            let next = match now {
                ESCAPED => return true,
                SCOPED if to == SCOPED => return true,
                SCOPED | OWNED => to,
                _ => return false, // RECLAIMING or a tombstone: gone (I30, I39)
            };
            match st.compare_exchange(now, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    /// The sweeper's take of an exited rank's instance (I30, I39): SCOPED → RECLAIMING (its value
    /// is dropped after the grace period) or a DROPPED tombstone → REAPED (only its allocation is
    /// freed); `false` for anything else, which the sweep leaves. An instance published before
    /// the `RankLocal`'s walk count reached `walks` may be in an `iter()`'s snapshot: it is
    /// never taken (a SCOPED one is marked ESCAPED, which it is in effect, I31).
    ///
    /// # Safety
    /// Under the writer lock, the instance in this map (alive, I30, I32); `walks` is the
    /// `RankLocal`'s walk count, read under that lock.
    pub(super) unsafe fn take_for_sweep(self, walks: u64) -> bool {
        // SAFETY: the caller's contract (I30, I32).
        let st = unsafe { self.state() };
        // SAFETY: as just said.
        if !unsafe { self.unwalked(walks) } {
            // Relaxed: under the writer lock a SCOPED state only moves on to ESCAPED or (by the
            // exit work) not at all; the lock orders it before any later sweep (I30).
            let _ = st.compare_exchange(SCOPED, ESCAPED, Ordering::Relaxed, Ordering::Relaxed);
            return false;
        }
        // SeqCst (Relaxed would do for the one-winner property, I30): keeps the argument about
        // readers local.
        st.compare_exchange(SCOPED, RECLAIMING, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
            || st
                .compare_exchange(DROPPED, REAPED, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
    }

    /// Takes a DROPPED tombstone for unpublishing (DROPPED → REAPED); `false` for anything else
    /// (refilled since, or taken already) (I39).
    ///
    /// # Safety
    /// As for [`take_for_sweep`](Self::take_for_sweep), and no `Iter` of the map lives (it may
    /// hold the tombstone in its snapshot, I39).
    pub(super) unsafe fn reap(self) -> bool {
        // SAFETY: the caller's contract (I30, I32).
        let st = unsafe { self.state() };
        // SeqCst: as in `take_for_sweep`.
        st.compare_exchange(DROPPED, REAPED, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// Moves the value out of an OWNED instance the exit work just moved to DROPPING (I39).
    ///
    /// # Safety
    /// The instance is alive, DROPPING, and this thread moved it there: nothing else reads or
    /// writes the value (I39); called once, then the state becomes DROPPED.
    pub(super) unsafe fn take_value(self) -> T {
        // SAFETY: the caller's contract (I39); `value` is initialized (not a tombstone) and is read
        // out once, after which the allocation is a tombstone whose value is never read (I39).
        unsafe { ManuallyDrop::take(&mut (*self.p.as_ptr()).value) }
    }

    /// Writes a new value into a DROPPED tombstone and publishes it with `state` (I39).
    ///
    /// # Safety
    /// Under the writer lock, the instance is in this map and DROPPED (so no value is in it and
    /// no reader touches its value until it sees the new state) (I39).
    pub(super) unsafe fn refill(self, value: T, state: usize) {
        // SAFETY: the caller's contract (I39): the slot holds no value and no reference to it exists;
        // writing through the raw pointer touches only the value field (I39).
        unsafe {
            core::ptr::addr_of_mut!((*self.p.as_ptr()).value).write(ManuallyDrop::new(value))
        };
        // SAFETY: alive, the caller's contract (I39).
        let st = unsafe { self.state() };
        // Release: a reader whose Acquire load sees `state` sees the value written above (I39).
        st.store(state, Ordering::Release);
    }

    /// Moves the value out and frees the allocation.
    ///
    /// # Safety
    /// The instance is alive, unpublished, and no reference to it is left (I6); this is its only
    /// release.
    pub(super) unsafe fn into_value(self) -> T {
        // SAFETY: allocated as a `Box<Instance<T>>` by `alloc` (I5); the caller's contract.
        let b = unsafe { Box::from_raw(self.p.as_ptr()) };
        debug_assert!(!is_tombstone(b.state.load(Ordering::Relaxed)));
        ManuallyDrop::into_inner(b.value)
    }

    /// Drops the value — unless the instance is a tombstone, whose value its thread's exit work
    /// already moved out (I39) — and frees the allocation.
    ///
    /// # Safety
    /// As for [`into_value`](Self::into_value).
    pub(super) unsafe fn free(self) {
        // SAFETY: allocated as a `Box<Instance<T>>` by `alloc` (I5); the caller's contract.
        let mut b = unsafe { Box::from_raw(self.p.as_ptr()) };
        // Acquire: pairs with the exit work's Release store of DROPPED (I39); no tombstone is
        // DROPPING here (the exit work moves the value out under its gate lock, which every
        // path that frees took since, I39).
        if !is_tombstone(b.state.load(Ordering::Acquire)) {
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
pub(super) fn drop_payload(payload: Box<dyn Any + Send>) {
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
pub(super) fn is_dropping() -> bool {
    DROPPING.try_with(Cell::get).is_ok_and(|d| d != (0, 0))
}

/// Panics if this thread is dropping `owner`'s value of `rank`: a first touch from inside that
/// drop would make a new value for the rank, whose drop would make another, without end (std's
/// `thread_local!` refuses an access from its own destructor too).
#[track_caller]
pub(super) fn check_not_dropping(owner: usize, rank: u64) {
    if DROPPING
        .try_with(Cell::get)
        .is_ok_and(|d| d == (owner, rank))
    {
        panic!(
            "ranklocal: the value of {} on this RankLocal was asked for from inside its own drop \
             (it would be made again, and dropped again, without end)",
            RankId::from_raw(rank)
        );
    }
}
