//! The arms compared by `examples/compare.rs` and `benches/ranklocal.rs`: every implementation
//! set up over the same ranks, with the same cheap hasher for every map (Fibonacci multiply, as the
//! crate's own snapshot table uses), so that comparisons measure synchronization, not hashing.
//!
//! Shared by both through `#[path]`; not part of the crate.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::hint::black_box;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex, RwLock};
use std::time::{Duration, Instant};

use ranklocal::{on_behalf_of, rank_local, ArcSwap, Backend, Baseline, Epoch, RankId, RankLocal};

/// The hasher every map arm uses: one multiply (as `ranklocal`'s snapshot table).
#[derive(Default, Clone, Copy)]
pub struct MulHasher(u64);
impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, k: u64) {
        self.0 = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}
pub type Map = HashMap<u64, Box<u64>, BuildHasherDefault<MulHasher>>;

rank_local! {
    /// The macro form, for the owner fast path.
    pub static MACRO: u64 = 1;
}

/// A `static RankLocal` (the object form in a static), for `get` against `with`.
pub static STATIC: RankLocal<u64> = RankLocal::new();

rank_local! {
    /// The macro form of an owner-only `RefCell` counter (`with_own`).
    pub static MACRO_CELL: RefCell<u64> = const { RefCell::new(0) };
}

/// A `static RankLocal` of an owner-only `RefCell` counter.
pub static STATIC_CELL: RankLocal<RefCell<u64>> = RankLocal::new();

std::thread_local! {
    /// std's form of the same counter (`with_borrow_mut`).
    static STD_CELL: RefCell<u64> = const { RefCell::new(0) };
}

/// One `RefCell` counter bump, as every arm of the "owner RefCell counter" group does it.
#[inline(always)]
fn bump(c: &RefCell<u64>) -> u64 {
    let mut c = c.borrow_mut();
    *c += 1;
    *c
}

std::thread_local! {
    /// The floor: a raw `thread_local!` holding a pointer to this thread's value.
    static RAW: Cell<*const u64> = const { Cell::new(std::ptr::null()) };
}

/// Ranks of exited threads: valid for delegation and `get_for`.
pub fn spare_ranks(n: usize) -> Vec<RankId> {
    (0..n)
        .map(|_| std::thread::spawn(RankId::this_thread).join().unwrap())
        .collect()
}

