//! Shared by `examples/reclaim.rs`, `service.rs`, `first_contact.rs` and `iter_walk.rs` through `#[path]` (not an example
//! itself, not part of the crate): a counting global allocator (live bytes, peak, live blocks per
//! size class), one child process per measurement with a time cap, and number formatting.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Counting allocator
// ---------------------------------------------------------------------------------------------

/// Forwards to `System`, counting live bytes, their peak and (if [`histogram_on`] was called)
/// live blocks per requested size.
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static HIST_ON: AtomicBool = AtomicBool::new(false);

/// Requested sizes up to this many bytes are counted exactly, 8-byte granular.
const EXACT_MAX: usize = 4096;
const EXACT: usize = EXACT_MAX / 8 + 1;
/// Size classes: `EXACT` 8-byte steps (0..=4096), then one per power of two above.
pub const CLASSES: usize = EXACT + 65;
static HIST: [AtomicIsize; CLASSES] = [const { AtomicIsize::new(0) }; CLASSES];

fn class(size: usize) -> usize {
    if size <= EXACT_MAX {
        size.div_ceil(8)
    } else {
        EXACT + (usize::BITS - (size - 1).leading_zeros()) as usize
    }
}

/// The sizes class `i` counts, e.g. "25..32 B" or "4097..8192 B".
pub fn class_label(i: usize) -> String {
    if i < EXACT {
        if i == 0 {
            "0 B".into()
        } else {
            format!("{}..{} B", i * 8 - 7, i * 8)
        }
    } else {
        let hi = 1u128 << (i - EXACT);
        format!("{}..{} B", hi / 2 + 1, hi)
    }
}

/// The largest size class `i` counts (for bytes estimates).
pub fn class_max(i: usize) -> u64 {
    if i < EXACT {
        i as u64 * 8
    } else {
        1u64 << (i - EXACT).min(63)
    }
}

impl Counting {
    #[inline]
    fn add(size: usize, blocks: isize) {
        let now =
            LIVE.fetch_add(size as isize * blocks, Ordering::Relaxed) + size as isize * blocks;
        if blocks > 0 {
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        if HIST_ON.load(Ordering::Relaxed) {
            HIST[class(size)].fetch_add(blocks, Ordering::Relaxed);
        }
    }
}

// SAFETY: forwards every call to `System` with the same arguments, only counting on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Self::add(layout.size(), 1);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Self::add(layout.size(), 1);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        Self::add(layout.size(), -1);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            Self::add(layout.size(), -1);
            Self::add(new_size, 1);
        }
        p
    }
}

/// Live heap bytes now (allocated and not freed, by requested size).
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Restarts the peak at the live heap now, and returns the live heap now.
pub fn reset_peak() -> isize {
    let now = LIVE.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// Peak live heap since the last [`reset_peak`].
pub fn peak() -> isize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts counting live blocks per size class (call first thing in `main`: a block allocated
/// before is not counted, and its free counts -1).
pub fn histogram_on() {
    HIST_ON.store(true, Ordering::Relaxed);
}

/// Live blocks per size class now.
pub fn histogram() -> Vec<isize> {
    HIST.iter().map(|c| c.load(Ordering::Relaxed)).collect()
}

// ---------------------------------------------------------------------------------------------
// One child process per measurement
// ---------------------------------------------------------------------------------------------

/// What a child measured: `key=value` pairs from its `@result` line.
#[derive(Debug, Clone, Default)]
pub struct Fields(pub Vec<(String, String)>);

impl Fields {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
    pub fn f64(&self, key: &str) -> f64 {
        self.get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    }
}

/// How a child ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// It printed its result and exited successfully, after `secs` of wall time (setup included).
    Done { fields: Fields, secs: f64 },
    /// Killed at the cap; `progress` is its last `@progress` line, if any.
    Capped { progress: Option<String> },
    /// It failed (panicked, crashed, printed no result).
    Failed(String),
}

/// Runs this executable again with `args` (the child side calls [`report`]) and waits at most
/// `cap` for it; a child still running then is killed.
pub fn run_child(args: &[String], cap: Duration) -> Outcome {
    let exe = std::env::current_exe().expect("current_exe");
    let t0 = Instant::now();
    let mut child = match Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("spawn: {e}")),
    };
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = t0 + cap;
    let mut fields = None;
    let mut progress = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(rest) = line.strip_prefix("@result ") {
                    fields = Some(Fields(
                        rest.split_whitespace()
                            .filter_map(|kv| kv.split_once('='))
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                    ));
                } else if let Some(rest) = line.strip_prefix("@progress ") {
                    progress = Some(rest.to_string());
                } else {
                    eprintln!("  child: {line}");
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = reader.join();
                return Outcome::Capped { progress };
            }
        }
    }
    let status = child.wait();
    let secs = t0.elapsed().as_secs_f64();
    let _ = reader.join();
    match (fields, status) {
        (Some(fields), Ok(s)) if s.success() => Outcome::Done { fields, secs },
        (_, Ok(s)) => Outcome::Failed(format!("child {args:?}: {s}")),
        (_, Err(e)) => Outcome::Failed(format!("child {args:?}: {e}")),
    }
}

