//! Logical ranks (`Rank`), exited ranks, and carrying the rank into spawned work (`RankId::bind`,
//! `OnBehalfExt::in_current_rank`), stamped over every backend by `backend_suite!` as in
//! `tests/semantics.rs`. The `table_` tests check each row of the crate docs' "what carries the
//! rank" table that can be checked here (std and tokio; rayon is not a dependency).

use std::collections::HashSet;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread;

use ranklocal::{on_behalf_of, Backend, OnBehalfExt, Rank, RankId, RankLocal};

/// Counts drops of its instances.
struct Counted(Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn addr<T>(r: &T) -> usize {
    r as *const T as usize
}

/// Polls `f` to completion on this thread with a no-op waker.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A future that returns `Pending` once.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[test]
fn rank_is_send_sync_default_debug() {
    fn send_sync<T: Send + Sync + Default + std::fmt::Debug>() {}
    send_sync::<Rank>();
    let r = Rank::default();
    let dbg = format!("{r:?}");
    assert!(
        dbg.starts_with("Rank") && dbg.contains(&r.id().as_u64().to_string()),
        "{dbg}"
    );
    assert_ne!(Rank::default().id(), r.id());
}

ranklocal::rank_local! {
    /// A `rank_local!` static: its own-rank slot must not answer for a `Rank` or a bound closure.
    static HITS: AtomicUsize = AtomicUsize::new(0);
}

#[test]
fn rank_local_statics_follow_ranks_and_bind() {
    thread::spawn(|| {
        HITS.get().fetch_add(1, Ordering::Relaxed); // this thread's own slot is filled now
        let r = Rank::new();
        thread::spawn(r.id().bind(|| HITS.get().fetch_add(10, Ordering::Relaxed)))
            .join()
            .unwrap();
        r.id().bind(|| HITS.get().fetch_add(100, Ordering::Relaxed))();
        assert_eq!(
            on_behalf_of(r.id(), || HITS.get().load(Ordering::Relaxed)),
            110
        );
        assert_eq!(HITS.get_for(r.id()).unwrap().load(Ordering::Relaxed), 110);
        assert_eq!(
            HITS.get().load(Ordering::Relaxed),
            1,
            "own slot answered for the Rank"
        );
        let fut = on_behalf_of(r.id(), || {
            async { HITS.get().load(Ordering::Relaxed) }.in_current_rank()
        });
        assert_eq!(block_on(fut), 110);
    })
    .join()
    .unwrap();
}

fn rank_ids_are_fresh_and_share_the_thread_id_space<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    let mut seen = HashSet::new();
    assert!(seen.insert(RankId::this_thread()));
    for _ in 0..(if cfg!(miri) { 4 } else { 100 }) {
        let r = Rank::new();
        assert!(seen.insert(r.id()), "rank id {} reused", r.id());
        assert!(rl.get_for(r.id()).is_none());
        drop(r); // an exited Rank's id is not handed out again either
        let t = thread::spawn(RankId::this_thread).join().unwrap();
        assert!(seen.insert(t), "thread got id {t} already used");
    }
    let r = Rank::new();
    assert_ne!(
        RankId::current(),
        r.id(),
        "making a Rank changed the current rank"
    );
    assert_eq!(RankId::current(), RankId::this_thread());
}

fn a_rank_is_acted_as_from_any_thread<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let rank = Rank::new();
    let id = rank.id();
    let made = thread::scope(|s| {
        s.spawn(|| on_behalf_of(id, || addr(rl.get())))
            .join()
            .unwrap()
    });
    let again = thread::scope(|s| {
        s.spawn(|| {
            on_behalf_of(id, || {
                rl.get().fetch_add(1, Ordering::Relaxed);
                addr(rl.get())
            })
        })
        .join()
        .unwrap()
    });
    assert_eq!(
        made, again,
        "two delegates of one Rank got different instances"
    );
    assert_eq!(addr(rl.get_for(id).unwrap()), made);
    assert_eq!(on_behalf_of(id, || addr(rl.get())), made);
    assert_eq!(rl.len(), 1, "a delegate made an instance of its own");
    assert!(rl.try_get().is_none());
}

