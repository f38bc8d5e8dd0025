//! `ranklocal` against what a Rust user would write instead of it for "per-thread state that
//! another thread can look up by rank id" (issue 18): std `RwLock<HashMap>`, dashmap 6, scc 3
//! (`HashIndex`, `HashMap`), papaya 0.2 and the `thread_local` crate 1.1.
//!
//! ```text
//! cargo run --release -p ranklocal-peers --example peers              # ~1 min
//! cargo run --release -p ranklocal-peers --example peers -- --quick   # a few seconds
//! cargo run --release -p ranklocal-peers --example peers -- --help
//! cargo run --release -p ranklocal-peers --example peers -- --only-case fresh-thread --threads 1,2,4,8,16
//! ```
//!
//! Its own package (`benches/peers/Cargo.toml`), so its build holds only the crates it measures:
//! no criterion, serde or regex.
//!
//! Every map arm uses the same one-multiply hasher (`MulHasher` of `arms.rs`, as `compare` and
//! the criterion suite) and boxed values (`Box<u64>`, as `arms.rs`: a value at a stable address,
//! as a `RankLocal` instance is). All arms run in one process, in interleaved rounds (arm A, arm
//! B, ..., the order rotated each round), and every timed loop checks the exact sum of what it
//! read, so nothing is optimized away. A counting global allocator gives the heap figures.
//!
//! Cases, in the order they run: 1. first touch by rank id (a get-or-insert of a new key into a
//! structure holding N); 2. lookups by id that miss `ranklocal`'s thread cache; 3. iteration
//! over 64 values; 4. first touch on a fresh thread while N-1 other threads that touched the
//! structure are alive; 5. heap per rank and per live thread. See `--help`.
//!
//! One arm and one case, a fixed number of operations and no timing (for callgrind: instructions
//! per operation = (Ir(2N) - Ir(N)) / N, so setup cancels out; `benches/peers_callgrind.sh`):
//!
//! ```text
//! valgrind --tool=callgrind target/release/examples/peers --only epoch --only-case touch-id --ops 1000
//! ```
//! Its package is a member of the workspace but not of the published library, so these peers add
//! nothing to the build of `cargo run --release --example compare` or of the library.

#[path = "arms.rs"]
mod arms;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use arms::MulHasher;
use ranklocal::{on_behalf_of, ArcSwap, Backend, Baseline, Epoch, Rank, RankId, RankLocal};

// ---- counting allocator (case 4) -------------------------------------------------------------

/// The system allocator, counting live bytes (requested sizes) while [`COUNTING`] is on. Off, it
/// costs one relaxed load per call, so the timed cases are not slowed by a shared counter.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

