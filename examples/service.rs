//! A tokio service with one `Rank` per request (issue 19, item 4): does the live heap stay
//! bounded as requests come and go, or does memory held for the crate's epoch collector grow
//! with the number of requests?
//!
//! ```text
//! cargo run --release --example service                 # 1,000,000 requests per arm
//! cargo run --release --example service -- --quick      # smoke run
//! cargo run --release --example service -- --help
//! ```
//!
//! Each request makes a `Rank` and runs as it (`fut.on_behalf_of(rank.id())`); it keeps its
//! state (a small `Vec`) through a `rank_local!` key's `with`, spawns a subtask
//! (`tokio::spawn(fut.in_current_rank())`) and a blocking job
//! (`spawn_blocking(RankId::current().bind(..))`) that both add to that state, then reads it and
//! drops the `Rank`. The state is only ever reached through `with`, so every request's instance
//! is freed after its rank exits. The same service runs with the state in a `static RankLocal`
//! on the `ArcSwap` and `Baseline` backends, and without ranklocal (state in a local `Arc`) as
//! the control. Each arm runs in a child process of its own; a counting global allocator reports
//! the live heap (and live blocks per requested size) above the start.

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

#[path = "support/mod.rs"]
mod support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ranklocal::{
    on_behalf_of, rank_local, ArcSwap, Baseline, OnBehalfExt, Rank, RankId, RankLocal,
};
use support::{bytes, count, Fields, Outcome};

#[global_allocator]
static ALLOC: support::Counting = support::Counting;

const HELP: &str = "\
service: a tokio service (multi-thread runtime, 2 workers) with one Rank per
request; live heap above the start as requests come and go, per backend and
without ranklocal (control)

USAGE: cargo run --release --example service -- [OPTIONS]

OPTIONS:
  --requests N    requests per arm; the heap is reported at 100,000 and
                  1,000,000 (those <= N), at N, after one reclaim_exited()
                  and after 100,000 more pinning calls      [default: 1000000]
  --quick         --requests 20000 (reported at 2,000 and 20,000)
  --inflight N    requests in flight at a time              [default: 64]
  --arms LIST     of epoch,arcswap,baseline,control         [default: all]
  --cap SECS      time cap per arm (one child process)      [default: 600]
  -h, --help      this text";

rank_local! {
    /// The request's state, for the default (`Epoch`) arm: the `rank_local!` form.
    static STATE: Mutex<Vec<u64>> = Mutex::new(Vec::new());
}
static ARCSWAP: RankLocal<Mutex<Vec<u64>>, ArcSwap> = RankLocal::new();
static BASELINE: RankLocal<Mutex<Vec<u64>>, Baseline> = RankLocal::new();

/// Warm-up requests before the start is taken (runtime, thread caches, blocking pool).
const WARMUP: u64 = 1_000;
/// Pinning calls after the last request (the issue: later pins freed what reclaim did not).
const PINS: usize = 100_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arm {
    Epoch,
    ArcSwap,
    Baseline,
    Control,
}

const ARMS: [Arm; 4] = [Arm::Epoch, Arm::ArcSwap, Arm::Baseline, Arm::Control];

impl Arm {
    fn name(self) -> &'static str {
        match self {
            Arm::Epoch => "epoch",
            Arm::ArcSwap => "arcswap",
            Arm::Baseline => "baseline",
            Arm::Control => "control",
        }
    }
    /// Column header.
    fn title(self) -> &'static str {
        match self {
            Arm::Epoch => "Epoch key",
            Arm::ArcSwap => "ArcSwap",
            Arm::Baseline => "Baseline",
            Arm::Control => "control",
        }
    }
    fn parse(s: &str) -> Arm {
        ARMS.into_iter()
            .find(|a| a.name() == s.trim())
            .unwrap_or_else(|| support::die("service", &format!("unknown arm {s:?}")))
    }
}

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/// The current rank's state, lent to `f` (scoped access only).
fn with_state<R>(arm: Arm, f: impl FnOnce(&Mutex<Vec<u64>>) -> R) -> R {
    match arm {
        Arm::Epoch => STATE.with(f),
        Arm::ArcSwap => ARCSWAP.with(f),
        Arm::Baseline => BASELINE.with(f),
        Arm::Control => unreachable!("the control keeps its state in a local"),
    }
}

