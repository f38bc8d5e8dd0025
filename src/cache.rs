//! The per-thread lookup cache in front of every `RankLocal` map.
//!
//! Each OS thread has a small set-associative table of `(uid, rank) -> pointer` entries: [`SETS`]
//! sets of [`WAYS`] entries. A lookup — the owner's own `get`, a delegate's `get` inside
//! `on_behalf_of`, or `get_for` — first probes this table: one thread-local access, compares, no
//! atomic read-modify-write, no pin, no shared write. Only a miss goes to the backend map, and
//! then fills an entry.
//!
//! **Placement and replacement.** `(uid, rank)` may sit in any way of set `(rank ^ uid) % SETS`.
//! Way 0 holds the set's most recently filled entry and is probed first, then ways 1, 2, 3 (all
//! inline, no call). A fill shifts the set down by one way, dropping the oldest entry, and writes
//! way 0; a hit writes nothing. So up to [`WAYS`] keys that share a set — four `RankLocal`s used
//! in turn by one thread, whatever their uids — are all kept, and once each has been filled every
//! lookup of them hits, without touching the map. (The earlier direct-mapped table, one entry per
//! index, let two `RankLocal`s whose uids agreed in the low bits evict each other on every `get`.)
//!
//! **Scans.** A lookup of another rank skips the fill when the set is *churning* and the key did
//! not just miss there ([`store_unless_churning`]): a scan over more ranks than the cache holds
//! then leaves the cache to what it holds, instead of writing four entries on every miss and
//! keeping none long enough to be hit.
//!
//! Entries are keyed by the `RankLocal`'s *uid*, a process-unique number that is never reused and
//! is replaced whenever an instance is removed (`clear`, `purge_exited`), so an entry can never be
//! mistaken for one of a dropped `RankLocal` that lived at the same address, nor outlive an
//! instance (invariant I4 in [`crate::rank_local`]). Entries are plain data: the thread-local has
//! no destructor and stays usable while the thread exits.

use core::cell::Cell;
use core::num::NonZeroU64;
use core::ptr::NonNull;

use crate::erased::Erased;
use crate::primitive::{tls, AtomicU64, Ordering};

/// Number of sets per thread (a power of two). Consecutive ranks of one `RankLocal` go to
/// consecutive sets, so a delegate cycling through 64 ranks of one `RankLocal` finds each in way
/// 0 of its own set.
pub(crate) const SETS: usize = 64;

/// Entries per set: this many keys that share a set never evict each other.
pub(crate) const WAYS: usize = 4;

/// One cached `(uid, rank) -> ptr`. 32 bytes (aligned), so a set is 128 bytes and its offset is
/// one shift of the index; 64 × 4 × 32 bytes = 8 KiB per thread.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Entry {
    uid: u64,
    rank: u64,
    /// Null only in an empty entry.
    ptr: *const (),
    /// This thread's [`CLOCK`] when the entry was filled (in the entry's padding).
    filled: u64,
}

/// A `RankLocal`'s key in the cache. Never 0, the uid an empty entry holds, so no lookup matches
/// an empty entry: built only from a non-zero number ([`Uid::fresh`], or read back from an
/// [`AtomicUid`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Uid(NonZeroU64);

impl Uid {
    /// `raw` as a uid to hand out: `None` for 0 (no uid) and for [`NO_UID`] (taken).
    #[inline]
    pub(crate) fn fresh(raw: u64) -> Option<Uid> {
        NonZeroU64::new(raw).map(Uid).filter(|&u| u != NO_UID)
    }

    /// The number.
    #[inline]
    pub(crate) const fn get(self) -> u64 {
        self.0.get()
    }
}

/// The uid of a `RankLocal` that has none yet: no entry is ever stored under it, so lookups with
/// it miss.
pub(crate) const NO_UID: Uid = Uid(match NonZeroU64::new(u64::MAX) {
    Some(max) => max,
    None => unreachable!(),
});

/// An atomic [`Uid`] (a `RankLocal`'s uid). It holds nothing but `Uid`s — its number is private to
/// this module, and `new`, `store` and `compare_exchange` take a `Uid` — so a load is a `Uid`
/// without a check: the owner's hit path loads it with no test for 0.
pub(crate) struct AtomicUid(AtomicU64);

impl AtomicUid {
    /// A cell holding `uid` (`const` except under loom, whose atomics are not).
    #[cfg(not(ranklocal_loom))]
    pub(crate) const fn new(uid: Uid) -> Self {
        AtomicUid(AtomicU64::new(uid.get()))
    }

    /// A cell holding `uid`.
    #[cfg(ranklocal_loom)]
    pub(crate) fn new(uid: Uid) -> Self {
        AtomicUid(AtomicU64::new(uid.get()))
    }