fn count(delta: isize) {
    if COUNTING.load(Ordering::Relaxed) {
        LIVE_BYTES.fetch_add(delta, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` with the caller's arguments unchanged; the
// counting touches only two atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (every allocation goes through it) with
        // `layout`, as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`; `new_size` satisfies `realloc`'s contract per the caller.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Live bytes counted since counting began.
fn live() -> isize {
    LIVE_BYTES.load(Ordering::SeqCst)
}

// ---- the arms --------------------------------------------------------------------------------

type H = BuildHasherDefault<MulHasher>;

/// A rank id and the map key derived from it (the same number: every arm hashes alike).
#[derive(Clone, Copy)]
struct Key {
    rank: RankId,
    k: u64,
}

/// One implementation. The batch methods are default methods, so each arm gets its own
/// monomorphized loop (one dynamic call per batch, none per operation).
trait Peer: Send + Sync {
    /// Get-or-insert by id (value = key); returns the value.
    fn touch(&self, key: Key) -> u64;
    /// Lookup by id of an existing key.
    fn get(&self, key: Key) -> u64;
    /// The calling thread's own first get-or-insert (fresh-thread and heap cases). `key` is
    /// handed in, computed before the timer: the maps need some id; a `RankLocal` uses its own.
    fn touch_own(&self, key: u64) -> u64;
    /// Iterate every value, summing.
    fn sum(&self) -> u64;

    fn touch_all(&self, keys: &[Key]) -> u64 {
        keys.iter()
            .fold(0u64, |s, &k| s.wrapping_add(self.touch(black_box(k))))
    }
    fn get_cycles(&self, order: &[Key], cycles: usize) -> u64 {
        let mut s = 0u64;
        for _ in 0..cycles {
            for &k in order {
                s = s.wrapping_add(self.get(black_box(k)));
            }
        }
        s
    }
    fn sum_times(&self, n: usize) -> u64 {
        (0..n).fold(0u64, |s, _| s.wrapping_add(black_box(self).sum()))
    }
}

struct Rl<B: Backend>(RankLocal<u64, B>);

impl<B: Backend> Peer for Rl<B> {
    fn touch(&self, key: Key) -> u64 {
        on_behalf_of(key.rank, || *self.0.get_or(|| key.k))
    }
    fn get(&self, key: Key) -> u64 {
        *self.0.get_for(key.rank).expect("present")
    }
    fn touch_own(&self, key: u64) -> u64 {
        *self.0.get_or(|| key)
    }
    fn sum(&self) -> u64 {
        self.0.iter().fold(0u64, |s, (_, v)| s.wrapping_add(*v))
    }
}

/// `RankLocal<Epoch>` read through a `Reader` (`pin()`): one per cycle of lookups (case 3 only).
struct RlReader(RankLocal<u64, Epoch>);

impl Peer for RlReader {
    fn touch(&self, key: Key) -> u64 {
        on_behalf_of(key.rank, || *self.0.get_or(|| key.k))
    }
    fn get(&self, key: Key) -> u64 {
        *self.0.pin().get_for(key.rank).expect("present")
    }
    fn touch_own(&self, key: u64) -> u64 {
        *self.0.get_or(|| key)
    }
    fn sum(&self) -> u64 {
        self.0.iter().fold(0u64, |s, (_, v)| s.wrapping_add(*v))
    }
    fn get_cycles(&self, order: &[Key], cycles: usize) -> u64 {
        let mut s = 0u64;
        for _ in 0..cycles {
            let reader = self.0.pin();
            for &k in order {
                s = s.wrapping_add(*reader.get_for(black_box(k).rank).expect("present"));
            }
        }
        s
    }
}

/// std `RwLock<HashMap>`: a read-locked probe, then the write lock and `entry` (the reference).
struct StdRw(RwLock<HashMap<u64, Box<u64>, H>>);

impl Peer for StdRw {
    fn touch(&self, key: Key) -> u64 {
        if let Some(v) = self.0.read().unwrap().get(&key.k) {
            return **v;
        }
        **self
            .0
            .write()
            .unwrap()
            .entry(key.k)
            .or_insert_with(|| Box::new(key.k))
    }
    fn get(&self, key: Key) -> u64 {
        **self.0.read().unwrap().get(&key.k).expect("present")
    }
    fn touch_own(&self, key: u64) -> u64 {
        self.touch(Key {
            rank: RankId::current(),
            k: key,
        })
    }
    fn sum(&self) -> u64 {
        let m = self.0.read().unwrap();
        m.values().fold(0u64, |s, v| s.wrapping_add(**v))
    }
}

struct Dash(dashmap::DashMap<u64, Box<u64>, H>);

impl Peer for Dash {
    fn touch(&self, key: Key) -> u64 {
        **self.0.entry(key.k).or_insert_with(|| Box::new(key.k))
    }
    fn get(&self, key: Key) -> u64 {
        **self.0.get(&key.k).expect("present")
    }
    fn touch_own(&self, key: u64) -> u64 {
        **self.0.entry(key).or_insert_with(|| Box::new(key))
    }
    fn sum(&self) -> u64 {
        self.0.iter().fold(0u64, |s, r| s.wrapping_add(**r.value()))
    }
}

/// scc `HashIndex`: lock-free `peek_with` reads; a get-or-insert peeks, then `entry_sync`.
struct SccIndex(scc::HashIndex<u64, Box<u64>, H>);

impl Peer for SccIndex {
    fn touch(&self, key: Key) -> u64 {
        self.touch_own(key.k)
    }
    fn get(&self, key: Key) -> u64 {
        self.0.peek_with(&key.k, |_, v| **v).expect("present")
    }
    fn touch_own(&self, key: u64) -> u64 {
        if let Some(v) = self.0.peek_with(&key, |_, v| **v) {
            return v;
        }
        **self
            .0
            .entry_sync(key)
            .or_insert_with(|| Box::new(key))
            .get()
    }
    fn sum(&self) -> u64 {
        let guard = scc::Guard::new();
        self.0
            .iter(&guard)
            .fold(0u64, |s, (_, v)| s.wrapping_add(**v))
    }
}

/// scc `HashMap`: `entry_sync(..).or_insert_with`, `read_sync`.
struct SccMap(scc::HashMap<u64, Box<u64>, H>);

impl Peer for SccMap {
    fn touch(&self, key: Key) -> u64 {
        self.touch_own(key.k)
    }
    fn get(&self, key: Key) -> u64 {
        self.0.read_sync(&key.k, |_, v| **v).expect("present")
    }
    fn touch_own(&self, key: u64) -> u64 {
        **self
            .0
            .entry_sync(key)
            .or_insert_with(|| Box::new(key))
            .get()
    }
    fn sum(&self) -> u64 {
        let mut s = 0u64;
        self.0.iter_sync(|_, v| {
            s = s.wrapping_add(**v);
            true
        });
        s
    }
}

/// papaya: `pin()` per operation, `get_or_insert_with`, `get`.
struct Papaya(papaya::HashMap<u64, Box<u64>, H>);

impl Papaya {
    fn new(mode: papaya::ResizeMode) -> Papaya {
        Papaya(
            papaya::HashMap::builder()
                .hasher(H::default())
                .resize_mode(mode)
                .build(),
        )
    }
}

impl Peer for Papaya {
    fn touch(&self, key: Key) -> u64 {
        self.touch_own(key.k)
    }
    fn get(&self, key: Key) -> u64 {
        **self.0.pin().get(&key.k).expect("present")
    }
    fn touch_own(&self, key: u64) -> u64 {
        **self.0.pin().get_or_insert_with(key, || Box::new(key))
    }
    fn sum(&self) -> u64 {
        self.0
            .pin()
            .iter()
            .fold(0u64, |s, (_, v)| s.wrapping_add(**v))
    }
}

/// papaya with its guard held across a cycle of lookups (case 3 only), as `RlReader`.
struct PapayaGuard(Papaya);

impl Peer for PapayaGuard {
    fn touch(&self, key: Key) -> u64 {
        self.0.touch(key)
    }
    fn get(&self, key: Key) -> u64 {
        self.0.get(key)
    }
    fn touch_own(&self, key: u64) -> u64 {
        self.0.touch_own(key)
    }
    fn sum(&self) -> u64 {
        self.0.sum()
    }
    fn get_cycles(&self, order: &[Key], cycles: usize) -> u64 {
        let mut s = 0u64;
        for _ in 0..cycles {
            let guard = self.0 .0.guard();
            for &k in order {
                s = s.wrapping_add(**self.0 .0.get(&black_box(k).k, &guard).expect("present"));
            }
        }
        s
    }
}

/// The `thread_local` crate: one value per live thread, found by the thread itself; no lookup by
/// id (cases 1 and 3 skip it).
struct Tl(thread_local::ThreadLocal<u64>);

impl Peer for Tl {
    fn touch(&self, _: Key) -> u64 {
        unreachable!("the thread_local crate has no lookup by id")
    }
    fn get(&self, _: Key) -> u64 {
        unreachable!("the thread_local crate has no lookup by id")
    }
    fn touch_own(&self, key: u64) -> u64 {
        *self.0.get_or(|| key)
    }
    fn sum(&self) -> u64 {
        self.0.iter().fold(0u64, |s, v| s.wrapping_add(*v))
    }
}

/// The control for the per-thread cases: a thread that touches nothing.
struct Nothing;

impl Peer for Nothing {
    fn touch(&self, key: Key) -> u64 {
        key.k
    }
    fn get(&self, key: Key) -> u64 {
        key.k
    }
    fn touch_own(&self, key: u64) -> u64 {
        black_box(key)
    }
    fn sum(&self) -> u64 {
        0
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arm {
    Epoch,
    ArcSwap,
    Baseline,
    RwLock,
    DashMap,
    SccIndex,
    SccMap,
    Papaya,
    PapayaInc,
    EpochReader,
    PapayaGuard,
    ThreadLocal,
    Nothing,
}

/// `(arm, command-line name, table label)`, in table order.
const ARMS: [(Arm, &str, &str); 13] = [
    (Arm::Epoch, "epoch", "RankLocal<Epoch>"),
    (Arm::ArcSwap, "arc-swap", "RL<ArcSwap>"),
    (Arm::Baseline, "baseline", "RL<Baseline>"),
    (Arm::RwLock, "rwlock", "RwLock<HashMap>"),
    (Arm::DashMap, "dashmap", "dashmap"),
    (Arm::SccIndex, "scc-index", "scc HashIndex"),
    (Arm::SccMap, "scc-map", "scc HashMap"),
    (Arm::Papaya, "papaya", "papaya Blocking"),
    (Arm::PapayaInc, "papaya-inc", "papaya default"),
    (Arm::EpochReader, "epoch-reader", "RL<Epoch> Reader"),
    (Arm::PapayaGuard, "papaya-guard", "papaya guarded"),
    (Arm::ThreadLocal, "thread_local", "thread_local"),
    (Arm::Nothing, "none", "(threads only)"),
];

impl Arm {
    fn label(self) -> &'static str {
        ARMS.iter().find(|a| a.0 == self).unwrap().2
    }
    fn cli(self) -> &'static str {
        ARMS.iter().find(|a| a.0 == self).unwrap().1
    }
    /// Has a lookup / insert by id (cases 1, 3).
    fn by_id(self) -> bool {
        !matches!(self, Arm::ThreadLocal | Arm::Nothing)
    }
    /// Holds its pin or guard across a cycle of lookups: only case 3 runs it.
    fn batch_reader(self) -> bool {
        matches!(self, Arm::EpochReader | Arm::PapayaGuard)
    }
    fn make(self) -> Box<dyn Peer> {
        match self {
            Arm::Epoch => Box::new(Rl(RankLocal::<u64, Epoch>::new())),
            Arm::ArcSwap => Box::new(Rl(RankLocal::<u64, ArcSwap>::new())),
            Arm::Baseline => Box::new(Rl(RankLocal::<u64, Baseline>::new())),
            Arm::RwLock => Box::new(StdRw(RwLock::default())),
            Arm::DashMap => Box::new(Dash(dashmap::DashMap::with_hasher(H::default()))),
            Arm::SccIndex => Box::new(SccIndex(scc::HashIndex::with_hasher(H::default()))),
            Arm::SccMap => Box::new(SccMap(scc::HashMap::with_hasher(H::default()))),
            Arm::Papaya => Box::new(Papaya::new(papaya::ResizeMode::Blocking)),
            Arm::PapayaInc => Box::new(Papaya::new(papaya::ResizeMode::default())),
            Arm::EpochReader => Box::new(RlReader(RankLocal::new())),
            Arm::PapayaGuard => Box::new(PapayaGuard(Papaya::new(papaya::ResizeMode::Blocking))),
            Arm::ThreadLocal => Box::new(Tl(thread_local::ThreadLocal::new())),
            Arm::Nothing => Box::new(Nothing),
        }
    }
}

// ---- options ---------------------------------------------------------------------------------

const HELP: &str = "\
peers: ranklocal against std RwLock<HashMap>, dashmap 6, scc 3 (HashIndex,
HashMap), papaya 0.2 and the thread_local crate 1.1, in one process, the arms
interleaved round by round

USAGE: cargo run --release -p ranklocal-peers --example peers -- [OPTIONS]

OPTIONS:
  --quick           fewer rounds and threads (a few seconds; a smoke run)
  --only LIST       only these arms, comma-separated: epoch, arc-swap,
                    baseline, rwlock, dashmap, scc-index, scc-map, papaya,
                    papaya-inc, epoch-reader, papaya-guard, thread_local,
                    none (epoch-reader and papaya-guard hold a Reader /
                    papaya's guard across each cycle of lookups: case
                    miss only)
  --only-case LIST  only these cases: touch-id, miss, iter, fresh-thread, heap
  --ops N           callgrind mode: one arm (--only), one case (--only-case,
                    not heap); set up, run exactly N operations, untimed,
                    print their checksum (benches/peers_callgrind.sh)
  --size N          callgrind mode: keys present (touch-id, miss; default
                    1024) or live threads (fresh-thread; default 64)
  --threads LIST    fresh-thread: the live-thread counts N, comma-separated
                    (e.g. 1,2,4,8,16)                   [default: 64,1024]
  -h, --help        this text

CASES (xRW = the arm's median / RwLock<HashMap>'s, in the same table):
  touch-id      ns per get-or-insert of a key never seen, in batches of 64,
                into a structure holding N = 64 / 1,024 / 65,536 keys
                (ranklocal: on_behalf_of(rank, || rl.get_or(..)) for a rank
                nothing touched yet; any resize a batch triggers counts);
                rebuilt at N once it has grown by max(64, N/16) keys
  miss          ns per lookup by id, one thread, N = 1,024 / 65,536 keys
                in a scattered round-robin: more than the 256 entries of
                ranklocal's thread cache, so a get_for misses it (but for
                the few keys such a scan leaves cached)
  iter          ns to iterate 64 values, summing them
  fresh-thread  us for a new thread's first get_or (maps: get-or-insert of
                a new key), timed inside it, while N-1 = 63 / 1,023 other
                threads that touched the structure are parked; each round
                rebuilds every structure, so the thread_local crate's
                recycled thread id finds an empty slot
  heap          live heap per key after N inserts (N = 1,024 / 65,536) of
                ranks made for the measurement, and per thread after N
                threads each touched one value and stay parked, net of
                the (threads only) row (a counting global
                allocator: static TLS and stacks are not heap; ranklocal's
                thread cache is 8 KiB of static TLS in every thread)

