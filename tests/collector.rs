//! The crate's epoch collector and what waits on it: a closure another crate deferred to
//! crossbeam's default collector never runs inside this crate's writer (I18), and replaced
//! versions held back by a pinned reader pile up, then drain once it unpins (I12–I17).

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::leak;
use ranklocal::{on_behalf_of, Backend, Rank, RankLocal};

common::backend_tests! {
    a_deferred_closure_that_first_touches_the_map_does_not_deadlock_the_writer,
    replaced_versions_pile_up_behind_a_pinned_reader_then_drain,
}

/// A closure deferred to crossbeam-epoch's process-wide default collector that first-touches a
/// `RankLocal` (e.g. a crossbeam-skiplist value whose drop records into one, for a rank not seen
/// yet), then ordinary first touches, each of whose writers pins and flushes under the claims
/// mutex: no deadlock, on every backend.
///
/// Found in review: the `Epoch` writer used to pin and flush crossbeam-epoch's *global* collector
/// while holding the `RankLocal`'s claims mutex (and the map's writer mutex). Flushing runs
/// closures deferred by anyone in the process on the flushing thread; one that first-touches the
/// same `RankLocal` relocked the claims mutex on the thread that held it: a deadlock, where the
/// spec asks for "a clear panic message or `Result`, never a deadlock". The backend now pins a
/// collector of its own (I18); this hung before that change. `ArcSwap` and `Baseline`, which never
/// flushed crossbeam's collector, are its twins. All safe code: `Guard::defer` is a safe API.
fn a_deferred_closure_that_first_touches_the_map_does_not_deadlock_the_writer<B: Backend>() {
    let rl: &'static RankLocal<u64, B> = leak(RankLocal::new());
    let (deferred, touches) = if cfg!(miri) { (4, 20) } else { (64, 2000) };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // e.g. a skiplist value whose Drop records into a RankLocal, for a rank not seen yet
        for _ in 0..deferred {
            let g = crossbeam_epoch::pin();
            g.defer(|| {
                let r = Rank::new();
                on_behalf_of(r.id(), || *rl.get());
            });
            g.flush();
        }
        // ordinary first touches: each one's writer pins and flushes under the claims mutex
        for i in 0..touches {
            let r = Rank::new();
            on_behalf_of(r.id(), || rl.get_or(|| i));
        }
        tx.send(()).unwrap();
    });
    // Under Miri the clock is virtual: a deadlocked writer leaves only this timeout to run
    assert!(
        rx.recv_timeout(Duration::from_secs(20)).is_ok(),
        "{}: deadlock: a deferred closure ran inside the writer (claims mutex held) and \
         first-touched the same RankLocal",
        B::NAME
    );
}

/// The Reclaimer's buffers grow while a pinned reader stalls the epoch (every replaced version
/// stays undead), drain and shrink once it unpins, then `clear` (`free_all`) resets them; every
/// value stays right and Miri sees no double free or use after free.
fn replaced_versions_pile_up_behind_a_pinned_reader_then_drain<B: Backend>() {
    let mut rl = RankLocal::<u64, B>::new();
    // quadratic under a stalled epoch (each write scans the backlog): small under Miri
    let n = if cfg!(miri) { 16 } else { 3000 };
    for round in 0..2u64 {
        rl.get_or(|| 99);
        let ranks: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let rl = &rl;
            s.spawn(move || {
                // a long scoped visit: holds an epoch pin until told to stop
                rl.for_each(|_, _| {
                    ready_tx.send(()).unwrap();
                    rx.recv().unwrap();
                });
            });
            ready_rx.recv().unwrap();
            let it = rl.iter(); // and a held iterator
            for (i, r) in ranks.iter().enumerate() {
                on_behalf_of(r.id(), || rl.get_or(|| round * 1_000_000 + i as u64));
            }
            assert_eq!(it.count(), 1);
            tx.send(()).unwrap();
        });
        // drained: later writes collect, and shrink the buffers
        let more: Vec<Rank> = (0..n).map(|_| Rank::new()).collect();
        for r in &more {
            on_behalf_of(r.id(), || rl.get_or(|| 7));
            for _ in 0..4 {
                let _ = rl.len(); // pins: lets the epoch advance
            }
        }
        for (i, r) in ranks.iter().enumerate() {
            assert_eq!(rl.get_for(r.id()), Some(&(round * 1_000_000 + i as u64)));
        }
        assert_eq!(rl.iter().count(), 2 * n + 1);
        rl.clear(); // free_all
        assert!(rl.is_empty());
    }
}
