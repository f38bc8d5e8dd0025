//! Property test: random sequences of operations — `get_or`, `try_get`, `get_for`, nested
//! `on_behalf_of`, panicking and failing inits, `iter`, `clear`, `purge_exited` — run across three
//! worker threads (one op at a time) and checked against a sequential model, on every backend.
//! The number of live instances is checked after every op (every instance dropped exactly once).

mod common;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, RwLock};
use std::thread;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use ranklocal::{on_behalf_of, Backend, RankId, RankLocal};

common::backend_tests! {
    #[cfg_attr(miri, ignore = "proptest is far too slow under Miri; the other suites run there")]
    matches_the_sequential_model,
}

const WORKERS: usize = 3;
const EXITED: usize = 2;
const RANKS: usize = WORKERS + EXITED;

#[derive(Debug, Clone)]
enum Op {
    GetOr {
        t: usize,
        v: u32,
    },
    TryGet {
        t: usize,
    },
    GetFor {
        t: usize,
        r: usize,
    },
    OnBehalf {
        t: usize,
        r: usize,
        v: u32,
    },
    Nested {
        t: usize,
        r1: usize,
        r2: usize,
        v: u32,
    },
    PanickingInit {
        t: usize,
        r: usize,
    },
    FailingInit {
        t: usize,
        r: usize,
    },
    Iter,
    Clear,
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    let t = 0..WORKERS;
    let r = 0..RANKS;
    prop_oneof![
        4 => (t.clone(), any::<u32>()).prop_map(|(t, v)| Op::GetOr { t, v }),
        2 => t.clone().prop_map(|t| Op::TryGet { t }),
        3 => (t.clone(), r.clone()).prop_map(|(t, r)| Op::GetFor { t, r }),
        4 => (t.clone(), r.clone(), any::<u32>()).prop_map(|(t, r, v)| Op::OnBehalf { t, r, v }),
        2 => (t.clone(), r.clone(), r.clone(), any::<u32>())
            .prop_map(|(t, r1, r2, v)| Op::Nested { t, r1, r2, v }),
        1 => (t.clone(), r.clone()).prop_map(|(t, r)| Op::PanickingInit { t, r }),
        1 => (t.clone(), r.clone()).prop_map(|(t, r)| Op::FailingInit { t, r }),
        1 => Just(Op::Iter),
        1 => Just(Op::Clear),
        1 => Just(Op::Purge),
    ]
}

/// An instance that counts how many of its kind are alive.
struct Inst {
    v: u32,
    live: Arc<AtomicIsize>,
}
impl Inst {
    fn new(v: u32, live: &Arc<AtomicIsize>) -> Inst {
        live.fetch_add(1, Ordering::SeqCst);
        Inst {
            v,
            live: live.clone(),
        }
    }
}
impl Drop for Inst {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

type Shared<B> = Arc<RwLock<RankLocal<Inst, B>>>;
type Job<B> = Box<dyn FnOnce(&RankLocal<Inst, B>) -> Vec<Option<u32>> + Send>;
/// A job and where to send its answer.
type Request<B> = (Job<B>, Sender<Vec<Option<u32>>>);

/// Worker threads that each run jobs as their own rank.
struct Workers<B: Backend> {
    senders: Vec<Sender<Request<B>>>,
    ranks: Vec<RankId>,
    handles: Vec<thread::JoinHandle<()>>,
}

impl<B: Backend> Workers<B> {
    fn start(rl: &Shared<B>) -> Workers<B> {
        let mut senders = Vec::new();
        let mut ranks = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..WORKERS {
            let (tx, rx) = channel::<Request<B>>();
            let (rtx, rrx) = channel();
            let rl = rl.clone();
            handles.push(thread::spawn(move || {
                rtx.send(RankId::this_thread()).unwrap();
                for (job, reply) in rx {
                    let out = job(&rl.read().unwrap());
                    reply.send(out).unwrap();
                }
            }));
            senders.push(tx);
            ranks.push(rrx.recv().unwrap());
        }
        for _ in 0..EXITED {
            ranks.push(thread::spawn(RankId::this_thread).join().unwrap());
        }
        Workers {
            senders,
            ranks,
            handles,
        }
    }

