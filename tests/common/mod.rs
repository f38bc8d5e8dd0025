//! What the test binaries share (papaya's `tests/common.rs` pattern): the one macro that stamps a
//! generic test over every backend, and the helpers several files need. Each binary includes it
//! with `mod common;`.
//!
//! Every binary compiles this whole module but uses only some of it, so unused helpers are allowed
//! here (and only here; the macro and its re-export carry their own `allow`s):
#![allow(dead_code)]

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use ranklocal::{Backend, Rank, RankId, RankLocal};

/// Stamps each generic `fn name<B: Backend>()` named in it over the three backends, as
/// `mod epoch { #[test] fn name() }`, `mod arc_swap { .. }` and `mod baseline { .. }` (arc-swap's
/// `tests/stress.rs` pattern). Attributes written before a name go on each of its three tests:
///
/// ```ignore
/// common::backend_tests! {
///     s1_threads_see_distinct_instances,
///     #[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
///     async_every_poll_runs_as_the_rank,
/// }
/// ```
#[allow(unused_macros)] // as the helpers below: not every binary stamps
macro_rules! backend_tests {
    // Under Miri the `Baseline` stamp runs only in the files that open with `miri_every_backend;`
    // (tests/README.md names them and says why): elsewhere it is ignored there.
    (miri_every_backend; $($(#[$attr:meta])* $name:ident),* $(,)?) => {
        $crate::common::backend_tests!(@module epoch, ranklocal::Epoch; $($(#[$attr])* $name),*);
        $crate::common::backend_tests!(@module arc_swap, ranklocal::ArcSwap; $($(#[$attr])* $name),*);
        $crate::common::backend_tests!(@module baseline, ranklocal::Baseline; $($(#[$attr])* $name),*);
    };
    ($($(#[$attr:meta])* $name:ident),* $(,)?) => {
        $crate::common::backend_tests!(@module epoch, ranklocal::Epoch; $($(#[$attr])* $name),*);
        $crate::common::backend_tests!(@module arc_swap, ranklocal::ArcSwap; $($(#[$attr])* $name),*);
        $crate::common::backend_tests!(
            @module baseline, ranklocal::Baseline;
            $(
                #[cfg_attr(
                    miri,
                    ignore = "Baseline under Miri runs in the semantics, drops, reader and teardown suites only (tests/README.md)"
                )]
                $(#[$attr])* $name
            ),*
        );
    };
    (@module $module:ident, $backend:ty; $($(#[$attr:meta])* $name:ident),*) => {
        mod $module {
            $(
                #[test]
                $(#[$attr])*
                fn $name() {
                    super::$name::<$backend>();
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use backend_tests;

/// The module `backend_tests!` puts `B`'s tests in (`epoch`, `arc_swap`, `baseline`): for a test
/// that re-runs itself in a child process and must name its own path.
pub fn backend_module<B: Backend>() -> &'static str {
    match B::NAME {
        "epoch" => "epoch",
        "arc-swap" => "arc_swap",
        "baseline" => "baseline",
        other => panic!("unknown backend {other}"),
    }
}

/// Runs `body` as the only test of a child process (this binary again, `--exact` and one test
/// thread), so that no other test's pins, flushes or reclamation calls do its work for it: for a
/// test of what the crate does *by itself*. `test` is the test function's name; `body` runs in
/// the child (and in-process under Miri, which cannot spawn a process).
pub fn alone<B: Backend>(test: &str, body: impl FnOnce()) {
    const CHILD: &str = "RANKLOCAL_ALONE_CHILD";
    if std::env::var_os(CHILD).is_some() || cfg!(miri) {
        return body();
    }
    let name = format!("{}::{test}", backend_module::<B>());
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name}, run alone in a child process, failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

// ---------------------------------------------------------------------------------------------
// Waiting

/// A deadlock guard, not a timing assertion: generous enough for any machine.
pub const DEADLOCK: Duration = Duration::from_secs(60);

/// Runs `step` until `done()` holds, for up to 30 s, and returns whether it does. Epoch grace
/// periods wait for every thread pinned on the crate's collector, and under TSan, Miri or a loaded
/// 2-core machine the other tests of a binary pin it often. `done` is checked first; between steps
/// it yields, after 1,000 rounds it sleeps 1 ms.
pub fn patiently(done: impl Fn() -> bool, mut step: impl FnMut()) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut round = 0u32;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        step();
        round += 1;
        if round < 1000 {
            thread::yield_now();
        } else {
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Sweeps a test makes inside `f` to catch a drop of the instance lent to `f` (a bug). Natively
/// other tests' pins may delay the grace period that would expose it, so sweep a while; under
/// Miri tests run one at a time and nothing else is pinned, so a few sweeps suffice.
pub const SWEEPS_WHILE_LENT: usize = if cfg!(miri) { 20 } else { 1000 };

/// Calls `reclaim_exited` until `drops` reaches `want` (the epoch may need other test threads to
/// unpin first), then asserts it is exactly `want`; panics if it never gets there.
pub fn reclaim_until<T: Send, B: Backend>(rl: &RankLocal<T, B>, drops: &AtomicUsize, want: usize) {
    patiently(
        || drops.load(Ordering::SeqCst) >= want,
        || {
            rl.reclaim_exited();
        },
    );
    assert_eq!(drops.load(Ordering::SeqCst), want, "never reclaimed");
}

/// Runs `f` on a fresh thread, failing the test if it does not finish within [`DEADLOCK`].
pub fn within_deadline<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(DEADLOCK) {
        Ok(Ok(r)) => r,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("deadlock: the operation did not finish within {DEADLOCK:?}"),
    }
}

/// A thread of this process as the kernel sees it (Linux's `/proc`), for a test that needs another
/// thread to have reached a blocking wait inside the crate — a state no result of the crate's API
/// shows: which system call the thread is blocked in, and on what. Made on the thread itself
/// ([`Blocked::this_thread`]), read from any. Tests that use it are ignored where it does not
/// exist (under Miri, off Linux).
pub struct Blocked {
    /// `/proc/<pid>/task/<tid>`.
    task: std::path::PathBuf,
}

/// System call numbers (`/proc/<tid>/syscall` gives the number).
#[cfg(target_arch = "x86_64")]
const SYS_FUTEX_AND_SLEEPS: [u64; 3] = [202, 35, 230]; // futex, nanosleep, clock_nanosleep
#[cfg(target_arch = "aarch64")]
const SYS_FUTEX_AND_SLEEPS: [u64; 3] = [98, 101, 115];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const SYS_FUTEX_AND_SLEEPS: [u64; 3] = [u64::MAX; 3];

impl Blocked {
    /// The calling thread.
    pub fn this_thread() -> Blocked {
        let tid = std::fs::read_link("/proc/thread-self").expect("Linux /proc/thread-self");
        Blocked {
            task: std::path::Path::new("/proc").join(tid),
        }
    }

    /// The system call the thread is blocked in, with its first two arguments; `None` while it
    /// runs in user space.
    fn syscall(&self) -> Option<(u64, [u64; 2])> {
        let line = std::fs::read_to_string(self.task.join("syscall")).ok()?;
        let mut fields = line.split_whitespace();
        let nr: i64 = fields.next()?.parse().ok()?; // "running" or -1: not in a system call
        let mut arg = || u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok();
        let args = [arg()?, arg()?];
        u64::try_from(nr).ok().map(|nr| (nr, args))
    }

    /// Whether the thread waits on a futex that lives in `bytes`: a std `Mutex` or `Condvar` in
    /// that memory (on Linux both are a futex word held inline).
    pub fn in_futex_wait_within(&self, bytes: std::ops::Range<usize>) -> bool {
        matches!(self.syscall(), Some((nr, [addr, _])) if nr == SYS_FUTEX_AND_SLEEPS[0]
            && bytes.contains(&(addr as usize)))
    }

    /// Whether the thread waits on any futex (a std `Mutex` or `Condvar` wherever it lives: for a
    /// wait inside the crate on memory a test cannot name).
    /// Only a wait counts (`FUTEX_WAIT`, `FUTEX_WAIT_BITSET`): a thread seen waking another is in
    /// the same system call.
    pub fn in_futex_wait(&self) -> bool {
        matches!(self.syscall(), Some((nr, [_, op])) if nr == SYS_FUTEX_AND_SLEEPS[0]
            && matches!(op & 0x7f, 0 | 9))
    }

    /// Whether the thread is in `thread::sleep`.
    pub fn in_sleep(&self) -> bool {
        matches!(self.syscall(), Some((nr, _)) if SYS_FUTEX_AND_SLEEPS[1..].contains(&nr))
    }
}

/// The memory `t` occupies.
pub fn bytes_of<T>(t: &T) -> std::ops::Range<usize> {
    let start = t as *const T as usize;
    start..start + std::mem::size_of::<T>()
}

/// The message of a panic payload (`&str` or `String`), or `"<non-string payload>"`.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "<non-string payload>".to_string())
}

// ---------------------------------------------------------------------------------------------
// Ranks

/// The address of a reference: instances are compared by where they live.
pub fn addr<T>(r: &T) -> usize {
    r as *const T as usize
}

/// The rank of a thread that has exited (a rank id stays valid for delegation).
pub fn exited_thread_rank() -> RankId {
    thread::spawn(RankId::this_thread).join().unwrap()
}

/// `n` ranks of threads that have exited.
pub fn exited_thread_ranks(n: usize) -> Vec<RankId> {
    (0..n).map(|_| exited_thread_rank()).collect()
}

/// Drops `n` fresh `Rank`s: after enough exits, the next first touch of a `RankLocal` runs its
/// amortized sweep of exited ranks.
pub fn exit_ranks(n: usize) {
    for _ in 0..n {
        drop(Rank::new());
    }
}

/// Spawns a thread that reports its rank and then parks until `release` is dropped or sent.
pub fn parked_rank() -> (RankId, mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (rank_tx, rank_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let h = thread::spawn(move || {
        rank_tx.send(RankId::this_thread()).unwrap();
        let _ = release_rx.recv();
    });
    (rank_rx.recv().unwrap(), release_tx, h)
}

// ---------------------------------------------------------------------------------------------
// Probes

/// Moves `t` to the heap for the rest of the process.
pub fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

/// A fresh drop counter that lives for the rest of the process (for `'static` values).
pub fn counter() -> &'static AtomicUsize {
    leak(AtomicUsize::new(0))
}

/// Counts its drops in the counter it was made with. Its value lives in its own heap allocation,
/// so reading it after the instance was freed is a use after free that Miri reports.
///
/// No `Default` on purpose (nor on [`Bomb`]): a first touch names its counter where it happens,
/// `rl.with_or(|| Counted::new(drops), f)` (`with` is `with_or(T::default, f)`), instead of a
/// per-thread setting made elsewhere that a `Default` impl would read.
pub struct Counted<'a> {
    pub drops: &'a AtomicUsize,
    heap: Box<u64>,
}

impl<'a> Counted<'a> {
    pub fn new(drops: &'a AtomicUsize) -> Self {
        Counted {
            drops,
            heap: Box::new(0),
        }
    }

    /// Its value (always 0), read through its heap allocation.
    pub fn value(&self) -> u64 {
        *self.heap
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// A scoped first touch of `rl` for the current rank whose instance counts its drops in `drops`.
pub fn touch_scoped<B: Backend>(rl: &RankLocal<Counted<'static>, B>, drops: &'static AtomicUsize) {
    rl.with_or(|| Counted::new(drops), |_| ());
}

/// Counts its drops like [`Counted`]; once armed it panics in `drop` (after counting).
pub struct Bomb<'a> {
    drops: &'a AtomicUsize,
    pub armed: AtomicBool,
}

impl<'a> Bomb<'a> {
    pub fn new(drops: &'a AtomicUsize, armed: bool) -> Self {
        Bomb {
            drops,
            armed: AtomicBool::new(armed),
        }
    }
}

impl Drop for Bomb<'_> {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        if self.armed.load(Ordering::SeqCst) {
            panic!("Bomb::drop panics on purpose");
        }
    }
}

/// An instance that knows whose it is.
pub struct Slot {
    pub rank: RankId,
    pub hits: AtomicUsize,
}

/// A [`Slot`] for the current rank, with no hits.
pub fn slot() -> Slot {
    Slot {
        rank: RankId::current(),
        hits: AtomicUsize::new(0),
    }
}

/// Records the rank current when it is dropped.
pub struct DropsAs(pub Arc<Mutex<Vec<RankId>>>);

impl Drop for DropsAs {
    fn drop(&mut self) {
        self.0.lock().unwrap().push(RankId::current());
    }
}

// ---------------------------------------------------------------------------------------------
// Futures

/// A waker that does nothing (std's `Waker::noop` needs Rust 1.85).
pub fn noop_waker() -> Waker {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    Waker::from(Arc::new(Noop))
}

/// Polls `f` to completion on this thread with a no-op waker.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut f = Box::pin(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A future that returns `Pending` once (waking its waker), then `Ready`.
pub struct YieldOnce(pub bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Polls `fut` once on a fresh thread (a scoped one: `fut` may borrow).
pub fn poll_on_a_new_thread<F: Future + Send>(fut: Pin<&mut F>) -> Poll<F::Output>
where
    F::Output: Send,
{
    thread::scope(|s| {
        s.spawn(|| fut.poll(&mut Context::from_waker(&noop_waker())))
            .join()
            .unwrap()
    })
}
