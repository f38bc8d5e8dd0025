//! A tiny autograd engine whose backward work finds its rank with no user code, as PyTorch's does,
//! plus request-scoped ranks on tokio.
//!
//! **Engine (std threads).** Every node records the rank that created it in the forward pass
//! (PyTorch's `Node::thread_id`). The engine's worker pool runs each node through
//! `node.thread_id.bind(..)`, so the node's backward sees its forward rank's `RankLocal` state,
//! whichever worker runs it. The workers have touched their own state first (the case that makes
//! C++ `RankLocal` return the wrong instance). Forward ranks: two OS threads and one logical
//! [`Rank`] driven from the main thread. A control job enqueued *without* `bind` shows what the
//! worker would otherwise see: its own rank.
//!
//! **Requests (tokio).** Each request gets its own logical `Rank`, moved into its task and dropped
//! when the task ends. Inside, `tokio::spawn(fut.in_current_rank())` and
//! `spawn_blocking(RankId::current().bind(f))` carry the request's rank; a plain `tokio::spawn`
//! does not. After the requests, their ranks have exited: their state is still readable with
//! `get_for` until `purge_exited` drops it.
//!
//! The program checks everything it prints and panics on a wrong rank.
//!
//! ```text
//! cargo run --release --example autograd
//! ```

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use ranklocal::{on_behalf_of, OnBehalfExt, Rank, RankId, RankLocal};

// ---------------------------------------------------------------- the engine (std threads) ----

/// Per-rank autograd state, shared by a rank's forward and the backward run on its behalf.
#[derive(Default)]
struct Grads {
    /// Sum of the gradients the rank's nodes produced.
    sum: AtomicU64,
    /// `(node, worker thread that ran it)`.
    ran: Mutex<Vec<(String, RankId)>>,
}

static GRADS: RankLocal<Grads> = RankLocal::new();

/// An autograd node: a backward function, the rank that created it, and its inputs' nodes.
struct Node {
    name: String,
    /// The rank current when the node was created (PyTorch: `Node::thread_id`).
    thread_id: RankId,
    grad: u64,
    next: Vec<Arc<Node>>,
}

impl Node {
    /// Records the creating rank, as PyTorch's forward does.
    fn new(name: String, grad: u64, next: Vec<Arc<Node>>) -> Arc<Node> {
        Arc::new(Node {
            name,
            thread_id: RankId::current(),
            grad,
            next,
        })
    }

    /// The backward function: accumulates into the *current* rank's state.
    fn apply(&self) {
        let rank = RankId::current();
        assert_eq!(
            rank, self.thread_id,
            "node {} ran as {rank}, but was created by {}",
            self.name, self.thread_id
        );
        thread::sleep(Duration::from_millis(2)); // the "kernel": lets both workers take nodes
        let g = GRADS.get();
        g.sum.fetch_add(self.grad, Ordering::Relaxed);
        g.ran
            .lock()
            .unwrap()
            .push((self.name.clone(), RankId::this_thread()));
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A worker pool fed by one queue (PyTorch's ready queue).
struct Engine {
    queue: Mutex<Option<mpsc::Sender<Job>>>,
    workers: Mutex<Vec<thread::JoinHandle<()>>>,
    worker_ranks: Vec<RankId>,
}

/// Counts the nodes of one backward call still to run.
struct Pending {
    left: Mutex<usize>,
    done: Condvar,
}

impl Engine {
    fn new(workers: usize) -> Arc<Engine> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let (rank_tx, rank_rx) = mpsc::channel();
        let handles = (0..workers)
            .map(|_| {
                let (rx, rank_tx) = (rx.clone(), rank_tx.clone());
                thread::spawn(move || {
                    // the worker uses its own state first: C++ RankLocal would now hand it
                    // this instance even while it runs another rank's node
                    GRADS.get().sum.fetch_add(0, Ordering::Relaxed);
                    rank_tx.send(RankId::this_thread()).unwrap();
                    loop {
                        let job = rx.lock().unwrap().recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => break,
                        }
                    }
                })
            })
            .collect();
        let worker_ranks = rank_rx.iter().take(workers).collect();
        Arc::new(Engine {
            queue: Mutex::new(Some(tx)),
            workers: Mutex::new(handles),
            worker_ranks,
        })
    }

    fn submit(&self, job: Job) {
        let q = self.queue.lock().unwrap();
        q.as_ref().expect("engine shut down").send(job).unwrap();
    }

    /// Runs the graph below `root` on the pool, each node on behalf of the rank that created
    /// it; returns when every node has run.
    fn backward(self: &Arc<Self>, root: Arc<Node>) {
        fn count(n: &Node) -> usize {
            1 + n.next.iter().map(|c| count(c)).sum::<usize>()
        }
        let pending = Arc::new(Pending {
            left: Mutex::new(count(&root)),
            done: Condvar::new(),
        });
        self.enqueue(root, pending.clone());
        let left = pending.left.lock().unwrap();
        drop(pending.done.wait_while(left, |n| *n > 0).unwrap());
    }

    fn enqueue(self: &Arc<Self>, node: Arc<Node>, pending: Arc<Pending>) {
        let engine = self.clone();
        // the whole point: the job runs on behalf of the node's recorded rank
        self.submit(Box::new(node.thread_id.bind(move || {
            node.apply();
            for next in &node.next {
                engine.enqueue(next.clone(), pending.clone());
            }
            let mut left = pending.left.lock().unwrap();
            *left -= 1;
            if *left == 0 {
                pending.done.notify_all();
            }
        })));
    }

    /// Runs `f` on the pool *without* `bind`, returning what it returns.
    fn run_unbound<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        self.submit(Box::new(move || tx.send(f()).unwrap()));
        rx.recv().unwrap()
    }