fn purge_keeps_live_ranks_and_drops_dropped_ones<B: Backend>() {
    let drops = Arc::new(AtomicUsize::new(0));
    let mut rl = RankLocal::<Counted, B>::new();
    let live = Rank::new();
    let dropped_here = Rank::new();
    let dropped_elsewhere = Rank::new();
    for r in [&live, &dropped_here, &dropped_elsewhere] {
        on_behalf_of(r.id(), || rl.get_or(|| Counted(drops.clone())));
    }
    let (dead_a, dead_b) = (dropped_here.id(), dropped_elsewhere.id());
    assert_eq!(rl.purge_exited(), 0, "purge dropped a live Rank's instance");
    assert_eq!(rl.len(), 3);
    drop(dropped_here);
    thread::spawn(move || drop(dropped_elsewhere)) // Rank is Send: dropped on another thread
        .join()
        .unwrap();
    assert_eq!(rl.purge_exited(), 2);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    assert!(rl.get_for(dead_a).is_none() && rl.get_for(dead_b).is_none());
    assert!(rl.get_for(live.id()).is_some());
    assert_eq!(rl.purge_exited(), 0);
    // an Arc<Rank> exits with its last owner
    let shared = Arc::new(Rank::new());
    on_behalf_of(shared.id(), || rl.get_or(|| Counted(drops.clone())));
    let other = shared.clone();
    drop(shared);
    assert_eq!(
        rl.purge_exited(),
        0,
        "rank exited while an Arc still held it"
    );
    drop(other);
    assert_eq!(rl.purge_exited(), 1);
    drop(live);
    assert_eq!(rl.purge_exited(), 1);
    assert!(rl.is_empty());
    assert_eq!(drops.load(Ordering::SeqCst), 4);
}

/// How the two kinds of rank exit.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Thread,
    Logical,
}

/// A rank that has exited, with an instance of `rl` made for it before it exited.
fn exited_rank<B: Backend>(
    kind: Kind,
    rl: &RankLocal<Counted, B>,
    drops: &Arc<AtomicUsize>,
) -> RankId {
    match kind {
        Kind::Thread => thread::scope(|s| {
            s.spawn(|| {
                rl.get_or(|| Counted(drops.clone()));
                RankId::this_thread()
            })
            .join()
            .unwrap()
        }),
        Kind::Logical => {
            let r = Rank::new();
            on_behalf_of(r.id(), || rl.get_or(|| Counted(drops.clone())));
            r.id()
        }
    }
}

/// Acting for an exited rank is defined: until `purge_exited` its instance is reachable (`get_for`,
/// and `get` inside `on_behalf_of` returns it without running `init`); `get` for an exited rank
/// with no instance creates one, owned by that rank, and the next `purge_exited` drops it; after a
/// purge `get_for` is `None` and acting for the rank again starts from a fresh `init`.
fn acting_for_an_exited_rank<B: Backend>() {
    for kind in [Kind::Thread, Kind::Logical] {
        let drops = Arc::new(AtomicUsize::new(0));
        let inits = AtomicUsize::new(0);
        let mut rl = RankLocal::<Counted, B>::new();
        let dead = exited_rank(kind, &rl, &drops);
        let before = addr(rl.get_for(dead).expect("instance gone before any purge"));
        let got = on_behalf_of(dead, || {
            addr(rl.get_or(|| {
                inits.fetch_add(1, Ordering::SeqCst);
                Counted(drops.clone())
            }))
        });
        assert_eq!(
            got, before,
            "{kind:?}: acting for an exited rank re-ran init"
        );
        assert_eq!(inits.load(Ordering::SeqCst), 0);
        // a second RankLocal the rank never touched: acting for it creates an instance
        let mut fresh = RankLocal::<Counted, B>::new();
        on_behalf_of(dead, || fresh.get_or(|| Counted(drops.clone())));
        assert!(fresh.get_for(dead).is_some());
        assert_eq!(
            fresh.purge_exited(),
            1,
            "{kind:?}: instance of an exited rank kept"
        );
        assert_eq!(rl.purge_exited(), 1);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        assert!(
            rl.get_for(dead).is_none(),
            "{kind:?}: exited rank survived purge"
        );
        assert!(on_behalf_of(dead, || rl.try_get()).is_none());
        // after the purge, acting for it again runs init again; the next purge drops it again
        on_behalf_of(dead, || {
            rl.get_or(|| {
                inits.fetch_add(1, Ordering::SeqCst);
                Counted(drops.clone())
            })
        });
        assert_eq!(inits.load(Ordering::SeqCst), 1);
        assert_eq!(rl.purge_exited(), 1);
        assert_eq!(drops.load(Ordering::SeqCst), 3, "{kind:?}");
    }
}

