//! A trie node, its loom canary, and the arithmetic that indexes nodes by an id's bits.

use core::ptr::NonNull;

/// Bits of the id consumed per level.
#[cfg(not(loom))]
pub(crate) const BITS: u32 = 6;
/// Bits of the id consumed per level (2-way under loom: multi-level tries with few ranks).
#[cfg(loom)]
pub(crate) const BITS: u32 = 1;

/// Slots per node.
pub(crate) const FANOUT: usize = 1 << BITS;

/// Levels that hold any `u64` id.
pub(crate) const MAX_HEIGHT: u32 = 64u32.div_ceil(BITS);

/// A slot: at level 0 an instance (`Erased`), above it a child `Node`; `None` if empty.
pub(super) type Slot = Option<NonNull<()>>;

/// One trie node. Immutable once published (I12).
pub(crate) struct Node {
    pub(super) slots: [Slot; FANOUT],
    /// Sequence number of the version that first contained it (I12).
    pub(super) birth: u64,
    #[cfg(loom)]
    pub(super) canary: Canary,
}

/// Under loom, makes reclamation bugs visible: every lookup *reads* a loom cell that the object's
/// drop *writes*, so an object freed while a reader can still use it is reported by loom as a
/// causality violation (concurrent read and write); the `Track` makes loom report an object that
/// is never freed as a leak.
#[cfg(loom)]
pub(crate) struct Canary {
    cell: crate::primitive::UnsafeCell<u8>,
    _track: crate::primitive::Track<()>,
}

// SAFETY: the cell's data is never read or written — `with`/`with_mut` only report the access to
// loom — so sharing it cannot race on memory; reporting such races is its whole purpose (I3).
#[cfg(loom)]
unsafe impl Sync for Canary {}

#[cfg(loom)]
impl Canary {
    pub(crate) fn new() -> Canary {
        Canary {
            cell: crate::primitive::UnsafeCell::new(0),
            _track: crate::primitive::Track::new(()),
        }
    }

    /// Reports a read of the object to loom.
    #[inline]
    pub(crate) fn read(&self) {
        self.cell.with(|_| ());
    }

    /// Reports a write of the object to loom (a writer changing a node's slots): a concurrent
    /// reader of the same node is then a causality violation.
    pub(crate) fn write(&self) {
        self.cell.with_mut(|_| ());
    }
}

#[cfg(loom)]
impl Drop for Canary {
    fn drop(&mut self) {
        self.cell.with_mut(|_| ());
    }
}

impl Node {
    pub(super) fn alloc(slots: [Slot; FANOUT], birth: u64) -> NonNull<Node> {
        NonNull::from(Box::leak(Box::new(Node {
            slots,
            birth,
            #[cfg(loom)]
            canary: Canary::new(),
        })))
    }

    /// Frees one node (not its children).
    ///
    /// # Safety
    /// `node` came from [`Node::alloc`], is freed once, and no one reads it any more (I13).
    pub(super) unsafe fn free(node: NonNull<Node>) {
        // SAFETY: allocated by `Box` in `alloc`; the caller guarantees the rest (I13).
        drop(unsafe { Box::from_raw(node.as_ptr()) });
    }

    /// The node's birth (sequence number of the first version containing it).
    ///
    /// # Safety
    /// `node` is alive.
    pub(super) unsafe fn birth_of(node: NonNull<Node>) -> u64 {
        // SAFETY: alive (caller); `birth` is never written after allocation (I12).
        unsafe { (*node.as_ptr()).birth }
    }
}

/// The slot index of `id` at `level` (0 = leaf).
#[inline]
pub(super) fn index(id: u64, level: u32) -> usize {
    let shift = level * BITS;
    if shift >= 64 {
        0
    } else {
        ((id >> shift) as usize) & (FANOUT - 1)
    }
}

/// Whether a trie of `height` levels can hold `id`.
#[inline]
pub(super) fn fits(height: u32, id: u64) -> bool {
    let bits = height * BITS;
    bits >= 64 || id >> bits == 0
}

/// The least height (at least 1) that holds `id`.
pub(super) fn height_for(id: u64) -> u32 {
    let mut h = 1;
    while !fits(h, id) {
        h += 1;
    }
    h
}

/// `2^bits - 1`, saturating at `u64::MAX`.
#[inline]
pub(super) fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}
