//! What every map backend shares: the erased instance pointer ([`Erased`]) that maps hold, and the
//! crate's one hash function for rank ids ([`mix`], [`RankHasher`]).
//!
//! The snapshot backends (`Epoch`, `ArcSwap`) index their persistent trie ([`crate::trie`]) by the
//! id's own bits and need no hash; `mix` spreads `RankLocal` uids for the thread cache, and
//! [`RankHasher`] hashes the `Baseline` backend's `HashMap` (every map arm of the benchmarks uses
//! the same cheap one-multiply hasher, so comparisons measure synchronization, not hashing).

use core::hash::Hasher;
use core::ptr::NonNull;

/// Multiplier for Fibonacci hashing: 2^64 / golden ratio, odd.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The crate's one hash function for rank ids.
#[inline]
pub(crate) fn mix(key: u64) -> u64 {
    key.wrapping_mul(GOLDEN)
}

/// A `Hasher` for `u64` rank ids that applies [`mix`] (for the `Baseline` backend's `HashMap`).
#[derive(Default, Clone, Copy)]
pub struct RankHasher(u64);

impl Hasher for RankHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for non-u64 keys, which this crate never hashes; fold bytes for totality.
        for &b in bytes {
            self.0 = mix(self.0 ^ u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, key: u64) {
        self.0 = mix(key);
    }
}

/// A type-erased pointer to one rank's instance (a `Box<T>` allocation owned by a `RankLocal`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Erased(NonNull<()>);

// SAFETY: an `Erased` is only a pointer value; it is dereferenced solely by the `RankLocal<T, _>`
// that created it (I5), and that type is `Sync` only when `T: Send + Sync` and `Send` only when
// `T: Send` (I7), so moving or sharing the pointer value between threads cannot let a `T` reach a
// thread that `T`'s own bounds forbid.
unsafe impl Send for Erased {}
// SAFETY: as for `Send` above (I7).
unsafe impl Sync for Erased {}

impl Erased {
    /// A placeholder that is never dereferenced (empty thread-cache entries).
    pub(crate) const DANGLING: Erased = Erased(NonNull::dangling());

    /// Leaks `value` into a stable heap allocation (I1).
    pub(crate) fn new<T>(value: Box<T>) -> Erased {
        Erased(NonNull::from(Box::leak(value)).cast())
    }

    /// The pointer, typed back by the caller (which must know `T`, I5).
    #[inline]
    pub(crate) fn as_ptr<T>(self) -> NonNull<T> {
        self.0.cast()
    }

    /// Re-wraps a pointer that [`as_ptr`](Self::as_ptr) returned (a trie slot).
    #[inline]
    pub(crate) fn from_non_null(p: NonNull<()>) -> Erased {
        Erased(p)
    }
}
