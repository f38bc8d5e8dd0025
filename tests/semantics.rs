//! The spec's numbered semantics, one suite stamped over every backend by `backend_suite!`
//! (as arc-swap's `tests/stress.rs` does). Test names start with the semantic they check (`s1_`…).

use std::collections::HashSet;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::Duration;

use ranklocal::{on_behalf_of, Backend, OnBehalfExt, RankId, RankLocal};

/// A deadlock guard, not a timing assertion: generous enough for any machine.
const DEADLOCK: Duration = Duration::from_secs(60);
/// Threads for the multi-threaded tests: oversubscribes a 2-core machine.
const THREADS: usize = if cfg!(miri) { 4 } else { 16 };

fn addr<T>(r: &T) -> usize {
    r as *const T as usize
}

/// Runs `f` on a fresh thread, failing the test if it does not finish within [`DEADLOCK`].
fn within_deadline<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(DEADLOCK) {
        Ok(Ok(r)) => r,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("deadlock: the operation did not finish within {DEADLOCK:?}"),
    }
}

/// Spawns a thread that reports its rank and then parks until `release` is dropped or sent.
fn parked_rank() -> (RankId, mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (rank_tx, rank_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let h = thread::spawn(move || {
        rank_tx.send(RankId::this_thread()).unwrap();
        let _ = release_rx.recv();
    });
    (rank_rx.recv().unwrap(), release_tx, h)
}

/// Counts drops of its instances.
struct Counted(Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn s1_threads_see_distinct_instances_and_the_same_one_each_call<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let barrier = Barrier::new(THREADS);
    let addrs: Vec<usize> = thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let first = addr(rl.get());
                    for _ in 0..100 {
                        assert_eq!(addr(rl.get()), first, "instance changed between calls");
                        rl.get().fetch_add(1, Ordering::Relaxed);
                    }
                    assert_eq!(addr(rl.try_get().unwrap()), first);
                    assert_eq!(addr(rl.get_for(RankId::current()).unwrap()), first);
                    first
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: HashSet<_> = addrs.iter().collect();
    assert_eq!(distinct.len(), THREADS, "two threads shared an instance");
    assert_eq!(rl.len(), THREADS);
    assert!(!rl.is_empty());
    assert!(rl.iter().all(|(_, v)| v.load(Ordering::Relaxed) == 100));
}

fn s1_try_get_and_get_for_never_create<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    assert!(rl.is_empty());
    assert!(rl.try_get().is_none());
    assert!(rl.get_for(RankId::current()).is_none());
    assert_eq!(rl.len(), 0);
    assert_eq!(*rl.get_or(|| 7), 7);
    assert_eq!(rl.try_get(), Some(&7));
    assert_eq!(*rl.get_or(|| 8), 7, "init ran again for an existing rank");
}

fn s2_delegation_sees_the_rank_even_after_caching_own<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    let (rank_a, release, h) = parked_rank();
    let a = addr(on_behalf_of(rank_a, || rl.get()));
    // this thread caches its own instance first (the C++ fast path would then misroute)
    let own = addr(rl.get());
    assert_ne!(own, a);
    for _ in 0..3 {
        on_behalf_of(rank_a, || {
            assert_eq!(RankId::current(), rank_a);
            assert_ne!(RankId::this_thread(), rank_a);
            assert_eq!(
                addr(rl.get()),
                a,
                "delegated get returned the cached own instance"
            );
            assert_eq!(addr(rl.try_get().unwrap()), a);
        });
        assert_eq!(
            addr(rl.get()),
            own,
            "own instance not restored after delegation"
        );
    }
    assert_eq!(addr(rl.get_for(rank_a).unwrap()), a);
    drop(release);
    h.join().unwrap();
}

