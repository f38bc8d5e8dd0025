//! The writer's bookkeeping: replaced versions and nodes, freed once no version that contains
//! them can be read (I13, I14), and [`Write`], the one way a backend changes its trie.
//!
//! A backend's write, under its reclaimer lock (I16):
//! 1. [`Reclaimer::write`] on the published version's trie and sequence number `s`;
//! 2. [`Write::insert`] / [`Write::remove`] (any number, all at sequence number `s + 1`: each node
//!    on their paths is copied once);
//! 3. publish a version of [`Write::trie`] at [`Write::seq`];
//! 4. [`Write::retire`] the replaced version `s`, which records the nodes the write replaced and
//!    frees what no live version can reach any more.

use crate::fifo::Fifo;
use core::ptr::NonNull;

use super::node::{Node, Scratch};
use super::Trie;
use crate::erased::Erased;

/// A writer's reference to a replaced version: tells whether any reader or iterator can still be
/// inside it; dropping it releases the writer's reference.
pub(crate) trait ReplacedVersion {
    /// Whether the backend reuses dead versions' headers for its next writes
    /// ([`Write::reuse_version`]): then [`Reclaimer`] keeps up to [`SPARE_VERSIONS`] of them
    /// instead of dropping them.
    const REUSED: bool = false;

    /// `true` once no reader can be inside the version and no iterator holds it (I14). Once
    /// `true`, stays `true`; it synchronizes-with (Acquire) every release of the version.
    fn is_dead(&self) -> bool;
}

/// Dead versions a [`Reclaimer`] keeps for reuse, at most (when [`ReplacedVersion::REUSED`]):
/// versions die in bursts — the retiring participant is flushed every 16 retirements
/// (`collector`) and a bag's closures run two epoch advances later — so this absorbs two
/// flushes' worth; each kept header is 48 bytes (`Epoch`), 1.5 KiB per map at most. Measured
/// (`bash benches/peers_callgrind.sh`, first touch at 1,024 keys): 2,144 instructions without
/// reuse, 1,969 keeping 16, 1,934 keeping 32.
pub(super) const SPARE_VERSIONS: usize = 32;

/// Whether a buffer of `cap` holding `len` should give half its memory back: a quarter full, and
/// worth the bother.
pub(super) fn drained(len: usize, cap: usize) -> bool {
    cap > 64 && len < cap / 4
}

/// A replaced node and the version that replaced it: the node is in versions `birth..death`.
struct Garbage {
    node: NonNull<Node>,
    death: u64,
}

/// The backlog (replaced versions plus replaced nodes) below which [`Reclaimer::collect`] never
/// runs a full scan.
pub(super) const MIN_SCAN: usize = 64;

/// Versions behind the front the probe may pass per write.
const PROBE_STEPS: usize = 8;

/// The writer's bookkeeping: replaced versions that may still be read, and replaced nodes that
/// may still be reachable from them. Only the (serialized) writer touches it (I16).
///
/// # Cost
/// Each write calls [`collect`](Self::collect), which is amortized O(1) per replaced version and
/// node, whatever readers do: it pops the versions that died from the front (versions usually die
/// in the order they were replaced) and frees the nodes that no version left can contain — both
/// O(what it frees) — and rescans the whole backlog only when it has doubled since the last
/// rescan. A reader that holds an old version (a pin held elsewhere, a long-lived iterator) thus
/// makes the backlog grow, never the cost per write; and what a held version keeps beyond its
/// own nodes is at most about as much again.
pub(crate) struct Reclaimer<H> {
    /// Replaced versions not yet seen dead, by ascending sequence number.
    versions: Fifo<(u64, H)>,
    /// Replaced nodes not yet freed, by ascending `death` (each write records its own, and
    /// writes' sequence numbers increase).
    garbage: Fifo<Garbage>,
    /// The nodes the write in progress replaced (moved to `garbage` by [`Write::retire`]), and
    /// spare nodes for its copies.
    scratch: Scratch,
    /// The backlog at which the next full scan runs: twice what the last one left.
    scan_at: usize,
    /// The next version the probe checks (an index into `versions`, at least 1): the versions
    /// in `1..probe` were seen dead since the last full scan.
    probe: usize,
    /// How many nodes the last write replaced (the probe's estimate of what a dead version's
    /// write left behind).
    per_write: usize,
    /// Replaced versions seen dead, kept for the backend's next writes to reuse (only if
    /// `H::REUSED`; at most [`SPARE_VERSIONS`]): a header reused instead of freed and allocated
    /// again saves a `malloc`/`free` pair per write (about a tenth of a first touch).
    /// Invariant: each was seen dead (I14), so it holds the version's last reference (I17).
    spare_versions: Vec<H>,
    /// The sequence number of the newest version an iterator's snapshot was taken of (0 if
    /// none): a node born at it or before may be in a snapshot, so none of its slots is filled in
    /// place (I38).
    frozen: u64,
}