Map arms hash with the same one-multiply hasher; values are Box<u64>.
papaya runs with ResizeMode::Blocking, as its docs advise when 'the keys in
your map are stable', and as 'papaya default' in its default incremental
mode, whose reads search both tables while a resize is unfinished.";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Case {
    TouchId,
    FreshThread,
    Miss,
    Heap,
    Iter,
}

const CASES: [(Case, &str); 5] = [
    (Case::TouchId, "touch-id"),
    (Case::FreshThread, "fresh-thread"),
    (Case::Miss, "miss"),
    (Case::Heap, "heap"),
    (Case::Iter, "iter"),
];

struct Opts {
    quick: bool,
    arms: Vec<Arm>,
    cases: Vec<Case>,
    ops: Option<usize>,
    size: Option<usize>,
    /// fresh-thread's live-thread counts (`--threads`).
    threads: Vec<usize>,
}

fn die(msg: &str) -> ! {
    progress_done();
    eprintln!("peers: {msg}");
    std::process::exit(2);
}

fn parse() -> Opts {
    let mut o = Opts {
        quick: false,
        arms: ARMS
            .iter()
            .map(|a| a.0)
            .filter(|&a| a != Arm::Nothing)
            .collect(),
        cases: CASES.iter().map(|c| c.0).collect(),
        ops: None,
        size: None,
        threads: FRESH_SIZES.to_vec(),
    };
    let mut only_arms = false;
    let mut args = std::env::args().skip(1);
    let num = |v: Option<String>, what: &str| -> usize {
        v.and_then(|s| s.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| die(&format!("{what} needs a positive number")))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            "--quick" => o.quick = true,
            "--only" => {
                let list = args.next().unwrap_or_else(|| die("--only needs arm names"));
                o.arms = list
                    .split(',')
                    .map(|s| {
                        ARMS.iter()
                            .find(|a| a.1 == s.trim())
                            .map(|a| a.0)
                            .unwrap_or_else(|| die(&format!("unknown arm {s:?} (try --help)")))
                    })
                    .collect();
                only_arms = true;
            }
            "--only-case" => {
                let list = args
                    .next()
                    .unwrap_or_else(|| die("--only-case needs case names"));
                o.cases = list
                    .split(',')
                    .map(|s| {
                        CASES
                            .iter()
                            .find(|c| c.1 == s.trim())
                            .map(|c| c.0)
                            .unwrap_or_else(|| die(&format!("unknown case {s:?} (try --help)")))
                    })
                    .collect();
            }
            "--ops" => o.ops = Some(num(args.next(), "--ops")),
            "--size" => o.size = Some(num(args.next(), "--size")),
            "--threads" => {
                let list = args.next().unwrap_or_default();
                o.threads = list
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse()
                            .ok()
                            .filter(|&n: &usize| n > 0)
                            .unwrap_or_else(|| die("--threads takes e.g. 1,2,4,8,16"))
                    })
                    .collect();
                o.threads.sort_unstable(); // the pool of live threads only grows
                o.threads.dedup();
            }
            "--bench" => {} // passed by `cargo bench`-style runners; ignored
            other => die(&format!("unknown option {other:?} (try --help)")),
        }
    }
    if o.ops.is_some() && (!only_arms || o.arms.len() != 1 || o.cases.len() != 1) {
        die("--ops needs exactly one arm (--only) and one case (--only-case)");
    }
    o
}

