//! Allocation behaviour, measured with a counting global allocator (spec semantics 5 and 7):
//! once instances exist, lookups allocate nothing; snapshots retired by inserts are freed, so the
//! live heap grows with the number of ranks, not with the number of inserts or lookups; the
//! inboxes and exit watchers of short-lived `RankLocal`s and ranks do not pile up.
//!
//! Its own binary: it installs a counting global allocator.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;

use common::exited_thread_ranks;
use ranklocal::{on_behalf_of, rank_local, Backend, Epoch, Rank, RankId, RankLocal};

common::backend_tests! {
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    lookups_allocate_nothing,
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    lookups_do_not_grow_the_heap,
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    retired_snapshots_are_freed,
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    thread_churn_leaves_nothing_behind,
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    held_iterator_does_not_stall_reclamation,
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    one_sweep_of_many_exits_allocates_linearly,
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    requests_on_many_threads_do_not_grow_the_heap,
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    repeated_iters_keep_nothing,
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    inboxes_and_exit_watchers_do_not_grow_the_heap,
    #[cfg_attr(miri, ignore = "counts allocations: too slow under Miri, other suites run these paths")]
    reader_lookups_allocate_nothing,
}

struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
/// The highest `LIVE_BYTES` since it was last reset.
static PEAK_BYTES: AtomicIsize = AtomicIsize::new(0);
std::thread_local! {
    static THREAD_ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to `System`, only counting on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        PEAK_BYTES.fetch_max(now + layout.size() as isize, Ordering::Relaxed);
        let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grow = new_size as isize - layout.size() as isize;
        let now = LIVE_BYTES.fetch_add(grow, Ordering::Relaxed);
        PEAK_BYTES.fetch_max(now + grow, Ordering::Relaxed);
        let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The live-heap tests measure the whole process: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn allocs_on_this_thread(f: impl FnOnce()) -> usize {
    let before = THREAD_ALLOCS.with(Cell::get);
    f();
    THREAD_ALLOCS.with(Cell::get) - before
}

const RANKS: usize = if cfg!(miri) { 40 } else { 256 };
const LOOKUPS: usize = if cfg!(miri) { 100 } else { 100_000 };

/// Once instances exist, no lookup allocates: owner, delegated, `get_for`, `try_get`, `iter`.
/// Except `Baseline`'s `iter`, which copies the locked map into a `Vec` (one allocation a call):
/// like the C++ original it has no snapshot to walk.
fn lookups_allocate_nothing<B: Backend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rl = RankLocal::<u64, B>::new();
    let ids = exited_thread_ranks(RANKS); // more ranks than the thread cache holds: misses hit the map
    for (i, &r) in ids.iter().enumerate() {
        on_behalf_of(r, || rl.get_or(|| i as u64));
    }
    rl.get_or(|| 7);
    // warm-up: the first pin registers this thread with the collector (a reader pins; the first
    // touches above need not: a new rank's skips the lookup, and this `get_for` may hit the
    // thread cache)
    let _ = rl.pin().get_for(ids[0]);
    let _ = rl.get_for(ids[0]);
    let _ = rl.iter().count();
    let mut sum = 0u64;
    let mut iters = 0;
    let n = allocs_on_this_thread(|| {
        for i in 0..LOOKUPS {
            sum += *rl.get();
            let r = ids[i % ids.len()];
            sum += on_behalf_of(r, || *rl.get());
            sum += *rl.get_for(r).unwrap();
            sum += *on_behalf_of(r, || rl.try_get()).unwrap();
            if i % 1000 == 0 {
                sum += rl.iter().map(|(_, v)| *v).sum::<u64>();
                iters += 1;
            }
        }
    });
    assert!(sum > 0);
    let iter_allocs = if B::NAME == "baseline" { iters } else { 0 };
    assert_eq!(
        n - iter_allocs,
        0,
        "{}: {n} allocations during lookups ({iter_allocs} by iter)",
        B::NAME
    );
}