    fn shutdown(&self) {
        self.queue.lock().unwrap().take();
        for h in self.workers.lock().unwrap().drain(..) {
            h.join().unwrap();
        }
    }
}

/// A forward pass: a chain `loss <- add <- mul_k ...` of nodes made by the current rank; then
/// its backward on the engine. Returns the expected gradient sum.
fn forward_and_backward(engine: &Arc<Engine>, tag: &str, scale: u64) -> u64 {
    let leaves: Vec<Arc<Node>> = (1..=3)
        .map(|k| Node::new(format!("{tag}/mul{k}"), scale * k, vec![]))
        .collect();
    let add = Node::new(format!("{tag}/add"), scale * 10, leaves);
    let loss = Node::new(format!("{tag}/loss"), scale * 100, vec![add]);
    engine.backward(loss);
    scale * (1 + 2 + 3 + 10 + 100)
}

/// Checks and prints the current rank's state after its backward.
fn report(tag: &str, expected: u64, workers: &[RankId]) {
    let me = RankId::current();
    let g = GRADS
        .try_get()
        .expect("backward never reached this rank's state");
    let sum = g.sum.load(Ordering::Relaxed);
    let ran = g.ran.lock().unwrap();
    let on: BTreeSet<String> = ran.iter().map(|(_, w)| w.to_string()).collect();
    println!(
        "  {tag:<10} {me:<8} {} nodes ran for it on worker(s) {}; grad sum {sum}",
        ran.len(),
        on.into_iter().collect::<Vec<_>>().join(", ")
    );
    assert_eq!(sum, expected, "{tag}: wrong gradient sum");
    assert_eq!(ran.len(), 5, "{tag}: not every node ran for this rank");
    assert!(ran.iter().all(|(_, w)| workers.contains(w)));
}

