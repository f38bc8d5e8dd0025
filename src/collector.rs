//! The crate's own crossbeam-epoch collector and [`pin`] (crossbeam-epoch's `default.rs` is the
//! model): every epoch pin the crate makes goes through here — the `Epoch` backend's readers and
//! writers, the pin `ArcSwap` takes around a lookup that must protect an instance, and
//! `RankLocal`'s scoped readers and sweeps on every backend (I18, I32, I33).
//!
//! # Why not crossbeam's default collector
//! Pinning or flushing may run deferred closures on the pinning thread; with the default collector
//! those include closures any other crate deferred, and one that first-touched a `RankLocal` would
//! run *inside* its writer, which holds the writer lock, and deadlock (found in review;
//! `tests/collector.rs`). This collector only ever runs the crate's own closures, which release a
//! version header or set a retired batch's token and run no user code (I18). A side effect: a
//! thread pinned forever on crossbeam's default collector (another crate's long-held guard) does
//! not stop this crate's reclamation.

use core::cell::{Cell, RefCell};
use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use crate::primitive::epoch::{Collector, Guard, LocalHandle};

use crate::primitive::{lazy_global, lock, tls, Arc, AtomicBool, Mutex, Ordering};

lazy_global! {
    /// The crate's own epoch collector: only this crate defers closures to it, and they run no
    /// user code (I18).
    static COLLECTOR: Collector = Collector::new();
}

tls! {
    /// This thread's handle on [`COLLECTOR`], registered on first use: only readers that must
    /// hold a pin (scoped reads of another rank, `for_each`, lookups of a thread that already
    /// registered) pin it, so a thread that only writes or reads its own rank never registers.
    static HANDLE: LocalHandle = {
        REGISTERED.with(|r| r.set(true));
        UNPINNED.with(|n| n.set(0)); // a registered thread's lookups pin
        COLLECTOR.register()
    };
}

