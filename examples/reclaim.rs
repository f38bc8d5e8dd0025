//! Reclamation of exited ranks' scoped-only instances (issue 19), every backend side by side:
//! the amortized sweep run by a first touch, rolling windows of live `Rank`s, first touches while
//! another thread holds an epoch pin, `Rank::new()` latency during a large sweep, and costs that
//! could grow with what is held rather than with what an operation handles (requests behind a
//! held iterator, freeing what piled up behind a held pin).
//!
//! ```text
//! cargo run --release --example reclaim                 # a few minutes; slow arms are capped
//! cargo run --release --example reclaim -- --quick      # smoke run, seconds
//! cargo run --release --example reclaim -- --help
//! ```
//!
//! Every measurement runs in a child process of its own (this executable, `--child ...`), so one
//! arm's leftovers (collector garbage, heap) cannot slow the next, and an arm over the time cap
//! is killed and reported as over the cap instead of hanging the run. Arms take turns within a
//! size, repeat by repeat. Uses only the crate's public API, so the same program measures the
//! code before and after a change.

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

#[path = "support/mod.rs"]
mod support;

use std::collections::{HashSet, VecDeque};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use ranklocal::{on_behalf_of, ArcSwap, Backend, Baseline, Epoch, Rank, RankLocal};
use support::{bytes, count, median, ratio, report, secs, Fields, Outcome};

#[global_allocator]
static ALLOC: support::Counting = support::Counting;

const HELP: &str = "\
reclaim: reclamation of exited ranks' scoped-only instances (issue 19), backends
Epoch, ArcSwap and Baseline side by side (lower is better)

USAGE: cargo run --release --example reclaim -- [OPTIONS]

OPTIONS:
  --quick           smoke run: small sizes, --reps 1, --cap 10 (seconds)
  --section LIST    sections to run, e.g. 1,3          [default: 1,2,3,4,5]
  --cap SECS        time cap per measurement (one child process, setup
                    included); slower arms show \">cap\"    [default: 30]
  --reps N          runs per measurement, arms taking turns; the median is
                    shown (slow measurements run once)  [default: 3;
                    section 5: 1]
  --max-k K         section 1: only sizes k <= K       [default: 16000]
  --max-window W    section 2: only windows W <= W     [default: 4000]
  --max-touches N   section 3: only sizes n <= N       [default: 32000]
  --entries N       section 4: map size                [default: 1000000]
  --max-held N      section 5: only sizes n, k <= N    [default: 160000]
  -h, --help        this text

Sections:
  1  one first touch that sweeps k = 1,000 / 4,000 / 16,000 exited ranks
  2  rolling windows of W = 16 / 1,000 / 4,000 live Ranks, one per request
  3  n = 8,000 / 32,000 first touches while another thread sits in with_for
  4  Rank::new()+drop latency on another thread while reclaim_exited()
     sweeps a map of 1,000,000 entries
  5  costs behind what is held: (a) n = 25,000 / 50,000 / 100,000 requests
     with and without an iter() held over n ranks; (b) reclaim_exited_blocking
     after a pin held across k = 10,000..80,000 reclaims ends; (c) one
     reclaim_exited freeing k = 10,000..160,000 ready batches at once";

// ---------------------------------------------------------------------------------------------
// Arms
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Arm {
    Epoch,
    ArcSwap,
    Baseline,
}

const ARMS: [Arm; 3] = [Arm::Epoch, Arm::ArcSwap, Arm::Baseline];

impl Arm {
    fn name(self) -> &'static str {
        match self {
            Arm::Epoch => "Epoch",
            Arm::ArcSwap => "ArcSwap",
            Arm::Baseline => "Baseline",
        }
    }
    fn parse(s: &str) -> Arm {
        ARMS.into_iter()
            .find(|a| a.name() == s)
            .unwrap_or_else(|| support::die("reclaim", &format!("unknown arm {s:?}")))
    }
}

/// One instance per rank: small, so the figures are the map's and the collector's.
type V = AtomicU64;

// ---------------------------------------------------------------------------------------------
// Child side: one measurement per process
// ---------------------------------------------------------------------------------------------

fn child(args: &[String]) -> ! {
    let what = args.first().map_or("", String::as_str);
    let arm = Arm::parse(args.get(1).map_or("", String::as_str));
    let n: usize = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| support::die("reclaim", "child: size"));
    let extra: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(0);
    match arm {
        Arm::Epoch => measure::<Epoch>(what, n, extra),
        Arm::ArcSwap => measure::<ArcSwap>(what, n, extra),
        Arm::Baseline => measure::<Baseline>(what, n, extra),
    }
}

fn measure<B: Backend>(what: &str, n: usize, extra: usize) -> ! {
    match what {
        "sweep" => sweep::<B>(n),
        "window" => window::<B>(n, extra),
        "pinned" => pinned::<B>(n, extra != 0),
        "stall" => stall::<B>(n, extra),
        "held_iter" => held_iter::<B>(n, extra != 0),
        "pin_then_block" => pin_then_block::<B>(n),
        "ready_batches" => ready_batches::<B>(n),
        _ => support::die("reclaim", &format!("child: unknown measurement {what:?}")),
    }
}

