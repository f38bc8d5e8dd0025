//! The persistent radix trie the `Epoch` and `ArcSwap` backends publish, and the writer's
//! bookkeeping that frees replaced nodes once no version that contains them can be read.
//!
//! # The trie
//! Rank ids are dense small integers from a counter, so the trie is indexed by the id's own bits
//! (no hashing): a node has [`FANOUT`] slots (64, [`BITS`] = 6 bits per level; 2 under loom so
//! that small models build several levels), level 0 holds the instances' erased pointers, every
//! level above holds child nodes. A trie of height `h` holds ids below `FANOUT^h`: 2 levels up to
//! 4,095, 3 up to 262,143; any `u64` fits in [`MAX_HEIGHT`] levels. An insert of an id beyond the
//! capacity *grows* the trie: new roots whose slot 0 is the old root (the old root is shared, not
//! replaced).
//!
//! # Path copying (I12)
//! A published node is never written. A write at sequence number `s` copies every node on the
//! root-to-leaf path whose `birth` is older than `s` (the copy is born at `s`), records the
//! original as *replaced at `s`*, and mutates in place only nodes born at `s` — nodes this write
//! built, which nobody else can see yet. So a first touch copies `height` nodes (O(log n)) and
//! every other node is shared between the old version and the new one.
//!
//! # Reclamation (I13, I14)
//! A node born at `b` and replaced at `d` is reachable from versions `b..d` only. The writer keeps
//! such nodes in [`Reclaimer::garbage`] and the headers of replaced versions in
//! [`Reclaimer::retired`]; it frees a node once every version in `b..d` is *dead* — no reader can
//! be inside it and no iterator holds it ([`Held::is_dead`]). A held iterator therefore keeps only
//! the nodes of its own version alive; everything else is freed as usual.

use core::ptr::NonNull;
use std::collections::VecDeque;

use crate::snapshot::Erased;

/// Bits of the id consumed per level.
#[cfg(not(loom))]
pub(crate) const BITS: u32 = 6;
/// Bits of the id consumed per level (2-way under loom: multi-level tries with few ranks).
#[cfg(loom)]
pub(crate) const BITS: u32 = 1;

/// Slots per node.
pub(crate) const FANOUT: usize = 1 << BITS;

/// Levels that hold any `u64` id.
#[cfg_attr(not(test), allow(dead_code))] // used by `remove`
pub(crate) const MAX_HEIGHT: u32 = 64u32.div_ceil(BITS);

/// A slot: at level 0 an instance (`Erased`), above it a child `Node`; `None` if empty.
type Slot = Option<NonNull<()>>;

/// One trie node. Immutable once published (I12).
pub(crate) struct Node {
    slots: [Slot; FANOUT],
    /// Sequence number of the version that first contained it (I12).
    birth: u64,
    #[cfg(loom)]
    canary: Canary,
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

/// Reports a read of `_c` to loom (nothing in normal builds).
macro_rules! canary_read {
    ($e:expr) => {
        #[cfg(loom)]
        $e.canary.read();
    };
}

impl Node {
    fn alloc(slots: [Slot; FANOUT], birth: u64) -> NonNull<Node> {
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
    unsafe fn free(node: NonNull<Node>) {
        // SAFETY: allocated by `Box` in `alloc`; the caller guarantees the rest (I13).
        drop(unsafe { Box::from_raw(node.as_ptr()) });
    }

    /// The node's birth (sequence number of the first version containing it).
    ///
    /// # Safety
    /// `node` is alive.
    unsafe fn birth_of(node: NonNull<Node>) -> u64 {
        // SAFETY: alive (caller); `birth` is never written after allocation (I12).
        unsafe { (*node.as_ptr()).birth }
    }
}

/// The slot index of `id` at `level` (0 = leaf).
#[inline]
fn index(id: u64, level: u32) -> usize {
    let shift = level * BITS;
    if shift >= 64 {
        0
    } else {
        ((id >> shift) as usize) & (FANOUT - 1)
    }
}

/// Whether a trie of `height` levels can hold `id`.
#[inline]
fn fits(height: u32, id: u64) -> bool {
    let bits = height * BITS;
    bits >= 64 || id >> bits == 0
}

/// The least height (at least 1) that holds `id`.
fn height_for(id: u64) -> u32 {
    let mut h = 1;
    while !fits(h, id) {
        h += 1;
    }
    h
}

/// `2^bits - 1`, saturating at `u64::MAX`.
#[inline]
fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// A trie: a root, its height and its number of entries. A plain value (`Copy`): the nodes it
/// points to are owned by the map it belongs to, and freed by that map's writer (I13).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Trie {
    root: Slot,
    /// Levels; 0 only for the empty trie.
    height: u32,
    /// `(height - 1) * BITS`: the shift of the root's index (0 if empty).
    top_shift: u32,
    /// The largest id that fits (`FANOUT^height - 1`, saturating; 0 if empty).
    max: u64,
    len: usize,
}

// SAFETY: a `Trie` is pointers to immutable nodes (I12) holding `Erased` pointers, which are
// `Send + Sync` (I7); who may free the nodes is decided by the owning map's writer (I13).
unsafe impl Send for Trie {}
// SAFETY: as for `Send` (I7, I12).
unsafe impl Sync for Trie {}

impl Trie {
    /// The empty trie.
    pub(crate) const EMPTY: Trie = Trie {
        root: None,
        height: 0,
        top_shift: 0,
        max: 0,
        len: 0,
    };

