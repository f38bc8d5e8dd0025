//! Rank identities: one `u64` per OS thread or [`Rank`], handed out from one process-wide counter
//! and never reused, plus the registry of live ranks that [`RankLocal::purge_exited`] consults and
//! that delivers each rank's exit to the `RankLocal`s that asked for it.
//!
//! *Exited* is one notion, owned here: a rank is live from the moment its id is handed out until
//! [`exit`] removes it from [`LIVE`] — when its thread's thread-local destructors run, or when its
//! `Rank` is dropped. Everything that asks whether a rank has exited asks [`LIVE`].
//!
//! # Exit notifications
//! A `RankLocal` that holds a scoped-only instance of a rank asks for the rank's exit with
//! [`watch_exit`]: its [`Inbox`] is recorded with the rank in [`LIVE`], and [`exit`] pushes the
//! rank's id into every such inbox (or `watch_exit` does at once, if the rank has exited already).
//! So a sweep looks only at the ranks that exited since the last one — O(k) for k exits, with no
//! scan of the map and no hold of [`LIVE`] — and does not run at all while its inbox is empty.
//!
//! The per-thread state is a `const`-initialized thread-local of plain `Cell`s with no destructor,
//! so it can be read at any point of a thread's life, including from another thread-local's
//! destructor while the thread exits.
//!
//! [`RankLocal::purge_exited`]: crate::RankLocal::purge_exited

use core::any::Any;
use core::cell::Cell;
use core::fmt;
use core::panic::AssertUnwindSafe;
use std::collections::BTreeMap;

use crate::primitive::{
    global, lazy_global, lock, tls, Arc, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering,
};

/// A rank's identity: one per OS thread, unique for the life of the process and never reused,
/// even after the thread exits (as PyTorch's `RecordFunction::currentThreadId()`).
///
/// Ids are handed out on a thread's first use of the crate, or by [`Rank::new`], starting at 1, in
/// the order they are asked for; threads and [`Rank`]s share one id space. A `RankId` is obtained
/// from a running thread ([`RankId::this_thread`], [`RankId::current`]) or from a [`Rank`]
/// ([`Rank::id`]); pass it to a worker and call [`on_behalf_of`](crate::on_behalf_of) (or
/// [`RankId::bind`]) there to act for that rank.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct RankId(u64);

impl RankId {
    /// The rank this thread is acting for now: the innermost
    /// [`on_behalf_of`](crate::on_behalf_of) rank, or the thread's own rank when it is not
    /// delegating.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankId};
    ///
    /// let me = RankId::current();
    /// assert_eq!(me, RankId::this_thread()); // not delegating
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || assert_eq!(RankId::current(), job.id()));
    /// assert_eq!(RankId::current(), me); // restored
    /// ```
    #[inline]
    pub fn current() -> RankId {
        RankId(current_raw())
    }

    /// This OS thread's own rank, ignoring any delegation.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankId};
    ///
    /// let me = RankId::this_thread();
    /// let job = Rank::new();
    /// on_behalf_of(job.id(), || assert_eq!(RankId::this_thread(), me));
    /// let other = std::thread::spawn(RankId::this_thread).join().unwrap();
    /// assert_ne!(other, me); // every thread has its own, never reused
    /// ```
    #[inline]
    pub fn this_thread() -> RankId {
        RankId(own_raw())
    }

    /// The id as an integer (never 0).
    ///
    /// ```
    /// let id = ranklocal::RankId::current();
    /// assert_ne!(id.as_u64(), 0);
    /// assert_eq!(id.to_string(), format!("rank#{}", id.as_u64()));
    /// ```
    #[inline]
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// Wraps a raw id obtained from a [`RankId`] of this process.
    #[inline]
    pub(crate) fn from_raw(raw: u64) -> RankId {
        debug_assert_ne!(raw, 0);
        RankId(raw)
    }
}

impl fmt::Display for RankId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank#{}", self.0)
    }
}

