//! Ranks and carrying them: logical ranks (`Rank`), rank ids, acting for a rank from any thread,
//! carrying the rank into spawned work (`RankId::bind`, `OnBehalfExt::in_current_rank`) and into
//! futures polled on several threads (`on_behalf_of` as a future, also on a multi-threaded tokio
//! runtime). The `table_` tests check each row of the crate docs' "what carries the rank" table
//! that can be checked here (std and tokio; rayon is not a dependency).

mod common;

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::task::Poll;
use std::thread;

use common::{addr, block_on, parked_rank, poll_on_a_new_thread, YieldOnce};
use ranklocal::{on_behalf_of, Backend, OnBehalfExt, Rank, RankId, RankLocal};

common::backend_tests! {
    rank_ids_are_fresh_and_share_the_thread_id_space,
    a_rank_is_acted_as_from_any_thread,
    bind_runs_as_the_rank_and_restores,
    in_current_rank_takes_the_rank_current_when_called,
    async_polls_on_two_threads_both_run_as_the_rank,
    #[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
    async_every_poll_runs_as_the_rank,
    table_std_threads,
    table_future_returned_from_a_closure,
    #[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
    table_tokio_multi_thread,
    #[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
    table_tokio_local_set_and_current_thread,
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
    // `Display` of its id (found by mutation testing: only a doctest showed it)
    assert_eq!(r.id().to_string(), format!("rank#{}", r.id().as_u64()));
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
    assert!(poll_on_a_new_thread(fut.as_mut()).is_pending());
    let Poll::Ready((first, second)) = poll_on_a_new_thread(fut.as_mut()) else {
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

/// Tasks wrapped with `on_behalf_of` on a multi-threaded tokio runtime: every poll runs as the
/// rank, on whichever worker polls it, and reaches the rank's instance. One task per rank is
/// moved between workers for certain (see [`moved_task`]); 32 more run alongside each other.
fn async_every_poll_runs_as_the_rank<B: Backend>() {
    let rl: &'static RankLocal<AtomicUsize, B> = Box::leak(Box::new(RankLocal::new()));
    let owners: Vec<(RankId, mpsc::Sender<()>, thread::JoinHandle<()>)> =
        (0..4).map(|_| parked_rank()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // one at a time: each blocks a worker until another worker has polled it
        for (rank, _, _) in &owners {
            let polls = tokio::spawn(moved_task(rl, *rank)).await.unwrap();
            for (current, worker, instance) in polls {
                assert_eq!(current, *rank, "a poll did not run as the rank");
                assert_ne!(worker, *rank);
                assert_eq!(instance, addr(rl.get_for(*rank).unwrap()));
            }
            let [first, second] = polls;
            assert_ne!(
                first.1, second.1,
                "the task's second poll ran on the worker that is blocked"
            );
        }
        let mut tasks = Vec::new();
        for (i, (rank, _, _)) in owners.iter().enumerate().cycle().take(32) {
            let rank = *rank;
            tasks.push(tokio::spawn(
                async move {
                    for _ in 0..20 {
                        assert_eq!(RankId::current(), rank);
                        assert_ne!(RankId::this_thread(), rank);
                        rl.get().fetch_add(1, Ordering::Relaxed);
                        tokio::task::yield_now().await;
                    }
                    i
                }
                .on_behalf_of(rank),
            ));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    for (rank, rel, h) in owners {
        assert_eq!(
            rl.get_for(rank).unwrap().load(Ordering::Relaxed),
            2 + 8 * 20
        );
        drop(rel);
        h.join().unwrap();
    }
    assert_eq!(
        rl.len(),
        4,
        "a worker thread created an instance of its own"
    );
}

/// A task wrapped with `on_behalf_of(rank)` that tokio polls twice, on two different workers for
/// certain: each poll returns the current rank, the worker's own rank and the address of the
/// rank's instance (counting one use in it).
///
/// The move is forced, not hoped for (tokio 1's multi-thread scheduler): on its first poll, on
/// worker X, the task spawns a blocker, which goes to X's LIFO slot (only X polls it; other
/// workers cannot steal it), then wakes itself and returns `Pending` ([`YieldOnce`]): a task
/// woken during its own poll is put at the back of X's run queue, and an idle worker is woken to
/// steal from it. Right after the task's poll X polls its LIFO slot, the blocker, which blocks X
/// until the task's second poll has run: that poll can only be made by another worker. Should
/// tokio ever not move the task, the blocker gives up after [`common::DEADLOCK`] and the second
/// poll runs on X: the caller's assertion that the workers differ fails (no worker is blocked
/// for good; callers run these tasks one at a time, so other workers are free to steal).
/// (`tokio::task::yield_now` would not do: it defers the wake-up until X parks.)
async fn moved_task<B: Backend>(
    rl: &'static RankLocal<AtomicUsize, B>,
    rank: RankId,
) -> [(RankId, RankId, usize); 2] {
    let poll = || {
        let v = rl.get();
        v.fetch_add(1, Ordering::Relaxed);
        (RankId::current(), RankId::this_thread(), addr(v))
    };
    async move {
        let first = poll();
        let (second_tx, second_rx) = mpsc::channel::<()>();
        tokio::spawn(async move {
            let _ = second_rx.recv_timeout(common::DEADLOCK);
        });
        YieldOnce(false).await;
        let second = poll();
        let _ = second_tx.send(());
        [first, second]
    }
    .on_behalf_of(rank)
    .await
}

/// The same, deterministically: one `on_behalf_of` future polled first on one thread, then on
/// another; both polls run as the rank and reach the rank's instance.
fn async_polls_on_two_threads_both_run_as_the_rank<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let (rank, release, owner) = parked_rank();
    let rl_ref = &rl;
    let mut fut = Box::pin(
        async move {
            let first = (RankId::current(), RankId::this_thread(), addr(rl_ref.get()));
            YieldOnce(false).await;
            let second = (RankId::current(), RankId::this_thread(), addr(rl_ref.get()));
            (first, second)
        }
        .on_behalf_of(rank),
    );
    assert!(poll_on_a_new_thread(fut.as_mut()).is_pending());
    let Poll::Ready((first, second)) = poll_on_a_new_thread(fut.as_mut()) else {
        panic!("the future did not finish on its second poll");
    };
    assert_eq!(first.0, rank, "first poll did not run as the rank");
    assert_eq!(second.0, rank, "second poll did not run as the rank");
    assert_ne!(first.1, second.1, "both polls ran on one thread");
    assert_eq!(
        first.2, second.2,
        "the two polls reached different instances"
    );
    assert_eq!(addr(rl.get_for(rank).unwrap()), first.2);
    assert_eq!(
        rl.len(),
        1,
        "a polling thread created an instance of its own"
    );
    assert_eq!(RankId::current(), RankId::this_thread());
    drop(release);
    owner.join().unwrap();
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
