//! Owner-only access — `get_own`, `get_own_or`, `try_get_own`, `with_own`, `with_own_or`,
//! `try_with_own` — and dropping, at its thread's exit, an instance only `with_own` reached (I39).
//!
//! The family always reaches the calling OS thread's own instance (`identity::own_raw`), also
//! inside `on_behalf_of`, so it needs `T: Send` only: no other thread can reach the instance but
//! through the rank-aware methods, which need `T: Sync` ([`SyncValue`]).
//!
//! # Exit drop
//! A first touch by `with_own` publishes the instance OWNED, records it in the `RankLocal`'s
//! [`Gate`] (allocated on the first such touch, shared with the thread's exit hook, never holding
//! the `RankLocal`'s address: a `RankLocal` may be moved) and asks for the rank's exit (I36). Any
//! other access moves OWNED on by a CAS before it uses the value (to ESCAPED for a `&T` that
//! escapes, to SCOPED for a rank-aware scoped read). The thread's exit hook, after it wiped the
//! thread cache and before it delivers the exit, visits each gate: under the gate lock it takes
//! the thread's entry and CASes OWNED → EXITING; if it wins, it moves the value out and stores
//! DROPPED (the allocation stays in the map, a *tombstone* that readers treat as absent), then
//! drops the value outside the lock, on this thread, as its own rank. The `RankLocal`'s drop
//! closes the gate and waits for values being dropped so (their `T` may borrow what dies with
//! the `RankLocal`); `clear`, `iter_mut` and `into_iter` take every entry out of the gate first.
//! Tombstones are unpublished by the sweep (their ranks reach the inbox at exit, I36) or by
//! `iter`, freed without dropping the value, or refilled by the next first touch of the rank.

use core::any::Any;
use core::cell::Cell;
use core::fmt;
use core::panic::AssertUnwindSafe;
use std::collections::BTreeMap;

use super::init::Access;
use super::instance::{is_tombstone, InstancePtr, DROPPED, EXITING, OWNED, SCOPED};
use super::{RankLocal, Writer};
use crate::backend::Backend;
use crate::cache;
use crate::collector::{count_pin, pin};
use crate::erased::Erased;
use crate::identity;
use crate::primitive::Ordering;
use crate::primitive::{lock, mutex_mut, tls, wait, Arc, AtomicBool, Condvar, Mutex, MutexGuard};

/// The values a rank-aware method can hand to another thread than their owner's: `Send + Sync`.
/// Implemented for every such type; bounding the methods on it (rather than on `Sync`) lets the
/// compiler's error for a `RefCell` or `Cell` name the method that fits.
///
/// ```
/// fn sum<T: ranklocal::SyncValue + Copy + Into<u64>>(rl: &ranklocal::RankLocal<T>) -> u64 {
///     let mut total = 0;
///     rl.for_each(|_, v| total += (*v).into());
///     total
/// }
/// let rl = ranklocal::RankLocal::<u32>::new();
/// rl.get_or(|| 5);
/// assert_eq!(sum(&rl), 5);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `Sync`: this `RankLocal` method can hand the value to another thread",
    label = "needs a `Sync` value: another thread may read it",
    note = "for state only its own thread touches (a `RefCell`, a `Cell`), use the owner-only \
            methods `with_own`/`get_own` (also `with_own_or`, `try_with_own`, `get_own_or`, \
            `try_get_own`): they reach the calling thread's own instance and need `Send` only",
    note = "for state other threads read (`get_for`, `iter`, `on_behalf_of`), use a thread-safe \
            type: a `Mutex`, an `RwLock`, an atomic"
)]
pub trait SyncValue: Send + Sync {}

impl<T: Send + Sync + ?Sized> SyncValue for T {}