/// An owned logical rank, not tied to an OS thread: one per request, task or simulated process.
///
/// [`Rank::new`] hands out a fresh [`RankId`] from the same counter as thread ranks (unique, never
/// reused). Nothing runs as the rank by itself: act as it with
/// [`on_behalf_of`](crate::on_behalf_of)`(rank.id(), ..)`, [`RankId::bind`] or
/// [`OnBehalfExt::on_behalf_of`](crate::OnBehalfExt::on_behalf_of), on any thread. The rank is
/// *live* while the `Rank` exists; dropping it makes the rank *exited*, exactly as a thread's rank
/// exits when the thread ends, so [`RankLocal::purge_exited`](crate::RankLocal::purge_exited)
/// keeps its instances while the `Rank` lives and drops them after.
///
/// ```
/// use ranklocal::{on_behalf_of, Rank, RankLocal};
/// use std::sync::Mutex;
///
/// let mut log: RankLocal<Mutex<Vec<&str>>> = RankLocal::new();
/// let request = Rank::new();
/// let id = request.id();
/// std::thread::scope(|s| {
///     s.spawn(|| on_behalf_of(id, || log.get().lock().unwrap().push("parse")));
/// });
/// on_behalf_of(id, || log.get().lock().unwrap().push("reply")); // another thread, same instance
/// assert_eq!(*log.get_for(id).unwrap().lock().unwrap(), ["parse", "reply"]);
/// assert_eq!(log.purge_exited(), 0); // the Rank is alive: its instance stays
/// drop(request);
/// assert_eq!(log.purge_exited(), 1); // exited: its instance is dropped
/// assert!(log.get_for(id).is_none());
/// ```
///
/// # `Send`, `Sync`, not `Clone`
/// A `Rank` is `Send` and `Sync`: it holds only its id, and dropping it on any thread just marks
/// the id exited, so it can move with the request it stands for (into a task, across an
/// `.await`, to another thread) or be shared by reference. It is **not** `Clone`: a `Rank` is the
/// rank's *lifetime*, and two owners whose first drop ends the rank for both (or a "clone" that
/// is a different rank) would both surprise. Copy the [`RankId`] to act for the rank; wrap the
/// `Rank` in an `Arc` to share its ownership (the rank then exits with the last `Arc`).
///
/// ```compile_fail
/// let a = ranklocal::Rank::new();
/// let b = a.clone(); // error: `Rank` is not `Clone`
/// ```
/// ```
/// let a = std::sync::Arc::new(ranklocal::Rank::new());
/// let b = a.clone(); // shared ownership: the rank exits when the last Arc is dropped
/// assert_eq!(a.id(), b.id());
/// ```
#[derive(Debug)]
pub struct Rank {
    /// This rank's id; in [`LIVE`] from [`Rank::new`] until this `Rank` is dropped.
    id: RankId,
}

impl Rank {
    /// A new live rank with a fresh id (never handed out before, to a thread or a `Rank`).
    ///
    /// ```
    /// use ranklocal::{Rank, RankId};
    ///
    /// let (a, b) = (Rank::new(), Rank::new());
    /// assert_ne!(a.id(), b.id());
    /// assert_ne!(a.id(), RankId::this_thread());
    /// assert!(b.id() > a.id()); // handed out in order, from one counter
    /// ```
    #[must_use = "a Rank exits when dropped; dropping it at once makes an exited rank"]
    pub fn new() -> Rank {
        let id = fresh_id();
        live_set().insert(id, Watchers::NEW);
        Rank {
            id: RankId::from_raw(id),
        }
    }

    /// This rank's id: act as the rank with [`on_behalf_of`](crate::on_behalf_of)`(rank.id(), ..)`.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankId};
    ///
    /// let request = Rank::new();
    /// let id = request.id(); // `Copy`: send it to whichever thread works for the request
    /// let seen = std::thread::spawn(move || on_behalf_of(id, RankId::current))
    ///     .join()
    ///     .unwrap();
    /// assert_eq!(seen, request.id());
    /// ```
    #[inline]
    pub fn id(&self) -> RankId {
        self.id
    }
}

/// The rank's id: `RankId::from(&rank)` is `rank.id()`, so a `&Rank` can be passed where a
/// `RankId` is expected (`impl Into<RankId>`).
///
/// ```
/// use ranklocal::{Rank, RankId};
/// let request = Rank::new();
/// let id: RankId = (&request).into();
/// assert_eq!(id, request.id());
/// ```
impl From<&Rank> for RankId {
    #[inline]
    fn from(rank: &Rank) -> RankId {
        rank.id
    }
}

