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

    /// A copy of `from` born at `birth`, its slots copied straight into the new allocation (one
    /// 520-byte copy, not two through the stack).
    ///
    /// # Safety
    /// `from` is alive (I13); published nodes are only read, never written (I12).
    pub(super) unsafe fn copy_of(from: NonNull<Node>, birth: u64) -> NonNull<Node> {
        let mut b = Box::<Node>::new_uninit();
        let p = b.as_mut_ptr();
        // SAFETY: `p` is a fresh allocation for a `Node`; each field is written once below,
        // `slots` by a copy from `from`, alive (the caller's contract, I13), which cannot overlap
        // it.
        unsafe {
            core::ptr::copy_nonoverlapping(
                core::ptr::addr_of!((*from.as_ptr()).slots),
                core::ptr::addr_of_mut!((*p).slots),
                1,
            );
            core::ptr::addr_of_mut!((*p).birth).write(birth);
            #[cfg(loom)]
            core::ptr::addr_of_mut!((*p).canary).write(Canary::new());
        }
        // SAFETY: every field was initialized above (I12: a copy, born at `birth`).
        NonNull::from(Box::leak(unsafe { b.assume_init() }))
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

/// The most spare nodes a [`Scratch`] keeps for reuse: 64 nodes, 33 KiB per map at most, and
/// never more than one per 32 entries of the map (16 bytes per rank; at least 4).
const SPARE_MAX: usize = 64;

/// What a write needs besides the trie: where the nodes it replaces go, and spare nodes to build
/// its copies in. Spares are nodes the writer freed (dead, I13) and keeps for reuse, so a steady
/// stream of first touches copies into recycled memory instead of a `malloc`/`free` pair per node
/// (and the allocator's page churn behind bursts of frees).
pub(crate) struct Scratch {
    /// The nodes the write in progress replaced (I12).
    pub(super) replaced: Vec<NonNull<Node>>,
    /// Dead nodes kept for reuse: no version can reach them and no reader holds them (I13).
    spare: Vec<NonNull<Node>>,
    /// How many spares to keep at most: set by the writer from the map's size.
    spare_cap: usize,
}

impl Scratch {
    pub(crate) const NEW: Scratch = Scratch {
        replaced: Vec::new(),
        spare: Vec::new(),
        spare_cap: 4,
    };

    /// How many spares this scratch keeps at most, and holds now (for unit tests).
    #[cfg(test)]
    pub(super) fn spares(&self) -> (usize, usize) {
        (self.spare_cap, self.spare.len())
    }

    /// Keeps at most one spare node per 32 of the map's `entries` (4 to 64).
    pub(super) fn size_for(&mut self, entries: usize) {
        self.spare_cap = (entries / 32).clamp(4, SPARE_MAX);
        while self.spare.len() > self.spare_cap {
            let Some(n) = self.spare.pop() else { break };
            // SAFETY: spare nodes are dead and owned by this scratch alone (I13).
            unsafe { Node::free(n) };
        }
    }

    /// A node born at `birth` whose slots are `from`'s (a copy), or empty.
    ///
    /// # Safety
    /// `from`, if any, is alive (I13).
    pub(super) unsafe fn node(&mut self, from: Option<NonNull<Node>>, birth: u64) -> NonNull<Node> {
        let Some(n) = self.spare.pop() else {
            return match from {
                // SAFETY: the caller's contract (I13).
                Some(f) => unsafe { Node::copy_of(f, birth) },
                None => Node::alloc([None; FANOUT], birth),
            };
        };
        // SAFETY: a spare node is dead and only the writer, which owns `self`, touches it (I13);
        // `from` is alive and a different node (a spare is reachable from no version).
        unsafe {
            let slots = core::ptr::addr_of_mut!((*n.as_ptr()).slots);
            match from {
                Some(f) => core::ptr::copy_nonoverlapping(
                    core::ptr::addr_of!((*f.as_ptr()).slots),
                    slots,
                    1,
                ),
                None => slots.write([None; FANOUT]),
            }
            (*n.as_ptr()).birth = birth;
            // Under loom: a reader still inside the node (a reclamation bug) would race this.
            #[cfg(loom)]
            (*n.as_ptr()).canary.write();
        }
        n
    }

    /// Gives up a node that is dead (I13): kept for reuse, or freed.
    ///
    /// # Safety
    /// As for [`Node::free`]: no version reaches `node` and no one reads it any more (I13).
    pub(super) unsafe fn recycle(&mut self, node: NonNull<Node>) {
        if self.spare.len() < self.spare_cap {
            self.spare.push(node);
        } else {
            // SAFETY: the caller's contract (I13).
            unsafe { Node::free(node) };
        }
    }

    /// Frees every spare node and drops the buffers.
    pub(super) fn free_spares(&mut self) {
        for n in self.spare.drain(..) {
            // SAFETY: spare nodes are dead and owned by this scratch alone (I13).
            unsafe { Node::free(n) };
        }
        self.spare = Vec::new();
        self.replaced = Vec::new();
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch::NEW
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.free_spares();
    }
}

// SAFETY: the node pointers are owned by the map's writer, which is serialized (I16); the nodes
// hold `Erased` pointers (`Send + Sync`, I7).
unsafe impl Send for Scratch {}
