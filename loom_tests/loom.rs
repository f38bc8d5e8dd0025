//! loom models of the crate's concurrency. Run with
//!
//! ```text
//! RUSTFLAGS="--cfg loom --cfg crossbeam_loom --cfg crossbeam_sanitize" LOOM_MAX_PREEMPTIONS=2 \
//!     timeout 1200 cargo test --release --features loom --target-dir target/loom --test loom
//! ```
//!
//! The `loom` feature makes loom a dependency (it is optional, so the crate's dependents never
//! resolve it); without it `cargo test` skips this target, and without `--cfg loom` this file
//! compiles to nothing. Each model counts the executions loom
//! explored, prints the count and asserts a lower bound, so a model that silently stops exploring
//! (a std primitive bypassing the shim, a missing cfg) fails instead of passing green.
//!
//! Under loom every trie node and version header carries a canary (a loom cell read by every
//! lookup, written by a writer that changes the node and by its drop) and a `Track`: loom reports
//! a node freed or changed under a reader as a causality violation, and one never freed as a
//! leak. The trie has 2 slots per node under loom, so a few ranks build several levels.
//! Instances are `Track`ed too.
#![cfg(loom)]

use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering::Relaxed as StdRelaxed};

use loom::alloc::Track;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use ranklocal::{on_behalf_of, Backend, Baseline, Epoch, Rank, RankId, RankLocal};

/// The counters of the model running on this OS thread. Counting is per model, never in a shared
/// static, so models pass when cargo runs them on parallel test threads: loom runs every execution
/// of a model (all of its loom threads, as coroutines) on the OS thread that called
/// `Builder::check`, so a std thread-local set by [`model`] is the running model's own. [`outcome`]
/// checks that it is set, so a loom that ran executions elsewhere would fail loudly.
#[derive(Default)]
struct Counts {
    runs: StdAtomicUsize,
    outcomes: StdAtomicUsize,
}

std::thread_local! {
    static COUNTS: std::cell::RefCell<Option<std::sync::Arc<Counts>>> =
        const { std::cell::RefCell::new(None) };
}

fn counts() -> std::sync::Arc<Counts> {
    COUNTS.with(|c| c.borrow().clone()).expect(
        "loom harness: no model is running on this OS thread (outcome() called outside model(), \
         or loom ran an execution on another OS thread)",
    )
}

/// Records that this execution ended in outcome `bit` (e.g. "the delegate's init won").
fn outcome(bit: usize) {
    counts().outcomes.fetch_or(bit, StdRelaxed);
}

/// Runs `f` under loom with a preemption bound (2 unless `LOOM_MAX_PREEMPTIONS` says otherwise),
/// prints how many executions it explored and fails if that is fewer than `min`, or if the
/// executions did not show every outcome in `outcomes` (both orders of a race, say): a model that
/// stopped exploring (a std primitive bypassing the shim, a missing cfg) then fails instead of
/// passing green. The minimums are about half the counts measured with loom 0.7.3 at bound 2;
/// loom is deterministic, so the counts only move when the code or loom does. The counts are
/// this model's own (see [`Counts`]).
fn model(name: &str, min: usize, outcomes: usize, f: impl Fn() + Sync + Send + 'static) {
    let mine = std::sync::Arc::new(Counts::default());
    let previous = COUNTS.with(|c| c.borrow_mut().replace(mine.clone()));
    assert!(previous.is_none(), "loom harness: models do not nest");
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    let start = std::time::Instant::now();
    let test_thread = std::thread::current().id();
    let in_check = mine.clone();
    builder.check(move || {
        assert_eq!(
            std::thread::current().id(),
            test_thread,
            "loom ran an execution on another OS thread: per-model counts would be wrong"
        );
        in_check.runs.fetch_add(1, StdRelaxed);
        f();
    });
    COUNTS.with(|c| c.borrow_mut().take());
    let runs = mine.runs.load(StdRelaxed);
    println!(
        "loom model {name}: {runs} executions explored in {:.1?} (preemption bound {:?})",
        start.elapsed(),
        builder.preemption_bound
    );
    assert!(
        runs >= min,
        "{name}: only {runs} executions explored (expected >= {min})"
    );
    let seen = mine.outcomes.load(StdRelaxed);
    assert_eq!(
        seen & outcomes,
        outcomes,
        "{name}: outcomes seen {seen:#b}, expected all of {outcomes:#b}"
    );
}

/// An instance whose drop loom checks (leaks and double drops).
struct Inst {
    value: usize,
    _track: Track<()>,
}

impl Inst {
    fn new(value: usize) -> Inst {
        Inst {
            value,
            _track: Track::new(()),
        }
    }
}

fn addr<T>(r: &T) -> usize {
    r as *const T as usize
}

/// 1. The owner and a delegate first-touch the same rank at once: one init, one instance.
fn first_touch_same_rank_owner_and_delegate<B: Backend>() {
    let rl = Arc::new(RankLocal::<Inst, B>::new());
    let inits = Arc::new(AtomicUsize::new(0));
    let me = RankId::this_thread();
    let t = {
        let (rl, inits) = (rl.clone(), inits.clone());
        thread::spawn(move || {
            let v = on_behalf_of(me, || {
                rl.get_or(|| {
                    inits.fetch_add(1, Ordering::SeqCst);
                    Inst::new(1)
                })
            });
            addr(v)
        })
    };
    let mine = addr(rl.get_or(|| {
        inits.fetch_add(1, Ordering::SeqCst);
        Inst::new(2)
    }));
    let theirs = t.join().unwrap();
    assert_eq!(
        inits.load(Ordering::SeqCst),
        1,
        "init ran twice for one rank"
    );
    assert_eq!(mine, theirs, "owner and delegate got different instances");
    assert_eq!(rl.len(), 1);
    // 1: the delegate's init won; 2: the owner's
    outcome(rl.try_get().unwrap().value);
}

#[test]
fn m1_first_touch_same_rank_owner_and_delegate_epoch() {
    model(
        "m1 first touch, owner + delegate (epoch)",
        45,
        0b11,
        first_touch_same_rank_owner_and_delegate::<Epoch>,
    );
}

/// A rank id of a thread that has exited (a rank the models can act for without a live thread).
fn spare_rank() -> RankId {
    thread::spawn(RankId::this_thread).join().unwrap()
}

/// 2. A writer publishes a new snapshot (retiring the old one) while a reader looks up: the
///    reader sees the old or the new snapshot, never a freed one; every snapshot is freed once.
fn publish_while_reading<B: Backend>() {
    let rl = Arc::new(RankLocal::<Inst, B>::new());
    let me = RankId::this_thread();
    let other = spare_rank();
    rl.get_or(|| Inst::new(7)); // snapshot S1
    let reader = {
        let rl = rl.clone();
        // a fresh thread: its cache is empty, so the lookup goes to the map
        thread::spawn(move || {
            let v = on_behalf_of(me, || rl.try_get().map(|i| i.value));
            let n = rl.len();
            (v, n)
        })
    };
    on_behalf_of(other, || rl.get_or(|| Inst::new(8))); // publishes S2, retires S1
    let (v, n) = reader.join().unwrap();
    assert_eq!(
        v,
        Some(7),
        "reader missed an entry present in both snapshots"
    );
    assert!(n == 1 || n == 2, "len saw a torn snapshot: {n}");
    outcome(n); // 1: read before the publish; 2: after
    assert_eq!(rl.len(), 2);
}

#[test]
fn m2_publish_while_reading_epoch() {
    model(
        "m2 publish while reading (epoch)",
        270,
        0b11,
        publish_while_reading::<Epoch>,
    );
}

