//! Compile-fail tests (doctests, as arc-swap's `src/compile_fail_tests.rs`): each `compile_fail`
//! block has a passing twin right after it that differs only in the point under test, so a block
//! cannot "fail to compile" for an unrelated reason. Run by `cargo test --doc`.
//!
//! # Variance (invariant I9)
//!
//! `RankLocal` is invariant in `T`: a `RankLocal<&'static str>` cannot be used as a
//! `RankLocal<&'a str>` to insert a short-lived `&str` that is later read as `&'static str`.
//!
//! ```compile_fail,E0597
//! use ranklocal::RankLocal;
//! static NAMES: RankLocal<&'static str> = RankLocal::new();
//! fn put<'a>(rl: &RankLocal<&'a str>, s: &'a str) { rl.get_or(|| s); }
//! let s = String::from("short-lived");
//! put(&NAMES, &s);
//! ```
//! ```
//! use ranklocal::RankLocal;
//! static NAMES: RankLocal<&'static str> = RankLocal::new();
//! fn put<'a>(rl: &RankLocal<&'a str>, s: &'a str) { rl.get_or(|| s); }
//! put(&NAMES, "static");
//! ```
//!
//! ```compile_fail
//! use ranklocal::RankLocal;
//! fn shorten<'a>(rl: &'a RankLocal<&'static str>) -> &'a RankLocal<&'a str> { rl }
//! ```
//! ```
//! use ranklocal::RankLocal;
//! fn keep<'a>(rl: &'a RankLocal<&'static str>) -> &'a RankLocal<&'static str> { rl }
//! ```
//!
//! The same through a `rank_local!` key, and through `as_rank_local()`:
//!
//! ```compile_fail,E0597
//! use ranklocal::{rank_local, RankLocal};
//! rank_local! { static NAMES: &'static str = "initial"; }
//! fn put<'a>(rl: &RankLocal<&'a str>, s: &'a str) { rl.get_or(|| s); }
//! let s = String::from("short-lived");
//! std::thread::scope(|t| { t.spawn(|| put(NAMES.as_rank_local(), &s)); });
//! ```
//! ```
//! use ranklocal::{rank_local, RankLocal};
//! rank_local! { static NAMES: &'static str = "initial"; }
//! fn put<'a>(rl: &RankLocal<&'a str>, s: &'a str) { rl.get_or(|| s); }
//! std::thread::scope(|t| { t.spawn(|| put(NAMES.as_rank_local(), "static")); });
//! ```
//!
//! (A `RankLocalKey<T>` itself needs `T: 'static`, so no lifetime inside its `T` can be shortened
//! without first reaching the `RankLocal` it holds: `as_rank_local()` above is that path.)
//!
//! `IterMut` hands out `&mut T`: invariant too.
//!
//! ```compile_fail
//! use ranklocal::{Epoch, IterMut};
//! fn shorten<'a, 'b>(i: IterMut<'a, &'static str, Epoch>) -> IterMut<'a, &'b str, Epoch> { i }
//! ```
//! ```
//! use ranklocal::{Epoch, IterMut};
//! fn keep<'a>(i: IterMut<'a, &'static str, Epoch>) -> IterMut<'a, &'static str, Epoch> { i }
//! ```
//!
//! `Iter` only reads (covariant, like `slice::Iter`), and `OnBehalfOf<F>` owns its future
//! (covariant, like `Box<F>`): these coercions are sound and must keep compiling.
//!
//! ```
//! use ranklocal::{Epoch, Iter, OnBehalfOf};
//! fn shorten<'a, 'b>(i: Iter<'a, &'static str, Epoch>) -> Iter<'a, &'b str, Epoch> { i }
//! fn shorten_fut<'b>(f: OnBehalfOf<std::future::Ready<&'static str>>)
//!     -> OnBehalfOf<std::future::Ready<&'b str>> { f }
//! ```
//!
//! # Values that are not `Send` are rejected; values that are not `Sync` stay on their thread (I7, I39)
//!
//! A `RankLocal` needs `T: Send` (whichever thread frees an instance drops it): an `Rc` is
//! rejected, in a `RankLocal` as in a `rank_local!` static. A `Cell` or `RefCell` is `Send`, so
//! both take one: a `static RankLocal<Cell<u32>>` is `Sync`.
//!
//! ```compile_fail,E0599
//! use ranklocal::RankLocal;
//! let v = RankLocal::<std::rc::Rc<u32>>::new(); // no `new`: its bounds are not met
//! ```
//! ```compile_fail,E0277
//! ranklocal::rank_local! { static V: std::rc::Rc<u32> = std::rc::Rc::new(0); }
//! ```
//! ```
//! use ranklocal::RankLocal;
//! static V: RankLocal<std::cell::Cell<u32>> = RankLocal::new();
//! static W: RankLocal<std::cell::RefCell<u32>> = RankLocal::new();
//! static X: RankLocal<std::sync::atomic::AtomicU32> = RankLocal::new();
//! let v = RankLocal::<std::sync::Arc<u32>>::new();
//! ranklocal::rank_local! {
//!     static C: std::cell::Cell<u32> = std::cell::Cell::new(0);
//!     static A: std::sync::Arc<u32> = std::sync::Arc::new(0);
//! }
//! V.with_own(|v| v.set(1));
//! C.with_own(|c| c.set(1));
//! ```
//!
//! What can hand a value to another thread than its owner's needs `T: Sync` ([`SyncValue`]):
//! each of these fails for a `Cell` and compiles, in its twin, with the owner-only method (or a
//! `Sync` value) in its place.
//!
//! [`SyncValue`]: crate::SyncValue
//!
//! ```compile_fail,E0277
//! let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! rl.get().set(1);
//! ```
//! ```
//! let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! rl.get_own().set(1);
//! ```
//! ```compile_fail,E0277
//! let rl = ranklocal::RankLocal::<std::cell::RefCell<u32>>::new();
//! rl.with(|v| *v.borrow_mut() += 1);
//! ```
//! ```
//! let rl = ranklocal::RankLocal::<std::cell::RefCell<u32>>::new();
//! rl.with_own(|v| *v.borrow_mut() += 1);
//! ```
//! ```compile_fail,E0277
//! let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! let me = ranklocal::RankId::current();
//! std::thread::scope(|s| { s.spawn(|| rl.get_for(me).map(|c| c.get())); });
//! ```
//! ```
//! let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! std::thread::scope(|s| { s.spawn(|| rl.try_get_own().map(|c| c.get())); });
//! ```
//! ```compile_fail,E0277
//! let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! let me = ranklocal::RankId::current();
//! std::thread::scope(|s| { s.spawn(|| rl.with_for(me, |c| c.get())); });
//! ```
//! ```
//! let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! std::thread::scope(|s| { s.spawn(|| rl.try_with_own(|c| c.get())); });
//! ```
//! ```compile_fail,E0277
//! let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! let total: u32 = rl.iter().map(|(_, c)| c.get()).sum();
//! ```
//! ```
//! let mut rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! let total: u32 = rl.iter_mut().map(|(_, c)| c.get()).sum();
//! ```
//! ```compile_fail,E0277
//! // a delegate on another thread would race the owner through `&Cell`
//! let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! let me = ranklocal::RankId::current();
//! std::thread::scope(|s| { s.spawn(|| ranklocal::on_behalf_of(me, || rl.get().set(2))); });
//! ```
//! ```
//! // inside `on_behalf_of`, `get_own` is still the calling thread's own instance
//! let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
//! let me = ranklocal::RankId::current();
//! std::thread::scope(|s| { s.spawn(|| ranklocal::on_behalf_of(me, || rl.get_own().set(2))); });
//! ```
//!
//! A struct that holds a `Cell` is not `Sync` either (from Rust 1.85 the error is the crate's,
//! about the struct, with the note naming `with_own`; before, it is std's about the field):
//!
//! ```compile_fail,E0277
//! use std::cell::Cell;
//! #[derive(Default)]
//! struct Stats { hits: Cell<u64> }
//! let rl = ranklocal::RankLocal::<Stats>::new();
//! rl.with(|s| s.hits.set(s.hits.get() + 1));
//! ```
//! ```
//! use std::cell::Cell;
//! #[derive(Default)]
//! struct Stats { hits: Cell<u64> }
//! let rl = ranklocal::RankLocal::<Stats>::new();
//! rl.with_own(|s| s.hits.set(s.hits.get() + 1));
//! ```
//!
//! The same through a `rank_local!` key's rank-aware methods:
//!
//! ```compile_fail,E0277
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! C.get().set(1);
//! ```
//! ```
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! C.get_own().set(1);
//! ```
//! ```compile_fail,E0277
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! C.with(|c| c.set(1));
//! ```
//! ```
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! C.with_own(|c| c.set(1));
//! ```
//! ```compile_fail,E0277
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! C.get_for(ranklocal::RankId::current());
//! ```
//! ```
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! C.try_get_own();
//! ```
//! ```compile_fail,E0277
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! C.with_for(ranklocal::RankId::current(), |c| c.get());
//! ```
//! ```
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! C.try_with_own(|c| c.get());
//! ```
//! ```compile_fail,E0277
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! let n = C.iter().count();
//! ```
//! ```
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! let n = C.len();
//! ```
//! ```compile_fail,E0277
//! ranklocal::rank_local! { static C: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! C.for_each(|_, c| c.set(0));
//! ```
//! ```
//! ranklocal::rank_local! { static C: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0); }
//! C.for_each(|_, c| c.store(0, std::sync::atomic::Ordering::Relaxed));
//! ```
//!
//! # Values dropped at thread exit are `'static` (I39)
//!
//! The owner-only family drops a value when its thread exits, which may be after the data a
//! borrowing `T` points to is gone (the map forgotten, or a scoped thread's thread-locals torn
//! down after the scope returned): as std's `thread_local!`, it takes `'static` values only.
//!
//! ```compile_fail,E0597
//! struct Holder<'a>(&'a u32);
//! std::thread::spawn(|| {
//!     let data = 7;
//!     let m: ranklocal::RankLocal<Holder<'_>> = ranklocal::RankLocal::new();
//!     m.with_own_or(|| Holder(&data), |_| ());
//!     std::mem::forget(m);
//! });
//! ```
//! ```
//! struct Holder<'a>(&'a u32);
//! std::thread::spawn(|| {
//!     static DATA: u32 = 7;
//!     let m: ranklocal::RankLocal<Holder<'_>> = ranklocal::RankLocal::new();
//!     m.with_own_or(|| Holder(&DATA), |_| ());
//!     std::mem::forget(m);
//! });
//! ```
//!
//! # A key built around a hand-made slot is sound, not useful (I8)
//!
//! `RankLocalKey::__new` is safe: its slot holds only `&'static T`s, so whatever a hand-made slot
//! holds is a live value (the key then hands out that value: wrong for a key, never a dangling
//! reference). A slot of raw pointers, which could dangle, does not compile.
//!
//! ```compile_fail
//! use ranklocal::{RankLocalKey, __private::KeyStorage};
//! use std::cell::Cell;
//! static INNER: KeyStorage<u32> = KeyStorage::new();
//! thread_local! { static SLOT: Cell<*const u32> = const { Cell::new(std::ptr::null()) }; }
//! static KEY: RankLocalKey<u32> = RankLocalKey::__new(&INNER, &SLOT, || 0);
//! ```
//! ```
//! use ranklocal::{RankLocalKey, __private::KeyStorage};
//! use std::cell::Cell;
//! static INNER: KeyStorage<u32> = KeyStorage::new();
//! static SEVEN: u32 = 7;
//! thread_local! {
//!     static SLOT: Cell<Option<&'static u32>> = const { Cell::new(Some(&SEVEN)) };
//! }
//! static KEY: RankLocalKey<u32> = RankLocalKey::__new(&INNER, &SLOT, || 0);
//! assert_eq!(*KEY.get(), 7); // the hand-made slot's value: a live `u32`
//! ```

