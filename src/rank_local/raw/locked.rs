//! The writer lock ([`Locked`]): what it guards ([`Guarded`], [`Tracks`]), publishing, adopting,
//! and the sweep's take and retirement.

use core::marker::PhantomData;
use std::collections::VecDeque;

use super::gate::{self, Gate};
use super::instance::{self, InstancePtr, ESCAPED, LINGERING, OWNED, SCOPED};
use super::limbo::Limbo;
use super::{Access, Batch, Inst, LiveOwner, Payload, Pinned, Removed, Taken};
use crate::backend::Backend;
use crate::collector;
use crate::fifo::Fifo;
use crate::identity::{self, Inbox};
use crate::primitive::{lock, try_lock, Arc, AtomicBool, MutexGuard, Ordering};
use crate::rank_local::{fresh_uid, RankLocal, Writer};

/// What the writer lock guards: the facade's [`Writer`] (claims, the sweep's timing), which a
/// [`Locked`] derefs to, and this module's [`Tracks`], which only its methods reach.
pub(in crate::rank_local) struct Guarded<T> {
    pub(super) w: Writer,
    pub(super) tracks: Tracks<T>,
}

impl<T> Guarded<T> {
    /// What an empty `RankLocal`'s writer lock guards.
    pub(in crate::rank_local) const fn new(w: Writer) -> Self {
        Guarded {
            w,
            tracks: Tracks::NEW,
        }
    }
}

/// What the writer lock guards that the protections here rely on, private to this module: the walk
/// count, the gate, and the sweep's inbox of exited ranks and queue of retired batches.
pub(super) struct Tracks<T> {
    /// How many times `iter` took a snapshot (I31): an instance published at a lower count may
    /// be in an iterator's snapshot, and counts as escaped. Each instance records the count it
    /// was published at, so `iter` marks nothing: O(1) under the lock.
    pub(super) walks: u64,
    /// Shared with the exit hooks of threads that have an OWNED instance here; made by the first
    /// `with_own` first touch (I39).
    pub(super) gate: Option<Arc<Gate>>,
    /// Where the exits of ranks with a scoped or owner-only instance here are delivered; made by
    /// the first such first touch (I36). The sweep takes only what it delivers: exited ranks.
    inbox: Option<Arc<Inbox>>,
    /// Unpublished instances waiting for their grace period (I32), by ascending serial.
    pub(super) batches: Fifo<Batch>,
    /// The serial of the next batch.
    next_serial: u64,
    /// The queue length at which taking the ready batches scans them all, not just the front.
    scan_at: usize,
    /// `true` once a sweep inside a read moved batches to the limbo ([`Locked::defer_ready`]),
    /// until a call outside every read takes what it holds ([`Locked::take_deferred`]): the
    /// limbo may then hold instances although no batch is queued. A drain at a read's end empties
    /// the limbo without the writer lock and leaves it set; the next taker finds the limbo empty.
    deferred: bool,
    /// Typed for its `RankLocal`'s `T`: its batches are that `T`'s instances.
    _t: PhantomData<fn(T) -> T>,
}

impl<T> Tracks<T> {
    const NEW: Tracks<T> = Tracks {
        walks: 0,
        gate: None,
        inbox: None,
        batches: Fifo::NEW,
        next_serial: 0,
        scan_at: 8,
        deferred: false,
        _t: PhantomData,
    };

    /// Asks for `rank`'s exit, whose instance the writer just published (I36).
    fn watch_exit(&mut self, rank: u64) {
        let inbox = self.inbox.get_or_insert_with(Inbox::new);
        identity::watch_exit(rank, inbox);
    }

    /// Exits delivered and not swept yet.
    fn pending(&self) -> usize {
        self.inbox.as_ref().map_or(0, |i| i.len())
    }

    /// For the `RankLocal`'s drop: no more deliveries; the live ranks' registrations get pruned.
    pub(super) fn close_inbox(&self) {
        if let Some(inbox) = &self.inbox {
            inbox.close();
        }
    }

    /// `true` while no batch waits for its grace period.
    fn no_batches(&self) -> bool {
        self.batches.is_empty()
    }

    /// The serial the next batch will get.
    fn next_serial(&self) -> u64 {
        self.next_serial
    }