fn bind_runs_as_the_rank_and_restores<B: Backend>() {
    let rl: &'static RankLocal<AtomicUsize, B> = Box::leak(Box::new(RankLocal::new()));
    let rank = Rank::new();
    let id = rank.id();
    // the bound closure is Send + 'static: std::thread::spawn takes it
    let (seen, after) = thread::spawn(move || {
        let bound = id.bind(|| {
            rl.get().fetch_add(1, Ordering::Relaxed);
            RankId::current()
        });
        (bound(), RankId::current() == RankId::this_thread())
    })
    .join()
    .unwrap();
    assert_eq!(seen, id);
    assert!(
        after,
        "the thread's rank was not restored after the bound closure"
    );
    let seen = thread::spawn(id.bind(RankId::current)).join().unwrap();
    assert_eq!(seen, id);
    assert_eq!(rl.get_for(id).unwrap().load(Ordering::Relaxed), 1);
    assert_eq!(
        rl.len(),
        1,
        "the spawned thread made an instance of its own"
    );
    // the rank is the one bind was called on, not the one current where the closure runs
    let other = Rank::new();
    let f = on_behalf_of(other.id(), || RankId::current().bind(RankId::current));
    assert_eq!(f(), other.id());
    assert_eq!(on_behalf_of(id, f_for(other.id())), other.id());
    // restored on return and on unwind
    assert_eq!(RankId::current(), RankId::this_thread());
    let r = catch_unwind(AssertUnwindSafe(id.bind(|| panic!("boom"))));
    assert!(r.is_err());
    assert_eq!(
        RankId::current(),
        RankId::this_thread(),
        "not restored on unwind"
    );
}

/// Records the rank current when it is dropped.
struct DropsAs(Arc<std::sync::Mutex<Vec<RankId>>>);
impl Drop for DropsAs {
    fn drop(&mut self) {
        self.0.lock().unwrap().push(RankId::current());
    }
}

#[test]
fn a_bound_closure_drops_its_captures_as_the_rank() {
    let rank = Rank::new();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    // called: the captures are dropped when `f` returns, inside the rank
    let guard = DropsAs(seen.clone());
    rank.id().bind(move || drop(guard))();
    // never called (a cancelled job): still dropped as the rank, on whichever thread drops it
    let guard = DropsAs(seen.clone());
    let uncalled = rank.id().bind(move || drop(guard));
    thread::spawn(move || drop(uncalled)).join().unwrap();
    assert_eq!(*seen.lock().unwrap(), [rank.id(), rank.id()]);
    assert_eq!(RankId::current(), RankId::this_thread());
}

fn f_for(rank: RankId) -> impl FnOnce() -> RankId {
    rank.bind(RankId::current)
}

fn in_current_rank_takes_the_rank_current_when_called<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let rank = Rank::new();
    let rl_ref = &rl;
    let mut fut = Box::pin(on_behalf_of(rank.id(), || {
        async move {
            let first = (RankId::current(), RankId::this_thread(), addr(rl_ref.get()));
            YieldOnce(false).await;
            let second = (RankId::current(), RankId::this_thread(), addr(rl_ref.get()));
            (first, second)
        }
        .in_current_rank()
    }));
    assert_eq!(fut.rank(), rank.id());
    let mut poll_on_a_new_thread = || {
        thread::scope(|s| {
            s.spawn(|| fut.as_mut().poll(&mut Context::from_waker(Waker::noop())))
                .join()
                .unwrap()
        })
    };
    assert!(poll_on_a_new_thread().is_pending());
    let Poll::Ready((first, second)) = poll_on_a_new_thread() else {
        panic!("the future did not finish on its second poll");
    };
    assert_eq!((first.0, second.0), (rank.id(), rank.id()));
    assert_ne!(first.1, second.1, "both polls ran on one thread");
    assert_eq!(first.2, second.2);
    assert_eq!(addr(rl.get_for(rank.id()).unwrap()), first.2);
    assert_eq!(rl.len(), 1);
    // outside any delegation it is the thread's own rank
    let own = async { RankId::current() }.in_current_rank();
    assert_eq!(own.rank(), RankId::this_thread());
    assert_eq!(block_on(own), RankId::this_thread());
}