// SAFETY: the node pointers are owned by the map's writer, which is serialized (I16); the nodes
// hold `Erased` pointers (`Send + Sync`, I7).
unsafe impl<H: Send> Send for Reclaimer<H> {}

/// One write in progress: version `seq` built from the published one by path copying (I12).
/// Every change it makes is private to the writer until the caller publishes [`trie`](Self::trie).
pub(crate) struct Write<'a, H> {
    reclaimer: &'a mut Reclaimer<H>,
    trie: Trie,
    seq: u64,
}

impl<H: ReplacedVersion> Reclaimer<H> {
    pub(crate) const NEW: Reclaimer<H> = Reclaimer {
        versions: Fifo::NEW,
        garbage: Fifo::NEW,
        scratch: Scratch::NEW,
        scan_at: MIN_SCAN,
        probe: 1,
        per_write: 0,
        spare_versions: Vec::new(),
        frozen: 0,
    };

    /// Fills `id`'s empty slot of `published` in place (I38) if it can: its leaf (or, for a new
    /// leaf hung in place, its parent) exists and no iterator's snapshot contains it
    /// ([`freeze`](Self::freeze)). Returns whether it did; if
    /// not, the caller writes a new version.
    ///
    /// # Safety
    /// The caller is the map's only writer (I16); `published` is the published version's trie,
    /// whose nodes are alive (I13); `ptr` points to an initialized instance, published by this
    /// fill (I2).
    pub(crate) unsafe fn fill(&mut self, published: &Trie, id: u64, ptr: Erased) -> bool {
        // SAFETY: forwarded (I2, I13, I16); `frozen` is kept by `freeze` (I38).
        unsafe { published.insert_in_place(id, ptr, self.frozen, &mut self.scratch) }
    }

    /// Records that an iterator's snapshot is being taken of the published version `seq`: no slot
    /// of its nodes is filled in place from now on (I38), so the snapshot stays what it was.
    pub(crate) fn freeze(&mut self, seq: u64) {
        self.frozen = self.frozen.max(seq);
    }

