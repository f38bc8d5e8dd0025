//! PyTorch functional collectives' `WorkRegistry`, with ranks as threads and ONE shared backward
//! worker.
//!
//! In PyTorch (`torch/csrc/distributed/c10d/Functional.cpp`), an async collective issued in the
//! forward pass registers its `Work` in a per-rank registry keyed by the output tensor; whoever
//! later needs the tensor waits the work found there. In the backward pass that "whoever" is an
//! autograd thread, which is not the rank's thread: it runs *on behalf of* the rank, and must reach
//! the rank's registry, not its own. That is what `RankLocal` + `on_behalf_of` give.
//!
//! Here each rank is a thread. Forward: every rank all-reduces a few activations and registers the
//! works. Backward: every rank hands its tensors to one shared backward worker, which, on behalf of
//! that rank, waits the rank's forward works and registers the gradient all-reduces in the rank's
//! registry. The rank then waits its gradient works itself. The worker has also used a registry
//! of its own first, which is what makes C++ `RankLocal` hand it the wrong one. At the end the
//! program checks that each job reached its rank's registry (never the worker's), that every
//! registry is empty, and that the sums are right; it panics otherwise.
//!
//! ```text
//! cargo run --release --example work_registry [-- --ranks 4 --layers 3]
//! ```

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use ranklocal::{on_behalf_of, RankId, RankLocal};

/// An in-flight all-reduce over all ranks: every rank contributes, then `wait` returns the sum.
struct AllReduce {
    state: Mutex<(u64, usize)>,
    done: Condvar,
    ranks: usize,
}

impl AllReduce {
    fn new(ranks: usize) -> Arc<AllReduce> {
        Arc::new(AllReduce {
            state: Mutex::new((0, 0)),
            done: Condvar::new(),
            ranks,
        })
    }

    /// Adds this rank's value; returns at once with the rank's handle on the result.
    fn contribute(self: &Arc<Self>, value: u64) -> Work {
        let mut s = self.state.lock().unwrap();
        s.0 += value;
        s.1 += 1;
        if s.1 == self.ranks {
            self.done.notify_all();
        }
        Work(self.clone())
    }
}

/// `c10d::Work`: a handle on an async collective.
struct Work(Arc<AllReduce>);

impl Work {
    fn wait(&self) -> u64 {
        let r = &self.0;
        let s = r
            .done
            .wait_while(r.state.lock().unwrap(), |s| s.1 < r.ranks)
            .unwrap();
        s.0
    }
}

/// The per-rank registry: tensor id -> the work producing it.
#[derive(Default)]
struct WorkRegistry {
    works: Mutex<HashMap<String, Work>>,
}

impl WorkRegistry {
    fn register(&self, tensor: String, work: Work) {
        let old = self.works.lock().unwrap().insert(tensor.clone(), work);
        assert!(old.is_none(), "{tensor} registered twice");
    }

    /// `wait_tensor`: removes the tensor's work from the registry and waits it.
    fn wait_tensor(&self, tensor: &str) -> u64 {
        let work = self.works.lock().unwrap().remove(tensor);
        work.unwrap_or_else(|| panic!("{tensor}: no work registered for this rank"))
            .wait()
    }

    fn pending(&self) -> usize {
        self.works.lock().unwrap().len()
    }
}

/// One registry per rank, as `RankLocal<WorkRegistry>` in PyTorch.
static REGISTRY: RankLocal<WorkRegistry> = RankLocal::new();

/// A rank's request to the shared backward worker.
struct BackwardJob {
    rank: RankId,
    index: usize,
    tensors: Vec<String>,
    done: mpsc::Sender<()>,
}