fn len(arm: Arm) -> usize {
    match arm {
        Arm::Epoch => STATE.as_rank_local().len(),
        Arm::ArcSwap => ARCSWAP.len(),
        Arm::Baseline => BASELINE.len(),
        Arm::Control => 0,
    }
}

fn reclaim_exited(arm: Arm) -> usize {
    match arm {
        Arm::Epoch => STATE.as_rank_local().reclaim_exited(),
        Arm::ArcSwap => ARCSWAP.reclaim_exited(),
        Arm::Baseline => BASELINE.reclaim_exited(),
        Arm::Control => 0,
    }
}

/// One request: returns the sum of its state, `i + 1 + 2` if every part ran as its rank.
async fn request(arm: Arm, i: u64) -> u64 {
    if arm == Arm::Control {
        return request_without_ranklocal(i).await;
    }
    let rank = Rank::new();
    let sum = async move {
        with_state(arm, |s| s.lock().unwrap().push(i));
        let sub = tokio::spawn(
            async move { with_state(arm, |s| s.lock().unwrap().push(1)) }.in_current_rank(),
        );
        let blocking = tokio::task::spawn_blocking(
            RankId::current().bind(move || with_state(arm, |s| s.lock().unwrap().push(2))),
        );
        sub.await.expect("subtask");
        blocking.await.expect("blocking job");
        with_state(arm, |s| s.lock().unwrap().iter().sum::<u64>())
    }
    .on_behalf_of(rank.id())
    .await;
    drop(rank); // the request's rank exits: its state is reclaimable
    sum
}

/// The control: the same request with its state in a local `Arc`, no ranklocal at all.
async fn request_without_ranklocal(i: u64) -> u64 {
    let state = Arc::new(Mutex::new(Vec::new()));
    state.lock().unwrap().push(i);
    let s = Arc::clone(&state);
    let sub = tokio::spawn(async move { s.lock().unwrap().push(1) });
    let s = Arc::clone(&state);
    let blocking = tokio::task::spawn_blocking(move || s.lock().unwrap().push(2));
    sub.await.expect("subtask");
    blocking.await.expect("blocking job");
    let sum = state.lock().unwrap().iter().sum::<u64>();
    sum
}

/// Requests `range`, `inflight` at a time; returns how many came back with a wrong sum.
async fn serve(arm: Arm, range: std::ops::Range<u64>, inflight: usize) -> u64 {
    let mut wrong = 0;
    let mut pending: VecDeque<(u64, tokio::task::JoinHandle<u64>)> = VecDeque::new();
    let mut check = |i: u64, sum: u64| wrong += u64::from(sum != i + 3);
    for i in range {
        if pending.len() >= inflight {
            let (j, h) = pending.pop_front().unwrap();
            check(j, h.await.expect("request"));
        }
        pending.push_back((i, tokio::spawn(request(arm, i))));
    }
    for (j, h) in pending {
        check(j, h.await.expect("request"));
    }
    wrong
}

// ---------------------------------------------------------------------------------------------
// Child side: one arm per process
// ---------------------------------------------------------------------------------------------

/// The histogram above `start`, as "class:blocks" pairs of the classes that changed.
fn hist_diff(start: &[isize]) -> String {
    let now = support::histogram();
    let pairs: Vec<String> = now
        .iter()
        .zip(start)
        .enumerate()
        .filter(|(_, (n, s))| n != s)
        .map(|(i, (n, s))| format!("{i}:{}", n - s))
        .collect();
    if pairs.is_empty() {
        "-".into()
    } else {
        pairs.join(",")
    }
}

/// Threads of this process now (`/proc/self/status`; 0 if unknown).
fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `PINS` pinning calls from this thread: a delegate's `with_for` of a live rank (each pins
/// the crate's collector, and every 128th pin collects).
fn pins(arm: Arm, other: &Rank) {
    for _ in 0..PINS {
        let r = match arm {
            Arm::Epoch => STATE.with_for(other.id(), |s| s as *const _ as usize),
            Arm::ArcSwap => ARCSWAP.with_for(other.id(), |s| s as *const _ as usize),
            Arm::Baseline => BASELINE.with_for(other.id(), |s| s as *const _ as usize),
            Arm::Control => None,
        };
        std::hint::black_box(r);
    }
}