/// What a `RankLocal` shares with the exit hooks of the threads that have an OWNED instance in
/// it (I39). It holds no pointer to the `RankLocal` (which may move), only instance pointers,
/// and a function typed for the `RankLocal`'s `T`.
pub(crate) struct Gate {
    inner: Mutex<GateInner>,
    /// Signalled when `in_flight` drops to 0 while the `RankLocal`'s drop waits.
    idle: Condvar,
    /// A hint for the exit hooks' pruning, set when the `RankLocal` is dropped.
    closed: AtomicBool,
    /// `exit_one::<T>` for the `RankLocal`'s `T`.
    exit_one: for<'a> fn(&'a Gate, MutexGuard<'a, GateInner>, Erased),
}

/// What the gate lock guards.
pub(crate) struct GateInner {
    /// `false` once the `RankLocal` is dropped: exit work then does nothing.
    alive: bool,
    /// rank → its OWNED instance (or one that was OWNED: readers move it on without this lock),
    /// for every instance the exit work may still touch. Only entries in here are ever touched
    /// by exit work, and every path that frees an instance without the inbox (`&mut`, drop)
    /// takes the entries out first (I39).
    owned: BTreeMap<u64, Erased>,
    /// Ranks whose instance the exit work made a tombstone, for `iter` and the sweep to unpublish.
    tombs: Vec<u64>,
    /// Values moved out by exit work and not dropped yet.
    in_flight: usize,
    /// Threads waiting on `idle`.
    waiters: usize,
}

impl Gate {
    fn new<T: Send>() -> Arc<Gate> {
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
        let mut s = s;
        let Some(p) = s.owned.remove(&rank) else {
            continue;
        };
        let exit_one = g.exit_one;
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| exit_one(&g, s, p))) {
            match first {
                None => first = Some(panic),
                Some(_) => super::instance::drop_payload(panic),
            }
        }
    }
    first
}

/// The exit work for one instance `p` of a `RankLocal<T, _>`, taken out of `g`'s map under its
/// lock `s`: OWNED → EXITING, move the value out, DROPPED, unlock, drop it (I39).
fn exit_one<'a, T>(g: &'a Gate, mut s: MutexGuard<'a, GateInner>, p: Erased) {
    // SAFETY: every entry of a gate's map is an instance of the `RankLocal<T, _>` that made the
    // gate with `exit_one::<T>` (I5, I39).
    let p = unsafe { InstancePtr::<T>::new(p) };
    // SAFETY: an entry of the map is alive while it is in it and the gate is alive: every path
    // that frees an instance of a live `RankLocal` without the inbox took it out of the map under
    // this lock first, and the inbox delivers this rank only after this work (I39, I36).
    let st = unsafe { p.state() };
    // SeqCst (AcqRel would do): exactly one of this CAS and a reader's upgrade wins (I39).
    if st
        .compare_exchange(OWNED, EXITING, Ordering::SeqCst, Ordering::Relaxed)
        .is_err()
    {
        return; // a reader moved it on: a sweep or `&mut` frees it
    }
    // SAFETY: this thread moved it to EXITING: nobody else touches the value (I39).
    let value = unsafe { p.take_value() };
    // Release: pairs with the Acquire of whoever later frees or refills the tombstone.
    st.store(DROPPED, Ordering::Release);
    let rank = identity::own_raw();
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

/// Runs `init` as `rank` (the thread's own), also inside another rank's `on_behalf_of`: an
/// instance is built as the rank it is for, as it is dropped as that rank (I10).
fn as_own<T>(rank: u64, init: impl FnOnce() -> T) -> T {
    if identity::current_raw() == rank {
        init()
    } else {
        crate::delegation::on_behalf_of(identity::RankId::from_raw(rank), init)
    }
}