tls! {
    /// `true` once this thread registered [`HANDLE`]: asking whether it is pinned, or flushing its
    /// bag, must not register a participant (a registration and the first pin's collect cost
    /// O(registered threads)). No destructor: readable at any time.
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// `true` once this thread has a participant of its own on the crate's collector.
#[inline]
pub(crate) fn registered() -> bool {
    REGISTERED.with(Cell::get)
}

/// Whether a lookup that need not stay pinned (one that escapes what it finds) should pin rather
/// than look the map up under a free writer lock: once the thread has a participant its pins are
/// cheap and keep the lookup lock-free; before, its first pin would register it, and crossbeam
/// walks every registered thread on a participant's first pin. A thread that keeps looking ranks
/// up without a participant pins after [`UNPINNED_LOOKUPS`] such lookups: its registration's walk
/// is then paid once against many lookups, and its misses go back to the lock-free path. Under
/// loom every thread counts as registered, so the models keep checking the pinned read path they
/// were written for (m22 checks the lookup under the writer lock).
#[inline]
pub(crate) fn prefers_pin() -> bool {
    cfg!(ranklocal_loom)
        || UNPINNED.with(|n| {
            // 0 once the thread registered, or spent its unpinned lookups
            let left = n.get();
            if left != 0 {
                n.set(left - 1);
            }
            left == 0
        })
}

/// How many lookups a thread without a participant makes under a free writer lock before it
/// pins (and registers) instead ([`prefers_pin`]).
const UNPINNED_LOOKUPS: u32 = 64;

tls! {
    /// The lookups this thread may still make without a participant ([`prefers_pin`]).
    static UNPINNED: Cell<u32> = const { Cell::new(UNPINNED_LOOKUPS) };
}

/// What the crate retires to its collector (I37): each runs no user code (I18).
pub(crate) enum Retired {
    /// Gives up a replaced `Epoch` version's epoch reference: `release(header)`.
    Version {
        release: unsafe fn(NonNull<()>),
        header: NonNull<()>,
    },
    /// Sets a sweep's batch token (I32).
    Token(Arc<AtomicBool>),
}

// SAFETY: a `Version` owns one reference to an immutable, counted header (I17), which any thread
// may give up; a `Token` is an `Arc` of an atomic.
unsafe impl Send for Retired {}

impl Retired {
    /// Runs it.
    ///
    /// # Safety
    /// Once, after every thread pinned when it was retired has unpinned (I37).
    unsafe fn run(self) {
        match self {
            // SAFETY: the retirer's contract: `release` gives up the reference this owns (I17).
            Retired::Version { release, header } => unsafe { release(header) },
            // Release: pairs with the Acquire in `take_ready` (I32).
            Retired::Token(t) => t.store(true, Ordering::Release),
        }
    }
}

/// The retiring participant: one crossbeam `Local` that every retirement of the crate — a
/// replaced `Epoch` version's epoch reference, a sweep's batch token — is deferred through, under
/// [`RETIRER`] (I37).
struct Retirer {
    #[cfg(not(ranklocal_loom))]
    handle: LocalHandle,
    /// Retired and not yet deferred, in order; at the flush all of them go to the collector as
    /// one deferred closure (one pin and one `defer` per flush, not per retirement). Deferring
    /// later than the retirement only waits for more readers, never fewer (I37). Under loom each
    /// is deferred at once, as before this batching: pending retirements would be dropped, not
    /// run, with the model's `RETIRER` (a leak loom reports), and the models keep checking the
    /// collector's own deferral of every retirement.
    pending: Vec<Retired>,
    /// Retirements since the last flush (`pending.len()` but under loom).
    unflushed: usize,
}

impl Retirer {
    /// Runs `f` with the retiring participant. Under loom, the calling thread's own: a
    /// participant kept in a loom `lazy_static` would be finalized after the model's threads,
    /// outside the model, in an order loom does not control, and registering one per use (tried)
    /// multiplied the models' executions twentyfold. So the models check every protocol around
    /// the deferral, and Miri and ThreadSanitizer, which run the real retiring participant, check
    /// its moves between threads.
    fn with<R>(&mut self, f: impl FnOnce(&LocalHandle) -> R) -> R {
        #[cfg(not(ranklocal_loom))]
        let r = f(&self.handle);
        #[cfg(ranklocal_loom)]
        let r = HANDLE.with(f);
        r
    }
}

// SAFETY: a crossbeam `Local` holds no thread identity (no thread-local, no thread id): it is a
// participant whose non-atomic fields may be used by one thread at a time. `RETIRER`'s mutex makes
// every use of this one exclusive and ordered (I37), and no `Guard` of it leaves the critical
// section; so moving it between threads is sound.
unsafe impl Send for Retirer {}

lazy_global! {
    /// The retiring participant (I37).
    static RETIRER: Mutex<Retirer> = Mutex::new(Retirer {
        #[cfg(not(ranklocal_loom))]
        handle: COLLECTOR.register(),
        pending: Vec::new(),
        unflushed: 0,
    });
}

impl Retirer {
    /// Defers everything pending as one closure and, if `flush`, hands the retiring
    /// participant's bag to the collector and tries to advance the epoch and run what is due
    /// (I37).
    fn hand_over(&mut self, flush: bool) {
        if flush {
            self.unflushed = 0;
        }
        let batch = if self.pending.is_empty() {
            Vec::new()
        } else {
            core::mem::replace(&mut self.pending, Vec::with_capacity(FLUSH_EVERY))
        };
        self.with(|h| {
            let guard = h.pin();
            if !batch.is_empty() {
                let run = move || {
                    for r in batch {
                        // SAFETY: each retirement runs once, here, after every thread pinned at
                        // this deferral — later than its retirement — has unpinned (I37).
                        unsafe { r.run() };
                    }
                };
                // SAFETY: what the closure touches stays valid until it runs (the retirers'
                // contract), it runs no user code (I18), and the retiring participant is used
                // only under `RETIRER` (I37).
                unsafe { guard.defer_unchecked(run) };
            }
            if flush {
                guard.flush();
            }
        });
    }
}

/// How many retirements may wait in the retiring participant's pending list before a flush hands
/// them to the collector. A flush moves the whole bag (2 KiB) into a new node of the collector's global queue
/// and walks every registered thread to advance the epoch: once per write, that was most of a
/// first touch's cost and, in services with many threads, most of the memory the collector held
/// (each popped node's free waits in the bag of whichever thread collected it). Batching bounds
/// what waits unflushed to this many replaced versions, process-wide.
const FLUSH_EVERY: usize = 16;

/// Whether [`retire`] hands the retiring participant's bag to the collector now.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Only once [`FLUSH_EVERY`] closures wait (a replaced version: its nodes wait a little).
    Batched,
    /// Now (a sweep's batch token: values are dropped promptly).
    Now,
}

/// Retires `r` through the retiring participant: the collector runs it once every thread pinned
/// now (on any participant) has unpinned (I37) — at the latest after the next flush, which comes
/// at once for [`Flush::Now`] and after at most [`FLUSH_EVERY`] retirements.
///
/// # Safety
/// As for crossbeam's `Guard::defer_unchecked`: whatever `r` touches stays valid until it runs,
/// and what it frees is reachable only by threads pinned now.
pub(crate) unsafe fn retire(r: Retired, flush: Flush) {
    let mut w = lock(&RETIRER);
    w.pending.push(r);
    w.unflushed += 1;
    let now = flush == Flush::Now || w.unflushed >= FLUSH_EVERY;
    if now || cfg!(ranklocal_loom) {
        w.hand_over(now);
    }
}

