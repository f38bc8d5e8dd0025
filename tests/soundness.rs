//! Regression tests for the wrong results of issue 10: each failed before its fix.
//! - a panicking `T::drop` must not leak the instances after it (`clear`, `purge_exited`, drop,
//!   `into_iter`): all 8 drops are observed, then the panic propagates;
//! - `OnBehalfOf` drops its inner future inside the rank.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;

use ranklocal::{Backend, OnBehalfExt, RankId, RankLocal};

const N: usize = 8;

/// Counts its drops; the one built with `panics` panics in `drop` (after counting).
struct Bomb {
    drops: Arc<AtomicUsize>,
    panics: bool,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        if self.panics {
            panic!("Bomb::drop panics on purpose");
        }
    }
}

/// A `RankLocal` holding `N` instances, one of exited thread each; the 4th panics when dropped.
fn filled<B: Backend>(drops: &Arc<AtomicUsize>) -> RankLocal<Bomb, B> {
    let rl = RankLocal::<Bomb, B>::new();
    thread::scope(|s| {
        for i in 0..N {
            let rl = &rl;
            s.spawn(move || {
                rl.get_or(|| Bomb {
                    drops: drops.clone(),
                    panics: i == 3,
                });
            })
            .join()
            .unwrap();
        }
    });
    assert_eq!(rl.len(), N);
    rl
}

fn assert_all_dropped_then_panicked(drops: &AtomicUsize, f: impl FnOnce()) {
    let r = catch_unwind(AssertUnwindSafe(f));
    assert!(r.is_err(), "the panic of T::drop was not propagated");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        N,
        "instances after the panicking one were leaked"
    );
}

fn clear_keeps_dropping_after_a_panic<B: Backend>() {
    let drops = Arc::new(AtomicUsize::new(0));
    let mut rl = filled::<B>(&drops);
    assert_all_dropped_then_panicked(&drops, || rl.clear());
    assert!(rl.is_empty());
    assert_eq!(
        drops.load(Ordering::SeqCst),
        N,
        "an instance was dropped twice"
    );
}

fn purge_exited_keeps_dropping_after_a_panic<B: Backend>() {
    let drops = Arc::new(AtomicUsize::new(0));
    let mut rl = filled::<B>(&drops);
    assert_all_dropped_then_panicked(&drops, || {
        rl.purge_exited();
    });
    assert!(rl.is_empty());
    drop(rl);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        N,
        "an instance was dropped twice"
    );
}

fn drop_keeps_dropping_after_a_panic<B: Backend>() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rl = filled::<B>(&drops);
    assert_all_dropped_then_panicked(&drops, || drop(rl));
}

fn into_iter_keeps_dropping_after_a_panic<B: Backend>() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rl = filled::<B>(&drops);
    assert_all_dropped_then_panicked(&drops, || {
        let it = rl.into_iter();
        drop(it);
    });
    let rl = filled::<B>(&drops);
    drops.store(0, Ordering::SeqCst);
    assert_all_dropped_then_panicked(&drops, || {
        for (_, v) in rl {
            drop(v);
        }
    });
}

macro_rules! per_backend {
    ($($backend:ident: $($test:ident),*;)*) => {
        $($(
            paste_test!($test, $backend);
        )*)*
    };
}

macro_rules! paste_test {
    ($test:ident, $backend:ident) => {
        #[test]
        fn $test() {
            super::$test::<ranklocal::$backend>();
        }
    };
}

mod epoch {
    per_backend! { Epoch: clear_keeps_dropping_after_a_panic, purge_exited_keeps_dropping_after_a_panic,
    drop_keeps_dropping_after_a_panic, into_iter_keeps_dropping_after_a_panic; }
}
mod baseline {
    per_backend! { Baseline: clear_keeps_dropping_after_a_panic, purge_exited_keeps_dropping_after_a_panic,
    drop_keeps_dropping_after_a_panic, into_iter_keeps_dropping_after_a_panic; }
}
mod arc_swap {
    per_backend! { ArcSwap: clear_keeps_dropping_after_a_panic, purge_exited_keeps_dropping_after_a_panic,
    drop_keeps_dropping_after_a_panic, into_iter_keeps_dropping_after_a_panic; }
}

/// Records the rank current when it is dropped.
struct RecordDropRank(Arc<Mutex<Option<RankId>>>);

impl Drop for RecordDropRank {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(RankId::current());
    }
}

/// A future that is pending on its first poll and ready on the second.
struct PendingOnce(bool);

impl Future for PendingOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

fn spare_rank() -> RankId {
    thread::spawn(RankId::this_thread).join().unwrap()
}

#[test]
fn on_behalf_of_drops_a_polled_future_inside_the_rank() {
    let rank = spare_rank();
    let seen = Arc::new(Mutex::new(None));
    let guard = RecordDropRank(seen.clone());
    let mut fut = Box::pin(
        async move {
            let _guard = guard;
            PendingOnce(false).await;
        }
        .on_behalf_of(rank),
    );
    let mut cx = Context::from_waker(Waker::noop());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    drop(fut); // cancelled while pending: the guard lives in the future's state
    assert_eq!(
        *seen.lock().unwrap(),
        Some(rank),
        "inner future dropped outside the rank"
    );
    assert_eq!(
        RankId::current(),
        RankId::this_thread(),
        "rank not restored after drop"
    );
}

#[test]
fn on_behalf_of_drops_an_unpolled_future_inside_the_rank() {
    let rank = spare_rank();
    let seen = Arc::new(Mutex::new(None));
    let guard = RecordDropRank(seen.clone());
    let fut = async move {
        let _guard = guard;
    }
    .on_behalf_of(rank);
    drop(fut);
    assert_eq!(
        *seen.lock().unwrap(),
        Some(rank),
        "inner future dropped outside the rank"
    );
}

#[test]
fn into_inner_hands_the_future_back_undropped() {
    let rank = spare_rank();
    let seen = Arc::new(Mutex::new(None));
    let guard = RecordDropRank(seen.clone());
    let fut = async move {
        let _guard = guard;
        RankId::current()
    }
    .on_behalf_of(rank);
    assert_eq!(fut.rank(), rank);
    let inner = fut.into_inner();
    assert_eq!(*seen.lock().unwrap(), None, "into_inner dropped the future");
    drop(inner);
    assert_eq!(*seen.lock().unwrap(), Some(RankId::this_thread()));
}

#[test]
fn a_panicking_inner_drop_restores_the_rank() {
    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("inner drop panics");
        }
    }
    let rank = spare_rank();
    let p = PanicOnDrop;
    let fut = async move {
        let _p = p;
    }
    .on_behalf_of(rank);
    assert!(catch_unwind(AssertUnwindSafe(|| drop(fut))).is_err());
    assert_eq!(RankId::current(), RankId::this_thread());
}