    /// `true` while a batch with a serial below `upto` is queued, unless it only waits for a
    /// walk (ready, but a live `Iter` in `walking` may hold it: an `Iter` may be held for ever).
    /// A batch that became ready since the caller's [`take_ready`](Self::take_ready) (the
    /// collector marks batches ready without the writer lock) still holds: the caller takes it
    /// next round.
    fn graces_before(&self, upto: u64, walking: &[u64]) -> bool {
        self.batches
            .iter()
            .take_while(|b| b.serial < upto)
            .any(|b| !(b.is_ready() && b.held_by(walking)))
    }

    /// Takes out the batches whose grace period passed (I32) and that no live walk may hold
    /// (`walking`, the live walks' numbers, ascending; I31, I39), in amortized O(1) per batch:
    /// the collector runs deferred closures roughly in the order they were deferred, so the
    /// front is checked every time and the rest only once the queue has doubled since the last
    /// scan.
    fn take_ready(&mut self, walking: &[u64]) -> Vec<Batch> {
        let free = |b: &Batch| b.is_ready() && !b.held_by(walking);
        let mut out = Vec::new();
        while self.batches.front().map_or(false, free) {
            out.extend(self.batches.pop_front());
        }
        if self.batches.len() >= self.scan_at {
            crate::counters::bump!(BATCH_SCANS);
            let (now, later): (VecDeque<Batch>, VecDeque<Batch>) =
                self.batches.take_all().into_iter().partition(free);
            out.extend(now);
            self.batches = later.into();
            self.scan_at = (2 * self.batches.len()).max(8);
        }
        out
    }

    /// `true` while tombstones wait for a sweep to unpublish them (I39).
    fn has_tombs(&self) -> bool {
        self.gate.as_ref().map_or(false, |g| g.has_tombs())
    }
}

/// The writer lock, held: what it guards ([`Writer`]) and the writer's view of the map (I16).
pub(in crate::rank_local) struct Locked<'rl, T: Send, B: Backend> {
    pub(super) rl: &'rl RankLocal<T, B>,
    pub(super) w: MutexGuard<'rl, Guarded<T>>,
}

impl<T: Send, B: Backend> core::ops::Deref for Locked<'_, T, B> {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.w.w
    }
}

impl<T: Send, B: Backend> core::ops::DerefMut for Locked<'_, T, B> {
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.w.w
    }
}

impl<'rl, T: Send, B: Backend> Locked<'rl, T, B> {
    /// Takes the writer lock.
    pub(in crate::rank_local) fn new(rl: &'rl RankLocal<T, B>) -> Self {
        Locked {
            rl,
            w: lock(&rl.writer),
        }
    }

    /// Takes the writer lock if it is free.
    pub(in crate::rank_local) fn try_new(rl: &'rl RankLocal<T, B>) -> Option<Self> {
        Some(Locked {
            rl,
            w: try_lock(&rl.writer)?,
        })
    }

