//! Attacks on `RankLocal::pin` and its `Reader` from safe code: thread teardown, where the
//! crate's own thread-locals may be gone while a user's thread-local still holds a reader.

mod common;

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread;

use common::{counter, leak, panic_message, touch_scoped, Counted, DEADLOCK};
use ranklocal::{on_behalf_of, Backend, Rank, RankLocal};

common::backend_tests! {
    a_blocking_reclaim_in_teardown_under_a_held_reader_panics_instead_of_waiting,
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
        Ok(Err(msg)) => assert!(msg.contains("reclaim_exited_blocking"), "unclear panic: {msg}"),
        Ok(Ok(n)) => panic!("reclaim_exited_blocking returned {n} while its own thread's reader held the values"),
        Err(_) => panic!(
            "deadlock: reclaim_exited_blocking, in a thread-local's drop under a reader held by the \
             same thread, waited for that reader"
        ),
    }
}
