//! Access while a thread exits: from thread-local destructors that run before or after the
//! thread's exit hook (spec semantic 8), it works or panics clearly, never undefined behaviour;
//! after the crate's collector handle is gone too, a pinned read and `reclaim_exited` work and
//! `reclaim_exited_blocking` inside the read panics as it does on a live thread.
//!
//! Its own binary, whose tests run one at a time (`serial`): `s8_` re-runs itself in a child
//! process, and the first touch from a late destructor must not share the collector with other
//! tests' pins, which would delay the grace period that exposes its bug.

mod common;

use std::cell::RefCell;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering, Ordering::SeqCst};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::thread;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::{
    backend_module, counter, exit_ranks, leak, panic_message, Counted, DEADLOCK, SWEEPS_WHILE_LENT,
};
use ranklocal::{on_behalf_of, rank_local, Backend, Rank, RankId, RankLocal};

common::backend_tests! {
    miri_every_backend;
    s8_access_from_a_thread_local_destructor_is_defined,
    access_from_tls_destructors_after_the_exit_hook,
    a_first_touch_from_a_tls_destructor_after_the_exit_hook_outlives_f,
    a_pinned_read_and_reclaim_from_a_late_tls_destructor_return,
    blocking_reclaim_inside_with_for_in_a_late_tls_destructor_panics,
}

/// Runs this binary's tests one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Spec semantic 8, in a child process

rank_local! {
    static STATIC: AtomicUsize = AtomicUsize::new(0);
}

/// What `TouchOnDrop` touches: a `'static` `RankLocal<AtomicUsize, B>` of any backend.
trait Object: Sync {
    /// `get`, then add one; returns the new count.
    fn count(&self) -> usize;
    fn has_own(&self) -> bool;
    fn has(&self, rank: RankId) -> bool;
}

impl<B: Backend> Object for RankLocal<AtomicUsize, B> {
    fn count(&self) -> usize {
        self.get().fetch_add(1, Ordering::SeqCst) + 1
    }
    fn has_own(&self) -> bool {
        self.try_get().is_some()
    }
    fn has(&self, rank: RankId) -> bool {
        self.get_for(rank).is_some()
    }
}

/// Touches everything the crate offers from inside a destructor, reporting what it saw.
struct TouchOnDrop {
    object: &'static dyn Object,
    report: Option<mpsc::Sender<(RankId, usize, usize, bool)>>,
    delegate_to: Option<RankId>,
}

impl Drop for TouchOnDrop {
    fn drop(&mut self) {
        let me = RankId::this_thread();
        let a = self.object.count();
        let b = STATIC.get().fetch_add(1, Ordering::SeqCst) + 1;
        let mut ok = RankId::current() == me && self.object.has_own();
        if let Some(r) = self.delegate_to {
            ok &= on_behalf_of(r, || RankId::current() == r && self.object.has(r));
        }
        if let Some(tx) = self.report.take() {
            let _ = tx.send((me, a, b, ok));
        }
    }
}

std::thread_local! {
    static EARLY: std::cell::RefCell<Option<TouchOnDrop>> = const { std::cell::RefCell::new(None) };
    static LATE: std::cell::RefCell<Option<TouchOnDrop>> = const { std::cell::RefCell::new(None) };
}

fn child<B: Backend>() {
    let object: &'static RankLocal<AtomicUsize, B> = leak(RankLocal::new());
    let main_rank = RankId::current();
    object.get();
    let (tx, rx) = mpsc::channel();
    let mut handles = Vec::new();
    for variant in 0..3 {
        let tx = tx.clone();
        handles.push(std::thread::spawn(move || {
            let guard = TouchOnDrop {
                object,
                report: Some(tx),
                delegate_to: Some(main_rank),
            };
            match variant {
                // destructor registered before the thread has any rank or crate state
                0 => EARLY.with(|e| *e.borrow_mut() = Some(guard)),
                // registered after the thread used the crate (its own destructors come first)
                1 => {
                    object.get();
                    STATIC.get();
                    on_behalf_of(main_rank, || object.get());
                    LATE.with(|e| *e.borrow_mut() = Some(guard));
                }
                // both orders at once
                _ => {
                    EARLY.with(|e| *e.borrow_mut() = Some(guard));
                    object.get();
                    LATE.with(|e| {
                        *e.borrow_mut() = Some(TouchOnDrop {
                            object,
                            report: None,
                            delegate_to: None,
                        })
                    });
                }
            }
        }));
    }
    drop(tx);
    for h in handles {
        h.join().unwrap();
    }
    let reports: Vec<_> = rx.iter().collect();
    assert_eq!(reports.len(), 3);
    for (rank, a, b, ok) in reports {
        assert!(ok, "{rank}: wrong rank or instance during teardown");
        assert!(a >= 1 && b >= 1);
    }
    println!("child ok");
}

