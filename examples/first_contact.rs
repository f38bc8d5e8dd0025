//! A thread's first contact with a `RankLocal` as the number of live threads grows: the time of
//! a fresh thread's first `get_or` (its own rank) and first `get_for` (another rank), with and
//! without a rank id taken before the timer; the live heap each thread that touched adds; and
//! the total time to start n threads that each touch once and stay alive.
//!
//! ```text
//! cargo run --release --example first_contact                      # 64,1024,4096,16384 live
//! cargo run --release --example first_contact -- --threads 64,1024 --rounds 32
//! ```
//!
//! Every arm runs in the same process, interleaved round by round; the table gives the median
//! and the range of the middle half (25th–75th percentile) in µs. The `thread_local` crate's
//! first `get_or` is the reference. The live threads hold a rank id, allocated once and touched
//! the structure (as the issue that asked for this measured them), then park.

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

#[path = "support/mod.rs"]
mod support;

use std::hint::black_box;
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ranklocal::{Baseline, Epoch, RankId, RankLocal};
use support::{live, parse_list};

#[global_allocator]
static ALLOC: support::Counting = support::Counting;

/// What the structures under test are: one of each, long-lived.
struct Set {
    epoch: RankLocal<u64, Epoch>,
    baseline: RankLocal<u64, Baseline>,
    tl: thread_local::ThreadLocal<u64>,
    /// A rank that has an instance in `epoch` (for the delegated lookups).
    other: RankId,
}

#[derive(Clone, Copy, Debug)]
enum Arm {
    /// `RankLocal<_, Epoch>::get_or` of the thread's own rank, after `RankId::current()`.
    EpochOwn,
    /// The same, on a thread that has no id yet (its first act in the crate is the touch).
    EpochOwnNoId,
    /// `RankLocal<_, Epoch>::get_for(other)`: a delegated lookup of an existing instance.
    EpochDelegated,
    /// `RankLocal<_, Baseline>::get_or` (the C++ design).
    BaselineOwn,
    /// `thread_local::ThreadLocal::get_or`.
    ThreadLocal,
}

const ARMS: [Arm; 5] = [
    Arm::EpochOwn,
    Arm::EpochOwnNoId,
    Arm::EpochDelegated,
    Arm::BaselineOwn,
    Arm::ThreadLocal,
];

impl Arm {
    fn label(self) -> &'static str {
        match self {
            Arm::EpochOwn => "Epoch, first get_or (id before)",
            Arm::EpochOwnNoId => "Epoch, first get_or (no id before)",
            Arm::EpochDelegated => "Epoch, first get_for (id before)",
            Arm::BaselineOwn => "Baseline, first get_or (id before)",
            Arm::ThreadLocal => "thread_local crate, first get_or",
        }
    }

    /// The arm's first contact, as a fresh thread makes it.
    fn touch(self, s: &Set) -> u64 {
        match self {
            Arm::EpochOwn | Arm::EpochOwnNoId => *s.epoch.get_or(|| 1),
            Arm::EpochDelegated => *s.epoch.get_for(s.other).expect("the other rank's instance"),
            Arm::BaselineOwn => *s.baseline.get_or(|| 1),
            Arm::ThreadLocal => *s.tl.get_or(|| 1),
        }
    }
}

/// Threads kept alive (parked) until the pool is dropped.
struct Pool {
    gate: Arc<(Mutex<bool>, Condvar)>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    fn new() -> Pool {
        Pool {
            gate: Arc::new((Mutex::new(false), Condvar::new())),
            threads: Vec::new(),
        }
    }

    /// Starts a thread that runs `f`, then parks until the pool is dropped.
    fn add(&mut self, f: impl FnOnce() + Send + 'static) {
        let gate = Arc::clone(&self.gate);
        let started = Arc::new(Barrier::new(2));
        let s2 = Arc::clone(&started);
        self.threads.push(
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    f();
                    s2.wait();
                    let (m, cv) = &*gate;
                    let mut done = m.lock().unwrap();
                    while !*done {
                        done = cv.wait(done).unwrap();
                    }
                })
                .expect("spawn"),
        );
        started.wait();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        *self.gate.0.lock().unwrap() = true;
        self.gate.1.notify_all();
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

/// A live thread as the measurement wants it: an id, one allocation, a touch of `arm`'s
/// structure (its own rank, or the delegated lookup), then parked.
fn live_thread(set: &Arc<Set>, arm: Arm) -> impl FnOnce() + Send + 'static {
    let set = Arc::clone(set);
    move || {
        black_box(RankId::current());
        black_box(vec![0u8; 64]);
        black_box(arm.touch(&set));
    }
}

