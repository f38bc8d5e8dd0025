//! A dependent's code, model-checked with loom by `tests/model.rs`: per-rank counters that a
//! rank's own thread and its delegates (`on_behalf_of`) bump, and that anyone reads with
//! `with_for` — in a `RankLocal` the code owns, in a `static RankLocal` and in a `rank_local!`
//! static.
//!
//! Under `--cfg loom` the code takes its atomics from loom, as any loom-checked crate does;
//! ranklocal (with its `loom` feature) then takes its own from loom too, and builds its statics
//! afresh in each execution of a model.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

use ranklocal::{rank_local, RankId, RankLocal};

/// Bytes each rank sent: bumped by the rank's thread and by workers acting for it.
pub static BYTES_SENT: RankLocal<AtomicU64> = RankLocal::new();

rank_local! {
    /// Messages each rank sent.
    pub static MESSAGES: AtomicU64 = AtomicU64::new(0);
}

/// Sends a message of `bytes` bytes for the current rank: the thread's own, or the one it acts
/// for.
pub fn send(bytes: u64) {
    add(BYTES_SENT.get(), bytes);
    add(MESSAGES.get(), 1);
}

/// The bytes `rank` sent.
pub fn bytes_sent(rank: RankId) -> u64 {
    BYTES_SENT
        .with_for(rank, |n| n.load(Ordering::SeqCst))
        .unwrap_or(0)
}

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
        add(self.per_rank.get(), 1);
    }

    /// The steps `rank` made (0 if it made none).
    pub fn of(&self, rank: RankId) -> u64 {
        self.per_rank
            .with_for(rank, |n| n.load(Ordering::SeqCst))
            .unwrap_or(0)
    }
}

/// Adds `k` to `n`.
#[cfg(not(feature = "planted-bug"))]
fn add(n: &AtomicU64, k: u64) {
    n.fetch_add(k, Ordering::SeqCst);
}

/// The planted bug: a load then a store, so a rank's thread and its delegate adding at once lose
/// one of the two.
#[cfg(feature = "planted-bug")]
fn add(n: &AtomicU64, k: u64) {
    let v = n.load(Ordering::SeqCst);
    n.store(v + k, Ordering::SeqCst);
}
