//! One value per thread — per *rank* — that a worker acting on behalf of that thread can reach:
//! a lock-free Rust port of PyTorch c10d's `RankLocal<T>`.
//!
//! - [`RankLocal<T>`]: one `T` per rank, created on first use. An ordinary thread gets its own
//!   instance through a thread-local cache; a thread inside [`on_behalf_of`]`(rank, ..)` (or
//!   polling a future wrapped with [`OnBehalfExt::on_behalf_of`]) gets `rank`'s instance. A rank
//!   is an OS thread or a [`Rank`], a logical rank not tied to a thread.
//! - [`rank_local!`]: statics declared like `std::thread_local!`, with a thread-local slot each.
//! - Backends: [`Epoch`] (default; snapshots of a persistent radix trie, reclaimed through
//!   crossbeam-epoch), [`ArcSwap`] (the same snapshots behind `arc-swap`; feature `arc-swap`) and
//!   [`Baseline`] (the C++ `RwLock` + `HashMap` design, for comparison). Lookups on
//!   [`Epoch`]/[`ArcSwap`] (`get`, `get_for`, `with`, `with_for`) never lock, never write a shared
//!   cache line and never allocate; iteration, `for_each`, `{:?}` and `len` take the map's writer
//!   mutex for a moment on [`Epoch`] (no user code runs under it).
//!
//! ```
//! use ranklocal::{on_behalf_of, RankId, RankLocal};
//! use std::sync::Mutex;
//!
//! // per-rank state shared between "forward" (the rank's thread) and "backward" (a worker)
//! static PENDING: RankLocal<Mutex<Vec<u32>>> = RankLocal::new();
//!
//! PENDING.with(|p| p.lock().unwrap().push(1)); // forward: this thread's own instance
//! let rank = RankId::current();
//! let worker = std::thread::spawn(move || {
//!     on_behalf_of(rank, || PENDING.with(|p| p.lock().unwrap().pop())) // backward, for `rank`
//! });
//! assert_eq!(worker.join().unwrap(), Some(1));
//! // `with` lends the value: after this thread exits, the crate frees it (see below)
//! ```
//!
//! # `get` or `with`: which access
//! - [`get`](RankLocal::get) (and `get_or`, `try_get`, `get_for`, `iter`) hands out a `&T` that
//!   lives as long as the `RankLocal`. Use it when the reference must outlive a closure. Such an
//!   instance is kept until `&mut` access ([`purge_exited`](RankLocal::purge_exited),
//!   [`clear`](RankLocal::clear)) or drop: a `static` used by many short-lived threads keeps one
//!   per thread that ever touched it.
//! - [`with`](RankLocal::with), [`with_for`](RankLocal::with_for) and
//!   [`for_each`](RankLocal::for_each) lend the `&T` to a closure (scoped access, like
//!   `LocalKey::with`). An instance only ever reached this way is dropped after its rank exits,
//!   through `&self`: later first touches sweep exited ranks (amortized), and
//!   [`reclaim_exited`](RankLocal::reclaim_exited) does it at once. Use it for state of threads
//!   that come and go. The owner's `with` costs what `get` does (a thread-cache hit, no pin); a
//!   delegate's `with_for` holds an epoch pin while the closure runs, so keep it short.
//!
//! ```
//! use ranklocal::RankLocal;
//!
//! static SCRATCH: RankLocal<Vec<u8>> = RankLocal::new();
//!
//! let len = std::thread::spawn(|| SCRATCH.with(|buf| buf.capacity()))
//!     .join()
//!     .unwrap();
//! assert_eq!(len, 0);
//! SCRATCH.reclaim_exited(); // the exited thread's instance is dropped (first touches also do it)
//! assert_eq!(SCRATCH.len(), 0);
//! let mine: &Vec<u8> = SCRATCH.get(); // handed out: kept until `&mut` access or drop
//! assert!(mine.is_empty());
//! ```
//!
//! # Which call frees what
//!
//! | call | what it frees | when | on which thread |
//! |---|---|---|---|
//! | [`get`](RankLocal::get), `get_or`, `get_or_try`, `try_get`, `get_for`, `iter` | nothing: the value is handed out as `&T` | kept until `purge_exited`, `clear` or the drop (a `static`: never) | — |
//! | [`with`](RankLocal::with), `with_or`, `try_with`, `with_for`, `for_each` | the value, if only ever reached this way | after its rank exits, by a sweep that a later first touch runs (amortized), once no reader sees it | the thread that sweeps |
//! | [`reclaim_exited`](RankLocal::reclaim_exited) | exited ranks' scoped-only values | unpublishes them now; drops each once no reader still sees it | this call, else a later sweep or call |
//! | [`reclaim_exited_blocking`](RankLocal::reclaim_exited_blocking) | the same | returns once every one is dropped | the caller (it waits for readers) |
//! | [`purge_exited`](RankLocal::purge_exited) (`&mut`) | every value of an exited rank | now | the caller |
//! | [`clear`](RankLocal::clear) (`&mut`) | every value | now | the caller |
//! | drop of the `RankLocal` | every value | now | the dropping thread |
//!
//! Whichever thread frees a value, its `Drop` runs as the value's own rank
//! ([`RankId::current`] inside `T::drop` is that rank). A value reached both ways counts as
//! handed out. [`kept_exited`](RankLocal::kept_exited) counts the values kept for exited ranks
//! because they were handed out (O(n)); debug builds warn once per `RankLocal` when at least half
//! of 1,024 or more values are.
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
//! tokio rows are tested in the repository's [`tests/ranks.rs`][ranks-tests].
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
//! The design, its invariants and its correctness argument are in [`design`]; measured results
//! (tables, plots, the commands behind every figure, and where the design loses) are in
//! [`papers/results.md`][results] in the repository (not shipped in the published crate).
//!
//! # `T: Send`, and `T: Sync` for what crosses threads
//!
//! A rank's instance, unlike a thread-local, can be shared between threads: a delegate inside
//! [`on_behalf_of`] reads it through `&T` while its own thread may too, so every rank-aware method
//! (`get`, `with`, `get_for`, `iter`, ...) needs `T: Sync` ([`SyncValue`]); and it is dropped or
//! moved out on whichever thread clears, purges or drops the `RankLocal`, so `T: Send`. The
//! owner-only family ([`RankLocal::with_own`], [`RankLocal::get_own`], ...) reaches only the
//! calling OS thread's own instance and needs `Send` alone: `RefCell` and `Cell` work without a
//! lock, and a value only `with_own` reached is dropped when its thread exits, on that thread, as
//! std's `thread_local!` drops its values. The C++ leaves thread safety to the caller; here the
//! compiler checks it. The full reasoning is on [`RankLocal`].
//!
//! # Features
//!
//! - `arc-swap` (off by default): the [`ArcSwap`] backend. It exists to be measured against
//!   [`Epoch`]; without the feature, arc-swap is not compiled.
//! - `loom` (off by default): with `RUSTFLAGS="--cfg loom"`, builds the crate on loom's
//!   primitives so that a dependent's own loom tests can model-check code that uses it, statics
//!   and `rank_local!` included (README, "Loom for dependents"); `--cfg loom` without the feature
//!   is a compile error that says so. The repository's own models of the crate's internals add
//!   `--cfg crossbeam_loom --cfg crossbeam_sanitize` (crossbeam-epoch on loom too). loom is an
//!   optional dependency, so a crate that depends on `ranklocal` resolves no loom (nor its
//!   dependencies) unless it turns this on; without the cfg the feature changes nothing.
//!
//! # Comparison with similar crates
//!
//! - **`std::thread_local!`**: one value per OS thread, dropped when the thread exits, reachable
//!   from no other thread. `ranklocal`'s thread cache is a `thread_local!`; use the macro itself
//!   when no other thread ever needs the value. Porting: [`rank_local!`] takes the same
//!   declarations (`const { }` initializers included); a `Cell`/`RefCell` value keeps its type
//!   with the keys' `with_own` (dropped at thread exit, as std does), or becomes an atomic or a
//!   `Mutex` for a value other threads read through `with`/`get`.
//! - **[`thread_local`]** (`ThreadLocal<T>`): one value per thread in a per-object table indexed
//!   by a thread id. Ids are recycled: a value is *not* dropped when its thread exits (only by
//!   `clear` or with the `ThreadLocal`), and a later thread that gets the same id inherits the
//!   dead thread's value (its issues
//!   [#75](https://github.com/Amanieu/thread_local-rs/issues/75),
//!   [#78](https://github.com/Amanieu/thread_local-rs/issues/78)/[#79](https://github.com/Amanieu/thread_local-rs/issues/79)).
//!   Other threads reach the values only by iterating. `ranklocal` keys instances by a
//!   [`RankId`] that is never reused, lets another thread act as a rank, and drops the instances
//!   of exited ranks with `purge_exited`; its owner lookup costs about the same. Porting:
//!   `ThreadLocal::new()` is [`RankLocal::recycling`] (the same lifecycle: values outlive their
//!   thread and a new thread adopts them); `get_or` is [`get_own_or`](RankLocal::get_own_or)
//!   (`get_or` for a `Sync` value), and its `get` (an `Option`, never creating) is
//!   [`try_get_own`](RankLocal::try_get_own) (`try_get` for a `Sync` value), where `get`
//!   creates; `iter_mut`, `into_iter` and `clear` map one to one (the iterators yield
//!   `(RankId, value)`); a `RefCell` or `Cell` value stays one with the owner-only family. The
//!   [user guide][migration] has the full mapping and the compiler errors a port meets.
//! - **C++ `c10d::RankLocal<T>`** (the original): a `thread_local` pointer cache in front of a
//!   global `std::shared_mutex` + `unordered_map`, with three flaws (see [`design`]): the cache is
//!   checked before the delegation context, so a thread that touched its own instance returns
//!   it even while working for another rank; entries are never freed; and a global lock on
//!   every delegated lookup — each takes the read lock, whose shared reader count every reader
//!   writes, and `T` is built under the exclusive lock. The [`Baseline`] backend is that design,
//!   kept for comparison; `ranklocal` fixes all three.
//! - **[`arc-swap`]**: a general atomic `Arc`. Here it is an alternative snapshot backend
//!   ([`ArcSwap`]), measured side by side with [`Epoch`]; its loads write a thread-local debt
//!   slot, as an epoch pin writes a thread-local epoch.
//! - **[`left-right`]**: two copies of the data; readers never wait, writers wait for readers to
//!   leave the old copy. `ranklocal`'s writers never wait for readers (the old snapshot is retired
//!   to the collector), which suits rare inserts and frequent reads.
//! - **[`dashmap`]**: a map sharded under `RwLock`s; every read still writes its shard's shared
//!   reader count. **[`papaya`]**: a lock-free hash map with its own reclamation and in-place
//!   inserts; `ranklocal`'s first touch fills a slot of the published snapshot in place too, or
//!   hangs a new trie leaf into it, and copies an O(log n) path only beyond the trie's range
//!   or under a node some iteration froze. For
//!   few, rarely inserted keys read from every thread, a snapshot plus a thread cache is simpler
//!   and a repeated lookup is a thread-local hit.
//! - **A dense array indexed by rank id** (append-only): the strongest rival when ids are dense
//!   and bounded, a bounds check and a load per lookup. The thread cache reaches the same order
//!   of cost without needing dense, bounded ids; [`papers/results.md`][results] measures both.
//!
//! [results]: https://github.com/ranklocal/ranklocal/blob/main/papers/results.md
//! [ranks-tests]: https://github.com/ranklocal/ranklocal/blob/main/tests/ranks.rs
//! [migration]: https://github.com/ranklocal/ranklocal/blob/main/papers/guide.md#7-porting-in-full
//! [`thread_local`]: https://docs.rs/thread_local
//! [`arc-swap`]: https://docs.rs/arc-swap
//! [`left-right`]: https://docs.rs/left-right
//! [`dashmap`]: https://docs.rs/dashmap
//! [`papaya`]: https://docs.rs/papaya
#![cfg_attr(
    not(all(feature = "arc-swap", not(loom))),
    doc = "[`ArcSwap`]: crate#features"
)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// `--cfg loom` reaches every crate of the build (RUSTFLAGS), so a dependent that model-checks its own
// code builds this crate with it: name the one thing missing (the rest of the crate then builds on
// std, build.rs setting `ranklocal_loom` only with both, so this is the only error). The reverse
// (the feature without the cfg) is allowed: it changes nothing, and `--all-features` builds
// (docs.rs, clippy) turn it on.
#[cfg(all(loom, not(feature = "loom")))]
compile_error!(
    "ranklocal is built with `--cfg loom` but without its `loom` feature. A crate whose loom tests \
     use ranklocal adds to its Cargo.toml: [target.'cfg(loom)'.dependencies] \
     ranklocal = { version = \"0.1\", features = [\"loom\"] } (see ranklocal's README, \
     \"Loom for dependents\"); in ranklocal's own repository: `--features loom`"
);

mod backend;
mod cache;
mod collector;
#[cfg(doctest)]
mod compile_fail_tests;
mod counters;
mod delegation;
mod erased;
mod fifo;
mod identity;
#[cfg(not(all(ranklocal_loom, crossbeam_loom)))]
mod key;
mod primitive;
mod rank_local;
mod trie;

#[cfg(all(feature = "arc-swap", not(ranklocal_loom)))]
pub use crate::backend::ArcSwap;
pub use crate::backend::{Backend, Baseline, Epoch};
pub use crate::delegation::{on_behalf_of, OnBehalfExt, OnBehalfOf};
pub use crate::identity::{Rank, RankId};
#[cfg(not(all(ranklocal_loom, crossbeam_loom)))]
pub use crate::key::RankLocalKey;
pub use crate::rank_local::{AccessError, Iter, IterMut, OwnRef, RankLocal, Reader, SyncValue};

#[doc(hidden)]
#[cfg(not(all(ranklocal_loom, crossbeam_loom)))]
pub use crate::key::__private;

#[doc(hidden)]
#[cfg(ranklocal_loom)]
pub use crate::identity::{__loom_exit_thread, __loom_register_thread};

#[doc = include_str!("../papers/design.md")]
pub mod design {}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
