//! The per-thread lookup cache in front of every `RankLocal` map.
//!
//! Each OS thread has a small direct-mapped table of `(uid, rank) -> pointer` entries. A lookup —
//! the owner's own `get`, a delegate's `get` inside `on_behalf_of`, or `get_for` — first probes
//! this table: one thread-local access, two compares, no atomic read-modify-write, no pin, no
//! shared write. Only a miss goes to the backend map, and then fills the entry.
//!
//! Entries are keyed by the `RankLocal`'s *uid*, a process-unique number that is never reused and
//! is replaced whenever an instance is removed (`clear`, `purge_exited`), so an entry can never be
//! mistaken for one of a dropped `RankLocal` that lived at the same address, nor outlive an
//! instance (invariant I4 in [`crate::rank_local`]). Entries are plain data: the thread-local has
//! no destructor and stays usable while the thread exits.

use core::cell::Cell;
use core::ptr::NonNull;

use crate::primitive::tls;
use crate::snapshot::Erased;

/// Number of entries per thread (a power of two). 64 entries × 24 bytes = 1.5 KiB per thread;
/// consecutive ranks of one `RankLocal` map to distinct entries.
pub(crate) const WAYS: usize = 64;

#[derive(Clone, Copy)]
struct Entry {
    uid: u64,
    rank: u64,
    ptr: Erased,
}

/// Never matches a lookup: no rank id is `u64::MAX` (identity asserts it), and no entry is ever
/// stored for rank 0 or uid 0, so a lookup made before the thread or the `RankLocal` has an id
/// (`rank == 0` or `uid == 0`) misses too. Its dangling pointer is never handed out.
const EMPTY: Entry = Entry {
    uid: 0,
    rank: u64::MAX,
    ptr: Erased::DANGLING,
};

tls! {
    static CACHE: [Cell<Entry>; WAYS] = const { [const { Cell::new(EMPTY) }; WAYS] };
}

/// The entry index for `(uid, rank)`: ranks are spread by a per-`RankLocal` offset, the low bits
/// of its uid. Uids are consecutive counter values multiplied by an odd constant, so the low six
/// bits of 64 consecutive uids are distinct: several `RankLocal`s used by one thread do not
/// collide, and consecutive ranks of one `RankLocal` never do.
#[inline]
fn index(uid: u64, rank: u64) -> usize {
    (rank ^ uid) as usize & (WAYS - 1)
}

/// The cached pointer for `(uid, rank)`, if this thread has one. Misses when `rank` or `uid` is 0
/// (not assigned yet).
#[inline]
pub(crate) fn lookup(uid: u64, rank: u64) -> Option<NonNull<()>> {
    // The closure returns a raw pointer, not the `Entry`: `with`'s result then has no niche in a
    // loaded value, and the compiler folds its "destroyed?" check away (this TLS has no
    // destructor), which it cannot do for a loaded `NonNull`.
    let p = CACHE.with(|c| {
        let e = c[index(uid, rank)].get();
        if e.uid == uid && e.rank == rank {
            e.ptr.as_ptr::<()>().as_ptr()
        } else {
            core::ptr::null_mut()
        }
    });
    NonNull::new(p)
}

/// Remembers `(uid, rank) -> ptr` on this thread, evicting whatever shared its entry.
#[inline]
pub(crate) fn store(uid: u64, rank: u64, ptr: Erased) {
    debug_assert!(uid != 0 && rank != 0 && rank != u64::MAX);
    CACHE.with(|c| c[index(uid, rank)].set(Entry { uid, rank, ptr }));
}
