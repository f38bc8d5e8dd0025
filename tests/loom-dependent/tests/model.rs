//! loom models of this crate's code. Run with `RUSTFLAGS="--cfg loom" cargo test --release`
//! (ranklocal's README, "Loom for dependents"); without `--cfg loom` this file is empty.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_dependent::{bytes_sent, send, Steps, MESSAGES};
use ranklocal::{on_behalf_of, RankId};

/// A rank's own thread and a delegate acting for it record a step at once: both count.
#[test]
fn owner_and_delegate_steps_add_up() {
    loom::model(|| {
        let steps = Arc::new(Steps::new());
        let me = RankId::current();
        let delegate = {
            let steps = steps.clone();
            thread::spawn(move || on_behalf_of(me, || steps.record()))
        };
        steps.record();
        delegate.join().unwrap();
        assert_eq!(steps.of(me), 2, "a step of rank {me} was lost");
    });
}

/// The same on the statics, a `static RankLocal` and a `rank_local!` key: ranklocal builds them
/// afresh in each execution, so each starts from zero, whichever thread uses them first.
#[test]
fn owner_and_delegate_sends_add_up_in_statics() {
    loom::model(|| {
        // Something of ranklocal's in use before the delegate starts: a static the delegate then
        // builds first is ordered before the owner's use by nothing else than ranklocal itself.
        Steps::new().record();
        let me = RankId::current();
        let delegate = thread::spawn(move || on_behalf_of(me, || send(3)));
        send(4);
        delegate.join().unwrap();
        assert_eq!(bytes_sent(me), 7, "bytes rank {me} sent were lost");
        let messages = MESSAGES.with_for(me, |n| n.load(loom::sync::atomic::Ordering::SeqCst));
        assert_eq!(
            messages,
            Some(2),
            "a message rank {me} sent was not counted"
        );
    });
}