/// Spec semantic 8: a `RankLocal` and a `rank_local!` static used (own rank and delegated) from
/// thread-local destructors registered before the thread had any crate state, after it used the
/// crate, and both. Runs in a child process (this binary again, with `--exact`) so that an abort
/// is seen as a failure of this test rather than of the whole test binary; under Miri, which
/// cannot spawn a process, the body runs in-process.
fn s8_access_from_a_thread_local_destructor_is_defined<B: Backend>() {
    if std::env::var_os("RANKLOCAL_TEARDOWN_CHILD").is_some() {
        return child::<B>();
    }
    let _serial = serial();
    if cfg!(miri) {
        // Miri cannot spawn a process; run the body in-process instead.
        return child::<B>();
    }
    let name = format!(
        "{}::s8_access_from_a_thread_local_destructor_is_defined",
        backend_module::<B>()
    );
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env("RANKLOCAL_TEARDOWN_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("child ok"),
        "child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

// ---------------------------------------------------------------------------------------------
// Scoped access after the exit hook

/// Drops counted through a `'static` counter (for leaked statics and TLS destructors).
static STATIC_DROPS: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];

#[derive(Default)]
struct StaticCounted(usize);
impl Drop for StaticCounted {
    fn drop(&mut self) {
        STATIC_DROPS[self.0].fetch_add(1, Ordering::SeqCst);
    }
}

/// Scoped access from a thread-local destructor that runs after the thread's exit hook takes the
/// pinned path, never a stale owner entry, and the instance it may re-create is reclaimed.
fn access_from_tls_destructors_after_the_exit_hook<B: Backend>() {
    let _serial = serial();
    let rl: &'static RankLocal<StaticCounted, B> = leak(RankLocal::new());
    let idx = match B::NAME {
        "epoch" => 0,
        "arc-swap" | "arc_swap" | "arcswap" => 1,
        _ => 2,
    };
    struct Late<B: Backend>(&'static RankLocal<StaticCounted, B>, usize);
    impl<B: Backend> Drop for Late<B> {
        fn drop(&mut self) {
            // runs after the exit hook (registered later, destructors run in reverse order):
            // the pinned path, never a stale owner entry
            let me = RankId::this_thread();
            let a = self.0.with(|v| v as *const StaticCounted as usize);
            let b = self.0.with_for(me, |v| v as *const StaticCounted as usize);
            assert!(b.is_none() || b == Some(a));
            self.0.with(|v| assert!(v.0 == 0 || v.0 == self.1));
        }
    }
    thread_local! {
        static LATE: RefCell<Option<Box<dyn std::any::Any>>> = const { RefCell::new(None) };
    }
    let h = thread::spawn(move || {
        LATE.with(|l| *l.borrow_mut() = Some(Box::new(Late::<B>(rl, idx))));
        rl.with(|_| ()); // the thread's id and exit hook come after LATE's registration
        rl.with(|_| ()); // owner entry filled
    });
    h.join().unwrap(); // `join` waits for the thread's destructors
    rl.reclaim_exited();
    assert_eq!(
        rl.len(),
        0,
        "the thread's instance (maybe re-created by `Late`) was reclaimed"
    );
    let _ = &STATIC_DROPS[idx]; // drops of `StaticCounted::default()` land in slot 0
}

/// What `Late` touches: a `'static` `RankLocal<Counted, B>` of any backend.
trait Scoped: Sync {
    /// A scoped touch whose first touch counts its value's drops in `drops`.
    fn with_dyn(&self, drops: &'static AtomicUsize, f: &mut dyn FnMut());
    fn reclaim_exited(&self);
}

impl<B: Backend> Scoped for RankLocal<Counted<'static>, B> {
    fn with_dyn(&self, drops: &'static AtomicUsize, f: &mut dyn FnMut()) {
        self.with_or(|| Counted::new(drops), |_| f());
    }
    fn reclaim_exited(&self) {
        RankLocal::reclaim_exited(self);
    }
}

/// Makes the first scoped touch of `rl` for its thread's rank from a thread-local destructor that
/// runs after the thread's exit hook: the rank has exited, so the touch's own amortized sweep
/// retires the instance it is about to lend to `f`. Inside `f` it sweeps a while and records in
/// `outcome` whether the lent instance was dropped meanwhile.
struct Late {
    rl: &'static dyn Scoped,
    drops: &'static AtomicUsize,
    /// 0: not run, 1: f ran and its instance was not dropped during f, 2: it was.
    outcome: &'static AtomicUsize,
}

impl Drop for Late {
    fn drop(&mut self) {
        let (rl, drops, outcome) = (self.rl, self.drops, self.outcome);
        rl.with_dyn(drops, &mut || {
            let before = drops.load(SeqCst);
            // other threads' pins may delay the grace period: sweep a while
            for _ in 0..SWEEPS_WHILE_LENT {
                rl.reclaim_exited();
                if drops.load(SeqCst) != before {
                    break;
                }
                std::thread::yield_now();
            }
            let dropped = drops.load(SeqCst) != before;
            outcome.store(if dropped { 2 } else { 1 }, SeqCst);
        });
    }
}

std::thread_local! {
    static LATE_FIRST_TOUCH: RefCell<Option<Late>> = const { RefCell::new(None) };
}

/// A thread-local destructor that runs after the exit hook makes the thread's (now exited) rank's
/// first scoped touch, whose own sweep retires the instance it lends to `f`: `f` must still have
/// it.
///
/// Found in review 3 (adversarial): the root cause of `sweeps.rs`'s
/// `a_scoped_first_touch_of_an_exited_rank_outlives_f` (the insert pinned only after its sweep's
/// deferral), reached from the issue's own case "access from TLS destructors". Fixed with it (the
/// insert pins first); failed before.
fn a_first_touch_from_a_tls_destructor_after_the_exit_hook_outlives_f<B: Backend>() {
    let _serial = serial();
    let rl: &'static RankLocal<Counted<'static>, B> = leak(RankLocal::new());
    let (drops, outcome) = (counter(), counter());
    exit_ranks(20); // the amortized sweep is due on rl's first insert
    thread::spawn(move || {
        LATE_FIRST_TOUCH.with(|l| *l.borrow_mut() = Some(Late { rl, drops, outcome }));
        let _ = RankId::this_thread(); // id and exit hook registered after LATE_FIRST_TOUCH
    })
    .join()
    .unwrap();
    assert_eq!(
        outcome.load(SeqCst),
        1,
        "the instance lent to f in a TLS destructor was dropped while f borrowed it (2) or f never ran (0)"
    );
}

// ---------------------------------------------------------------------------------------------
// Pinned reads from a thread-local destructor that runs after the crate's own

/// Runs a closure when the thread's thread-locals are destroyed.
struct AtExit(RefCell<Option<Box<dyn FnOnce()>>>);

impl Drop for AtExit {
    fn drop(&mut self) {
        if let Some(f) = self.0.borrow_mut().take() {
            f();
        }
    }
}

std::thread_local! {
    static AT_EXIT: AtExit = const { AtExit(RefCell::new(None)) };
}

/// A live rank with a scoped value in `rl`, and an exited one's scoped value for a reclamation
/// to retire. Returns the live rank's id (the rank is leaked: it stays live).
fn live_and_exited_scoped_values<B: Backend>(rl: &RankLocal<u64, B>) -> RankId {
    let live = leak(Rank::new()).id();
    on_behalf_of(live, || rl.with(|_| ()));
    let gone = Rank::new();
    on_behalf_of(gone.id(), || rl.with(|_| ()));
    drop(gone);
    live
}

/// Runs `at_exit`, on a fresh thread, in a thread-local destructor that runs after the crate's
/// own (the exit hook and the collector handle): registered before the thread first uses the
/// crate, it is destroyed after them.
fn in_a_late_tls_destructor<B: Backend>(
    rl: &'static RankLocal<u64, B>,
    live: RankId,
    at_exit: impl FnOnce() + 'static + Send,
) {
    thread::spawn(move || {
        AT_EXIT.with(|a| *a.0.borrow_mut() = Some(Box::new(at_exit)));
        // now the crate's thread-locals: the exit hook and the collector handle (a pinned read)
        assert_eq!(rl.with_for(live, |v| *v), Some(0));
    });
}

/// A pinned read (`with_for`) in a thread-local destructor that runs after the crate's own, its
/// collector handle gone, works through a temporary handle, and so does a `reclaim_exited`
/// inside it.
///
/// Found in review 5 (adversarial), as the control of
/// `blocking_reclaim_inside_with_for_in_a_late_tls_destructor_panics`: withstood.
fn a_pinned_read_and_reclaim_from_a_late_tls_destructor_return<B: Backend>() {
    let _serial = serial();
    let rl: &'static RankLocal<u64, B> = leak(RankLocal::new());
    let live = live_and_exited_scoped_values(rl);
    let (tx, rx) = mpsc::channel::<Option<u64>>();
    in_a_late_tls_destructor(rl, live, move || {
        let v = rl.with_for(live, |v| {
            rl.reclaim_exited();
            *v
        });
        let _ = tx.send(v);
    });
    assert_eq!(rx.recv_timeout(DEADLOCK), Ok(Some(0)));
}

/// `reclaim_exited_blocking` inside a pinned read (`with_for`) in a thread-local destructor that
/// runs after the crate's own panics with its "called inside a scoped read" message, as it does
/// on a live thread, instead of waiting for its own pin; once that read has ended, the same call
/// returns (a late pin that was never uncounted made it panic there too: a mutant survived).
///
/// Found in review 5 (adversarial). Before the fix, the "is this thread pinned?" check asked the
/// thread's collector handle, which answered "no" once destroyed although the read was pinned
/// through a temporary handle, so the call waited for its own pin forever (and the thread never
/// exited).
fn blocking_reclaim_inside_with_for_in_a_late_tls_destructor_panics<B: Backend>() {
    let _serial = serial();
    let rl: &'static RankLocal<u64, B> = leak(RankLocal::new());
    let live = live_and_exited_scoped_values(rl); // the exited one's value: something to wait for
    let (tx, rx) = mpsc::channel::<(Result<(), String>, Result<(), String>)>();
    in_a_late_tls_destructor(rl, live, move || {
        let inside = catch_unwind(AssertUnwindSafe(|| {
            rl.with_for(live, |_| rl.reclaim_exited_blocking());
        }));
        // once the read has ended, the same call is allowed again and returns
        let after = catch_unwind(AssertUnwindSafe(|| {
            rl.reclaim_exited_blocking();
        }));
        let msg = |r: std::thread::Result<()>| r.map_err(|p| panic_message(&*p));
        let _ = tx.send((msg(inside), msg(after)));
    });
    match rx.recv_timeout(DEADLOCK) {
        Ok((_, Err(msg))) => panic!("reclaim_exited_blocking after the read ended panicked: {msg}"),
        Ok((Err(msg), Ok(()))) => assert!(
            msg.contains("reclaim_exited_blocking called inside a scoped read"),
            "unclear message: {msg}"
        ),
        Ok((Ok(()), Ok(()))) => {
            panic!("reclaim_exited_blocking inside with_for returned instead of panicking")
        }
        Err(_) => panic!(
            "hang: reclaim_exited_blocking inside with_for in a late thread-local destructor \
             waits for its own pin"
        ),
    }
}