/// 3. Two writers insert different ranks at once: both entries survive.
fn two_writers_different_ranks<B: Backend>() {
    let rl = Arc::new(RankLocal::<Inst, B>::new());
    let writer = {
        let rl = rl.clone();
        thread::spawn(move || {
            rl.get_or(|| Inst::new(2));
            RankId::this_thread()
        })
    };
    rl.get_or(|| Inst::new(1));
    let theirs = writer.join().unwrap();
    assert_eq!(rl.len(), 2, "an insert was lost");
    assert_eq!(rl.get_for(RankId::this_thread()).map(|i| i.value), Some(1));
    assert_eq!(rl.get_for(theirs).map(|i| i.value), Some(2));
}

#[test]
fn m3_two_writers_different_ranks_epoch() {
    model(
        "m3 two writers, different ranks (epoch)",
        540,
        0,
        two_writers_different_ranks::<Epoch>,
    );
}

/// 4. A thread that cached its own instance then works on behalf of another rank (the C++ cache
///    poisoning case), while that rank's owner first-touches concurrently.
fn delegation_after_caching_own<B: Backend>() {
    let rl = Arc::new(RankLocal::<Inst, B>::new());
    let me = RankId::this_thread();
    let t = {
        let rl = rl.clone();
        thread::spawn(move || {
            let own = addr(rl.get_or(|| Inst::new(2)));
            let delegated = on_behalf_of(me, || addr(rl.get_or(|| Inst::new(3))));
            assert_ne!(
                own, delegated,
                "delegated get returned the cached own instance"
            );
            assert_eq!(
                addr(rl.get_or(|| Inst::new(99))),
                own,
                "own instance not restored"
            );
            delegated
        })
    };
    let mine = addr(rl.get_or(|| Inst::new(1)));
    assert_eq!(t.join().unwrap(), mine);
    let value = rl.try_get().unwrap().value;
    assert!(value == 1 || value == 3);
    outcome(if value == 1 { 1 } else { 2 }); // 1: the owner's init won; 2: the delegate's
    assert_eq!(rl.len(), 2);
}

#[test]
fn m4_delegation_after_caching_own_epoch() {
    model(
        "m4 delegation after caching own (epoch)",
        40,
        0b11,
        delegation_after_caching_own::<Epoch>,
    );
}

/// 5. `iter` concurrent with an insert: one consistent snapshot, no duplicate or torn entries.
fn iter_while_inserting<B: Backend>() {
    let rl = Arc::new(RankLocal::<Inst, B>::new());
    let me = RankId::this_thread();
    rl.get_or(|| Inst::new(me.as_u64() as usize));
    let writer = {
        let rl = rl.clone();
        thread::spawn(move || {
            let r = RankId::this_thread();
            rl.get_or(|| Inst::new(r.as_u64() as usize));
        })
    };
    let seen: Vec<(RankId, usize)> = rl.iter().map(|(r, i)| (r, i.value)).collect();
    writer.join().unwrap();
    assert!(
        seen.len() == 1 || seen.len() == 2,
        "torn snapshot: {seen:?}"
    );
    assert!(seen.contains(&(me, me.as_u64() as usize)));
    for (r, v) in &seen {
        assert_eq!(
            r.as_u64() as usize,
            *v,
            "entry paired with another rank's instance"
        );
    }
    if seen.len() == 2 {
        assert_ne!(seen[0].0, seen[1].0, "duplicate entry");
    }
    outcome(seen.len()); // 1: iterated before the insert; 2: after
}

#[test]
fn m5_iter_while_inserting_epoch() {
    model(
        "m5 iter while inserting (epoch)",
        15,
        0b11,
        iter_while_inserting::<Epoch>,
    );
}

/// 6. A `RankLocal` is dropped after another thread cached its instance, and a new one is built:
///    the caching thread sees nothing of the old one through the new one.
fn drop_after_cached_then_rebuild<B: Backend>() {
    let old = Arc::new(RankLocal::<Inst, B>::new());
    let next = Arc::new(Mutex::new(None::<Arc<RankLocal<Inst, B>>>));
    let t = {
        let (old, next) = (old.clone(), next.clone());
        thread::spawn(move || {
            assert_eq!(old.get_or(|| Inst::new(1)).value, 1); // now cached on this thread
            drop(old);
            loop {
                let new = next.lock().unwrap().clone();
                if let Some(new) = new {
                    assert!(
                        new.try_get().is_none(),
                        "stale hit from a dropped RankLocal"
                    );
                    assert_eq!(new.get_or(|| Inst::new(2)).value, 2);
                    break;
                }
                thread::yield_now();
            }
        })
    };
    old.get_or(|| Inst::new(3));
    drop(old); // the last owner frees the instances (both threads' ones)
    *next.lock().unwrap() = Some(Arc::new(RankLocal::new()));
    t.join().unwrap();
}

#[test]
fn m6_drop_after_cached_then_rebuild_epoch() {
    model(
        "m6 drop after cached, rebuild (epoch)",
        56,
        0,
        drop_after_cached_then_rebuild::<Epoch>,
    );
}

// 7. The Baseline backend under the same models: it must be correct too.
#[test]
fn m7a_first_touch_same_rank_owner_and_delegate_baseline() {
    model(
        "m7a first touch, owner + delegate (baseline)",
        10,
        0b11,
        first_touch_same_rank_owner_and_delegate::<Baseline>,
    );
}

#[test]
fn m7b_publish_while_reading_baseline() {
    model(
        "m7b publish while reading (baseline)",
        6,
        0b11,
        publish_while_reading::<Baseline>,
    );
}

#[test]
fn m7c_two_writers_different_ranks_baseline() {
    model(
        "m7c two writers, different ranks (baseline)",
        29,
        0,
        two_writers_different_ranks::<Baseline>,
    );
}

#[test]
fn m7d_delegation_after_caching_own_baseline() {
    model(
        "m7d delegation after caching own (baseline)",
        31,
        0b11,
        delegation_after_caching_own::<Baseline>,
    );
}

#[test]
fn m7e_iter_while_inserting_baseline() {
    model(
        "m7e iter while inserting (baseline)",
        3,
        0b11,
        iter_while_inserting::<Baseline>,
    );
}

// 8–10: the persistent trie. Under loom a node has 2 slots (1 bit per level), so the ranks of
// these models (ids 1..6) already span tries of height 1 to 3: inserts grow the trie, copy paths
// and share subtrees. Every node and version header carries a canary (a loom cell every lookup
// reads, a node's writer writes and its drop writes) and a `Track`.

/// 8. Two writers insert ranks that grow the trie and copy overlapping paths, racing each other,
///    while a reader is mid-walk through the version before them: the main thread's iterator has
///    read one entry when both writes happen (one of them by the main thread itself) and reads the
///    rest afterwards. It sees exactly its version; every replaced node is freed only once no one
///    can read it (no causality violation), and exactly once. (A third concurrent thread makes the
///    model too large for the preemption bound; m9 races a pinned lookup against two publishes.)
fn two_writers_and_a_reader_mid_descent<B: Backend>() {
    let rl = Arc::new(RankLocal::<Inst, B>::new());
    let me = RankId::this_thread(); // id 1
    let (a, c) = (spare_rank(), spare_rank()); // ids 2, 3
    rl.get_or(|| Inst::new(1)); // height 1
    on_behalf_of(a, || rl.get_or(|| Inst::new(2))); // height 2
    let mut it = rl.iter();
    let first = it.next().map(|(r, i)| (r, i.value));
    let writer = {
        let rl = rl.clone();
        // its own rank, id 4: grows the trie to height 3 (the old root becomes shared)
        thread::spawn(move || {
            rl.get_or(|| Inst::new(4));
            RankId::this_thread()
        })
    };
    // the second writer, racing the first: rank 3 copies the path to the leaf it shares with 2
    on_behalf_of(c, || rl.get_or(|| Inst::new(3)));
    let rest: Vec<(RankId, usize)> = it.map(|(r, i)| (r, i.value)).collect();
    let w = writer.join().unwrap();
    let seen: Vec<(RankId, usize)> = first.into_iter().chain(rest).collect();
    assert_eq!(
        seen,
        vec![(me, 1), (a, 2)],
        "the reader did not walk exactly its own version"
    );
    assert_eq!(rl.len(), 4, "an insert was lost");
    assert_eq!(rl.get_for(c).map(|i| i.value), Some(3));
    assert_eq!(rl.get_for(w).map(|i| i.value), Some(4));
}