fn child(arm: Arm, requests: u64, inflight: usize) -> ! {
    support::histogram_on();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio runtime");
    let warm = rt.block_on(serve(arm, 0..WARMUP, inflight));
    // a live rank with an instance, for the pinning calls at the end (made before the start)
    let other = Rank::new();
    if arm != Arm::Control {
        on_behalf_of(other.id(), || {
            with_state(arm, |s| s.lock().unwrap().push(0))
        });
    }
    // the start: after the warm-up, with the warm-up's ranks swept
    reclaim_exited(arm);
    let start = support::live();
    let hist0 = support::histogram();
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut point = |name: String| {
        let i = fields.iter().filter(|(k, _)| k.ends_with("_name")).count();
        fields.push((format!("p{i}_name"), name));
        fields.push((format!("p{i}_live"), (support::live() - start).to_string()));
        fields.push((format!("p{i}_len"), len(arm).to_string()));
        fields.push((format!("p{i}_threads"), threads().to_string()));
        fields.push((format!("p{i}_hist"), hist_diff(&hist0)));
        i + 1
    };
    let mut wrong = warm;
    let t0 = Instant::now();
    let mut done = 0;
    for p in checkpoints(requests) {
        wrong += rt.block_on(serve(arm, WARMUP + done..WARMUP + p, inflight));
        done = p;
        point(format!("{p}"));
        support::progress(&format!("{} requests", count(p)));
    }
    let secs = t0.elapsed().as_secs_f64();
    // after the last request (every Rank dropped): one reclaim_exited()
    reclaim_exited(arm);
    point("reclaim".into());
    // then pinning calls from the main thread
    pins(arm, &other);
    point("pins".into());
    // then the runtime shut down (its worker and blocking threads exit), and pins again
    drop(rt);
    pins(arm, &other);
    let n = point("shutdown".into());
    fields.push(("points".into(), n.to_string()));
    fields.push(("secs".into(), secs.to_string()));
    fields.push(("wrong".into(), wrong.to_string()));
    support::report(&fields)
}

/// Where the heap is reported: 100,000 and 1,000,000 if at most `n`, and `n`; for `n` under
/// 100,000, `n / 10` and `n`.
fn checkpoints(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = if n < 100_000 {
        vec![(n / 10).max(1)]
    } else {
        [100_000, 1_000_000]
            .into_iter()
            .filter(|&p| p <= n)
            .collect()
    };
    if v.last() != Some(&n) {
        v.push(n);
    }
    v.dedup();
    v
}

// ---------------------------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------------------------

struct Opts {
    requests: u64,
    inflight: usize,
    arms: Vec<Arm>,
    cap: Duration,
}

fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        requests: 1_000_000,
        inflight: 64,
        arms: ARMS.to_vec(),
        cap: Duration::from_secs(600),
    };
    let mut it = args.iter();
    let num = |v: Option<&String>, what: &str| -> u64 {
        v.and_then(|s| s.replace('_', "").parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| support::die("service", &format!("{what} needs a positive number")))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            "--requests" => o.requests = num(it.next(), "--requests"),
            "--quick" => o.requests = 20_000,
            "--inflight" => o.inflight = num(it.next(), "--inflight") as usize,
            "--cap" => o.cap = Duration::from_secs(num(it.next(), "--cap")),
            "--arms" => {
                o.arms = it
                    .next()
                    .map(|s| s.split(',').map(Arm::parse).collect())
                    .unwrap_or_default();
                if o.arms.is_empty() {
                    support::die("service", "--arms takes e.g. epoch,control");
                }
            }
            "--bench" => {}
            other => support::die("service", &format!("unknown option {other:?} (try --help)")),
        }
    }
    o
}

/// One arm's points: (name, live bytes above the start, len, histogram diff by class).
struct Point {
    name: String,
    live: f64,
    len: u64,
    threads: u64,
    hist: Vec<(usize, i64)>,
}

