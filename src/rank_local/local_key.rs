//! What std's `LocalKey` offers besides `with`, with std's meaning: [`AccessError`] (the error of
//! `try_with`/`try_with_own`) and the shortcuts for owner-only `Cell`/`RefCell` state — `set`,
//! `take`, `replace`, `with_borrow`, `with_borrow_mut`, and `get_cell` for a `Cell`'s `get`
//! (`get` is the rank-aware `&T` here). Each goes through the owner-only family (`with_own*`):
//! it reaches the calling OS thread's own instance, also inside `on_behalf_of`, and a value
//! reached only this way is dropped when its thread exits, on that thread, before `join` returns.

#![deny(unsafe_code)]

use core::cell::{Cell, RefCell};
use core::fmt;

use super::RankLocal;
use crate::backend::Backend;

/// The error of [`RankLocal::try_with`] and [`RankLocal::try_with_own`] (and of a
/// `rank_local!` key's): the calling thread's own storage is being or has been torn down — the
/// call comes from a thread-local destructor that runs after the crate's exit work — as std's
/// `std::thread::AccessError`.
///
/// ```
/// use ranklocal::RankLocal;
/// use std::cell::Cell;
///
/// static DEPTH: RankLocal<Cell<u32>> = RankLocal::new();
///
/// struct Late;
/// impl Drop for Late {
///     fn drop(&mut self) {
///         // the crate's exit work may already have run on this thread: then this is an error,
///         // never a value created too late to be dropped at the exit
///         let _: Result<u32, ranklocal::AccessError> = DEPTH.try_with_own(Cell::get);
///     }
/// }
/// thread_local!(static LATE: Late = const { Late });
/// std::thread::spawn(|| {
///     LATE.with(|_| ());
///     assert_eq!(DEPTH.try_with_own(|d| d.replace(1)), Ok(0));
/// })
/// .join()
/// .unwrap();
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AccessError {
    _private: (),
}

impl AccessError {
    pub(crate) fn new() -> AccessError {
        AccessError { _private: () }
    }
}

impl fmt::Debug for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessError").finish_non_exhaustive()
    }
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("this thread's rank-local storage is being or has been torn down")
    }
}

impl std::error::Error for AccessError {}

/// What std's `set` does, for any owner-only value: `value` becomes this thread's own instance,
/// made by `make`, if it has none (no initializer runs), else `put` stores it into the existing
/// one.
impl<C: Send + 'static, B: Backend> RankLocal<C, B> {
    #[inline]
    #[track_caller]
    pub(crate) fn set_own<V>(&self, value: V, make: impl FnOnce(V) -> C, put: impl FnOnce(&C, V)) {
        let value = Cell::new(Some(value));
        self.with_own_or(
            || make(value.take().expect("ranklocal: set's value is used once")),
            |c| {
                if let Some(v) = value.take() {
                    put(c, v);
                }
            },
        );
    }
}

/// std's `LocalKey<Cell<T>>` shortcuts, on the calling OS thread's own instance: through the
/// owner-only family, so a value reached only this way is dropped when its thread exits, with
/// [`with_own`](RankLocal::with_own)'s exceptions (a value first made by a thread-local destructor
/// that runs after the crate's exit work is dropped by a later sweep; std's shortcuts panic there).
impl<T: Send + 'static, B: Backend> RankLocal<Cell<T>, B> {
    /// Sets this thread's own value to `value`, as std's `LocalKey<Cell<T>>::set`: if the thread
    /// has no instance yet, `value` becomes it (no `T::default()` is built).
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// static ID: RankLocal<Cell<u64>> = RankLocal::new();
    /// ID.set(7);
    /// assert_eq!(ID.get_cell(), 7);
    /// std::thread::spawn(|| assert_eq!(ID.get_cell(), 0)).join().unwrap(); // its own value
    /// ```
    ///
    /// # Panics
    /// As [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn set(&self, value: T) {
        self.set_own(value, Cell::new, Cell::set);
    }

    /// Replaces this thread's own value with `value` and returns the old one, creating it with
    /// `T::default()` first if needed: std's `LocalKey<Cell<T>>::replace`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let depth: RankLocal<Cell<u32>> = RankLocal::new();
    /// assert_eq!(depth.replace(3), 0);
    /// assert_eq!(depth.replace(4), 3);
    /// ```
    ///
    /// # Panics
    /// As [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn replace(&self, value: T) -> T
    where
        T: Default,
    {
        self.with_own(|c| c.replace(value))
    }

    /// Takes this thread's own value, leaving `T::default()`: std's `LocalKey<Cell<T>>::take`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let pending: RankLocal<Cell<Option<u32>>> = RankLocal::new();
    /// pending.set(Some(1));
    /// assert_eq!(pending.take(), Some(1));
    /// assert_eq!(pending.take(), None);
    /// ```
    ///
    /// # Panics
    /// As [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn take(&self) -> T
    where
        T: Default,
    {
        self.with_own(Cell::take)
    }
}