    /// Sets the height and the fields derived from it.
    fn set_height(&mut self, height: u32) {
        self.height = height;
        self.top_shift = height.saturating_sub(1) * BITS;
        self.max = if height == 0 {
            0
        } else {
            low_mask(height * BITS)
        };
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Levels (0 if empty).
    #[cfg(test)]
    pub(crate) fn height(&self) -> u32 {
        self.height
    }

    /// The instance of rank `id`, if present.
    ///
    /// # Safety
    /// Every node reachable from this trie is alive for the duration of the call (I13).
    #[inline]
    pub(crate) unsafe fn get(&self, id: u64) -> Option<Erased> {
        if id > self.max {
            return None;
        }
        let mut node = self.root?.cast::<Node>();
        let mut shift = self.top_shift; // < 64, a multiple of BITS
        while shift != 0 {
            // SAFETY: reachable from this trie, hence alive (caller, I13); immutable (I12).
            let n = unsafe { &*node.as_ptr() };
            canary_read!(n);
            node = n.slots[(id.wrapping_shr(shift) as usize) & (FANOUT - 1)]?.cast();
            shift -= BITS;
        }
        // SAFETY: as above: the leaf is reachable, hence alive (I13).
        let leaf = unsafe { &*node.as_ptr() };
        canary_read!(leaf);
        leaf.slots[id as usize & (FANOUT - 1)].map(Erased::from_non_null)
    }

    /// Grows the trie (new roots over the old one) until it can hold `id`; new roots are born at
    /// `seq`. The old root is shared, not replaced.
    fn grow_for(&mut self, id: u64, seq: u64) {
        if self.root.is_none() {
            self.set_height(height_for(id));
            return;
        }
        while !fits(self.height, id) {
            let mut slots = [None; FANOUT];
            slots[0] = self.root;
            self.root = Some(Node::alloc(slots, seq).cast());
            self.set_height(self.height + 1);
        }
    }

    /// The node a write at `seq` may mutate for `link`'s child: the child itself if it was born
    /// at `seq` (private to this write), else a copy born at `seq` (the original goes to
    /// `replaced`), or a new empty node if the slot is empty. Stores it in `*link`.
    ///
    /// # Safety
    /// `*link` is a slot of a node born at `seq` (or the trie's root field), and every node born
    /// at `seq` is private to this write (I12).
    unsafe fn own_child(
        link: &mut Slot,
        seq: u64,
        replaced: &mut Vec<NonNull<Node>>,
    ) -> NonNull<Node> {
        let node = match *link {
            // SAFETY: reachable from the trie being written, hence alive (I13).
            Some(n) if unsafe { Node::birth_of(n.cast()) } == seq => n.cast(),
            Some(n) => {
                let n = n.cast::<Node>();
                // SAFETY: alive (I13); published nodes are only read, never written (I12).
                let slots = unsafe { (*n.as_ptr()).slots };
                replaced.push(n);
                Node::alloc(slots, seq)
            }
            None => Node::alloc([None; FANOUT], seq),
        };
        // Under loom: the caller is about to write this node; a reader inside it would race.
        // SAFETY: just allocated or reachable from the trie, hence alive (I13).
        #[cfg(loom)]
        unsafe { node.as_ref() }.canary.write();
        *link = Some(node.cast());
        node
    }

    /// Sets `id -> ptr` by path copying at sequence number `seq`, pushing every node it replaced
    /// onto `replaced`; returns the previous value of `id`.
    ///
    /// # Safety
    /// Every node reachable from this trie is alive; nodes born at `seq` are private to this
    /// writer (never published, I12) and no other node is born at `seq` or later.
    pub(crate) unsafe fn insert(
        &mut self,
        id: u64,
        ptr: Erased,
        seq: u64,
        replaced: &mut Vec<NonNull<Node>>,
    ) -> Option<Erased> {
        self.grow_for(id, seq);
        let mut link: *mut Slot = &mut self.root;
        let mut level = self.height - 1;
        loop {
            // SAFETY: `link` is the root field or a slot of a node born at `seq` that this write
            // owns (I12); the caller's contract covers the rest.
            let node = unsafe { Trie::own_child(&mut *link, seq, replaced) };
            // SAFETY: `node` is born at `seq`: private to this write, so writing it races no
            // reader (I12).
            let slot = unsafe { &mut (*node.as_ptr()).slots[index(id, level)] };
            if level == 0 {
                let old = slot.replace(ptr.as_ptr::<()>());
                if old.is_none() {
                    self.len += 1;
                }
                return old.map(Erased::from_non_null);
            }
            link = slot;
            level -= 1;
        }
    }

    /// Removes `id` by path copying at sequence number `seq` (nodes left empty are dropped from
    /// the new version), pushing every node it replaced onto `replaced`; returns the removed value.
    ///
    /// Not used by the backends yet: removing a rank through `&self` (path-copy delete, the
    /// replaced nodes retired as for an insert) is a later issue's; see papers/design.md §3.4.
    ///
    /// # Safety
    /// As for [`insert`](Self::insert).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) unsafe fn remove(
        &mut self,
        id: u64,
        seq: u64,
        replaced: &mut Vec<NonNull<Node>>,
    ) -> Option<Erased> {
        // SAFETY: the caller keeps the nodes alive (I13).
        let old = unsafe { self.get(id) }?;
        // The path, root first: the link to each node and the node (born at `seq`).
        let mut path: [(*mut Slot, Option<NonNull<Node>>); MAX_HEIGHT as usize] =
            [(core::ptr::null_mut(), None); MAX_HEIGHT as usize];
        let mut link: *mut Slot = &mut self.root;
        let mut level = self.height - 1;
        let mut depth = 0;
        loop {
            // SAFETY: as in `insert` (I12); `id` is present, so every slot on the path is full.
            let node = unsafe { Trie::own_child(&mut *link, seq, replaced) };
            path[depth] = (link, Some(node));
            depth += 1;
            // SAFETY: born at `seq`, private to this write (I12).
            let slot = unsafe { &mut (*node.as_ptr()).slots[index(id, level)] };
            if level == 0 {
                *slot = None;
                break;
            }
            link = slot;
            level -= 1;
        }
        // Drop nodes left empty, leaf first: they are private copies (born at `seq`), never
        // published, so they are freed at once.
        for &(link, node) in path[..depth].iter().rev() {
            let node = node.expect("path entries are filled up to depth");
            // SAFETY: born at `seq`, private to this write (I12).
            let empty = unsafe { (*node.as_ptr()).slots.iter().all(Option::is_none) };
            if !empty {
                break;
            }
            // SAFETY: `link` is the root field or a slot of a private node above (I12); `node`
            // is private (born at `seq`), unlinked here, and freed once (I13).
            unsafe {
                *link = None;
                Node::free(node);
            }
        }
        self.len -= 1;
        if self.root.is_none() {
            self.set_height(0);
        }
        Some(old)
    }

