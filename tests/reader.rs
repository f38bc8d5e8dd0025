//! `RankLocal::pin` and its `Reader`: the values a reader hands out stay valid while it lives,
//! also while other threads sweep their ranks away; they stay scoped (dropped after their rank
//! exits, once the reader is gone); a dropped reader lets a waiting reclamation finish; and a
//! first touch on the reader's own thread neither deadlocks nor drops a value while it is held.

mod common;

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread;

use common::{
    counter, leak, panic_message, parked_rank, reclaim_until, touch_scoped, within_deadline,
    Counted, DEADLOCK,
};
use ranklocal::{on_behalf_of, Backend, Rank, RankId, RankLocal};

common::backend_tests! {
    miri_every_backend;
    reads_any_rank_and_ranks_touched_after_it_was_made,
    values_stay_valid_across_a_concurrent_sweep,
    a_dropped_reader_lets_a_blocking_reclaim_finish,
    a_first_touch_while_a_reader_is_held_drops_nothing_inside_it,
    an_owner_only_value_read_through_a_reader_outlives_its_thread_exit,
    a_blocking_reclaim_under_a_held_reader_panics_instead_of_waiting,
    #[cfg_attr(miri, ignore = "10,000 ranks: too slow under Miri; the tests above run these paths")]
    many_batches_queued_behind_a_held_reader_are_all_freed_after_it,
}

/// `n` ranks with a scoped instance of `rl` each (never escaped), counting drops in `drops`.
fn scoped_ranks<B: Backend>(
    rl: &RankLocal<Counted<'static>, B>,
    drops: &'static std::sync::atomic::AtomicUsize,
    n: usize,
) -> Vec<Rank> {
    (0..n)
        .map(|_| {
            let job = Rank::new();
            on_behalf_of(job.id(), || touch_scoped(rl, drops));
            job
        })
        .collect()
}

/// A reader finds every rank's value, never creates one, and sees a rank first touched after it
/// was made (each lookup reads the map as it is then).
fn reads_any_rank_and_ranks_touched_after_it_was_made<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    let jobs: Vec<Rank> = (0..100).map(|_| Rank::new()).collect();
    for (i, job) in jobs.iter().enumerate().take(50) {
        on_behalf_of(job.id(), || rl.with_or(|| i as u64, |_| ()));
    }
    let reader = rl.pin();
    for (i, job) in jobs.iter().enumerate() {
        let want = (i < 50).then_some(i as u64);
        assert_eq!(reader.get_for(job.id()).copied(), want, "rank {i}");
    }
    assert_eq!(rl.len(), 50, "a reader created an instance");
    for (i, job) in jobs.iter().enumerate().skip(50) {
        on_behalf_of(job.id(), || rl.get_or(|| i as u64));
    }
    for (i, job) in jobs.iter().enumerate() {
        assert_eq!(
            reader.get_for(job.id()).copied(),
            Some(i as u64),
            "rank {i}"
        );
    }
    assert!(reader.get_for(RankId::current()).is_none());
    assert!(format!("{reader:?}").contains(B::NAME));
}

/// The values a reader handed out stay valid while it lives, while another thread sweeps their
/// exited ranks away over and over; once it is dropped, they are dropped (they stayed scoped).
fn values_stay_valid_across_a_concurrent_sweep<B: Backend>() {
    const N: usize = 32;
    let drops = counter();
    let rl = RankLocal::<Counted<'static>, B>::new();
    let jobs = scoped_ranks(&rl, drops, N);
    let ids: Vec<RankId> = jobs.iter().map(Rank::id).collect();
    let reader = rl.pin();
    let lent: Vec<&Counted<'static>> = ids.iter().map(|&id| reader.get_for(id).unwrap()).collect();
    drop(jobs); // every rank exits: a sweep may unpublish every instance
    thread::scope(|s| {
        let sweeper = s.spawn(|| {
            let mut swept = 0;
            for _ in 0..common::SWEEPS_WHILE_LENT {
                swept += rl.reclaim_exited();
            }
            swept
        });
        while !sweeper.is_finished() {
            for v in &lent {
                assert_eq!(v.value(), 0); // reads the value's own heap allocation
            }
        }
        assert_eq!(
            sweeper.join().unwrap(),
            N,
            "the sweeps did not take every exited rank"
        );
    });
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "a value the reader handed out was dropped while the reader lived"
    );
    for v in &lent {
        assert_eq!(v.value(), 0);
    }
    for &id in &ids {
        assert!(reader.get_for(id).is_none(), "a swept rank is still found");
    }
    // unpublished, but not freed while the reader lives: `len` counts what is not freed yet
    assert_eq!(rl.len(), N);
    drop(reader);
    reclaim_until(&rl, drops, N); // scoped: dropped once the reader is gone
    assert_eq!(rl.len(), 0);
}

/// A `reclaim_exited_blocking` on another thread waits while a reader holds values it would drop,
/// and returns once the reader is dropped.
fn a_dropped_reader_lets_a_blocking_reclaim_finish<B: Backend>() {
    const N: usize = 8;
    let drops = counter();
    let rl: &'static RankLocal<Counted<'static>, B> = leak(RankLocal::new());
    let jobs = scoped_ranks(rl, drops, N);
    let reader = rl.pin();
    let lent: Vec<&Counted<'static>> = jobs
        .iter()
        .map(|j| reader.get_for(j.id()).unwrap())
        .collect();
    drop(jobs);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(rl.reclaim_exited_blocking());
    });
    // whether or not the blocking call has swept yet, nothing the reader holds is dropped
    for _ in 0..100 {
        for v in &lent {
            assert_eq!(v.value(), 0);
        }
        thread::yield_now();
    }
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "dropped under a held reader"
    );
    drop(reader);
    let swept = rx.recv_timeout(DEADLOCK).unwrap_or_else(|_| {
        panic!("reclaim_exited_blocking did not return after the reader was dropped")
    });
    assert_eq!(swept, N);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        N,
        "the blocking reclaim returned early"
    );
}