/// std's `LocalKey<Cell<T>>::get` for a `Copy` value, named `get_cell`: `get` is the rank-aware
/// method that returns `&T`.
impl<T: Copy + Send + 'static, B: Backend> RankLocal<Cell<T>, B> {
    /// A copy of this thread's own value, created with `T::default()` first if needed: std's
    /// `LocalKey<Cell<T>>::get`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let hits: RankLocal<Cell<u32>> = RankLocal::new();
    /// assert_eq!(hits.get_cell(), 0);
    /// hits.set(hits.get_cell() + 1);
    /// assert_eq!(hits.get_cell(), 1);
    /// ```
    ///
    /// # Panics
    /// As [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn get_cell(&self) -> T
    where
        T: Default,
    {
        self.with_own(Cell::get)
    }
}

/// std's `LocalKey<RefCell<T>>` shortcuts, on the calling OS thread's own instance.
impl<T: Send + 'static, B: Backend> RankLocal<RefCell<T>, B> {
    /// Lends this thread's own value to `f`, borrowed, creating it with `T::default()` first if
    /// needed: std's `LocalKey<RefCell<T>>::with_borrow`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    ///
    /// static SPANS: RankLocal<RefCell<Vec<u64>>> = RankLocal::new();
    /// SPANS.with_borrow_mut(|s| s.push(1));
    /// assert_eq!(SPANS.with_borrow(|s| s.len()), 1);
    /// ```
    ///
    /// # Panics
    /// If the value is mutably borrowed (as `RefCell::borrow`), and as
    /// [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn with_borrow<R>(&self, f: impl FnOnce(&T) -> R) -> R
    where
        T: Default,
    {
        self.with_own(|c| f(&c.borrow()))
    }

    /// Lends this thread's own value to `f`, mutably borrowed, creating it with `T::default()`
    /// first if needed: std's `LocalKey<RefCell<T>>::with_borrow_mut`.
    ///
    /// # Panics
    /// If the value is borrowed (as `RefCell::borrow_mut`), and as [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn with_borrow_mut<R>(&self, f: impl FnOnce(&mut T) -> R) -> R
    where
        T: Default,
    {
        self.with_own(|c| f(&mut c.borrow_mut()))
    }

    /// Sets this thread's own value to `value`, as std's `LocalKey<RefCell<T>>::set`: if the
    /// thread has no instance yet, `value` becomes it (no `T::default()` is built).
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    ///
    /// let name: RankLocal<RefCell<String>> = RankLocal::new();
    /// name.set("worker-1".to_string());
    /// assert_eq!(name.with_borrow(|n| n.clone()), "worker-1");
    /// ```
    ///
    /// # Panics
    /// If the value is borrowed, and as [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn set(&self, value: T) {
        self.set_own(value, RefCell::new, |c, v| *c.borrow_mut() = v);
    }

    /// Takes this thread's own value, leaving `T::default()`: std's
    /// `LocalKey<RefCell<T>>::take`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    ///
    /// let batch: RankLocal<RefCell<Vec<u32>>> = RankLocal::new();
    /// batch.with_borrow_mut(|b| b.extend([1, 2]));
    /// assert_eq!(batch.take(), [1, 2]);
    /// assert!(batch.with_borrow(Vec::is_empty));
    /// ```
    ///
    /// # Panics
    /// If the value is borrowed, and as [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn take(&self) -> T
    where
        T: Default,
    {
        self.with_own(RefCell::take)
    }

    /// Replaces this thread's own value with `value` and returns the old one, creating it with
    /// `T::default()` first if needed: std's `LocalKey<RefCell<T>>::replace`.
    ///
    /// # Panics
    /// If the value is borrowed, and as [`with_own`](Self::with_own).
    #[inline]
    #[track_caller]
    pub fn replace(&self, value: T) -> T
    where
        T: Default,
    {
        self.with_own(|c| c.replace(value))
    }
}
