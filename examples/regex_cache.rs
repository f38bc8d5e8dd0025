//! A per-thread search cache shaped like regex's (a ~400 KB value per thread, a guard held across
//! a search and across an iterator of matches), on the `thread_local` crate and on `RankLocal`
//! with each lifecycle, side by side in one run:
//!
//! - live heap after 10,000 threads run one after another, and after 10,000 threads run 64 at a
//!   time (the map still alive), then the heap left after the map's drop;
//! - microseconds per spawn + one search + one iteration + join (sequential threads).
//!
//! `cargo run --release --example regex_cache -- [THREADS]` (default 10000).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use ranklocal::{OwnRef, RankLocal};
use thread_local::ThreadLocal;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to `System` with the same arguments, only counting on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The search cache: ~400 KB, warmed by the searches that use it (as a lazy DFA's state table).
struct Cache {
    states: Vec<u32>,
    warmed: usize,
}

const STATES: usize = 100_000; // 400 KB

impl Cache {
    fn new() -> Cache {
        Cache {
            states: vec![0; STATES],
            warmed: 0,
        }
    }

    /// A search: fills the states it meets for the first time (the warm-up a fresh cache pays).
    fn search(&mut self, hay: &[u8]) -> Option<usize> {
        let mut s = 0usize;
        for (i, &b) in hay.iter().enumerate() {
            s = (s * 31 + b as usize + 1) % STATES;
            if self.states[s] == 0 {
                self.states[s] = (i as u32) | 1;
                self.warmed += 1;
            }
            if b == b'!' {
                return Some(i);
            }
        }
        None
    }
}

/// An iterator of matches that holds the cache borrowed for its whole life (regex's `find_iter`
/// holds its searcher's cache the same way).
struct Matches<'h, G: std::ops::DerefMut<Target = Cache>> {
    cache: G,
    hay: &'h [u8],
    at: usize,
}

impl<G: std::ops::DerefMut<Target = Cache>> Iterator for Matches<'_, G> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let at = self.at;
        let i = self.cache.search(self.hay.get(at..)?)?;
        self.at = at + i + 1;
        Some(at + i)
    }
}

const HAY: &[u8] = b"a haystack with a few matches! in it! and more text after the matches! \
    to make the search walk a few hundred states of the cache before it finds the next one! end";

/// One use, as a regex user's thread makes it: a search, then an iteration, the cache held across
/// each.
fn use_cache<G: std::ops::DerefMut<Target = Cache>>(g: G) -> usize {
    let mut m = Matches {
        cache: g,
        hay: HAY,
        at: 0,
    };
    let first = m.cache.search(HAY).unwrap_or(0);
    first + m.by_ref().count()
}

/// The three ways to keep the cache.
trait Arm: Send + Sync + 'static {
    const NAME: &'static str;
    fn new() -> Self;
    fn run(&self) -> usize;
}

struct TlCrate(ThreadLocal<RefCell<Cache>>);

impl Arm for TlCrate {
    const NAME: &'static str = "thread_local crate";
    fn new() -> Self {
        TlCrate(ThreadLocal::new())
    }
    fn run(&self) -> usize {
        use_cache(self.0.get_or(|| RefCell::new(Cache::new())).borrow_mut())
    }
}

struct Recycling(RankLocal<RefCell<Cache>>);

impl Arm for Recycling {
    const NAME: &'static str = "RankLocal::recycling()";
    fn new() -> Self {
        Recycling(RankLocal::recycling())
    }
    fn run(&self) -> usize {
        let g: OwnRef<'_, RefCell<Cache>> = self.0.get_own_or(|| RefCell::new(Cache::new()));
        let n = use_cache(g.borrow_mut());
        n
    }
}

struct New(RankLocal<RefCell<Cache>>);

impl Arm for New {
    const NAME: &'static str = "RankLocal::new()";
    fn new() -> Self {
        New(RankLocal::new())
    }
    fn run(&self) -> usize {
        let g = self.0.get_own_or(|| RefCell::new(Cache::new()));
        let n = use_cache(g.borrow_mut());
        n
    }
}

fn mb(b: isize) -> String {
    format!("{:.2} MB", b as f64 / 1e6)
}

/// Runs `threads` threads, `alive` at a time; returns (µs per thread, live heap growth with the
/// map alive, heap growth left after its drop).
fn measure<A: Arm>(threads: usize, alive: usize) -> (f64, isize, isize) {
    let base = LIVE.load(Ordering::Relaxed);
    let arm = Arc::new(A::new());
    let t0 = Instant::now();
    let mut done = 0;
    while done < threads {
        let wave = alive.min(threads - done);
        let together = Arc::new(Barrier::new(wave));
        let hs: Vec<_> = (0..wave)
            .map(|_| {
                let (arm, together) = (Arc::clone(&arm), Arc::clone(&together));
                std::thread::spawn(move || {
                    let n = arm.run();
                    together.wait(); // `wave` threads alive at once
                    n
                })
            })
            .collect();
        for h in hs {
            assert!(h.join().unwrap() > 0);
        }
        done += wave;
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / threads as f64;
    let with_map = LIVE.load(Ordering::Relaxed) - base;
    drop(arm);
    let after = LIVE.load(Ordering::Relaxed) - base;
    (us, with_map, after)
}

/// One round of an arm: (µs per thread, heap with 1 alive, heap with 64 alive, heap left).
fn round<A: Arm>(threads: usize) -> [f64; 4] {
    let (us, seq, seq_after) = measure::<A>(threads, 1);
    let (_, par, par_after) = measure::<A>(threads, 64);
    [us, seq as f64, par as f64, seq_after.max(par_after) as f64]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("THREADS"))
        .unwrap_or(10_000);
    let rounds: usize = std::env::args()
        .nth(2)
        .map(|a| a.parse().expect("ROUNDS"))
        .unwrap_or(5);
    println!(
        "{threads} threads, each: spawn, one search and one iteration on its ~400 KB cache, join; \
         medians of {rounds} interleaved rounds"
    );
    let mut rows: [Vec<[f64; 4]>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..rounds {
        rows[0].push(round::<TlCrate>(threads));
        rows[1].push(round::<Recycling>(threads));
        rows[2].push(round::<New>(threads));
    }
    println!(
        "{:<24} {:>10} {:>15} {:>15} {:>11}",
        "arm", "us/thread", "heap (1 alive)", "heap (64 alive)", "after drop"
    );
    let names = [TlCrate::NAME, Recycling::NAME, New::NAME];
    for (name, r) in names.iter().zip(&rows) {
        let col = |i: usize| median(r.iter().map(|x| x[i]).collect());
        println!(
            "{:<24} {:>10.1} {:>15} {:>15} {:>11}",
            name,
            col(0),
            mb(col(1) as isize),
            mb(col(2) as isize),
            mb(col(3) as isize)
        );
    }
}