    /// Begins building version `base_seq + 1` from `base`, the trie of the published version
    /// `base_seq` (the empty trie and 0 if nothing was published yet).
    ///
    /// # Safety
    /// The caller is the map's only writer (I16); `base` is the published version's trie, whose
    /// nodes are alive (I13), and no node is born at `base_seq + 1` or later (every published node
    /// is born at `base_seq` or earlier), so what this write creates is private to it (I12).
    pub(crate) unsafe fn write(&mut self, base: Trie, base_seq: u64) -> Write<'_, H> {
        self.scratch.replaced.clear(); // only a write that panicked midway could have left some
        Write {
            reclaimer: self,
            trie: base,
            seq: base_seq + 1,
        }
    }

    /// Forgets dead versions and frees replaced nodes that no version left can reach, in
    /// amortized O(1) per version and node (see [`Reclaimer`]'s cost).
    ///
    /// # Safety
    /// Every entry of `garbage` and `versions` was recorded by [`Write::retire`].
    pub(super) unsafe fn collect(&mut self) {
        // The oldest versions, while they are dead (a dead version stays dead, I14).
        while self.versions.front().map_or(false, |(_, h)| h.is_dead()) {
            if let Some((_, h)) = self.versions.pop_front() {
                self.spare(h);
            }
            self.probe = self.probe.saturating_sub(1).max(1);
        }
        // Every version older than the oldest one left was seen dead, and every node in front of
        // the queue dies first: a node replaced at `death` is in versions `birth..death`, all
        // older than `death`.
        let oldest = self.versions.front().map_or(u64::MAX, |&(s, _)| s);
        while self.garbage.front().map_or(false, |g| g.death <= oldest) {
            let Some(g) = self.garbage.pop_front() else {
                break;
            };
            // SAFETY: the node is reachable only from versions `birth..death` (I12), every one
            // of them older than `oldest`, so replaced and seen dead (a dead version stays dead,
            // I14): no reader or iterator can reach it; given up once, as it leaves the queue
            // (I13).
            unsafe { self.scratch.recycle(g.node) };
        }
        // A version held out of order (an iterator on an old version while later ones die)
        // stops the front. Behind it, a probe walks a few versions per write in order; a rescan
        // runs once the dead ones it saw, with the nodes their writes replaced (estimated as
        // this write's count: a write replaces one path), make a quarter of the backlog. Each
        // version is counted by one rescan at most, so these rescans cost O(what was retired)
        // in all, however much the held version keeps (measured against the versions alone, a
        // held version over a large map made every other write rescan all it keeps). And
        // whatever the probe sees, everything is rescanned once the backlog has doubled since
        // the last scan. Both pay for a rescan's O(backlog) with as much work done.
        for _ in 0..PROBE_STEPS {
            match self.versions.get(self.probe) {
                Some((_, h)) if h.is_dead() => self.probe += 1,
                _ => break,
            }
        }
        let dead_seen = self.probe - 1;
        if self.versions.len() + self.garbage.len() >= self.scan_at
            || (dead_seen > 0
                && 4 * dead_seen * (1 + self.per_write) >= self.versions.len() + self.garbage.len())
        {
            // SAFETY: forwarded (I13).
            unsafe { self.collect_all() };
            self.scan_at = (2 * (self.versions.len() + self.garbage.len())).max(MIN_SCAN);
            self.probe = 1;
        }
        // A backlog grows the buffers; give the memory back once it has drained. Halving at a
        // quarter full keeps the cost amortized O(1) per retired node, and the heap follows the
        // live garbage, not its peak.
        if drained(self.garbage.len(), self.garbage.capacity()) {
            self.garbage.shrink_to(self.garbage.capacity() / 2);
        }
        if drained(self.versions.len(), self.versions.capacity()) {
            self.versions.shrink_to(self.versions.capacity() / 2);
        }
    }

    /// Keeps `h`, seen dead, for reuse if the backend reuses versions and fewer than
    /// [`SPARE_VERSIONS`] are kept; else drops it.
    fn spare(&mut self, h: H) {
        if H::REUSED && self.spare_versions.len() < SPARE_VERSIONS {
            self.spare_versions.push(h);
        }
    }

    /// Forgets every dead version and frees every replaced node that no version left can reach:
    /// exact, O(backlog · log versions).
    ///
    /// # Safety
    /// Every entry of `garbage` and `versions` was recorded by [`Write::retire`].
    pub(super) unsafe fn collect_all(&mut self) {
        #[cfg(all(test, not(ranklocal_loom)))]
        crate::counters::RESCANNED.with(|n| {
            n.set(n.get() + (self.versions.len() + self.garbage.len()) as u64);
        });
        self.versions.retain(|(_, h)| !h.is_dead());
        let versions = &self.versions;
        let scratch = &mut self.scratch;
        self.garbage.retain(|g| {
            // SAFETY: garbage nodes are alive until freed here (I13).
            let birth = unsafe { Node::birth_of(g.node) };
            let first = versions.partition_point(|&(s, _)| s < birth);
            let held = versions.get(first).map_or(false, |&(s, _)| s < g.death);
            if !held {
                // SAFETY: the node is reachable only from versions `birth..death` (I12); every
                // one of them is dead — seen dead now or earlier, and a dead version stays dead
                // (I14) — so no reader or iterator can reach it; given up once, as it leaves the
                // list (I13).
                unsafe { scratch.recycle(g.node) };
            }
            held
        });
    }

    /// Frees every replaced node at once and forgets every replaced version.
    ///
    /// # Safety
    /// Exclusive access: no reader or iterator of any version of this map exists (I6).
    pub(crate) unsafe fn free_replaced(&mut self) {
        self.versions = Fifo::NEW;
        self.spare_versions = Vec::new();
        self.frozen = 0; // no iterator exists (I6)
        self.scan_at = MIN_SCAN;
        self.probe = 1;
        for g in self.garbage.take_all() {
            // SAFETY: exclusive access (I6); each garbage node is freed once (I13).
            unsafe { Node::free(g.node) };
        }
        debug_assert!(self.scratch.replaced.is_empty());
        // the buffers and spares go too: after a purge the heap holds the map's live entries only
        self.scratch.free_spares();
    }

    /// Replaced nodes not yet freed, and replaced versions not yet seen dead.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> (usize, usize) {
        (self.garbage.len(), self.versions.len())
    }

    /// The capacities of the buffers behind [`pending`](Self::pending).
    #[cfg(test)]
    pub(crate) fn capacities(&self) -> (usize, usize) {
        (self.garbage.capacity(), self.versions.capacity())
    }
}