    /// The first leaf whose base id is `>= from` (`from` a multiple of `FANOUT`), and its base.
    ///
    /// # Safety
    /// As for [`get`](Self::get).
    unsafe fn leaf_at_or_after(&self, mut from: u64) -> Option<(NonNull<Node>, u64)> {
        let root = self.root?.cast::<Node>();
        'restart: loop {
            if !fits(self.height, from) {
                return None;
            }
            let mut node = root;
            let mut level = self.height - 1;
            loop {
                if level == 0 {
                    return Some((node, from));
                }
                // SAFETY: reachable, hence alive (caller, I13); immutable (I12).
                let n = unsafe { &*node.as_ptr() };
                canary_read!(n);
                let shift = level * BITS;
                let i = index(from, level);
                match (i..FANOUT).find(|&j| n.slots[j].is_some()) {
                    Some(j) => {
                        if j != i {
                            // first id of child j: keep the bits above this level, zero below
                            from = (from & !low_mask(shift + BITS)) | ((j as u64) << shift);
                        }
                        node = n.slots[j].expect("found non-empty").cast();
                        level -= 1;
                    }
                    None => {
                        // nothing left under this node: the next subtree of its parent
                        let span = shift + BITS;
                        if span >= 64 {
                            return None;
                        }
                        match ((from >> span) + 1).checked_shl(span) {
                            Some(next) if next >> span == (from >> span) + 1 => from = next,
                            _ => return None,
                        }
                        continue 'restart;
                    }
                }
            }
        }
    }