/// # `OwnRef` stays on its thread and ends before its map
///
/// The guard the owner-only family hands out is neither `Send` nor `Sync` (the guard count it
/// keeps is its thread's own, I41), whatever `T`; the `&T` it lends is a plain reference, shared
/// like any (for a `Sync` `T`) and ending before the guard's drop, on the owner thread. The
/// guard borrows its `RankLocal`, which cannot be dropped or mutably borrowed while it lives.
///
/// ```compile_fail,E0277
/// let rl = ranklocal::RankLocal::<u32>::new();
/// let g = rl.get_own();
/// std::thread::scope(|s| { s.spawn(move || *g); });
/// ```
/// ```compile_fail,E0277
/// let rl = ranklocal::RankLocal::<u32>::new();
/// let g = rl.get_own();
/// let g = &g;
/// std::thread::scope(|s| { s.spawn(move || **g); });
/// ```
/// ```
/// let rl = ranklocal::RankLocal::<u32>::new();
/// let g = rl.get_own();
/// let v: &u32 = &g;
/// assert_eq!(std::thread::scope(|s| s.spawn(move || *v).join().unwrap()), 0);
/// ```
/// ```compile_fail,E0505
/// let rl = ranklocal::RankLocal::<u32>::new();
/// let g = rl.get_own();
/// drop(rl);
/// assert_eq!(*g, 0);
/// ```
/// ```compile_fail,E0502
/// let mut rl = ranklocal::RankLocal::<u32>::new();
/// let g = rl.get_own();
/// rl.clear();
/// assert_eq!(*g, 0);
/// ```
/// ```
/// let mut rl = ranklocal::RankLocal::<u32>::new();
/// let g = rl.get_own();
/// assert_eq!(*g, 0);
/// drop(g);
/// rl.clear();
/// ```
pub struct OwnRefStaysOnItsThread;

