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

use core::cell::Cell;
use std::collections::BTreeMap;

use super::instance::{drop_payload, InstancePtr, DROPPED, LINGERING, OWNED};
use super::{Inst, Locked, Taken, Tracks};
use crate::backend::Backend;
use crate::erased::Erased;
use crate::identity;
use crate::primitive::{
    global, lock, mutex_mut, tls, wait, Arc, AtomicBool, Condvar, Mutex, MutexGuard, Ordering,
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
    exit_one: for<'a> fn(&'a Arc<Gate>, MutexGuard<'a, GateInner>, u64),
    /// The `RankLocal` is `recycling()`: the exit work vacates instead of dropping (I42).
    recycling: bool,
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
    /// Flights not ended: values moved out by exit work and not dropped yet, plus one for each
    /// gate whose flights were handed to this one (its `heir`) and have not all ended.
    in_flight: usize,
    /// Set when the `RankLocal` was dropped inside an exit drop of another gate's value while
    /// some of this gate's flights had not ended: that gate, whose count holds one flight for
    /// all of this gate's, ended when this gate's count reaches 0 (I39).
    heir: Option<Arc<Gate>>,
    /// Threads waiting on `idle`.
    waiters: usize,
    /// Recycling `RankLocal`s: the VACANT instances, as (the ended rank they are published
    /// under, instance), most recently ended last (I42).
    pub(super) free: Vec<(u64, Erased)>,
}

impl Gate {
    pub(super) fn new<T: Send>(recycling: bool) -> Arc<Gate> {
        Arc::new(Gate {
            inner: Mutex::new(GateInner {
                alive: true,
                owned: BTreeMap::new(),
                tombs: Vec::new(),
                in_flight: 0,
                heir: None,
                waiters: 0,
                free: Vec::new(),
            }),
            idle: Condvar::new(),
            closed: AtomicBool::new(false),
            exit_one: exit_one::<T>,
            recycling,
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
    /// The address of the `Arc<Gate>` whose value this thread's exit work is dropping (held by
    /// the exit hook's boxed `GateExit` for the whole drop), 0 if none: a `RankLocal` dropped inside that drop
    /// hands its flights to that gate instead of waiting (I39).
    static EXIT_DROPPING: Cell<usize> = const { Cell::new(0) };
}

global! {
    /// Serializes the hand-overs of `RankLocal`s dropped inside exit drops (rare), so that two on
    /// two threads cannot close a cycle of heirs unseen (I39).
    static HANDOVERS: Mutex<()> = Mutex::new(());
}

/// Ends one flight of `g` (a value's exit drop returned, or every flight handed over ended):
/// at 0 wakes the drop waiting for it and ends the flight its heir holds for it, and so on up
/// the heirs (I39). Takes one gate lock at a time.
fn land(g: &Gate) {
    let mut heir = land_one(g);
    while let Some(h) = heir {
        heir = land_one(&h);
    }
}

fn land_one(g: &Gate) -> Option<Arc<Gate>> {
    let mut s = lock(&g.inner);
    s.in_flight -= 1;
    if s.in_flight != 0 {
        return None;
    }
    if s.waiters > 0 {
        g.idle.notify_all();
    }
    s.heir.take()
}

/// Records `gate` with this thread's exit hook, so that its exit work visits the gate (I39);
/// `false` if the thread has no hook (it is exiting, or under loom).
pub(super) fn add_exit_gate(gate: &Arc<Gate>) -> bool {
    identity::add_exit_work(Arc::as_ptr(gate) as usize, || {
        Box::new(GateExit(Arc::clone(gate)))
    })
}

/// A gate as the exit hook holds it (`identity` defines what it runs, I39).
struct GateExit(Arc<Gate>);

impl identity::ExitWork for GateExit {
    fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    fn is_live(&self) -> bool {
        self.0.is_open()
    }

    /// The exit work of the thread whose own rank is `rank` in this gate (I39): called by its
    /// exit hook after the thread cache was wiped and before the exit is delivered. Drops the
    /// thread's OWNED instance in a live `RankLocal`, on this thread; a `T::drop` panic unwinds.
    fn run(self: Box<Self>, rank: u64) {
        let g = &self.0;
        let s = lock(&g.inner);
        if s.alive {
            (g.exit_one)(g, s, rank);
        }
    }
}

/// The exit work for `rank`'s instance of a `RankLocal<T, _>` whose gate is `g`, under its lock
/// `s`: OWNED → EXITING, move the value out, DROPPED, unlock, drop it (I39). Does nothing unless
/// `rank` is this thread's own and its exit hook has begun: only then is no `with_own` of the
/// instance running, on this thread or any other (I39).
fn exit_one<'a, T>(g: &'a Arc<Gate>, mut s: MutexGuard<'a, GateInner>, rank: u64) {
    if rank != identity::own_raw() || identity::own_alive() {
        return;
    }
    let Some(p) = s.owned.remove(&rank) else {
        return;
    };
    let p = InstancePtr::<T>::new(p);
    // SAFETY: as for `meta` below; this is the instance's own thread (checked above), the only
    // one that touches its guard count (I41).
    if unsafe { p.meta().guards() } != 0 {
        // An `OwnRef` of it is alive (another thread-local's destructor holds it): its last
        // guard's drop drops it, on this thread (LINGERING), or, if a reader moved it on
        // meanwhile, it is kept (I41).
        // SAFETY: as just said.
        unsafe {
            let meta = p.meta();
            if meta.linger() {
                meta.set_linger(Arc::as_ptr(g) as usize, rank);
            } else {
                meta.keep();
            }
        }
        return;
    }
    if g.recycling {
        // SAFETY: as for `meta` below.
        if unsafe { p.meta() }.vacate(OWNED) {
            // Stays in place, for a new rank to adopt (I42); a reader that moved it on first
            // made it a kept value.
            s.free.push((rank, p.erased()));
        }
        return;
    }
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
            land(self.0);
        }
    }
    let outer = EXIT_DROPPING
        .try_with(|d| d.replace(g as *const Arc<Gate> as usize))
        .unwrap_or(0);
    let _landed = Landed(g, outer);
    // Dropped here, outside the gate lock, on the owner's thread as its own rank (I10, I39).
    drop(value);
}