    /// Every node reachable from this trie, each once (for freeing a whole trie).
    ///
    /// # Safety
    /// As for [`get`](Self::get).
    unsafe fn for_each_node(&self, f: &mut dyn FnMut(NonNull<Node>)) {
        /// # Safety
        /// `node` and its subtree are alive.
        unsafe fn walk(node: NonNull<Node>, level: u32, f: &mut dyn FnMut(NonNull<Node>)) {
            if level > 0 {
                // SAFETY: alive (caller, I13).
                let slots = unsafe { (*node.as_ptr()).slots };
                for child in slots.into_iter().flatten() {
                    // SAFETY: a child of a live node of the same trie (I13).
                    unsafe { walk(child.cast(), level - 1, f) };
                }
            }
            f(node);
        }
        if let Some(root) = self.root {
            // SAFETY: the caller keeps the trie alive (I13).
            unsafe { walk(root.cast(), self.height - 1, f) };
        }
    }

    /// Frees every node of this trie.
    ///
    /// # Safety
    /// The nodes are alive, reachable from no other live trie, and no one reads them any more
    /// (exclusive access, I6, I13).
    pub(crate) unsafe fn free_all(self) {
        // SAFETY: the caller's contract; each node is visited once, children before parents
        // (I13).
        unsafe { self.for_each_node(&mut |n| Node::free(n)) };
    }

    /// Splits this trie's entries by `keep`, frees every node of it, and builds the kept ones
    /// into a new trie at `seq` (`None` if none is kept). Returns the new trie and the removed
    /// entries. The `&mut` paths of the snapshot backends (`clear`, `purge_exited`) rebuild so.
    ///
    /// # Safety
    /// As for [`free_all`](Self::free_all): exclusive access, and the nodes are reachable from
    /// no other live trie (I6, I13).
    pub(crate) unsafe fn rebuild(
        self,
        seq: u64,
        keep: &mut dyn FnMut(u64) -> bool,
    ) -> (Option<Trie>, Vec<(u64, Erased)>) {
        // SAFETY: the nodes are alive until `free_all` below (the caller's contract, I13).
        let (kept, removed): (Vec<_>, Vec<_>) =
            unsafe { entries(&self) }.partition(|&(k, _)| keep(k));
        // SAFETY: the caller's contract (I6, I13); the entries were copied out above.
        unsafe { self.free_all() };
        let trie = (!kept.is_empty()).then(|| Trie::from_entries(kept, seq));
        (trie, removed)
    }

    /// A trie of `entries` (distinct ids), built in place at `seq` (no copies).
    pub(crate) fn from_entries(entries: impl IntoIterator<Item = (u64, Erased)>, seq: u64) -> Trie {
        let mut t = Trie::EMPTY;
        let mut replaced = Vec::new();
        for (k, p) in entries {
            // SAFETY: every node of `t` was built right here at `seq` and is private (I12).
            unsafe { t.insert(k, p, seq, &mut replaced) };
        }
        debug_assert!(replaced.is_empty());
        t
    }
}

/// Walks a trie in id order; the caller keeps the trie's nodes alive between calls.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor {
    leaf: Option<NonNull<Node>>,
    base: u64,
    idx: usize,
    /// Base of the next leaf to look for; `None` once the whole id range is done.
    next_base: Option<u64>,
}

// SAFETY: only positions into nodes owned and kept alive by whoever holds the cursor (I15).
unsafe impl Send for Cursor {}
// SAFETY: as for `Send` (I15).
unsafe impl Sync for Cursor {}

impl Cursor {
    pub(crate) const START: Cursor = Cursor {
        leaf: None,
        base: 0,
        idx: 0,
        next_base: Some(0),
    };

