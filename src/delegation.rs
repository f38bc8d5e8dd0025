//! Delegation: running code *as* another rank, on this thread ([`on_behalf_of`]) or for every poll
//! of a future ([`OnBehalfExt::on_behalf_of`]).
//!
//! This is the explicit form of what PyTorch gets from the autograd engine: a backward thread
//! running a node whose `thread_id` is the forward thread's. Delegation only changes the
//! thread's *current* rank; every `RankLocal` lookup reads it, so even a thread that has cached
//! its own instances resolves to the delegated rank's (the C++ fast path does not).

use core::future::Future;
use core::mem::ManuallyDrop;
use core::pin::Pin;
use core::task::{Context, Poll};

use crate::identity::{replace_current, restore_current, RankId};

/// Runs `f` on this thread as `rank`: inside it, [`RankId::current`] is `rank` and every
/// `RankLocal` resolves to `rank`'s instance (creating it on first use, owned by `rank`).
///
/// Calls nest; the previous rank is restored when `f` returns and when it unwinds.
///
/// # Only `f`'s own run, on this thread
/// The rank holds while `f` runs on this thread, and nowhere else:
/// - **A future escapes it.** `on_behalf_of(rank, || async { .. })` builds the future as `rank`
///   and returns it *unpolled*: its body later runs as whichever thread polls it, not as `rank`,
///   silently. Wrap the future instead: `async { .. }.on_behalf_of(rank)`
///   ([`OnBehalfExt::on_behalf_of`]), whose every poll (and drop) runs as `rank`.
/// - **Spawned work does not inherit it.** Threads and tasks started inside `f`
///   (`std::thread::spawn`, `tokio::spawn`, `tokio::task::spawn_blocking`, a rayon job, ...) run
///   as their own thread's rank. Pass the [`RankId`] along and call `on_behalf_of` there, or wrap
///   the spawned future with [`OnBehalfExt::on_behalf_of`].
///
/// ```
/// use ranklocal::{on_behalf_of, OnBehalfExt, RankId};
/// use std::task::{Context, Poll, Waker};
///
/// // busy-polls to completion: fine here, as these futures never wait (use a runtime's)
/// fn block_on<F: std::future::Future>(fut: F) -> F::Output {
///     let mut cx = Context::from_waker(Waker::noop());
///     let mut fut = std::pin::pin!(fut);
///     loop {
///         if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
///             return v;
///         }
///     }
/// }
///
/// let rank = std::thread::spawn(RankId::this_thread).join().unwrap();
/// let escaped = on_behalf_of(rank, || async { RankId::current() }); // built as `rank` ...
/// let wrapped = async { RankId::current() }.on_behalf_of(rank);
/// assert_eq!(block_on(escaped), RankId::this_thread()); // ... but runs as the poller
/// assert_eq!(block_on(wrapped), rank);
/// let spawned = on_behalf_of(rank, || std::thread::spawn(RankId::current).join().unwrap());
/// assert_ne!(spawned, rank); // a thread spawned inside runs as its own rank
/// ```
///
/// ```
/// use ranklocal::{on_behalf_of, RankId, RankLocal};
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// static WORK: RankLocal<AtomicUsize> = RankLocal::new();
///
/// let forward = RankId::current();
/// WORK.get().fetch_add(1, Ordering::Relaxed);
/// std::thread::spawn(move || {
///     // a backward worker acting for the forward thread sees its instance
///     on_behalf_of(forward, || WORK.get().fetch_add(1, Ordering::Relaxed));
/// })
/// .join()
/// .unwrap();
/// assert_eq!(WORK.get().load(Ordering::Relaxed), 2);
/// ```
#[inline]
pub fn on_behalf_of<R>(rank: RankId, f: impl FnOnce() -> R) -> R {
    let _restore = Restore(replace_current(rank.as_u64()));
    f()
}

/// Restores the previous current rank on drop (return or unwind).
struct Restore(u64);

impl Drop for Restore {
    #[inline]
    fn drop(&mut self) {
        restore_current(self.0);
    }
}