/// Readers (`pin`, `Reader::get_for`) allocate nothing once the thread has a collector
/// participant, whether made once or once per batch.
fn reader_lookups_allocate_nothing<B: Backend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rl = RankLocal::<u64, B>::new();
    let ids = exited_thread_ranks(RANKS);
    for (i, &r) in ids.iter().enumerate() {
        on_behalf_of(r, || rl.get_or(|| i as u64 + 1)); // kept: their ranks exited
    }
    let _ = rl.pin().get_for(ids[0]); // warm-up: the first pin registers this thread
    let mut sum = 0u64;
    let n = allocs_on_this_thread(|| {
        let held = rl.pin();
        for i in 0..LOOKUPS {
            let r = ids[i % ids.len()];
            sum += *held.get_for(r).unwrap();
            if i % 1000 == 0 {
                sum += *rl.pin().get_for(r).unwrap();
            }
        }
    });
    assert!(sum > 0);
    assert_eq!(n, 0, "{}: {n} allocations during reader lookups", B::NAME);
}

rank_local! {
    static KEYED: u64 = 5;
}

/// The same through a `rank_local!` static (the macro form has no backend parameter).
#[test]
fn macro_form_lookups_allocate_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ids = exited_thread_ranks(4);
    for &r in &ids {
        on_behalf_of(r, || KEYED.get());
    }
    KEYED.get();
    let _ = KEYED.get_for(ids[0]);
    let mut sum = 0;
    let n = allocs_on_this_thread(|| {
        for i in 0..LOOKUPS {
            sum += *KEYED.get() + *KEYED.try_get().unwrap();
            sum += on_behalf_of(ids[i % 4], || *KEYED.get());
            sum += *KEYED.get_for(ids[i % 4]).unwrap();
        }
    });
    assert!(sum > 0);
    assert_eq!(n, 0, "{n} allocations during macro-form lookups");
}

/// Live heap after inserting `n` ranks and settling the collector.
fn live_heap_after_inserts<B: Backend>(ids: &[RankId]) -> isize {
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    let rl = RankLocal::<[u64; 4], B>::new();
    for &r in ids {
        on_behalf_of(r, || rl.get_or(|| [1; 4]));
    }
    // lookups that miss the cache pin the epoch and let the collector run
    for i in 0..(if cfg!(miri) {
        300
    } else {
        (20 * ids.len()).max(10_000)
    }) {
        let _ = rl.len();
        let _ = rl.get_for(ids[i % ids.len()]);
    }
    let live = LIVE_BYTES.load(Ordering::SeqCst) - before;
    assert_eq!(rl.len(), ids.len());
    drop(rl);
    live
}

/// Snapshots retired by inserts are freed: the live heap after `n` first touches is linear in
/// `n`, not in the nodes built and replaced along the way.
fn retired_snapshots_are_freed<B: Backend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = if cfg!(miri) { 32 } else { 1024 };
    let ids = exited_thread_ranks(n);
    let live = live_heap_after_inserts::<B>(&ids);
    // instances (32 B each) + the final trie (one 520 B leaf per 64 ranks, plus the levels
    // above) + slack for a few versions still in flight; the nodes built and replaced along the
    // way are ~n * height * 520 B.
    let bound = (n * 32 + n * 4 * 16) as isize * 2 + 64 * 1024;
    let replaced_total = n * 2 * 520;
    eprintln!(
        "{}: {n} ranks, live heap {live} B (bound {bound} B; trie nodes built and replaced along the way ~{replaced_total} B)",
        B::NAME
    );
    assert!(live <= bound, "{}: live heap {live} B > {bound} B", B::NAME);
}