    /// The next entry of `trie` in id order.
    ///
    /// # Safety
    /// `trie` is the same trie on every call, and its nodes are alive during the call (I13, I15).
    #[inline]
    pub(crate) unsafe fn next(&mut self, trie: &Trie) -> Option<(u64, Erased)> {
        loop {
            if let Some(leaf) = self.leaf {
                // SAFETY: a leaf of `trie`, alive (caller, I13); immutable (I12).
                let n = unsafe { &*leaf.as_ptr() };
                canary_read!(n);
                while self.idx < FANOUT {
                    let i = self.idx;
                    self.idx += 1;
                    if let Some(p) = n.slots[i] {
                        return Some((self.base | i as u64, Erased::from_non_null(p)));
                    }
                }
                self.leaf = None;
            }
            let from = self.next_base?;
            // SAFETY: the caller keeps `trie` alive (I13).
            match unsafe { trie.leaf_at_or_after(from) } {
                Some((leaf, base)) => {
                    self.leaf = Some(leaf);
                    self.base = base;
                    self.idx = 0;
                    self.next_base = base.checked_add(FANOUT as u64);
                }
                None => {
                    self.next_base = None;
                    return None;
                }
            }
        }
    }
}

/// Every entry of `trie`, in id order.
///
/// # Safety
/// The trie's nodes stay alive while the iterator is used (I13).
pub(crate) unsafe fn entries(trie: &Trie) -> impl Iterator<Item = (u64, Erased)> + '_ {
    let mut c = Cursor::START;
    // SAFETY: the caller keeps `trie` alive (I13).
    core::iter::from_fn(move || unsafe { c.next(trie) })
}

/// One published version: a trie and its sequence number. Immutable once published (I3).
pub(crate) struct Version {
    pub(crate) trie: Trie,
    pub(crate) seq: u64,
    #[cfg(loom)]
    canary: Canary,
}

impl Version {
    pub(crate) fn new(trie: Trie, seq: u64) -> Version {
        Version {
            trie,
            seq,
            #[cfg(loom)]
            canary: Canary::new(),
        }
    }

    /// The instance of `id`, if present.
    ///
    /// # Safety
    /// The version is alive and not dead (I13, I14, I15) for the duration of the call.
    #[inline]
    pub(crate) unsafe fn get(&self, id: u64) -> Option<Erased> {
        canary_read!(self);
        // SAFETY: a live version's nodes are alive (I13).
        unsafe { self.trie.get(id) }
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        canary_read!(self);
        self.trie.len()
    }

    /// The next entry after `cursor`.
    ///
    /// # Safety
    /// As for [`get`](Self::get); `cursor` was only used with this version.
    #[inline]
    pub(crate) unsafe fn next_entry(&self, cursor: &mut Cursor) -> Option<(u64, Erased)> {
        canary_read!(self);
        // SAFETY: a live version's nodes are alive (I13, I15).
        unsafe { cursor.next(&self.trie) }
    }
}

/// A writer's reference to a replaced version: tells whether any reader or iterator can still be
/// inside it; dropping it releases the writer's reference.
pub(crate) trait Held {
    /// `true` once no reader can be inside the version and no iterator holds it (I14). Once
    /// `true`, stays `true`; it synchronizes-with (Acquire) every release of the version.
    fn is_dead(&self) -> bool;
}

/// Whether a buffer of `cap` holding `len` should give half its memory back: a quarter full, and
/// worth the bother.
fn drained(len: usize, cap: usize) -> bool {
    cap > 64 && len < cap / 4
}

/// A replaced node and the version that replaced it: the node is in versions `birth..death`.
struct Garbage {
    node: NonNull<Node>,
    death: u64,
}

/// The writer's bookkeeping: replaced versions that may still be read, and replaced nodes that
/// may still be reachable from them. Only the (serialized) writer touches it (I16).
pub(crate) struct Reclaimer<H> {
    /// Replaced versions not yet seen dead, by ascending sequence number.
    retired: VecDeque<(u64, H)>,
    /// Replaced nodes not yet freed.
    garbage: Vec<Garbage>,
    /// The nodes the write in progress replaced (moved to `garbage` by [`retire`](Self::retire)).
    pub(crate) replaced: Vec<NonNull<Node>>,
}

// SAFETY: the node pointers are owned by the map's writer, which is serialized (I16); the nodes
// hold `Erased` pointers (`Send + Sync`, I7).
unsafe impl<H: Send> Send for Reclaimer<H> {}

impl<H: Held> Reclaimer<H> {
    pub(crate) const NEW: Reclaimer<H> = Reclaimer {
        retired: VecDeque::new(),
        garbage: Vec::new(),
        replaced: Vec::new(),
    };

