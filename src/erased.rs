//! [`Erased`]: the type-erased instance pointer every map backend and the thread cache hold.
//!
//! Maps are not generic over `T` (one backend implementation serves every `RankLocal<T, B>`), so
//! they store instances as `Erased` pointers; only the `RankLocal<T, _>` that made an instance
//! types it back (`rank_local::raw`, invariant I5).

use core::ptr::NonNull;

/// A type-erased pointer to one rank's instance (a `Box` allocation owned by a `RankLocal`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Erased(NonNull<()>);

// SAFETY: an `Erased` is only a pointer value; it is dereferenced solely by the `RankLocal<T, _>`
// that created it (I5), and that type is `Sync` and `Send` only when `T: Send`, its methods that
// hand a `&T` to another thread than the owner's need `T: Sync` (I7), so moving or sharing the
// pointer value between threads cannot let a `T` reach a thread that `T`'s own bounds forbid.
unsafe impl Send for Erased {}
// SAFETY: as for `Send` above (I7).
unsafe impl Sync for Erased {}

impl Erased {
    /// Leaks `value` into a stable heap allocation (I1).
    pub(crate) fn new<T>(value: Box<T>) -> Erased {
        Erased(NonNull::from(Box::leak(value)).cast())
    }

    /// The pointer, typed back by the caller (which must know `T`, I5).
    #[inline]
    pub(crate) fn as_ptr<T>(self) -> NonNull<T> {
        self.0.cast()
    }

    /// Re-wraps a pointer that [`as_ptr`](Self::as_ptr) returned (a trie slot, a cache entry).
    #[inline]
    pub(crate) fn from_non_null(p: NonNull<()>) -> Erased {
        Erased(p)
    }
}
