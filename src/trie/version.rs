//! A published [`Version`] of the trie and the [`Cursor`] that walks one in id order.

use core::ptr::NonNull;

use super::node::{Node, FANOUT};
#[cfg(ranklocal_loom)]
use super::Canary;
use super::Trie;
use crate::erased::Erased;

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
                // SAFETY: a leaf of `trie`, alive (caller, I13); slots read atomically (I12, I38).
                let n = unsafe { &*leaf.as_ptr() };
                canary_read!(n);
                while self.idx < FANOUT {
                    let i = self.idx;
                    self.idx += 1;
                    if let Some(p) = n.slots[i].load() {
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
    #[cfg(ranklocal_loom)]
    canary: Canary,
}

impl Version {
    pub(crate) fn new(trie: Trie, seq: u64) -> Version {
        Version {
            trie,
            seq,
            #[cfg(ranklocal_loom)]
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

    /// Number of entries (`ArcSwap` only: `Epoch` fills slots in place and counts them itself,
    /// I38).
    #[cfg(all(feature = "arc-swap", not(ranklocal_loom)))]
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
