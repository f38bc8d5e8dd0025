//! The exit drop (I39): a `RankLocal`'s [`Gate`], shared with the exit hooks of the threads that
//! have an OWNED instance in it, and what touches an instance through it.
//!
//! A first touch by `with_own` publishes the instance OWNED, records it in the `RankLocal`'s gate
//! (allocated on the first such touch, shared with the thread's exit hook, never holding the
//! `RankLocal`'s address: a `RankLocal` may be moved) and asks for the rank's exit (I36). Any
//! other access moves OWNED on by a CAS before it uses the value (to ESCAPED for a `&T` that
//! escapes, to SCOPED for a rank-aware scoped read). The thread's exit hook, after it wiped the
//! thread cache and before it delivers the exit, visits each gate: under the gate lock it takes
//! the thread's entry and CASes OWNED → EXITING; if it wins, it moves the value out and stores
//! DROPPED (the allocation stays in the map, a *tombstone* that readers treat as absent), then
//! drops the value outside the lock, on this thread, as its own rank. The `RankLocal`'s drop
//! closes the gate and waits for values being dropped so (their `T` may borrow what dies with
//! the `RankLocal`); `clear`, `iter_mut` and `into_iter` take every entry out of the gate first.
//! Tombstones are unpublished by the sweep (their ranks reach the inbox at exit, I36), freed
//! without dropping the value, or refilled by the next first touch of the rank.

use core::any::Any;
use core::cell::Cell;
use core::panic::AssertUnwindSafe;
use std::collections::BTreeMap;

use super::instance::{drop_payload, InstancePtr, DROPPED};
use super::{Inst, Locked, Taken, Tracks};
use crate::backend::Backend;
use crate::erased::Erased;
use crate::identity;
use crate::primitive::{
    lock, mutex_mut, tls, wait, Arc, AtomicBool, Condvar, Mutex, MutexGuard, Ordering,
};
use crate::rank_local::RankLocal;

/// What a `RankLocal` shares with the exit hooks of the threads that have an OWNED instance in
/// it (I39). It holds no pointer to the `RankLocal` (which may move), only instance pointers,
/// and a function typed for the `RankLocal`'s `T`.
pub(crate) struct Gate {
    pub(super) inner: Mutex<GateInner>,
    /// Signalled when `in_flight` drops to 0 while the `RankLocal`'s drop waits.
    idle: Condvar,
    /// A hint for the exit hooks' pruning, set when the `RankLocal` is dropped.
    closed: AtomicBool,
    /// `exit_one::<T>` for the `RankLocal`'s `T`.
    exit_one: for<'a> fn(&'a Gate, MutexGuard<'a, GateInner>, u64),
}

/// What the gate lock guards.
pub(crate) struct GateInner {
    /// `false` once the `RankLocal` is dropped: exit work then does nothing.
    alive: bool,
    /// rank → its OWNED instance (or one that was OWNED: readers move it on without this lock),
    /// for every instance the exit work may still touch. Only entries in here are ever touched
    /// by exit work, and every path that frees an instance without the inbox (`&mut`, drop)
    /// takes the entries out first (I39).
    pub(super) owned: BTreeMap<u64, Erased>,
    /// Ranks whose instance the exit work made a tombstone, for a sweep to unpublish.
    tombs: Vec<u64>,
    /// Values moved out by exit work and not dropped yet.
    in_flight: usize,
    /// Threads waiting on `idle`.
    waiters: usize,
}

impl Gate {
    pub(super) fn new<T: Send>() -> Arc<Gate> {
        Arc::new(Gate {
            inner: Mutex::new(GateInner {
                alive: true,
                owned: BTreeMap::new(),
                tombs: Vec::new(),
                in_flight: 0,
                waiters: 0,
            }),
            idle: Condvar::new(),
            closed: AtomicBool::new(false),
            exit_one: exit_one::<T>,
        })
    }

    /// `true` while tombstones wait for a sweep to unpublish them.
    pub(crate) fn has_tombs(&self) -> bool {
        !lock(&self.inner).tombs.is_empty()
    }

    /// `false` once the `RankLocal` was dropped (a hint for pruning only).
    pub(crate) fn is_open(&self) -> bool {
        // Relaxed: a hint; a stale `true` keeps a closed gate one more round.
        !self.closed.load(Ordering::Relaxed)
    }
}

tls! {
    /// The gate (address) whose value this thread's exit work is dropping, 0 if none: the
    /// `RankLocal`'s drop from inside that value's drop must not wait for itself.
    static EXIT_DROPPING: Cell<usize> = const { Cell::new(0) };
}

/// The exit work of the thread whose own rank is `rank` (I39): called by its exit hook after the
/// thread cache was wiped and before the exit is delivered. Drops every OWNED instance of the
/// thread in a live `RankLocal`, on this thread; returns the first `T::drop` panic, after every
/// other value was dropped.
pub(crate) fn run_exit_work(gates: Vec<Arc<Gate>>, rank: u64) -> Option<Box<dyn Any + Send>> {
    let mut first = None;
    for g in gates {
        let s = lock(&g.inner);
        if !s.alive {
            continue;
        }
        let exit_one = g.exit_one;
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| exit_one(&g, s, rank))) {
            match first {
                None => first = Some(panic),
                Some(_) => drop_payload(panic),
            }
        }
    }
    first
}