/// A scoped first touch as `rank` (creates its instance; `with` only, so it stays reclaimable).
#[inline]
fn touch<B: Backend>(rl: &RankLocal<V, B>, rank: &Rank) {
    on_behalf_of(rank.id(), || {
        rl.with(|v| {
            v.fetch_add(1, Ordering::Relaxed);
        })
    });
}

/// Section 1: `k` scoped-only instances of `k` Ranks, the Ranks dropped, then one `get()` as a
/// fresh rank: its first touch runs the amortized sweep (due once the exits since the last sweep
/// reach max(16, len/2)).
fn sweep<B: Backend>(k: usize) -> ! {
    let rl: RankLocal<V, B> = RankLocal::new();
    let ranks: Vec<Rank> = (0..k).map(|_| Rank::new()).collect();
    for r in &ranks {
        touch(&rl, r);
    }
    let len_before = rl.len();
    drop(ranks); // k exits
    let fresh = Rank::new();
    let start = support::reset_peak();
    let t = Instant::now();
    on_behalf_of(fresh.id(), || {
        black_box(rl.get());
    });
    let dt = t.elapsed().as_secs_f64();
    let peak = support::peak() - start;
    let kept = support::live() - start;
    report(&[
        ("secs", dt.to_string()),
        ("peak", peak.to_string()),
        ("kept", kept.to_string()),
        ("len_before", len_before.to_string()),
        ("len", rl.len().to_string()),
    ])
}

/// Section 2: a window of `w` live Ranks; each step makes a Rank, first-touches its instance
/// through `with`, and drops the oldest Rank once the window is full.
fn window<B: Backend>(w: usize, steps: usize) -> ! {
    let rl: RankLocal<V, B> = RankLocal::new();
    let mut live: VecDeque<Rank> = VecDeque::with_capacity(w + 1);
    let start = support::reset_peak();
    let mut worst = Duration::ZERO;
    let t0 = Instant::now();
    for i in 0..steps {
        let r = Rank::new();
        let t = Instant::now();
        touch(&rl, &r);
        worst = worst.max(t.elapsed());
        live.push_back(r);
        if live.len() > w {
            drop(live.pop_front());
        }
        if i % 1000 == 999 {
            support::progress(&format!(
                "{} of {} steps",
                count(i as u64 + 1),
                count(steps as u64)
            ));
        }
    }
    let total = t0.elapsed().as_secs_f64();
    report(&[
        ("per", (total / steps as f64).to_string()),
        ("worst", worst.as_secs_f64().to_string()),
        ("peak", (support::peak() - start).to_string()),
        ("len", rl.len().to_string()),
    ])
}

/// Section 3: `n` scoped first touches of new live Ranks on one `RankLocal`; if `pin`, while
/// another thread sits inside `with_for` of an unrelated `RankLocal`'s rank (a delegate's scoped
/// read: it holds a pin of the crate's epoch collector until it returns).
fn pinned<B: Backend>(n: usize, pin: bool) -> ! {
    let other: Arc<RankLocal<V, B>> = Arc::new(RankLocal::new());
    let held = Rank::new();
    touch(&other, &held);
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let holder = pin.then(|| {
        let other = Arc::clone(&other);
        let id = held.id();
        std::thread::spawn(move || {
            other.with_for(id, |_| {
                ready_tx.send(()).unwrap();
                let _ = stop_rx.recv();
            })
        })
    });
    if pin {
        ready_rx.recv().unwrap();
    }
    let rl: RankLocal<V, B> = RankLocal::new();
    let mut ranks = Vec::with_capacity(n);
    let t0 = Instant::now();
    for i in 0..n {
        let r = Rank::new();
        touch(&rl, &r);
        ranks.push(r); // kept live: no sweep, only first touches
        if i % 500 == 499 {
            support::progress(&format!(
                "{} of {} touches",
                count(i as u64 + 1),
                count(n as u64)
            ));
        }
    }
    let total = t0.elapsed().as_secs_f64();
    drop(stop_tx);
    if let Some(h) = holder {
        assert!(h.join().unwrap().is_some(), "the holder read its instance");
    }
    report(&[("secs", total.to_string()), ("len", rl.len().to_string())])
}

