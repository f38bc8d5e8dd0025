//! Runs one arm of `benches/arms.rs` a given number of times on the main thread, for instruction
//! counting with callgrind (repeatable on a noisy machine):
//!
//! ```text
//! cargo build --release --example hotpath
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/hotpath "owner get" "RankLocal<Epoch>" 100000
//! ```
//!
//! Per-call cost = (Ir at 2N - Ir at N) / N; `papers/callgrind.sh` does exactly that for every arm.

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

#[path = "../benches/arms.rs"]
mod arms;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let all: Vec<arms::Arm> = arms::lookup_arms()
        .into_iter()
        .chain(arms::iter_arms())
        .chain(arms::miss_arms())
        .collect();
    if args.len() != 3 {
        eprintln!("usage: hotpath GROUP ARM ITERS\narms:");
        for a in &all {
            eprintln!("  {:?} {:?}", a.group, a.name);
        }
        std::process::exit(2);
    }
    let arm = all
        .iter()
        .find(|a| a.group == args[0] && a.name == args[1])
        .unwrap_or_else(|| panic!("no arm {:?} {:?}", args[0], args[1]));
    let iters: u64 = args[2].parse().expect("ITERS");
    let ranks = if arm.group.contains("miss") { 1024 } else { 64 };
    let world = arms::World::new(arms::spare_ranks(ranks));
    world.touch_own();
    (arm.op)(&world, 0, 1000);
    (arm.op)(&world, 0, iters);
}