#[test]
fn m8_two_writers_and_a_reader_mid_descent_epoch() {
    model(
        "m8 two writers + reader mid-descent (epoch)",
        210,
        0,
        two_writers_and_a_reader_mid_descent::<Epoch>,
    );
}

/// 9. Retirement of replaced nodes: a reader loads a version and descends it while a writer
///    publishes two more versions, the second of which may free the first's replaced nodes —
///    only once the reader can no longer be inside them.
fn replaced_nodes_are_retired_after_readers<B: Backend>() {
    let rl = Arc::new(RankLocal::<Inst, B>::new());
    let me = RankId::this_thread();
    let (a, b) = (spare_rank(), spare_rank()); // ids 2, 3
    rl.get_or(|| Inst::new(1)); // version 1
    let reader = {
        let rl = rl.clone();
        thread::spawn(move || {
            let v = rl.get_for(me).map(|i| i.value);
            let n = rl.len();
            (v, n)
        })
    };
    on_behalf_of(a, || rl.get_or(|| Inst::new(2))); // version 2: grows, replaces nothing
    drop(rl.iter()); // freezes version 2 (I38): `b`'s first touch cannot fill its leaf
    on_behalf_of(b, || rl.get_or(|| Inst::new(3))); // version 3: replaces version 2's path
    let (v, n) = reader.join().unwrap();
    assert_eq!(v, Some(1));
    assert!((1..=3).contains(&n), "len saw a torn version: {n}");
    outcome(if n == 1 { 1 } else { 2 }); // 1: read the first version; 2: a later one
    assert_eq!(rl.len(), 3);
}

#[test]
fn m9_replaced_nodes_are_retired_after_readers_epoch() {
    model(
        "m9 replaced nodes retired after readers (epoch)",
        1250,
        0b11,
        replaced_nodes_are_retired_after_readers::<Epoch>,
    );
}

/// 10. An iterator held across publishes: it walks exactly the snapshot it was created on while
///     a writer publishes two versions that copy the paths it is walking (and may free nodes it
///     does not hold); it holds a count, not a pin.
fn held_iterator_across_publishes<B: Backend>() {
    let rl = Arc::new(RankLocal::<Inst, B>::new());
    let me = RankId::this_thread();
    let other = spare_rank();
    let later = spare_rank();
    rl.get_or(|| Inst::new(me.as_u64() as usize));
    on_behalf_of(other, || rl.get_or(|| Inst::new(other.as_u64() as usize)));
    let mut it = rl.iter();
    let first = it.next().map(|(r, i)| (r, i.value));
    let writer = {
        let rl = rl.clone();
        thread::spawn(move || {
            let r = RankId::this_thread();
            rl.get_or(|| Inst::new(r.as_u64() as usize)); // copies the path of the held leaf
            on_behalf_of(later, || rl.get_or(|| Inst::new(later.as_u64() as usize)));
        })
    };
    let rest: Vec<(RankId, usize)> = it.map(|(r, i)| (r, i.value)).collect();
    let n = rl.len();
    writer.join().unwrap();
    let mut seen: Vec<(RankId, usize)> = first.into_iter().chain(rest).collect();
    seen.sort();
    let mut want = vec![(me, me.as_u64() as usize), (other, other.as_u64() as usize)];
    want.sort();
    assert_eq!(
        seen, want,
        "the held iterator did not walk exactly its own snapshot"
    );
    outcome(if n == 2 { 1 } else { 2 }); // 1: iteration ended before any publish; 2: after
    assert_eq!(rl.len(), 4);
    let mut again: Vec<RankId> = rl.iter().map(|(r, _)| r).collect();
    again.dedup();
    assert_eq!(again.len(), 4, "a later iterator sees every rank once");
}

#[test]
fn m10_held_iterator_across_publishes_epoch() {
    model(
        "m10 held iterator across publishes (epoch)",
        150,
        0b11,
        held_iterator_across_publishes::<Epoch>,
    );
}

/// 11. A `Rank` is dropped while a delegate on another thread acts for it (its first touch), then
///     purged. Liveness of `Rank`s is tracked under loom (their drop runs inside the model; thread
///     ranks are not, so the model's threads never touch their own instances). The instance made
///     for the rank after, before or during its drop belongs to it: one init, reachable until the
///     purge, dropped by the purge exactly once (its `Track` catches a leak or a double drop); a live
///     `Rank`'s instance survives the purge.
fn rank_dropped_while_a_delegate_acts<B: Backend>() {
    let rl = Arc::new(RankLocal::<Inst, B>::new());
    let kept = Rank::new();
    let dropped = Rank::new();
    let (kept_id, id) = (kept.id(), dropped.id());
    on_behalf_of(kept_id, || rl.get_or(|| Inst::new(1)));
    let delegate = {
        let rl = rl.clone();
        thread::spawn(move || on_behalf_of(id, || rl.get_or(|| Inst::new(2)).value))
    };
    drop(dropped);
    let seen = rl.get_for(id).map(|i| i.value);
    assert_eq!(delegate.join().unwrap(), 2);
    assert!(seen.is_none() || seen == Some(2), "get_for saw {seen:?}");
    outcome(if seen.is_some() { 1 } else { 2 }); // 1: the delegate's insert came first; 2: after
    let Ok(mut rl) = Arc::try_unwrap(rl) else {
        panic!("the delegate still holds the RankLocal after join");
    };
    assert_eq!(
        rl.get_for(id).map(|i| i.value),
        Some(2),
        "an exited rank's instance vanished"
    );
    assert_eq!(
        rl.purge_exited(),
        1,
        "purge did not drop exactly the dropped Rank's instance"
    );
    assert!(rl.get_for(id).is_none());
    assert_eq!(
        rl.get_for(kept_id).map(|i| i.value),
        Some(1),
        "a live Rank's instance was purged"
    );
    drop(kept);
    assert_eq!(rl.purge_exited(), 1);
    assert!(rl.is_empty());
}

#[test]
fn m11_rank_dropped_while_a_delegate_acts_epoch() {
    model(
        "m11 Rank dropped while a delegate acts, purged (epoch)",
        80,
        0b11,
        rank_dropped_while_a_delegate_acts::<Epoch>,
    );
}

#[test]
fn m11b_rank_dropped_while_a_delegate_acts_baseline() {
    model(
        "m11b Rank dropped while a delegate acts, purged (baseline)",
        3,
        0b11,
        rank_dropped_while_a_delegate_acts::<Baseline>,
    );
}

/// An instance whose every read (`look`) and whose drop touch a loom cell: loom reports a drop
/// that does not happen after a reader's read as a causality violation (a use after free).
struct Canary {
    cell: loom::cell::UnsafeCell<usize>,
    _track: Track<()>,
}

// SAFETY: the cell is written only by the drop, which needs the instance exclusively; loom checks
// the causality of every access (the reclamation protocol's I32, I33).
unsafe impl Sync for Canary {}

impl Default for Canary {
    fn default() -> Canary {
        Canary {
            cell: loom::cell::UnsafeCell::new(5),
            _track: Track::new(()),
        }
    }
}

impl Canary {
    fn look(&self) -> usize {
        self.cell.with(|p| unsafe { *p })
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.cell.with_mut(|p| unsafe { *p = 0 });
    }
}