/// Retires a sweep's batch token (I32): the collector sets `done` (Release) once every thread
/// pinned now has unpinned, at once ([`Flush::Now`]), whoever swept (I37). Safe: the token owns
/// all it touches, frees nothing and runs no user code (I18).
pub(crate) fn retire_token(done: Arc<AtomicBool>) {
    // SAFETY: the token is an `Arc` it owns, and setting it frees nothing (I32, I37).
    unsafe { retire(Retired::Token(done), Flush::Now) };
}

/// Hands everything the writers deferred to the collector and tries to advance the epoch and run
/// what is due; also flushes this thread's own bag if it has one (what it holds — the frees of
/// queue nodes its pins collected — otherwise waits until it fills up or the thread exits).
pub(crate) fn flush() {
    flush_retirer();
    if registered() {
        let _ = HANDLE.try_with(|h| h.pin().flush());
    }
}

/// Hands everything the writers deferred to the collector and tries to advance the epoch and run
/// what is due, through the retiring participant only (a thread that only writes registers no
/// participant of its own, I37).
pub(crate) fn flush_retirer() {
    lock(&RETIRER).hand_over(true);
}

/// `true` while this thread holds a pin of the crate's collector (a scoped read that is not the
/// live owner's, a `for_each`, a lookup in progress, a held reader), also during thread teardown.
pub(crate) fn is_pinned() -> bool {
    (registered() && HANDLE.try_with(LocalHandle::is_pinned).unwrap_or(false))
        || COUNTED_PINS.with(Cell::get) > 0
}

tls! {
    /// Pins of this thread that [`is_pinned`] cannot ask its participant about: pins taken through
    /// a temporary participant, its own being gone (thread teardown), and held pins ([`pin_held`]),
    /// which may outlive its own (a reader kept in a thread-local that is destroyed after
    /// `HANDLE`). No destructor: readable at any time.
    static COUNTED_PINS: Cell<usize> = const { Cell::new(0) };
}

/// A pin of the crate's collector: a crossbeam `Guard` (which it derefs to), and for a pin taken
/// during thread teardown or held across calls the record [`is_pinned`] reads. Its drop runs the
/// work left for the end of the thread's outermost read ([`after_reads`]) once the thread holds no
/// pin any more.
pub(crate) struct Pin {
    /// Dropped first in `Pin`'s drop, so that the work after the outermost read runs unpinned.
    guard: ManuallyDrop<Guard>,
    /// Whether [`COUNTED_PINS`] (and [`HELD_PINS`]) count it.
    counted: Counted,
}

/// How a [`Pin`] is counted for [`is_pinned`]: one byte, so that a plain pin costs what it did.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// A pin of this thread's own participant, which answers [`is_pinned`] itself.
    No,
    /// A pin taken during thread teardown ([`COUNTED_PINS`]).
    Late,
    /// A pin held across calls, a reader's ([`COUNTED_PINS`] and [`HELD_PINS`]).
    Held,
}

impl core::ops::Deref for Pin {
    type Target = Guard;
    #[inline]
    fn deref(&self) -> &Guard {
        &self.guard
    }
}

impl Drop for Pin {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard is dropped once, here, and never used again: `self` is being dropped
        // and the field is not read after this line (I18).
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        // One load while there is nothing to do (the hit paths): a `Cell` without a destructor.
        if UNPIN_DUE.with(Cell::get) {
            after_unpin(self.counted);
        }
    }
}

tls! {
    /// `true` while a pin's drop has work: a counted pin is held ([`COUNTED_PINS`]),
    /// or [`AFTER`] holds work. No destructor: readable at any time.
    static UNPIN_DUE: Cell<bool> = const { Cell::new(false) };
}

/// A pin's drop when [`UNPIN_DUE`] is set: counts a counted pin's end, then runs the work queued for
/// the end of the outermost read if this was it (and the thread is not unwinding: a job may drop
/// values, whose panic would abort).
#[cold]
#[inline(never)]
fn after_unpin(counted: Counted) {
    if counted != Counted::No {
        COUNTED_PINS.with(|n| n.set(n.get() - 1));
    }
    if counted == Counted::Held {
        HELD_PINS.with(|n| n.set(n.get() - 1));
    }
    if !is_pinned() && !std::thread::panicking() {
        run_after_reads();
    }
    let due = COUNTED_PINS.with(Cell::get) > 0
        || AFTER.try_with(|a| !a.borrow().is_empty()).unwrap_or(false);
    let _ = UNPIN_DUE.try_with(|d| d.set(due));
}

/// Work left for the end of the thread's outermost read, each with the key [`after_reads`]
/// coalesces by.
type AfterReads = Vec<(usize, Box<dyn FnOnce()>)>;

tls! {
    /// Work to run once this thread holds no pin of the crate's collector ([`after_reads`]).
    static AFTER: RefCell<AfterReads> = const { RefCell::new(Vec::new()) };
}