    /// The `RankLocal` this lock belongs to.
    pub(in crate::rank_local) fn rl(&self) -> &'rl RankLocal<T, B> {
        self.rl
    }

    /// `true` while tombstones wait for a sweep to unpublish them (I39).
    pub(in crate::rank_local) fn has_tombs(&self) -> bool {
        self.w.tracks.has_tombs()
    }

    /// Asks for `rank`'s exit, whose instance this writer just published (I36).
    pub(in crate::rank_local) fn watch_exit(&mut self, rank: u64) {
        if self.rl.core.recycling {
            return; // values outlive their rank: nothing to sweep (I42)
        }
        self.w.tracks.watch_exit(rank);
    }

    /// A recycling `RankLocal`'s first touch of `rank` (absent, claimed by nobody): adopts the
    /// most recently ended rank's VACANT value instead of running `init` (I42) — VACANT → the
    /// state `access` publishes, the same allocation unpublished under its ended rank and
    /// published under `rank`. `None` if there is none (entries a reader moved on are skipped).
    #[inline]
    pub(in crate::rank_local) fn adopt(
        &self,
        rank: u64,
        access: Access,
    ) -> Option<Inst<'_, 'rl, T, B>> {
        if !self.rl.core.recycling {
            return None; // checked inline: a `new()` map adopts nothing
        }
        self.adopt_recycled(rank, access)
    }

    /// [`adopt`](Self::adopt) in a recycling map.
    #[inline(never)]
    fn adopt_recycled(&self, rank: u64, access: Access) -> Option<Inst<'_, 'rl, T, B>> {
        if self.get(rank).is_some() {
            return None;
        }
        let gate = self.w.tracks.gate.as_ref()?;
        loop {
            let (old, p) = lock(&gate.inner).free.pop()?;
            // SAFETY: an entry of the gate's free list is an instance of this map, published
            // under `old`, alive: only `&mut` access or the drop frees a VACANT instance, and
            // they take it out of the free list first; the writer lock serializes this with every
            // other adoption (I42).
            let i = unsafe { Inst::new(self.rl, old, p) };
            let own = access == Access::Own
                && LiveOwner::new(self.rl, rank).is_some()
                && gate::add_exit_gate(gate);
            let to = match access {
                Access::Escaped => ESCAPED,
                Access::Own if own => OWNED,
                _ => SCOPED,
            };
            if !i.meta.adopt(to, rank) {
                continue; // a reader moved it on: kept under its rank (I42)
            }
            B::remove(&self.rl.core.map, &[old]);
            self.rl.core.inserting(rank);
            B::insert(&self.rl.core.map, rank, p);
            if own {
                lock(&gate.inner).owned.insert(rank, p);
            }
            return self.get(rank);
        }
    }

    /// Exits delivered and not swept yet.
    pub(in crate::rank_local) fn pending(&self) -> usize {
        self.w.tracks.pending()
    }

    /// `true` while no batch waits for its grace period.
    pub(in crate::rank_local) fn no_batches(&self) -> bool {
        self.w.tracks.no_batches()
    }

    /// `true` while no batch waits for its grace period and the limbo holds nothing a sweep
    /// inside a read moved there (I32): a call outside every read has nothing to take.
    pub(in crate::rank_local) fn nothing_to_take(&self) -> bool {
        self.w.tracks.no_batches() && !self.w.tracks.deferred
    }

    /// The serial the next batch will get.
    pub(in crate::rank_local) fn next_serial(&self) -> u64 {
        self.w.tracks.next_serial()
    }

    /// `true` while a batch with a serial below `upto` waits for its grace period; one that only
    /// waits for a walk (an `Iter` still alive) does not count.
    pub(in crate::rank_local) fn graces_before(&self, upto: u64) -> bool {
        let walking = lock(&self.rl.core.walking);
        self.w.tracks.graces_before(upto, &walking)
    }

    /// For a sweep inside a read (this thread holds a pin): moves the batches whose grace period
    /// passed and that no live walk may hold to the limbo, which this thread drains at the end of
    /// its outermost read (I32). Nothing is dropped here.
    pub(in crate::rank_local) fn defer_ready(&mut self) {
        // Under a held reader the end of the outermost read is the reader's drop, which may come
        // after the code that used this `RankLocal` (and after its drop on another thread, while
        // the drain runs): the batches stay queued instead, for the next sweep or reclamation
        // call made outside every read, or the `RankLocal`'s drop (I32).
        if self.w.tracks.no_batches() || crate::collector::holds_reader() {
            return;
        }
        let (_, removed) = self.take_ready();
        if removed.len() == 0 {
            return;
        }
        let limbo = lock(&self.rl.core.limbo)
            .get_or_insert_with(|| Limbo::new::<T>(self.rl as *const _ as usize))
            .clone();
        Limbo::defer(&limbo, removed);
        self.w.tracks.deferred = true;
    }

    /// For a call outside every read: what waits in the limbo (to drop after the lock is
    /// released), and, if `panic`, the `T::drop` panic a drain kept.
    pub(in crate::rank_local) fn take_deferred(
        &mut self,
        panic: bool,
    ) -> (Removed<T>, Option<Payload>) {
        if panic {
            // everything, the kept panic too (without it the panic stays, and so does the mark)
            self.w.tracks.deferred = false;
        }
        let (entries, panic) = self
            .rl
            .core
            .limbo()
            .map(|l| l.take(false, panic))
            .unwrap_or_default();
        (self.rl.removed(entries), panic)
    }

    /// `true` while another thread's drain drops instances it took from the limbo.
    pub(in crate::rank_local) fn deferred_in_flight(&self) -> bool {
        self.rl.core.limbo().map_or(false, |l| l.in_flight())
    }

    /// Takes out the batches whose grace period passed (I32) and that no live walk may hold
    /// (I31, I39): their serials, and their instances to drop after the lock is released.
    pub(in crate::rank_local) fn take_ready(&mut self) -> (Vec<u64>, Removed<T>) {
        let ready = {
            // Walks end on any thread; the mutex orders a walk's last read of an instance before
            // the removal of its number, and that before this check (I31, I39).
            let walking = lock(&self.rl.core.walking);
            self.w.tracks.take_ready(&walking)
        };
        let serials = ready.iter().map(Batch::serial).collect();
        let entries: Vec<_> = ready.into_iter().flat_map(|b| b.entries).collect();
        // Relaxed: a count (see `Core::kept`).
        self.rl
            .core
            .retired
            .fetch_sub(entries.len(), Ordering::Relaxed);
        (serials, self.rl.removed(entries))
    }

    /// Waits on `cv` (the lock is released meanwhile).
    pub(in crate::rank_local) fn wait(self, cv: &crate::primitive::Condvar) -> Self {
        Locked {
            rl: self.rl,
            w: crate::primitive::wait(cv, self.w),
        }
    }

    /// `rank`'s instance, as the map's only writer sees it: no pin, no lock of the backend's.
    #[inline]
    pub(in crate::rank_local) fn get(&self, rank: u64) -> Option<Inst<'_, 'rl, T, B>> {
        // SAFETY:
        // - `get_by_writer`: under the writer lock, which serializes every write to the map (I16);
        // - `Inst::new`: an instance of this map, in it under the writer lock: no write
        //   unpublishes it and no retirement starts its grace period while the lock is held, and
        //   the borrow of `self` ends before any `&mut self` method (which may unpublish) runs
        //   (I16, I30, I32).
        unsafe { B::get_by_writer(&self.rl.core.map, rank).map(|p| Inst::new(self.rl, rank, p)) }
    }

    /// `rank`'s instance, looked up under this lock and kept alive by `pin`: the pin exists while
    /// the lock is held, and what the map holds now is not retired before the lock is released,
    /// so its grace period, if it is ever retired, waits for `pin` (I32, I33).
    pub(in crate::rank_local) fn protect<'p>(
        &self,
        rank: u64,
        pin: &'p Pinned<'rl, T, B>,
    ) -> Option<Inst<'p, 'rl, T, B>> {
        assert!(core::ptr::eq(pin.rl, self.rl));
        let p = self.get(rank)?.erased();
        // SAFETY: as just said; an instance of this map (I5).
        Some(unsafe { Inst::new(self.rl, rank, p) })
    }

    /// Publishes `value` as `rank`'s instance, in the state `access` asks for, at the current walk
    /// count (I2, I31): into the rank's tombstone if it has one (I39), else as a new entry. The
    /// claim excludes every other first touch of `rank`.
    ///
    /// An OWNED instance (`Access::Own`) is recorded in the gate ([`make_gate`](Self::make_gate)
    /// first) and the gate in the thread's exit hook, for the thread's exit work (I39) — only if
    /// `rank` is the calling thread's own and live, and its exit hook took the gate; otherwise
    /// it is published SCOPED, and a sweep drops it after the rank exits.
    pub(in crate::rank_local) fn publish(
        &self,
        rank: u64,
        value: T,
        access: Access,
    ) -> Inst<'_, 'rl, T, B> {
        let state = match access {
            Access::Escaped => ESCAPED,
            Access::Owner | Access::Scoped => SCOPED,
            Access::Own => OWNED,
        };
        // OWNED only for the live owner's own rank, if its exit hook takes the gate: only its
        // exit work may move an OWNED value out (I39). Otherwise SCOPED, swept after the exit.
        let own = access == Access::Own
            && LiveOwner::new(self.rl, rank).is_some()
            && gate::add_exit_gate(
                self.w
                    .tracks
                    .gate
                    .as_ref()
                    .expect("ranklocal: `make_gate` before an OWNED publish"),
            );
        let state = if access == Access::Own && !own {
            SCOPED
        } else {
            state
        };
        let i = self.publish_state(rank, value, state);
        if own {
            let gate = self.w.tracks.gate.as_ref().expect("made above");
            lock(&gate.inner).owned.insert(rank, i.erased());
        }
        i
    }

    /// The gate, made on first use (I39).
    pub(in crate::rank_local) fn make_gate(&mut self) {
        let recycling = self.rl.core.recycling;
        self.w
            .tracks
            .gate
            .get_or_insert_with(|| Gate::new::<T>(recycling));
    }

    fn publish_state(&self, rank: u64, value: T, state: usize) -> Inst<'_, 'rl, T, B> {
        // Only exit work through the gate makes a tombstone, and only for an OWNED instance,
        // which is published only once the gate exists (I39): without a gate the claimed rank
        // has no entry (the claim excludes every other first touch of it), and no lookup is
        // needed to know it.
        let old = if self.w.tracks.gate.is_some() {
            self.get(rank)
        } else {
            None
        };
        let Some(old) = old else {
            let p = InstancePtr::alloc(value, state, self.w.tracks.walks, rank);
            self.rl.core.inserting(rank);
            B::insert(&self.rl.core.map, rank, p.erased());
            // The instance just inserted, not looked up again: one map descent less per first
            // touch.
            // SAFETY: `p` is now `rank`'s instance in this map (inserted just above, under the
            // writer lock, I5); as for `get`'s, no write unpublishes it and no retirement starts
            // its grace period while the lock is held, and the returned borrow of `self` ends
            // before any `&mut self` method (which may unpublish) runs (I16, I30, I32).
            return unsafe { Inst::new(self.rl, rank, p.erased()) };
        };
        let meta = old.meta;
        if meta.state() == instance::EXITING {
            // The exit work is moving the value out under the gate lock: wait for that short
            // critical section (no user code) to end.
            if let Some(g) = &self.w.tracks.gate {
                drop(lock(&g.inner));
            }
        }
        assert!(
            meta.state() != LINGERING,
            "ranklocal: {} asked for its own value on this RankLocal through a method other than \
             the owner-only family (`with_own*`, `get_own*`) after its exit work, while an OwnRef \
             of the value is still alive; use the owner-only family in thread-local destructors",
            identity::RankId::from_raw(rank)
        );
        assert_eq!(
            meta.state(),
            instance::DROPPED,
            "ranklocal: a claimed rank's entry is a tombstone"
        );
        // A refilled tombstone keeps its walk count: an `iter` since may hold it (I39).
        // SAFETY: under the writer lock, in this map and DROPPED (checked just above; the gate
        // lock ordered the exit work's move before this, and the claim excludes every other
        // first touch of `rank`, I39).
        unsafe { old.p.refill(value, state) };
        old
    }

    /// The sweep (I30, I32, I36, I39): takes the instances of the ranks in the sweep's inbox
    /// (exited ranks: their exits were delivered there, I36), SCOPED → RECLAIMING or DROPPED →
    /// REAPED, and the tombstones exit work left (whether or not their exits arrived yet), then
    /// unpublishes them all in one write, draws a fresh uid and queues them as one batch behind an
    /// epoch grace period and the live walks that may hold them (I31). Returns how many it
    /// retired.
    pub(in crate::rank_local) fn sweep_exited(&mut self) -> usize {
        let mut taken = Taken::default();
        if let Some(inbox) = self.w.tracks.inbox.clone() {
            self.take_exited(&inbox, &mut taken);
        }
        self.take_tombstones(&mut taken);
        let n = taken.entries.len();
        self.retire(taken);
        n
    }

    /// The sweep's take of the exited ranks in `inbox`, into `taken`.
    fn take_exited(&mut self, inbox: &Inbox, taken: &mut Taken) {
        for rank in inbox.take() {
            crate::counters::bump!(WALKED_UNDER_LOCK);
            let Some(i) = self.get(rank) else {
                continue; // removed by `&mut`, never made, or a repeated exit
            };
            // Its rank has exited (I36), so no live owner reads it without a pin (I35).
            if i.meta.take_for_sweep() {
                taken.push(i);
            }
        }
    }

    /// Unpublishes what `taken` holds in one write, draws a fresh uid and queues it as one batch
    /// behind an epoch grace period and the walks alive now that may hold it (I31, I32, I34,
    /// I39).
    fn retire(&mut self, taken: Taken) {
        let Taken {
            ranks,
            entries,
            born,
        } = taken;
        if entries.is_empty() {
            return;
        }
        // Counted before it leaves the map (see `Core::kept`). Relaxed: a count.
        self.rl
            .core
            .retired
            .fetch_add(entries.len(), Ordering::Relaxed);
        let removed = B::remove(&self.rl.core.map, &ranks);
        debug_assert_eq!(removed, entries.len());
        // A fresh uid before retiring: pinned scoped entries keyed by the old one are dead for
        // every reader that pins after this store (I34).
        self.rl.core.uid.store(fresh_uid(), Ordering::SeqCst);
        let done = Arc::new(AtomicBool::new(false));
        // The collector sets the token only after every thread pinned now has unpinned (I32,
        // I37), at once, whoever swept: batched with the writers' other retirements it could wait
        // for 15 more sweeps process-wide on the backends whose writes retire nothing else.
        collector::retire_token(Arc::clone(&done));
        let q = &mut self.w.tracks;
        q.batches.push_back(Batch {
            serial: q.next_serial,
            done,
            entries,
            // a walk numbered `born + 1..=walks` may hold one of them: it started after the
            // oldest was published and before they were unpublished (here, under the lock)
            walks: (born, q.walks),
        });
        q.next_serial += 1;
    }
}