impl Default for Rank {
    /// Same as [`Rank::new`].
    fn default() -> Rank {
        Rank::new()
    }
}

impl Drop for Rank {
    /// Makes the rank exited (for [`purge_exited`](crate::RankLocal::purge_exited)).
    fn drop(&mut self) {
        exit(self.id.0);
    }
}

/// A thread's identity state. `0` means "not assigned yet" in both fields.
pub(crate) struct ThreadState {
    /// This OS thread's own rank id, assigned on first use and never changed.
    own: Cell<u64>,
    /// The rank the thread acts for now: `own` outside delegation, the innermost
    /// `on_behalf_of` rank inside it; `0` only while `own` is unassigned and no delegation runs.
    current: Cell<u64>,
    /// `true` from the registration of this thread's exit hook until the hook runs: the thread's
    /// own rank is live (in [`LIVE`]) exactly while this is set (I35).
    alive: Cell<bool>,
}

tls! {
    static STATE: ThreadState = const {
        ThreadState { own: Cell::new(0), current: Cell::new(0), alive: Cell::new(false) }
    };
}

global! {
    /// The next rank id; ids start at 1 so that 0 can mean "none".
    static NEXT_RANK: AtomicU64 = AtomicU64::new(1);
}

lazy_global! {
    /// The live ranks: threads that have an id and have not run their exit hook yet, and `Rank`s
    /// not yet dropped; each with the inboxes that want its exit. (Built on first use: an empty
    /// `BTreeMap` can be built in a `static` only from Rust 1.66 on.)
    static LIVE: Mutex<BTreeMap<u64, Watchers>> = Mutex::new(BTreeMap::new());
}

/// Where the exits of watched ranks are delivered: one per `RankLocal` that holds scoped-only
/// instances (see the module docs).
pub(crate) struct Inbox {
    /// Ids of exited ranks not yet taken by a sweep (a rank may appear more than once).
    exited: Mutex<Vec<u64>>,
    /// Set when the `RankLocal` is dropped: nothing is delivered any more, and registrations of
    /// it are pruned.
    closed: AtomicBool,
}

impl Inbox {
    pub(crate) fn new() -> Arc<Inbox> {
        Arc::new(Inbox {
            exited: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        })
    }

    /// How many exits wait to be taken.
    pub(crate) fn len(&self) -> usize {
        lock(&self.exited).len()
    }

    /// Takes every exit delivered so far.
    pub(crate) fn take(&self) -> Vec<u64> {
        core::mem::take(&mut *lock(&self.exited))
    }

    /// Stops deliveries (the `RankLocal` is going away).
    pub(crate) fn close(&self) {
        // Relaxed: a hint that lets `exit` skip the push and `Watchers` prune the entry; a push
        // that misses it only lands in an inbox nobody reads, freed with its last `Arc`.
        self.closed.store(true, Ordering::Relaxed);
        lock(&self.exited).clear();
    }

    fn is_closed(&self) -> bool {
        // Relaxed: see `close`.
        self.closed.load(Ordering::Relaxed)
    }

    fn deliver(&self, rank: u64) {
        if !self.is_closed() {
            lock(&self.exited).push(rank);
        }
    }
}

/// The inboxes that want one live rank's exit.
struct Watchers {
    inboxes: Vec<Arc<Inbox>>,
    /// Prune closed and repeated inboxes when `inboxes` reaches this length: so a long-lived rank
    /// (the main thread) that touches many short-lived `RankLocal`s keeps at most about twice as
    /// many entries as it has live watchers, at amortized O(log n) per registration.
    prune_at: usize,
}

impl Watchers {
    const NEW: Watchers = Watchers {
        inboxes: Vec::new(),
        prune_at: 4,
    };

    fn add(&mut self, inbox: &Arc<Inbox>) {
        if self.inboxes.len() >= self.prune_at {
            crate::counters::bump!(WATCHER_PRUNES);
            self.inboxes.retain(|i| !i.is_closed());
            self.inboxes
                .sort_unstable_by_key(|i| Arc::as_ptr(i) as usize);
            self.inboxes.dedup_by(|a, b| Arc::ptr_eq(a, b));
            self.prune_at = (2 * self.inboxes.len()).max(4);
            if self.inboxes.capacity() > 2 * self.prune_at {
                self.inboxes.shrink_to(self.prune_at);
            }
        }
        self.inboxes.push(Arc::clone(inbox));
    }
}