    /// Records that the version `seq`, held through `old`, was replaced by version `seq + 1`,
    /// which replaced the nodes in `self.replaced`; then frees what no live version can reach.
    ///
    /// # Safety
    /// Version `seq` is no longer published (a new version was stored), `self.replaced` holds
    /// exactly the nodes of it that version `seq + 1` does not contain (I12), and `old` tells
    /// when version `seq` is dead (I14).
    pub(crate) unsafe fn retire(&mut self, seq: u64, old: H) {
        debug_assert!(self.retired.back().is_none_or(|&(s, _)| s < seq));
        self.retired.push_back((seq, old));
        let death = seq + 1;
        for node in self.replaced.drain(..) {
            self.garbage.push(Garbage { node, death });
        }
        // SAFETY: forwarded (I13).
        unsafe { self.collect() };
    }

    /// Forgets dead versions and frees every replaced node that no other version can reach.
    ///
    /// # Safety
    /// Every entry of `garbage` and `retired` was recorded by [`retire`](Self::retire).
    pub(crate) unsafe fn collect(&mut self) {
        self.retired.retain(|(_, h)| !h.is_dead());
        let retired = &self.retired;
        self.garbage.retain(|g| {
            // SAFETY: garbage nodes are alive until freed here (I13).
            let birth = unsafe { Node::birth_of(g.node) };
            let first = retired.partition_point(|&(s, _)| s < birth);
            let held = retired.get(first).is_some_and(|&(s, _)| s < g.death);
            if !held {
                // SAFETY: the node is reachable only from versions `birth..death` (I12); every
                // one of them is dead — seen dead now or earlier, and a dead version stays dead
                // (I14) — so no reader or iterator can reach it; freed once, as it leaves the
                // list (I13).
                unsafe { Node::free(g.node) };
            }
            held
        });
        // A backlog (a reader holding an old version through many writes) grows the buffers;
        // give the memory back once it has drained. Halving at a quarter full keeps the cost
        // amortized O(1) per retired node, and the heap follows the live garbage, not its peak.
        if drained(self.garbage.len(), self.garbage.capacity()) {
            self.garbage.shrink_to(self.garbage.capacity() / 2);
        }
        if drained(self.retired.len(), self.retired.capacity()) {
            self.retired.shrink_to(self.retired.capacity() / 2);
        }
    }

    /// Frees every replaced node at once and forgets every replaced version.
    ///
    /// # Safety
    /// Exclusive access: no reader or iterator of any version of this map exists (I6).
    pub(crate) unsafe fn free_all(&mut self) {
        self.retired = VecDeque::new();
        for g in std::mem::take(&mut self.garbage) {
            // SAFETY: exclusive access (I6); each garbage node is freed once (I13).
            unsafe { Node::free(g.node) };
        }
        debug_assert!(self.replaced.is_empty());
        // the buffers go too: after a purge the heap holds the map's live entries only
        self.replaced = Vec::new();
    }