fn s2_delegation_nests_and_restores_on_unwind<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    let (ra, rel_a, ha) = parked_rank();
    let (rb, rel_b, hb) = parked_rank();
    let me = RankId::current();
    on_behalf_of(ra, || {
        rl.get_or(|| 1);
        on_behalf_of(rb, || {
            assert_eq!(RankId::current(), rb);
            assert_eq!(*rl.get_or(|| 2), 2);
        });
        assert_eq!(RankId::current(), ra);
        assert_eq!(*rl.get_or(|| 99), 1);
        let r = catch_unwind(AssertUnwindSafe(|| {
            on_behalf_of(rb, || panic!("boom"));
        }));
        assert!(r.is_err());
        assert_eq!(RankId::current(), ra, "rank not restored on unwind");
    });
    assert_eq!(RankId::current(), me);
    assert!(
        rl.try_get().is_none(),
        "this thread never touched its own rank"
    );
    drop((rel_a, rel_b));
    ha.join().unwrap();
    hb.join().unwrap();
}

fn s3_an_instance_made_by_a_delegate_belongs_to_the_rank<B: Backend>() {
    let rl = RankLocal::<AtomicUsize, B>::new();
    thread::scope(|s| {
        let (rank_tx, rank_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<usize>();
        let rl = &rl;
        let owner = s.spawn(move || {
            rank_tx.send(RankId::this_thread()).unwrap();
            let delegated_addr = go_rx.recv().unwrap();
            let v = rl.get_or(|| AtomicUsize::new(999));
            assert_eq!(addr(v), delegated_addr, "owner got a different instance");
            v.load(Ordering::SeqCst)
        });
        let rank = rank_rx.recv().unwrap();
        let v = on_behalf_of(rank, || rl.get_or(|| AtomicUsize::new(5)));
        v.fetch_add(1, Ordering::SeqCst);
        go_tx.send(addr(v)).unwrap();
        assert_eq!(owner.join().unwrap(), 6);
    });
    assert_eq!(rl.len(), 1);
}

fn s4_init_runs_once_per_rank_under_a_race<B: Backend>() {
    let rl = RankLocal::<usize, B>::new();
    let inits = AtomicUsize::new(0);
    let (rank, release, h) = parked_rank();
    let barrier = Barrier::new(THREADS);
    let addrs: Vec<usize> = thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|i| {
                let (rl, inits, barrier) = (&rl, &inits, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let v = on_behalf_of(rank, || {
                        rl.get_or(|| {
                            inits.fetch_add(1, Ordering::SeqCst);
                            thread::yield_now();
                            i
                        })
                    });
                    addr(v)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(inits.load(Ordering::SeqCst), 1, "init ran more than once");
    assert!(
        addrs.windows(2).all(|w| w[0] == w[1]),
        "racers saw different instances"
    );
    assert_eq!(rl.len(), 1);
    drop(release);
    h.join().unwrap();
}

fn s4_panicking_init_inserts_nothing_and_is_retried<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    let r = catch_unwind(AssertUnwindSafe(|| rl.get_or(|| panic!("init failed"))));
    assert!(r.is_err());
    assert!(rl.try_get().is_none());
    assert_eq!(rl.len(), 0);
    assert_eq!(*rl.get_or(|| 3), 3, "init was not retried");
    assert_eq!(rl.len(), 1);
}

fn s4_failing_get_or_try_inserts_nothing<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    assert_eq!(rl.get_or_try(|| Err::<u32, _>("nope")), Err("nope"));
    assert!(rl.try_get().is_none());
    assert_eq!(rl.get_or_try(|| Ok::<_, ()>(4)), Ok(&4));
    assert_eq!(rl.get_or_try(|| Err::<u32, _>("unused")), Ok(&4));
}

fn s4_reentrant_init_panics_with_a_clear_message<B: Backend>() {
    let rl: &'static RankLocal<u32, B> = Box::leak(Box::new(RankLocal::new()));
    let msg = within_deadline(move || {
        let err = catch_unwind(AssertUnwindSafe(|| {
            rl.get_or(|| *rl.get_or(|| 1) + 1);
        }))
        .expect_err("reentrant init did not panic");
        let msg = err
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        // and the RankLocal is still usable afterwards
        assert!(rl.try_get().is_none());
        assert_eq!(*rl.get_or(|| 9), 9);
        msg
    });
    assert!(msg.contains("reentrant"), "unclear panic message: {msg:?}");
}

fn s5_a_slow_init_delays_no_reader_and_no_other_writer<B: Backend>() {
    let rl: &'static RankLocal<u32, B> = Box::leak(Box::new(RankLocal::new()));
    let (rank_a, rel_a, ha) = parked_rank();
    on_behalf_of(rank_a, || rl.get_or(|| 1));
    let (in_init_tx, in_init_rx) = mpsc::channel();
    let (finish_tx, finish_rx) = mpsc::channel::<()>();
    let slow = thread::spawn(move || {
        *rl.get_or(|| {
            in_init_tx.send(()).unwrap();
            finish_rx.recv().unwrap();
            2
        })
    });
    in_init_rx.recv().unwrap(); // the slow init is running now
    within_deadline(move || {
        assert_eq!(rl.get_for(rank_a), Some(&1)); // a reader of another rank
        assert_eq!(on_behalf_of(rank_a, || *rl.get()), 1);
        assert_eq!(*rl.get_or(|| 3), 3); // a writer of another rank
        rl.iter().count()
    });
    finish_tx.send(()).unwrap();
    assert_eq!(slow.join().unwrap(), 2);
    assert_eq!(rl.len(), 3);
    drop(rel_a);
    ha.join().unwrap();
}

fn s5_a_second_asker_waits_for_the_running_init<B: Backend>() {
    let rl: &'static RankLocal<u32, B> = Box::leak(Box::new(RankLocal::new()));
    let (rank, rel, h) = parked_rank();
    let (in_init_tx, in_init_rx) = mpsc::channel();
    let (finish_tx, finish_rx) = mpsc::channel::<()>();
    let first = thread::spawn(move || {
        *on_behalf_of(rank, || {
            rl.get_or(|| {
                in_init_tx.send(()).unwrap();
                finish_rx.recv().unwrap();
                10
            })
        })
    });
    in_init_rx.recv().unwrap();
    let second = thread::spawn(move || *on_behalf_of(rank, || rl.get_or(|| 20)));
    thread::sleep(Duration::from_millis(if cfg!(miri) { 1 } else { 20 }));
    finish_tx.send(()).unwrap();
    assert_eq!(first.join().unwrap(), 10);
    assert_eq!(second.join().unwrap(), 10, "second asker ran its own init");
    drop(rel);
    h.join().unwrap();
}

fn s6_every_instance_is_dropped_exactly_once<B: Backend>() {
    let drops = Arc::new(AtomicUsize::new(0));
    let mut rl = RankLocal::<Counted, B>::new();
    let mk = |rl: &RankLocal<Counted, B>| {
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| rl.get_or(|| Counted(drops.clone())));
            }
        })
    };
    mk(&rl);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    rl.clear();
    assert_eq!(drops.load(Ordering::SeqCst), 4, "clear");
    assert!(rl.is_empty());
    mk(&rl);
    drop(rl);
    assert_eq!(drops.load(Ordering::SeqCst), 8, "drop");
    let rl = RankLocal::<Counted, B>::new();
    mk(&rl);
    let taken: Vec<_> = rl.into_iter().collect();
    assert_eq!(taken.len(), 4);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        8,
        "into_iter dropped values it returned"
    );
    drop(taken);
    assert_eq!(drops.load(Ordering::SeqCst), 12, "into_iter");
}