/// Locks the live registry (every lock of it goes through here, so tests can count them).
fn live_set() -> MutexGuard<'static, BTreeMap<u64, Watchers>> {
    crate::counters::bump!(LIVE_LOCKS);
    lock(&LIVE)
}

/// Delivers `rank`'s exit to `inbox` when it happens — at once if `rank` has exited already (or,
/// under loom, is a thread rank: thread liveness is not tracked there).
pub(crate) fn watch_exit(rank: u64, inbox: &Arc<Inbox>) {
    let mut live = live_set();
    match live.get_mut(&rank) {
        Some(w) => w.add(inbox),
        None => {
            drop(live);
            inbox.deliver(rank);
        }
    }
}

/// The rank the current thread acts for (assigning its own id on first use).
#[inline]
pub(crate) fn current_raw() -> u64 {
    let cur = STATE.with(|s| s.current.get());
    if cur != 0 {
        cur
    } else {
        own_raw()
    }
}

/// The rank the current thread acts for, or 0 if the thread has no id yet (a thread cache lookup
/// with rank 0 misses, and the slow path then calls [`current_raw`]).
#[inline]
pub(crate) fn current_raw_or_zero() -> u64 {
    STATE.with(|s| s.current.get())
}

/// `true` when the thread acts for its own rank (not inside `on_behalf_of` another rank).
/// Also `true` before the thread has an id, when both fields are 0.
#[inline]
#[cfg_attr(ranklocal_loom, allow(dead_code))] // only the `rank_local!` form, absent under loom, asks
pub(crate) fn acting_as_self() -> bool {
    STATE.with(|s| s.current.get() == s.own.get())
}

/// `true` once this thread's own storage is being or has been torn down: its rank exists and its
/// exit hook has begun (or could not be registered, the thread being torn down already). What
/// std's `LocalKey::try_with` fails on. Always `false` under loom, where thread liveness is not
/// tracked.
#[inline]
pub(crate) fn own_storage_torn_down() -> bool {
    !cfg!(ranklocal_loom) && STATE.with(|s| s.own.get() != 0 && !s.alive.get())
}

/// This thread's own id, or 0 if it has none yet (a thread-cache lookup with rank 0 misses).
#[inline]
pub(crate) fn own_raw_or_zero() -> u64 {
    STATE.with(|s| s.own.get())
}

/// This thread's own id, assigned on first use.
#[inline]
pub(crate) fn own_raw() -> u64 {
    let own = STATE.with(|s| s.own.get());
    if own != 0 {
        own
    } else {
        assign_own()
    }
}

/// A fresh rank id, for a thread or a [`Rank`]: never 0, never handed out before.
fn fresh_id() -> u64 {
    // Relaxed: the counter only has to hand out distinct values; nothing is published with it.
    let id = NEXT_RANK.fetch_add(1, Ordering::Relaxed);
    // 2^64 - 1 rank ids will not be handed out; stop before the counter wraps to 0.
    assert!(id != u64::MAX, "ranklocal: rank ids exhausted");
    id
}

#[cold]
fn assign_own() -> u64 {
    let id = fresh_id();
    STATE.with(|s| {
        s.own.set(id);
        if s.current.get() == 0 {
            s.current.set(id);
        }
    });
    register_live(id);
    id
}

/// Makes the thread act for `rank`, returning the previous value (raw, possibly 0) for
/// [`restore_current`].
#[inline]
pub(crate) fn replace_current(rank: u64) -> u64 {
    STATE.with(|s| s.current.replace(rank))
}

/// Undoes [`replace_current`]. A previous value of 0 means "own rank, not assigned then"; the own
/// id may have been assigned meanwhile (inside the delegation), so restore to whatever it is now:
/// `current == 0` must imply `own == 0`, or [`acting_as_self`] would wrongly answer `false`.
#[inline]
pub(crate) fn restore_current(prev: u64) {
    STATE.with(|s| s.current.set(if prev != 0 { prev } else { s.own.get() }));
}