    /// Replaced nodes not yet freed, and replaced versions not yet seen dead.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> (usize, usize) {
        (self.garbage.len(), self.retired.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::collections::BTreeMap;
    use std::rc::Rc;

    fn ptr(n: u64) -> Erased {
        Erased::from_non_null(NonNull::new((n as usize).wrapping_mul(8).max(8) as *mut ()).unwrap())
    }

    /// A test-only owner of a trie's nodes: frees replaced nodes at once (nothing else reads).
    struct Owned {
        trie: Trie,
        seq: u64,
    }

    impl Owned {
        fn new() -> Owned {
            Owned {
                trie: Trie::EMPTY,
                seq: 0,
            }
        }
        fn insert(&mut self, k: u64, p: Erased) -> Option<Erased> {
            self.seq += 1;
            let mut replaced = Vec::new();
            // SAFETY: single-threaded test; each write uses a fresh seq (I12).
            let old = unsafe { self.trie.insert(k, p, self.seq, &mut replaced) };
            for n in replaced {
                // SAFETY: nothing else reads the replaced node (I13).
                unsafe { Node::free(n) };
            }
            old
        }
        fn remove(&mut self, k: u64) -> Option<Erased> {
            self.seq += 1;
            let mut replaced = Vec::new();
            // SAFETY: as above (I12).
            let old = unsafe { self.trie.remove(k, self.seq, &mut replaced) };
            for n in replaced {
                // SAFETY: as above (I13).
                unsafe { Node::free(n) };
            }
            old
        }
        fn get(&self, k: u64) -> Option<Erased> {
            // SAFETY: nodes alive while `self` is (I13).
            unsafe { self.trie.get(k) }
        }
        fn entries(&self) -> Vec<(u64, Erased)> {
            // SAFETY: as above (I13).
            unsafe { entries(&self.trie) }.collect()
        }
    }

    impl Drop for Owned {
        fn drop(&mut self) {
            // SAFETY: the only owner (I6, I13).
            unsafe { self.trie.free_all() };
        }
    }

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn check_against(t: &Owned, model: &BTreeMap<u64, Erased>, probes: &[u64]) {
        assert_eq!(t.trie.len(), model.len());
        let got = t.entries();
        let want: Vec<(u64, Erased)> = model.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(got, want, "iteration differs from the model");
        for &k in probes {
            assert_eq!(t.get(k), model.get(&k).copied(), "lookup of {k}");
        }
    }

    #[test]
    fn random_inserts_and_removes_match_a_btreemap() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let n = if cfg!(miri) { 150 } else { 3000 };
        for &spread in &[64u64, 5000, 300_000, u64::MAX] {
            let mut t = Owned::new();
            let mut model = BTreeMap::new();
            let mut probes = Vec::new();
            for i in 0..n {
                let k = rng.next() % spread.max(1);
                probes.push(k);
                probes.push(k.wrapping_add(1));
                if i % 5 == 4 {
                    let victim = *model
                        .keys()
                        .nth(rng.next() as usize % model.len().max(1))
                        .unwrap_or(&k);
                    assert_eq!(t.remove(victim), model.remove(&victim));
                } else {
                    let p = ptr(i as u64 + 1);
                    assert_eq!(t.insert(k, p), model.insert(k, p));
                }
            }
            check_against(&t, &model, &probes);
            // remove everything: the trie empties and stays usable
            let keys: Vec<u64> = model.keys().copied().collect();
            for k in keys {
                assert_eq!(t.remove(k), model.remove(&k));
            }
            assert_eq!(t.trie.len(), 0);
            assert!(t.trie.root.is_none());
            assert_eq!(t.entries(), vec![]);
            t.insert(3, ptr(3));
            assert_eq!(t.get(3), Some(ptr(3)));
        }
    }

    #[test]
    fn ids_across_level_boundaries() {
        let f = FANOUT as u64;
        let mut edges = vec![
            0,
            1,
            f - 1,
            f,
            f + 1,
            f * f - 1,
            f * f,
            f * f * f - 1,
            f * f * f,
        ];
        edges.extend([1 << 40, (1 << 40) + 1, u64::MAX / 2, u64::MAX - 1, u64::MAX]);
        let mut t = Owned::new();
        let mut model = BTreeMap::new();
        for (i, &k) in edges.iter().enumerate() {
            let p = ptr(i as u64 + 1);
            t.insert(k, p);
            model.insert(k, p);
            // every earlier id still found after each growth
            let probes: Vec<u64> = edges.iter().flat_map(|&e| [e, e.wrapping_add(2)]).collect();
            check_against(&t, &model, &probes);
        }
        assert_eq!(t.trie.height(), MAX_HEIGHT);
    }

    #[test]
    fn huge_ids_first() {
        let mut t = Owned::new();
        t.insert(u64::MAX, ptr(1));
        assert_eq!(t.trie.height(), MAX_HEIGHT);
        assert_eq!(t.get(u64::MAX), Some(ptr(1)));
        assert_eq!(t.get(u64::MAX - 1), None);
        assert_eq!(t.get(0), None);
        t.insert(1, ptr(2));
        assert_eq!(t.entries(), vec![(1, ptr(2)), (u64::MAX, ptr(1))]);
        assert_eq!(t.remove(u64::MAX), Some(ptr(1)));
        assert_eq!(t.entries(), vec![(1, ptr(2))]);
        assert_eq!(t.get(u64::MAX), None);
    }

    #[test]
    fn dense_ids_use_few_levels() {
        let mut t = Owned::new();
        let n = (FANOUT * FANOUT) as u64;
        for k in 1..n {
            t.insert(k, ptr(k));
        }
        assert_eq!(t.trie.height(), 2);
        t.insert(n, ptr(n));
        assert_eq!(t.trie.height(), 3);
        assert_eq!(t.entries().len() as u64, n);
    }

