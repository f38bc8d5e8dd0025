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
//! # Values that are not thread-safe are rejected (I7)
//!
//! ```compile_fail,E0277
//! use ranklocal::RankLocal;
//! static V: RankLocal<std::cell::Cell<u32>> = RankLocal::new();
//! ```
//! ```compile_fail,E0277
//! use ranklocal::RankLocal;
//! static V: RankLocal<std::cell::RefCell<u32>> = RankLocal::new();
//! ```
//! ```compile_fail,E0599
//! use ranklocal::RankLocal;
//! let v = RankLocal::<std::rc::Rc<u32>>::new(); // no `new`: its bounds are not met
//! ```
//! ```
//! use ranklocal::RankLocal;
//! static V: RankLocal<std::sync::atomic::AtomicU32> = RankLocal::new();
//! static W: RankLocal<std::sync::Mutex<u32>> = RankLocal::new();
//! let v = RankLocal::<std::sync::Arc<u32>>::new();
//! ```
//!
//! ```compile_fail,E0277
//! ranklocal::rank_local! { static V: std::cell::Cell<u32> = std::cell::Cell::new(0); }
//! ```
//! ```compile_fail,E0277
//! ranklocal::rank_local! { static V: std::rc::Rc<u32> = std::rc::Rc::new(0); }
//! ```
//! ```
//! ranklocal::rank_local! {
//!     static V: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
//!     static W: std::sync::Arc<u32> = std::sync::Arc::new(0);
//! }
//! ```
//!
//! # A key cannot be built around a hand-made slot (I8)
//!
//! `RankLocalKey::__new` is `unsafe`: safe code cannot pass a slot of its own. (Stable rustdoc
//! does not check the error code; the twin shows that `unsafe` is the only difference.)
//!
//! ```compile_fail,E0133
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
//! thread_local! { static SLOT: Cell<*const u32> = const { Cell::new(std::ptr::null()) }; }
//! // SAFETY (I8): `INNER` and `SLOT` are this key's alone, `SLOT` starts null, as `rank_local!`
//! // ensures.
//! static KEY: RankLocalKey<u32> = unsafe { RankLocalKey::__new(&INNER, &SLOT, || 0) };
//! assert_eq!(*KEY.get(), 0);
//! ```

/// # `Iter` is `Send` and `Sync` exactly when `T: Sync`
///
/// `Iter` yields `&T`s, so like `slice::Iter` it may cross threads when `&T` may: when `T: Sync`.
/// It holds a count on its snapshot, not an epoch pin (I15), which any thread may give up, so the
/// backend iterators are `Send` and `Sync` (the `Epoch` one by an `unsafe impl`, argued there):
/// an `Iter` can be held across an `.await` in a `tokio::spawn`ed task. A `RankLocal` only ever
/// holds `T: Send + Sync`, so the twin names the type with a `!Sync` `T` directly.
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