    /// The uid held, as `AtomicU64::load` with `order` (the caller says why that order).
    #[inline]
    pub(crate) fn load(&self, order: Ordering) -> Uid {
        Self::held(self.0.load(order))
    }

    /// A number read from the cell, as the `Uid` it was stored from.
    #[inline(always)]
    fn held(raw: u64) -> Uid {
        // SAFETY: every number in the cell came from a `Uid` (this module's `new`, `store` and
        // `compare_exchange` are its only writers), and a `Uid` is not 0.
        Uid(unsafe { NonZeroU64::new_unchecked(raw) })
    }

    /// Stores `uid`, as `AtomicU64::store` with `order` (the caller says why that order).
    #[inline]
    pub(crate) fn store(&self, uid: Uid, order: Ordering) {
        self.0.store(uid.get(), order);
    }

    /// As `AtomicU64::compare_exchange` with these orders (the caller says why those orders).
    #[inline]
    pub(crate) fn compare_exchange(
        &self,
        current: Uid,
        new: Uid,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Uid, Uid> {
        self.0
            .compare_exchange(current.get(), new.get(), success, failure)
            .map(Self::held)
            .map_err(Self::held)
    }
}

/// An empty entry: all zero bytes, so the whole cache is zero-initialized — it lives in `.tbss`,
/// and a thread that never uses the crate pays no copy of an 8 KiB initializer at its start.
/// It never answers a lookup: a lookup's uid is a [`Uid`], never 0.
const EMPTY: Entry = Entry {
    uid: 0,
    rank: 0,
    ptr: core::ptr::null(),
    filled: 0,
};

type Set = [Cell<Entry>; WAYS];

/// An empty set: the initial value of each of the cache's sets (a `const` item, each use a fresh
/// array, so the cache's initializer needs no inline `const` block).
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SET: Set = {
    #[allow(clippy::declare_interior_mutable_const)]
    const WAY: Cell<Entry> = Cell::new(EMPTY);
    [WAY; WAYS]
};

tls! {
    static CACHE: [Set; SETS] = const { [EMPTY_SET; SETS] };
}

tls! {
    /// This thread's fill attempts so far (every [`store`] and [`store_unless_churning`]): the
    /// age of an entry is the number of misses since it was filled.
    static CLOCK: Cell<u64> = const { Cell::new(0) };
}

/// A set whose oldest entry was filled fewer than this many fill attempts ago is *churning*: the
/// keys this thread misses do not fit in the cache (a scan over more ranks than it holds), and
/// [`store_unless_churning`] leaves it as it is. In a scan over many ranks, a set's oldest entry
/// is about `SETS * WAYS` attempts old when every miss fills; with this bound a set takes about
/// one fill in 20 of its misses, and its entries stay long enough for a scan over up to about
/// this many ranks to hit them.
const CHURN: u64 = (16 * SETS * WAYS) as u64;

/// The set for `(uid, rank)`: ranks are spread by a per-`RankLocal` offset, the low bits of its
/// uid, so consecutive ranks of one `RankLocal` go to distinct sets.
#[inline]
pub(crate) fn set_index(uid: Uid, rank: u64) -> usize {
    (rank ^ uid.get()) as usize & (SETS - 1)
}

/// The cached pointer for `(uid, rank)`, if this thread has one: way 0 of its set (the most
/// recently filled entry) first, then the older ways. Misses when `rank` is 0 (the thread has no
/// id yet) or `uid` is [`NO_UID`]. A hit writes nothing.
#[inline]
pub(crate) fn lookup(uid: Uid, rank: u64) -> Option<NonNull<()>> {
    // The closure returns a raw pointer, not the `Entry`: `with`'s result then has no niche in a
    // loaded value, and the compiler folds its "destroyed?" check away (this TLS has no
    // destructor), which it cannot do for a loaded `NonNull`.
    NonNull::new(CACHE.with(|c| {
        let way0 = &c[set_index(uid, rank)][0];
        // The pointer is read before the compares, with a volatile read so that the compiler
        // keeps it there, addressed directly off the thread pointer like the compared fields;
        // sunk into the hit branch, it would be loaded through the materialized address of the
        // set instead: one more instruction and a longer dependent chain on the owner's hit path
        // (0.98-1.02x the `thread_local` crate's `get` without this, 0.91-1.00x with it).
        // SAFETY: `way0` is a live `Cell` of this thread's cache, plain `Copy` data that only this
        // thread reaches and that no reference points into (I23), so this read is
        // `way0.get().ptr`.
        let ptr = unsafe { core::ptr::addr_of!((*way0.as_ptr()).ptr).read_volatile() };
        let e = way0.get();
        if e.uid == uid.get() && e.rank == rank {
            // Said so the hit path has no null test.
            if ptr.is_null() {
                // SAFETY: unreachable: a `Uid` is not 0 and only empty entries hold uid 0, so
                // this entry was stored, with a non-null pointer (`store` takes an `Erased`).
                unsafe { core::hint::unreachable_unchecked() }
            }
            return ptr.cast_mut();
        }
        older(&c[set_index(uid, rank)], uid, rank)
    }))
}

/// Ways `1..WAYS` of `set`, probed after way 0 missed. Inline: a call here would make the hit path
/// save registers for the slow path's call; a hit in way 1 costs a few instructions more than one
/// in way 0.
#[inline(always)]
fn older(set: &Set, uid: Uid, rank: u64) -> *mut () {
    for way in &set[1..] {
        let e = way.get();
        if e.uid == uid.get() && e.rank == rank {
            if e.ptr.is_null() {
                // SAFETY: unreachable, as in `lookup`: a `Uid` is not 0, so this entry was stored.
                unsafe { core::hint::unreachable_unchecked() }
            }
            return e.ptr.cast_mut();
        }
    }
    core::ptr::null_mut()
}

/// Remembers `(uid, rank) -> ptr` on this thread in way 0 of its set, shifting the set's other
/// entries one way down and dropping the oldest. Called only after `lookup` missed, so the key is
/// not in the set already.
#[inline]
pub(crate) fn store(uid: Uid, rank: u64, ptr: Erased) {
    debug_assert!(uid != NO_UID && rank != 0);
    let now = tick();
    CACHE.with(|c| fill(&c[set_index(uid, rank)], uid, rank, ptr, now));
}

/// [`store`], unless the set is churning ([`CHURN`]) and the key is not the one that last missed
/// there: then only the key is remembered ([`MISSED`]), and the set keeps what it holds. For
/// lookups of other ranks, which a thread may make over more ranks than the cache holds (a
/// monitor, a collective): filling on every miss would write the cache on every lookup and keep
/// nothing long enough to be hit again; so a scan leaves most of the cache to the keys already
/// in it and fills a set about once in 20 of its misses. A key that misses twice in a row in its
/// set — a worker serving one rank after another, each a few times — is filled on its second
/// miss.
#[inline]
pub(crate) fn store_unless_churning(uid: Uid, rank: u64, ptr: Erased) {
    debug_assert!(uid != NO_UID && rank != 0);
    let now = tick();
    let index = set_index(uid, rank);
    CACHE.with(|c| {
        let set = &c[index];
        let oldest = set[WAYS - 1].get();
        if oldest.uid != 0 && now.wrapping_sub(oldest.filled) < CHURN {
            // A digest, not the key: a collision only fills (or skips) once more.
            let key = rank ^ uid.get().rotate_left(32);
            let again = MISSED.with(|m| m[index].replace(key) == key);
            if !again {
                return;
            }
        }
        fill(set, uid, rank, ptr, now)
    });
}

tls! {
    /// Per set, a digest of the key whose fill [`store_unless_churning`] last skipped there.
    static MISSED: [Cell<u64>; SETS] = const { [ZERO; SETS] };
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: Cell<u64> = Cell::new(0);

/// One more fill attempt on this thread's [`CLOCK`]; returns the new time.
#[inline]
fn tick() -> u64 {
    CLOCK.with(|t| {
        let now = t.get().wrapping_add(1);
        t.set(now);
        now
    })
}

/// Writes `(uid, rank) -> ptr` into way 0 of `set`, shifting the others down by one way.
#[inline]
fn fill(set: &Set, uid: Uid, rank: u64, ptr: Erased, now: u64) {
    for w in (1..WAYS).rev() {
        set[w].set(set[w - 1].get());
    }
    set[0].set(Entry {
        uid: uid.get(),
        rank,
        ptr: ptr.as_ptr::<()>().as_ptr(),
        filled: now,
    });
}

/// Tag of a scoped entry filled by a thread for its own, live rank: usable without a pin (I34).
/// Rank ids stay far below 2^62, so a tagged rank never equals a plain one, and a
/// `get` (untagged) lookup never meets a scoped entry, nor a scoped lookup a `get` entry.
pub(crate) const OWNER_TAG: u64 = 1 << 63;

/// Tag of a scoped entry filled under an epoch pin: usable only under a pin, with the uid loaded
/// under that pin (I34).
pub(crate) const PINNED_TAG: u64 = 1 << 62;

/// Tag of an entry filled by `with_own`/`try_with_own` for the thread's own, live rank (both tag
/// bits): usable without a pin, like an owner entry (I34), but apart from it, so that the first
/// rank-aware `with` of an instance only `with_own` reached misses and upgrades it (I39).
pub(crate) const OWN_TAG: u64 = OWNER_TAG | PINNED_TAG;

/// Empties this thread's cache. Called by the thread's exit hook (I34); the cache has no
/// destructor, so this works while the thread exits (I23).
pub(crate) fn wipe() {
    CACHE.with(|c| {
        for set in c {
            for way in set {
                way.set(EMPTY);
            }
        }
    });
}

#[cfg(all(test, not(ranklocal_loom)))]
mod tests {
    use super::*;

    /// `(uid, rank(k))` for `k = 0, 1, ...` all share one set.
    fn rank(k: u64) -> u64 {
        1 + SETS as u64 * k
    }

    fn any_ptr() -> Erased {
        Erased::from_non_null(NonNull::<u8>::dangling().cast())
    }

    /// `store` keeps a set's [`WAYS`] most recent fills: 20 keys of one set filled in turn, every
    /// key looked up after each fill.
    #[test]
    fn a_set_keeps_its_most_recent_fills() {
        std::thread::spawn(|| {
            let uid = Uid::fresh(0x5eed_0001).unwrap();
            for filled in 0..20u64 {
                assert!(lookup(uid, rank(filled)).is_none());
                store(uid, rank(filled), any_ptr());
                for k in 0..=filled {
                    let kept = filled - k < WAYS as u64;
                    assert_eq!(
                        lookup(uid, rank(k)).is_some(),
                        kept,
                        "key {k} after {filled}"
                    );
                }
            }
        })
        .join()
        .unwrap();
    }

    /// The churn bound's edge: a set whose oldest entry is `CHURN - 1` misses old is churning, one
    /// `CHURN` misses old is not (a fresh thread's clock starts at 0).
    #[test]
    fn a_set_churns_for_exactly_churn_misses() {
        std::thread::spawn(|| {
            let uid = Uid::fresh(0x5eed_0012).unwrap();
            for k in 0..WAYS as u64 {
                store_unless_churning(uid, rank(k), any_ptr()); // the oldest filled at 1
            }
            // misses in another set (uid 0x..13, rank 2: set 1; this one is set 3)
            let other = Uid::fresh(0x5eed_0013).unwrap();
            for k in WAYS as u64..CHURN - 1 {
                store_unless_churning(other, 2 + 2 * SETS as u64 * k, any_ptr());
            }
            store_unless_churning(uid, rank(100), any_ptr()); // at CHURN: CHURN - 1 old
            assert!(
                lookup(uid, rank(100)).is_none(),
                "filled CHURN - 1 misses after"
            );
            store_unless_churning(uid, rank(101), any_ptr()); // CHURN old
            assert!(
                lookup(uid, rank(101)).is_some(),
                "not filled CHURN misses after"
            );
        })
        .join()
        .unwrap();
    }

    /// `store_unless_churning` fills a set until it is full, then leaves it alone while its oldest
    /// entry is younger than [`CHURN`] fill attempts — but for a key that misses twice in a row
    /// there — and fills it again once it is older.
    #[test]
    fn a_churning_set_is_left_alone_until_its_oldest_entry_ages() {
        std::thread::spawn(|| {
            let uid = Uid::fresh(0x5eed_0002).unwrap();
            for k in 0..WAYS as u64 {
                store_unless_churning(uid, rank(k), any_ptr());
            }
            // a scan's further keys: the set is churning, nothing is written
            for k in WAYS as u64..WAYS as u64 + 100 {
                store_unless_churning(uid, rank(k), any_ptr());
                assert!(lookup(uid, rank(k)).is_none(), "key {k} was filled");
            }
            assert!((0..WAYS as u64).all(|k| lookup(uid, rank(k)).is_some()));
            // a key that misses twice in a row there is filled on its second miss
            let burst = rank(500);
            store_unless_churning(uid, burst, any_ptr());
            assert!(lookup(uid, burst).is_none(), "filled on its first miss");
            store_unless_churning(uid, burst, any_ptr());
            assert!(
                lookup(uid, burst).is_some(),
                "not filled on its second miss"
            );
            // misses elsewhere age the set (another uid: other sets and this one alike)
            let other = Uid::fresh(0x5eed_0003).unwrap();
            for k in 0..CHURN {
                store_unless_churning(other, 2 + 2 * SETS as u64 * k, any_ptr());
            }
            let late = rank(1_000);
            store_unless_churning(uid, late, any_ptr());
            assert!(lookup(uid, late).is_some(), "an aged set is filled again");
        })
        .join()
        .unwrap();
    }
}
