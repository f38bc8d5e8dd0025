//! A trie node, its loom canary, and the arithmetic that indexes nodes by an id's bits.

use core::ptr::NonNull;

use crate::primitive::{AtomicPtr, Ordering};

/// Bits of the id consumed per level.
#[cfg(not(ranklocal_loom))]
pub(crate) const BITS: u32 = 6;
/// Bits of the id consumed per level (2-way under loom: multi-level tries with few ranks).
#[cfg(ranklocal_loom)]
pub(crate) const BITS: u32 = 1;

/// Slots per node.
pub(crate) const FANOUT: usize = 1 << BITS;

/// Levels that hold any `u64` id.
pub(crate) const MAX_HEIGHT: u32 = (64 + BITS - 1) / BITS;

/// A slot's value: at level 0 an instance (`Erased`), above it a child `Node`; `None` if empty.
pub(super) type Slot = Option<NonNull<()>>;

/// A node's slot, in an atomic: the writer may fill an *empty* slot of a published node in place
/// (I38: a leaf's with an instance, an inner node's with a new leaf it hangs), so every read of a published node's slot is an atomic load. On x86-64 a load or
/// store of a pointer-sized atomic is the same instruction as a plain one (an Acquire load is
/// `ldar` on AArch64), so readers pay nothing for it.
#[repr(transparent)]
pub(crate) struct SlotCell(AtomicPtr<()>);

impl SlotCell {
    /// An empty slot.
    #[inline]
    pub(super) fn empty() -> SlotCell {
        SlotCell(AtomicPtr::new(core::ptr::null_mut()))
    }

    /// A reader's load of a slot of a published node. Acquire: pairs with [`fill`](Self::fill)'s
    /// Release, so what a slot filled in place points to (an instance initialized before it was
    /// stored, I2, I38) is visible; every other slot was published by the version's Release
    /// store already.
    #[inline]
    pub(super) fn load(&self) -> Slot {
        NonNull::new(self.0.load(Ordering::Acquire))
    }

    /// The writer's read (I16): only writers store slots, one at a time under the reclaimer lock,
    /// whose happens-before edges order every earlier writer's stores before this load, so
    /// Relaxed sees them (I16).
    #[inline]
    pub(super) fn get(&self) -> Slot {
        NonNull::new(self.0.load(Ordering::Relaxed))
    }

    /// The writer's store into a node no reader can see yet (born at the write's sequence
    /// number, I12). Relaxed: the version's Release store publishes it (I2).
    #[inline]
    pub(super) fn set(&self, s: Slot) {
        self.0.store(
            s.map_or(core::ptr::null_mut(), NonNull::as_ptr),
            Ordering::Relaxed,
        );
    }

    /// The writer's in-place fill of an empty slot of a published node (I38): an instance into a
    /// leaf, or a new leaf (with any new node above it) into an inner node. Release: whatever `p`
    /// points to, and whatever that points to, was initialized before, and a reader that loads
    /// `p` sees it (I2, I12).
    #[inline]
    pub(super) fn fill(&self, p: NonNull<()>) {
        self.0.store(p.as_ptr(), Ordering::Release);
    }
}

/// The slots of a node with nothing in them.
pub(super) fn empty_slots() -> [SlotCell; FANOUT] {
    core::array::from_fn(|_| SlotCell::empty())
}

/// One trie node. Immutable once published (I12), but for the in-place fill of an empty slot
/// (I38).
pub(crate) struct Node {
    pub(super) slots: [SlotCell; FANOUT],
    /// Sequence number of the version that first contained it (I12).
    pub(super) birth: u64,
    #[cfg(ranklocal_loom)]
    pub(super) canary: Canary,
}

/// Copies `from`'s slots into `to`.
///
/// # Safety
/// `from` is alive (I13) and `to` is valid for writes, a node no reader can see (born at the
/// write's sequence number or being built, I12); they do not overlap. The caller is the map's
/// only writer (I16), so nothing stores into `from` meanwhile (readers only load it).
unsafe fn copy_slots(from: *const [SlotCell; FANOUT], to: *mut [SlotCell; FANOUT]) {
    // One 512-byte copy (a `memcpy`): an `AtomicPtr` has the layout of a pointer, and a plain
    // read racing only with atomic *loads* is no data race; the writer is the only one that
    // stores (I16).
    #[cfg(not(ranklocal_loom))]
    // SAFETY: the caller's contract: `from` alive (I13), `to` private (I12), one writer (I16).
    unsafe {
        core::ptr::copy_nonoverlapping(from, to, 1)
    };
    // Under loom the slots are loom atomics, which live in loom's model, not in memory.
    #[cfg(ranklocal_loom)]
    // SAFETY: the caller's contract, as above (I12, I13, I16); every slot of `to` is written.
    unsafe {
        let to = to.cast::<SlotCell>();
        for (i, s) in (*from).iter().enumerate() {
            to.add(i).write(SlotCell(AtomicPtr::new(
                s.get().map_or(core::ptr::null_mut(), NonNull::as_ptr),
            )));
        }
    }
}

