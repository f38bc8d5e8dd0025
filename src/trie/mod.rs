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
//! A published node is never written, but for one thing: [`Trie::insert_in_place`] turns an empty
//! slot of a published node into a full one (I38; `Epoch` only, never for a node an iterator's
//! snapshot holds): a leaf's slot gets the instance; if the leaf is missing, the deepest node on
//! its path that exists gets a new leaf (and any missing node above it), built privately and born
//! at that node's birth. A write at sequence number `s` copies every node on the root-to-leaf path whose `birth` is older than `s` (the copy is born at `s`), records the
//! original as *replaced at `s`*, and mutates in place only nodes born at `s` — nodes this write
//! built, which nobody else can see yet. So a first touch copies `height` nodes (O(log n)) and
//! every other node is shared between the old version and the new one.
//!
//! # Reclamation (I13, I14)
//! A node born at `b` and replaced at `d` is reachable from versions `b..d` only. The writer's
//! [`Reclaimer`] keeps such nodes and the handles of replaced versions; it frees a node once every
//! version in `b..d` is *dead* — no reader can be inside it and no iterator holds it
//! ([`ReplacedVersion::is_dead`]). A held iterator therefore keeps only the nodes of its own
//! version alive; everything else is freed as usual.
//!
//! # Layout
//! - `node`: the node, its loom canary and the index arithmetic;
//! - this file: [`Trie`], a plain-value root with lookups and path-copying writes;
//! - `version`: a published [`Version`] and the [`Cursor`] that iterates one;
//! - `reclaimer`: the writer's [`Reclaimer`] and its [`Write`] API — the only way the backends
//!   change a trie (begin a write on the published version, insert or remove at one sequence
//!   number, publish, retire the replaced version).

use core::ptr::NonNull;

use crate::erased::Erased;

/// Reports a read of `_c` to loom (nothing in normal builds).
macro_rules! canary_read {
    ($e:expr) => {
        #[cfg(ranklocal_loom)]
        $e.canary.read();
    };
}

mod node;
mod reclaimer;
#[cfg(test)]
mod tests;
mod version;

#[cfg(ranklocal_loom)]
pub(crate) use self::node::Canary;
use self::node::{fits, height_for, index, low_mask, Node, Scratch, Slot, SlotCell};
pub(crate) use self::node::{BITS, FANOUT, MAX_HEIGHT};
pub(crate) use self::reclaimer::{Reclaimer, ReplacedVersion, Write};
pub(crate) use self::version::{entries, Cursor, Version};

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