/// A first touch (and a `reclaim_exited`) on the reader's own thread while it is held: no
/// deadlock (also on `Baseline`, whose lookups take a read lock and first touches the write
/// lock), and no value is dropped while the reader is held, though batches ready to be freed
/// wait in the queue; once the reader is dropped, they are freed.
fn a_first_touch_while_a_reader_is_held_drops_nothing_inside_it<B: Backend>() {
    within_deadline(|| {
        const N: usize = 20;
        let drops = counter();
        let rl: &'static RankLocal<Counted<'static>, B> = leak(RankLocal::new());
        let keep = scoped_ranks(rl, counter(), 1); // a live rank the reader looks up
        let jobs = scoped_ranks(rl, drops, N);
        drop(jobs);
        {
            // sweep with a pin held: the batch is unpublished and queued, not freed
            let outer = rl.pin();
            assert!(outer.get_for(keep[0].id()).is_some());
            assert_eq!(rl.reclaim_exited(), N);
        }
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        // Let the queued batch's grace period pass without freeing it: another map's blocking
        // reclaim waits for a batch retired after it (the collector sets tokens in order).
        let aux_drops = counter();
        let aux = RankLocal::<Counted<'static>, B>::new();
        drop(scoped_ranks(&aux, aux_drops, 1));
        assert_eq!(aux.reclaim_exited_blocking(), 1);
        assert_eq!(aux_drops.load(Ordering::SeqCst), 1);

        let reader = rl.pin();
        let kept = reader.get_for(keep[0].id()).unwrap(); // pinned from here on
        for _ in 0..4 {
            // a first touch of a new rank, escaped and scoped, sweeps: it frees nothing here
            let job = Rank::new();
            on_behalf_of(job.id(), || rl.get_or(|| Counted::new(counter())));
            let job = Rank::new();
            on_behalf_of(job.id(), || touch_scoped(rl, counter()));
            rl.reclaim_exited();
            assert_eq!(kept.value(), 0);
        }
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "a value was dropped on the reader's thread while it was held"
        );
        drop(reader);
        reclaim_until(rl, drops, N);
    });
}

/// A value only its own thread reached (`with_own`: dropped by the thread's exit work) that a
/// reader on another thread got is not dropped under the reader when that thread exits: the
/// lookup moved it on to scoped first, so the exit leaves it to a sweep after the reader is gone.
fn an_owner_only_value_read_through_a_reader_outlives_its_thread_exit<B: Backend>() {
    let drops = counter();
    let rl: &'static RankLocal<Counted<'static>, B> = leak(RankLocal::new());
    let (touched_tx, touched_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let owner = thread::spawn(move || {
        rl.with_own_or(|| Counted::new(drops), |_| ());
        touched_tx.send(RankId::this_thread()).unwrap();
        let _ = release_rx.recv();
    });
    let id = touched_rx.recv().unwrap();
    let reader = rl.pin();
    let v = reader.get_for(id).expect("the owner's value");
    release_tx.send(()).unwrap();
    owner.join().unwrap(); // its exit work ran
    assert_eq!(v.value(), 0);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "the thread's exit dropped a value a reader held"
    );
    drop(reader);
    reclaim_until(rl, drops, 1); // swept after the exit, once the reader is gone
}

/// `reclaim_exited_blocking` would wait for the reader held on its own thread: it panics with a
/// clear message instead of deadlocking; the reader's values are untouched.
fn a_blocking_reclaim_under_a_held_reader_panics_instead_of_waiting<B: Backend>() {
    within_deadline(|| {
        let drops = counter();
        let rl: &'static RankLocal<Counted<'static>, B> = leak(RankLocal::new());
        let (id, release, h) = parked_rank();
        on_behalf_of(id, || touch_scoped(rl, drops));
        let reader = rl.pin();
        let v = reader.get_for(id).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rl.reclaim_exited_blocking();
        }));
        let msg = panic_message(
            &*r.expect_err("reclaim_exited_blocking did not panic under a held reader"),
        );
        assert!(
            msg.contains("reclaim_exited_blocking") && msg.contains("Reader"),
            "unclear panic (it must name the reader it would wait for): {msg}"
        );
        assert_eq!(v.value(), 0);
        drop(reader);
        release.send(()).unwrap();
        h.join().unwrap();
        assert_eq!(rl.reclaim_exited_blocking(), 1);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}

/// A reader held while 10,000 exited ranks' values are swept on another thread, batch after batch
/// (each waits for the reader): nothing it lent is dropped, and once it is dropped every batch is
/// freed, each value once.
fn many_batches_queued_behind_a_held_reader_are_all_freed_after_it<B: Backend>() {
    const N: usize = 10_000;
    let drops = counter();
    let rl = RankLocal::<Counted<'static>, B>::new();
    let first = scoped_ranks(&rl, drops, 1);
    let reader = rl.pin();
    let lent = reader.get_for(first[0].id()).unwrap();
    drop(first);
    thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..N / 100 {
                // 99 ranks come and go; the first touches sweep them, amortized
                drop(scoped_ranks(&rl, drops, 99));
                rl.reclaim_exited();
            }
        });
    });
    assert_eq!(lent.value(), 0);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "a sweep dropped a value while a reader was held"
    );
    drop(reader);
    reclaim_until(&rl, drops, 1 + 99 * (N / 100));
    assert_eq!(rl.len(), 0);
}