/// Section 4: `n` live Ranks with one scoped instance each, `exited` of them dropped, then
/// `reclaim_exited()` while another thread makes and drops Ranks, timing each.
fn stall<B: Backend>(n: usize, exited: usize) -> ! {
    let rl: RankLocal<V, B> = RankLocal::new();
    let mut ranks = Vec::with_capacity(n);
    for i in 0..n {
        let r = Rank::new();
        touch(&rl, &r);
        ranks.push(r);
        if i % 100_000 == 99_999 {
            support::progress(&format!(
                "set up {} of {}",
                count(i as u64 + 1),
                count(n as u64)
            ));
        }
    }
    drop(ranks.drain(..exited.min(n)));
    support::progress("probing");
    // 0: idle (before the call), 1: during the call, 2: after
    let phase = Arc::new(AtomicU8::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (phase, stop) = (Arc::clone(&phase), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut idle, mut during) = (Vec::with_capacity(1 << 16), Vec::with_capacity(1 << 20));
            while !stop.load(Ordering::Relaxed) {
                let p0 = phase.load(Ordering::SeqCst);
                let t = Instant::now();
                drop(black_box(Rank::new()));
                let dt = t.elapsed().as_nanos() as u64;
                match p0.max(phase.load(Ordering::SeqCst)) {
                    0 => idle.push(dt),
                    1 => during.push(dt),
                    _ => {}
                }
            }
            (idle, during)
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    phase.store(1, Ordering::SeqCst);
    let t = Instant::now();
    let freed = rl.reclaim_exited();
    let dt = t.elapsed().as_secs_f64();
    phase.store(2, Ordering::SeqCst);
    stop.store(true, Ordering::Relaxed);
    let (idle, mut during) = probe.join().unwrap();
    during.sort_unstable();
    let p99 = during
        .get((during.len() * 99 / 100).min(during.len().saturating_sub(1)))
        .copied();
    let max = during.last().copied();
    let ns = |x: Option<u64>| x.map_or(f64::NAN, |x| x as f64 * 1e-9).to_string();
    report(&[
        ("secs", dt.to_string()),
        ("freed", freed.to_string()),
        ("len", rl.len().to_string()),
        ("p99", ns(p99)),
        ("max", ns(max)),
        ("idle_max", ns(idle.iter().max().copied())),
        ("probes", during.len().to_string()),
        (
            "slow",
            during
                .iter()
                .filter(|&&d| d > 1_000_000)
                .count()
                .to_string(),
        ),
    ])
}

/// Section 5a: `n` requests against a map of `n` other ranks, with (`hold`) or without an
/// `iter()` held over them throughout. The requests' ranks are made interleaved with the map's,
/// so each request's scoped first touch fills a hole in one of the held version's leaves; then
/// the request's rank exits and one `reclaim_exited()` reclaims it. Times the `n` requests.
fn held_iter<B: Backend>(n: usize, hold: bool) -> ! {
    let rl: RankLocal<u8, B> = RankLocal::new();
    let (mut requests, mut held) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..2 * n {
        let r = Rank::new();
        if i % 2 == 0 {
            requests.push(r);
        } else {
            held.push(r);
        }
    }
    for r in &held {
        on_behalf_of(r.id(), || {
            rl.get_or(|| 1);
        });
    }
    let it = hold.then(|| rl.iter());
    let t = Instant::now();
    for (i, r) in requests.into_iter().enumerate() {
        on_behalf_of(r.id(), || rl.with_or(|| 2, |_| ()));
        drop(r);
        rl.reclaim_exited();
        if i % 5000 == 4999 {
            support::progress(&format!(
                "{} of {} requests",
                count(i as u64 + 1),
                count(n as u64)
            ));
        }
    }
    let dt = t.elapsed().as_secs_f64();
    let seen = it.map_or(n, Iterator::count);
    report(&[
        ("secs", dt.to_string()),
        ("per", (dt / n as f64).to_string()),
        ("seen", seen.to_string()),
    ])
}

/// Makes another thread sit in a delegate's scoped read of `rl` (a pin of the crate's collector)
/// until the returned sender sends or is dropped. Returns the sender, that thread's handle and
/// the rank it reads (keep it live while the pin is held).
fn hold_a_pin<T: Send + Sync + 'static, B: Backend>(
    rl: &'static RankLocal<T, B>,
    init: fn() -> T,
) -> (mpsc::Sender<()>, std::thread::JoinHandle<Option<()>>, Rank) {
    let reader = Rank::new();
    on_behalf_of(reader.id(), || rl.with_or(init, |_| ()));
    let id = reader.id();
    let (in_tx, in_rx) = mpsc::channel();
    let (out_tx, out_rx) = mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        rl.with_for(id, |_| {
            in_tx.send(()).unwrap();
            let _ = out_rx.recv();
        })
    });
    in_rx.recv().unwrap();
    (out_tx, h, reader)
}

/// `k` requests on `rl`, each a scoped first touch as a new rank, its exit and one
/// `reclaim_exited()` (which retires it as a batch of one).
fn retire_k_batches<T: Send + Sync, B: Backend>(rl: &RankLocal<T, B>, k: usize, init: fn() -> T) {
    for i in 0..k {
        let r = Rank::new();
        on_behalf_of(r.id(), || rl.with_or(init, |_| ()));
        drop(r);
        assert_eq!(rl.reclaim_exited(), 1);
        if i % 5000 == 4999 {
            support::progress(&format!(
                "retired {} of {} batches",
                count(i as u64 + 1),
                count(k as u64)
            ));
        }
    }
}

/// Section 5b: another thread holds a pin while `k` requests each retire one batch (which the pin
/// keeps from being freed); then the pin ends and one `reclaim_exited_blocking()` frees them all.
/// Times the retiring and that call.
fn pin_then_block<B: Backend>(k: usize) -> ! {
    let rl: &'static RankLocal<u8, B> = Box::leak(Box::new(RankLocal::new()));
    let (release, holder, _reader) = hold_a_pin(rl, || 0);
    let t = Instant::now();
    retire_k_batches(rl, k, || 1);
    let retire = t.elapsed().as_secs_f64();
    drop(release);
    assert!(
        holder.join().unwrap().is_some(),
        "the holder read its instance"
    );
    support::progress("freeing");
    let t = Instant::now();
    let _ = rl.reclaim_exited_blocking();
    let free = t.elapsed().as_secs_f64();
    report(&[
        ("retire", retire.to_string()),
        ("secs", free.to_string()),
        ("len", rl.len().to_string()),
    ])
}