/// The owner-only family: `T: Send` only.
impl<T: Send, B: Backend> RankLocal<T, B> {
    /// This OS thread's own instance, created with `T::default()` on first use, as a `&T` that
    /// lives as long as the `RankLocal`. Unlike [`get`](Self::get) it ignores
    /// [`on_behalf_of`](crate::on_behalf_of) — it is always the calling thread's own — so it needs
    /// `T: Send` only: a `RefCell` or `Cell` is fine. The instance is kept (like `get`'s) until
    /// `&mut` access or the `RankLocal`'s drop.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    /// use std::cell::Cell;
    ///
    /// static HITS: RankLocal<Cell<u32>> = RankLocal::new();
    /// HITS.get_own().set(HITS.get_own().get() + 1);
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || HITS.get_own().set(HITS.get_own().get() + 1)); // still ours
    /// assert_eq!(HITS.get_own().get(), 2);
    /// ```
    ///
    /// # Panics
    /// As [`get`](Self::get).
    #[inline]
    #[track_caller]
    pub fn get_own(&self) -> &T
    where
        T: Default,
    {
        self.get_own_or(T::default)
    }

    /// This OS thread's own instance, created with `init` on first use; see
    /// [`get_own`](Self::get_own).
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    ///
    /// let names: RankLocal<RefCell<String>> = RankLocal::new();
    /// names.get_own_or(|| RefCell::new("main".into())).borrow_mut().push_str(" thread");
    /// assert_eq!(*names.get_own_or(|| unreachable!()).borrow(), "main thread");
    /// ```
    ///
    /// # Panics
    /// As [`get_or`](Self::get_or).
    #[inline]
    #[track_caller]
    pub fn get_own_or(&self, init: impl FnOnce() -> T) -> &T {
        let rank = identity::own_raw_or_zero();
        if let Some(v) = self.cached(rank) {
            return v;
        }
        self.get_own_slow(rank, init)
    }

    #[cold]
    #[track_caller]
    fn get_own_slow(&self, rank: u64, init: impl FnOnce() -> T) -> &T {
        let rank = if rank == 0 {
            identity::own_raw()
        } else {
            if let Some(v) = self.lookup_slow(rank) {
                return v;
            }
            rank
        };
        let init = || Ok::<T, core::convert::Infallible>(as_own(rank, init));
        let Ok(lent) = self.insert(rank, init, Access::Escaped);
        let p = lent.p;
        cache::store(self.uid_or_assign(), rank, p.erased());
        // SAFETY: `p` was just published in this map (I2, I5), escaped (I31), so valid while
        // `&self` lives (I1); the same `T` every reader of this `RankLocal` reads (I9).
        unsafe { p.value() }
    }

    /// This OS thread's own instance if it exists, as a `&T` that is kept (see
    /// [`get_own`](Self::get_own)); never creates one.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let rl: RankLocal<Cell<u8>> = RankLocal::new();
    /// assert!(rl.try_get_own().is_none());
    /// rl.with_own(|c| c.set(3));
    /// assert_eq!(rl.try_get_own().map(Cell::get), Some(3));
    /// ```
    #[inline]
    pub fn try_get_own(&self) -> Option<&T> {
        let rank = identity::own_raw_or_zero();
        if rank == 0 {
            return None; // no id yet: no map holds an instance of it
        }
        self.cached(rank).or_else(|| self.lookup_slow(rank))
    }

    /// This OS thread's own instance, created with `T::default()` on first use, lent to `f`:
    /// the owner-only form of `std::thread::LocalKey::with`, for a `RefCell`, a `Cell` or any
    /// `T: Send`. It ignores [`on_behalf_of`](crate::on_behalf_of).
    ///
    /// An instance only ever reached by `with_own` (and [`try_with_own`](Self::try_with_own)) is
    /// **dropped when its thread exits, on that thread, before `join` returns**, as std's
    /// `thread_local!` drops its values; one also reached by a rank-aware call is dropped as
    /// that call says ([`with`](Self::with): by a sweep after the rank exits; [`get`](Self::get)
    /// and the other `&T`s: kept until `&mut` access or drop). Outside `on_behalf_of`, `with_own`
    /// and `with` reach the same instance. The hit path is one thread-cache probe, as `with`'s.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// static FLUSHED: AtomicUsize = AtomicUsize::new(0);
    /// #[derive(Default)]
    /// struct Buffer(RefCell<Vec<u8>>);
    /// impl Drop for Buffer {
    ///     fn drop(&mut self) {
    ///         FLUSHED.fetch_add(self.0.borrow().len(), Ordering::Relaxed);
    ///     }
    /// }
    ///
    /// static BUFFERS: RankLocal<Buffer> = RankLocal::new();
    /// std::thread::spawn(|| BUFFERS.with_own(|b| b.0.borrow_mut().extend([1, 2, 3])))
    ///     .join()
    ///     .unwrap();
    /// assert_eq!(FLUSHED.load(Ordering::Relaxed), 3); // dropped at the thread's exit
    /// ```
    ///
    /// # Panics
    /// As [`get`](Self::get). A panic in `f` propagates; nothing is leaked.
    ///
    /// # Deadlock
    /// A `RankLocal` dropped while other threads drop its values at their exit waits for those
    /// drops (a value may borrow data that ends with the map). So two values dropped at exit on
    /// two threads at once, each holding the last reference to the *other's* `RankLocal`, wait
    /// for each other and never return. Keep a `RankLocal` alive elsewhere (a `static`, or an
    /// `Arc` its users do not own through its values).
    #[inline]
    #[track_caller]
    pub fn with_own<R>(&self, f: impl FnOnce(&T) -> R) -> R
    where
        T: Default,
    {
        self.with_own_or(T::default, f)
    }

    /// [`with_own`](Self::with_own) with an initializer, for a `T` without `Default`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::RefCell;
    ///
    /// let stack: RankLocal<RefCell<Vec<u64>>> = RankLocal::new();
    /// let new = || RefCell::new(Vec::with_capacity(16));
    /// stack.with_own_or(new, |s| s.borrow_mut().push(7));
    /// assert_eq!(stack.with_own_or(new, |s| s.borrow_mut().pop()), Some(7));
    /// ```
    ///
    /// # Panics
    /// As [`get_or`](Self::get_or). A panic in `f` propagates; nothing is leaked.
    #[inline]
    #[track_caller]
    pub fn with_own_or<R>(&self, init: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R {
        let rank = identity::own_raw_or_zero();
        if let Some(v) = self.cached_own(rank) {
            return f(v);
        }
        self.with_own_slow(Some(init), f)
            .expect("ranklocal: with_own_slow with an init returns")
    }

    /// This OS thread's own instance lent to `f` if it exists, else `None`: never creates one and
    /// hands out no `&T` that outlives `f`.
    ///
    /// ```
    /// use ranklocal::RankLocal;
    /// use std::cell::Cell;
    ///
    /// let rl: RankLocal<Cell<u32>> = RankLocal::new();
    /// assert_eq!(rl.try_with_own(Cell::get), None);
    /// rl.with_own(|c| c.set(9));
    /// assert_eq!(rl.try_with_own(Cell::get), Some(9));
    /// ```
    #[inline]
    pub fn try_with_own<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let rank = identity::own_raw_or_zero();
        if let Some(v) = self.cached_own(rank) {
            return Some(f(v));
        }
        self.with_own_slow(None::<fn() -> T>, f)
    }

    /// The `with_own` entry of the thread cache for `rank` (tagged [`cache::OWN_TAG`]): a hit only
    /// for this thread's own, live rank (I34, I39).
    #[inline]
    fn cached_own(&self, rank: u64) -> Option<&T> {
        // Relaxed: the uid is only a name here; an own entry stays valid whatever the uid (I34).
        let uid = self.uid.load(Ordering::Relaxed);
        let p = cache::lookup(uid, rank | cache::OWN_TAG)?;
        // SAFETY: an own entry was filled by this thread for its own rank while it was alive and
        // is wiped before the rank's exit work and exit (I34, I39), so the instance is neither
        // reclaimed (I35) nor a tombstone, and stays valid for `&self` (I1); a `T` of this map
        // (I5, I9). Only this thread touches an OWNED value (I39).
        Some(unsafe { InstancePtr::<T>::new(Erased::from_non_null(p)).value() })
    }

    /// `with_own`/`try_with_own` after the own entry missed: the live owner looks up (or, with
    /// `init`, creates OWNED) its instance and caches it; a thread past its exit hook (a late
    /// thread-local destructor) reads pinned, and creates a SCOPED instance that a later sweep
    /// drops (I39).
    #[cold]
    #[track_caller]
    fn with_own_slow<R>(
        &self,
        init: Option<impl FnOnce() -> T>,
        f: impl FnOnce(&T) -> R,
    ) -> Option<R> {
        let fresh = identity::own_raw_or_zero() == 0;
        if fresh && init.is_none() {
            return None; // no id yet: no map holds an instance of it
        }
        let rank = identity::own_raw();
        let init = init.map(|init| move || Ok::<T, core::convert::Infallible>(as_own(rank, init)));
        if identity::own_alive() {
            let found = if fresh { None } else { B::get(&self.map, rank) };
            let p = match found {
                // SAFETY: an instance of this map (I5); the live owner's, neither reclaimed (I35)
                // nor a tombstone (only its own exit work makes one, I39) while the thread runs.
                Some(p) => unsafe { InstancePtr::<T>::new(p) },
                None => {
                    let Ok(lent) = self.insert(rank, init?, Access::Own);
                    lent.p
                }
            };
            cache::store(self.uid_or_assign(), rank | cache::OWN_TAG, p.erased());
            // SAFETY: as in `cached_own` (I35, I1, I5, I9, I39).
            return Some(f(unsafe { p.value() }));
        }
        // Past the exit hook (or under loom, where thread liveness is not tracked): pinned, as a
        // non-owner's scoped read (I33); an instance made now is SCOPED and swept (I39).
        let guard = pin();
        count_pin(&guard);
        // SAFETY: an instance of this map (I5), read from it under `guard` (I33).
        let found = B::get(&self.map, rank).map(|p| unsafe { InstancePtr::<T>::new(p) });
        // Only this thread acts on its own instance through this family, so an OWNED one is used
        // as it is: its exit work runs on this thread, after this read (I39).
        let found = found.filter(|p| {
            // SAFETY: as just said (I33).
            let st = unsafe { p.state() }.load(Ordering::Acquire);
            !is_tombstone(st) && st != super::instance::RECLAIMING
        });
        if let Some(p) = found {
            // SAFETY: alive while `guard` is held (I33); a `T` of this map (I5, I9).
            return Some(f(unsafe { p.value() }));
        }
        drop(guard);
        let Ok(lent) = self.insert(rank, init?, Access::Scoped);
        // SAFETY: alive while `lent.pin` is held (I33); a `T` of this map (I5, I9).
        Some(f(unsafe { lent.p.value() }))
    }

    /// Under the writer lock `w`: records `p`, just published OWNED for this thread's own `rank`,
    /// in the gate (made on first use) and the gate in the thread's exit hook (I39). If the
    /// thread has no hook any more, the instance stays OWNED and is dropped with the map.
    pub(super) fn register_owned(w: &mut Writer, rank: u64, p: InstancePtr<T>) {
        let gate = w.gate.get_or_insert_with(Gate::new::<T>);
        lock(&gate.inner).owned.insert(rank, p.erased());
        identity::add_exit_gate(gate);
    }

    /// Under the writer lock, with the map's instance `p` for `rank`: `true` if it can serve a
    /// first touch's `access` (moved on from OWNED as `access` needs), `false` for a tombstone,
    /// which the first touch refills (I39).
    pub(super) fn serves(p: InstancePtr<T>, access: Access) -> bool {
        match access {
            // SAFETY: in the map under the writer lock: alive, not RECLAIMING (I30, I32).
            Access::Escaped => unsafe { p.escape() },
            // SAFETY: as just said (I30, I32).
            Access::Owner | Access::Scoped => unsafe { p.scope() },
            // SAFETY: as just said (I30, I32).
            Access::Own => !is_tombstone(unsafe { p.state() }.load(Ordering::Acquire)),
        }
    }

    /// Publishes `p` (a fresh allocation for `rank`, in state `state`) under the writer lock `w`:
    /// into the tombstone the rank has in the map, if any (moving the value over and freeing
    /// `p`), else as a new entry. Returns the published instance (I39).
    pub(super) fn publish(
        &self,
        w: &Writer,
        rank: u64,
        p: InstancePtr<T>,
        state: usize,
    ) -> InstancePtr<T> {
        // SAFETY: under the writer lock, which serializes every write to the map (I16).
        let Some(old) = (unsafe { B::get_by_writer(&self.map, rank) }) else {
            B::insert(&self.map, rank, p.erased());
            return p;
        };
        // SAFETY: an instance of this map (I5), in it under the writer lock: alive (I30, I32).
        let old = unsafe { InstancePtr::<T>::new(old) };
        // SAFETY: as just said (I30, I32).
        let st = unsafe { old.state() };
        if st.load(Ordering::Acquire) == EXITING {
            // The exit work is moving the value out under the gate lock: wait for that short
            // critical section (no user code) to end.
            if let Some(g) = &w.gate {
                drop(lock(&g.inner));
            }
        }
        debug_assert_eq!(
            st.load(Ordering::Acquire),
            DROPPED,
            "a claimed rank's entry is a tombstone"
        );
        // SAFETY: `p` is ours alone, never published (I1, I6); its box is freed here.
        let value = unsafe { p.into_value() };
        // SAFETY: under the writer lock, in this map and DROPPED (the claim excludes every other
        // first touch of `rank`; the gate lock above ordered the exit work's move before this,
        // I39).
        unsafe { old.refill(value, state) };
        old
    }

    /// Under the writer lock `w`: unpublishes the tombstones the exit work left (DROPPED →
    /// REAPED), adding them to `ranks`/`batch` for the caller to retire (I39). Returns the gate
    /// lock, held, so that the caller can move OWNED instances on with no exit work running.
    pub(super) fn take_tombstones<'g>(
        &self,
        gate: Option<&'g Arc<Gate>>,
        ranks: &mut Vec<u64>,
        batch: &mut Vec<(u64, Erased)>,
    ) -> Option<MutexGuard<'g, GateInner>> {
        let mut s = lock(&gate?.inner);
        // Acquire: pairs with an `Iter`'s Release decrement (I39). While an iterator lives, a
        // tombstone published before its walk may be in its snapshot: leave the list for a later
        // sweep (O(1) now; the list is walked once, when no iterator lives).
        if self.iterators.load(Ordering::Acquire) != 0 {
            return Some(s);
        }
        for rank in core::mem::take(&mut s.tombs) {
            // SAFETY: under the writer lock (the caller's), which serializes every write (I16).
            let Some(p) = (unsafe { B::get_by_writer(&self.map, rank) }) else {
                continue;
            };
            // SAFETY: an instance of this map (I5), in it under the writer lock: alive.
            // no iterator lives: a tombstone may go whatever walk count it was published at
            if unsafe { InstancePtr::<T>::new(p).reap() } {
                ranks.push(rank);
                batch.push((rank, p));
            }
        }
        Some(s)
    }

    /// For `clear`, `iter_mut`, `into_iter` (`&mut self`, I6): takes every instance out of the
    /// gate, so that no exit work touches one again (OWNED ones become SCOPED: a sweep drops
    /// them after their rank exits), and, if `unpublish_tombs`, frees the tombstones (I39).
    pub(super) fn settle_owned(&mut self, unpublish_tombs: bool) {
        let w = mutex_mut(&mut self.writer);
        let Some(gate) = &w.gate else {
            return;
        };
        let mut s = lock(&gate.inner);
        for (_, p) in core::mem::take(&mut s.owned) {
            // SAFETY: an entry of the gate: alive (I39).
            let st = unsafe { InstancePtr::<T>::new(p).state() };
            // SeqCst: as the exit work's CAS (I39); a loss means it moved on already.
            let _ = st.compare_exchange(OWNED, SCOPED, Ordering::SeqCst, Ordering::Relaxed);
        }
        if !unpublish_tombs {
            return;
        }
        let tombs = core::mem::take(&mut s.tombs);
        drop(s);
        let mut dead: Vec<u64> = tombs
            .into_iter()
            .filter(|&rank| {
                // SAFETY: `&mut self` excludes every other writer (I6, I16).
                unsafe { B::get_by_writer(&self.map, rank) }.is_some_and(|p| {
                    // SAFETY: an instance of this map (I5), alive under `&mut self`.
                    let st = unsafe { InstancePtr::<T>::new(p).state() };
                    st.load(Ordering::Acquire) == DROPPED
                })
            })
            .collect();
        if dead.is_empty() {
            return;
        }
        dead.sort_unstable();
        dead.dedup();
        for (_, p) in B::retain(&mut self.map, &mut |rank| {
            dead.binary_search(&rank).is_err()
        }) {
            // SAFETY: removed from this map under `&mut self` (I6): no reference left; a
            // tombstone, so `free` drops no value (I39).
            unsafe { InstancePtr::<T>::new(p).free() };
        }
        // A fresh uid on next use: no cache entry can point at a freed slot (I4).
        self.uid.store(cache::NO_UID, Ordering::Relaxed);
    }
}