/// 13. Reclamation of a dropped `Rank`'s scoped-only instance races a delegate's `with_for`
///     (twice: the first fills the thread's pinned cache entry, the second may hit it): the
///     instance is freed only after the reader is done, and a stale cache entry is never used.
fn reclaim_while_scoped_reading<B: Backend>() {
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || rl.with(|c| c.look()));
    let reader = {
        let rl = rl.clone();
        thread::spawn(move || {
            let a = rl.with_for(id, Canary::look);
            let b = rl.with_for(id, Canary::look);
            (a, b)
        })
    };
    drop(job);
    let swept = rl.reclaim_exited();
    assert_eq!(swept, 1, "the exited rank's scoped instance was not swept");
    let (a, b) = reader.join().unwrap();
    assert!(a.is_none() || a == Some(5), "read a dropped value: {a:?}");
    assert!(b.is_none() || b == Some(5), "read a dropped value: {b:?}");
    assert!(!(a.is_none() && b.is_some()), "the instance came back");
    // 1: the reader saw it both times; 2: never; 4: once, then it was gone
    outcome(match (a, b) {
        (Some(_), Some(_)) => 1,
        (None, None) => 2,
        _ => 4,
    });
    // `len` counts swept values until a later call frees them
    assert!(
        rl.len() <= swept,
        "a value stayed in the map: len {}",
        rl.len()
    );
}

#[test]
fn m13_reclaim_while_scoped_reading_epoch() {
    model(
        "m13 reclaim while a delegate reads scoped (epoch)",
        110_000,
        0b111,
        reclaim_while_scoped_reading::<Epoch>,
    );
}

#[test]
fn m13b_reclaim_while_scoped_reading_baseline() {
    model(
        "m13b reclaim while a delegate reads scoped (baseline)",
        63_000,
        0b111,
        reclaim_while_scoped_reading::<Baseline>,
    );
}

/// 13c (review 4). A delegate's plain `get_for` (the slow path escapes inside
/// `Backend::get_with`: the lookup's pin on `Epoch`, the read lock alone on `Baseline`) races the
/// reclamation of a dropped `Rank`'s scoped-only instance: either the reader escapes it first
/// (then it is kept and still readable) or it sees none; never a freed one.
fn reclaim_while_get_for<B: Backend>() {
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || rl.with(|c| c.look()));
    let reader = {
        let rl = rl.clone();
        thread::spawn(move || rl.get_for(id).map(Canary::look))
    };
    drop(job);
    let swept = rl.reclaim_exited();
    let a = reader.join().unwrap();
    assert!(a.is_none() || a == Some(5), "read a dropped value: {a:?}");
    match a {
        Some(_) => {
            assert_eq!(swept, 0, "an escaped instance was swept");
            assert_eq!(rl.get_for(id).map(Canary::look), Some(5));
            outcome(1);
        }
        None => {
            assert_eq!(swept, 1);
            // `len` counts swept values until a later call frees them
            assert!(
                rl.len() <= swept,
                "a value stayed in the map: len {}",
                rl.len()
            );
            outcome(2);
        }
    }
}

#[test]
fn m13c_reclaim_while_get_for_epoch() {
    model(
        "m13c reclaim while a delegate get_for escapes (epoch)",
        43_000,
        0b11,
        reclaim_while_get_for::<Epoch>,
    );
}

#[test]
fn m13d_reclaim_while_get_for_baseline() {
    model(
        "m13d reclaim while a delegate get_for escapes (baseline)",
        9,
        0b11,
        reclaim_while_get_for::<Baseline>,
    );
}

/// 14. A sweep unpublishes the scoped-only instances of two dropped `Rank`s in one write (one new
///     version: the batch's paths copied once) while a delegate reads them with `with_for`: `a`,
///     then `b`, then `a` again (a hit in the pinned cache entry its first read filled, unless the
///     sweep's fresh uid killed it). Each read sees the value or nothing, never a freed one; a
///     rank once gone stays gone; both instances are freed exactly once.
fn batched_reclaim_while_scoped_reading<B: Backend>() {
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    let (job_a, job_b) = (Rank::new(), Rank::new());
    let (a, b) = (job_a.id(), job_b.id());
    on_behalf_of(a, || rl.with(|c| c.look()));
    on_behalf_of(b, || rl.with(|c| c.look()));
    let reader = {
        let rl = rl.clone();
        thread::spawn(move || {
            let first = rl.with_for(a, Canary::look);
            let other = rl.with_for(b, Canary::look);
            let again = rl.with_for(a, Canary::look);
            (first, other, again)
        })
    };
    drop(job_a);
    drop(job_b);
    let swept = rl.reclaim_exited();
    assert_eq!(swept, 2, "the batch did not take both exited ranks");
    let (first, other, again) = reader.join().unwrap();
    for v in [first, other, again] {
        assert!(v.is_none() || v == Some(5), "read a dropped value: {v:?}");
    }
    assert!(
        !(first.is_none() && again.is_some()),
        "the instance came back"
    );
    // 1: every read before the sweep; 2: none; 4: some before, some after
    outcome(match (first, other, again) {
        (Some(_), Some(_), Some(_)) => 1,
        (None, None, None) => 2,
        _ => 4,
    });
    // `len` counts swept values until a later call frees them
    assert!(
        rl.len() <= swept,
        "a value stayed in the map: len {}",
        rl.len()
    );
}

#[test]
fn m14_batched_reclaim_while_scoped_reading_epoch() {
    model(
        "m14 one-write batch reclaim while a delegate reads scoped (epoch)",
        177_000,
        0b111,
        batched_reclaim_while_scoped_reading::<Epoch>,
    );
}

#[test]
fn m14b_batched_reclaim_while_scoped_reading_baseline() {
    model(
        "m14b one-write batch reclaim while a delegate reads scoped (baseline)",
        90_000,
        0b111,
        batched_reclaim_while_scoped_reading::<Baseline>,
    );
}

/// A value whose contents are a loom cell: a read that does not happen after its construction
/// (an instance published without Release/Acquire) is a causality violation.
struct Cellv {
    v: loom::cell::UnsafeCell<u64>,
    _track: Track<()>,
}

// SAFETY: the cell is written only at construction, before the value is published; afterwards it
// is only read (loom checks exactly that ordering).
unsafe impl Sync for Cellv {}

impl Cellv {
    fn new(v: u64) -> Cellv {
        Cellv {
            v: loom::cell::UnsafeCell::new(v),
            _track: Track::new(()),
        }
    }

    fn read(&self) -> u64 {
        // SAFETY: never written after construction (see `Sync`).
        self.v.with(|p| unsafe { *p })
    }
}

/// Two live ranks whose ids share a trie leaf (2 slots under loom: ids 2k and 2k + 1), and the
/// `Rank`s that keep them live: three consecutive ids hold such a pair.
fn ranks_sharing_a_leaf() -> (Vec<Rank>, RankId, RankId) {
    let mut ranks: Vec<Rank> = (0..3).map(|_| Rank::new()).collect();
    if ranks[0].id().as_u64() % 2 == 1 {
        ranks.remove(0);
    }
    let (a, b) = (ranks[0].id(), ranks[1].id());
    assert_eq!(b.as_u64(), a.as_u64() + 1, "rank ids are consecutive");
    (ranks, a, b)
}

/// Two live ranks `a < b` whose leaves are siblings under one parent (a trie node has two slots
/// under loom: ids `4m` and `4m + 2`), and the ranks made to get them. A first touch of `b` after
/// `a`'s finds no leaf for `b` under the published parent and hangs one (I38).
fn ranks_in_sibling_leaves() -> (Vec<Rank>, RankId, RankId) {
    let mut ranks: Vec<Rank> = (0..7).map(|_| Rank::new()).collect();
    let first = ranks
        .iter()
        .position(|r| r.id().as_u64() % 4 == 0)
        .expect("four consecutive ids");
    ranks.drain(..first);
    let (a, b) = (ranks[0].id(), ranks[2].id());
    assert_eq!(b.as_u64(), a.as_u64() + 2, "rank ids are consecutive");
    (ranks, a, b)
}

