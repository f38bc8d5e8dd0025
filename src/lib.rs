//! One value per thread — per *rank* — that a worker acting on behalf of that thread can reach:
//! a lock-free Rust port of PyTorch c10d's `RankLocal<T>`.
//!
//! - [`RankLocal<T>`]: one `T` per rank, created on first use. An ordinary thread gets its own
//!   instance through a thread-local cache; a thread inside [`on_behalf_of`]`(rank, ..)` (or
//!   polling a future wrapped with [`OnBehalfExt::on_behalf_of`]) gets `rank`'s instance. A rank
//!   is an OS thread or a [`Rank`], a logical rank not tied to a thread.
//! - [`rank_local!`]: statics declared like `std::thread_local!`, with a thread-local slot each.
//! - Backends: [`Epoch`] (default; copy-on-write snapshots reclaimed by crossbeam-epoch),
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
//! # Ranks that are not threads
//! Every OS thread is implicitly a rank. A [`Rank`] is an owned *logical* rank — one per request,
//! task or simulated process — with an id from the same counter ([`Rank::id`]); act as it with
//! [`on_behalf_of`]`(rank.id(), ..)` on any thread. Dropping the `Rank` makes the rank *exited*,
//! as a thread's rank exits when the thread ends.
//!
//! # Exited ranks
//! Acting for a rank that has exited (its thread ended, its `Rank` was dropped) is allowed and
//! behaves as for a live rank: `get_for` returns its instance, and `get` inside
//! `on_behalf_of(exited, ..)` returns it (or creates one, owned by that rank); the next
//! [`RankLocal::purge_exited`] drops every instance of an exited rank, after which `get_for` is
//! `None` and acting for the rank again starts from a fresh `init`.
//!
//! # Carrying the rank into spawned work
//! The current rank is a property of the *thread* for the duration of an [`on_behalf_of`] call, or
//! of a *future* wrapped with [`OnBehalfExt::on_behalf_of`]; nothing else carries it. Work handed
//! to another thread, or a future polled outside the call, runs as whatever rank its runner acts
//! for — usually the runner's own — and its `get()` quietly creates an instance for that rank.
//! Carry it with [`RankId::bind`] (closures) or [`OnBehalfExt::in_current_rank`] (futures), the
//! conventions of `tracing`'s `in_scope` / `.in_current_span()`:
//!
//! | work started inside `on_behalf_of(r, ..)` or a wrapped future | runs as | carry `r` with |
//! |---|---|---|
//! | code it calls; futures it `.await`s; `tokio::task::block_in_place` | `r` | (carried) |
//! | `std::thread::spawn` | the new thread's own rank | `thread::spawn(RankId::current().bind(f))` |
//! | `std::thread::scope` → `s.spawn` | the scoped thread's own rank | `s.spawn(RankId::current().bind(f))` |
//! | `rayon::spawn`, `join`, `scope`, `par_iter` ¹ | not reliably `r`: mostly a pool thread's own rank; a closure rayon runs on the calling pool thread (`join`'s first) does run as `r`, and so may an unrelated job that thread steals while it waits in `join` | bind each closure: `rayon::spawn(RankId::current().bind(f))`, `join(RankId::current().bind(a), RankId::current().bind(b))` |
//! | `tokio::spawn`, multi-thread runtime | the worker thread's own rank | `tokio::spawn(fut.in_current_rank())` |
//! | `tokio::spawn`, current-thread runtime | the rank the `block_on` caller acts for | `tokio::spawn(fut.in_current_rank())` |
//! | `tokio::task::spawn_blocking` | the blocking thread's own rank | `spawn_blocking(RankId::current().bind(f))` |
//! | `tokio::task::spawn_local` (`LocalSet`) | the rank of whatever polls the `LocalSet` (the `block_on` / `run_until` caller) — not the spawner's | `spawn_local(fut.in_current_rank())` |
//! | a future *returned* by an `on_behalf_of` closure: `on_behalf_of(r, \|\| async { .. })` | the rank of whoever polls it later: the closure only built it | `on_behalf_of(r, \|\| fut.in_current_rank())` or `fut.on_behalf_of(r)` |
//!
//! ¹ rayon rows follow from rayon's documented scheduling (pool threads; a thread waiting in
//! `join` steals other jobs) and are not tested here (rayon is not a dependency); the std and
//! tokio rows are tested in `tests/ranks.rs`.
//!
//! ```
//! use ranklocal::{on_behalf_of, OnBehalfExt, Rank, RankId, RankLocal};
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! static STEPS: RankLocal<AtomicUsize> = RankLocal::new();
//!
//! let request = Rank::new(); // a logical rank, e.g. one per request
//! on_behalf_of(request.id(), || {
//!     // a plain spawn would run as the new thread's own rank; bound, it runs as `request`
//!     std::thread::spawn(RankId::current().bind(|| STEPS.get().fetch_add(1, Ordering::Relaxed)))
//!         .join()
//!         .unwrap();
//!     // a future built here is polled later, elsewhere: wrap it in the current rank
//!     let later = async { STEPS.get().fetch_add(1, Ordering::Relaxed) }.in_current_rank();
//!     assert_eq!(later.rank(), request.id());
//! });
//! assert_eq!(STEPS.get_for(request.id()).unwrap().load(Ordering::Relaxed), 1);
//! ```
//!
//! The design, its invariants and its correctness argument are in [`design`]; measured results in
//! `papers/results.md`.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backend;
mod cache;
#[cfg(doctest)]
mod compile_fail_tests;
mod delegation;
mod identity;
#[cfg(not(loom))]
mod key;
mod primitive;
mod rank_local;
mod snapshot;

#[cfg(not(loom))]
pub use crate::backend::ArcSwap;
pub use crate::backend::{Backend, Baseline, Epoch};
pub use crate::delegation::{on_behalf_of, OnBehalfExt, OnBehalfOf};
pub use crate::identity::{Rank, RankId};
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
