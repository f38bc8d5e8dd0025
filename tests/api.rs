//! What users of std's `thread_local!`, the `thread_local` crate, tokio and tracing reach for:
//! `with_or` and `with_existing`, the `rank_local!` key's methods, panics at the caller's line, the
//! iterator traits, `OnBehalfOf: Clone`, `From<&Rank> for RankId`. Stamped over every backend
//! where a backend is involved.

mod common;

use std::future::Future;
use std::iter::FusedIterator;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use ranklocal::{on_behalf_of, rank_local, Backend, OnBehalfExt, Rank, RankId, RankLocal};

/// A value with no `Default`: `with_or` builds it on first use and lends it, scoped.
struct Conn {
    peer: &'static str,
    sent: AtomicU32,
}

fn with_or_builds_once_and_lends<B: Backend>() {
    let rl = RankLocal::<Conn, B>::new();
    let inits = AtomicU32::new(0);
    let open = || {
        inits.fetch_add(1, Ordering::Relaxed);
        Conn {
            peer: "10.0.0.1",
            sent: AtomicU32::new(0),
        }
    };
    for _ in 0..3 {
        rl.with_or(open, |c| c.sent.fetch_add(1, Ordering::Relaxed));
    }
    assert_eq!(
        inits.load(Ordering::Relaxed),
        1,
        "init ran more than once for one rank"
    );
    assert_eq!(rl.with_or(open, |c| c.sent.load(Ordering::Relaxed)), 3);
    let job = Rank::new();
    on_behalf_of(job.id(), || {
        rl.with_or(open, |c| assert_eq!(c.peer, "10.0.0.1"))
    });
    assert_eq!(
        inits.load(Ordering::Relaxed),
        2,
        "another rank's init did not run"
    );
    // scoped: the exited rank's value is reclaimable
    drop(job);
    assert_eq!(rl.reclaim_exited(), 1);
}

fn with_existing_never_creates_and_keeps_nothing<B: Backend>() {
    let rl = RankLocal::<AtomicU32, B>::new();
    assert_eq!(rl.with_existing(|v| v.load(Ordering::Relaxed)), None);
    assert!(rl.is_empty(), "with_existing created an instance");
    let job = Rank::new();
    on_behalf_of(job.id(), || {
        assert_eq!(rl.with_existing(|_| ()), None);
        rl.with(|v| v.store(4, Ordering::Relaxed));
        assert_eq!(rl.with_existing(|v| v.load(Ordering::Relaxed)), Some(4));
    });
    assert_eq!(
        rl.with_existing(|_| ()),
        None,
        "another rank's instance was lent"
    );
    drop(job);
    assert_eq!(rl.reclaim_exited(), 1, "with_existing escaped the instance");
}

fn iterators_are_fused_and_iter_mut_exact<B: Backend>() {
    let mut rl = RankLocal::<u64, B>::new();
    let ranks: Vec<Rank> = (0..5).map(|_| Rank::new()).collect();
    for (i, r) in ranks.iter().enumerate() {
        on_behalf_of(r.id(), || rl.get_or(|| i as u64));
    }
    fn fused<I: FusedIterator>(_: &I) {}
    {
        let mut it = rl.iter();
        fused(&it);
        assert_eq!(it.by_ref().count(), 5);
        assert!(
            it.next().is_none() && it.next().is_none(),
            "Iter resumed after None"
        );
    }
    {
        let mut it = rl.iter_mut();
        fused(&it);
        assert_eq!((it.len(), it.size_hint()), (5, (5, Some(5))));
        it.next();
        assert_eq!((it.len(), it.size_hint()), (4, (4, Some(4))));
        assert_eq!(it.by_ref().count(), 4);
        assert_eq!(
            (it.len(), it.next().is_none(), it.next().is_none()),
            (0, true, true)
        );
    }
    let mut owned = rl.into_iter();
    fused(&owned);
    assert_eq!(owned.len(), 5);
    let mut sum: Vec<u64> = owned.by_ref().map(|(_, v)| v).collect();
    sum.sort_unstable();
    assert_eq!(sum, [0, 1, 2, 3, 4]);
    assert!(owned.next().is_none());
}