/// Lookups that miss the thread cache do not grow the live heap.
fn lookups_do_not_grow_the_heap<B: Backend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rl = RankLocal::<u64, B>::new();
    let ids = exited_thread_ranks(RANKS);
    for &r in &ids {
        on_behalf_of(r, || rl.get_or(|| 1));
    }
    for i in 0..(if cfg!(miri) { 100 } else { 1000 }) {
        let _ = rl.get_for(ids[i % ids.len()]);
    }
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    for i in 0..LOOKUPS {
        let _ = rl.get_for(ids[i % ids.len()]);
        let _ = rl.len();
    }
    let grown = LIVE_BYTES.load(Ordering::SeqCst) - before;
    assert!(
        grown <= 4096,
        "heap grew by {grown} B over {LOOKUPS} lookups"
    );
}

/// Thread churn: many short-lived threads touch a `RankLocal`; their ids are unique,
/// `purge_exited` drops exactly their instances, and the live heap returns to where it was.
fn thread_churn_leaves_nothing_behind<B: Backend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const CHURN: usize = if cfg!(miri) { 24 } else { 10_000 };
    const AT_ONCE: usize = if cfg!(miri) { 4 } else { 16 };
    let drops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    struct Counted(
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
        #[allow(dead_code)] [u64; 4],
    );
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    // allocated up front, so that the live-heap figures measure the crate, not the test
    let mut ids = std::collections::HashSet::with_capacity(CHURN);
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    let start = std::time::Instant::now();
    let mut rl = RankLocal::<Counted, B>::new();
    rl.get_or(|| Counted(drops.clone(), [0; 4])); // the main thread's own: must survive
    let mut peak = 0isize;
    for _ in 0..CHURN / AT_ONCE {
        let batch: Vec<RankId> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..AT_ONCE)
                .map(|_| {
                    s.spawn(|| {
                        rl.get_or(|| Counted(drops.clone(), [1; 4]));
                        RankId::this_thread()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for id in batch {
            assert!(ids.insert(id), "rank id {id} reused");
        }
        peak = peak.max(LIVE_BYTES.load(Ordering::SeqCst) - before);
    }
    let churned = CHURN / AT_ONCE * AT_ONCE;
    assert_eq!(rl.len(), churned + 1);
    let purged = rl.purge_exited();
    assert_eq!(
        purged, churned,
        "purge_exited dropped the wrong number of instances"
    );
    assert_eq!(drops.load(Ordering::SeqCst), churned);
    assert_eq!(rl.len(), 1, "the live main thread's instance was purged");
    // What the inserts retired, and the epoch bookkeeping of each exited thread (a crossbeam
    // `Local`, ~2 KiB), is freed a grace period later. The `Local`s of the last threads to exit
    // are unlinked by this thread's next pins, and their frees wait in this thread's deferred
    // bag until it flushes; an `Epoch` insert flushes, then pins collect. (Every backend's
    // deferred work runs on the crate's one collector; `len` pins only on `Epoch`.) Wait
    // patiently: a loaded machine, or the collector's other users in this binary, can hold an
    // epoch back for a while. A leak never comes back, so the bound below still fails on one.
    //
    // What may stay: arc-swap's debt nodes (192 B each, one per concurrently live thread, kept
    // for reuse by design) and a few `Local`s still in flight: ~13 KiB on ArcSwap, ~2 KiB on
    // the others, measured. A leak of 4 B per churned thread would exceed the bound.
    const BOUND: isize = 32 * 1024;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut after;
    loop {
        for _ in 0..(if cfg!(miri) { 600 } else { 10_000 }) {
            let _ = rl.len(); // pins on Epoch: lets the collector free what the inserts retired
        }
        // a throwaway `Epoch` map (dropped with all it holds): its insert flushes, its `len` pins
        let pinner = RankLocal::<u8, Epoch>::new();
        let job = ranklocal::Rank::new();
        on_behalf_of(job.id(), || pinner.get_or(|| 0));
        for _ in 0..(if cfg!(miri) { 600 } else { 10_000 }) {
            let _ = pinner.len();
        }
        drop((pinner, job));
        after = LIVE_BYTES.load(Ordering::SeqCst) - before;
        if after < BOUND || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::yield_now();
    }
    eprintln!(
        "{}: {churned} threads churned in {:.2?}; peak live heap {peak} B, after purge {after} B",
        B::NAME,
        start.elapsed()
    );
    assert!(
        after < BOUND,
        "{}: {after} B still live after purge",
        B::NAME
    );
    drop(rl);
}

/// One iterator held (a slow monitoring loop) while 2,048 short-lived threads each first-touch
/// their rank: the iterator keeps its own snapshot alive, but must not stop the reclamation of
/// anything else (it holds a count on its version, not an epoch pin). Returns the peak live-heap
/// growth in bytes.
fn held_iterator_heap_growth<B: Backend>() -> isize {
    const CHURN: usize = if cfg!(miri) { 16 } else { 2048 };
    const AT_ONCE: usize = if cfg!(miri) { 4 } else { 16 };
    let rl = RankLocal::<[u64; 4], B>::new();
    for r in exited_thread_ranks(if cfg!(miri) { 8 } else { 64 }) {
        on_behalf_of(r, || rl.get_or(|| [0; 4]));
    }
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    let mut held = rl.iter();
    let first = held.next().map(|(r, _)| r);
    let mut peak = 0isize;
    for _ in 0..CHURN / AT_ONCE {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..AT_ONCE)
                .map(|_| {
                    s.spawn(|| {
                        rl.get_or(|| [1; 4]);
                    })
                })
                .collect();
            // joined, not only waited for by the scope: a join also waits for the thread's exit
            // work, so that none of it lands in a later measurement
            hs.into_iter().for_each(|h| h.join().unwrap());
        });
        peak = peak.max(LIVE_BYTES.load(Ordering::SeqCst) - before);
    }
    // the held iterator still walks its own snapshot, unchanged by the inserts
    let rest = held.count();
    assert_eq!(
        rest + usize::from(first.is_some()),
        if cfg!(miri) { 8 } else { 64 }
    );
    assert_eq!(
        rl.len(),
        (if cfg!(miri) { 8 } else { 64 }) + CHURN / AT_ONCE * AT_ONCE
    );
    peak
}

