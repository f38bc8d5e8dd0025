//! Attacks on `RankLocal::pin` and its `Reader` from safe code: thread teardown, where the
//! crate's own thread-locals may be gone while a user's thread-local still holds a reader.

mod common;

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread;

use common::{
    counter, leak, panic_message, reclaim_until, touch_scoped, Counted, DEADLOCK, SWEEPS_WHILE_LENT,
};
use ranklocal::{on_behalf_of, rank_local, Backend, Rank, RankId, RankLocal};

common::backend_tests! {
    a_blocking_reclaim_in_teardown_under_a_held_reader_panics_instead_of_waiting,
    a_reader_in_a_thread_local_keeps_its_values_through_teardown_and_sweeps,
}

/// What a user's thread-local holds: a held reader and, run by its drop before the reader is
/// dropped, a blocking reclamation.
struct Holder {
    reader: Option<Box<dyn std::any::Any>>,
    at_drop: Option<Box<dyn FnOnce()>>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(f) = self.at_drop.take() {
            f();
        }
        drop(self.reader.take());
    }
}

thread_local! {
    static HOLDER: RefCell<Holder> = RefCell::new(Holder { reader: None, at_drop: None });
}

/// A reader kept in a thread-local that was registered before the crate's own (so it is dropped
/// after them, at thread teardown): a `reclaim_exited_blocking` made there while the reader still
/// lives would wait for the reader's own pin, which only this thread can give up. It must panic
/// as it does outside teardown, not hang.
fn a_blocking_reclaim_in_teardown_under_a_held_reader_panics_instead_of_waiting<B: Backend>() {
    let drops = counter();
    let rl: &'static RankLocal<Counted<'static>, B> = leak(RankLocal::new());
    let (tx, rx) = mpsc::channel::<Result<usize, String>>();
    thread::spawn(move || {
        // registered first, so destroyed after the crate's thread-locals
        HOLDER.with(|_| ());
        let job = Rank::new();
        on_behalf_of(job.id(), || touch_scoped(rl, drops));
        let reader = rl.pin();
        assert!(reader.get_for(job.id()).is_some()); // pins (and registers the participant)
        drop(job); // exits: the next sweep takes its value, behind the reader's pin
        HOLDER.with(|h| {
            let mut h = h.borrow_mut();
            h.reader = Some(Box::new(reader));
            h.at_drop = Some(Box::new(move || {
                let r = catch_unwind(AssertUnwindSafe(|| rl.reclaim_exited_blocking()))
                    .map_err(|p| panic_message(&*p));
                let _ = tx.send(r);
            }));
        });
    });
    match rx.recv_timeout(DEADLOCK) {
        Ok(Err(msg)) => assert!(
            msg.contains("reclaim_exited_blocking") && msg.contains("Reader"),
            "unclear panic: {msg}"
        ),
        Ok(Ok(n)) => panic!("reclaim_exited_blocking returned {n} while its own thread's reader held the values"),
        Err(_) => panic!(
            "deadlock: reclaim_exited_blocking, in a thread-local's drop under a reader held by the \
             same thread, waited for that reader"
        ),
    }
}

/// A reader kept in a thread-local destroyed after the crate's own (its participant's handle and
/// the thread's exit work are gone): the values it lends then — the thread's own `with_own` value,
/// which the reader moved on to scoped before the exit, and a delegated rank's, both of exited
/// ranks — stay valid while another thread sweeps over and over, and are dropped once it is gone.
fn a_reader_in_a_thread_local_keeps_its_values_through_teardown_and_sweeps<B: Backend>() {
    let drops = counter();
    let rl: &'static RankLocal<Counted<'static>, B> = leak(RankLocal::new());
    let (in_teardown, teardown) = mpsc::channel::<()>();
    let (swept, sweeps_done) = mpsc::channel::<()>();
    let (result, results) = mpsc::channel::<Result<(), String>>();
    thread::spawn(move || {
        HOLDER.with(|_| ()); // registered first, so destroyed after the crate's thread-locals
        let own = RankId::current();
        rl.with_own_or(|| Counted::new(drops), |_| ()); // OWNED: the exit work would drop it
        let job = Rank::new();
        on_behalf_of(job.id(), || touch_scoped(rl, drops));
        let job_id = job.id();
        drop(job);
        let reader = rl.pin();
        assert!(reader.get_for(own).is_some()); // moves it on to scoped: the exit leaves it
        HOLDER.with(|h| {
            h.borrow_mut().at_drop = Some(Box::new(move || {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    let mine = reader.get_for(own).expect("the scoped own value is gone");
                    let theirs = reader.get_for(job_id).expect("the delegated value is gone");
                    in_teardown.send(()).unwrap();
                    sweeps_done.recv().unwrap();
                    assert_eq!(mine.value() + theirs.value(), 0);
                    assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 0);
                    drop(reader);
                }))
                .map_err(|p| panic_message(&*p));
                let _ = result.send(r);
            }));
        });
    });
    teardown
        .recv_timeout(DEADLOCK)
        .expect("the thread-local's drop never ran");
    for _ in 0..SWEEPS_WHILE_LENT {
        rl.reclaim_exited();
    }
    swept.send(()).unwrap();
    match results.recv_timeout(DEADLOCK) {
        Ok(r) => r.unwrap(),
        Err(_) => panic!("deadlock: the reader's checks in teardown did not finish"),
    }
    reclaim_until(rl, drops, 2);
}

static KEY_DROPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

rank_local! {
    static KEYED: Counted<'static> = Counted::new(&KEY_DROPS);
}

/// A reader of a `rank_local!` key's `RankLocal` (the key's own thread-local slot aside): the
/// values of exited ranks it lends stay valid across sweeps, and are dropped once it is gone.
#[test]
fn a_reader_of_a_key_keeps_its_values_through_sweeps() {
    let jobs: Vec<Rank> = (0..8).map(|_| Rank::new()).collect();
    for job in &jobs {
        on_behalf_of(job.id(), || KEYED.with(|v| assert_eq!(v.value(), 0)));
    }
    let ids: Vec<RankId> = jobs.iter().map(Rank::id).collect();
    let rl = KEYED.as_rank_local();
    let reader = rl.pin();
    let lent: Vec<&Counted<'static>> = ids.iter().map(|&id| reader.get_for(id).unwrap()).collect();
    drop(jobs);
    thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..SWEEPS_WHILE_LENT {
                rl.reclaim_exited();
            }
        });
    });
    assert_eq!(lent.iter().map(|v| v.value()).sum::<u64>(), 0);
    assert_eq!(KEY_DROPS.load(std::sync::atomic::Ordering::SeqCst), 0);
    drop(reader);
    reclaim_until(rl, &KEY_DROPS, 8);
}