/// Runs `job` on this thread once it holds no pin of the crate's collector: when the pin that
/// ends its outermost read (a `with_for`, a `for_each`, another rank's `with`) is dropped. If
/// the thread panics out of the read, or exits first, `job` is dropped unrun; the work it stands
/// for must then be reachable another way. A job whose `key` equals the last one queued is
/// dropped at once (it would do the same work). `job` must not unwind.
pub(crate) fn after_reads(key: usize, job: Box<dyn FnOnce()>) {
    let queued = AFTER.try_with(|a| {
        let mut a = a.borrow_mut();
        if a.last().map_or(true, |&(k, _)| k != key) {
            a.push((key, job));
        }
    });
    if queued.is_ok() {
        let _ = UNPIN_DUE.try_with(|d| d.set(true));
    }
}

/// The work [`after_reads`] queued, run by the drop of the thread's last pin.
fn run_after_reads() {
    let jobs = AFTER
        .try_with(|a| core::mem::take(&mut *a.borrow_mut()))
        .unwrap_or_default();
    for (_, job) in jobs {
        job(); // may pin, unpin and queue more: those run at the end of that unpin
    }
}

tls! {
    /// Pins of this thread's slow paths (for [`count_pin`]'s periodic flush).
    static PINS: Cell<u32> = const { Cell::new(0) };
}

/// How often [`count_pin`] hands this thread's bag to the collector: every this many counted pins.
const PINS_BETWEEN_FLUSHES: u32 = 128;

/// Pins this thread on the crate's collector (I18). During thread teardown, once `HANDLE` is gone,
/// a temporary handle is registered for the pin (as crossbeam's own `epoch::pin` does).
#[inline]
pub(crate) fn pin() -> Pin {
    crate::counters::bump!(PINS);
    match HANDLE.try_with(LocalHandle::pin) {
        Ok(guard) => Pin {
            guard: ManuallyDrop::new(guard),
            counted: Counted::No,
        },
        Err(_) => late_pin(),
    }
}

/// [`pin`] during thread teardown, once `HANDLE` is gone.
#[cold]
fn late_pin() -> Pin {
    COUNTED_PINS.with(|n| n.set(n.get() + 1));
    UNPIN_DUE.with(|d| d.set(true)); // its drop counts it down
    Pin {
        guard: ManuallyDrop::new(COLLECTOR.register().pin()),
        counted: Counted::Late,
    }
}

/// A pin held across calls (a reader's): [`is_pinned`] counts it for as long as it lives, even
/// once this thread's participant is gone (a reader kept in a thread-local destroyed after it:
/// a `reclaim_exited_blocking` there must still see that it would wait for its own thread).
pub(crate) fn pin_held() -> Pin {
    let mut pin = pin();
    if pin.counted == Counted::No {
        COUNTED_PINS.with(|n| n.set(n.get() + 1));
        UNPIN_DUE.with(|d| d.set(true)); // its drop counts it down
    }
    HELD_PINS.with(|n| n.set(n.get() + 1));
    pin.counted = Counted::Held;
    pin
}

tls! {
    /// Held pins ([`pin_held`], a reader's) this thread has alive. No destructor: readable at
    /// any time.
    static HELD_PINS: Cell<usize> = const { Cell::new(0) };
}

/// `true` while this thread holds a pin across calls (a reader's): work left for the end of its
/// outermost read would then run at the reader's drop, outside every call of the code that left
/// it, so a sweep leaves what it found ready queued instead (I32).
pub(crate) fn holds_reader() -> bool {
    HELD_PINS.with(Cell::get) > 0
}

/// Counts a pin a slow path made (a first touch, a scoped lookup that missed the thread cache, a
/// visit), and every [`PINS_BETWEEN_FLUSHES`] of them flushes this thread's bag through `guard`.
/// The crate defers nothing to threads' own participants (I37), but crossbeam does: a node of its
/// global queue that a thread's pin pops is freed through that thread's bag, which otherwise
/// waits until it holds 64 (128 KiB of queue nodes) or the thread exits — in a service with a
/// hundred mostly idle threads acting for requests, that was most of what the collector held.
/// (Not on the hit paths: the counter alone costs a lookup a tenth more instructions.)
#[inline]
pub(crate) fn count_pin(guard: &Guard) {
    let n = PINS.try_with(|p| {
        let n = p.get().wrapping_add(1);
        p.set(n);
        n
    });
    if n.map_or(false, |n| n % PINS_BETWEEN_FLUSHES == 0) {
        flush_own(guard);
    }
}

/// [`count_pin`]'s periodic flush, out of line.
#[cold]
#[inline(never)]
fn flush_own(guard: &Guard) {
    crate::counters::bump!(OWN_FLUSHES);
    guard.flush();
}