/// Resident set size of this process in bytes (NaN where `/proc/self/statm` is missing; 4 KiB
/// pages assumed).
fn rss() -> f64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(f64::NAN, |pages| pages * 4096.0)
}

/// Drops counted by [`Tick`].
static TICKS: AtomicUsize = AtomicUsize::new(0);

/// A value that counts its drop in [`TICKS`].
struct Tick;

impl Drop for Tick {
    fn drop(&mut self) {
        TICKS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Section 5c: as 5b, but after the pin ends another thread's scoped reads of another map drive
/// the collector (its pins collect) with no sweep of `rl`, so that all `k` batches are ready at
/// once; then one `reclaim_exited()` frees them. Times that call; also the RSS and live heap
/// grown while the pin was held.
fn ready_batches<B: Backend>(k: usize) -> ! {
    let rl: &'static RankLocal<Tick, B> = Box::leak(Box::new(RankLocal::new()));
    let other: &'static RankLocal<u8, B> = Box::leak(Box::new(RankLocal::new()));
    let (release, holder, reader) = hold_a_pin(rl, || Tick);
    let reader = reader.id();
    on_behalf_of(reader, || other.with_or(|| 0, |_| ()));
    let (rss0, heap0) = (rss(), support::live());
    retire_k_batches(rl, k, || Tick);
    let (rss_grown, heap_grown) = (rss() - rss0, support::live() - heap0);
    drop(release);
    assert!(
        holder.join().unwrap().is_some(),
        "the holder read its instance"
    );
    support::progress("driving the collector");
    // crossbeam collects a few deferred items every 128 pins
    std::thread::spawn(move || {
        for _ in 0..(k / 8 + 100) * 128 {
            other.with_for(reader, |_| ());
        }
    })
    .join()
    .unwrap();
    support::progress("freeing");
    let before = TICKS.load(Ordering::Relaxed);
    let t = Instant::now();
    let _ = rl.reclaim_exited();
    let one = t.elapsed().as_secs_f64();
    let freed = TICKS.load(Ordering::Relaxed) - before;
    report(&[
        ("secs", one.to_string()),
        ("freed", freed.to_string()),
        ("rss", rss_grown.to_string()),
        ("heap", heap_grown.to_string()),
    ])
}

// ---------------------------------------------------------------------------------------------
// Parent side: runs the children, prints the tables
// ---------------------------------------------------------------------------------------------

#[derive(Clone)]
struct Opts {
    quick: bool,
    sections: Vec<u32>,
    cap: Duration,
    reps: usize,
    /// `--reps` was given (section 5 then repeats too; by default it runs each measurement once).
    reps_given: bool,
    max_k: usize,
    max_window: usize,
    max_touches: usize,
    entries: usize,
    max_held: usize,
}

fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        quick: false,
        sections: vec![1, 2, 3, 4, 5],
        cap: Duration::from_secs(30),
        reps: 3,
        reps_given: false,
        max_k: usize::MAX,
        max_window: usize::MAX,
        max_touches: usize::MAX,
        entries: 1_000_000,
        max_held: usize::MAX,
    };
    let (mut cap, mut reps, mut entries) = (None, None, None);
    let mut it = args.iter();
    let num = |v: Option<&String>, what: &str| -> usize {
        v.and_then(|s| s.replace('_', "").parse().ok())
            .unwrap_or_else(|| support::die("reclaim", &format!("{what} needs a number")))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            "--quick" => o.quick = true,
            "--section" => {
                o.sections = it
                    .next()
                    .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
                    .unwrap_or_default();
                if o.sections.is_empty() || o.sections.iter().any(|s| !(1..=5).contains(s)) {
                    support::die("reclaim", "--section takes e.g. 1,3");
                }
            }
            "--cap" => cap = Some(num(it.next(), "--cap").max(1)),
            "--reps" => reps = Some(num(it.next(), "--reps").max(1)),
            "--max-k" => o.max_k = num(it.next(), "--max-k"),
            "--max-window" => o.max_window = num(it.next(), "--max-window"),
            "--max-touches" => o.max_touches = num(it.next(), "--max-touches"),
            "--max-held" => o.max_held = num(it.next(), "--max-held"),
            "--entries" => entries = Some(num(it.next(), "--entries").max(100)),
            "--bench" => {}
            other => support::die("reclaim", &format!("unknown option {other:?} (try --help)")),
        }
    }
    if o.quick {
        o.cap = Duration::from_secs(10);
        o.reps = 1;
        o.entries = 100_000;
    }
    if let Some(c) = cap {
        o.cap = Duration::from_secs(c as u64);
    }
    if let Some(r) = reps {
        o.reps = r;
        o.reps_given = true;
    }
    if let Some(e) = entries {
        o.entries = e;
    }
    o
}