/// What the worker saw for one job, checked and printed by `main`.
struct Served {
    rank: RankId,
    acting_as: RankId,
    registry: usize,
    forward_sums: Vec<u64>,
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

fn main() {
    let ranks = arg("--ranks", 4).max(1);
    let layers = arg("--layers", 3).max(1);
    println!(
        "WorkRegistry: {ranks} ranks (threads), {layers} layers, one shared backward worker\n"
    );

    // One all-reduce per layer in forward and one per layer in backward, shared by all ranks.
    let forward: Vec<Arc<AllReduce>> = (0..layers).map(|_| AllReduce::new(ranks)).collect();
    let grads: Vec<Arc<AllReduce>> = (0..layers).map(|_| AllReduce::new(ranks)).collect();

    // The one backward worker (PyTorch: an autograd device thread), serving every rank.
    let (jobs, inbox) = mpsc::channel::<BackwardJob>();
    let worker = {
        let grads = grads.clone();
        thread::Builder::new()
            .name("backward".into())
            .spawn(move || {
                let me = RankId::this_thread();
                // The worker first uses a registry of its own (it ran a collective for itself), so
                // its thread cache holds its own instance: C++ `RankLocal` would then hand that
                // instance to every rank it serves (its cache is checked before the autograd
                // context). Here the cache is keyed by the rank acting, so it cannot.
                let own = REGISTRY.get();
                own.register("worker/own".into(), AllReduce::new(1).contribute(0));
                own.wait_tensor("worker/own");
                let own = own as *const WorkRegistry as usize;
                let mut served = Vec::new();
                for job in inbox {
                    let s = on_behalf_of(job.rank, || {
                        let registry = REGISTRY.get(); // the rank's, not the worker's
                        let forward_sums = job
                            .tensors
                            .iter()
                            .map(|t| registry.wait_tensor(t))
                            .collect();
                        for (layer, g) in grads.iter().enumerate() {
                            // this rank's gradient for the layer: 100 * (rank index + 1)
                            let value = 100 * (job.index as u64 + 1);
                            let tensor = format!("r{}/grad{layer}", job.index);
                            registry.register(tensor, g.contribute(value));
                        }
                        Served {
                            rank: job.rank,
                            acting_as: RankId::current(),
                            registry: registry as *const WorkRegistry as usize,
                            forward_sums,
                        }
                    });
                    job.done.send(()).unwrap();
                    served.push(s);
                }
                (me, own, served)
            })
            .unwrap()
    };

    let rank_threads: Vec<_> = (0..ranks)
        .map(|i| {
            let (forward, jobs) = (forward.clone(), jobs.clone());
            thread::Builder::new()
                .name(format!("rank{i}"))
                .spawn(move || {
                    let me = RankId::this_thread();
                    let registry = REGISTRY.get();
                    // forward: issue the all-reduces, register their works, do not wait
                    let tensors: Vec<String> =
                        (0..layers).map(|l| format!("r{i}/act{l}")).collect();
                    for (t, ar) in tensors.iter().zip(&forward) {
                        registry.register(t.clone(), ar.contribute(i as u64 + 1));
                    }
                    println!(
                        "[rank{i} = {me}] forward: registered {} works in registry {:p}",
                        registry.pending(),
                        registry
                    );
                    // backward: hand the tensors to the shared worker and wait for it
                    let (done, finished) = mpsc::channel();
                    jobs.send(BackwardJob {
                        rank: me,
                        index: i,
                        tensors,
                        done,
                    })
                    .unwrap();
                    finished.recv().unwrap();
                    // the worker registered grad works in *this* rank's registry: wait them here
                    let pending = registry.pending();
                    let sums: Vec<u64> = (0..layers)
                        .map(|l| registry.wait_tensor(&format!("r{i}/grad{l}")))
                        .collect();
                    println!(
                        "[rank{i} = {me}] backward done by the worker; waited {pending} grad works \
                         it registered for me: sums {sums:?}"
                    );
                    (me, registry as *const WorkRegistry as usize, sums)
                })
                .unwrap()
        })
        .collect();
    drop(jobs);

    let results: Vec<_> = rank_threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let (worker_id, worker_own, served) = worker.join().unwrap();

    println!(
        "\nthe backward worker ({worker_id}, own registry {worker_own:#x}) served {} jobs:",
        served.len()
    );
    let n = ranks as u64;
    for s in &served {
        let (_, addr, _) = results.iter().find(|r| r.0 == s.rank).unwrap();
        println!(
            "  for {}: acted as {}, registry {:#x} ({}), waited forward sums {:?}",
            s.rank,
            s.acting_as,
            s.registry,
            if s.registry == *addr {
                "the rank's own"
            } else {
                "WRONG registry"
            },
            s.forward_sums
        );
        assert_eq!(s.acting_as, s.rank);
        assert_eq!(s.registry, *addr, "the worker reached another registry");
        assert_eq!(s.forward_sums, vec![n * (n + 1) / 2; layers]);
    }
    for (_, _, sums) in &results {
        assert_eq!(sums, &vec![100 * n * (n + 1) / 2; layers]);
    }
    for (rank, registry) in REGISTRY.iter() {
        assert_eq!(
            registry.pending(),
            0,
            "{rank}: a work was left in its registry"
        );
    }
    assert_eq!(served.len(), ranks);
    assert_eq!(
        REGISTRY.len(),
        ranks + 1,
        "one registry per rank, one for the worker"
    );
    let worker_registry = REGISTRY
        .get_for(worker_id)
        .expect("the worker's own registry");
    assert_eq!(worker_registry as *const WorkRegistry as usize, worker_own);
    assert!(served.iter().all(|s| s.registry != worker_own));
    println!(
        "\nok: {} registries (one per rank + the worker's own, which it never handed to a rank), \
         all works waited, sums right",
        REGISTRY.len()
    );
}