fn points(f: &Fields) -> Vec<Point> {
    let n = f.f64("points") as usize;
    (0..n)
        .map(|i| Point {
            name: f.get(&format!("p{i}_name")).unwrap_or("?").to_string(),
            live: f.f64(&format!("p{i}_live")),
            len: f.f64(&format!("p{i}_len")) as u64,
            threads: f.f64(&format!("p{i}_threads")) as u64,
            hist: f
                .get(&format!("p{i}_hist"))
                .unwrap_or("-")
                .split(',')
                .filter_map(|p| p.split_once(':'))
                .filter_map(|(c, n)| Some((c.parse().ok()?, n.parse().ok()?)))
                .collect(),
        })
        .collect()
}

fn point_title(name: &str) -> String {
    match name {
        "reclaim" => "+ reclaim_exited()".into(),
        "pins" => format!("+ {} pins", count(PINS as u64)),
        "shutdown" => "+ shutdown, pins".into(),
        n => format!("{} requests", count(n.parse().unwrap_or(0))),
    }
}

fn blocks(p: &Point, class: usize) -> i64 {
    p.hist
        .iter()
        .find(|&&(c, _)| c == class)
        .map_or(0, |&(_, n)| n)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let arm = Arm::parse(args.get(1).map_or("", String::as_str));
        let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
        let inflight = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
        child(arm, n, inflight);
    }
    let o = parse(&args);
    println!("ranklocal service — {}", support::machine());
    println!(
        "tokio multi-thread runtime, 2 workers; one Rank per request, {} in flight;",
        o.inflight
    );
    println!("each request: its state (a Vec) through with, a subtask (tokio::spawn of");
    println!("fut.in_current_rank()) and a spawn_blocking(RankId::current().bind(..))");
    println!("that add to it; then the Rank is dropped. control: the state in a local Arc,");
    println!("no ranklocal. One child process per arm; heap = live bytes above the start");
    println!(
        "(taken after {} warm-up requests and one reclaim_exited()).\n",
        count(WARMUP)
    );

    let mut runs: Vec<Run> = Vec::new();
    for &arm in &o.arms {
        eprint!("  {} {} requests... ", arm.name(), count(o.requests));
        let args = vec![
            "--child".to_string(),
            arm.name().to_string(),
            o.requests.to_string(),
            o.inflight.to_string(),
        ];
        match support::run_child(&args, o.cap) {
            Outcome::Done { fields, secs } => {
                eprintln!("{}", support::secs(secs));
                let pts = points(&fields);
                runs.push((
                    arm,
                    Some((pts, fields.f64("secs"), fields.f64("wrong") as u64)),
                    String::new(),
                ));
            }
            Outcome::Capped { progress } => {
                eprintln!("over the cap");
                let why = format!(
                    "over the {} s cap{}",
                    o.cap.as_secs(),
                    progress.map_or(String::new(), |p| format!(" after {p}"))
                );
                runs.push((arm, None, why));
            }
            Outcome::Failed(e) => {
                eprintln!("failed");
                runs.push((arm, None, e));
            }
        }
    }

    print_tables(&runs, &o);
}

type Run = (Arm, Option<(Vec<Point>, f64, u64)>, String);

/// One row: `label`, then `cell` of each arm's run (or "-").
fn row(label: &str, runs: &[Run], cell: impl Fn(&[Point], f64, u64) -> String) {
    print!("{label:<22}");
    for (_, r, _) in runs {
        let c = r
            .as_ref()
            .map_or("-".into(), |(p, secs, wrong)| cell(p, *secs, *wrong));
        print!(" {c:>12}");
    }
    println!();
}