impl RankId {
    /// Binds `f` to this rank: returns a closure that runs `f` [`on_behalf_of`] `self`, on
    /// whichever thread calls it. The way to carry the rank into work another thread runs, which
    /// otherwise runs as that thread's own rank (see the crate docs' table):
    ///
    /// ```
    /// use ranklocal::{RankId, RankLocal};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// static HITS: RankLocal<AtomicUsize> = RankLocal::new();
    ///
    /// let me = RankId::current();
    /// let seen = std::thread::spawn(RankId::current().bind(|| {
    ///     HITS.get().fetch_add(1, Ordering::Relaxed); // the spawner's instance
    ///     RankId::current()
    /// }))
    /// .join()
    /// .unwrap();
    /// assert_eq!(seen, me);
    /// assert_eq!(HITS.get().load(Ordering::Relaxed), 1);
    /// ```
    ///
    /// Like `tracing`'s `Span::in_scope`, but deferred: the rank is the one `bind` was called on
    /// (`RankId::current()` evaluated by the spawner), not the one current where the closure
    /// runs. The closure is `Send` and `'static` when `f` is. If it is dropped without being
    /// called (a cancelled job), `f` and what it captured are dropped as the rank too.
    #[inline]
    #[must_use = "bind returns a closure: call it, or hand it to a spawner, to run `f`"]
    pub fn bind<R>(self, f: impl FnOnce() -> R) -> impl FnOnce() -> R {
        let mut bound = Bound {
            rank: self,
            f: Some(f),
        };
        move || {
            let f = bound
                .f
                .take()
                .expect("ranklocal: bound closure taken twice");
            on_behalf_of(bound.rank, f)
        }
    }
}

/// The state of a [`RankId::bind`] closure: `f` until it is called; dropped uncalled, it drops
/// `f` as the rank (the same context `f` would have run in).
struct Bound<F> {
    rank: RankId,
    f: Option<F>,
}

impl<F> Drop for Bound<F> {
    fn drop(&mut self) {
        if let Some(f) = self.f.take() {
            on_behalf_of(self.rank, move || drop(f));
        }
    }
}

/// Runs a future as a rank: every poll of [`OnBehalfOf`] runs inside
/// [`on_behalf_of`], on whichever thread polls it, and so does its drop (a cancelled future's
/// destructors run as the rank).
///
/// What it does not cover: work the future hands to *other* tasks or threads. A `tokio::spawn`
/// or `tokio::task::spawn_blocking` made inside an `OnBehalfOf` runs as the thread that executes
/// it, not as the rank; wrap the spawned future too (`tokio::spawn(fut.on_behalf_of(rank))`) or
/// call [`on_behalf_of`] inside the blocking closure. Likewise `on_behalf_of(rank, || async {..})`
/// does *not* make the returned future run as `rank` (see [`on_behalf_of`]): use this trait.
///
/// ```
/// use ranklocal::{OnBehalfExt, RankId};
/// use std::task::{Context, Poll, Waker};
///
/// // busy-polls to completion: fine here, as these futures never wait (use a runtime's)
/// fn block_on<F: std::future::Future>(fut: F) -> F::Output {
///     let mut cx = Context::from_waker(Waker::noop());
///     let mut fut = std::pin::pin!(fut);
///     loop {
///         if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
///             return v;
///         }
///     }
/// }
///
/// let rank = RankId::current();
/// let seen = std::thread::spawn(move || block_on(async { RankId::current() }.on_behalf_of(rank)))
///     .join()
///     .unwrap();
/// assert_eq!(seen, rank);
/// ```
pub trait OnBehalfExt: Future + Sized {
    /// Wraps `self` so that every poll runs as `rank`.
    ///
    /// ```
    /// use ranklocal::{OnBehalfExt, Rank, RankId, RankLocal};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::task::{Context, Poll, Waker};
    ///
    /// // busy-polls to completion: fine here, as these futures never wait (use a runtime's)
    /// fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    ///     let mut cx = Context::from_waker(Waker::noop());
    ///     let mut fut = std::pin::pin!(fut);
    ///     loop {
    ///         if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
    ///             return v;
    ///         }
    ///     }
    /// }
    ///
    /// static STEPS: RankLocal<AtomicU32> = RankLocal::new();
    ///
    /// let request = Rank::new();
    /// let fut = async {
    ///     STEPS.get().fetch_add(1, Ordering::Relaxed);
    ///     RankId::current()
    /// };
    /// assert_eq!(block_on(fut.on_behalf_of(request.id())), request.id());
    /// assert_eq!(STEPS.get_for(request.id()).unwrap().load(Ordering::Relaxed), 1);
    /// assert!(STEPS.try_get().is_none()); // the polling thread's own rank was not touched
    /// ```
    fn on_behalf_of(self, rank: RankId) -> OnBehalfOf<Self> {
        OnBehalfOf {
            inner: ManuallyDrop::new(self),
            rank,
        }
    }

