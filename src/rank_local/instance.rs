//! One instance: its allocation (I1), the typed pointer every lookup hands out through (I5), its
//! state machine (I30, I31), and dropping removed instances — each as its own rank, and so that a
//! panicking `T::drop` does not stop the others (I10).

use core::any::Any;
use core::cell::Cell;
use core::marker::PhantomData;
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

/// One allocation per instance (I1, I5): the value first (`repr(C)`: a pointer to the `Instance`
/// is a pointer to its `T`, so caches and slots hand out `&T` by a plain cast) and its state (I30).
#[repr(C)]
struct Instance<T> {
    value: T,
    state: AtomicUsize,
    /// The `RankLocal`'s walk count when the instance was published: an `iter()` that ran since
    /// (a higher count) may hold it in its snapshot, so it counts as escaped (I31). Written once,
    /// before publication, and read only under the writer lock.
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
            value,
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

    /// Moves the instance to ESCAPED unless it is being reclaimed; `false` if it is (the caller
    /// then treats the rank's instance as absent) (I30, I31).
    ///
    /// # Safety
    /// As for [`state`](Self::state): the instance is protected while this runs.
    #[inline]
    pub(super) unsafe fn escape(self) -> bool {
        // SAFETY: the caller's contract (I32, I33).
        let st = unsafe { self.state() };
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

    /// Moves the value out and frees the allocation.
    ///
    /// # Safety
    /// The instance is alive, unpublished, and no reference to it is left (I6); this is its only
    /// release.
    pub(super) unsafe fn into_value(self) -> T {
        // SAFETY: allocated as a `Box<Instance<T>>` by `alloc` (I5); the caller's contract.
        unsafe { Box::from_raw(self.p.as_ptr()) }.value
    }

    /// Drops the value and frees the allocation.
    ///
    /// # Safety
    /// As for [`into_value`](Self::into_value).
    pub(super) unsafe fn free(self) {
        // SAFETY: allocated as a `Box<Instance<T>>` by `alloc` (I5); the caller's contract.
        drop(unsafe { Box::from_raw(self.p.as_ptr()) });
    }
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