fn held_iterator_does_not_stall_reclamation<B: Backend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let peak = held_iterator_heap_growth::<B>();
    eprintln!(
        "{}: one iterator held over 2,048 churned first touches: peak live-heap growth {peak} B ({:.2} MiB)",
        B::NAME,
        peak as f64 / (1 << 20) as f64
    );
    // the instances alone are 2,048 x 32 B; the bound is 8 MiB
    assert!(
        peak < 8 << 20,
        "{}: live heap grew by {peak} B with one iterator held",
        B::NAME
    );
}

/// One first touch that sweeps k exited ranks allocates O(k) bytes: the sweep takes the k exits
/// its inbox got and unpublishes them in one write, copying each trie node on their paths once.
/// (Before: one write per exited rank, each copying its path and none freed while the sweeper
/// itself was pinned: +14.8 MiB of peak heap at k = 4,000 on `Epoch`, where 1 MiB is the bound.)
fn one_sweep_of_many_exits_allocates_linearly<B: Backend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rl = RankLocal::<u64, B>::new();
    let k = 4000;
    let ranks: Vec<ranklocal::Rank> = (0..k).map(|_| ranklocal::Rank::new()).collect();
    for r in &ranks {
        on_behalf_of(r.id(), || rl.with(|_| ()));
    }
    let ids: Vec<ranklocal::RankId> = ranks.iter().map(ranklocal::Rank::id).collect();
    drop(ranks);
    let fresh = ranklocal::Rank::new();
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    PEAK_BYTES.store(before, Ordering::SeqCst);
    on_behalf_of(fresh.id(), || rl.with(|_| ())); // its amortized sweep is due
    let peak = PEAK_BYTES.load(Ordering::SeqCst) - before;
    assert!(
        ids.iter().all(|&id| rl.with_for(id, |_| ()).is_none()),
        "{}: the first touch did not sweep the {k} exits",
        B::NAME
    );
    assert!(
        peak < 1 << 20,
        "{}: one sweep of {k} exits peaked at +{peak} B of heap",
        B::NAME
    );
}

