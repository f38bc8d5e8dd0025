//! Found in review: the `Epoch` writer used to pin and flush crossbeam-epoch's *global*
//! collector while it holds the `RankLocal`'s claims mutex (and the map's writer mutex). Flushing
//! runs deferred closures queued by anyone in the process — e.g. a crossbeam-skiplist dropping a
//! user's value — on the flushing thread. A deferred closure that first-touches the same
//! `RankLocal` then relocks the claims mutex on the thread that holds it: a deadlock, where the
//! spec asks for "a clear panic message or `Result`, never a deadlock". The backend now pins a
//! collector of its own (I18); this test hung before that change and passes after it.
//!
//! Everything here is safe code: `crossbeam_epoch::Guard::defer` is a safe API.

use std::sync::mpsc;
use std::time::Duration;

use ranklocal::{on_behalf_of, ArcSwap, Backend, Baseline, Epoch, Rank, RankLocal};

fn deferred_first_touch<B: Backend>(rl: &'static RankLocal<u64, B>) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // e.g. a skiplist value whose Drop records into a RankLocal, for a rank not seen yet
        for _ in 0..64 {
            let g = crossbeam_epoch::pin();
            g.defer(|| {
                let r = Rank::new();
                on_behalf_of(r.id(), || *rl.get());
            });
            g.flush();
        }
        // ordinary first touches: each one's writer pins and flushes under the claims mutex
        for i in 0..2000u64 {
            let r = Rank::new();
            on_behalf_of(r.id(), || rl.get_or(|| i));
        }
        tx.send(()).unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(20)).is_ok(),
        "{}: deadlock: a deferred closure ran inside the writer (claims mutex held) and \
         first-touched the same RankLocal",
        B::NAME
    );
}

#[test]
fn epoch_a_deferred_closure_that_first_touches_the_map_does_not_deadlock_the_writer() {
    static RL: RankLocal<u64, Epoch> = RankLocal::new();
    deferred_first_touch(&RL);
}

/// Twins: the same program on the backends that do not flush crossbeam's collector passes.
#[test]
fn arc_swap_twin() {
    static RL: RankLocal<u64, ArcSwap> = RankLocal::new();
    deferred_first_touch(&RL);
}

#[test]
fn baseline_twin() {
    static RL: RankLocal<u64, Baseline> = RankLocal::new();
    deferred_first_touch(&RL);
}