impl<H: ReplacedVersion> Write<'_, H> {
    /// Sets `id -> ptr` in the version being built; returns the previous value of `id`.
    pub(crate) fn insert(&mut self, id: u64, ptr: Erased) -> Option<Erased> {
        // SAFETY: the nodes reachable from the trie are alive and those born at `seq` are
        // private to this write, as `Reclaimer::write`'s caller guaranteed (I12, I13, I16).
        unsafe {
            self.trie
                .insert(id, ptr, self.seq, &mut self.reclaimer.scratch)
        }
    }

    /// Removes `id` from the version being built; returns its value.
    pub(crate) fn remove(&mut self, id: u64) -> Option<Erased> {
        // SAFETY: as for `insert` (I12, I13, I16).
        unsafe { self.trie.remove(id, self.seq, &mut self.reclaimer.scratch) }
    }

    /// The trie of the version being built: publish it at [`seq`](Self::seq).
    pub(crate) fn trie(&self) -> Trie {
        self.trie
    }

    /// The sequence number of the version being built.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// A replaced version seen dead, for the backend to reuse as the header of the version it
    /// publishes (if `H::REUSED`): it holds the version's last reference (I14, I17), so nothing
    /// else can reach the header.
    pub(crate) fn reuse_version(&mut self) -> Option<H> {
        self.reclaimer.spare_versions.pop()
    }

    /// After the caller published [`trie`](Self::trie) at [`seq`](Self::seq), in place of
    /// version `seq - 1` held through `old` (`None` if nothing was published before): records
    /// the nodes this write replaced, then frees what no live version can reach.
    ///
    /// # Safety
    /// Version `seq` is published and version `seq - 1` no longer is; `old` tells when version
    /// `seq - 1` is dead (I14).
    pub(crate) unsafe fn retire(self, old: Option<H>) {
        let r = self.reclaimer;
        let Some(old) = old else {
            // nothing was published before: nothing was copied, nothing is replaced
            debug_assert!(r.scratch.replaced.is_empty());
            return;
        };
        r.scratch.size_for(self.trie.len());
        let seq = self.seq - 1;
        debug_assert!(r.versions.back().map_or(true, |&(s, _)| s < seq));
        r.versions.push_back((seq, old));
        let death = self.seq;
        debug_assert!(r.garbage.back().map_or(true, |g| g.death <= death));
        r.per_write = r.scratch.replaced.len();
        for node in r.scratch.replaced.drain(..) {
            r.garbage.push_back(Garbage { node, death });
        }
        // SAFETY: every entry was recorded just above or by earlier retirements (I13).
        unsafe { r.collect() };
    }
}