/// Makes rank `id` exited: the one place a rank stops being live, for a thread (its exit hook) and
/// for a [`Rank`] (its drop) alike; delivers the exit to every inbox that asked for it. Idempotent.
fn exit(id: u64) {
    let watchers = live_set().remove(&id);
    // Delivered after `LIVE` is released: an inbox has its own lock, so `LIVE` is held for
    // O(log live) whatever the number of watchers.
    for inbox in watchers.into_iter().flat_map(|w| w.inboxes) {
        inbox.deliver(id);
    }
}

/// `true` while this thread's own rank is live and its exit hook has not started: only then may
/// the thread use the pin-free owner path of scoped access (I34, I35). Always `false` under loom,
/// where thread liveness is not tracked.
#[inline]
pub(crate) fn own_alive() -> bool {
    STATE.with(|s| s.alive.get())
}

/// Work another module registers with this thread's exit hook ([`add_exit_work`]): the hook runs
/// it after it wiped the thread cache and before it delivers the thread's exit (I39). Defined
/// here, and implemented above (a `RankLocal`'s gate), so that this module imports nothing from
/// the modules that use it.
pub(crate) trait ExitWork {
    /// Which registration this is: registering one with the same key again keeps one.
    fn key(&self) -> usize;
    /// `false` once running it would do nothing (a hint: the hook then prunes it).
    fn is_live(&self) -> bool;
    /// Runs it on the exiting thread, whose own rank is `rank`; a panic unwinds out of it.
    fn run(self: Box<Self>, rank: u64);
}

/// Dropped when the thread exits: runs the registered exit work (which drops the values only
/// `with_own` reached), then makes its rank exited.
#[cfg_attr(ranklocal_loom, allow(dead_code))]
struct ExitHook {
    id: u64,
    /// The work registered with [`add_exit_work`] (I39), pruned of dead and repeated ones when
    /// the list reaches `prune_at` (as [`Watchers`]).
    works: Vec<Box<dyn ExitWork>>,
    prune_at: usize,
}

impl Drop for ExitHook {
    fn drop(&mut self) {
        // First make the owner path of scoped access unusable on this thread (I34, I35): later
        // thread-local destructors of this thread go through the pinned path.
        STATE.with(|s| s.alive.set(false));
        crate::cache::wipe();
        // The values only `with_own` reached are dropped here, on this thread, before the rank's
        // exit is delivered to any inbox (I39); the first panic is re-raised after the exit,
        // once every other work ran.
        let mut first: Option<Box<dyn Any + Send>> = None;
        for work in core::mem::take(&mut self.works) {
            let id = self.id;
            if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(move || work.run(id))) {
                match first {
                    None => first = Some(panic),
                    // a payload whose own drop panics is forgotten, with that second payload
                    Some(_) => {
                        if let Err(again) =
                            std::panic::catch_unwind(AssertUnwindSafe(move || drop(panic)))
                        {
                            core::mem::forget(again);
                        }
                    }
                }
            }
        }
        exit(self.id);
        if let Some(p) = first {
            std::panic::resume_unwind(p);
        }
    }
}

/// Registers exit work with this thread's exit hook (I39), unless the last one registered has
/// the same `key` (`make` is called only when it is kept); `false` if the thread has no hook (it
/// is exiting, or under loom).
pub(crate) fn add_exit_work(key: usize, make: impl FnOnce() -> Box<dyn ExitWork>) -> bool {
    EXIT_HOOK
        .try_with(|h| {
            let Some(mut hook) = h.take() else {
                return false;
            };
            if hook.works.last().map(|w| w.key()) != Some(key) {
                if hook.works.len() >= hook.prune_at {
                    crate::counters::bump!(EXIT_WORK_PRUNES);
                    hook.works.retain(|w| w.is_live());
                    hook.works.sort_unstable_by_key(|w| w.key());
                    hook.works.dedup_by_key(|w| w.key());
                    hook.prune_at = (2 * hook.works.len()).max(4);
                }
                hook.works.push(make());
            }
            h.set(Some(hook));
            true
        })
        .unwrap_or(false)
}

tls! {
    #[cfg_attr(ranklocal_loom, allow(dead_code))]
    static EXIT_HOOK: Cell<Option<ExitHook>> = Cell::new(None);
}

