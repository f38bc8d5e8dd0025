//! The immutable snapshot the `Epoch` and `ArcSwap` backends publish: an open-addressed table
//! from rank id to an erased pointer to that rank's instance.
//!
//! A snapshot is built once by a writer and never changed after it is published (invariant I3 in
//! [`crate::rank_local`]); an insert builds a new one with one more entry (copy-on-write, O(n)).
//! The table is linear-probing with Fibonacci hashing and a load factor of at most 1/2, so a
//! lookup of a present key is one multiply, one shift and usually one probe. The same mixing
//! function ([`mix`]) hashes the `Baseline` backend's `HashMap`, so backend comparisons measure
//! synchronization, not hashing.

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
}

#[derive(Clone, Copy)]
struct Slot {
    /// Rank id; 0 marks an empty slot (ids start at 1).
    key: u64,
    ptr: Option<Erased>,
}

const EMPTY: Slot = Slot { key: 0, ptr: None };

/// An immutable rank → instance table.
pub struct Snapshot {
    slots: Box<[Slot]>,
    /// `64 - log2(slots.len())`: the shift for Fibonacci hashing.
    shift: u32,
    len: usize,
    #[cfg(loom)]
    canary: Canary,
}

/// Under loom, makes reclamation bugs visible: every lookup *reads* a loom cell that the
/// snapshot's drop *writes*, so a snapshot freed while a reader can still use it is reported by
/// loom as a causality violation (concurrent read and write); the `Track` makes loom report a
/// snapshot that is never freed as a leak.
#[cfg(loom)]
struct Canary {
    cell: crate::primitive::UnsafeCell<u8>,
    _track: crate::primitive::Track<()>,
}

// SAFETY: the cell's data is never read or written — `with`/`with_mut` only report the access to
// loom — so sharing it cannot race on memory; reporting such races is its whole purpose (I3).
#[cfg(loom)]
unsafe impl Sync for Canary {}

#[cfg(loom)]
impl Canary {
    fn new() -> Canary {
        Canary {
            cell: crate::primitive::UnsafeCell::new(0),
            _track: crate::primitive::Track::new(()),
        }
    }
}

#[cfg(loom)]
impl Drop for Canary {
    fn drop(&mut self) {
        self.cell.with_mut(|_| ());
    }
}

impl Snapshot {
    /// Table size for `len` entries: a power of two, load factor at most 1/2.
    fn capacity_for(len: usize) -> usize {
        (len * 2).next_power_of_two().max(8)
    }

    /// A table sized for `len` entries, still empty.
    fn with_capacity_for(len: usize) -> Snapshot {
        let cap = Snapshot::capacity_for(len);
        Snapshot {
            slots: vec![EMPTY; cap].into_boxed_slice(),
            shift: 64 - cap.trailing_zeros(),
            len: 0,
            #[cfg(loom)]
            canary: Canary::new(),
        }
    }

    /// A table holding `entries` (keys distinct and non-zero).
    pub(crate) fn from_entries(entries: impl ExactSizeIterator<Item = (u64, Erased)>) -> Snapshot {
        Snapshot::from_entries_sized(entries.len(), entries)
    }

    /// A table sized for `len` entries holding `entries` (at most `len`, keys distinct).
    fn from_entries_sized(len: usize, entries: impl Iterator<Item = (u64, Erased)>) -> Snapshot {
        let mut s = Snapshot::with_capacity_for(len);
        for (k, p) in entries {
            s.put(k, p);
        }
        s
    }

    /// A copy of `old` (or an empty table) with `key -> ptr` added; `key` must be absent.
    pub(crate) fn with_added(old: Option<&Snapshot>, key: u64, ptr: Erased) -> Snapshot {
        let mut s = match old {
            // same size: copy the slots as they are (a memcpy), no rehash
            Some(old) if Snapshot::capacity_for(old.len + 1) == old.slots.len() => {
                #[cfg(loom)]
                old.canary.cell.with(|_| ());
                Snapshot {
                    slots: old.slots.clone(),
                    shift: old.shift,
                    len: old.len,
                    #[cfg(loom)]
                    canary: Canary::new(),
                }
            }
            Some(old) => Snapshot::from_entries_sized(old.len + 1, old.iter()),
            None => Snapshot::with_capacity_for(1),
        };
        s.put(key, ptr);
        s
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (mix(key) >> self.shift) as usize
    }

    fn put(&mut self, key: u64, ptr: Erased) {
        debug_assert_ne!(key, 0);
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        while self.slots[i].key != 0 {
            debug_assert_ne!(self.slots[i].key, key, "duplicate rank in snapshot");
            i = (i + 1) & mask;
        }
        self.slots[i] = Slot {
            key,
            ptr: Some(ptr),
        };
        self.len += 1;
    }

    /// The instance of rank `key`, if present.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<Erased> {
        #[cfg(loom)]
        self.canary.cell.with(|_| ());
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let slot = self.slots[i & mask];
            if slot.key == key {
                return slot.ptr;
            }
            if slot.key == 0 {
                return None;
            }
            i += 1;
        }
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        #[cfg(loom)]
        self.canary.cell.with(|_| ());
        self.len
    }

    /// The first entry at or after slot `*pos`, advancing `*pos` past it. Lets iterators that
    /// cannot borrow the snapshot (it is kept alive by a guard they own) walk it by index.
    #[inline]
    pub(crate) fn next_entry(&self, pos: &mut usize) -> Option<(u64, Erased)> {
        #[cfg(loom)]
        self.canary.cell.with(|_| ());
        while let Some(slot) = self.slots.get(*pos) {
            *pos += 1;
            if let Some(p) = slot.ptr {
                return Some((slot.key, p));
            }
        }
        None
    }

    /// All entries, in table order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, Erased)> + '_ {
        #[cfg(loom)]
        self.canary.cell.with(|_| ());
        self.slots.iter().filter_map(|s| s.ptr.map(|p| (s.key, p)))
    }

    /// Splits the entries into a new table of those `keep` accepts and a list of the rest.
    pub(crate) fn partition(
        &self,
        keep: &mut dyn FnMut(u64) -> bool,
    ) -> (Snapshot, Vec<(u64, Erased)>) {
        let (kept, removed): (Vec<_>, Vec<_>) = self.iter().partition(|&(k, _)| keep(k));
        (Snapshot::from_entries(kept.into_iter()), removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(n: usize) -> Erased {
        Erased(NonNull::new(n as *mut ()).unwrap())
    }

    #[test]
    fn lookups_find_every_key_and_only_them() {
        let mut s: Option<Snapshot> = None;
        for k in 1..=200u64 {
            s = Some(Snapshot::with_added(s.as_ref(), k * 7, ptr(k as usize)));
        }
        let s = s.unwrap();
        assert_eq!(s.len(), 200);
        assert!(s.slots.len() >= 400, "load factor above 1/2");
        for k in 1..=200u64 {
            assert_eq!(s.get(k * 7), Some(ptr(k as usize)));
            assert_eq!(s.get(k * 7 + 1), None);
        }
        let mut pos = 0;
        let mut n = 0;
        while s.next_entry(&mut pos).is_some() {
            n += 1;
        }
        assert_eq!(n, 200);
        let (kept, removed) = s.partition(&mut |k| k % 2 == 0);
        assert_eq!(kept.len() + removed.len(), 200);
        assert!(kept.iter().all(|(k, _)| k % 2 == 0));
        assert!(removed.iter().all(|(k, _)| k % 2 == 1));
    }
}