/// One fresh thread's first contact through `arm`, timed inside it.
fn fresh(set: &Arc<Set>, arm: Arm) -> f64 {
    let set = Arc::clone(set);
    std::thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(move || {
            if !matches!(arm, Arm::EpochOwnNoId) {
                black_box(RankId::current());
            }
            black_box(vec![0u8; 64]);
            let start = Instant::now();
            let v = arm.touch(&set);
            let t = start.elapsed();
            assert_eq!(v, 1);
            t.as_nanos() as f64 / 1e3
        })
        .expect("spawn")
        .join()
        .unwrap()
}

fn quartiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.25), at(0.75))
}

fn main() {
    let mut threads = vec![64, 1024, 4096, 16384];
    let mut rounds = 64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => threads = parse_list(&args.next().expect("--threads LIST")),
            "--rounds" => rounds = args.next().expect("--rounds N").parse().expect("a number"),
            "--quick" => {
                threads = vec![64, 1024];
                rounds = 16;
            }
            other => panic!("unknown argument {other} (--threads LIST, --rounds N, --quick)"),
        }
    }
    let set = Arc::new(Set {
        epoch: RankLocal::new(),
        baseline: RankLocal::new(),
        tl: thread_local::ThreadLocal::new(),
        other: RankId::current(),
    });
    set.epoch.get_or(|| 1);

    println!(
        "first contact: µs for a fresh thread's first lookup, median [25th–75th percentile] of \
         {rounds} fresh threads per arm (interleaved), while N - 1 threads that touched are alive"
    );
    let mut table: Vec<Vec<String>> = vec![Vec::new(); ARMS.len()];
    let mut medians: Vec<Vec<f64>> = vec![Vec::new(); ARMS.len()];
    let mut pool = Pool::new();
    for &n in &threads {
        // live threads: a mix of every arm's kind, so each structure has N - 1 touchers
        while pool.threads.len() + 1 < n {
            let arm = ARMS[pool.threads.len() % ARMS.len()];
            pool.add(live_thread(&set, arm));
        }
        std::thread::sleep(Duration::from_millis(20));
        let mut samples = vec![Vec::new(); ARMS.len()];
        for r in 0..rounds {
            for j in 0..ARMS.len() {
                let a = (j + r) % ARMS.len();
                samples[a].push(fresh(&set, ARMS[a]));
            }
        }
        for (a, s) in samples.into_iter().enumerate() {
            let (med, lo, hi) = quartiles(s);
            medians[a].push(med);
            table[a].push(format!("{med:.2} [{lo:.2}–{hi:.2}]"));
        }
    }
    drop(pool);
    print!("{:<38}", "arm \\ live threads N");
    for n in &threads {
        print!(" | {n:>20}");
    }
    println!(" | growth (last / first)");
    let tl = medians[ARMS.len() - 1].clone();
    for (a, row) in table.iter().enumerate() {
        print!("{:<38}", ARMS[a].label());
        for c in row {
            print!(" | {c:>20}");
        }
        let m = &medians[a];
        println!(" | {:.2}x", m[m.len() - 1] / m[0]);
    }
    print!("{:<38}", "Epoch own / thread_local crate");
    for (e, t) in medians[0].iter().zip(&tl) {
        print!(" | {:>19.2}x", e / t);
    }
    println!();

    // Heap per live thread and the total time to start n threads that each touch once.
    println!(
        "\nstarting n threads that each touch once and stay alive: total ms, and live heap per \
         thread beyond what a thread that touches nothing adds (bytes)"
    );
    let kinds: [(&str, Option<Arm>); 4] = [
        ("nothing (spawn only)", None),
        ("Epoch, own get_or", Some(Arm::EpochOwn)),
        ("Epoch, delegated get_for", Some(Arm::EpochDelegated)),
        ("thread_local crate, get_or", Some(Arm::ThreadLocal)),
    ];
    let mut base_heap = vec![0f64; threads.len()];
    for (name, arm) in kinds {
        print!("{name:<28}");
        for (i, &n) in threads.iter().enumerate() {
            let set = Arc::new(Set {
                epoch: RankLocal::new(),
                baseline: RankLocal::new(),
                tl: thread_local::ThreadLocal::new(),
                other: set.other,
            });
            set.epoch.get_or(|| 1);
            let mut pool = Pool::new();
            pool.threads.reserve(n);
            let before = live();
            let start = Instant::now();
            for _ in 0..n {
                match arm {
                    None => pool.add(|| {
                        black_box(RankId::current());
                    }),
                    Some(arm) => pool.add(live_thread(&set, arm)),
                }
            }
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let per = (live() - before) as f64 / n as f64;
            if arm.is_none() {
                base_heap[i] = per;
            }
            print!(" | n = {n}: {ms:>8.1} ms, {:>6.0} B", per - base_heap[i]);
            drop(pool);
        }
        println!();
    }
}