/// Under loom the exit hook would run after loom has torn down its globals (the model's main
/// thread exits last), so *thread* liveness is not tracked there: every thread rank counts as
/// exited for `purge_exited`. [`Rank`]s are tracked under loom too (their drop runs inside the
/// model).
#[cfg(ranklocal_loom)]
fn register_live(_id: u64) {}

#[cfg(not(ranklocal_loom))]
fn register_live(id: u64) {
    live_set().insert(id, Watchers::NEW);
    // A thread that gets its id while it is already being torn down cannot register a hook any
    // more: take it back out of LIVE right away, so it counts as exited (it is exiting).
    let hook = ExitHook {
        id,
        works: Vec::new(),
        prune_at: 4,
    };
    if EXIT_HOOK.try_with(|h| h.set(Some(hook))).is_err() {
        exit(id);
    } else {
        // The hook is registered: the rank stays live until it runs (I35).
        STATE.with(|s| s.alive.set(true));
    }
}

/// Loom only: makes the calling loom thread's own rank live with an exit hook, as a normal build
/// does at its first use (under loom thread liveness is not tracked, see [`register_live`]), so
/// that a model can run the owner-only path and the exit work (I39). Not public API.
#[cfg(ranklocal_loom)]
#[doc(hidden)]
pub fn __loom_register_thread() {
    let id = own_raw();
    live_set().insert(id, Watchers::NEW);
    let hook = ExitHook {
        id,
        works: Vec::new(),
        prune_at: 4,
    };
    EXIT_HOOK.with(|h| h.set(Some(hook)));
    STATE.with(|s| s.alive.set(true));
}

/// Loom only: runs the calling loom thread's exit hook now, as its thread-local destructors
/// would: the exit work, then the exit (I39). Not public API.
#[cfg(ranklocal_loom)]
#[doc(hidden)]
pub fn __loom_exit_thread() {
    drop(EXIT_HOOK.with(Cell::take));
}

/// Keeps in `ranks` only those that have exited. Takes [`LIVE`] for a few dozen ranks at a time,
/// so threads and `Rank`s starting or ending elsewhere wait for at most one chunk.
pub(crate) fn retain_exited(ranks: &mut Vec<u64>) {
    let mut out = Vec::with_capacity(ranks.len());
    for chunk in ranks.chunks(64) {
        let live = live_set();
        out.extend(chunk.iter().copied().filter(|r| !live.contains_key(r)));
    }
    *ranks = out;
}

#[cfg(all(test, not(ranklocal_loom)))]
mod tests {
    use super::*;

    #[test]
    fn own_id_assigned_inside_a_delegation_is_restored_as_current() {
        std::thread::spawn(|| {
            let other = std::thread::spawn(RankId::this_thread).join().unwrap();
            let prev = replace_current(other.as_u64());
            assert_eq!(prev, 0, "fresh thread has no rank yet");
            let own = own_raw(); // assigned while delegating
            assert_eq!(current_raw(), other.as_u64());
            assert!(!acting_as_self());
            restore_current(prev);
            assert_eq!(current_raw(), own);
            assert!(
                acting_as_self(),
                "own id assigned during delegation broke the fast path"
            );
        })
        .join()
        .unwrap();
    }

    /// A rank's watcher list drops closed inboxes when it prunes, and gives memory back once it
    /// holds far fewer than its capacity: a long-lived rank that outlived thousands of
    /// short-lived `RankLocal`s keeps a list the size of the live ones.
    #[test]
    fn watchers_drop_closed_inboxes_and_give_memory_back() {
        let n = if cfg!(miri) { 512 } else { 4_096 };
        let mut w = Watchers::NEW;
        let inboxes: Vec<_> = (0..n).map(|_| Inbox::new()).collect();
        for i in &inboxes {
            w.add(i);
        }
        assert!(w.inboxes.capacity() >= n);
        for i in &inboxes {
            i.close();
        }
        let live = Inbox::new();
        for _ in 0..n {
            w.add(&live); // repeated: deduplicated at each prune
        }
        assert!(w.inboxes.len() <= w.prune_at, "{} kept", w.inboxes.len());
        assert!(
            w.inboxes.capacity() <= 2 * w.prune_at,
            "capacity {} for {} entries",
            w.inboxes.capacity(),
            w.inboxes.len()
        );
    }
}