/// One measurement (arm, variant, size) and its runs.
struct Cell {
    arm: Arm,
    /// Index into the measurement's variants.
    vi: usize,
    /// The variant: the child's last argument.
    variant: usize,
    runs: Vec<Fields>,
    first_secs: f64,
    capped: bool,
    skipped: bool,
    failed: Option<String>,
}

impl Cell {
    /// The median of `key` over the runs (NaN if none).
    fn med(&self, key: &str) -> f64 {
        median(&self.runs.iter().map(|f| f.f64(key)).collect::<Vec<_>>())
    }
    /// `key` formatted by `f`, or why there is no value.
    fn show(&self, key: &str, cap: Duration, f: impl Fn(f64) -> String) -> String {
        if self.skipped {
            "skipped".into()
        } else if self.capped {
            format!(">{} s", cap.as_secs())
        } else if self.failed.is_some() {
            "failed".into()
        } else {
            f(self.med(key))
        }
    }
    /// A secondary column: as [`show`](Self::show), "-" when there is no value.
    fn other(&self, key: &str, f: impl Fn(f64) -> String) -> String {
        if self.runs.is_empty() {
            "-".into()
        } else {
            f(self.med(key))
        }
    }
    /// "*" if it ran fewer times than asked (slow), "" otherwise.
    fn mark(&self, reps: usize) -> &'static str {
        if !self.runs.is_empty() && self.runs.len() < reps {
            MARKED.store(true, Ordering::Relaxed);
            "*"
        } else {
            ""
        }
    }
}

/// Runs measurement `what` at `size` for every (arm, variant), `o.reps` times, arms taking turns
/// (the order rotates each repeat). An (arm, variant) over the cap is not repeated and is
/// skipped at later sizes (`capped` remembers it); one that took over a quarter of the cap runs
/// once.
fn run_cells(
    o: &Opts,
    what: &str,
    size: usize,
    variants: &[(usize, &str)],
    capped: &mut HashSet<(Arm, usize)>,
    notes: &mut Vec<String>,
) -> Vec<Cell> {
    let mut cells: Vec<Cell> = ARMS
        .iter()
        .flat_map(|&arm| {
            variants
                .iter()
                .enumerate()
                .map(move |(vi, &(variant, _))| Cell {
                    arm,
                    vi,
                    variant,
                    runs: Vec::new(),
                    first_secs: 0.0,
                    capped: false,
                    skipped: false,
                    failed: None,
                })
        })
        .collect();
    for c in &mut cells {
        c.skipped = capped.contains(&(c.arm, c.vi));
        if c.skipped {
            notes.push(format!(
                "{what} {} {}{}: skipped (over the cap at a smaller size)",
                c.arm.name(),
                count(size as u64),
                match variants[c.vi].1 {
                    "" => String::new(),
                    v => format!(" ({v})"),
                }
            ));
        }
    }
    for rep in 0..o.reps {
        let n = cells.len();
        for j in 0..n {
            let c = &mut cells[(j + rep) % n];
            if c.skipped || c.capped || c.failed.is_some() {
                continue;
            }
            if rep > 0 && c.first_secs > o.cap.as_secs_f64() / 4.0 {
                continue;
            }
            let args: Vec<String> = [
                "--child".to_string(),
                what.to_string(),
                c.arm.name().to_string(),
                size.to_string(),
                c.variant.to_string(),
            ]
            .into();
            let label = format!(
                "{what} {} {}{}",
                c.arm.name(),
                count(size as u64),
                match variants[c.vi].1 {
                    "" => String::new(),
                    v => format!(" ({v})"),
                }
            );
            eprint!("  {label} run {}... ", rep + 1);
            match support::run_child(&args, o.cap) {
                Outcome::Done { fields, secs: s } => {
                    eprintln!("{}", secs(s));
                    if c.runs.is_empty() {
                        c.first_secs = s;
                    }
                    c.runs.push(fields);
                }
                Outcome::Capped { progress } => {
                    eprintln!("over the cap");
                    notes.push(format!(
                        "{label}: over the {} s cap{}",
                        o.cap.as_secs(),
                        progress
                            .as_deref()
                            .map_or(String::new(), |p| format!(" ({p})"))
                    ));
                    c.capped = true;
                    capped.insert((c.arm, c.vi));
                }
                Outcome::Failed(e) => {
                    eprintln!("failed");
                    notes.push(format!("{label}: {e}"));
                    c.failed = Some(e);
                }
            }
        }
    }
    cells
}

fn cell(cells: &[Cell], arm: Arm, vi: usize) -> &Cell {
    cells
        .iter()
        .find(|c| c.arm == arm && c.vi == vi)
        .expect("cell")
}

/// `key`'s median for `arm` over Baseline's at the same size and variant.
fn vs_base(cells: &[Cell], arm: Arm, vi: usize, key: &str) -> String {
    let c = cell(cells, arm, vi);
    if c.runs.is_empty() {
        return "-".into();
    }
    ratio(c.med(key) / cell(cells, Arm::Baseline, vi).med(key))
}

/// Set when a row of the current table was marked "*" (fewer runs than asked).
static MARKED: AtomicBool = AtomicBool::new(false);