/// 15. A first touch fills its empty slot of the published leaf in place (I38) while a delegate
///     on another thread looks the rank up and then iterates: it sees the rank absent or its
///     fully built instance (the fill's Release store publishes it, I2), and its snapshot has
///     each rank once, with its own value. With `pick` = [`ranks_in_sibling_leaves`] (m17), the
///     first touch hangs a new leaf under the published parent instead: the same store then
///     publishes the leaf too (I12). With `older` (both models), the rank touched first is the
///     higher one, so the second first touch is of a rank below every rank inserted: it looks the
///     map up (pinned) before the writer lock, where a new rank's goes to the lock at once (as in
///     m16 and m18); the pinned lookup gives loom the interleavings in which the delegate reads
///     what the first touch stores.
fn fill_in_place_while_reading<B: Backend>(pick: fn() -> (Vec<Rank>, RankId, RankId), older: bool) {
    let rl = Arc::new(RankLocal::<Cellv, B>::new());
    let (_ranks, a, b) = pick();
    let (a, b) = if older { (b, a) } else { (a, b) };
    on_behalf_of(a, || rl.get_or(|| Cellv::new(a.as_u64()))); // the leaf of a and b
    let writer = {
        let rl = rl.clone();
        thread::spawn(move || {
            on_behalf_of(b, || rl.get_or(|| Cellv::new(b.as_u64())).read()) // fills b's slot
        })
    };
    let got = rl.get_for(b).map(Cellv::read);
    assert!(
        got.is_none() || got == Some(b.as_u64()),
        "torn instance: {got:?}"
    );
    let seen: Vec<(RankId, u64)> = rl.iter().map(|(r, v)| (r, v.read())).collect();
    assert!(
        seen.len() == 1 || seen.len() == 2,
        "torn snapshot: {seen:?}"
    );
    assert!(seen.iter().all(|&(r, v)| r.as_u64() == v));
    assert_eq!(writer.join().unwrap(), b.as_u64());
    outcome(if got.is_some() { 1 } else { 2 }); // 1: read after the fill; 2: before
    assert_eq!(rl.len(), 2);
}

#[test]
fn m15_fill_in_place_while_reading_epoch() {
    model(
        "m15 first touch (of an older rank) fills a published leaf while a delegate reads (epoch)",
        3_900,
        0b11,
        || fill_in_place_while_reading::<Epoch>(ranks_sharing_a_leaf, true),
    );
}

#[test]
fn m17_hang_in_place_while_reading_epoch() {
    model(
        "m17 first touch (of an older rank) hangs a new leaf under a published parent while a delegate reads (epoch)",
        3_900,
        0b11,
        || fill_in_place_while_reading::<Epoch>(ranks_in_sibling_leaves, true),
    );
}

/// 16. A held iterator's leaves are never filled in place (I38): a first touch into its leaf on
///     another thread, while the iterator is walked, copies the leaf; the iterator sees exactly
///     its snapshot.
fn held_iterator_while_a_first_touch_shares_its_leaf<B: Backend>() {
    let rl = Arc::new(RankLocal::<Cellv, B>::new());
    let (_ranks, a, b) = ranks_sharing_a_leaf();
    on_behalf_of(a, || rl.get_or(|| Cellv::new(a.as_u64())));
    let held = rl.iter();
    let writer = {
        let rl = rl.clone();
        thread::spawn(move || on_behalf_of(b, || rl.get_or(|| Cellv::new(b.as_u64())).read()))
    };
    let seen: Vec<(RankId, u64)> = held.map(|(r, v)| (r, v.read())).collect();
    let n = rl.len();
    assert_eq!(
        seen,
        [(a, a.as_u64())],
        "the held iterator saw a later first touch"
    );
    assert_eq!(writer.join().unwrap(), b.as_u64());
    outcome(n); // 1: walked before the first touch; 2: after
    assert_eq!(rl.iter().count(), 2);
}

#[test]
fn m16_held_iterator_while_a_first_touch_shares_its_leaf_epoch() {
    model(
        "m16 held iterator while a first touch shares its leaf (epoch)",
        9,
        0b11,
        held_iterator_while_a_first_touch_shares_its_leaf::<Epoch>,
    );
}

/// 18. No leaf is hung under a node of a held iterator's snapshot (I38): a first touch whose
///     leaf is missing, on another thread while the iterator walks the leaf before it, copies
///     the path. The walk goes on past that point after the first touch has returned, so a leaf
///     hung into the snapshot would be seen.
fn held_iterator_while_a_first_touch_needs_a_new_leaf<B: Backend>() {
    let rl = Arc::new(RankLocal::<Cellv, B>::new());
    let (_ranks, a, b) = ranks_in_sibling_leaves();
    on_behalf_of(a, || rl.get_or(|| Cellv::new(a.as_u64())));
    let mut held = rl.iter();
    let writer = {
        let rl = rl.clone();
        thread::spawn(move || on_behalf_of(b, || rl.get_or(|| Cellv::new(b.as_u64())).read()))
    };
    let first = held.next().map(|(r, v)| (r, v.read()));
    let n = rl.len();
    assert_eq!(writer.join().unwrap(), b.as_u64());
    let rest: Vec<(RankId, u64)> = held.map(|(r, v)| (r, v.read())).collect();
    assert_eq!(first, Some((a, a.as_u64())));
    assert_eq!(rest, [], "the held iterator saw a later first touch");
    outcome(n); // 1: its first entry read before the first touch; 2: after
    assert_eq!(rl.iter().count(), 2);
}

#[test]
fn m18_held_iterator_while_a_first_touch_needs_a_new_leaf_epoch() {
    model(
        "m18 held iterator while a first touch needs a new leaf under its parent (epoch)",
        3,
        0b11,
        held_iterator_while_a_first_touch_needs_a_new_leaf::<Epoch>,
    );
}

/// 19. The exit drop (I39): the owner's `with_own` made an OWNED instance; its exit work races a
///     delegate's `with_for` of its rank on another thread. Exactly one of the reader's upgrade
///     (OWNED → SCOPED) and the exit work's CAS (OWNED → EXITING) wins: either the reader reads
///     the live value and a sweep drops it after the exit, or the exit drops it and the reader
///     sees none; never a value the exit work moved out (the canary's cell, written by its drop,
///     and its `Track` catch a read after the drop, a double drop and a leak).
fn exit_drop_while_a_delegate_reads<B: Backend>() {
    ranklocal::__loom_register_thread();
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    assert_eq!(rl.with_own(Canary::look), 5);
    let id = RankId::this_thread();
    let reader = {
        let rl = rl.clone();
        thread::spawn(move || rl.with_for(id, Canary::look))
    };
    ranklocal::__loom_exit_thread(); // the owner's exit: its exit work, then its exit
    let a = reader.join().unwrap();
    assert!(a.is_none() || a == Some(5), "read a dropped value: {a:?}");
    // 1: the reader moved it on first (a sweep drops it); 2: the exit dropped it
    outcome(if a.is_some() { 1 } else { 2 });
    rl.reclaim_exited();
    assert!(
        rl.with_for(id, Canary::look).is_none(),
        "the value came back"
    );
}

#[test]
fn m19_exit_drop_while_a_delegate_reads_epoch() {
    model(
        "m19 exit drop while a delegate reads (epoch)",
        10_000,
        0b11,
        exit_drop_while_a_delegate_reads::<Epoch>,
    );
}

#[test]
fn m19b_exit_drop_while_a_delegate_reads_baseline() {
    model(
        "m19b exit drop while a delegate reads (baseline)",
        18_000,
        0b11,
        exit_drop_while_a_delegate_reads::<Baseline>,
    );
}

/// 20. The exit drop (I39) races the `RankLocal`'s drop on another thread (the last `Arc`): the
///     gate arbitrates. Either the exit work moved the value out first (and the drop waits for
///     it to be dropped, then frees the tombstone without dropping it again) or the drop closed
///     the gate first (and drops the value itself); exactly once either way (`Track`).
fn exit_drop_while_the_rank_local_is_dropped<B: Backend>() {
    ranklocal::__loom_register_thread();
    let by_exit = Arc::new(AtomicUsize::new(0));
    let rl = Arc::new(RankLocal::<Marked, B>::new());
    let me = RankId::this_thread();
    rl.with_own_or(
        || Marked {
            owner: me,
            by_exit: by_exit.clone(),
            _track: Track::new(()),
        },
        |_| (),
    );
    let dropper = thread::spawn(move || drop(rl));
    ranklocal::__loom_exit_thread();
    dropper.join().unwrap();
    // 1: dropped by the exit work; 2: by the map's drop
    outcome(1 << by_exit.load(Ordering::SeqCst));
}

