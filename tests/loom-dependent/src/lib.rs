//! A dependent's code, model-checked with loom by `tests/model.rs`: per-rank step counters that a
//! rank's own thread and its delegates (`on_behalf_of`) bump, and that anyone reads with
//! `with_for`.
//!
//! Under `--cfg loom` the code takes its atomics from loom, as any loom-checked crate does;
//! ranklocal (with its `loom` feature) then takes its own from loom too.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

use ranklocal::{RankId, RankLocal};

/// Steps per rank.
#[derive(Default)]
pub struct Steps {
    per_rank: RankLocal<AtomicU64>,
}

impl Steps {
    pub fn new() -> Steps {
        Steps::default()
    }

    /// Counts one step of the current rank: the thread's own, or the one it acts for.
    pub fn record(&self) {
        bump(self.per_rank.get());
    }

    /// The steps `rank` made (0 if it made none).
    pub fn of(&self, rank: RankId) -> u64 {
        self.per_rank
            .with_for(rank, |n| n.load(Ordering::SeqCst))
            .unwrap_or(0)
    }
}

/// Adds one to `n`.
#[cfg(not(feature = "planted-bug"))]
fn bump(n: &AtomicU64) {
    n.fetch_add(1, Ordering::SeqCst);
}

/// The planted bug: a load then a store, so a rank's thread and its delegate bumping at once lose
/// a step.
#[cfg(feature = "planted-bug")]
fn bump(n: &AtomicU64) {
    let v = n.load(Ordering::SeqCst);
    n.store(v + 1, Ordering::SeqCst);
}