/// The exit work for `rank`'s instance of a `RankLocal<T, _>` whose gate is `g`, under its lock
/// `s`: OWNED → EXITING, move the value out, DROPPED, unlock, drop it (I39). Does nothing unless
/// `rank` is this thread's own and its exit hook has begun: only then is no `with_own` of the
/// instance running, on this thread or any other (I39).
fn exit_one<'a, T>(g: &'a Gate, mut s: MutexGuard<'a, GateInner>, rank: u64) {
    if rank != identity::own_raw() || identity::own_alive() {
        return;
    }
    let Some(p) = s.owned.remove(&rank) else {
        return;
    };
    let p = InstancePtr::<T>::new(p);
    // SAFETY:
    // - `meta`: every entry of a gate's map is an instance of the `RankLocal<T, _>` that made the
    //   gate with `exit_one::<T>` (I5, I39), alive while it is in the map and the gate is alive:
    //   every path that frees an instance of a live `RankLocal` without the inbox took it out of
    //   the map under this lock first, and the inbox delivers this rank only after this work
    //   (I39, I36);
    // - `take_value`: as just said, and this thread moved it to EXITING: nobody else touches the
    //   value (I39).
    let value = unsafe { p.meta().begin_exit().then(|| p.take_value()) };
    let Some(value) = value else {
        return; // a reader moved it on: a sweep or `&mut` frees it
    };
    s.tombs.push(rank);
    s.in_flight += 1;
    drop(s);
    /// Ends the drop's flight (also on unwind) and restores the marker.
    struct Landed<'a>(&'a Gate, usize);
    impl Drop for Landed<'_> {
        fn drop(&mut self) {
            let _ = EXIT_DROPPING.try_with(|d| d.set(self.1));
            let mut s = lock(&self.0.inner);
            s.in_flight -= 1;
            if s.in_flight == 0 && s.waiters > 0 {
                self.0.idle.notify_all();
            }
        }
    }
    let outer = EXIT_DROPPING
        .try_with(|d| d.replace(g as *const Gate as usize))
        .unwrap_or(0);
    let _landed = Landed(g, outer);
    // Dropped here, outside the gate lock, on the owner's thread as its own rank (I10, I39).
    drop(value);
}

impl<'rl, T: Send, B: Backend> Locked<'rl, T, B> {
    /// Takes the tombstones the exit work left (DROPPED → REAPED) into `taken`, for the caller
    /// to retire (I39). A live walk whose snapshot may hold one keeps the batch, not the list:
    /// the batch waits for that walk (I31), so iterators that always overlap keep no more than
    /// what their snapshots held.
    pub(super) fn take_tombstones(&mut self, taken: &mut Taken) {
        let Some(gate) = self.w.tracks.gate.clone() else {
            return;
        };
        let mut s = lock(&gate.inner);
        for rank in core::mem::take(&mut s.tombs) {
            let Some(i) = self.get(rank) else {
                continue;
            };
            if i.meta().reap() {
                taken.push(i);
            }
        }
    }
}

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// For `clear`, `iter_mut`, `into_iter` (`&mut self`, I6): takes every instance out of the
    /// gate, so that no exit work touches one again (OWNED ones become SCOPED: a sweep drops
    /// them after their rank exits), and, if `unpublish_tombs`, frees the tombstones (I39).
    pub(in crate::rank_local) fn settle_owned(&mut self, unpublish_tombs: bool) {
        let Some(gate) = mutex_mut(&mut self.writer).tracks.gate.clone() else {
            return;
        };
        let mut s = lock(&gate.inner);
        for (rank, p) in core::mem::take(&mut s.owned) {
            // SAFETY: an entry of the gate: an instance of this map, alive while it is in the
            // gate's map (I39), and `&mut self` excludes every other user (I6).
            unsafe { Inst::new(self, rank, p) }.meta().settle();
        }
        if !unpublish_tombs {
            return;
        }
        let tombs = core::mem::take(&mut s.tombs);
        drop(s);
        let mut dead: Vec<u64> = tombs
            .into_iter()
            .filter(|&rank| self.state_mut(rank) == Some(DROPPED))
            .collect();
        if dead.is_empty() {
            return;
        }
        dead.sort_unstable();
        dead.dedup();
        // Tombstones: dropping them drops no value, so no panic can come of it (I39).
        let removed = self.remove_where_mut(&mut |rank| dead.binary_search(&rank).is_err());
        if let Some(p) = removed.drop_all() {
            drop_payload(p);
        }
    }
}

/// For `&mut` removals: takes the removed instances' entries out of the gate, under its lock, so no
/// exit work touches what is removed (an exit work that came first left a tombstone, which frees
/// no value, I39).
pub(super) fn forget_owned<T>(tracks: &Tracks<T>, removed: &[(u64, Erased)]) {
    let Some(gate) = &tracks.gate else {
        return;
    };
    let mut s = lock(&gate.inner);
    for (rank, _) in removed {
        s.owned.remove(rank);
    }
}

impl<T, B: Backend> RankLocal<T, B> {
    /// For the `RankLocal`'s drop: closes the gate (exit work then does nothing) and waits for
    /// the values exit work moved out to be dropped, since their `T` may borrow what dies with
    /// the `RankLocal` — unless this thread is inside such a drop of this gate (I39).
    pub(in crate::rank_local) fn close_gate(&mut self) {
        let Some(gate) = &mutex_mut(&mut self.writer).tracks.gate else {
            return;
        };
        // Relaxed: a pruning hint (`Gate::is_open`).
        gate.closed.store(true, Ordering::Relaxed);
        let mine = EXIT_DROPPING
            .try_with(|d| d.get() == Arc::as_ptr(gate) as usize)
            .unwrap_or(false);
        let mut s = lock(&gate.inner);
        s.alive = false;
        s.owned.clear();
        while s.in_flight > usize::from(mine) {
            s.waiters += 1;
            s = wait(&gate.idle, s);
            s.waiters -= 1;
        }
    }
}