fn print_notes(notes: &mut Vec<String>, reps: usize) {
    if MARKED.swap(false, Ordering::Relaxed) {
        println!("  * ran fewer than {reps} times (slow); median of the runs shown");
    }
    for n in notes.drain(..) {
        println!("{}", wrap(&format!("note: {n}"), 2, 8));
    }
    println!();
}

/// `text` wrapped at 78 columns: the first line indented by `first`, the rest by `rest`.
fn wrap(text: &str, first: usize, rest: usize) -> String {
    let mut out = " ".repeat(first);
    let mut col = first;
    for w in text.split_whitespace() {
        if col > first.max(rest) && col + 1 + w.chars().count() > 78 {
            out.push('\n');
            out.push_str(&" ".repeat(rest));
            col = rest;
        } else if col > first {
            out.push(' ');
            col += 1;
        }
        out.push_str(w);
        col += w.chars().count();
    }
    out
}

fn section1(o: &Opts) {
    let ks: &[usize] = if o.quick {
        &[250, 1000]
    } else {
        &[1000, 4000, 16000]
    };
    println!("1. One first touch that sweeps k exited ranks");
    println!("   k Ranks each made one scoped-only instance (with), then all were dropped;");
    println!("   then one get() as a fresh Rank: its first touch runs the amortized sweep.");
    println!(
        "{:>7}  {:<8} {:>9} {:>7} {:>11} {:>11} {:>7}",
        "k", "backend", "touch", "x Base", "peak heap", "kept heap", "len"
    );
    let (mut capped, mut notes) = (HashSet::new(), Vec::new());
    for &k in ks.iter().filter(|&&k| k <= o.max_k) {
        let cells = run_cells(o, "sweep", k, &[(0, "")], &mut capped, &mut notes);
        for arm in ARMS {
            let c = cell(&cells, arm, 0);
            println!(
                "{:>7}  {:<8} {:>9} {:>7} {:>11} {:>11} {:>7}{}",
                count(k as u64),
                arm.name(),
                c.show("secs", o.cap, secs),
                vs_base(&cells, arm, 0, "secs"),
                c.other("peak", |b| format!("+{}", bytes(b))),
                c.other("kept", |b| format!("+{}", bytes(b))),
                c.other("len", |n| count(n as u64)),
                c.mark(o.reps)
            );
        }
    }
    println!("  touch      time of that one get(), the sweep included");
    println!("  x Base     touch / Baseline's touch at the same k");
    println!("  peak heap  peak live heap during the call, above the live heap before it");
    println!("  kept heap  live heap after the call, above the live heap before it");
    println!("  len        len() after the call: 1 = the sweep unpublished all k");
    print_notes(&mut notes, o.reps);
}

fn section2(o: &Opts) {
    let ws: &[usize] = if o.quick {
        &[16, 250]
    } else {
        &[16, 1000, 4000]
    };
    println!("2. Rolling windows of W live Ranks, one per request");
    println!("   each step: Rank::new(), one scoped first touch (with) as it, drop of the");
    println!("   oldest Rank once W are live; 4W + 1,000 steps (at most 20,000).");
    println!(
        "{:>6}  {:<8} {:>7} {:>9} {:>7} {:>9} {:>11} {:>7}",
        "W", "backend", "steps", "per rank", "x Base", "worst", "peak heap", "len end"
    );
    let (mut capped, mut notes) = (HashSet::new(), Vec::new());
    for &w in ws.iter().filter(|&&w| w <= o.max_window) {
        let steps = (4 * w + 1000).min(20_000);
        let cells = run_cells(o, "window", w, &[(steps, "")], &mut capped, &mut notes);
        for arm in ARMS {
            let c = cell(&cells, arm, 0);
            println!(
                "{:>6}  {:<8} {:>7} {:>9} {:>7} {:>9} {:>11} {:>7}{}",
                count(w as u64),
                arm.name(),
                count(steps as u64),
                c.show("per", o.cap, secs),
                vs_base(&cells, arm, 0, "per"),
                c.other("worst", secs),
                c.other("peak", |b| format!("+{}", bytes(b))),
                c.other("len", |n| count(n as u64)),
                c.mark(o.reps)
            );
        }
    }
    println!("  per rank   total time / steps (Rank::new, touch, drop of the oldest)");
    println!("  x Base     per rank / Baseline's per rank at the same W");
    println!("  worst      the slowest single first touch of the run");
    println!("  peak heap  peak live heap during the run, above the start");
    println!("  len end    len() at the end: W live + exited not yet swept");
    print_notes(&mut notes, o.reps);
}