// ---- helpers ---------------------------------------------------------------------------------

/// `n` live logical ranks, in id order: first touches by id use them (a `Rank` is what a
/// request-scoped rank is; making one takes no thread).
fn make_ranks(n: usize) -> (Vec<Rank>, Vec<Key>) {
    let ranks: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
    let keys = ranks
        .iter()
        .map(|r| Key {
            rank: r.id(),
            k: r.id().as_u64(),
        })
        .collect();
    (ranks, keys)
}

fn key_sum(keys: &[Key]) -> u64 {
    keys.iter().fold(0u64, |s, k| s.wrapping_add(k.k))
}

fn check(what: &str, arm: Arm, got: u64, want: u64) {
    assert_eq!(got, want, "{what}: {} read a wrong sum", arm.label());
}

/// Keys for threads' own values in the map arms (distinct from rank ids, which they never meet).
static NEXT_KEY: AtomicU64 = AtomicU64::new(1 << 40);

fn next_key() -> u64 {
    NEXT_KEY.fetch_add(1, Ordering::Relaxed)
}

const STACK: usize = 256 << 10;

fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(f)
        .expect("spawn")
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

/// Columns of the progress line: under 80, so that it never wraps on an 80-column terminal (a
/// wrapped line cannot be rewritten in place and leaves a stale line behind each time).
const PROGRESS_COLS: usize = 79;

/// Whether progress is shown: only when stderr is a terminal (redirected, the `\r`-rewritten
/// segments would pile up into one long line).
fn progress_on() -> bool {
    use std::io::IsTerminal;
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::io::stderr().is_terminal())
}

/// Rewrites the progress line with `msg`, truncated to [`PROGRESS_COLS`].
fn progress(msg: &str) {
    if progress_on() {
        let line: String = format!("  {msg}").chars().take(PROGRESS_COLS).collect();
        eprint!("\r{line:<PROGRESS_COLS$}\r");
    }
}

/// Erases the progress line (before a table goes to stdout).
fn progress_done() {
    if progress_on() {
        eprint!("\r{:<PROGRESS_COLS$}\r", "");
    }
}

// ---- tables ----------------------------------------------------------------------------------

/// Median and minimum of one arm's samples at one size.
#[derive(Clone, Copy)]
struct Stat {
    med: f64,
    min: f64,
}

fn stat(mut v: Vec<f64>) -> Option<Stat> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(Stat {
        med: v[v.len() / 2],
        min: v[0],
    })
}

