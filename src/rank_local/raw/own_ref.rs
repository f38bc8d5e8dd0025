//! [`OwnRef`]: the owner-only family's reference form (I41). A guard, so that the crate knows
//! when its thread can no longer reach a value: a value only guards and `with_own*` reached is
//! still dropped at its thread's exit (I39), or, if a guard of it is alive then, by the last
//! guard's drop, on that thread.

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::Deref;
use core::ptr::NonNull;

use super::gate;
use super::instance::InstancePtr;

/// A reference to the calling thread's own instance of a [`RankLocal`](crate::RankLocal),
/// returned by [`get_own`](crate::RankLocal::get_own), [`get_own_or`](crate::RankLocal::get_own_or)
/// and [`try_get_own`](crate::RankLocal::try_get_own) (and their `rank_local!` forms).
///
/// It derefs to `T`, and is neither `Send` nor `Sync`: it stays on the thread whose value it
/// lends. While it lives, the value stays where it is; a value only ever reached through
/// `OwnRef`s and [`with_own`](crate::RankLocal::with_own) is still dropped when its thread exits,
/// on that thread, as std's `thread_local!` drops its values — or, if an `OwnRef` of it is alive
/// at that moment (kept by another thread-local's destructor), when the last one is dropped, on
/// that thread. [`OwnRef::leak`] turns it into a plain `&T` that lasts as long as the
/// `RankLocal` is borrowed; the value is then kept until `&mut` access or the `RankLocal`'s drop.
///
/// ```
/// use ranklocal::{OwnRef, RankLocal};
/// use std::cell::RefCell;
///
/// let cache: RankLocal<RefCell<Vec<u32>>> = RankLocal::new();
/// let c = cache.get_own(); // held across calls, as a searcher holds its cache
/// c.borrow_mut().push(1);
/// c.borrow_mut().push(2);
/// assert_eq!(c.borrow().len(), 2);
/// drop(c);
/// let kept: &RefCell<Vec<u32>> = OwnRef::leak(cache.get_own());
/// assert_eq!(kept.borrow().len(), 2);
/// ```
///
/// ```compile_fail
/// // `OwnRef` is not `Send`: the value it lends is its thread's own
/// let rl: ranklocal::RankLocal<u32> = ranklocal::RankLocal::new();
/// let g = rl.get_own();
/// std::thread::scope(|s| {
///     s.spawn(move || *g);
/// });
/// ```
pub struct OwnRef<'a, T> {
    /// The value: an instance's first field (I5), or a kept `&'a T`.
    value: NonNull<T>,
    /// `true` if the instance's guard count counts this guard (I41).
    counted: bool,
    /// Lends a `&'a T`; `*const ()` makes it `!Send` and `!Sync`.
    _life: PhantomData<(&'a T, *const ())>,
}

impl<'a, T> OwnRef<'a, T> {
    /// A guard of a value kept for `'a` (ESCAPED, I31): nothing to count. (`rank_local!` keys',
    /// which do not exist under loom.)
    #[cfg_attr(ranklocal_loom, allow(dead_code))]
    #[inline]
    pub(crate) fn kept(v: &'a T) -> Self {
        OwnRef {
            value: NonNull::from(v),
            counted: false,
            _life: PhantomData,
        }
    }

    /// The guard of a [`Held`] count.
    #[inline]
    pub(crate) fn held(h: Held<'a, T>) -> Self {
        let h = ManuallyDrop::new(h);
        OwnRef {
            value: h.p.value_ptr(),
            counted: true,
            _life: PhantomData,
        }
    }

    /// The value, as a `&T` that lasts as long as the `RankLocal` is borrowed. The value is then
    /// kept (as one [`get`](crate::RankLocal::get) handed out) until `&mut` access or the
    /// `RankLocal`'s drop: it is no longer dropped when its thread exits.
    ///
    /// ```
    /// use ranklocal::{OwnRef, RankLocal};
    /// use std::cell::Cell;
    ///
    /// let rl: RankLocal<Cell<u32>> = RankLocal::new();
    /// let c: &Cell<u32> = OwnRef::leak(rl.get_own());
    /// c.set(4);
    /// assert_eq!(rl.with_own(Cell::get), 4);
    /// ```
    pub fn leak(this: Self) -> &'a T {
        let this = ManuallyDrop::new(this);
        if this.counted {
            let p = InstancePtr::from_value_ptr(this.value);
            // SAFETY: a counted guard, on its instance's own thread (`OwnRef` is not `Send`):
            // the instance is allocated and its value in place while the count counts it (I41).
            let meta = unsafe { p.meta() };
            assert!(
                meta.keep(),
                "ranklocal: an OwnRef's value is in place while the guard lives"
            );
            // SAFETY: as above; the value is ESCAPED now, so a deferred drop has nothing to do
            // and is cleared (I41).
            unsafe {
                if meta.release() {
                    meta.take_linger();
                }
            }
        }
        // SAFETY: the value is ESCAPED (just made so, or a kept `&'a T`): kept until `&mut` or
        // the `RankLocal`'s drop, which the `'a` borrow excludes (I31, I41).
        unsafe { this.value.as_ref() }
    }
}

/// A guard count taken for an instance and not yet wrapped in an [`OwnRef`]: what the raw
/// layer's lookups return, so that the `OwnRef` is built where the hit and the slow path meet and
/// the compiler knows it is counted. Not `Send`; its drop gives the count back.
pub(crate) struct Held<'a, T> {
    p: InstancePtr<T>,
    _life: PhantomData<(&'a T, *const ())>,
}

impl<'a, T> Held<'a, T> {
    /// A count of `p`'s guards, taken.
    ///
    /// # Safety
    /// This thread is `p`'s own and has just counted the guard ([`Meta::hold`]), and the count
    /// keeps the instance's value in place for `'a` (I41).
    ///
    /// [`Meta::hold`]: super::instance::Meta::hold
    #[inline]
    pub(super) unsafe fn new(p: InstancePtr<T>) -> Self {
        Held {
            p,
            _life: PhantomData,
        }
    }
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        drop(OwnRef::<T> {
            value: self.p.value_ptr(),
            counted: true,
            _life: PhantomData,
        });
    }
}

impl<T> Deref for OwnRef<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: a counted guard's value stays in place while the count counts it (I41); an
        // uncounted one is a kept `&'a T` (I31). The `&T` lives no longer than `&self`, so it ends
        // before the guard's drop, on this thread.
        unsafe { self.value.as_ref() }
    }
}

impl<T> Drop for OwnRef<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let p = InstancePtr::from_value_ptr(self.value);
        // SAFETY: a counted guard, dropped on its instance's own thread (`OwnRef` is not `Send`),
        // whose count keeps the instance allocated (I41).
        if unsafe { p.meta().release() } {
            gate::end_linger(p);
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for OwnRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Display> fmt::Display for OwnRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