    /// Wraps `self` so that every poll runs as the rank current *now*, where `in_current_rank` is
    /// called ([`RankId::current`]): the way to carry the rank into a spawned task, which is
    /// otherwise polled as the executor thread's own rank (`tokio::spawn(fut.in_current_rank())`;
    /// as `tracing`'s `.in_current_span()`).
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, OnBehalfExt, RankId};
    /// use std::task::{Context, Poll, Waker};
    ///
    /// // busy-polls to completion: fine here, as these futures never wait (use a runtime's)
    /// fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    ///     let mut cx = Context::from_waker(Waker::noop());
    ///     let mut fut = std::pin::pin!(fut);
    ///     loop {
    ///         if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
    ///             return v;
    ///         }
    ///     }
    /// }
    ///
    /// let rank = std::thread::spawn(RankId::this_thread).join().unwrap();
    /// // the closure only *builds* the future; without `in_current_rank` it would be polled later,
    /// // outside the delegation, as this thread's own rank
    /// let fut = on_behalf_of(rank, || async { RankId::current() }.in_current_rank());
    /// assert_eq!(fut.rank(), rank);
    /// assert_eq!(block_on(fut), rank);
    /// ```
    #[inline]
    fn in_current_rank(self) -> OnBehalfOf<Self> {
        self.on_behalf_of(RankId::current())
    }
}

impl<F: Future> OnBehalfExt for F {}

pin_project_lite::pin_project! {
    /// A future that polls its inner future as a given rank; see [`OnBehalfExt`].
    ///
    /// The inner future is also *dropped* as the rank (a cancelled future's destructors run
    /// inside [`on_behalf_of`]`(rank)`, as tracing's `Instrumented` does for spans), so a handle
    /// that deregisters itself from the rank's state on drop finds the rank's instance.
    ///
    /// Covariant in `F`, like `Box<F>` (it owns its one `F`): an `OnBehalfOf<F>` coerces to a
    /// shorter lifetime wherever `F` does.
    #[must_use = "futures do nothing unless polled"]
    #[derive(Debug)]
    pub struct OnBehalfOf<F> {
        // Structurally pinned; dropped only by the `PinnedDrop` below or moved out by
        // `into_inner` (I11).
        #[pin]
        inner: ManuallyDrop<F>,
        rank: RankId,
    }

    impl<F> PinnedDrop for OnBehalfOf<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let rank = *this.rank;
            let inner = this.inner;
            on_behalf_of(rank, || {
                // SAFETY: this is `OnBehalfOf`'s drop, which runs once, and `into_inner` (the
                // only other way the future leaves) forgets the wrapper without running it: the
                // future is dropped exactly once, in place, never moved while pinned (I11).
                unsafe { ManuallyDrop::drop(inner.get_unchecked_mut()) }
            });
        }
    }
}

impl<F> OnBehalfOf<F> {
    /// The rank this future runs as.
    ///
    /// ```
    /// use ranklocal::{OnBehalfExt, RankId};
    /// let me = RankId::current();
    /// assert_eq!(async {}.on_behalf_of(me).rank(), me);
    /// ```
    pub fn rank(&self) -> RankId {
        self.rank
    }

    /// Unwraps the inner future (which then no longer runs, nor drops, as the rank).
    ///
    /// ```
    /// use ranklocal::{OnBehalfExt, RankId};
    /// let fut = async { 1 }.on_behalf_of(RankId::current());
    /// let _plain = fut.into_inner();
    /// ```
    pub fn into_inner(self) -> F {
        // `OnBehalfOf` has a drop, so it cannot be destructured: take the field out by reading
        // it and forget the wrapper (tracing's `Instrumented::into_inner` does the same).
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is owned and not pinned (taken by value), its drop never runs
        // (`ManuallyDrop`), and the field is read exactly once, so the future is moved out once
        // and never dropped in place (I11). `rank` is `Copy`: nothing else needs dropping.
        ManuallyDrop::into_inner(unsafe { core::ptr::read(&this.inner) })
    }
}

/// A clone runs as the same rank (like `tracing`'s `Instrumented`); the inner future is cloned as
/// it is, unpolled or mid-way, as `F::clone` does.
///
/// ```
/// use ranklocal::{OnBehalfExt, RankId};
/// let me = RankId::current();
/// let fut = std::future::ready(7).on_behalf_of(me);
/// let again = fut.clone();
/// assert_eq!(again.rank(), me);
/// assert_eq!(again.into_inner().into_inner(), 7);
/// ```
impl<F: Clone> Clone for OnBehalfOf<F> {
    fn clone(&self) -> Self {
        OnBehalfOf {
            inner: ManuallyDrop::new(F::clone(&self.inner)),
            rank: self.rank,
        }
    }
}

impl<F: Future> Future for OnBehalfOf<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let rank = *this.rank;
        // SAFETY: the `ManuallyDrop` is structurally pinned and never moved out while pinned
        // (I11), so pinning it pins the `F` inside; `ManuallyDrop` is `repr(transparent)`.
        let inner = unsafe { this.inner.map_unchecked_mut(|f| &mut **f) };
        on_behalf_of(rank, || inner.poll(cx))
    }
}