/// A value that records whether its own thread's exit work dropped it.
struct Marked {
    owner: RankId,
    by_exit: Arc<AtomicUsize>,
    _track: Track<()>,
}

impl Drop for Marked {
    fn drop(&mut self) {
        if RankId::this_thread() == self.owner {
            self.by_exit.store(0, Ordering::SeqCst);
        } else {
            self.by_exit.store(1, Ordering::SeqCst);
        }
    }
}

#[test]
fn m20_exit_drop_while_the_rank_local_is_dropped_epoch() {
    model(
        "m20 exit drop while the RankLocal is dropped (epoch)",
        20,
        0b11,
        exit_drop_while_the_rank_local_is_dropped::<Epoch>,
    );
}

loom::thread_local! {
    /// `true` while this loom thread runs inside an outer scoped read (model 21's `with_for`).
    static INSIDE_READ: std::cell::Cell<bool> = std::cell::Cell::new(false);
}

/// An instance whose drop must not run inside an outer scoped read of the dropping thread.
struct NotInRead {
    _track: Track<()>,
}

impl NotInRead {
    fn new() -> NotInRead {
        NotInRead {
            _track: Track::new(()),
        }
    }
}

impl Drop for NotInRead {
    fn drop(&mut self) {
        assert!(
            !INSIDE_READ.with(std::cell::Cell::get),
            "a value was dropped inside an outer scoped read"
        );
    }
}

/// 21. A first touch nested in an outer scoped read (`with_for` of a kept rank) while another
///     thread sweeps an exited rank's scoped instance and helps its grace period along: the
///     nested first touch's own sweep may find the batch ready, but frees nothing while the
///     outer read's pin is held (a value's `Drop` may wait for a grace period, which waits for
///     that pin). The batch is freed exactly once, outside every read.
fn first_touch_inside_a_read<B: Backend>() {
    let rl = Arc::new(RankLocal::<NotInRead, B>::new());
    let (keeper, job) = (Rank::new(), Rank::new());
    on_behalf_of(keeper.id(), || rl.with_or(NotInRead::new, |_| ()));
    on_behalf_of(job.id(), || rl.with_or(NotInRead::new, |_| ()));
    let kid = keeper.id();
    let reader = {
        let rl = rl.clone();
        thread::spawn(move || {
            rl.with_for(kid, |_| {
                INSIDE_READ.with(|i| i.set(true));
                let fresh = Rank::new();
                on_behalf_of(fresh.id(), || {
                    let _ = rl.get_or(NotInRead::new);
                });
                // an inner read begins and ends: not the outermost, it drains nothing
                let _ = rl.with_for(kid, |_| ());
                INSIDE_READ.with(|i| i.set(false));
            })
            .expect("the kept rank's instance");
        })
    };
    drop(job);
    assert_eq!(
        rl.reclaim_exited(),
        1,
        "the exited rank's scoped instance was not swept"
    );
    reader.join().unwrap();
    outcome(1);
    // the kept rank's and the fresh rank's instances stay; `len` also counts the exited rank's
    // until it is freed (by the reader at the end of its read, or a call outside every read)
    let n = rl.len();
    assert!(
        n == 2 || n == 3,
        "len {n}: the kept rank's and the fresh rank's instances stay"
    );
    // what no sweep freed yet is freed by the drop, outside every read (loom checks it is
    // freed exactly once)
}

#[test]
fn m21_first_touch_inside_a_read_frees_nothing_epoch() {
    model(
        "m21 a first touch nested in an outer read frees nothing (epoch)",
        135_000,
        0b1,
        first_touch_inside_a_read::<Epoch>,
    );
}

/// 22. `get`'s lookup of the thread's own rank takes no pin: it looks the map up under the writer
///     lock when that is free, and escapes what it finds before it lets go (a pin only if another
///     thread holds the lock). Under loom a thread's own rank counts as exited, so another
///     thread's sweep may take its scoped instance: `get` returns that instance, escaped (then
///     kept and readable), or, once the sweep took it, a new one; never a freed one.
fn own_lookup_races_a_sweep<B: Backend>() {
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    let owner = {
        let rl = rl.clone();
        thread::spawn(move || {
            let first = rl.with(addr); // its own rank's scoped instance (exited, under loom)
            let me = RankId::this_thread();
            let got = rl.get_or(Canary::default); // the own-rank lookup: no pin
            (me, got.look(), first == addr(got))
        })
    };
    rl.reclaim_exited();
    let (me, got, same) = owner.join().unwrap();
    assert_eq!(got, 5, "read a dropped value");
    assert_eq!(
        rl.get_for(me).map(Canary::look),
        Some(5),
        "an escaped instance was swept"
    );
    // 1: `get` found the scoped instance (and escaped it); 2: the sweep took it first
    outcome(if same { 1 } else { 2 });
}

#[test]
fn m22_own_lookup_without_a_pin_races_a_sweep_epoch() {
    model(
        "m22 an own-rank lookup under the free writer lock races a sweep (epoch)",
        270,
        0b11,
        own_lookup_races_a_sweep::<Epoch>,
    );
}

/// 23. A `Reader` (one pin held across its lookups) races the reclamation of a dropped `Rank`'s
///     scoped-only instance: it looks the rank up, looks it up again, and reads the first value
///     again, while another thread sweeps. Every value it got stays readable while it lives (the
///     sweep's drop waits for its pin); a rank once gone stays gone; the instance is freed
///     exactly once (`Track`).
fn reader_races_a_sweep<B: Backend>() {
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    let job = Rank::new();
    let id = job.id();
    on_behalf_of(id, || rl.with(|c| c.look()));
    let reader = {
        let rl = rl.clone();
        thread::spawn(move || {
            let reader = rl.pin();
            let first = reader.get_for(id);
            let a = first.map(Canary::look);
            let b = reader.get_for(id).map(Canary::look);
            let again = first.map(Canary::look); // lent for as long as the reader lives
            (a, b, again)
        })
    };
    drop(job);
    let swept = rl.reclaim_exited();
    assert_eq!(swept, 1, "the exited rank's scoped instance was not swept");
    let (a, b, again) = reader.join().unwrap();
    for v in [a, b, again] {
        assert!(v.is_none() || v == Some(5), "read a dropped value: {v:?}");
    }
    assert_eq!(a, again, "a value the reader lent changed under it");
    assert!(!(a.is_none() && b.is_some()), "the instance came back");
    // 1: the reader saw it both times; 2: never; 4: once, then it was gone
    outcome(match (a, b) {
        (Some(_), Some(_)) => 1,
        (None, None) => 2,
        _ => 4,
    });
    // `len` counts swept values until a later call frees them
    assert!(
        rl.len() <= swept,
        "a value stayed in the map: len {}",
        rl.len()
    );
}

#[test]
fn m23_reader_races_a_sweep_epoch() {
    model(
        "m23 a reader holding its pin across lookups races a sweep (epoch)",
        30_000,
        0b111,
        reader_races_a_sweep::<Epoch>,
    );
}

#[test]
fn m23b_reader_races_a_sweep_baseline() {
    model(
        "m23b a reader holding its pin across lookups races a sweep (baseline)",
        17_000,
        0b111,
        reader_races_a_sweep::<Baseline>,
    );
}