/// Table, std rows: a std thread (plain or scoped) spawned inside `on_behalf_of` runs as its own
/// rank; `bind` carries the rank.
fn table_std_threads<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let rank = Rank::new();
    let (plain, plain_own) = on_behalf_of(rank.id(), || {
        thread::spawn(|| (RankId::current(), RankId::this_thread()))
            .join()
            .unwrap()
    });
    assert_eq!(plain, plain_own, "std::thread::spawn carried the rank");
    assert_ne!(plain, rank.id());
    on_behalf_of(rank.id(), || {
        thread::scope(|s| {
            let unbound = s.spawn(|| {
                rl.get().fetch_add(1, Ordering::Relaxed);
                RankId::current()
            });
            let bound = s.spawn(RankId::current().bind(|| {
                rl.get().fetch_add(10, Ordering::Relaxed);
                RankId::current()
            }));
            let unbound = unbound.join().unwrap();
            assert_ne!(unbound, rank.id(), "a scoped thread carried the rank");
            assert_eq!(rl.get_for(unbound).unwrap().load(Ordering::Relaxed), 1);
            assert_eq!(bound.join().unwrap(), rank.id());
        })
    });
    assert_eq!(rl.get_for(rank.id()).unwrap().load(Ordering::Relaxed), 10);
    let bound = thread::spawn(on_behalf_of(rank.id(), || {
        RankId::current().bind(RankId::current)
    }));
    assert_eq!(bound.join().unwrap(), rank.id());
}

/// Table row: a future returned from an `on_behalf_of` closure is only *built* inside it; it is
/// polled later as whatever rank polls it. `in_current_rank` inside the closure carries the rank.
fn table_future_returned_from_a_closure<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let rank = Rank::new();
    async fn work<B: Backend>(rl: &RankLocal<AtomicUsize, B>) -> RankId {
        rl.get().fetch_add(1, Ordering::Relaxed);
        RankId::current()
    }
    let plain = on_behalf_of(rank.id(), || work(&rl));
    assert_eq!(
        block_on(plain),
        RankId::this_thread(),
        "the closure carried into the future"
    );
    let wrapped = on_behalf_of(rank.id(), || work(&rl).in_current_rank());
    assert_eq!(block_on(wrapped), rank.id());
    assert_eq!(rl.get_for(rank.id()).unwrap().load(Ordering::Relaxed), 1);
    assert_eq!(rl.try_get().unwrap().load(Ordering::Relaxed), 1);
}

fn multi_thread_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Table, tokio rows on the multi-thread runtime: inside a task wrapped with `on_behalf_of`,
/// awaited futures and `block_in_place` run as the rank; `tokio::spawn` and `spawn_blocking` run
/// as the pool thread's own rank; `in_current_rank` / `bind` carry it.
fn table_tokio_multi_thread<B: Backend>() {
    let rl: &'static RankLocal<AtomicUsize, B> = Box::leak(Box::new(RankLocal::new()));
    let rank = Rank::new();
    let id = rank.id();
    let rt = multi_thread_rt();
    let r = rt.block_on(
        rt.spawn(
            async move {
                let awaited = async { RankId::current() }.await;
                let in_place = tokio::task::block_in_place(RankId::current);
                let spawned = tokio::spawn(async { (RankId::current(), RankId::this_thread()) })
                    .await
                    .unwrap();
                let spawned_in = tokio::spawn(
                    async {
                        rl.get().fetch_add(1, Ordering::Relaxed);
                        RankId::current()
                    }
                    .in_current_rank(),
                )
                .await
                .unwrap();
                let blocking =
                    tokio::task::spawn_blocking(|| (RankId::current(), RankId::this_thread()))
                        .await
                        .unwrap();
                let blocking_bound = tokio::task::spawn_blocking(RankId::current().bind(|| {
                    rl.get().fetch_add(1, Ordering::Relaxed);
                    RankId::current()
                }))
                .await
                .unwrap();
                (
                    awaited,
                    in_place,
                    spawned,
                    spawned_in,
                    blocking,
                    blocking_bound,
                )
            }
            .on_behalf_of(id),
        ),
    );
    let (awaited, in_place, spawned, spawned_in, blocking, blocking_bound) = r.unwrap();
    assert_eq!(awaited, id, "an awaited future did not run as the rank");
    assert_eq!(in_place, id, "block_in_place did not run as the rank");
    assert_eq!(spawned.0, spawned.1, "tokio::spawn carried the rank");
    assert_ne!(spawned.0, id);
    assert_eq!(spawned_in, id, "in_current_rank did not carry the rank");
    assert_eq!(blocking.0, blocking.1, "spawn_blocking carried the rank");
    assert_ne!(blocking.0, id);
    assert_eq!(
        blocking_bound, id,
        "bind did not carry the rank into spawn_blocking"
    );
    assert_eq!(rl.get_for(id).unwrap().load(Ordering::Relaxed), 2);
    assert_eq!(rl.len(), 1, "a pool thread made an instance of its own");
}