/// A service: requests, one `Rank` each, whose state one thread makes (`with`, a first touch)
/// and a pool of other threads reads (`with_for`, which pins the crate's collector), each
/// request's state freed after it. The collector's memory must not grow with the number of
/// requests. (Before: every first touch flushed a 2 KiB node into the collector's queue, whose
/// free then waited in the bag of whichever reader's pin collected it, up to 63 per reader
/// thread, and readers never flush: the heap grew with requests until every reader's bag was
/// full, 64 readers × 126 KiB.)
fn requests_on_many_threads_do_not_grow_the_heap<B: Backend>() {
    use std::sync::mpsc;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rl: &'static RankLocal<Vec<u8>, B> = common::leak(RankLocal::new());
    let workers = 64;
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut handles = Vec::with_capacity(workers);
    let txs: Vec<mpsc::Sender<ranklocal::RankId>> = (0..workers)
        .map(|_| {
            let (tx, rx) = mpsc::channel::<ranklocal::RankId>();
            let done = done_tx.clone();
            handles.push(std::thread::spawn(move || {
                for id in rx {
                    for _ in 0..3 {
                        assert_eq!(rl.with_for(id, Vec::len), Some(0));
                    }
                    done.send(()).unwrap();
                }
            }));
            tx
        })
        .collect();
    let serve = |n: usize| {
        for i in 0..n {
            let request = ranklocal::Rank::new();
            on_behalf_of(request.id(), || rl.with(|v| assert!(v.is_empty())));
            txs[i % workers].send(request.id()).unwrap();
            done_rx.recv().unwrap();
            drop(request);
        }
    };
    serve(workers); // every worker registered with the collector
    rl.reclaim_exited_blocking();
    let at_start = LIVE_BYTES.load(Ordering::SeqCst);
    serve(10_000);
    rl.reclaim_exited_blocking();
    let at_10k = LIVE_BYTES.load(Ordering::SeqCst);
    serve(30_000);
    rl.reclaim_exited_blocking();
    let grew = LIVE_BYTES.load(Ordering::SeqCst) - at_start;
    eprintln!(
        "{}: +{} B after 10,000 requests, +{grew} B after 40,000",
        B::NAME,
        at_10k - at_start
    );
    // The workers end, and are joined. Their exits keep about 600 B each for later threads to
    // reuse (measured: 64 workers, +38 KB; it grows with the most threads alive at once, not
    // with exits). Left running, they exited during the next test of this binary, whose
    // live-heap bound then counted it (51,737 B against 32 KiB, once in CI).
    drop(txs);
    handles.into_iter().for_each(|h| h.join().unwrap());
    assert!(
        grew < 256 << 10,
        "{}: the heap grew by {grew} B over 40,000 requests",
        B::NAME
    );
}

/// An `iter()` gives its snapshot back when dropped: calling it between writes, many times,
/// keeps no version alive (each one kept would keep its header and the nodes later writes
/// replaced).
fn repeated_iters_keep_nothing<B: Backend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rl = RankLocal::<u64, B>::new();
    let ranks: Vec<ranklocal::Rank> = (0..232).map(|_| ranklocal::Rank::new()).collect();
    for r in &ranks[..32] {
        on_behalf_of(r.id(), || rl.get_or(|| 1));
    }
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    for r in &ranks[32..] {
        for _ in 0..20 {
            assert!(rl.iter().count() >= 32);
        }
        on_behalf_of(r.id(), || rl.get_or(|| 1)); // a write: the snapshots iterated are replaced
    }
    // A blocking reclamation of an exited scoped rank waits until its batch's grace period is
    // over, and the versions retired before it are released with it (I37): they are dead.
    let gone = ranklocal::Rank::new();
    on_behalf_of(gone.id(), || rl.with(|_| ()));
    drop(gone);
    assert_eq!(rl.reclaim_exited_blocking(), 1);
    // A write that publishes a version (one after an `iter` does) frees the dead versions'
    // nodes; a first touch that fills a slot in place (I38) would publish none.
    assert!(rl.iter().count() >= 32);
    let extra = ranklocal::Rank::new();
    on_behalf_of(extra.id(), || rl.get_or(|| 1));
    let grew = LIVE_BYTES.load(Ordering::SeqCst) - before;
    // 200 new instances and their share of the trie stay; 200 versions kept would be ~200 KiB
    assert!(
        grew < 48 << 10,
        "{}: {grew} B kept after 4,000 iter() calls",
        B::NAME
    );
}