/// # `Iter` is `Send` and `Sync` exactly when `T: Sync`
///
/// `Iter` yields `&T`s, so like `slice::Iter` it may cross threads when `&T` may: when `T: Sync`.
/// It holds a count on its snapshot, not an epoch pin (I15), which any thread may give up, so the
/// backend iterators are `Send` and `Sync` (the `Epoch` one by an `unsafe impl`, argued there):
/// an `Iter` can be held across an `.await` in a `tokio::spawn`ed task. `iter` needs
/// `T: SyncValue`, so the twin names the type with a `!Sync` `T` directly.
///
/// ```
/// fn assert_send_sync<T: Send + Sync>(_: &T) {}
/// let rl = ranklocal::RankLocal::<u32>::new();
/// rl.get_or(|| 1);
/// let it = rl.iter();
/// assert_send_sync(&it);
/// let moved = std::thread::scope(|s| s.spawn(move || it.count()).join().unwrap());
/// assert_eq!(moved, 1);
/// fn every_backend<B: ranklocal::Backend>() {
///     fn send_sync<T: Send + Sync>() {}
///     send_sync::<ranklocal::Iter<'static, u32, B>>();
/// }
/// every_backend::<ranklocal::Epoch>();
/// every_backend::<ranklocal::Baseline>();
/// ```
/// ```compile_fail,E0277
/// fn assert_send<T: Send>() {}
/// assert_send::<ranklocal::Iter<'static, std::cell::Cell<u32>, ranklocal::Epoch>>();
/// ```
pub struct IterIsSendWhenTIsSync;

