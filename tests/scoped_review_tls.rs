//! Review 3 (adversarial): the root cause of `scoped_review_insert_sweep.rs` reached from the issue's
//! own case "access from TLS destructors" (alone in its file: other tests' pins would delay the
//! grace period that exposes it).
//! Fixed with `scoped_review_insert_sweep.rs`'s fix (the insert pins first); failed before.
use ranklocal::{Rank, RankLocal};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

static TLS_DROPS: AtomicUsize = AtomicUsize::new(0);
/// 0: not run, 1: f ran and its instance was not dropped during f, 2: it was.
static TLS_OUTCOME: AtomicUsize = AtomicUsize::new(0);

#[derive(Default)]
struct TlsProbe(#[allow(dead_code)] Box<u64>);

impl Drop for TlsProbe {
    fn drop(&mut self) {
        TLS_DROPS.fetch_add(1, SeqCst);
    }
}

static TLS_RL: RankLocal<TlsProbe> = RankLocal::new();

struct Late;

impl Drop for Late {
    fn drop(&mut self) {
        // runs after this thread's exit hook: its own rank has exited, so this first touch's
        // own sweep retires the instance it is about to lend to f
        TLS_RL.with(|_v| {
            let before = TLS_DROPS.load(SeqCst);
            // other threads' pins may delay the grace period: sweep a while
            for _ in 0..1000 {
                TLS_RL.reclaim_exited();
                if TLS_DROPS.load(SeqCst) != before {
                    break;
                }
                std::thread::yield_now();
            }
            let dropped = TLS_DROPS.load(SeqCst) != before;
            TLS_OUTCOME.store(if dropped { 2 } else { 1 }, SeqCst);
        });
    }
}

std::thread_local! {
    static LATE: std::cell::RefCell<Option<Late>> = const { std::cell::RefCell::new(None) };
}

/// The same root cause from the issue's own case "access from TLS destructors": a thread-local
/// destructor that runs after the exit hook and makes the thread's (now exited) rank's first
/// scoped touch. Fails today.
#[test]
fn tls_destructor_first_touch_outlives_f() {
    for _ in 0..20 {
        drop(Rank::new()); // the amortized sweep is due on TLS_RL's first insert
    }
    std::thread::spawn(|| {
        LATE.with(|l| *l.borrow_mut() = Some(Late));
        let _ = ranklocal::RankId::this_thread(); // id and exit hook registered after LATE
    })
    .join()
    .unwrap();
    assert_eq!(
        TLS_OUTCOME.load(SeqCst),
        1,
        "the instance lent to f in a TLS destructor was dropped while f borrowed it (2) or f never ran (0)"
    );
}