/// `n` ranks of exited threads, made by a few spawner threads at once (each rank is a thread
/// that starts, takes its id and exits), for the first-touch runs that need tens of thousands.
pub fn spare_ranks_parallel(n: usize) -> Vec<RankId> {
    let spawners = 4;
    let mut out: Vec<RankId> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..spawners)
            .map(|k| {
                let share = n / spawners + usize::from(k < n % spawners);
                s.spawn(move || spare_ranks(share))
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    out.sort();
    out
}

/// Every implementation, populated with one instance per rank of `ranks`.
pub struct World {
    pub ranks: Vec<RankId>,
    pub epoch: RankLocal<u64, Epoch>,
    pub arc_swap: RankLocal<u64, ArcSwap>,
    pub baseline: RankLocal<u64, Baseline>,
    /// Four more `RankLocal<_, Epoch>`s, for one thread using several at once.
    pub several: [RankLocal<u64, Epoch>; 4],
    pub tl_crate: thread_local::ThreadLocal<u64>,
    /// Four more, for one thread using several at once.
    pub tl_several: [thread_local::ThreadLocal<u64>; 4],
    /// Owner-only `RefCell` counters (issue 28): `with_own` only, `get_own` only, and the
    /// `thread_local` crate's.
    pub own_cell: RankLocal<RefCell<u64>, Epoch>,
    pub own_cell_get: RankLocal<RefCell<u64>, Epoch>,
    pub tl_cell: thread_local::ThreadLocal<RefCell<u64>>,
    pub rwlock: RwLock<Map>,
    pub pl_rwlock: parking_lot::RwLock<Map>,
    pub mutex: Mutex<Map>,
    /// Append-only dense array indexed by rank id: wait-free reads, no reclamation.
    pub dense: Box<[AtomicPtr<u64>]>,
}

impl World {
    pub fn new(ranks: Vec<RankId>) -> World {
        let max = ranks.iter().map(|r| r.as_u64()).max().unwrap_or(0) as usize + 64;
        let w = World {
            epoch: RankLocal::new(),
            arc_swap: RankLocal::new(),
            baseline: RankLocal::new(),
            several: Default::default(),
            tl_several: Default::default(),
            tl_crate: thread_local::ThreadLocal::new(),
            own_cell: RankLocal::new(),
            own_cell_get: RankLocal::new(),
            tl_cell: thread_local::ThreadLocal::new(),
            rwlock: RwLock::default(),
            pl_rwlock: parking_lot::RwLock::default(),
            mutex: Mutex::default(),
            dense: (0..max + 1024)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            ranks,
        };
        for &r in &w.ranks {
            w.touch(r);
        }
        w
    }

    /// Creates `rank`'s instance in every arm (as a delegate would).
    pub fn touch(&self, rank: RankId) {
        let k = rank.as_u64();
        on_behalf_of(rank, || {
            self.epoch.get_or(|| k);
            self.arc_swap.get_or(|| k);
            self.baseline.get_or(|| k);
        });
        self.rwlock
            .write()
            .unwrap()
            .entry(k)
            .or_insert_with(|| Box::new(k));
        self.pl_rwlock
            .write()
            .entry(k)
            .or_insert_with(|| Box::new(k));
        self.mutex
            .lock()
            .unwrap()
            .entry(k)
            .or_insert_with(|| Box::new(k));
        // The dense array covers the looked-up ranks (and then some); a later thread's own rank
        // may lie beyond it, and no dense arm looks those up.
        if let Some(slot) = self.dense.get(k as usize) {
            if slot.load(Ordering::Acquire).is_null() {
                slot.store(Box::into_raw(Box::new(k)), Ordering::Release);
            }
        }
    }

    /// Prepares the calling thread's own instances (owner arms).
    pub fn touch_own(&self) {
        self.touch(RankId::this_thread());
        self.tl_crate.get_or(|| 1);
        self.own_cell.with_own(|_| ());
        self.own_cell_get.get_own();
        self.tl_cell.get_or_default();
        MACRO_CELL.with_own(|_| ());
        STATIC_CELL.with_own(|_| ());
        MACRO.get();
        STATIC.get();
        for rl in &self.several {
            rl.get_or(|| 1);
        }
        for tl in &self.tl_several {
            tl.get_or(|| 1);
        }
        RAW.with(|r| {
            if r.get().is_null() {
                r.set(Box::into_raw(Box::new(1u64)));
            }
        });
    }
}

/// An operation run `iters` times by thread `t`.
pub type Op = fn(&World, usize, u64);

/// One implementation of one operation.
pub struct Arm {
    pub group: &'static str,
    pub name: &'static str,
    pub op: Op,
}

fn rr(w: &World, t: usize, i: u64) -> RankId {
    w.ranks[(t * 17 + i as usize) % w.ranks.len()]
}

macro_rules! arms {
    ($($group:literal, $name:literal => |$w:ident, $t:ident, $i:ident| $body:expr;)*) => {
        vec![$(Arm {
            group: $group,
            name: $name,
            op: |$w: &World, $t: usize, iters: u64| {
                let _ = (&$w, $t);
                #[allow(unused_variables)]
                for $i in 0..iters {
                    black_box($body);
                }
            },
        }),*]
    };
}

fn lookup<B: Backend>(rl: &RankLocal<u64, B>, r: RankId) -> u64 {
    *rl.get_for(r).unwrap()
}

/// The lookup arms, by group.
pub fn lookup_arms() -> Vec<Arm> {
    arms! {
        "owner get", "std thread_local! (floor)" => |w, t, i| RAW.with(|r| unsafe_deref(r.get()));
        "owner get", "thread_local crate" => |w, t, i| *w.tl_crate.get().unwrap();
        "owner get", "rank_local! (epoch)" => |w, t, i| *MACRO.get();
        "owner get", "RankLocal<Epoch>" => |w, t, i| *w.epoch.get();
        "owner get", "4 thread_local crates in turn" => |w, t, i| *w.tl_several[i as usize % 4].get().unwrap();
        "owner get", "4 RankLocal<Epoch>s in turn" => |w, t, i| *w.several[i as usize % 4].get();
        "owner get", "RankLocal<ArcSwap>" => |w, t, i| *w.arc_swap.get();
        "owner get", "RankLocal<Baseline>" => |w, t, i| *w.baseline.get();
        "owner get", "RwLock<HashMap> (no cache)" => |w, t, i| **w.rwlock.read().unwrap().get(&RankId::this_thread().as_u64()).unwrap();
        "delegated get", "RankLocal<Epoch>" => |w, t, i| on_behalf_of(rr(w, t, i), || *w.epoch.get());
        "delegated get", "RankLocal<ArcSwap>" => |w, t, i| on_behalf_of(rr(w, t, i), || *w.arc_swap.get());
        "delegated get", "RankLocal<Baseline> (baseline)" => |w, t, i| on_behalf_of(rr(w, t, i), || *w.baseline.get());
        "get_for", "RankLocal<Epoch>" => |w, t, i| lookup(&w.epoch, rr(w, t, i));
        "get_for", "RankLocal<ArcSwap>" => |w, t, i| lookup(&w.arc_swap, rr(w, t, i));
        "get_for", "RankLocal<Baseline> (baseline)" => |w, t, i| lookup(&w.baseline, rr(w, t, i));
        "get_for", "std RwLock<HashMap>" => |w, t, i| **w.rwlock.read().unwrap().get(&rr(w, t, i).as_u64()).unwrap();
        "get_for", "parking_lot RwLock<HashMap>" => |w, t, i| **w.pl_rwlock.read().get(&rr(w, t, i).as_u64()).unwrap();
        "get_for", "Mutex<HashMap>" => |w, t, i| **w.mutex.lock().unwrap().get(&rr(w, t, i).as_u64()).unwrap();
        "get_for", "dense array (append-only)" => |w, t, i| unsafe_deref(w.dense[rr(w, t, i).as_u64() as usize].load(Ordering::Acquire));
        "on_behalf_of enter+exit", "on_behalf_of" => |w, t, i| on_behalf_of(rr(w, t, i), || 1u64);
        "owner with (scoped)", "RankLocal<Epoch>: get" => |w, t, i| *w.epoch.get();
        "owner with (scoped)", "RankLocal<Epoch>: with" => |w, t, i| w.epoch.with(|v| *v);
        "owner with (scoped)", "RankLocal<ArcSwap>: with" => |w, t, i| w.arc_swap.with(|v| *v);
        "owner with (scoped)", "RankLocal<Baseline>: with" => |w, t, i| w.baseline.with(|v| *v);
        "owner with (scoped)", "static RankLocal<Epoch>: get" => |w, t, i| *black_box(&STATIC).get();
        "owner with (scoped)", "static RankLocal<Epoch>: with" => |w, t, i| black_box(&STATIC).with(|v| *v);
        "owner with (scoped)", "rank_local!: get" => |w, t, i| *MACRO.get();
        "owner with (scoped)", "rank_local!: with" => |w, t, i| MACRO.with(|v| *v);
        "owner RefCell counter", "std thread_local! (floor)" => |w, t, i| STD_CELL.with_borrow_mut(|c| { *c += 1; *c });
        "owner RefCell counter", "thread_local crate" => |w, t, i| bump(w.tl_cell.get_or_default());
        "owner RefCell counter", "RankLocal<Epoch>: with_own" => |w, t, i| w.own_cell.with_own(bump);
        "owner RefCell counter", "RankLocal<Epoch>: get_own" => |w, t, i| bump(&w.own_cell_get.get_own());
        "owner RefCell counter", "static RankLocal: with_own" => |w, t, i| black_box(&STATIC_CELL).with_own(bump);
        "owner RefCell counter", "rank_local!: with_own" => |w, t, i| MACRO_CELL.with_own(bump);
        "delegated with_for (scoped)", "RankLocal<Epoch>: get_for" => |w, t, i| lookup(&w.epoch, rr(w, t, i));
        "delegated with_for (scoped)", "RankLocal<Epoch>: with_for" => |w, t, i| w.epoch.with_for(rr(w, t, i), |v| *v).unwrap();
        "delegated with_for (scoped)", "RankLocal<ArcSwap>: with_for" => |w, t, i| w.arc_swap.with_for(rr(w, t, i), |v| *v).unwrap();
        "delegated with_for (scoped)", "RankLocal<Baseline>: with_for" => |w, t, i| w.baseline.with_for(rr(w, t, i), |v| *v).unwrap();
    }
}

/// `get_for` when the thread cache misses (more ranks than it holds): the snapshot map itself.
pub fn miss_arms() -> Vec<Arm> {
    arms! {
        "get_for, cache miss", "RankLocal<Epoch>" => |w, t, i| lookup(&w.epoch, w.ranks[(t * 509 + i as usize * 67) % w.ranks.len()]);
        "get_for, cache miss", "RankLocal<ArcSwap>" => |w, t, i| lookup(&w.arc_swap, w.ranks[(t * 509 + i as usize * 67) % w.ranks.len()]);
        "get_for, cache miss", "RankLocal<Baseline> (baseline)" => |w, t, i| lookup(&w.baseline, w.ranks[(t * 509 + i as usize * 67) % w.ranks.len()]);
        "get_for, cache miss", "dense array (append-only)" => |w, t, i| unsafe_deref(w.dense[w.ranks[(t * 509 + i as usize * 67) % w.ranks.len()].as_u64() as usize].load(Ordering::Acquire));
    }
    .into_iter()
    .chain([
        Arm {
            group: "get_for, cache miss",
            name: "Reader<Epoch> per 1,024",
            op: |w, t, iters| read_batches(&w.epoch, w, t, iters),
        },
        Arm {
            group: "get_for, cache miss",
            name: "Reader<ArcSwap> per 1,024",
            op: |w, t, iters| read_batches(&w.arc_swap, w, t, iters),
        },
        Arm {
            group: "get_for, cache miss",
            name: "Reader<Baseline> per 1,024",
            op: |w, t, iters| read_batches(&w.baseline, w, t, iters),
        },
    ])
    .collect()
}

/// The cache-miss arms' lookups through a `Reader`, one per batch of 1,024 (a collective reading
/// every rank's state), in the same scattered order.
fn read_batches<B: Backend>(rl: &RankLocal<u64, B>, w: &World, t: usize, iters: u64) {
    let mut i = 0;
    while i < iters {
        let reader = rl.pin();
        let end = (i + 1024).min(iters);
        for j in i..end {
            black_box(
                *reader
                    .get_for(w.ranks[(t * 509 + j as usize * 67) % w.ranks.len()])
                    .unwrap(),
            );
        }
        i = end;
    }
}

/// `iter` over every rank, summing.
pub fn iter_arms() -> Vec<Arm> {
    arms! {
        "iter (sum over ranks)", "RankLocal<Epoch>" => |w, t, i| w.epoch.iter().map(|(_, v)| *v).sum::<u64>();
        "iter (sum over ranks)", "RankLocal<ArcSwap>" => |w, t, i| w.arc_swap.iter().map(|(_, v)| *v).sum::<u64>();
        "iter (sum over ranks)", "RankLocal<Baseline> (baseline)" => |w, t, i| w.baseline.iter().map(|(_, v)| *v).sum::<u64>();
    }
}

fn unsafe_deref(p: *const u64) -> u64 {
    // SAFETY: benchmark setup stores only leaked, never-freed boxes in these pointers.
    unsafe { *p }
}

enum Job {
    /// Run the op `iters` times; report the elapsed time.
    Iters(Op, u64),
    /// Run the op in growing batches for about this long; report ns/op.
    For(Op, Duration),
}

/// Worker threads that live for a whole benchmark run, so that repeated measurements reuse the
/// same threads: a freshly spawned thread would add its own rank to every map (and criterion
/// measures each arm dozens of times).
pub struct Team {
    jobs: Vec<mpsc::Sender<Job>>,
    done: mpsc::Receiver<f64>,
}

impl Team {
    /// `threads` workers in scope `s`, each with its own instances touched (owner arms).
    pub fn new<'s, 'w: 's>(
        s: &'s std::thread::Scope<'s, '_>,
        w: &'w World,
        threads: usize,
    ) -> Team {
        let (done_tx, done) = mpsc::channel();
        let barrier = Arc::new(Barrier::new(threads));
        let jobs = (0..threads)
            .map(|t| {
                let (tx, rx) = mpsc::channel::<Job>();
                let (done_tx, barrier) = (done_tx.clone(), barrier.clone());
                s.spawn(move || {
                    w.touch_own();
                    for job in rx {
                        let result = match job {
                            Job::Iters(op, iters) => {
                                op(w, t, 100); // warm the caches
                                barrier.wait();
                                let start = Instant::now();
                                op(w, t, iters);
                                start.elapsed().as_nanos() as f64
                            }
                            Job::For(op, dur) => {
                                op(w, t, 2_000); // warm-up (fills caches, registers with the collector)
                                barrier.wait();
                                let start = Instant::now();
                                let mut ops = 0u64;
                                let mut batch = 1_000u64;
                                while start.elapsed() < dur {
                                    op(w, t, batch);
                                    ops += batch;
                                    batch = (batch * 2).min(1 << 20);
                                }
                                start.elapsed().as_nanos() as f64 / ops as f64
                            }
                        };
                        done_tx.send(result).unwrap();
                    }
                });
                tx
            })
            .collect();
        Team { jobs, done }
    }

    fn run(&self, job: impl Fn() -> Job) -> Vec<f64> {
        for j in &self.jobs {
            j.send(job()).expect("a benchmark worker panicked");
        }
        (0..self.jobs.len())
            .map(|_| self.done.recv().expect("a benchmark worker panicked"))
            .collect()
    }

    /// Runs `op` on every worker at once for about `dur`; returns ns/op per thread (mean over
    /// threads).
    pub fn run_for(&self, op: Op, dur: Duration) -> f64 {
        let r = self.run(|| Job::For(op, dur));
        r.iter().sum::<f64>() / r.len() as f64
    }

    /// Runs `op(w, t, iters)` on every worker at once; returns the longest worker's time (for
    /// criterion's `iter_custom`).
    pub fn run_iters(&self, op: Op, iters: u64) -> Duration {
        let r = self.run(|| Job::Iters(op, iters));
        Duration::from_nanos(r.into_iter().fold(0.0, f64::max) as u64)
    }
}

/// Mean ns per first touch of a new rank into a `RankLocal<_, B>` that already holds `existing`
/// ranks, over `fresh.len()` new ranks (and `reps` repetitions).
pub fn insert_ns<B: Backend>(existing: &[RankId], fresh: &[RankId], reps: usize) -> f64 {
    let mut total = Duration::ZERO;
    for _ in 0..reps {
        let rl = RankLocal::<u64, B>::new();
        for &r in existing {
            on_behalf_of(r, || rl.get_or(|| 1));
        }
        let start = Instant::now();
        for &r in fresh {
            on_behalf_of(r, || black_box(rl.get_or(|| 2)));
        }
        total += start.elapsed();
        drop(rl);
    }
    total.as_nanos() as f64 / (reps * fresh.len()) as f64
}