/// # A `Reader` stays on its thread
///
/// A [`Reader`](crate::Reader) holds an epoch pin of its thread: it is neither `Send` nor `Sync`
/// (as crossbeam's `Guard` and papaya's `LocalGuard`), on every backend. The values it lends may
/// cross threads as `&T` does (`T: Sync`), for as long as the reader lives.
///
/// ```
/// fn assert_send_sync<T: Send + Sync>(_: &T) {}
/// let rl = ranklocal::RankLocal::<u32>::new();
/// rl.get_or(|| 1);
/// let reader = rl.pin();
/// let v = reader.get_for(ranklocal::RankId::current()).unwrap();
/// assert_send_sync(&v);
/// assert_eq!(std::thread::scope(|s| s.spawn(move || *v).join().unwrap()), 1);
/// ```
/// ```compile_fail,E0277
/// fn assert_send<T: Send>(_: &T) {}
/// let rl = ranklocal::RankLocal::<u32>::new();
/// let reader = rl.pin();
/// assert_send(&reader);
/// ```
/// ```compile_fail,E0277
/// fn assert_sync<T: Sync>(_: &T) {}
/// let rl = ranklocal::RankLocal::<u32, ranklocal::Baseline>::new();
/// let reader = rl.pin();
/// assert_sync(&reader);
/// ```
/// A value lent by a reader does not outlive it:
/// ```compile_fail,E0505
/// let rl = ranklocal::RankLocal::<u32>::new();
/// rl.get_or(|| 1);
/// let reader = rl.pin();
/// let v = reader.get_for(ranklocal::RankId::current()).unwrap();
/// drop(reader);
/// assert_eq!(*v, 1);
/// ```
/// ```
/// let rl = ranklocal::RankLocal::<u32>::new();
/// rl.get_or(|| 1);
/// let reader = rl.pin();
/// let v = reader.get_for(ranklocal::RankId::current()).unwrap();
/// assert_eq!(*v, 1);
/// drop(reader);
/// ```
///
/// A reader of a `RankLocal` whose value is not `Sync` (a `Cell`) is rejected by the bound the
/// other rank-aware methods carry ([`SyncValue`](crate::SyncValue)), so the compiler's error names
/// the owner-only methods that fit (not "the method `pin` exists but its trait bounds were not
/// satisfied"):
/// ```compile_fail,E0277
/// let rl = ranklocal::RankLocal::<std::cell::Cell<u32>>::new();
/// let _reader = rl.pin();
/// ```
/// ```
/// let rl = ranklocal::RankLocal::<std::sync::atomic::AtomicU32>::new();
/// let _reader = rl.pin();
/// ```
pub struct ReaderStaysOnItsThread;