    #[test]
    fn old_versions_are_unchanged_by_later_writes() {
        // a persistent use: keep every version, never free a replaced node until the end
        let mut versions: Vec<(Trie, BTreeMap<u64, Erased>)> = Vec::new();
        let mut all_replaced = Vec::new();
        let mut t = Trie::EMPTY;
        let mut model = BTreeMap::new();
        let n = if cfg!(miri) { 80 } else { 600 };
        let mut rng = Rng(7);
        for seq in 1..=n {
            let mut replaced = Vec::new();
            let k = if seq % 3 == 0 {
                rng.next() % 10_000
            } else {
                seq
            };
            if seq % 7 == 0 && !model.is_empty() {
                let victim = *model.keys().next().unwrap();
                // SAFETY: fresh seq per write; old nodes kept alive below (I12, I13).
                let got = unsafe { t.remove(victim, seq, &mut replaced) };
                assert_eq!(got, model.remove(&victim));
            } else {
                let p = ptr(seq);
                // SAFETY: as above (I12, I13).
                let got = unsafe { t.insert(k, p, seq, &mut replaced) };
                assert_eq!(got, model.insert(k, p));
                // path copying: at most one replaced node per level
                assert!(
                    replaced.len() as u32 <= t.height(),
                    "copied more than the path"
                );
            }
            all_replaced.append(&mut replaced);
            versions.push((t, model.clone()));
        }
        for (v, m) in &versions {
            // SAFETY: no node was freed yet (I13).
            let got: Vec<_> = unsafe { entries(v) }.collect();
            let want: Vec<_> = m.iter().map(|(&k, &v)| (k, v)).collect();
            assert_eq!(got, want, "an old version changed");
        }
        // free: the last version's nodes plus every replaced node, each exactly once
        let mut live = std::collections::HashSet::new();
        // SAFETY: nothing freed yet (I13).
        unsafe { t.for_each_node(&mut |n| assert!(live.insert(n))) };
        for n in all_replaced {
            assert!(
                live.insert(n),
                "a node was replaced twice or is still in the last version"
            );
        }
        for n in live {
            // SAFETY: each node once; nothing reads any more (I13).
            unsafe { Node::free(n) };
        }
    }

    /// A fake version handle whose deadness the test controls.
    struct Fake(Rc<Cell<bool>>);
    impl Held for Fake {
        fn is_dead(&self) -> bool {
            self.0.get()
        }
    }

    #[test]
    fn replaced_nodes_wait_for_every_version_that_contains_them() {
        let mut r: Reclaimer<Fake> = Reclaimer::NEW;
        let mut t = Trie::EMPTY;
        let mut flags = Vec::new();
        let mut tries = Vec::new();
        let f = FANOUT as u64;
        // versions 1..=6, each inserting an id in the same leaf, so each replaces the path
        for seq in 1..=6u64 {
            // SAFETY: fresh seq; nodes of held versions stay alive (I12, I13).
            unsafe { t.insert(f * f + seq, ptr(seq), seq, &mut r.replaced) };
            tries.push(t);
            if seq > 1 {
                let dead = Rc::new(Cell::new(false));
                flags.push(dead.clone());
                // SAFETY: version seq-1 replaced by `seq` (I14).
                unsafe { r.retire(seq - 1, Fake(dead)) };
            } else {
                assert!(r.replaced.is_empty());
            }
        }
        // versions 1..=5 retired, none dead: every replaced node kept
        let (garbage, retired) = r.pending();
        assert_eq!(retired, 5);
        assert_eq!(garbage as u32, 5 * t.height());
        // version 3 stays held; the others die
        for (i, d) in flags.iter().enumerate() {
            if i + 1 != 3 {
                d.set(true);
            }
        }
        // SAFETY: as recorded (I13).
        unsafe { r.collect() };
        let (garbage, retired) = r.pending();
        assert_eq!(retired, 1, "only the held version is left");
        // only version 3's own nodes that later versions replaced are kept: its path
        assert_eq!(garbage as u32, t.height());
        // version 3 still reads correctly (Miri checks the nodes are alive)
        // SAFETY: version 3 is not dead, so its nodes are alive (I13).
        let v3: Vec<_> = unsafe { entries(&tries[2]) }.map(|(k, _)| k).collect();
        assert_eq!(v3, vec![f * f + 1, f * f + 2, f * f + 3]);
        flags[2].set(true);
        // SAFETY: as recorded (I13).
        unsafe { r.collect() };
        assert_eq!(r.pending(), (0, 0));
        // SAFETY: the last version's nodes, only owner (I13).
        unsafe { t.free_all() };
    }
}