/// Table, tokio rows that run tasks on the thread that drives the runtime: a `LocalSet`'s
/// `spawn_local` tasks and a current-thread runtime's `tokio::spawn` tasks run as the rank of
/// whatever polls the `LocalSet` / calls `block_on`, not the spawner's.
fn table_tokio_local_set_and_current_thread<B: Backend>() {
    let rl: &'static RankLocal<AtomicUsize, B> = Box::leak(Box::new(RankLocal::new()));
    let rank = Rank::new();
    let id = rank.id();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    // the future given to run_until is wrapped; the local tasks it spawns are not
    let (plain, carried) = local.block_on(
        &rt,
        async move {
            let plain = tokio::task::spawn_local(async { RankId::current() })
                .await
                .unwrap();
            let carried = tokio::task::spawn_local(
                async {
                    rl.get().fetch_add(1, Ordering::Relaxed);
                    RankId::current()
                }
                .in_current_rank(),
            )
            .await
            .unwrap();
            (plain, carried)
        }
        .on_behalf_of(id),
    );
    assert_eq!(
        plain,
        RankId::this_thread(),
        "spawn_local carried the spawner's rank"
    );
    assert_eq!(carried, id);
    // driven from inside a delegation, spawned tasks run as the driver's rank (not the spawner's)
    let other = Rank::new();
    let spawned = on_behalf_of(other.id(), || {
        rt.block_on(async move {
            tokio::spawn(async { RankId::current() }.on_behalf_of(id));
            tokio::spawn(async { RankId::current() }).await.unwrap()
        })
    });
    assert_eq!(
        spawned,
        other.id(),
        "current-thread task did not run as the driver's rank"
    );
    let local_driven = on_behalf_of(other.id(), || {
        tokio::task::LocalSet::new().block_on(&rt, async move {
            tokio::task::spawn_local(async { RankId::current() })
                .await
                .unwrap()
        })
    });
    assert_eq!(local_driven, other.id());
    assert_eq!(rl.get_for(id).unwrap().load(Ordering::Relaxed), 1);
}

/// Stamps every generic test above over one backend.
macro_rules! backend_suite {
    ($($module:ident: $backend:ty),* $(,)?) => {$(
        mod $module {
            type B = $backend;
            backend_suite!(@tests B;
                rank_ids_are_fresh_and_share_the_thread_id_space,
                a_rank_is_acted_as_from_any_thread,
                purge_keeps_live_ranks_and_drops_dropped_ones,
                acting_for_an_exited_rank,
                bind_runs_as_the_rank_and_restores,
                in_current_rank_takes_the_rank_current_when_called,
                table_std_threads,
                table_future_returned_from_a_closure,
            );
            backend_suite!(@tokio B;
                table_tokio_multi_thread,
                table_tokio_local_set_and_current_thread,
            );
        }
    )*};
    (@tests $b:ident; $($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            super::$name::<$b>();
        }
    )*};
    (@tokio $b:ident; $($name:ident),* $(,)?) => {$(
        #[test]
        #[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
        fn $name() {
            super::$name::<$b>();
        }
    )*};
}

backend_suite! {
    epoch: ranklocal::Epoch,
    arc_swap: ranklocal::ArcSwap,
    baseline: ranklocal::Baseline,
}