fn section3(o: &Opts) {
    let ns: &[usize] = if o.quick {
        &[1000, 4000]
    } else {
        &[8000, 32000]
    };
    println!("3. n first touches while another thread sits in with_for");
    println!("   n scoped first touches (with, each as a new live Rank: no sweeps) on one");
    println!("   RankLocal; \"pin held\": meanwhile another thread is inside with_for of an");
    println!("   unrelated RankLocal's rank (an epoch pin of the crate's collector).");
    println!(
        "{:>7}  {:<8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "n", "backend", "no pin", "pin held", "x no pin", "x Base", "per touch"
    );
    let (mut capped, mut notes) = (HashSet::new(), Vec::new());
    for &n in ns.iter().filter(|&&n| n <= o.max_touches) {
        let cells = run_cells(
            o,
            "pinned",
            n,
            &[(0, "no pin"), (1, "pin held")],
            &mut capped,
            &mut notes,
        );
        for arm in ARMS {
            let (free, held) = (cell(&cells, arm, 0), cell(&cells, arm, 1));
            let x_free = if free.runs.is_empty() || held.runs.is_empty() {
                "-".into()
            } else {
                ratio(held.med("secs") / free.med("secs"))
            };
            println!(
                "{:>7}  {:<8} {:>9} {:>9} {:>9} {:>9} {:>9}{}",
                count(n as u64),
                arm.name(),
                free.show("secs", o.cap, secs),
                held.show("secs", o.cap, secs),
                x_free,
                vs_base(&cells, arm, 1, "secs"),
                held.other("secs", |s| secs(s / n as f64)),
                if free.mark(o.reps).is_empty() {
                    held.mark(o.reps)
                } else {
                    "*"
                }
            );
        }
    }
    println!("  no pin     total time of the n touches, nobody pinned");
    println!("  pin held   the same with the other thread's pin held throughout");
    println!("  x no pin   pin held / no pin (1x: a pin costs writers nothing)");
    println!("  x Base     pin held / Baseline's pin held at the same n");
    println!("  per touch  pin held / n");
    print_notes(&mut notes, o.reps);
}

fn section4(o: &Opts) {
    let n = o.entries;
    println!("4. Rank::new()+drop on another thread while reclaim_exited() sweeps");
    println!(
        "   {} live Ranks with one scoped instance each; \"exited\" of them are",
        count(n as u64)
    );
    println!("   dropped, then reclaim_exited(); a probe thread times Rank::new()+drop.");
    println!(
        "{:>9}  {:<8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9}",
        "exited", "backend", "sweep", "probes", "p99", "max", ">1 ms", "idle max"
    );
    let (mut capped, mut notes) = (HashSet::new(), Vec::new());
    for exited in [n / 100, n] {
        let name = format!("{} exited", count(exited as u64));
        let cells = run_cells(o, "stall", n, &[(exited, &name)], &mut capped, &mut notes);
        for arm in ARMS {
            let c = cell(&cells, arm, 0);
            println!(
                "{:>9}  {:<8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9}{}",
                count(exited as u64),
                arm.name(),
                c.show("secs", o.cap, secs),
                c.other("probes", |x| count(x as u64)),
                c.other("p99", secs),
                c.other("max", secs),
                c.other("slow", |x| count(x as u64)),
                c.other("idle_max", secs),
                c.mark(o.reps)
            );
            for f in &c.runs {
                if f.f64("freed") != exited as f64 || f.f64("len") != (n - exited) as f64 {
                    notes.push(format!(
                        "{name}, {}: reclaim_exited() returned {}, len() after {}",
                        arm.name(),
                        f.get("freed").unwrap_or("?"),
                        f.get("len").unwrap_or("?")
                    ));
                }
            }
        }
        capped.clear(); // "all exited" is a different job: run every arm again
    }
    println!("  sweep      time of that reclaim_exited() call (it returned \"exited\"");
    println!("             and left len() = entries - exited, unless a note says)");
    println!("  probes     Rank::new()+drop calls timed during the call");
    println!("  p99, max   their latency (the live-rank mutex is process-wide)");
    println!("  >1 ms      how many of them took over 1 ms");
    println!("  idle max   the probe's max over the 100 ms before the call (noise floor)");
    print_notes(&mut notes, o.reps);
}

