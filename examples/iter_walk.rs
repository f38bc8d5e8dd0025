//! What `iter()` costs next to first touches: (1) a first touch followed by `iter().next()`, after
//! a scoped (`with`) or a plain (`get`) first touch, as the map grows; (2) the latency of another
//! thread's first touches while one thread loops on scoped first touches and `iter().next()`.
//!
//! ```text
//! cargo run --release --example iter_walk
//! cargo run --release --example iter_walk -- --sizes 10000,40000,160000 --stall 250000
//! ```
//!
//! `iter()` takes the `RankLocal`'s writer lock, which every first touch takes too: what it does
//! under that lock is what other threads' first touches wait for. Medians over rounds, arms
//! interleaved; uses only the public API, so the same program measures any version.

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

#[path = "support/mod.rs"]
mod support;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use ranklocal::{on_behalf_of, ArcSwap, Backend, Epoch, Rank, RankLocal};
use support::{median, parse_list};

/// A map of `n` scoped instances of live ranks (kept in the returned `Vec`).
fn filled<B: Backend>(n: usize) -> (RankLocal<u64, B>, Vec<Rank>) {
    let rl = RankLocal::new();
    let ranks: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
    for r in &ranks {
        on_behalf_of(r.id(), || rl.with(|_| ()));
    }
    (rl, ranks)
}

/// µs for one first touch (`scoped`: `with`, else `get`) of a fresh rank plus `iter().next()`.
fn touch_then_iter<B: Backend>(rl: &RankLocal<u64, B>, keep: &mut Vec<Rank>, scoped: bool) -> f64 {
    let r = Rank::new();
    let start = Instant::now();
    on_behalf_of(r.id(), || {
        if scoped {
            rl.with(|v| black_box(*v));
        } else {
            black_box(rl.get());
        }
    });
    black_box(rl.iter().next());
    let t = start.elapsed().as_nanos() as f64 / 1e3;
    keep.push(r);
    t
}

fn part1<B: Backend>(sizes: &[usize], rounds: usize) {
    print!("{:<8}", B::NAME);
    let mut first = None;
    for &n in sizes {
        let (rl, mut ranks) = filled::<B>(n);
        let (mut w, mut g) = (Vec::new(), Vec::new());
        for i in 0..rounds {
            if i % 2 == 0 {
                w.push(touch_then_iter(&rl, &mut ranks, true));
                g.push(touch_then_iter(&rl, &mut ranks, false));
            } else {
                g.push(touch_then_iter(&rl, &mut ranks, false));
                w.push(touch_then_iter(&rl, &mut ranks, true));
            }
        }
        let (w, g) = (median(&w), median(&g));
        first.get_or_insert(w);
        print!(
            " | n = {n:>7}: after with {w:>9.2} µs, after get {g:>6.2} µs ({:.2}x)",
            w / g
        );
    }
    println!();
}

fn part2<B: Backend>(n: usize, secs: f64) {
    let (rl, _ranks) = filled::<B>(n);
    let stop = AtomicBool::new(false);
    let mut lat = std::thread::scope(|s| {
        let rl = &rl;
        let stop = &stop;
        s.spawn(move || {
            let mut keep = Vec::new();
            while !stop.load(Relaxed) {
                touch_then_iter(rl, &mut keep, true);
            }
        });
        let mut lat = Vec::new();
        let end = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < end {
            let r = Rank::new();
            let start = Instant::now();
            on_behalf_of(r.id(), || black_box(rl.get()));
            lat.push(start.elapsed().as_nanos() as f64 / 1e3);
        }
        stop.store(true, Relaxed);
        lat
    });
    lat.sort_by(f64::total_cmp);
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    println!(
        "{:<8} | n = {n}: {} first touches, mean {mean:.2} µs, median {:.2} µs, 99th {:.1} µs, \
         max {:.1} µs",
        B::NAME,
        lat.len(),
        lat[lat.len() / 2],
        lat[lat.len() * 99 / 100],
        lat[lat.len() - 1],
    );
}

fn main() {
    let mut sizes = vec![10_000, 40_000, 160_000];
    let mut stall = 250_000;
    let mut rounds = 201;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sizes" => sizes = parse_list(&args.next().expect("--sizes LIST")),
            "--stall" => stall = args.next().expect("--stall N").parse().expect("a number"),
            "--quick" => {
                sizes = vec![10_000, 40_000];
                stall = 40_000;
                rounds = 41;
            }
            other => panic!("unknown argument {other} (--sizes LIST, --stall N, --quick)"),
        }
    }
    println!(
        "1. a first touch of a fresh rank, then iter().next(): median µs over {rounds} rounds \
         (ratio: after with / after get)"
    );
    part1::<Epoch>(&sizes, rounds);
    part1::<ArcSwap>(&sizes, rounds);
    println!(
        "\n2. another thread's first touches (get) while one thread loops on scoped first \
         touches + iter().next(), for 2 s"
    );
    part2::<Epoch>(stall, 2.0);
    part2::<ArcSwap>(stall, 2.0);
}