fn print_tables(runs: &[Run], o: &Opts) {
    let names: Vec<String> = runs
        .iter()
        .find_map(|(_, r, _)| r.as_ref())
        .map(|(p, _, _)| p.iter().map(|p| p.name.clone()).collect())
        .unwrap_or_default();
    print!("{:<22}", "live heap");
    for (arm, _, _) in runs {
        print!(" {:>12}", arm.title());
    }
    println!();
    for (i, name) in names.iter().enumerate() {
        row(&point_title(name), runs, |p, _, _| {
            p.get(i).map_or("-".into(), |p| bytes(p.live))
        });
    }
    let last_req = names.iter().rposition(|n| n.parse::<u64>().is_ok());
    if let Some(li) = last_req {
        row("  per request", runs, |p, _, _| {
            p.get(li).map_or("-".into(), |p| {
                let n: f64 = p.name.parse().unwrap_or(f64::NAN);
                format!("{:.1} B", p.live / n)
            })
        });
        row("  per thread", runs, |p, _, _| {
            p.get(li)
                .map_or("-".into(), |p| bytes(p.live / p.threads.max(1) as f64))
        });
    }
    for (i, name) in names.iter().enumerate() {
        if let Ok(n) = name.parse::<u64>() {
            row(
                &format!("threads, {} req.", short(&n.to_string())),
                runs,
                |p, _, _| p.get(i).map_or("-".into(), |p| count(p.threads)),
            );
        }
    }
    row("len(), last request", runs, |p, _, _| {
        last_req
            .and_then(|li| p.get(li))
            .map_or("-".into(), |p| count(p.len))
    });
    row("time per request", runs, |_, secs, _| {
        support::secs(secs / o.requests as f64)
    });
    row("wrong sums", runs, |_, _, w| count(w));
    println!("  live heap         bytes allocated and not freed, above the start");
    println!("  + reclaim_exited  after the last request, one reclaim_exited() call");
    println!(
        "  + {} pins    then {} with_for calls of a live rank on the",
        count(PINS as u64),
        count(PINS as u64)
    );
    println!("                    main thread (each pins the crate's collector)");
    println!("  + shutdown, pins  then the runtime dropped (its threads exit) and");
    println!(
        "                    {} more pins (negative: below the start)",
        count(PINS as u64)
    );
    println!("  per request       live heap at the last request count / that count");
    println!("  per thread        the same / threads of the process then");
    println!("  threads           threads of the process (tokio's blocking pool grows)");
    println!("  len()             instances in the map at the last request count");
    println!("  wrong sums        requests whose parts did not all reach one state");
    for (arm, r, why) in runs {
        if r.is_none() {
            println!("  note: {}: {why}", arm.title());
        }
    }

    // where the growth is: live blocks by requested size
    let control = runs
        .iter()
        .find(|(a, _, _)| *a == Arm::Control)
        .and_then(|(_, r, _)| r.as_ref());
    let Some(li) = last_req else { return };
    for (arm, r, _) in runs {
        let Some((pts, _, _)) = r else { continue };
        if *arm == Arm::Control {
            continue;
        }
        let at = &pts[li];
        let mut top: Vec<(usize, i64)> = at.hist.clone();
        top.retain(|&(_, n)| n > 0);
        top.sort_by_key(|&(c, n)| -(n * support::class_max(c) as i64));
        top.truncate(6);
        if top.is_empty() {
            continue;
        }
        println!(
            "\n{}: live blocks above the start by requested size, top 6 by bytes",
            arm.title()
        );
        println!(
            "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "size",
            format!("@{}", short(&at.name)),
            "+reclaim",
            "+pins",
            "+shutdown",
            "control"
        );
        for (c, n) in top {
            let after = |name: &str| {
                pts.iter()
                    .find(|p| p.name == name)
                    .map_or("-".into(), |p| count_signed(blocks(p, c)))
            };
            let ctl = control
                .and_then(|(cp, _, _)| cp.get(li))
                .map_or("-".into(), |p| count_signed(blocks(p, c)));
            println!(
                "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10}",
                support::class_label(c),
                count_signed(n),
                after("reclaim"),
                after("pins"),
                after("shutdown"),
                ctl
            );
        }
    }
    println!("\n  size: requested sizes (8-byte classes up to 4 KiB); live blocks above");
    println!("  the start at the last request count, then after reclaim_exited(), the");
    println!("  pins, the shutdown and pins; control: the control arm's blocks of that");
    println!("  size at the same request count.");
}

fn short(name: &str) -> String {
    match name.parse::<u64>() {
        Ok(n) if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        Ok(n) if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        Ok(n) => n.to_string(),
        Err(_) => name.to_string(),
    }
}

fn count_signed(n: i64) -> String {
    if n < 0 {
        format!("-{}", count(n.unsigned_abs()))
    } else {
        count(n as u64)
    }
}