/// For the `RankLocal`'s drop: closes the gate (exit work then does nothing) and waits for
/// the values exit work moved out to be dropped, since their `T` may borrow what dies with
/// the `RankLocal` — unless this thread is inside such a drop of this gate (I39).
pub(super) fn close_gate(w: &mut Writer) {
    let Some(gate) = &w.gate else {
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

/// Shows the count and the calling thread's own value (as [`RankLocal::try_with_own`] reaches it:
/// never another thread's, never escaping, never creating), as the `thread_local` crate's
/// `Debug` does; so a struct holding a `RankLocal` of a `RefCell` can derive `Debug`.
///
/// ```
/// use ranklocal::RankLocal;
/// use std::cell::RefCell;
///
/// let rl: RankLocal<RefCell<u32>> = RankLocal::new();
/// assert_eq!(format!("{rl:?}"), r#"RankLocal { backend: "epoch", len: 0, own: None }"#);
/// rl.with_own(|v| *v.borrow_mut() = 5);
/// std::thread::scope(|s| {
///     s.spawn(|| rl.with_own(|v| *v.borrow_mut() = 6));
/// });
/// assert_eq!(format!("{rl:?}"), r#"RankLocal { backend: "epoch", len: 2, own: Some(RefCell { value: 5 }) }"#);
/// ```
impl<T: Send + fmt::Debug, B: Backend> fmt::Debug for RankLocal<T, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = self.len();
        let mut shown = None;
        let r = self.try_with_own(|v| {
            let r = f
                .debug_struct("RankLocal")
                .field("backend", &B::NAME)
                .field("len", &len)
                .field("own", &Some(v))
                .finish();
            shown = Some(());
            r
        });
        match (r, shown) {
            (Some(r), Some(())) => r,
            _ => f
                .debug_struct("RankLocal")
                .field("backend", &B::NAME)
                .field("len", &len)
                .field("own", &None::<&T>)
                .finish(),
        }
    }
}
