//! Peak live heap of a `static` used by many short-lived threads, 8-16 alive at a time (issue 12):
//! through `with` (scoped: exited threads' instances are reclaimed by later first touches) next
//! to `get` (each instance is kept until `&mut` or drop: grows with the number of threads).
//!
//! `cargo run --release --example churn -- [THREADS]` (default 100000).

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use ranklocal::RankLocal;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to `System`, only counting on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now =
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// 1 KiB per rank.
struct Buf(#[allow(dead_code)] Box<[u8; 1024]>);
impl Default for Buf {
    fn default() -> Buf {
        Buf(Box::new([1; 1024]))
    }
}

static SCOPED: RankLocal<Buf> = RankLocal::new();
static PLAIN: RankLocal<Buf> = RankLocal::new();

/// Runs `threads` threads in waves of 8..=16 alive, each calling `touch` once; returns (peak live
/// heap above the start, live heap above the start at the end, len at the end).
fn churn(threads: usize, touch: fn()) -> (isize, isize, usize, f64) {
    let start = LIVE.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let t0 = std::time::Instant::now();
    let mut done = 0;
    let mut wave = 8;
    while done < threads {
        let n = wave.min(threads - done);
        let hs: Vec<_> = (0..n).map(|_| std::thread::spawn(touch)).collect();
        for h in hs {
            h.join().unwrap();
        }
        done += n;
        wave = if wave == 16 { 8 } else { wave + 1 };
    }
    let secs = t0.elapsed().as_secs_f64();
    (
        PEAK.load(Ordering::Relaxed) - start,
        LIVE.load(Ordering::Relaxed) - start,
        0,
        secs,
    )
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |a| a.parse().expect("THREADS: a number"));
    println!("{threads} threads, 8-16 alive at a time, one 1 KiB instance per rank");
    let (peak, end, _, secs) = churn(threads, || {
        SCOPED.with(|b| {
            std::hint::black_box(b);
        })
    });
    println!(
        "with: peak live heap {:>10} B, at the end {:>10} B, len {:>6} ({secs:.1} s)",
        peak,
        end,
        SCOPED.len()
    );
    let (peak, end, _, secs) = churn(threads, || {
        std::hint::black_box(PLAIN.get());
    });
    println!(
        "get:  peak live heap {:>10} B, at the end {:>10} B, len {:>6} ({secs:.1} s)",
        peak,
        end,
        PLAIN.len()
    );
}