/// `Iter` is `Send` (when `T: Sync`): held across an `.await` in a task that moves threads.
fn iter_moves_between_threads<B: Backend>() {
    let rl = RankLocal::<u64, B>::new();
    rl.get_or(|| 5);
    let it = rl.iter();
    let sum = std::thread::scope(|s| s.spawn(move || it.map(|(_, v)| *v).sum::<u64>()).join());
    assert_eq!(sum.unwrap(), 5);
    fn send_future<F: Future + Send>(f: F) -> F {
        f
    }
    let fut = send_future(async {
        let it = rl.iter();
        std::future::ready(()).await; // the iterator lives across an await point
        it.count()
    });
    assert_eq!(common::block_on(fut), 1);
}

/// A caller's mistake (a reentrant `init`) panics with the caller's file and line, not the
/// crate's.
fn reentrant_init_panics_at_the_callers_line<B: Backend>() {
    // the panic hook is the process's: one test at a time swaps it
    static HOOK: Mutex<()> = Mutex::new(());
    let _one_at_a_time = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    let rl: &'static RankLocal<u64, B> = Box::leak(Box::new(RankLocal::new()));
    let location = std::sync::Arc::new(Mutex::new(None));
    let hook_location = location.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        *hook_location.lock().unwrap() = info.location().map(|l| l.file().to_string());
    }));
    // within a deadline: a reentrancy check that stopped working would deadlock, not panic
    let outcome = common::within_deadline(move || {
        catch_unwind(AssertUnwindSafe(|| *rl.get_or(|| *rl.get_or(|| 1)))).is_err()
    });
    std::panic::set_hook(previous);
    assert!(outcome, "a reentrant init did not panic");
    let file = location.lock().unwrap().clone().unwrap_or_default();
    assert!(
        file.ends_with("api.rs"),
        "the panic points into {file}, not the caller"
    );
}

common::backend_tests! {
    with_or_builds_once_and_lends,
    with_existing_never_creates_and_keeps_nothing,
    iterators_are_fused_and_iter_mut_exact,
    iter_moves_between_threads,
    reentrant_init_panics_at_the_callers_line,
}

rank_local! {
    static HITS: AtomicU64 = const { AtomicU64::new(0) };
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
}

rank_local! {
    /// Used by one test only: its emptiness is that test's to assert.
    static ONLY_HERE: u8 = 0;
}

rank_local! {
    /// Used by one test only: which rank's value each access sees.
    static WHOSE: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
}

/// Once the thread's own value is in the key's thread slot (its `get`), `get` and `with` run
/// inside `on_behalf_of` still reach the delegated rank's value, never the thread's own.
///
/// Found by mutation testing: the fast paths' `acting_as_self() & p.is_some()` turned into `|` or
/// `^` (which hand over the slot's value to any rank) survived, as no test delegated after filling
/// the slot.
#[test]
fn a_keys_filled_slot_is_not_used_for_a_delegated_rank() {
    WHOSE.get().lock().unwrap().push("own");
    WHOSE.with(|v| v.lock().unwrap().push("own, with"));
    let job = Rank::new();
    on_behalf_of(job.id(), || {
        WHOSE.with(|v| v.lock().unwrap().push("job, with"));
        WHOSE.get().lock().unwrap().push("job, get");
    });
    assert_eq!(*WHOSE.get().lock().unwrap(), ["own", "own, with"]);
    assert_eq!(
        WHOSE.with_for(job.id(), |v| v.lock().unwrap().clone()),
        Some(vec!["job, with", "job, get"]),
        "the delegated rank's accesses reached another value"
    );
}

/// A key's `is_empty` is `true` until a rank has an instance, `false` while one has, and `true`
/// again once the instances are reclaimed; its `reclaim_exited` returns how many it took.
///
/// Found by mutation testing (issue 21 of the project's tracker): `is_empty` returning `false`
/// always, and `reclaim_exited` returning 1 always, survived (the only other checks ask a key
/// other tests use, which is never empty, and reclaim one rank).
#[test]
fn a_keys_is_empty_follows_its_instances() {
    assert!(ONLY_HERE.is_empty(), "an untouched key is not empty");
    let jobs = [Rank::new(), Rank::new()];
    for job in &jobs {
        on_behalf_of(job.id(), || ONLY_HERE.with(|_| ()));
    }
    assert!(!ONLY_HERE.is_empty(), "a key with an instance is empty");
    drop(jobs);
    assert_eq!(
        ONLY_HERE.reclaim_exited(),
        2,
        "the key's sweep took 2 exited ranks"
    );
    ONLY_HERE.reclaim_exited_blocking();
    assert!(
        ONLY_HERE.is_empty(),
        "the reclaimed instances are still counted"
    );
}