fn engine_part() {
    println!("engine: 2 workers; forward ranks: 2 OS threads + 1 logical Rank");
    let engine = Engine::new(2);
    let workers = engine.worker_ranks.clone();
    println!(
        "  workers:   {} (each used its own GRADS first)",
        workers
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );

    let threads: Vec<_> = (1..=2)
        .map(|i| {
            let (engine, workers) = (engine.clone(), workers.clone());
            thread::spawn(move || {
                let tag = format!("thread{i}");
                let expected = forward_and_backward(&engine, &tag, i);
                report(&tag, expected, &workers);
                RankId::this_thread()
            })
        })
        .collect();
    let thread_ranks: Vec<RankId> = threads.into_iter().map(|h| h.join().unwrap()).collect();

    let logical = Rank::new();
    on_behalf_of(logical.id(), || {
        let expected = forward_and_backward(&engine, "logical", 7);
        report("logical", expected, &workers);
    });

    // the control: the same kind of job without `bind` runs as the worker's own rank
    let (unbound, worker) = on_behalf_of(logical.id(), || {
        engine.run_unbound(|| (RankId::current(), RankId::this_thread()))
    });
    println!(
        "  control:   a job enqueued by {} without bind ran as {unbound} (worker {worker}'s own rank)",
        logical.id()
    );
    assert_eq!(unbound, worker, "an unbound job ran as another rank");
    assert_ne!(unbound, logical.id());

    engine.shutdown();
    for w in &workers {
        let own = GRADS.get_for(*w).expect("worker state");
        assert!(
            own.ran.lock().unwrap().is_empty(),
            "a node ran into worker {w}'s own state"
        );
    }
    for r in thread_ranks.iter().chain([&logical.id()]) {
        assert_eq!(GRADS.get_for(*r).unwrap().ran.lock().unwrap().len(), 5);
    }
    println!("  ok: every node ran as its creating rank; no node touched a worker's own state");
}

// ---------------------------------------------------------------- requests (tokio) ----------

/// Per-request state.
#[derive(Default)]
struct RequestLog {
    steps: Mutex<Vec<&'static str>>,
}

impl RequestLog {
    fn push(&self, step: &'static str) {
        self.steps.lock().unwrap().push(step);
    }
}

async fn handle(log: Arc<RankLocal<RequestLog>>, rank: RankId) -> RankId {
    assert_eq!(RankId::current(), rank);
    log.get().push("parse");
    // carried: a sub-task wrapped in the current rank
    let l = log.clone();
    tokio::spawn(
        async move {
            tokio::task::yield_now().await;
            l.get().push("fetch (spawned, in_current_rank)");
        }
        .in_current_rank(),
    )
    .await
    .unwrap();
    // carried: blocking work bound to the current rank
    let l = log.clone();
    tokio::task::spawn_blocking(RankId::current().bind(move || {
        l.get().push("render (spawn_blocking, bind)");
    }))
    .await
    .unwrap();
    // not carried: a plain spawn runs as the worker thread's own rank
    let plain = tokio::spawn(async { RankId::current() }).await.unwrap();
    assert_ne!(plain, rank, "a plain tokio::spawn carried the rank");
    assert_eq!(RankId::current(), rank, "rank lost across .await");
    log.get().push("reply");
    plain
}

fn async_part() {
    println!("requests: tokio multi-thread runtime (2 workers), one logical Rank per request");
    let log: Arc<RankLocal<RequestLog>> = Arc::new(RankLocal::new());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let results: Vec<(RankId, RankId)> = rt.block_on(async {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let rank = Rank::new(); // moved into the task: the rank exits when it ends
                let id = rank.id();
                let log = log.clone();
                tokio::spawn(
                    async move {
                        let plain = handle(log, id).await;
                        drop(rank);
                        (id, plain)
                    }
                    .on_behalf_of(id),
                )
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    drop(rt);
    let Ok(mut log) = Arc::try_unwrap(log) else {
        panic!("a task still holds the request log");
    };
    for (id, plain) in &results {
        let steps = log
            .get_for(*id)
            .expect("request state lost")
            .steps
            .lock()
            .unwrap()
            .clone();
        println!(
            "  request {id}: {}  (plain spawn ran as {plain})",
            steps.join(" -> ")
        );
        assert_eq!(
            steps.len(),
            4,
            "{id}: a step ran as another rank: {steps:?}"
        );
    }
    let ids: BTreeSet<RankId> = results.iter().map(|r| r.0).collect();
    assert_eq!(ids.len(), 4, "two requests shared a rank");
    let strays = log.len() - ids.len();
    assert_eq!(strays, 0, "a worker thread made request state of its own");
    let purged = log.purge_exited();
    println!("  the requests' Ranks were dropped: purge_exited dropped {purged} request states");
    assert_eq!(purged, 4);
    assert!(log.is_empty());
    println!("  ok: every step ran as its request's rank; exited requests purged");
}

fn main() {
    engine_part();
    println!();
    async_part();
}