/// The last guard's drop of a LINGERING instance (I41): what the exit work left to it — move
/// the value out (LINGERING → EXITING → DROPPED), hand the tombstone to a sweep, drop the value,
/// on this thread, as its own rank. Does nothing if the value was kept since (`OwnRef::leak`).
#[cold]
#[inline(never)]
pub(super) fn end_linger<T>(p: InstancePtr<T>) {
    // SAFETY: called by the last counted guard's drop, on the instance's own thread (I41): the
    // instance is allocated (the guard borrowed its `RankLocal`, so no `&mut` access or drop
    // freed it, and no sweep takes a LINGERING instance, I41).
    let meta = unsafe { p.meta() };
    // SAFETY: as just said; this thread alone touches the count (I41).
    let own = unsafe { meta.take_linger() };
    // SAFETY: the gate of the instance's `RankLocal`, which the exit work recorded: the
    // `RankLocal` holds it until its drop, which the guard's borrow excluded until now (I41).
    let g = unsafe { &*(own.gate as *const Gate) };
    let mut s = lock(&g.inner);
    if !s.alive {
        return;
    }
    if g.recycling {
        if meta.vacate(LINGERING) {
            s.free.push((own.rank, p.erased())); // for a new rank to adopt (I42)
        }
        return;
    }
    if !meta.end_linger() {
        return; // kept since (`OwnRef::leak`)
    }
    // SAFETY: as above, and this thread moved it to EXITING: nothing else reads or writes the
    // value (I39, I41).
    let value = unsafe { p.take_value() };
    s.tombs.push(own.rank);
    drop(s);
    // Dropped outside the gate lock, on the owner's thread, as its own rank (I10, I41).
    let rank = identity::RankId::from_raw(own.rank);
    if identity::current_raw() == own.rank {
        drop(value);
    } else {
        crate::delegation::on_behalf_of(rank, move || drop(value));
    }
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
        let owned = core::mem::take(&mut s.owned);
        if !owned.is_empty() {
            // Relaxed: `&mut self`. A fresh uid on next use: no own entry of a thread survives
            // for an instance that leaves the gate, since `get_own`'s hit counts guards without
            // looking at the state (I41).
            self.core.uid.store(crate::cache::NO_UID, Ordering::Relaxed);
        }
        for (rank, p) in owned {
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
    if !s.free.is_empty() {
        // nor adopts what is removed (I42)
        let gone: std::collections::BTreeSet<u64> = removed.iter().map(|(r, _)| *r).collect();
        s.free.retain(|(rank, _)| !gone.contains(rank));
    }
}

impl<T, B: Backend> RankLocal<T, B> {
    /// For the `RankLocal`'s drop: closes the gate (exit work then does nothing) and waits until
    /// every flight of the gate ended (the values exit work moved out are dropped, since their
    /// `T` may borrow what dies with the `RankLocal`) — or, inside an exit drop, hands the
    /// flights to that drop's gate and returns at once (I39).
    pub(in crate::rank_local) fn close_gate(&mut self) {
        let Some(gate) = &mutex_mut(&mut self.writer).tracks.gate else {
            return;
        };
        // Relaxed: a pruning hint (`Gate::is_open`).
        gate.closed.store(true, Ordering::Relaxed);
        let outer = EXIT_DROPPING.try_with(Cell::get).unwrap_or(0);
        if outer != 0 {
            // SAFETY: `outer` is the address of the `Arc<Gate>` in the boxed `GateExit` that the
            // exit hook runs, lent to `exit_one`, for the drop of a value that exit work moved
            // out (the box is neither moved nor dropped before `run` returns): it is set on
            // this thread only for that drop and restored when it ends, and this drop runs inside
            // it on this thread, so the `Arc` lives, unmoved, for all of this call (I39).
            let outer = unsafe { &*(outer as *const Arc<Gate>) };
            return hand_over(gate, outer);
        }
        let mut s = lock(&gate.inner);
        s.alive = false;
        s.owned.clear();
        while s.in_flight > 0 {
            s.waiters += 1;
            s = wait(&gate.idle, s);
            s.waiters -= 1;
        }
    }
}

/// `gate`'s close from inside the exit drop of a value of `outer` (the `RankLocal` was that
/// value's, or something it held, I39): closes it and, if flights of it have not ended, makes
/// `outer` its heir — one more flight of `outer`, ended when the last of `gate`'s does — so that
/// whatever waits for `outer`'s flights (its `RankLocal`'s drop, or the heir it hands them to)
/// waits for `gate`'s too. No heir if `outer`'s heirs lead back to `gate` (`outer` may be `gate`):
/// then every gate on that cycle was closed inside an exit drop, and no drop waits for any of
/// them. Never blocks but on a gate lock.
fn hand_over(gate: &Arc<Gate>, outer: &Arc<Gate>) {
    let _serial = lock(&HANDOVERS);
    let mut s = lock(&gate.inner);
    s.alive = false;
    s.owned.clear();
    if s.in_flight == 0 {
        return;
    }
    // The heirs from `outer` on do not change meanwhile: each counts a flight for the one before
    // it, `outer`'s count holds this drop's, so none reaches 0 and drops its heir; and heirs are
    // only set here, under `HANDOVERS`.
    let mut next = Some(Arc::clone(outer));
    while let Some(g) = next {
        if Arc::ptr_eq(&g, gate) {
            return; // a cycle: nothing waits
        }
        next = lock(&g.inner).heir.clone();
    }
    lock(&outer.inner).in_flight += 1;
    s.heir = Some(Arc::clone(outer));
}
