//! What a loop of documented uses keeps: live values (a `Drop` counter) and `len` after many
//! short-lived threads, 8 alive at a time, in three loops:
//!
//! - `nested`: every worker's first touch happens inside another `RankLocal`'s read
//!   (`other.with_for(r, |_| map.with(..))`), and nothing else ever calls the map;
//! - `monitor`: workers `with` their value while a monitor thread calls `iter()` every
//!   millisecond;
//! - `overlap`: workers `with_own` their value (dropped at their exit) while a monitor always
//!   holds at least one `Iter` (two overlapping iterators, swapped in turn).
//!
//! After the workers, each loop reports the figures before and after one `reclaim_exited` made
//! outside every read.
//!
//! `cargo run --release --example growth -- [THREADS...]` (default 1000 4000 16000).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use ranklocal::{RankId, RankLocal};

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// A value that counts itself.
struct Counted(AtomicU64);

impl Default for Counted {
    fn default() -> Counted {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Counted(AtomicU64::new(1))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs `threads` workers, 8 alive at a time, each calling `touch` once.
fn workers(threads: usize, touch: impl Fn() + Send + Sync + 'static) {
    let touch = Arc::new(touch);
    let mut done = 0;
    while done < threads {
        let n = 8.min(threads - done);
        let hs: Vec<_> = (0..n)
            .map(|_| {
                let t = Arc::clone(&touch);
                thread::spawn(move || t())
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        done += n;
    }
}

/// Prints live values (made since `base`) and `len`, before and after one `reclaim_exited`.
fn report(name: &str, threads: usize, map: &RankLocal<Counted>, base: usize) {
    let live = || LIVE.load(Ordering::Relaxed) - base;
    let (live_before, len) = (live(), map.len());
    map.reclaim_exited();
    let (live_after, len_after) = (live(), map.len());
    println!(
        "{name:8} {threads:>6} threads: live {live_before:>6}, len {len:>6}; after one reclaim_exited: \
         live {live_after:>6}, len {len_after:>6}"
    );
}

fn nested(threads: usize) {
    let base = LIVE.load(Ordering::Relaxed);
    let map: &'static RankLocal<Counted> = Box::leak(Box::new(RankLocal::new()));
    let other: &'static RankLocal<u8> = Box::leak(Box::new(RankLocal::new()));
    other.with(|_| ());
    let r = RankId::current();
    workers(threads, move || {
        other.with_for(r, |_| map.with(|v| v.0.fetch_add(1, Ordering::Relaxed)));
    });
    report("nested", threads, map, base);
}

fn monitor(threads: usize, own: bool) {
    let base = LIVE.load(Ordering::Relaxed);
    let map: &'static RankLocal<Counted> = Box::leak(Box::new(RankLocal::new()));
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let m = thread::spawn(move || {
        let mut sum = 0u64;
        if own {
            // two overlapping iterators: one is always alive
            let mut held = map.iter();
            while !stop.load(Ordering::Relaxed) {
                let next = map.iter();
                sum += held.map(|(_, v)| v.0.load(Ordering::Relaxed)).sum::<u64>();
                held = next;
                thread::sleep(Duration::from_millis(1));
            }
        } else {
            while !stop.load(Ordering::Relaxed) {
                sum += map
                    .iter()
                    .map(|(_, v)| v.0.load(Ordering::Relaxed))
                    .sum::<u64>();
                thread::sleep(Duration::from_millis(1));
            }
        }
        sum
    });
    workers(threads, move || {
        if own {
            map.with_own(|v| v.0.fetch_add(1, Ordering::Relaxed));
        } else {
            map.with(|v| v.0.fetch_add(1, Ordering::Relaxed));
        }
    });
    stop.store(true, Ordering::Relaxed);
    m.join().unwrap();
    report(if own { "overlap" } else { "monitor" }, threads, map, base);
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("THREADS"))
        .collect();
    let sizes = if args.is_empty() {
        vec![1000, 4000, 16000]
    } else {
        args
    };
    for &n in &sizes {
        nested(n);
    }
    for &n in &sizes {
        monitor(n, false);
    }
    for &n in &sizes {
        monitor(n, true);
    }
}
