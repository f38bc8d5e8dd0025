//! std `LocalKey`'s shortcuts on the keys of `Cell` and `RefCell` statics — `set`, `take`,
//! `replace`, `with_borrow`, `with_borrow_mut`, and `get_cell` for `Cell`'s `get` — each through
//! the owner-only family, with the static's initializer.

#![deny(unsafe_code)]

use core::cell::{Cell, RefCell};

use super::RankLocalKey;

/// std's `LocalKey<Cell<T>>` shortcuts, on the calling OS thread's own instance (created with the
/// static's initializer): through the owner-only family, so a value reached only this way is
/// dropped when its thread exits, before `join` returns, with [`RankLocalKey::with_own`]'s
/// exceptions (a value first made by a thread-local destructor that runs after the crate's exit
/// work is dropped by a later sweep; std's shortcuts panic there). `get` is the rank-aware `&T`
/// here, so std's `Cell` `get` is [`get_cell`](Self::get_cell).
///
/// ```
/// use ranklocal::rank_local;
/// use std::cell::Cell;
///
/// rank_local! {
///     static DEPTH: Cell<u32> = const { Cell::new(0) };
/// }
///
/// DEPTH.set(DEPTH.get_cell() + 1);
/// assert_eq!(DEPTH.replace(5), 1);
/// assert_eq!(DEPTH.take(), 5);
/// assert_eq!(DEPTH.get_cell(), 0);
/// ```
impl<T: Send + 'static> RankLocalKey<Cell<T>> {
    /// Sets this thread's own value to `value`; if the thread has none yet, `value` becomes it
    /// without running the initializer (std's `LocalKey<Cell<T>>::set`).
    #[inline]
    #[track_caller]
    pub fn set(&'static self, value: T) {
        self.inner.0.set_own(value, Cell::new, Cell::set);
    }

    /// A copy of this thread's own value (std's `LocalKey<Cell<T>>::get`).
    #[inline]
    #[track_caller]
    pub fn get_cell(&'static self) -> T
    where
        T: Copy,
    {
        self.with_own(Cell::get)
    }

    /// Replaces this thread's own value, returning the old one (std's `LocalKey<Cell<T>>::replace`).
    #[inline]
    #[track_caller]
    pub fn replace(&'static self, value: T) -> T {
        self.with_own(|c| c.replace(value))
    }

    /// Takes this thread's own value, leaving `T::default()` (std's `LocalKey<Cell<T>>::take`).
    #[inline]
    #[track_caller]
    pub fn take(&'static self) -> T
    where
        T: Default,
    {
        self.with_own(Cell::take)
    }
}

/// std's `LocalKey<RefCell<T>>` shortcuts, on the calling OS thread's own instance (created with
/// the static's initializer): through the owner-only family, so a value reached only this way is
/// dropped when its thread exits, before `join` returns, with [`RankLocalKey::with_own`]'s
/// exceptions.
///
/// ```
/// use ranklocal::rank_local;
/// use std::cell::RefCell;
///
/// rank_local! {
///     static SPANS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
/// }
///
/// SPANS.with_borrow_mut(|s| s.push(1));
/// assert_eq!(SPANS.with_borrow(|s| s.len()), 1);
/// assert_eq!(SPANS.replace(vec![2, 3]), [1]);
/// assert_eq!(SPANS.take(), [2, 3]);
/// SPANS.set(vec![4]);
/// assert_eq!(SPANS.with_borrow(|s| s[0]), 4);
/// ```
impl<T: Send + 'static> RankLocalKey<RefCell<T>> {
    /// Lends this thread's own value to `f`, borrowed (std's `LocalKey<RefCell<T>>::with_borrow`).
    ///
    /// # Panics
    /// If the value is mutably borrowed, and as [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn with_borrow<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        self.with_own(|c| f(&c.borrow()))
    }

    /// Lends this thread's own value to `f`, mutably borrowed (std's
    /// `LocalKey<RefCell<T>>::with_borrow_mut`).
    ///
    /// # Panics
    /// If the value is borrowed, and as [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn with_borrow_mut<R>(&'static self, f: impl FnOnce(&mut T) -> R) -> R {
        self.with_own(|c| f(&mut c.borrow_mut()))
    }

    /// Sets this thread's own value to `value`; if the thread has none yet, `value` becomes it
    /// without running the initializer (std's `LocalKey<RefCell<T>>::set`).
    ///
    /// # Panics
    /// If the value is borrowed, and as [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn set(&'static self, value: T) {
        self.inner
            .0
            .set_own(value, RefCell::new, |c, v| *c.borrow_mut() = v);
    }

    /// Replaces this thread's own value, returning the old one (std's
    /// `LocalKey<RefCell<T>>::replace`).
    ///
    /// # Panics
    /// If the value is borrowed, and as [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn replace(&'static self, value: T) -> T {
        self.with_own(|c| c.replace(value))
    }

    /// Takes this thread's own value, leaving `T::default()` (std's
    /// `LocalKey<RefCell<T>>::take`).
    ///
    /// # Panics
    /// If the value is borrowed, and as [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn take(&'static self) -> T
    where
        T: Default,
    {
        self.with_own(RefCell::take)
    }
}