/// Child side: prints the result line the parent parses, then exits at once (skipping the
/// teardown of whatever the measurement built: it is not measured, and can be slow).
pub fn report<K: AsRef<str>>(fields: &[(K, String)]) -> ! {
    let mut s = String::from("@result");
    for (k, v) in fields {
        s.push(' ');
        s.push_str(k.as_ref());
        s.push('=');
        s.push_str(v);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{s}");
    let _ = out.flush();
    std::process::exit(0);
}

/// Child side: how far it got (shown if the parent kills it at the cap).
pub fn progress(what: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "@progress {what}");
    let _ = out.flush();
}

// ---------------------------------------------------------------------------------------------
// Formatting and small helpers
// ---------------------------------------------------------------------------------------------

/// Seconds as "712 ns", "3.40 µs", "1.23 ms", "714 ms", "67.1 s".
pub fn secs(s: f64) -> String {
    if !s.is_finite() {
        return "-".into();
    }
    let (v, unit) = if s < 1e-6 {
        (s * 1e9, "ns")
    } else if s < 1e-3 {
        (s * 1e6, "µs")
    } else if s < 1.0 {
        (s * 1e3, "ms")
    } else {
        (s, "s")
    };
    if v < 10.0 {
        format!("{v:.2} {unit}")
    } else if v < 100.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

/// Bytes as "930 B", "12.3 KiB", "58.0 MiB" (signed).
pub fn bytes(b: f64) -> String {
    if !b.is_finite() {
        return "-".into();
    }
    let sign = if b < 0.0 { "-" } else { "" };
    let a = b.abs();
    if a < 1024.0 {
        format!("{sign}{a:.0} B")
    } else if a < 1024.0 * 1024.0 {
        format!("{sign}{:.1} KiB", a / 1024.0)
    } else if a < 1024.0 * 1024.0 * 1024.0 {
        format!("{sign}{:.1} MiB", a / (1024.0 * 1024.0))
    } else {
        format!("{sign}{:.2} GiB", a / (1024.0 * 1024.0 * 1024.0))
    }
}

/// `n` with thousands separators: 1,000,000.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A ratio as "1.2x", "340x" ("-" if undefined).
pub fn ratio(r: f64) -> String {
    if !r.is_finite() {
        "-".into()
    } else if r < 10.0 {
        format!("{r:.2}x")
    } else if r < 100.0 {
        format!("{r:.1}x")
    } else {
        format!("{r:.0}x")
    }
}

/// A comma-separated list of counts (`64,1024,4_096`), or a clear panic.
pub fn parse_list(s: &str) -> Vec<usize> {
    s.split(',')
        .map(|x| {
            x.trim()
                .replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("not a list of counts: {s:?}"))
        })
        .collect()
}

/// Median of the finite values (NaN if none).
pub fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// CPU model, cores and the load average now (the machine is shared: say how busy it was).
pub fn machine() -> String {
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
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    format!("{cpu}, {cores} cores, load {load}")
}

/// Prints `msg` and exits with status 2 (bad command line).
pub fn die(prog: &str, msg: &str) -> ! {
    eprintln!("{prog}: {msg}");
    std::process::exit(2);
}