// SAFETY: a `Trie` is pointers to nodes that are immutable (I12) but for atomic fills of empty
// slots (I38: an instance into a leaf, a hung leaf into an inner node), holding `Erased`
// pointers, which are `Send + Sync` (I7); who may free the nodes is decided by the owning map's
// writer (I13).
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

    /// Sets the number of entries: a backend that fills slots in place (I38) keeps the count
    /// itself and hands it to the next write.
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len;
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
        let mut shift = self.top_shift; // < 64, a multiple of BITS; 0 at the leaf
        let leaf = loop {
            // SAFETY: reachable from this trie (the root, or a child loaded from a reachable
            // node), hence alive (caller, I13); its slots are read by atomic loads (I12, I38).
            let n = unsafe { &*node.as_ptr() };
            canary_read!(n);
            if shift == 0 {
                break n;
            }
            node = n.slots[(id.wrapping_shr(shift) as usize) & (FANOUT - 1)]
                .load()?
                .cast();
            shift -= BITS;
        };
        leaf.slots[id as usize & (FANOUT - 1)]
            .load()
            .map(Erased::from_non_null)
    }

    /// Fills `id`'s empty slot in place (I38), if the slot is empty and the deepest node on its
    /// path that exists is younger than `frozen` (no iterator's snapshot contains it); returns
    /// whether it did. If `id`'s leaf (or a node above it) is missing, the missing nodes are
    /// built privately from `scratch`, born at the birth of the deepest node that exists, and hung
    /// into that node by one Release store (I38): the new nodes become part of every version that
    /// node is part of, as if they had been born with it. No node is copied or replaced, so
    /// the trie value and every version's reclamation are unchanged (I13).
    ///
    /// # Safety
    /// The caller is the map's only writer (I16); every node reachable from this trie is alive
    /// (I13); `ptr` points to an initialized instance (I2); `frozen` is the sequence number of
    /// the newest version an iterator was handed out for (I38).
    pub(crate) unsafe fn insert_in_place(
        &self,
        id: u64,
        ptr: Erased,
        frozen: u64,
        scratch: &mut Scratch,
    ) -> bool {
        if id > self.max {
            return false;
        }
        let Some(mut node) = self.root.map(NonNull::cast::<Node>) else {
            return false;
        };
        // A node is never older than a node below it (a write copies the whole path above a
        // node it creates or copies; a hung node is born at its parent's birth), so the youngest
        // existing node's birth decides for the whole path.
        let mut shift = self.top_shift;
        loop {
            // SAFETY: reachable from this trie (the root, or a child read from a reachable
            // node), hence alive (caller, I13).
            let n = unsafe { &*node.as_ptr() };
            let slot = &n.slots[(id.wrapping_shr(shift) as usize) & (FANOUT - 1)];
            if shift == 0 {
                // the leaf's slot
                if n.birth <= frozen || slot.get().is_some() {
                    return false;
                }
                // None -> Some, once, by the only writer (I16, I38); Release publishes the
                // instance.
                slot.fill(ptr.as_ptr::<()>());
                return true;
            }
            match slot.get() {
                Some(c) => node = c.cast(),
                None => {
                    if n.birth <= frozen {
                        return false;
                    }
                    // Private until the store below (I12, I38).
                    let hung = Self::chain(id, shift / BITS - 1, ptr, n.birth, scratch);
                    // None -> Some, once, by the only writer (I16, I38); Release publishes the
                    // new nodes' slots and the instance (I2, I12).
                    slot.fill(hung);
                    return true;
                }
            }
            shift -= BITS;
        }
    }

    /// New nodes from `level` down to the leaf holding only `id -> ptr`, all born at `birth`;
    /// returns the top one. No reader can reach them until the caller stores it (I12).
    fn chain(id: u64, level: u32, ptr: Erased, birth: u64, scratch: &mut Scratch) -> NonNull<()> {
        let mut top = ptr.as_ptr::<()>();
        for l in 0..=level {
            let n = scratch.empty(birth);
            // SAFETY: just made: private to this writer until it is hung (I12, I38).
            unsafe { (*n.as_ptr()).slots[index(id, l)].set(Some(top)) };
            top = n.cast();
        }
        top
    }

    /// Grows the trie (new roots over the old one) until it can hold `id`; new roots are born at
    /// `seq`. The old root is shared, not replaced.
    fn grow_for(&mut self, id: u64, seq: u64, scratch: &mut Scratch) {
        if self.root.is_none() {
            self.set_height(height_for(id));
            return;
        }
        while !fits(self.height, id) {
            let root = scratch.empty(seq);
            // SAFETY: just made, born at `seq`: private to this write (I12).
            unsafe { (*root.as_ptr()).slots[0].set(self.root) };
            self.root = Some(root.cast());
            self.set_height(self.height + 1);
        }
    }

    /// The node a write at `seq` may mutate in place of `child`: `child` itself if it was born
    /// at `seq` (private to this write), else a copy born at `seq` (the original goes to
    /// `replaced`), or a new empty node if `child` is `None`. The caller stores it where `child`
    /// was.
    ///
    /// # Safety
    /// `child` is the trie's root or a slot of a node born at `seq`, every node born at `seq` is
    /// private to this write (I12), and the caller is the map's only writer (I16).
    unsafe fn own_child(child: Slot, seq: u64, scratch: &mut Scratch) -> NonNull<Node> {
        let node = match child {
            // SAFETY: reachable from the trie being written, hence alive (I13).
            Some(n) if unsafe { Node::birth_of(n.cast()) } == seq => n.cast(),
            Some(n) => {
                let n = n.cast::<Node>();
                scratch.replaced.push(n);
                // SAFETY: alive (I13); the only writer copies it (I16); published nodes are
                // never written but for I38's fills, which only this writer makes.
                unsafe { scratch.copy(n, seq) }
            }
            None => scratch.empty(seq),
        };
        // Under loom: the caller is about to write this node; a reader inside it would race.
        // SAFETY: just allocated or reachable from the trie, hence alive (I13).
        #[cfg(ranklocal_loom)]
        unsafe { node.as_ref() }.canary.write();
        node
    }

    /// Where the child on a write's path hangs: the trie's root field or a slot of a node born
    /// at the write's sequence number (private to it, I12).
    fn link_get(&self, link: Option<(NonNull<Node>, usize)>) -> Slot {
        match link {
            None => self.root,
            // SAFETY: a node on this write's path, alive (I13).
            Some((n, i)) => unsafe { (*n.as_ptr()).slots[i].get() },
        }
    }

    /// Stores `s` where [`link_get`](Self::link_get) read.
    ///
    /// # Safety
    /// `link` is the root field or a slot of a node born at the write's sequence number, private
    /// to it (I12).
    unsafe fn link_set(&mut self, link: Option<(NonNull<Node>, usize)>, s: Slot) {
        match link {
            None => self.root = s,
            // SAFETY: the caller's contract: private to this write (I12).
            Some((n, i)) => unsafe { (*n.as_ptr()).slots[i].set(s) },
        }
    }

    /// Sets `id -> ptr` by path copying at sequence number `seq`, pushing every node it replaced
    /// onto `scratch.replaced`; returns the previous value of `id`.
    ///
    /// # Safety
    /// Every node reachable from this trie is alive; nodes born at `seq` are private to this
    /// writer (never published, I12) and no other node is born at `seq` or later; the caller is
    /// the map's only writer (I16).
    pub(crate) unsafe fn insert(
        &mut self,
        id: u64,
        ptr: Erased,
        seq: u64,
        scratch: &mut Scratch,
    ) -> Option<Erased> {
        self.grow_for(id, seq, scratch);
        let mut link = None;
        let mut level = self.height - 1;
        loop {
            // SAFETY: `link` is the root field or a slot of a node born at `seq` that this write
            // owns (I12); the caller's contract covers the rest (I13, I16).
            let node = unsafe { Trie::own_child(self.link_get(link), seq, scratch) };
            // SAFETY: as just said (I12).
            unsafe { self.link_set(link, Some(node.cast())) };
            let i = index(id, level);
            if level == 0 {
                // SAFETY: `node` is born at `seq`: private to this write, so writing it races no
                // reader (I12).
                let slot = unsafe { &(*node.as_ptr()).slots[i] };
                let old = slot.get();
                slot.set(Some(ptr.as_ptr::<()>()));
                if old.is_none() {
                    self.len += 1;
                }
                return old.map(Erased::from_non_null);
            }
            link = Some((node, i));
            level -= 1;
        }
    }

    /// Removes `id` by path copying at sequence number `seq` (nodes left empty are dropped from
    /// the new version), pushing every node it replaced onto `scratch.replaced`; returns the
    /// removed value.
    /// The sweep of exited ranks unpublishes through it.
    ///
    /// # Safety
    /// As for [`insert`](Self::insert).
    pub(crate) unsafe fn remove(
        &mut self,
        id: u64,
        seq: u64,
        scratch: &mut Scratch,
    ) -> Option<Erased> {
        // SAFETY: the caller keeps the nodes alive (I13).
        let old = unsafe { self.get(id) }?;
        // The path, root first: the link to each node and the node (born at `seq`).
        type Link = Option<(NonNull<Node>, usize)>;
        let mut path: [(Link, Option<NonNull<Node>>); MAX_HEIGHT as usize] =
            [(None, None); MAX_HEIGHT as usize];
        let mut link = None;
        let mut level = self.height - 1;
        let mut depth = 0;
        loop {
            // SAFETY: as in `insert` (I12, I13, I16); `id` is present, so every slot on the path
            // is full.
            let node = unsafe { Trie::own_child(self.link_get(link), seq, scratch) };
            // SAFETY: as in `insert` (I12).
            unsafe { self.link_set(link, Some(node.cast())) };
            path[depth] = (link, Some(node));
            depth += 1;
            let i = index(id, level);
            if level == 0 {
                // SAFETY: born at `seq`, private to this write (I12).
                unsafe { (*node.as_ptr()).slots[i].set(None) };
                break;
            }
            link = Some((node, i));
            level -= 1;
        }
        // Drop nodes left empty, leaf first: they are private copies (born at `seq`), never
        // published, so they are recycled at once.
        for &(link, node) in path[..depth].iter().rev() {
            let node = node.expect("path entries are filled up to depth");
            // SAFETY: born at `seq`, private to this write (I12).
            let empty = unsafe { (*node.as_ptr()).slots.iter().all(|s| s.get().is_none()) };
            if !empty {
                break;
            }
            // SAFETY: `link` is the root field or a slot of a private node above (I12); `node`
            // is private (born at `seq`), unlinked here, and given up once (I13).
            unsafe {
                self.link_set(link, None);
                scratch.recycle(node);
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
                // SAFETY: reachable, hence alive (caller, I13); slots read atomically (I12, I38).
                let n = unsafe { &*node.as_ptr() };
                canary_read!(n);
                let shift = level * BITS;
                let i = index(from, level);
                match (i..FANOUT).find_map(|j| n.slots[j].load().map(|c| (j, c))) {
                    Some((j, child)) => {
                        if j != i {
                            // first id of child j: keep the bits above this level, zero below
                            from = (from & !low_mask(shift + BITS)) | ((j as u64) << shift);
                        }
                        node = child.cast();
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
                let slots = unsafe { &(*node.as_ptr()).slots };
                for child in slots.iter().filter_map(SlotCell::get) {
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
    pub(crate) unsafe fn free_nodes(self) {
        // SAFETY: the caller's contract; each node is visited once, children before parents
        // (I13).
        unsafe { self.for_each_node(&mut |n| Node::free(n)) };
    }

    /// Splits this trie's entries by `keep`, frees every node of it, and builds the kept ones
    /// into a new trie at `seq` (`None` if none is kept). Returns the new trie and the removed
    /// entries. The `&mut` paths of the snapshot backends (`clear`, `purge_exited`) rebuild so.
    ///
    /// # Safety
    /// As for [`free_nodes`](Self::free_nodes): exclusive access, and the nodes are reachable from
    /// no other live trie (I6, I13).
    pub(crate) unsafe fn rebuild(
        self,
        seq: u64,
        keep: &mut dyn FnMut(u64) -> bool,
    ) -> (Option<Trie>, Vec<(u64, Erased)>) {
        // SAFETY: the nodes are alive until `free_nodes` below (the caller's contract, I13).
        let (kept, removed): (Vec<_>, Vec<_>) =
            unsafe { entries(&self) }.partition(|&(k, _)| keep(k));
        // SAFETY: the caller's contract (I6, I13); the entries were copied out above.
        unsafe { self.free_nodes() };
        let trie = (!kept.is_empty()).then(|| Trie::from_entries(kept, seq));
        (trie, removed)
    }

    /// A trie of `entries` (distinct ids), built in place at `seq` (no copies).
    pub(crate) fn from_entries(entries: impl IntoIterator<Item = (u64, Erased)>, seq: u64) -> Trie {
        let mut t = Trie::EMPTY;
        let mut scratch = Scratch::NEW;
        for (k, p) in entries {
            // SAFETY: every node of `t` was built right here at `seq` and is private (I12).
            unsafe { t.insert(k, p, seq, &mut scratch) };
        }
        debug_assert!(scratch.replaced.is_empty());
        t
    }
}