/// The key has what the object has: `len`, `is_empty`, `for_each`, `with_existing`,
/// `reclaim_exited`, `reclaim_exited_blocking`, and `Debug` (what `{:?}` of the `RankLocal`
/// prints).
#[test]
fn a_key_has_what_the_object_has() {
    let before = HITS.len();
    assert_eq!(HITS.with_existing(|h| h.load(Ordering::Relaxed)), None);
    HITS.with(|h| h.fetch_add(2, Ordering::Relaxed));
    assert_eq!(HITS.with_existing(|h| h.load(Ordering::Relaxed)), Some(2));
    let job = Rank::new();
    on_behalf_of(job.id(), || {
        HITS.with(|h| h.fetch_add(5, Ordering::Relaxed))
    });
    assert_eq!(HITS.len(), before + 2);
    assert!(!HITS.is_empty());
    let mut total = 0;
    HITS.for_each(|_, h| total += h.load(Ordering::Relaxed));
    assert!(total >= 7);
    // `Debug` shows the count and this thread's own value only, never the job's (issue 28)
    let shown = format!("{HITS:?}");
    assert_eq!(
        shown,
        format!(
            "RankLocal {{ backend: \"epoch\", len: {}, own: Some(2) }}",
            HITS.len()
        )
    );
    assert_eq!(shown, format!("{:?}", HITS.as_rank_local()));
    drop(job);
    assert_eq!(
        HITS.reclaim_exited(),
        1,
        "the key's with kept the exited rank's value"
    );
    let t = std::thread::spawn(|| HITS.with(|h| h.fetch_add(1, Ordering::Relaxed)));
    t.join().unwrap();
    HITS.reclaim_exited_blocking();
    assert_eq!(HITS.len(), before + 1);
}

/// A key's `with`, `with_for` and `as_rank_local`, and `RankLocal::get_or_default`.
#[test]
fn a_keys_scoped_access_and_its_rank_local() {
    NAMES.with(|n| n.lock().unwrap().push("main"));
    let job = Rank::new();
    on_behalf_of(job.id(), || NAMES.with(|n| n.lock().unwrap().push("job")));
    assert_eq!(
        NAMES.with_for(job.id(), |n| n.lock().unwrap().clone()),
        Some(vec!["job"])
    );
    assert_eq!(NAMES.with_for(Rank::new().id(), |_| ()), None);
    let rl = NAMES.as_rank_local();
    assert_eq!(
        rl.with_for(RankId::current(), |n| n.lock().unwrap().clone()),
        Some(vec!["main"])
    );
    assert!(
        std::ptr::eq(rl.get(), NAMES.get()),
        "as_rank_local is another map"
    );
    let plain: RankLocal<AtomicU32> = RankLocal::new();
    plain.get_or_default().fetch_add(1, Ordering::Relaxed);
    assert!(std::ptr::eq(plain.get_or_default(), plain.get()));
    assert_eq!(plain.get().load(Ordering::Relaxed), 1);
}

#[test]
fn on_behalf_of_futures_clone_as_the_same_rank() {
    let job = Rank::new();
    let fut = async { RankId::current() }.on_behalf_of(job.id());
    let fut2 = std::future::ready(3).on_behalf_of(job.id());
    let copy = fut2.clone();
    assert_eq!(copy.rank(), job.id());
    assert_eq!(common::block_on(copy), 3);
    assert_eq!(common::block_on(fut2), 3);
    assert_eq!(common::block_on(fut), job.id());
}

#[test]
fn a_rank_reference_converts_to_its_id() {
    let job = Rank::new();
    fn takes(id: impl Into<RankId>) -> RankId {
        id.into()
    }
    assert_eq!(takes(&job), job.id());
    assert_eq!(RankId::from(&job), job.id());
}
