//! One value per thread — per *rank* — that a worker acting on behalf of that thread can reach:
//! a lock-free Rust port of PyTorch c10d's `RankLocal<T>`.
//!
//! - [`RankLocal<T>`]: one `T` per rank, created on first use. An ordinary thread gets its own
//!   instance through a thread-local cache; a thread inside [`on_behalf_of`]`(rank, ..)` (or
//!   polling a future wrapped with [`OnBehalfExt::on_behalf_of`]) gets `rank`'s instance.
//! - [`rank_local!`]: statics declared like `std::thread_local!`, with a thread-local slot each.
//! - Backends: [`Epoch`] (default; snapshots of a persistent radix trie, reclaimed through
//!   crossbeam-epoch),
//!   [`ArcSwap`] (the same snapshots behind `arc-swap`) and [`Baseline`] (the C++ `RwLock` +
//!   `HashMap` design, for comparison). Readers on `Epoch`/`ArcSwap` never lock, never write a
//!   shared cache line and never allocate.
//!
//! ```
//! use ranklocal::{on_behalf_of, RankId, RankLocal};
//! use std::cell::RefCell;
//! use std::sync::Mutex;
//!
//! // per-rank state shared between "forward" (the rank's thread) and "backward" (a worker)
//! static PENDING: RankLocal<Mutex<Vec<u32>>> = RankLocal::new();
//!
//! PENDING.get().lock().unwrap().push(1); // forward: this thread's own instance
//! let rank = RankId::current();
//! let worker = std::thread::spawn(move || {
//!     on_behalf_of(rank, || PENDING.get().lock().unwrap().pop()) // backward, for `rank`
//! });
//! assert_eq!(worker.join().unwrap(), Some(1));
//! ```
//!
//! The design, its invariants and its correctness argument are in [`design`]; measured results in
//! `papers/results.md`.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backend;
mod cache;
mod delegation;
mod identity;
#[cfg(not(loom))]
mod key;
mod primitive;
mod rank_local;
mod snapshot;
mod trie;

#[cfg(not(loom))]
pub use crate::backend::ArcSwap;
pub use crate::backend::{Backend, Baseline, Epoch};
pub use crate::delegation::{on_behalf_of, OnBehalfExt, OnBehalfOf};
pub use crate::identity::RankId;
#[cfg(not(loom))]
pub use crate::key::RankLocalKey;
pub use crate::rank_local::{Iter, IterMut, RankLocal};

#[doc(hidden)]
pub use crate::primitive::__private;

#[doc = include_str!("../papers/design.md")]
pub mod design {}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