fn section5(o: &Opts) {
    // Once per measurement unless --reps says otherwise: what this section shows is how a cost
    // scales with the size, over sizes 2x apart, and three runs of it would take half a minute.
    let o = &Opts {
        reps: if o.reps_given { o.reps } else { 1 },
        ..o.clone()
    };
    let pick = |quick: &'static [usize], full: &'static [usize]| -> Vec<usize> {
        let sizes = if o.quick { quick } else { full };
        sizes.iter().copied().filter(|&n| n <= o.max_held).collect()
    };
    println!("5. Costs behind what is held (a held iterator, a held pin)");
    println!("   Each should stay flat per request or per batch as what is held grows.");
    println!("   (One run per measurement unless --reps is given.)");
    println!();
    println!("5a. n requests behind an iter() held over a map of n ranks");
    println!("   each request: a scoped first touch as a new rank (between the map's ranks,");
    println!("   so in the held version's leaves), its exit, one reclaim_exited().");
    println!(
        "{:>7}  {:<8} {:>12} {:>12} {:>10}",
        "n", "backend", "no iter", "iter held", "x no iter"
    );
    let (mut capped, mut notes) = (HashSet::new(), Vec::new());
    for n in pick(&[5_000, 20_000], &[25_000, 50_000, 100_000]) {
        let cells = run_cells(
            o,
            "held_iter",
            n,
            &[(0, "no iter"), (1, "iter held")],
            &mut capped,
            &mut notes,
        );
        for arm in ARMS {
            let (free, held) = (cell(&cells, arm, 0), cell(&cells, arm, 1));
            let x = if free.runs.is_empty() || held.runs.is_empty() {
                "-".into()
            } else {
                ratio(held.med("per") / free.med("per"))
            };
            println!(
                "{:>7}  {:<8} {:>12} {:>12} {:>10}{}",
                count(n as u64),
                arm.name(),
                free.show("per", o.cap, |s| format!("{}/req", secs(s))),
                held.show("per", o.cap, |s| format!("{}/req", secs(s))),
                x,
                if free.mark(o.reps).is_empty() {
                    held.mark(o.reps)
                } else {
                    "*"
                }
            );
            for f in &held.runs {
                if f.f64("seen") != n as f64 {
                    notes.push(format!(
                        "held_iter {} {}: the held iterator saw {} ranks, not {n}",
                        arm.name(),
                        count(n as u64),
                        f.get("seen").unwrap_or("?")
                    ));
                }
            }
        }
    }
    println!("  no iter    time of the n requests / n, nothing held");
    println!("  iter held  the same with one iter() over the map's n ranks held throughout");
    println!("  x no iter  iter held / no iter (flat in n: a held iterator costs a write O(1))");
    print_notes(&mut notes, o.reps);

    println!("5b. reclaim_exited_blocking() after a pin held across k batches ends");
    println!("   another thread sits in with_for while k requests each retire one batch");
    println!("   (reclaim_exited() of one exited rank); then the pin ends and one");
    println!("   reclaim_exited_blocking() frees the k batches.");
    println!(
        "{:>7}  {:<8} {:>9} {:>9} {:>11}",
        "k", "backend", "retiring", "freeing", "per batch"
    );
    let mut capped = HashSet::new();
    for k in pick(&[4_000, 16_000], &[10_000, 20_000, 40_000, 80_000]) {
        let cells = run_cells(o, "pin_then_block", k, &[(0, "")], &mut capped, &mut notes);
        for arm in ARMS {
            let c = cell(&cells, arm, 0);
            println!(
                "{:>7}  {:<8} {:>9} {:>9} {:>11}{}",
                count(k as u64),
                arm.name(),
                c.other("retire", secs),
                c.show("secs", o.cap, secs),
                c.other("secs", |s| secs(s / k as f64)),
                c.mark(o.reps)
            );
            for f in &c.runs {
                if f.f64("len") != 1.0 {
                    notes.push(format!(
                        "pin_then_block {} {}: len() {} after the blocking call, not 1",
                        arm.name(),
                        count(k as u64),
                        f.get("len").unwrap_or("?")
                    ));
                }
            }
        }
    }
    println!("  retiring   the k requests while the pin was held");
    println!("  freeing    the one reclaim_exited_blocking() call after the pin ended");
    println!("  per batch  freeing / k (flat in k: no wait per batch)");
    print_notes(&mut notes, o.reps);

    println!("5c. One reclaim_exited() freeing k ready batches at once");
    println!("   as 5b, but after the pin ends another thread's scoped reads of another map");
    println!("   drive the collector (no sweep of this one): all k batches are ready, and one");
    println!("   reclaim_exited() frees them.");
    println!(
        "{:>7}  {:<8} {:>8} {:>9} {:>10} {:>10} {:>10}",
        "k", "backend", "freed", "one call", "per batch", "RSS/batch", "heap/batch"
    );
    let mut capped = HashSet::new();
    for k in pick(&[4_000, 16_000], &[10_000, 20_000, 40_000, 80_000, 160_000]) {
        let cells = run_cells(o, "ready_batches", k, &[(0, "")], &mut capped, &mut notes);
        for arm in ARMS {
            let c = cell(&cells, arm, 0);
            let freed = c.med("freed");
            println!(
                "{:>7}  {:<8} {:>8} {:>9} {:>10} {:>10} {:>10}{}",
                count(k as u64),
                arm.name(),
                c.other("freed", |n| count(n as u64)),
                c.show("secs", o.cap, secs),
                c.other("secs", |s| secs(s / freed.max(1.0))),
                c.other("rss", |b| bytes(b / k as f64)),
                c.other("heap", |b| bytes(b / k as f64)),
                c.mark(o.reps)
            );
        }
    }
    println!("  freed      values that one reclaim_exited() dropped (k: all were ready)");
    println!("  one call   its time; per batch = one call / freed (flat in k: linear)");
    println!("  RSS/batch  resident set grown while the pin was held, / k");
    println!("  heap/batch live heap grown while the pin was held, / k (the price of a");
    println!("             held pin: what it keeps from being freed)");
    print_notes(&mut notes, o.reps);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        child(&args[1..]);
    }
    let o = parse(&args);
    println!("ranklocal reclaim — {}", support::machine());
    println!(
        "one child process per measurement; cap {} s each; median of {} run(s)",
        o.cap.as_secs(),
        o.reps
    );
    println!("(progress on stderr; on a shared machine compare ratios, not times)\n");
    let t0 = Instant::now();
    for s in &o.sections {
        match s {
            1 => section1(&o),
            2 => section2(&o),
            3 => section3(&o),
            4 => section4(&o),
            _ => section5(&o),
        }
    }
    println!("total {}", secs(t0.elapsed().as_secs_f64()));
}