/// Live-heap growth per round over `rounds` calls of `f`, after `warm` calls.
fn growth_per_round(warm: usize, rounds: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warm {
        f();
    }
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    for _ in 0..rounds {
        f();
    }
    (LIVE_BYTES.load(Ordering::SeqCst) - before) as f64 / rounds as f64
}

/// What a first touch registers stays bounded however many `RankLocal`s or ranks come and go: the
/// inbox a rank's exit is delivered to, on each rank's list of watchers, and the exit work an
/// owner's first touch registers with its thread. Four kinds of round, each repeated 20,000
/// times, none growing the heap (under 8 bytes a round: keeping even one pointer a round would
/// reach it):
/// - a long-lived rank and this thread touch a new, short-lived `RankLocal` (scoped, so each asks
///   for the rank's exit): dropped `RankLocal`s' inboxes are pruned from the ranks' watcher lists;
/// - this thread touches a new, short-lived `RankLocal` with `with_own` (each registers its exit
///   work with the thread's exit hook): dropped `RankLocal`s' exit work is pruned from the hook's
///   list (found by mutation testing: a hook that kept every one survived);
/// - a long-lived rank touches one `RankLocal` again after each `clear`: its watcher list holds
///   the same inbox once;
/// - a short-lived rank touches one long-lived `RankLocal` (scoped), with no explicit
///   reclamation: the amortized sweeps keep its inbox and its map bounded.
///
/// Found in review 5 (adversarial), an attack the implementation withstood.
fn inboxes_and_exit_watchers_do_not_grow_the_heap<B: Backend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const ROUNDS: usize = 20_000;
    let job = Rank::new();
    let short_lived_rank_locals = growth_per_round(1_000, ROUNDS, || {
        let rl: RankLocal<u8, B> = RankLocal::new();
        on_behalf_of(job.id(), || rl.with(|_| ()));
        rl.with(|_| ());
    });
    let owner_touched_rank_locals = growth_per_round(1_000, ROUNDS, || {
        let rl: RankLocal<u8, B> = RankLocal::new();
        rl.with_own_or(|| 0, |_| ());
    });
    let mut cleared: RankLocal<u8, B> = RankLocal::new();
    let a_cleared_rank_local = growth_per_round(1_000, ROUNDS, || {
        on_behalf_of(job.id(), || cleared.with(|_| ()));
        cleared.clear();
    });
    let long_lived: RankLocal<[u64; 8], B> = RankLocal::new();
    let short_lived_ranks = growth_per_round(10_000, ROUNDS, || {
        let r = Rank::new();
        on_behalf_of(r.id(), || long_lived.with(|_| ()));
    });
    for (what, grew) in [
        ("short-lived RankLocals", short_lived_rank_locals),
        (
            "short-lived RankLocals touched by with_own",
            owner_touched_rank_locals,
        ),
        ("a cleared RankLocal", a_cleared_rank_local),
        ("short-lived ranks", short_lived_ranks),
    ] {
        eprintln!("{}: {what}: {grew:.3} B per round", B::NAME);
        assert!(
            grew < 8.0,
            "{}: {what}: the heap grows by {grew:.2} B per round",
            B::NAME
        );
    }
}