/// Up to 6 characters, about 3 significant digits.
fn num(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x.abs() >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x.abs() >= 1e5 {
        format!("{:.0}k", x / 1e3)
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A ratio in at most 5 characters.
fn ratio(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// An extra last column: its title, and its value computed from a row's stats.
type Extra<'a> = (&'a str, &'a dyn Fn(&[Option<Stat>]) -> Option<f64>);

/// One table: a row per arm, a `med min xRW` column group per size.
struct Table {
    sizes: Vec<String>,
    /// `rows[arm][size]`
    rows: Vec<(Arm, Vec<Option<Stat>>)>,
}

impl Table {
    fn print(&self, extra: Option<Extra<'_>>) {
        let reference = self
            .rows
            .iter()
            .find(|r| r.0 == Arm::RwLock)
            .map(|r| r.1.clone());
        print!("  {:<16}", "");
        for s in &self.sizes {
            print!(" {s:^19}");
        }
        println!();
        print!("  {:<16}", "arm");
        for _ in &self.sizes {
            print!(" {:>6} {:>6} {:>5}", "med", "min", "xRW");
        }
        if let Some((name, _)) = extra {
            print!(" {name:>7}");
        }
        println!();
        for (arm, stats) in &self.rows {
            print!("  {:<16}", arm.label());
            for (i, s) in stats.iter().enumerate() {
                match s {
                    Some(s) => {
                        let x = reference
                            .as_ref()
                            .and_then(|r| r[i])
                            .map_or("-".into(), |r| ratio(s.med / r.med));
                        print!(" {:>6} {:>6} {x:>5}", num(s.med), num(s.min));
                    }
                    None => print!(" {:>6} {:>6} {:>5}", "-", "-", "-"),
                }
            }
            if let Some((_, f)) = extra {
                print!(" {:>7}", f(stats).map_or("-".into(), ratio));
            }
            println!();
        }
    }
}

/// Interleaved rounds: `rounds` times, every arm's `sample(arm_index)` once, the order rotated.
fn interleave(n_arms: usize, rounds: usize, mut sample: impl FnMut(usize) -> f64) -> Vec<Vec<f64>> {
    let mut out = vec![Vec::with_capacity(rounds); n_arms];
    for round in 0..rounds {
        for j in 0..n_arms {
            let a = (j + round) % n_arms;
            out[a].push(sample(a));
        }
    }
    out
}

// ---- case 1: first touch by rank id ----------------------------------------------------------

const BATCH: usize = 64;
const TOUCH_SIZES: [usize; 3] = [64, 1024, 65536];

/// How far a structure may grow past N before it is rebuilt at N.
fn allowance(n: usize) -> usize {
    BATCH.max(n / 16)
}

fn touch_id(o: &Opts, keys: &[Key]) {
    let arms: Vec<Arm> = o
        .arms
        .iter()
        .copied()
        .filter(|a| a.by_id() && !a.batch_reader())
        .collect();
    if arms.is_empty() {
        return;
    }
    let mut rows: Vec<Vec<Option<Stat>>> = vec![Vec::new(); arms.len()];
    let mut rounds_used = Vec::new();
    for n in TOUCH_SIZES {
        let rounds = match (o.quick, n) {
            (true, 65536) => 8,
            (true, _) => 21,
            (false, 64) => 401,
            (false, 1024) => 201,
            (false, _) => 128,
        };
        rounds_used.push(rounds);
        // per arm: the structure and how many fresh keys it took since it was built
        let mut built: Vec<Option<(Box<dyn Peer>, usize)>> = arms.iter().map(|_| None).collect();
        let samples = interleave(arms.len(), rounds, |a| {
            progress(&format!(
                "1. first touch by id, N = {n}: {}",
                arms[a].label()
            ));
            let slot = &mut built[a];
            if slot.as_ref().is_none_or(|s| s.1 + BATCH > allowance(n)) {
                *slot = None; // drop the old one first
                let p = arms[a].make();
                check(
                    "build",
                    arms[a],
                    p.touch_all(&keys[..n]),
                    key_sum(&keys[..n]),
                );
                *slot = Some((p, 0));
            }
            let (p, used) = slot.as_mut().unwrap();
            let fresh = &keys[n + *used..n + *used + BATCH];
            let start = Instant::now();
            let s = p.touch_all(fresh);
            let t = start.elapsed();
            check("first touch", arms[a], s, key_sum(fresh));
            *used += BATCH;
            t.as_nanos() as f64 / BATCH as f64
        });
        drop(built);
        for (row, s) in rows.iter_mut().zip(samples) {
            row.push(stat(s));
        }
    }
    progress_done();
    println!(
        "\n1. first touch by rank id: ns per get-or-insert of a key never seen (in\n   \
         batches of {BATCH}) into a structure holding N keys; ranklocal:\n   \
         on_behalf_of(rank, || rl.get_or(..)) of a rank nothing touched yet;\n   \
         rounds: {}",
        rounds_used
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(" / ")
    );
    Table {
        sizes: TOUCH_SIZES.iter().map(|n| format!("N = {n}")).collect(),
        rows: arms.into_iter().zip(rows).collect(),
    }
    .print(None);
}

// ---- case 2: first touch on a fresh thread ---------------------------------------------------

type Set = Arc<Vec<Box<dyn Peer>>>;

struct LiveState {
    generation: u64,
    set: Option<Set>,
    pending: usize,
    quit: bool,
}

/// Parked threads that each touch every structure of each new set they are handed.
struct Live {
    state: Mutex<LiveState>,
    wake: Condvar,
    done: Condvar,
}

struct LivePool {
    live: Arc<Live>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl LivePool {
    fn new() -> LivePool {
        LivePool {
            live: Arc::new(Live {
                state: Mutex::new(LiveState {
                    generation: 0,
                    set: None,
                    pending: 0,
                    quit: false,
                }),
                wake: Condvar::new(),
                done: Condvar::new(),
            }),
            threads: Vec::new(),
        }
    }

    /// Grows the pool to `n` threads (between sets: none is in flight).
    fn grow_to(&mut self, n: usize) {
        let seen = self.live.state.lock().unwrap().generation;
        while self.threads.len() < n {
            let live = self.live.clone();
            self.threads.push(spawn(move || {
                let key = next_key();
                let mut seen = seen;
                loop {
                    let set = {
                        let mut g = live.state.lock().unwrap();
                        while g.generation == seen && !g.quit {
                            g = live.wake.wait(g).unwrap();
                        }
                        if g.quit {
                            return;
                        }
                        seen = g.generation;
                        g.set.clone().expect("a set")
                    };
                    for p in set.iter() {
                        assert_eq!(p.touch_own(key), key, "a live thread read a wrong value");
                    }
                    drop(set);
                    let mut g = live.state.lock().unwrap();
                    g.pending -= 1;
                    if g.pending == 0 {
                        live.done.notify_one();
                    }
                }
            }));
        }
    }

    /// Has every pool thread touch every structure of `set`; returns once all have.
    fn touch(&self, set: &Set) {
        let mut g = self.live.state.lock().unwrap();
        g.generation += 1;
        g.set = Some(set.clone());
        g.pending = self.threads.len();
        self.live.wake.notify_all();
        while g.pending > 0 {
            g = self.live.done.wait(g).unwrap();
        }
        g.set = None;
    }
}

impl Drop for LivePool {
    fn drop(&mut self) {
        self.live.state.lock().unwrap().quit = true;
        self.live.wake.notify_all();
        for t in self.threads.drain(..) {
            t.join().expect("a live thread panicked");
        }
    }
}

/// A fresh thread's first touch of `set[a]`, timed inside it.
fn fresh_touch(set: &Set, a: usize) -> Duration {
    let set = set.clone();
    let key = next_key();
    spawn(move || {
        let p = &set[a];
        let start = Instant::now();
        let v = p.touch_own(black_box(key));
        let t = start.elapsed();
        assert_eq!(v, key, "a fresh thread read a wrong value");
        t
    })
    .join()
    .expect("a fresh thread panicked")
}

const FRESH_SIZES: [usize; 2] = [64, 1024];

fn fresh_thread(o: &Opts) {
    let arms: Vec<Arm> = o
        .arms
        .iter()
        .copied()
        .filter(|a| !a.batch_reader())
        .collect();
    let mut pool = LivePool::new();
    let mut rows: Vec<Vec<Option<Stat>>> = vec![Vec::new(); arms.len()];
    let mut rounds_used = Vec::new();
    for &n in &o.threads {
        let rounds = match (o.quick, n) {
            (true, 0..=64) => 15,
            (true, _) => 5,
            (false, 0..=64) => 301,
            (false, _) => 151,
        };
        rounds_used.push(rounds);
        progress(&format!("4. fresh thread: starting {} live threads", n - 1));
        pool.grow_to(n - 1);
        let mut samples = vec![Vec::new(); arms.len()];
        for round in 0..rounds {
            progress(&format!(
                "4. fresh thread, {n} live: round {}/{rounds}",
                round + 1
            ));
            let set: Set = Arc::new(arms.iter().map(|a| a.make()).collect());
            pool.touch(&set);
            // let the live threads park again before the fresh ones run (2 cores)
            std::thread::sleep(Duration::from_millis(2));
            for j in 0..arms.len() {
                let a = (j + round) % arms.len();
                samples[a].push(fresh_touch(&set, a).as_nanos() as f64 / 1e3);
            }
        }
        for (row, s) in rows.iter_mut().zip(samples) {
            row.push(stat(s));
        }
    }
    drop(pool);
    progress_done();
    println!(
        "\n4. first touch on a fresh thread: us for its first get_or (maps: get-or-\n   \
         insert of a new key), timed inside it, while N-1 other threads that\n   \
         touched the structure are parked; fresh threads per arm: {};\n   \
         grow = med at the last N / med at the first",
        rounds_used
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(" / ")
    );
    Table {
        sizes: o.threads.iter().map(|n| format!("N = {n}")).collect(),
        rows: arms.into_iter().zip(rows).collect(),
    }
    .print(Some(("grow", &|s: &[Option<Stat>]| {
        Some(s.last().copied()??.med / s.first().copied()??.med)
    })));
}

// ---- case 3: lookups that miss ranklocal's thread cache ---------------------------------------

/// The miss case's key counts (the first also the callgrind mode's default).
const MISS_SIZES: [usize; 2] = [1024, 65536];
const MISS_KEYS: usize = MISS_SIZES[0];

/// `keys` in a scattered round-robin order: index `i * 67 mod len` (67 is odd, so every key once
/// per cycle), as `compare`'s cache-miss arms.
fn scattered(keys: &[Key]) -> Vec<Key> {
    (0..keys.len()).map(|i| keys[i * 67 % keys.len()]).collect()
}

fn miss(o: &Opts, keys: &[Key]) {
    let arms: Vec<Arm> = o.arms.iter().copied().filter(|a| a.by_id()).collect();
    if arms.is_empty() {
        return;
    }
    let sizes: &[usize] = if o.quick || keys.len() < MISS_SIZES[1] {
        &MISS_SIZES[..1]
    } else {
        &MISS_SIZES
    };
    let mut rows: Vec<Vec<Option<Stat>>> = vec![Vec::new(); arms.len()];
    let mut shape = Vec::new();
    for &n in sizes {
        let keys = &keys[..n];
        let order = scattered(keys);
        // about 64 K lookups per sample at every size
        let cycles = (65536 / n).max(1);
        let rounds = match (o.quick, n) {
            (true, _) => 11,
            (false, 65536) => 31,
            (false, _) => 101,
        };
        progress(&format!("2. cache-miss lookups, N = {n}: building"));
        let peers: Vec<Box<dyn Peer>> = arms
            .iter()
            .map(|&a| {
                let p = a.make();
                check("build", a, p.touch_all(keys), key_sum(keys));
                check("warm-up", a, p.get_cycles(&order, 2), 2 * key_sum(keys));
                p
            })
            .collect();
        let want = (cycles as u64).wrapping_mul(key_sum(keys));
        let samples = interleave(arms.len(), rounds, |a| {
            progress(&format!(
                "2. cache-miss lookups, N = {n}: {}",
                arms[a].label()
            ));
            let start = Instant::now();
            let s = peers[a].get_cycles(&order, cycles);
            let t = start.elapsed();
            check("lookup", arms[a], s, want);
            t.as_nanos() as f64 / (cycles * n) as f64
        });
        drop(peers);
        for (row, s) in rows.iter_mut().zip(samples) {
            row.push(stat(s));
        }
        shape.push(format!("{rounds} of {cycles} x {n}"));
    }
    progress_done();
    println!(
        "\n2. lookup by id that misses ranklocal's thread cache (256 entries): ns\n   \
         per get_for / get, one thread, N keys in a scattered round-robin;\n   \
         rounds: {} lookups",
        shape.join(", ")
    );
    Table {
        sizes: sizes.iter().map(|n| format!("N = {n}")).collect(),
        rows: arms.into_iter().zip(rows).collect(),
    }
    .print(None);
}

// ---- case 4: heap ----------------------------------------------------------------------------

/// Lets deferred frees run before a heap reading, in rounds until a round frees nothing twice
/// in a row. A round drives the crate's collector through its public API: a scoped instance of a
/// rank made and dropped for the round, then `reclaim_exited_blocking`, which retires that rank's
/// batch, flushes the writers' retiring participant and this thread's own bag to the collector,
/// and keeps flushing (each flush advances the epoch at most once and frees up to 8 queued bags)
/// until its batch — queued after everything deferred before it — has been freed. What the
/// collector frees includes the ~2 KiB epoch records of exited threads, which crossbeam unlinks
/// during a flush and defers in turn (so it takes rounds). Each round also drops 100 scc guards
/// (sdd's collector). Each round leaves the same state behind (one rank's slot swept), so
/// readings taken after settling compare. papaya's collector is each map's own and frees as its
/// batches fill: what it holds is counted.
///
/// (`len` does not pin: a settler that called it in a loop drove nothing, and a later
/// `RankLocal` arm's first touches, whose flushes do drive the collector, freed 1,664 records of
/// the fresh-thread case's exited threads inside its own measurement: -3.6 B/key.)
struct Settler {
    rl: RankLocal<u8, Epoch>,
}

impl Settler {
    fn new() -> Settler {
        Settler {
            rl: RankLocal::new(),
        }
    }

    fn round(&self) {
        let rank = Rank::new();
        on_behalf_of(rank.id(), || self.rl.with(|v| black_box(*v)));
        drop(rank); // the rank exits: its scoped-only instance is the sweep's
        assert_eq!(
            self.rl.reclaim_exited_blocking(),
            1,
            "settle: one exit swept"
        );
        for _ in 0..100 {
            drop(black_box(scc::Guard::new()));
        }
    }

    fn settle(&mut self) {
        let mut last = live();
        let mut quiet = 0;
        for _ in 0..1000 {
            self.round();
            let now = live();
            quiet = if (last - now).abs() < 64 {
                quiet + 1
            } else {
                0
            };
            if quiet == 2 {
                break;
            }
            last = now;
        }
    }
}

/// Live heap bytes per key after inserting `n` keys into a new `arm` (after settling), each key
/// a rank made for this measurement.
///
/// Fresh ranks, not the shared ones the other cases touched: a rank that a dropped `RankLocal`
/// touched keeps that map's closed exit inbox in the crate's registry until a later
/// registration on the rank prunes it, so a `RankLocal` first-touching reused ranks could free
/// what earlier structures left there (allocated before counting began, or by an earlier arm)
/// inside its own measurement. The ranks are made before the first reading and dropped after the
/// second, so neither their registry entries nor their exits count; what the structure adds to
/// them (an exit registration per rank, for a `RankLocal`) does.
fn heap_per_key(arm: Arm, n: usize, settler: &mut Settler) -> f64 {
    let (ranks, keys) = make_ranks(n);
    settler.settle();
    let before = live();
    let p = arm.make();
    check("heap", arm, p.touch_all(&keys), key_sum(&keys));
    settler.settle();
    let bytes = live() - before;
    drop(p);
    drop(ranks);
    bytes as f64 / n as f64
}

/// Live heap bytes per thread after `n` threads each touched `arm` once and stay parked (after
/// settling).
fn heap_per_thread(arm: Arm, n: usize, settler: &mut Settler) -> f64 {
    let p: Arc<dyn Peer> = Arc::from(arm.make());
    let touched = Arc::new(Barrier::new(n + 1));
    let release = Arc::new(Barrier::new(n + 1));
    let mut handles = Vec::with_capacity(n);
    let keys: Vec<u64> = (0..n).map(|_| next_key()).collect();
    settler.settle();
    let before = live();
    for &key in &keys {
        let (p, touched, release) = (p.clone(), touched.clone(), release.clone());
        handles.push(spawn(move || {
            assert_eq!(p.touch_own(key), key, "heap: a thread read a wrong value");
            touched.wait();
            release.wait();
        }));
    }
    touched.wait();
    settler.settle();
    let bytes = live() - before;
    release.wait();
    for h in handles {
        h.join().expect("a heap thread panicked");
    }
    bytes as f64 / n as f64
}

fn heap(o: &Opts) {
    let key_sizes: &[usize] = if o.quick { &[1024] } else { &[1024, 65536] };
    let threads = if o.quick { 64 } else { 1024 };
    let mut arms: Vec<Arm> = o
        .arms
        .iter()
        .copied()
        .filter(|a| !a.batch_reader())
        .collect();
    if !arms.contains(&Arm::Nothing) {
        arms.push(Arm::Nothing);
    }
    // each arm's one-time per-process and per-thread set-up (the collector's registration of this
    // thread, for one) is paid before counting starts
    let (_setup_rank, setup_key) = make_ranks(1);
    for &a in &arms {
        let p = a.make();
        if a.by_id() {
            p.touch(setup_key[0]);
        }
        p.touch_own(next_key());
        p.sum();
    }
    let mut settler = Settler::new();
    COUNTING.store(true, Ordering::SeqCst);
    let mut per_key: Vec<Vec<Option<f64>>> = Vec::new();
    let mut per_thread = Vec::new();
    for &a in &arms {
        progress(&format!("5. heap: {}", a.label()));
        per_key.push(
            key_sizes
                .iter()
                .map(|&n| a.by_id().then(|| heap_per_key(a, n, &mut settler)))
                .collect(),
        );
        per_thread.push(heap_per_thread(a, threads, &mut settler));
    }
    COUNTING.store(false, Ordering::SeqCst);
    progress_done();
    let control = per_thread[arms.iter().position(|&a| a == Arm::Nothing).unwrap()];
    println!(
        "\n5. heap (counting global allocator; requested bytes live, after settling):\n   \
         B/key = per key after N inserts by id into a new structure (N ranks\n   \
         made for it); B/thread = per thread after {threads} threads each touched\n   \
         one value and stay parked, net of the (threads only) row, which is\n   \
         gross (std's own heap per thread); xRW = arm / RwLock<HashMap>"
    );
    let rw = arms.iter().position(|&a| a == Arm::RwLock);
    print!("  {:<16}", "arm");
    for n in key_sizes {
        print!(" {:>12} {:>5}", format!("B/key@{n}"), "xRW");
    }
    println!(" {:>12} {:>5}", "B/thread", "xRW");
    for (i, &a) in arms.iter().enumerate() {
        print!("  {:<16}", a.label());
        for (j, b) in per_key[i].iter().enumerate() {
            let x = match (b, rw.and_then(|r| per_key[r][j])) {
                (Some(b), Some(r)) => ratio(b / r),
                _ => "-".into(),
            };
            print!(
                " {:>12} {x:>5}",
                b.map_or("-".into(), |b| format!("{b:.1}"))
            );
        }
        let t = if a == Arm::Nothing {
            per_thread[i]
        } else {
            per_thread[i] - control
        };
        let x = match rw {
            Some(r) if a != Arm::Nothing => ratio(t / (per_thread[r] - control)),
            _ => "-".into(),
        };
        println!(" {:>12} {x:>5}", format!("{t:.1}"));
    }
}

// ---- case 5: iterate 64 values ---------------------------------------------------------------

const ITER_VALUES: usize = 64;

/// Puts 64 values into `p`: by id, or (the per-thread arms) from 64 threads alive at once, one
/// value each. Returns their sum.
fn fill_64(a: Arm, p: &dyn Peer, keys: &[Key]) -> u64 {
    if a.by_id() {
        check("build", a, p.touch_all(keys), key_sum(keys));
        return key_sum(keys);
    }
    let own: Vec<u64> = (0..ITER_VALUES).map(|_| next_key()).collect();
    let all = Barrier::new(ITER_VALUES);
    std::thread::scope(|s| {
        for &k in &own {
            let all = &all;
            s.spawn(move || {
                p.touch_own(k);
                all.wait();
            });
        }
    });
    if a == Arm::Nothing {
        0
    } else {
        own.iter().sum()
    }
}

fn iterate(o: &Opts, keys: &[Key]) {
    let arms: Vec<Arm> = o
        .arms
        .iter()
        .copied()
        .filter(|a| !a.batch_reader())
        .collect();
    let keys = &keys[..ITER_VALUES];
    let (rounds, n) = if o.quick { (11, 500) } else { (101, 2000) };
    let mut want = Vec::new();
    let peers: Vec<Box<dyn Peer>> = arms
        .iter()
        .map(|&a| {
            let p = a.make();
            want.push(fill_64(a, &*p, keys));
            p
        })
        .collect();
    let samples = interleave(arms.len(), rounds, |a| {
        progress(&format!("3. iterate: {}", arms[a].label()));
        let start = Instant::now();
        let s = peers[a].sum_times(n);
        let t = start.elapsed();
        check("iterate", arms[a], s, want[a].wrapping_mul(n as u64));
        t.as_nanos() as f64 / n as f64
    });
    drop(peers);
    progress_done();
    println!(
        "\n3. iterate {ITER_VALUES} values, summing: ns per iteration, one thread;\n   \
         rounds: {rounds} of {n} iterations"
    );
    Table {
        sizes: vec![format!("{ITER_VALUES} values")],
        rows: arms
            .into_iter()
            .zip(samples.into_iter().map(|s| vec![stat(s)]))
            .collect(),
    }
    .print(None);
}

// ---- callgrind mode --------------------------------------------------------------------------

/// Fresh ranks made for `--ops` touch-id runs, whatever `--ops` is.
const OPS_POOL: usize = 1 << 16;

/// Set-up, then exactly `ops` operations of `case` on `arm`, untimed; prints their checksum.
fn ops_mode(arm: Arm, case: Case, ops: usize, size: Option<usize>) {
    let sum = match case {
        Case::TouchId | Case::Miss if !arm.by_id() => die("this arm has no lookup by id"),
        Case::TouchId => {
            // a pool whose size does not depend on `ops`, so its making cancels out too
            if ops > OPS_POOL {
                die(&format!("touch-id takes at most --ops {OPS_POOL}"));
            }
            let n = size.unwrap_or(1024);
            let (_ranks, keys) = make_ranks(n + OPS_POOL);
            let p = arm.make();
            p.touch_all(&keys[..n]);
            p.touch_all(&keys[n..n + ops])
        }
        Case::Miss => {
            let n = size.unwrap_or(MISS_KEYS);
            let (_ranks, keys) = make_ranks(n);
            let p = arm.make();
            p.touch_all(&keys);
            let order = scattered(&keys);
            p.get_cycles(&order, 1); // warm-up
            let mut s = p.get_cycles(&order, ops / n);
            s = s.wrapping_add(p.get_cycles(&order[..ops % n], 1));
            s
        }
        Case::FreshThread => {
            let n = size.unwrap_or(64);
            let mut pool = LivePool::new();
            pool.grow_to(n - 1);
            let set: Set = Arc::new(vec![arm.make()]);
            pool.touch(&set);
            // the fresh threads stay alive until the end (as the pool's), so that the
            // thread_local crate does not hand a later one a recycled id whose slot is full: the
            // k-th finds n - 1 + k - 1 other threads alive
            let release = Arc::new(Barrier::new(ops + 1));
            let fresh: Vec<_> = (0..ops)
                .map(|_| {
                    let (set, release, key) = (set.clone(), release.clone(), next_key());
                    let h = spawn(move || {
                        let v = set[0].touch_own(key);
                        release.wait();
                        v
                    });
                    (key, h)
                })
                .collect();
            release.wait();
            fresh.into_iter().fold(0u64, |s, (key, h)| {
                let v = h.join().expect("a fresh thread panicked");
                assert_eq!(v, key, "a fresh thread read a wrong value");
                s.wrapping_add(v)
            })
        }
        Case::Iter => {
            let (_ranks, keys) = make_ranks(ITER_VALUES);
            let p = arm.make();
            fill_64(arm, &*p, &keys);
            p.sum_times(ops)
        }
        Case::Heap => die("--ops does not apply to the heap case"),
    };
    println!(
        "{} {} x {ops}: checksum {sum}",
        arm.cli(),
        CASES.iter().find(|c| c.0 == case).unwrap().1
    );
}

fn main() {
    let o = parse();
    if let Some(ops) = o.ops {
        ops_mode(o.arms[0], o.cases[0], ops, o.size);
        return;
    }
    println!("ranklocal peers: {}", machine());
    println!(
        "All arms in one process, interleaved round by round; every map hashes\n\
         with the same one-multiply hasher and holds Box<u64> values. In every\n\
         table: med = median over the rounds, min = fastest round, xRW = med /\n\
         RwLock<HashMap>'s med (above 1: slower). Compare ratios within a table;\n\
         absolute times move with the machine's load.{}",
        if o.quick {
            " (--quick: few rounds)"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let wants = |c: Case| o.cases.contains(&c);
    // live logical ranks for the by-id cases: N + room for the fresh keys of case 1
    let need = if wants(Case::TouchId) {
        TOUCH_SIZES[2] + allowance(TOUCH_SIZES[2])
    } else if o.quick {
        MISS_KEYS
    } else {
        MISS_SIZES[1]
    };
    let (ranks, keys) = make_ranks(need);
    // The cases that start no threads first, then the fresh threads, then the heap. Order
    // matters for ArcSwap: arc-swap keeps one debt node per thread that was ever alive at once
    // with others, reuses them, and every store walks them all, so its first touches slow down
    // once a process has had 1,024 live threads (the ArcSwap rows of cases 2 and 4 show a
    // process that has had them; run `--only-case heap` alone for its debt nodes' heap).
    let run = |c: Case, f: &mut dyn FnMut()| {
        if wants(c) {
            let t = Instant::now();
            f();
            println!("   ({:.1} s)", t.elapsed().as_secs_f64());
        }
    };
    run(Case::TouchId, &mut || touch_id(&o, &keys));
    run(Case::Miss, &mut || miss(&o, &keys));
    run(Case::Iter, &mut || iterate(&o, &keys));
    run(Case::FreshThread, &mut || fresh_thread(&o));
    run(Case::Heap, &mut || heap(&o));
    drop(ranks);
    println!("\ntotal {:.1} s", started.elapsed().as_secs_f64());
}