    fn run(&self, t: usize, job: Job<B>) -> Vec<Option<u32>> {
        let (tx, rx) = channel();
        self.senders[t].send((job, tx)).unwrap();
        rx.recv().unwrap()
    }
}

fn check<B: Backend>(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let live = Arc::new(AtomicIsize::new(0));
    let rl: Shared<B> = Arc::new(RwLock::new(RankLocal::new()));
    let w = Workers::<B>::start(&rl);
    let ranks = w.ranks.clone();
    let mut model: BTreeMap<usize, u32> = BTreeMap::new();
    for op in ops {
        let l = live.clone();
        match op.clone() {
            Op::GetOr { t, v } => {
                let got = w.run(
                    t,
                    Box::new(move |rl| vec![Some(rl.get_or(|| Inst::new(v, &l)).v)]),
                );
                let want = *model.entry(t).or_insert(v);
                prop_assert_eq!(got, vec![Some(want)], "{:?}", op);
            }
            Op::TryGet { t } => {
                let got = w.run(t, Box::new(|rl| vec![rl.try_get().map(|i| i.v)]));
                prop_assert_eq!(got, vec![model.get(&t).copied()], "{:?}", op);
            }
            Op::GetFor { t, r } => {
                let rank = ranks[r];
                let got = w.run(t, Box::new(move |rl| vec![rl.get_for(rank).map(|i| i.v)]));
                prop_assert_eq!(got, vec![model.get(&r).copied()], "{:?}", op);
            }
            Op::OnBehalf { t, r, v } => {
                let rank = ranks[r];
                let got = w.run(
                    t,
                    Box::new(move |rl| {
                        on_behalf_of(rank, || {
                            assert_eq!(RankId::current(), rank);
                            vec![
                                Some(rl.get_or(|| Inst::new(v, &l)).v),
                                rl.try_get().map(|i| i.v),
                            ]
                        })
                    }),
                );
                let want = *model.entry(r).or_insert(v);
                prop_assert_eq!(got, vec![Some(want), Some(want)], "{:?}", op);
            }
            Op::Nested { t, r1, r2, v } => {
                let (a, b) = (ranks[r1], ranks[r2]);
                let got = w.run(
                    t,
                    Box::new(move |rl| {
                        let me = RankId::current();
                        let out = on_behalf_of(a, || {
                            let inner = on_behalf_of(b, || rl.get_or(|| Inst::new(v, &l)).v);
                            assert_eq!(RankId::current(), a, "outer rank not restored");
                            vec![Some(inner), rl.try_get().map(|i| i.v)]
                        });
                        assert_eq!(RankId::current(), me, "own rank not restored");
                        out
                    }),
                );
                let inner = *model.entry(r2).or_insert(v);
                prop_assert_eq!(got, vec![Some(inner), model.get(&r1).copied()], "{:?}", op);
            }
            Op::PanickingInit { t, r } => {
                let rank = ranks[r];
                let got = w.run(
                    t,
                    Box::new(move |rl| {
                        let res = catch_unwind(AssertUnwindSafe(|| {
                            on_behalf_of(rank, || rl.get_or(|| panic!("init fails")).v)
                        }));
                        vec![res.ok(), rl.get_for(rank).map(|i| i.v)]
                    }),
                );
                let want = model.get(&r).copied();
                prop_assert_eq!(got, vec![want, want], "{:?}", op);
            }
            Op::FailingInit { t, r } => {
                let rank = ranks[r];
                let got = w.run(
                    t,
                    Box::new(move |rl| {
                        let res = on_behalf_of(rank, || rl.get_or_try(|| Err::<Inst, ()>(())));
                        vec![res.ok().map(|i| i.v), rl.get_for(rank).map(|i| i.v)]
                    }),
                );
                let want = model.get(&r).copied();
                prop_assert_eq!(got, vec![want, want], "{:?}", op);
            }
            Op::Iter => {
                let guard = rl.read().unwrap();
                let mut got: Vec<(usize, u32)> = guard
                    .iter()
                    .map(|(rank, i)| (ranks.iter().position(|&x| x == rank).unwrap(), i.v))
                    .collect();
                got.sort();
                let want: Vec<(usize, u32)> = model.iter().map(|(&r, &v)| (r, v)).collect();
                prop_assert_eq!(got, want);
            }
            Op::Clear => {
                rl.write().unwrap().clear();
                model.clear();
            }
            Op::Purge => {
                let n = rl.write().unwrap().purge_exited();
                let before = model.len();
                model.retain(|&r, _| r < WORKERS);
                prop_assert_eq!(n, before - model.len(), "purge_exited count");
            }
        }
        prop_assert_eq!(rl.read().unwrap().len(), model.len(), "len after {:?}", op);
        prop_assert_eq!(
            live.load(Ordering::SeqCst),
            model.len() as isize,
            "live instances after {:?}",
            op
        );
    }
    drop(w.senders);
    for h in w.handles {
        h.join().unwrap();
    }
    drop(rl);
    prop_assert_eq!(
        live.load(Ordering::SeqCst),
        0,
        "instances leaked or dropped twice"
    );
    Ok(())
}

/// Random op sequences on `B` agree with the model; proptest shrinks a failing one and reports it.
fn matches_the_sequential_model<B: Backend>() {
    let config = ProptestConfig {
        cases: 48,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    TestRunner::new(config)
        .run(&prop::collection::vec(op(), 1..48), check::<B>)
        .unwrap();
}
