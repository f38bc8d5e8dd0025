//! One value per thread — per *rank* — that a worker acting on behalf of that thread can reach:
//! a lock-free Rust port of PyTorch c10d's `RankLocal<T>`.
//!
//! - [`RankLocal<T>`]: one `T` per rank, created on first use. An ordinary thread gets its own
//!   instance through a thread-local cache; a thread inside [`on_behalf_of`]`(rank, ..)` (or
//!   polling a future wrapped with [`OnBehalfExt::on_behalf_of`]) gets `rank`'s instance.
//! - [`rank_local!`]: statics declared like `std::thread_local!`, with a thread-local slot each.
//! - Backends: [`Epoch`] (default; copy-on-write snapshots reclaimed by crossbeam-epoch),
//!   [`ArcSwap`] (the same snapshots behind `arc-swap`; feature `arc-swap`) and [`Baseline`] (the
//!   C++ `RwLock` + `HashMap` design, for comparison). Readers on `Epoch`/`ArcSwap` never lock,
//!   never write a shared cache line and never allocate.
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
//! The design, its invariants and its correctness argument are in [`design`]; measured results
//! (tables, plots, the commands behind every figure, and where the design loses) are in
//! [`papers/results.md`][results] in the repository (not shipped in the published crate).
//!
//! # Why `T: Send + Sync`
//!
//! A thread-local value is only ever touched by its own thread, so `std::thread_local!` accepts
//! any `T`. A rank's instance is not: a delegate inside [`on_behalf_of`] gets `&T` to the rank's
//! instance while the rank's own thread may hold `&T` to it too, so `T` must be `Sync`; and an
//! instance created on one thread is dropped (by [`RankLocal::clear`],
//! [`RankLocal::purge_exited`] or with the `RankLocal`) or handed out by value or `&mut` (by
//! `into_iter`, `iter_mut`) on whichever thread does that, so `T` must be `Send`. The C++ says
//! "RankLocal doesn't make the underlying objects thread-safe" and leaves that to the caller;
//! Rust checks it. For mutable per-rank state use `Mutex`, `RwLock` or atomics (not `RefCell`
//! or `Cell`); state that no other thread may ever see belongs in `std::thread_local!`.
//!
//! # Features
//!
//! - `arc-swap` (off by default): the [`ArcSwap`] backend. It exists to be measured against
//!   [`Epoch`]; without the feature, arc-swap is not compiled.
//!
//! # Comparison with similar crates
//!
//! - **`std::thread_local!`**: one value per OS thread, dropped when the thread exits, reachable
//!   from no other thread. `ranklocal`'s thread cache is a `thread_local!`; use the macro itself
//!   when no other thread ever needs the value.
//! - **[`thread_local`]** (`ThreadLocal<T>`): one value per thread in a per-object table indexed
//!   by a thread id. Ids are recycled: a value is *not* dropped when its thread exits (only by
//!   `clear` or with the `ThreadLocal`), and a later thread that gets the same id inherits the
//!   dead thread's value (its issues
//!   [#75](https://github.com/Amanieu/thread_local-rs/issues/75),
//!   [#78](https://github.com/Amanieu/thread_local-rs/issues/78)/[#79](https://github.com/Amanieu/thread_local-rs/issues/79)).
//!   Other threads reach the values only by iterating. `ranklocal` keys instances by a
//!   [`RankId`] that is never reused, lets another thread act as a rank, and drops the instances
//!   of exited ranks with `purge_exited`; its owner lookup costs about the same.
//! - **C++ `c10d::RankLocal<T>`** (the original): a `thread_local` pointer cache in front of a
//!   global `std::shared_mutex` + `unordered_map`. The cache is checked before the delegation
//!   context, so a thread that touched its own instance returns it even while working for
//!   another rank; entries are never freed; every delegated lookup takes the read lock, whose
//!   shared reader count every reader writes; `T` is built under the exclusive lock. The
//!   [`Baseline`] backend is that design, kept for comparison; `ranklocal` fixes all four.
//! - **[`arc-swap`]**: a general atomic `Arc`. Here it is an alternative snapshot backend
//!   ([`ArcSwap`]), measured side by side with [`Epoch`]; its loads write a thread-local debt
//!   slot, as an epoch pin writes a thread-local epoch.
//! - **[`left-right`]**: two copies of the data; readers never wait, writers wait for readers to
//!   leave the old copy. `ranklocal`'s writers never wait for readers (the old snapshot is retired
//!   to the collector), which suits rare inserts and frequent reads.
//! - **[`dashmap`]**: a map sharded under `RwLock`s; every read still writes its shard's shared
//!   reader count. **[`papaya`]**: a lock-free hash map with its own reclamation and in-place
//!   inserts (no O(n) copy per insert, where `ranklocal`'s first touch copies the snapshot). For
//!   few, rarely inserted keys read from every thread, a snapshot plus a thread cache is simpler
//!   and a repeated lookup is a thread-local hit.
//! - **A dense array indexed by rank id** (append-only): the strongest rival when ids are dense
//!   and bounded, a bounds check and a load per lookup. The thread cache reaches the same order
//!   of cost without needing dense, bounded ids; `papers/results.md` measures both.
//!
//! [results]: https://github.com/ranklocal/ranklocal/blob/main/papers/results.md
//! [`thread_local`]: https://docs.rs/thread_local
//! [`arc-swap`]: https://docs.rs/arc-swap
//! [`left-right`]: https://docs.rs/left-right
//! [`dashmap`]: https://docs.rs/dashmap
//! [`papaya`]: https://docs.rs/papaya
#![cfg_attr(
    not(all(feature = "arc-swap", not(loom))),
    doc = "[`ArcSwap`]: https://docs.rs/ranklocal/latest/ranklocal/struct.ArcSwap.html"
)]
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

#[cfg(all(feature = "arc-swap", not(loom)))]
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