/// Under loom, makes reclamation bugs visible: every lookup *reads* a loom cell that the object's
/// drop *writes*, so an object freed while a reader can still use it is reported by loom as a
/// causality violation (concurrent read and write); the `Track` makes loom report an object that
/// is never freed as a leak.
#[cfg(ranklocal_loom)]
pub(crate) struct Canary {
    cell: crate::primitive::UnsafeCell<u8>,
    _track: crate::primitive::Track<()>,
}

// SAFETY: the cell's data is never read or written — `with`/`with_mut` only report the access to
// loom — so sharing it cannot race on memory; reporting such races is its whole purpose (I3).
#[cfg(ranklocal_loom)]
unsafe impl Sync for Canary {}

#[cfg(ranklocal_loom)]
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

#[cfg(ranklocal_loom)]
impl Drop for Canary {
    fn drop(&mut self) {
        self.cell.with_mut(|_| ());
    }
}

impl Node {
    /// A new node with empty slots, born at `birth`.
    pub(super) fn empty(birth: u64) -> NonNull<Node> {
        NonNull::from(Box::leak(Box::new(Node {
            slots: empty_slots(),
            birth,
            #[cfg(ranklocal_loom)]
            canary: Canary::new(),
        })))
    }

    /// A copy of `from` born at `birth`, its slots copied straight into the new allocation (one
    /// 520-byte copy, not two through the stack).
    ///
    /// # Safety
    /// `from` is alive (I13); the caller is the map's only writer (I16).
    pub(super) unsafe fn copy_of(from: NonNull<Node>, birth: u64) -> NonNull<Node> {
        let mut b = Box::new(core::mem::MaybeUninit::<Node>::uninit());
        let p = b.as_mut_ptr();
        // SAFETY: `p` is a fresh allocation for a `Node`, seen by no one; each field is written
        // once below, `slots` by a copy from `from`, alive (the caller's contract, I13, I16),
        // which cannot overlap it.
        unsafe {
            copy_slots(
                core::ptr::addr_of!((*from.as_ptr()).slots),
                core::ptr::addr_of_mut!((*p).slots),
            );
            core::ptr::addr_of_mut!((*p).birth).write(birth);
            #[cfg(ranklocal_loom)]
            core::ptr::addr_of_mut!((*p).canary).write(Canary::new());
        }
        // Every field was initialized above (I12: a copy, born at `birth`): the allocation is a
        // `Node` from here on.
        NonNull::from(Box::leak(b)).cast::<Node>()
    }

    /// Frees one node (not its children).
    ///
    /// # Safety
    /// `node` came from [`Node::empty`] or [`Node::copy_of`], is freed once, and no one reads it any more (I13).
    pub(super) unsafe fn free(node: NonNull<Node>) {
        // SAFETY: allocated by `Box` in `empty` or `copy_of`; the caller guarantees the rest (I13).
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

    /// A node born at `birth` with every slot empty: a spare reused, or a new one.
    pub(super) fn empty(&mut self, birth: u64) -> NonNull<Node> {
        let Some(n) = self.spare.pop() else {
            return Node::empty(birth);
        };
        // SAFETY: `n` was a spare, just taken out of `spare`: this scratch's alone, and dead (no
        // version reaches it and no reader holds it, I13), so nothing else reads or writes it.
        unsafe {
            for s in &*core::ptr::addr_of!((*n.as_ptr()).slots) {
                s.set(None);
            }
            (*n.as_ptr()).birth = birth;
            // Under loom: a reader still inside the node (a reclamation bug) would race this.
            #[cfg(ranklocal_loom)]
            (*n.as_ptr()).canary.write();
        }
        n
    }

    /// A node born at `birth` whose slots are `from`'s: a spare reused, or a new one.
    ///
    /// # Safety
    /// `from` is alive (I13), and the caller is the map's only writer (I16), so no one writes
    /// `from` while it is copied.
    pub(super) unsafe fn copy(&mut self, from: NonNull<Node>, birth: u64) -> NonNull<Node> {
        let Some(n) = self.spare.pop() else {
            // SAFETY: the caller's contract.
            return unsafe { Node::copy_of(from, birth) };
        };
        // SAFETY: `n` as in `empty`: this scratch's alone and dead (I13). `from` is alive and not
        // written meanwhile (the caller's contract), and not `n` (a spare is reachable from no
        // version).
        unsafe {
            let slots = core::ptr::addr_of_mut!((*n.as_ptr()).slots);
            copy_slots(core::ptr::addr_of!((*from.as_ptr()).slots), slots);
            (*n.as_ptr()).birth = birth;
            // Under loom: a reader still inside the node (a reclamation bug) would race this.
            #[cfg(ranklocal_loom)]
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