/// 24. The deferred exit drop (I41): the owner holds an `OwnRef` (a guard `get_own` counted)
///     while its exit work runs, and a delegate's `with_for` of its rank races both on another
///     thread. The exit work finds the guard counted and leaves the drop to it (LINGERING: the
///     reader then sees none) or, if the reader moved the value on first, keeps it (the reader read
///     the live value; no sweep frees it under the guard). The owner reads through the guard after
///     its exit work, then drops it: the last guard drops a LINGERING value, on the owner thread
///     (the canary's cell, written by its drop, and its `Track` catch a read after the drop, a
///     double drop and a leak).
fn deferred_exit_drop_while_a_delegate_reads<B: Backend>() {
    ranklocal::__loom_register_thread();
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    let g = rl.get_own();
    assert_eq!(g.look(), 5);
    let id = RankId::this_thread();
    let reader = {
        let rl = rl.clone();
        thread::spawn(move || rl.with_for(id, Canary::look))
    };
    ranklocal::__loom_exit_thread(); // the owner's exit work, with the guard alive
    assert_eq!(g.look(), 5, "read a dropped value through a guard");
    drop(g); // the last guard: drops a LINGERING value here
    let a = reader.join().unwrap();
    assert!(a.is_none() || a == Some(5), "read a dropped value: {a:?}");
    rl.reclaim_exited();
    let after = rl.with_for(id, Canary::look);
    if a.is_some() {
        // 1: the reader moved it on first: kept (a guard read it past the exit work)
        assert_eq!(after, Some(5), "a value read through a guard was swept");
        outcome(1);
    } else {
        // 2: the exit work left it to the guard, whose drop dropped it
        assert_eq!(after, None, "the value came back");
        outcome(2);
    }
}

#[test]
fn m24_deferred_exit_drop_while_a_delegate_reads_epoch() {
    model(
        "m24 deferred exit drop while a delegate reads (epoch)",
        18_000,
        0b11,
        deferred_exit_drop_while_a_delegate_reads::<Epoch>,
    );
}

/// 25. Adoption (I42) races the ending thread's last guard: the owner of a recycling map's value
///     holds an `OwnRef` through its exit work (the value lingers), while a new thread's first
///     touch runs; the owner then reads through the guard and drops it (the value becomes
///     VACANT, for a new rank to adopt). The new thread adopts the value only after that drop
///     (then it reads the owner's 5) or builds its own (7); never both at once: the guard count
///     and the value are loom cells, so an adoption under a live guard is a causality violation,
///     and a value handed to two ranks is dropped twice (`Track`).
fn adoption_races_the_last_guard<B: Backend>() {
    ranklocal::__loom_register_thread();
    let rl = Arc::new(RankLocal::<Canary, B>::recycling());
    let g = rl.get_own();
    ranklocal::__loom_exit_thread(); // the owner's exit work, with the guard alive
    let newcomer = {
        let rl = rl.clone();
        thread::spawn(move || {
            ranklocal::__loom_register_thread();
            let v = rl.get_own_or(|| {
                let c = Canary::default();
                c.cell.with_mut(|p| unsafe { *p = 7 });
                c
            });
            let seen = v.look();
            drop(v);
            ranklocal::__loom_exit_thread();
            seen
        })
    };
    assert_eq!(g.look(), 5, "the value changed under a live guard");
    drop(g); // the last guard: the value is vacated here
    let seen = newcomer.join().unwrap();
    assert!(seen == 5 || seen == 7, "read a dropped value: {seen}");
    // 1: adopted after the last guard's drop; 2: built its own
    outcome(if seen == 5 { 1 } else { 2 });
}

#[test]
fn m25_adoption_races_the_last_guard_epoch() {
    model(
        "m25 adoption races the ending thread's last guard (epoch)",
        47,
        0b11,
        adoption_races_the_last_guard::<Epoch>,
    );
}

/// 26. A map dropped inside another map's exit drop (I39): thread A's `with_own` value of an
///     outer map holds the last `Arc` of an inner map, of which thread B has a `with_own` value;
///     A and B exit while a third thread drops the outer map (its last `Arc`). Whichever comes
///     first — the outer drop closing the gate, A's exit work moving the outer value out, B's
///     moving its inner value out — the inner map's drop, run inside A's exit drop, never waits,
///     the outer drop does not return before B's value is dropped (the inner map's flights
///     handed over to the outer gate), nothing waits forever (a lost wake-up is a deadlock
///     here), and each value is dropped exactly once (`Track`).
fn map_dropped_inside_an_exit_drop<B: Backend>() {
    ranklocal::__loom_register_thread();
    let leaf_dropped = Arc::new(AtomicUsize::new(2)); // 2 until `Marked::drop` stores 0 or 1
    let by_exit = Arc::new(AtomicUsize::new(0));
    let outer = Arc::new(RankLocal::<Outer<B>, B>::new());
    let inner = Arc::new(RankLocal::<Marked, B>::new());
    let ready = Arc::new(AtomicUsize::new(0));
    let b = {
        let (inner, ready, leaf_dropped) = (inner.clone(), ready.clone(), leaf_dropped.clone());
        thread::spawn(move || {
            ranklocal::__loom_register_thread();
            let me = RankId::this_thread();
            inner.with_own_or(
                || Marked {
                    owner: me,
                    by_exit: leaf_dropped,
                    _track: Track::new(()),
                },
                |_| (),
            );
            drop(inner);
            ready.store(1, Ordering::SeqCst);
            ranklocal::__loom_exit_thread();
        })
    };
    while ready.load(Ordering::SeqCst) == 0 {
        thread::yield_now();
    }
    let me = RankId::this_thread();
    outer.with_own_or(
        || Outer {
            owner: me,
            by_exit: by_exit.clone(),
            _inner: inner, // the inner map's last `Arc`
            _track: Track::new(()),
        },
        |_| (),
    );
    let dropper = {
        let leaf_dropped = leaf_dropped.clone();
        thread::spawn(move || {
            drop(outer);
            // `Marked` stores 0 when its owner's exit dropped it, 1 when another thread did:
            // either way `Marked::drop` ran, which `Track` and this store show
            leaf_dropped.load(Ordering::SeqCst)
        })
    };
    ranklocal::__loom_exit_thread();
    let seen = dropper.join().unwrap();
    b.join().unwrap();
    assert_ne!(
        seen, 2,
        "the outer map's drop returned before a value of the map it owned was dropped"
    );
    // 1: the outer value dropped by A's exit work; 2: by the outer map's drop
    outcome(1 << by_exit.load(Ordering::SeqCst));
}

/// A value of the outer map of model 23: holds the inner map; records who dropped it.
struct Outer<B: Backend> {
    owner: RankId,
    by_exit: Arc<AtomicUsize>,
    _inner: Arc<RankLocal<Marked, B>>,
    _track: Track<()>,
}

impl<B: Backend> Drop for Outer<B> {
    fn drop(&mut self) {
        let by = usize::from(RankId::this_thread() != self.owner);
        self.by_exit.store(by, Ordering::SeqCst);
    }
}

#[test]
fn m26_map_dropped_inside_an_exit_drop_epoch() {
    model(
        "m26 a map dropped inside another map's exit drop (epoch)",
        1_600,
        0b11,
        map_dropped_inside_an_exit_drop::<Epoch>,
    );
}

/// 27. Two maps owning each other's last `Arc` through values dropped at exit (I39): thread A's
///     `with_own` value of map 1 holds map 2, thread B's value of map 2 holds map 1, and both
///     threads exit. Whichever exit drop comes first, each map is dropped inside the other's
///     exit drop (or, if B's ran before A made its value, on A outside any): nothing waits
///     forever, each value is dropped exactly once, and no gate is kept alive by a cycle of
///     hand-overs (loom reports a leaked `Arc`).
fn two_maps_owning_each_other<B: Backend>() {
    ranklocal::__loom_register_thread();
    let m1 = Arc::new(RankLocal::<Cyclic<B>, B>::new());
    let m2 = Arc::new(RankLocal::<Cyclic<B>, B>::new());
    let ready = Arc::new(AtomicUsize::new(0));
    let b = {
        let (m1, m2, ready) = (m1.clone(), m2.clone(), ready.clone());
        thread::spawn(move || {
            ranklocal::__loom_register_thread();
            m2.with_own_or(
                || Cyclic {
                    _other: m1,
                    _track: Track::new(()),
                },
                |_| (),
            );
            drop(m2);
            ready.store(1, Ordering::SeqCst);
            ranklocal::__loom_exit_thread();
        })
    };
    while ready.load(Ordering::SeqCst) == 0 {
        thread::yield_now();
    }
    m1.with_own_or(
        || Cyclic {
            _other: m2,
            _track: Track::new(()),
        },
        |_| (),
    );
    drop(m1);
    ranklocal::__loom_exit_thread();
    b.join().unwrap();
    outcome(1);
}