fn s6_a_new_rank_local_in_the_same_place_sees_no_old_instance<B: Backend>() {
    let mut rl = RankLocal::<u32, B>::new();
    for round in 0..4u32 {
        let place = addr(&rl);
        assert!(rl.try_get().is_none(), "round {round}: stale instance seen");
        assert_eq!(*rl.get_or(|| round), round);
        assert_eq!(*rl.get(), round);
        rl = RankLocal::new(); // dropped and rebuilt at the same address
        assert_eq!(addr(&rl), place);
    }
    // the same through clear(): the thread cache must not hand back a freed instance
    assert_eq!(*rl.get_or(|| 1), 1);
    rl.clear();
    assert!(rl.try_get().is_none());
    assert_eq!(*rl.get_or(|| 2), 2);
}

fn s6_purge_exited_drops_only_exited_ranks<B: Backend>() {
    let drops = Arc::new(AtomicUsize::new(0));
    let mut rl = RankLocal::<Counted, B>::new();
    rl.get_or(|| Counted(drops.clone()));
    let (live_rank, rel, h) = parked_rank();
    on_behalf_of(live_rank, || rl.get_or(|| Counted(drops.clone())));
    let exited: Vec<RankId> = (0..3)
        .map(|_| {
            thread::scope(|s| {
                s.spawn(|| {
                    rl.get_or(|| Counted(drops.clone()));
                    RankId::this_thread()
                })
                .join()
                .unwrap()
            })
        })
        .collect();
    // a delegate can still reach an exited rank's instance until the purge
    assert!(rl.get_for(exited[0]).is_some());
    assert!(on_behalf_of(exited[1], || rl.try_get()).is_some());
    assert_eq!(rl.len(), 5);
    assert_eq!(rl.purge_exited(), 3);
    assert_eq!(drops.load(Ordering::SeqCst), 3);
    assert_eq!(rl.len(), 2);
    for r in &exited {
        assert!(rl.get_for(*r).is_none(), "exited rank survived the purge");
    }
    assert!(rl.try_get().is_some() && rl.get_for(live_rank).is_some());
    assert_eq!(rl.purge_exited(), 0);
    drop(rel);
    h.join().unwrap();
}

