//! loom models of this crate's code. Run with `RUSTFLAGS="--cfg loom" cargo test --release`
//! (see README's "Loom for dependents" in ranklocal); without `--cfg loom` this file is empty.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_dependent::Steps;
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