/// A value of model 24: holds the other map.
struct Cyclic<B: Backend> {
    _other: Arc<RankLocal<Cyclic<B>, B>>,
    _track: Track<()>,
}

#[test]
fn m27_two_maps_owning_each_other_exit_together_epoch() {
    model(
        "m27 two maps owning each other's last Arc exit together (epoch)",
        740,
        0b1,
        two_maps_owning_each_other::<Epoch>,
    );
}

/// 28. Per-walk accounting: a held iterator whose snapshot holds a scoped instance of a rank that
///     exits while another thread sweeps it (SCOPED → RECLAIMING, unpublished, retired) and helps
///     its grace period along. The walk yields the value (its CAS to ESCAPED won: kept) or skips
///     it (the sweep's won), or its snapshot never held it (`iter` swept the delivered exit
///     first); a batch retired while the walk lives is freed only after the walk is dropped —
///     never under it — and exactly once.
fn held_iterator_while_a_sweep_retires_its_snapshot<B: Backend>() {
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    let job = Rank::new();
    on_behalf_of(job.id(), || rl.with_or(Canary::default, |_| ()));
    let walker = {
        let rl = rl.clone();
        thread::spawn(move || {
            let mut it = rl.iter();
            let seen = it.next().map(|(_, v)| v.look());
            assert!(it.next().is_none());
            drop(it);
            seen
        })
    };
    drop(job); // the rank exits
    let swept = rl.reclaim_exited();
    let seen = walker.join().unwrap();
    assert!(seen.is_none_or(|v| v == 5), "the walk read a dropped value");
    // 1: the walk yielded it (kept); 2: a sweep took it first
    outcome(if seen.is_some() { 1 } else { 2 });
    if seen.is_some() {
        assert_eq!(swept, 0, "a sweep took a value the walk yielded");
    }
    // what is still queued is freed by a later call or the drop, exactly once (loom's Track)
    rl.reclaim_exited();
}

#[test]
fn m28_held_iterator_while_a_sweep_retires_its_snapshot_epoch() {
    model(
        "m28 a held iterator while a sweep retires what its snapshot holds (epoch)",
        215,
        0b11,
        held_iterator_while_a_sweep_retires_its_snapshot::<Epoch>,
    );
}

/// 29. A recycling map's ended owner reaches for its value again (a late thread-local destructor
///     calls `get_own` after its exit work made the value VACANT) while a new thread's first
///     touch adopts it. Exactly one gets it: the late owner claims it back (kept under its rank,
///     the newcomer builds its own) or the newcomer adopts it (the late owner then builds a new
///     one); the owner never uses the instance another rank adopted (the guard counts are loom
///     cells: two threads counting one instance is a causality violation).
fn late_owner_races_an_adoption<B: Backend>() {
    ranklocal::__loom_register_thread();
    let rl = Arc::new(RankLocal::<Canary, B>::recycling());
    drop(rl.get_own());
    ranklocal::__loom_exit_thread(); // the value is VACANT now
    let newcomer = {
        let rl = rl.clone();
        thread::spawn(move || {
            ranklocal::__loom_register_thread();
            let v = rl.get_own_or(|| {
                let c = Canary::default();
                c.cell.with_mut(|p| unsafe { *p = 7 });
                c
            });
            let (seen, at) = (v.look(), addr(&*v));
            drop(v);
            ranklocal::__loom_exit_thread();
            (seen, at)
        })
    };
    let mine = rl.get_own_or(|| {
        let c = Canary::default();
        c.cell.with_mut(|p| unsafe { *p = 9 });
        c
    });
    let (my_seen, my_at) = (mine.look(), addr(&*mine));
    drop(mine);
    let (seen, at) = newcomer.join().unwrap();
    // 1: the late owner claimed its value back; 2: the newcomer adopted it; 4: the newcomer
    // adopted it and ended, then the late owner's first touch adopted it in turn (one after the
    // other: two ranks using it at once would race on its guard count)
    match (my_seen, seen) {
        (5, 7) => outcome(1),
        (9, 5) => outcome(2),
        (5, 5) if my_at == at => outcome(4),
        other => panic!("unexpected values: {other:?}"),
    }
}

#[test]
fn m29_late_owner_races_an_adoption_epoch() {
    model(
        "m29 a late owner races an adoption of its value (epoch)",
        788,
        0b11,
        late_owner_races_an_adoption::<Epoch>,
    );
}

/// 30. Two readers of an OWNED instance on two other threads: one escapes it (`get_for`, OWNED →
///     ESCAPED), the other reads it scoped (`with_for`, OWNED → SCOPED). Whichever CAS wins, both
///     read the value: a scoped reader whose first look saw OWNED, or whose CAS lost, and that
///     then finds it ESCAPED reads it as it is (never as absent). Added for a mutant no native
///     test can catch (the ESCAPED arm of the upgrade's CAS loop deleted).
fn two_readers_of_an_owned_instance<B: Backend>() {
    ranklocal::__loom_register_thread();
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    assert_eq!(rl.with_own(Canary::look), 5);
    let id = RankId::this_thread();
    let escaper = {
        let rl = rl.clone();
        thread::spawn(move || rl.get_for(id).map(Canary::look))
    };
    let scoped = {
        let rl = rl.clone();
        thread::spawn(move || rl.with_for(id, Canary::look))
    };
    assert_eq!(escaper.join().unwrap(), Some(5));
    assert_eq!(
        scoped.join().unwrap(),
        Some(5),
        "the scoped reader missed a live value"
    );
    outcome(1);
    ranklocal::__loom_exit_thread();
}

#[test]
fn m30_two_readers_of_an_owned_instance_epoch() {
    model(
        "m30 two readers of an OWNED instance, one escaping (epoch)",
        145_000,
        0b1,
        two_readers_of_an_owned_instance::<Epoch>,
    );
}

/// 31. The exit drop (I39) races a delegate's first touch of the exiting rank (`with_or` inside
///     `on_behalf_of` on another thread): the delegate either moves the live value on first (and
///     reads it; the exit work then leaves it to a sweep) or finds it gone and refills the slot
///     with a new value, after the exit work has moved the old one out under the gate lock (it
///     waits for that lock if it finds the move under way). Never the moved-out value, never a
///     refill before the tombstone is made.
fn exit_drop_while_a_delegate_refills<B: Backend>() {
    ranklocal::__loom_register_thread();
    let rl = Arc::new(RankLocal::<Canary, B>::new());
    assert_eq!(rl.with_own(Canary::look), 5);
    let id = RankId::this_thread();
    let delegate = {
        let rl = rl.clone();
        thread::spawn(move || {
            let mut made = false;
            let seen = on_behalf_of(id, || {
                rl.with_or(
                    || {
                        made = true;
                        Canary::default()
                    },
                    Canary::look,
                )
            });
            (seen, made)
        })
    };
    ranklocal::__loom_exit_thread();
    let (seen, made) = delegate.join().unwrap();
    assert_eq!(seen, 5, "read a dropped value");
    // 1: the delegate moved the live value on first; 2: it refilled the slot
    outcome(if made { 2 } else { 1 });
}

#[test]
fn m31_exit_drop_while_a_delegate_refills_epoch() {
    model(
        "m31 exit drop while a delegate first-touches the rank (epoch)",
        900,
        0b11,
        exit_drop_while_a_delegate_refills::<Epoch>,
    );
}