fn s9_rank_ids_are_unique_and_never_reused<B: Backend>() {
    let rl = RankLocal::<u32, B>::new();
    let mut seen = HashSet::new();
    seen.insert(RankId::this_thread());
    for _ in 0..(if cfg!(miri) { 8 } else { 200 }) {
        let id = thread::spawn(RankId::this_thread).join().unwrap();
        assert!(seen.insert(id), "rank id {id} reused");
        assert!(rl.get_for(id).is_none());
    }
    let me = RankId::this_thread();
    assert_eq!(me, RankId::this_thread());
    assert_eq!(me.as_u64(), RankId::this_thread().as_u64());
    assert!(format!("{me}").contains(&me.as_u64().to_string()));
}

fn iter_is_one_consistent_snapshot<B: Backend>() {
    let mut rl = RankLocal::<usize, B>::new();
    let ranks: Vec<RankId> = thread::scope(|s| {
        (0..8)
            .map(|i| {
                let rl = &rl;
                s.spawn(move || {
                    rl.get_or(|| i);
                    RankId::this_thread()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect()
    });
    let it = rl.iter();
    rl.get_or(|| 100); // inserted after the snapshot was taken
    let got: Vec<_> = it.collect();
    assert_eq!(got.len(), 8, "iterator saw an insert made after it started");
    let got_ranks: HashSet<_> = got.iter().map(|&(r, _)| r).collect();
    assert_eq!(got_ranks, ranks.iter().copied().collect());
    for (r, v) in &got {
        assert_eq!(rl.get_for(*r), Some(*v));
    }
    assert_eq!(rl.iter().count(), 9);
    for (_, v) in rl.iter_mut() {
        *v += 1;
    }
    for (_, v) in &mut rl {
        *v += 1;
    }
    assert_eq!(*rl.get(), 102);
    let mut sum: usize = (&rl).into_iter().map(|(_, v)| *v).sum();
    sum -= 102;
    assert_eq!(sum, (0..8).map(|i| i + 2).sum::<usize>());
    let dbg = format!("{rl:?}");
    assert!(dbg.contains(B::NAME) && dbg.contains("102"), "{dbg}");
    let d: RankLocal<u8, B> = Default::default();
    assert!(d.is_empty());
}

fn stress_threads_and_delegates_agree<B: Backend>() {
    // THREADS owners, each also served by a shared worker through on_behalf_of; counters must sum.
    let rl = RankLocal::<AtomicUsize, B>::new();
    let per: usize = if cfg!(miri) { 5 } else { 2000 };
    let (tx, rx) = mpsc::channel::<RankId>();
    thread::scope(|s| {
        let rl = &rl;
        let worker = s.spawn(move || {
            let mut served = 0;
            for rank in rx {
                on_behalf_of(rank, || rl.get().fetch_add(1, Ordering::Relaxed));
                assert!(rl.get_for(rank).is_some());
                served += 1;
            }
            served
        });
        for _ in 0..THREADS {
            let tx = tx.clone();
            s.spawn(move || {
                let me = RankId::current();
                for i in 0..per {
                    rl.get().fetch_add(1, Ordering::Relaxed);
                    if i % 10 == 0 {
                        tx.send(me).unwrap();
                    }
                }
            });
        }
        drop(tx);
        assert_eq!(worker.join().unwrap(), THREADS * per.div_ceil(10));
    });
    let total: usize = rl.iter().map(|(_, v)| v.load(Ordering::Relaxed)).sum();
    assert_eq!(total, THREADS * (per + per.div_ceil(10)));
    assert_eq!(rl.len(), THREADS);
}

fn async_every_poll_runs_as_the_rank<B: Backend>() {
    let rl: &'static RankLocal<AtomicUsize, B> = Box::leak(Box::new(RankLocal::new()));
    let owners: Vec<(RankId, mpsc::Sender<()>, thread::JoinHandle<()>)> =
        (0..4).map(|_| parked_rank()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let polled_on = Arc::new(Mutex::new(HashSet::new()));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for (i, (rank, _, _)) in owners.iter().enumerate().cycle().take(32) {
            let (rank, polled_on) = (*rank, polled_on.clone());
            tasks.push(tokio::spawn(
                async move {
                    // Block this worker a moment on the first poll, so the other workers take
                    // the queued tasks: the tasks are then polled on several threads.
                    std::thread::sleep(Duration::from_millis(1));
                    for _ in 0..20 {
                        assert_eq!(RankId::current(), rank);
                        assert_ne!(RankId::this_thread(), rank);
                        polled_on.lock().unwrap().insert(RankId::this_thread());
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
        assert_eq!(rl.get_for(rank).unwrap().load(Ordering::Relaxed), 8 * 20);
        drop(rel);
        h.join().unwrap();
    }
    assert_eq!(
        rl.len(),
        4,
        "a worker thread created an instance of its own"
    );
    assert!(
        polled_on.lock().unwrap().len() > 1,
        "tasks never moved between workers"
    );
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

/// Stamps every generic test above over one backend.
macro_rules! backend_suite {
    ($($module:ident: $backend:ty),* $(,)?) => {$(
        mod $module {
            type B = $backend;
            backend_suite!(@tests B;
                s1_threads_see_distinct_instances_and_the_same_one_each_call,
                s1_try_get_and_get_for_never_create,
                s2_delegation_sees_the_rank_even_after_caching_own,
                s2_delegation_nests_and_restores_on_unwind,
                s3_an_instance_made_by_a_delegate_belongs_to_the_rank,
                s4_init_runs_once_per_rank_under_a_race,
                s4_panicking_init_inserts_nothing_and_is_retried,
                s4_failing_get_or_try_inserts_nothing,
                s4_reentrant_init_panics_with_a_clear_message,
                s5_a_slow_init_delays_no_reader_and_no_other_writer,
                s5_a_second_asker_waits_for_the_running_init,
                s6_every_instance_is_dropped_exactly_once,
                s6_a_new_rank_local_in_the_same_place_sees_no_old_instance,
                s6_purge_exited_drops_only_exited_ranks,
                s9_rank_ids_are_unique_and_never_reused,
                iter_is_one_consistent_snapshot,
                stress_threads_and_delegates_agree,
                async_polls_on_two_threads_both_run_as_the_rank,
            );
            #[test]
            #[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
            fn async_every_poll_runs_as_the_rank() {
                super::async_every_poll_runs_as_the_rank::<B>();
            }
        }
    )*};
    (@tests $b:ident; $($name:ident),* $(,)?) => {$(
        #[test]
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
