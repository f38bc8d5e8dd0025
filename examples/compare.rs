//! The main job: a short side-by-side run of `ranklocal`'s backends and the reference points,
//! printed as a table of ns/op with ratios, for 1 and 2 threads.
//!
//! ```text
//! cargo run --release --example compare                 # ~20 s
//! cargo run --release --example compare -- --help
//! cargo run --release --example compare -- --json papers/results.json --svg papers/lookups.svg --svg-ranks papers/first_touch.svg
//! ```
//!
//! All arms run in one process, one after another, over the same ranks and with the same hasher;
//! on a noisy machine compare the ratios, not the absolute times.

#[path = "../benches/arms.rs"]
mod arms;

use std::fmt::Write as _;
use std::time::Duration;

use arms::{Arm, World};
use ranklocal::{ArcSwap, Baseline, Epoch};

const HELP: &str = "\
compare: ranklocal's backends side by side with std thread_local!, the thread_local crate,
RwLock/Mutex<HashMap> and a dense array (ns/op per thread; lower is better)

USAGE: cargo run --release --example compare -- [OPTIONS]

OPTIONS:
  --ranks N        ranks looked up round-robin by the delegated arms   [default: 64]
  --miss-ranks N   ranks for the cache-miss arms (> 64 defeats the cache) [default: 1024]
  --threads LIST   comma-separated thread counts                      [default: 1,2]
  --ms N           measuring time per arm and thread count, in ms, split
                   over 5 interleaved repeats (median and min shown)  [default: 300]
  --quick          --ms 60, first touch up to 4096 ranks (a smoke run)
  --json PATH      also write the results as JSON
  --svg PATH       also write a bar chart (log scale) of the lookup arms as SVG
  --svg-ranks PATH also write a plot of first-touch cost vs existing ranks as SVG
  -h, --help       this text

The baseline is the `Baseline` backend: PyTorch c10d's design ported to Rust (owner cached in a
thread-local, every other lookup under the read lock of an RwLock<HashMap>).";

struct Opts {
    ranks: usize,
    miss_ranks: usize,
    threads: Vec<usize>,
    dur: Duration,
    json: Option<String>,
    svg: Option<String>,
    svg_ranks: Option<String>,
    /// `--quick`: a smoke run (CI); first touch only up to [`FIRST_TOUCH_QUICK_MAX`] ranks.
    quick: bool,
}

fn parse() -> Opts {
    let mut o = Opts {
        ranks: 64,
        miss_ranks: 1024,
        threads: vec![1, 2],
        dur: Duration::from_millis(300),
        json: None,
        svg: None,
        svg_ranks: None,
        quick: false,
    };
    let mut args = std::env::args().skip(1);
    let num = |v: Option<String>, what: &str| -> usize {
        v.and_then(|s| s.parse().ok())
            .unwrap_or_else(|| die(&format!("{what} needs a positive number")))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            "--ranks" => o.ranks = num(args.next(), "--ranks").max(1),
            "--miss-ranks" => o.miss_ranks = num(args.next(), "--miss-ranks").max(1),
            "--ms" => o.dur = Duration::from_millis(num(args.next(), "--ms") as u64),
            "--quick" => {
                o.dur = Duration::from_millis(60);
                o.quick = true;
            }
            "--threads" => {
                o.threads = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse()
                            .unwrap_or_else(|_| die("--threads takes e.g. 1,2"))
                    })
                    .collect();
                if o.threads.is_empty() || o.threads.contains(&0) {
                    die("--threads takes e.g. 1,2");
                }
            }
            "--json" => o.json = Some(args.next().unwrap_or_else(|| die("--json needs a path"))),
            "--svg" => o.svg = Some(args.next().unwrap_or_else(|| die("--svg needs a path"))),
            "--svg-ranks" => {
                o.svg_ranks = Some(
                    args.next()
                        .unwrap_or_else(|| die("--svg-ranks needs a path")),
                )
            }
            "--bench" => {} // passed by `cargo bench`-style runners; ignored
            other => die(&format!("unknown option {other:?} (try --help)")),
        }
    }
    o
}

fn die(msg: &str) -> ! {
    eprintln!("compare: {msg}");
    std::process::exit(2);
}

struct Row {
    group: &'static str,
    arm: &'static str,
    /// Median ns/op over the `REPEATS` repeats, for each entry of `Opts::threads`.
    ns: Vec<f64>,
    /// Minimum ns/op over the repeats (the spread is `ns - min`); empty if not measured so.
    min: Vec<f64>,
}

/// Each arm is measured `REPEATS` times, `dur / REPEATS` each, the arms of a group taking turns
/// repeat by repeat (so drift hits them alike); a row reports the median and the minimum.
const REPEATS: u32 = 5;

fn run_group(world: &World, arms: &[Arm], o: &Opts, rows: &mut Vec<Row>) {
    std::thread::scope(|s| {
        // one team of worker threads per thread count, reused by every arm
        let teams: Vec<arms::Team> = o
            .threads
            .iter()
            .map(|&t| arms::Team::new(s, world, t))
            .collect();
        // samples[arm][thread count][repeat]
        let mut samples = vec![vec![Vec::new(); teams.len()]; arms.len()];
        for rep in 1..=REPEATS {
            for (arm, per_arm) in arms.iter().zip(&mut samples) {
                for ((team, t), per_t) in teams.iter().zip(&o.threads).zip(per_arm) {
                    eprint!(
                        "\r  {:<26} {:<34} {t} thread(s), repeat {rep}/{REPEATS}...   ",
                        arm.group, arm.name
                    );
                    per_t.push(team.run_for(arm.op, o.dur / REPEATS));
                }
            }
        }
        for (arm, per_arm) in arms.iter().zip(samples) {
            let (mut ns, mut min) = (Vec::new(), Vec::new());
            for mut v in per_arm {
                v.sort_by(f64::total_cmp);
                ns.push(v[v.len() / 2]);
                min.push(v[0]);
            }
            rows.push(Row {
                group: arm.group,
                arm: arm.name,
                ns,
                min,
            });
        }
    });
    eprint!("\r{:<100}\r", "");
}

/// The arm each group's ratios are taken against.
fn reference(group: &str) -> (&'static str, &'static str) {
    match group {
        "owner get" => ("std thread_local! (floor)", "x floor"),
        "on_behalf_of enter+exit" => ("on_behalf_of", "x"),
        "get_for, cache miss" => ("RankLocal<Baseline> (baseline)", "speedup"),
        "owner with (scoped)" => ("RankLocal<Epoch>: get", "x get"),
        "delegated with_for (scoped)" => ("RankLocal<Epoch>: get_for", "x get_for"),
        _ => ("RankLocal<Baseline> (baseline)", "speedup"),
    }
}

fn print_table(rows: &[Row], o: &Opts) {
    let mut groups: Vec<&str> = rows.iter().map(|r| r.group).collect();
    groups.dedup();
    for g in groups {
        let (refname, label) = reference(g);
        let refrow = rows.iter().find(|r| r.group == g && r.arm == refname);
        // a group holding only its reference arm would print a column of 1.00: no ratio column
        let ratios = refrow.is_some() && rows.iter().any(|r| r.group == g && r.arm != refname);
        print!("\n{g}\n  {:<34}", "arm");
        for t in &o.threads {
            print!(" {:>9} {:>7}", format!("{t}T ns/op"), "min");
            if ratios {
                print!(" {label:>8}");
            }
        }
        println!();
        for r in rows.iter().filter(|r| r.group == g) {
            print!("  {:<34}", r.arm);
            for (i, ns) in r.ns.iter().enumerate() {
                let min = r.min.get(i).map_or("-".into(), |m| format!("{m:.2}"));
                print!(" {ns:>9.2} {min:>7}");
                if !ratios {
                    continue;
                }
                let ratio = refrow.map(|rr| {
                    if label == "speedup" {
                        rr.ns[i] / ns
                    } else {
                        ns / rr.ns[i]
                    }
                });
                let ratio = ratio.map_or("-".into(), |x| format!("{x:.2}"));
                print!(" {ratio:>8}");
            }
            println!();
        }
    }
}

fn json_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Escapes text for an SVG (XML) text node: arm names hold `<` and `>`.
fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

fn write_json(path: &str, rows: &[Row], inserts: &[(String, usize, f64)], o: &Opts) {
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\n  \"machine\": \"{}\",\n  \"ranks\": {},\n  \"miss_ranks\": {},\n  \"ms_per_arm\": {},\n  \"repeats\": {REPEATS},\n  \"threads\": {:?},\n  \"lookups\": [\n",
        json_escape(&machine()),
        o.ranks,
        o.miss_ranks,
        o.dur.as_millis(),
        o.threads
    );
    for (i, r) in rows.iter().enumerate() {
        let ns: Vec<String> = r.ns.iter().map(|x| format!("{x:.3}")).collect();
        let min: Vec<String> = r.min.iter().map(|x| format!("{x:.3}")).collect();
        let _ = writeln!(
            s,
            "    {{\"group\": \"{}\", \"arm\": \"{}\", \"ns_per_op\": [{}], \"min_ns_per_op\": [{}]}}{}",
            json_escape(r.group),
            json_escape(r.arm),
            ns.join(", "),
            min.join(", "),
            if i + 1 < rows.len() { "," } else { "" }
        );
    }
    s.push_str("  ],\n  \"first_touch\": [\n");
    for (i, (b, n, ns)) in inserts.iter().enumerate() {
        let _ = writeln!(
            s,
            "    {{\"backend\": \"{b}\", \"existing_ranks\": {n}, \"ns_per_insert\": {ns:.1}}}{}",
            if i + 1 < inserts.len() { "," } else { "" }
        );
    }
    s.push_str("  ]\n}\n");
    std::fs::write(path, s).unwrap_or_else(|e| die(&format!("cannot write {path}: {e}")));
    eprintln!("wrote {path}");
}

/// A horizontal bar chart, log10 scale, one bar per thread count.
fn write_svg(path: &str, rows: &[Row], o: &Opts) {
    let colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759"];
    let bar_h = 9.0;
    let row_h = bar_h * o.threads.len() as f64 + 6.0;
    let (left, width) = (330.0, 420.0);
    let (lo, hi) = (
        0.3f64.log10(),
        rows.iter()
            .flat_map(|r| r.ns.iter())
            .fold(1.0f64, |a, &b| a.max(b))
            .log10()
            + 0.1,
    );
    let x = |ns: f64| left + (ns.max(0.3).log10() - lo) / (hi - lo) * width;
    let mut groups: Vec<&str> = rows.iter().map(|r| r.group).collect();
    groups.dedup();
    let height = 60.0 + rows.len() as f64 * row_h + groups.len() as f64 * 22.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"18\" font-size=\"13\">ranklocal lookups: ns/op per thread (log scale; lower is better) — {}</text>\n",
        left + width + 80.0,
        xml_escape(&machine())
    );
    for (i, t) in o.threads.iter().enumerate() {
        let _ = writeln!(
            s,
            "<rect x=\"{}\" y=\"26\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"35\">{t} thread(s)</text>",
            10.0 + i as f64 * 90.0,
            colors[i % colors.len()],
            24.0 + i as f64 * 90.0
        );
    }
    for tick in [1.0f64, 10.0, 100.0, 1000.0] {
        if tick.log10() < hi {
            let _ = writeln!(
                s,
                "<line x1=\"{0}\" x2=\"{0}\" y1=\"42\" y2=\"{1}\" stroke=\"#ddd\"/><text x=\"{0}\" y=\"{2}\" text-anchor=\"middle\">{tick} ns</text>",
                x(tick),
                height - 14.0,
                height - 3.0
            );
        }
    }
    let mut y = 50.0;
    for g in groups {
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{}\" font-weight=\"bold\">{}</text>",
            y + 10.0,
            xml_escape(g)
        );
        y += 16.0;
        for r in rows.iter().filter(|r| r.group == g) {
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                left - 6.0,
                y + row_h / 2.0,
                xml_escape(r.arm)
            );
            for (i, ns) in r.ns.iter().enumerate() {
                let by = y + i as f64 * bar_h;
                let _ = writeln!(
                    s,
                    "<rect x=\"{left}\" y=\"{by}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{}\" font-size=\"9\">{ns:.1}</text>",
                    (x(*ns) - left).max(1.0),
                    bar_h - 1.0,
                    colors[i % colors.len()],
                    x(*ns) + 3.0,
                    by + bar_h - 2.0
                );
            }
            y += row_h;
        }
        y += 6.0;
    }
    s.push_str("</svg>\n");
    std::fs::write(path, s).unwrap_or_else(|e| die(&format!("cannot write {path}: {e}")));
    eprintln!("wrote {path}");
}

// ---- first touch (issue 11): cost of one new rank vs ranks already present ----------------

/// Existing-rank counts at which first touch is measured.
const FIRST_TOUCH_RANKS: [usize; 6] = [64, 256, 1024, 4096, 16384, 65536];

/// The largest existing-rank count `--quick` (CI) measures.
const FIRST_TOUCH_QUICK_MAX: usize = 4096;

/// The existing-rank counts this run measures.
fn first_touch_ranks(o: &Opts) -> Vec<usize> {
    FIRST_TOUCH_RANKS
        .into_iter()
        .filter(|&n| !o.quick || n <= FIRST_TOUCH_QUICK_MAX)
        .collect()
}

/// First touch: one new rank into a `RankLocal` that already holds N ranks, for every N of
/// [`first_touch_ranks`]. The backends take turns rep by rep, so allocator and cache state
/// drifts hit them alike. Ranks are made cheaply: short-lived threads that only take an id and
/// exit; the timed first touches are delegated (`on_behalf_of`), so thread creation is not timed.
fn first_touch_section(o: &Opts) -> Vec<(String, usize, f64)> {
    let sizes = first_touch_ranks(o);
    let max = sizes.iter().copied().max().unwrap_or(0);
    eprint!(
        "\r  making {} ranks (threads that start and exit)...   ",
        max + 64
    );
    let pool = arms::spare_ranks_parallel(max + 64);
    let (fresh, existing) = pool.split_at(64);
    let mut inserts = Vec::new();
    println!(
        "\nfirst touch (insert one new rank; mean over 64 new ranks x reps, backends interleaved)\n  {:<12} {:>10} {:>10} {:>10} {:>14}",
        "existing", "epoch ns", "arc-swap", "baseline", "epoch/baseline"
    );
    for n in sizes {
        eprint!("\r  first touch at {n} ranks...                       ");
        // fewer reps where each rep first builds a big map
        let reps = match (o.quick, n) {
            (true, _) => 2,
            (false, 0..=1024) => 16,
            (false, 1025..=4096) => 8,
            (false, 4097..=16384) => 4,
            _ => 3,
        };
        let (mut e, mut a, mut b) = (0.0, 0.0, 0.0);
        for _ in 0..reps {
            e += arms::insert_ns::<Epoch>(&existing[..n], fresh, 1) / reps as f64;
            a += arms::insert_ns::<ArcSwap>(&existing[..n], fresh, 1) / reps as f64;
            b += arms::insert_ns::<Baseline>(&existing[..n], fresh, 1) / reps as f64;
        }
        eprint!("\r{:<60}\r", "");
        println!("  {n:<12} {e:>10.0} {a:>10.0} {b:>10.0} {:>14.2}", e / b);
        inserts.extend([
            ("epoch".to_string(), n, e),
            ("arc-swap".to_string(), n, a),
            ("baseline".to_string(), n, b),
        ]);
    }
    inserts
}

/// First-touch ns vs existing ranks, one line per backend, log-log axes.
fn write_ranks_svg(path: &str, inserts: &[(String, usize, f64)]) {
    let colors = [
        ("epoch", "#4e79a7"),
        ("arc-swap", "#f28e2b"),
        ("baseline", "#e15759"),
    ];
    let (left, top, width, height) = (70.0, 46.0, 460.0, 260.0);
    let mut sizes: Vec<usize> = inserts.iter().map(|i| i.1).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let (first, last) = (
        sizes.first().copied().unwrap_or(1),
        sizes.last().copied().unwrap_or(2).max(2),
    );
    let (xlo, xhi) = ((first as f64).log10(), (last as f64).log10());
    let ymax = inserts.iter().fold(100.0f64, |a, i| a.max(i.2));
    let ymin = inserts.iter().fold(ymax, |a, i| a.min(i.2)).min(100.0);
    let (ylo, yhi) = (ymin.log10() - 0.05, ymax.log10() + 0.1);
    let x = |n: usize| left + ((n as f64).log10() - xlo) / (xhi - xlo) * width;
    let y = |ns: f64| top + height - (ns.max(ymin).log10() - ylo) / (yhi - ylo) * height;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"18\" font-size=\"13\">first touch: ns per new rank vs ranks already present</text>\n<text x=\"10\" y=\"32\">log-log, lower is better — {}</text>\n",
        left + width + 110.0,
        top + height + 40.0,
        xml_escape(&machine())
    );
    for &n in &sizes {
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{top}\" y2=\"{1}\" stroke=\"#ddd\"/><text x=\"{0:.1}\" y=\"{2}\" text-anchor=\"middle\">{n}</text>",
            x(n),
            top + height,
            top + height + 14.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">ranks already present</text>",
        left + width / 2.0,
        top + height + 30.0
    );
    for tick in [10.0f64, 100.0, 1e3, 1e4, 1e5] {
        if tick.log10() < yhi && tick.log10() > ylo {
            let _ = writeln!(
                s,
                "<line x1=\"{left}\" x2=\"{}\" y1=\"{1:.1}\" y2=\"{1:.1}\" stroke=\"#ddd\"/><text x=\"{2}\" y=\"{1:.1}\" text-anchor=\"end\">{tick} ns</text>",
                left + width,
                y(tick),
                left - 4.0
            );
        }
    }
    for (k, (name, color)) in colors.iter().enumerate() {
        let pts: Vec<String> = inserts
            .iter()
            .filter(|i| i.0 == *name)
            .map(|i| format!("{:.1},{:.1}", x(i.1), y(i.2)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>",
            pts.join(" ")
        );
        for i in inserts.iter().filter(|i| i.0 == *name) {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>",
                x(i.1),
                y(i.2)
            );
        }
        let ly = top + 10.0 + k as f64 * 16.0;
        let _ = writeln!(
            s,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{name}</text>",
            left + width + 12.0,
            ly - 9.0,
            left + width + 26.0,
            ly
        );
    }
    s.push_str("</svg>\n");
    std::fs::write(path, s).unwrap_or_else(|e| die(&format!("cannot write {path}: {e}")));
    eprintln!("wrote {path}");
}

fn main() {
    let o = parse();
    println!("ranklocal compare — {}", machine());
    println!(
        "ns/op per thread (median of {REPEATS} repeats, arms taking turns; min = fastest repeat), {} ms per arm and thread count; ranks looked up round-robin: {} (cache-miss arms: {})",
        o.dur.as_millis(),
        o.ranks,
        o.miss_ranks
    );
    println!("baseline = RankLocal<Baseline>: the C++ design (owner cached, RwLock<HashMap> for the rest)");
    println!("speedup = baseline ns / arm ns (higher is better); x floor = arm ns / raw thread_local! ns");

    eprintln!("setting up {} + {} ranks...", o.ranks, o.miss_ranks);
    let mut rows = Vec::new();
    let world = World::new(arms::spare_ranks(o.ranks));
    run_group(&world, &arms::lookup_arms(), &o, &mut rows);
    run_group(&world, &arms::iter_arms(), &o, &mut rows);
    drop(world);
    let miss_world = World::new(arms::spare_ranks(o.miss_ranks));
    run_group(&miss_world, &arms::miss_arms(), &o, &mut rows);
    drop(miss_world);
    print_table(&rows, &o);
    pairs_in_turn(&o);
    owner_interleaved(&o);
    scoped::run(o.dur);

    let inserts = first_touch_section(&o);

    propagation::run(o.dur);

    if let Some(p) = &o.json {
        write_json(p, &rows, &inserts, &o);
    }
    if let Some(p) = &o.svg {
        write_svg(p, &rows, &o);
    }
    if let Some(p) = &o.svg_ranks {
        write_ranks_svg(p, &inserts);
    }
}

/// Carrying the rank into other work: the overhead of `RankId::bind` (vs a direct call and vs
/// `on_behalf_of`) and of `in_current_rank` (vs the bare future and vs `.on_behalf_of(rank)`);
/// "x plain" is the ratio to the direct call / bare future.
/// Its own section with its own table: one thread (the cost is thread-local; nothing is shared),
/// the arms interleaved round by round, the fastest round of each reported.
mod propagation {
    use std::future::Future;
    use std::hint::black_box;
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};

    use ranklocal::{on_behalf_of, OnBehalfExt, Rank, RankId};

    /// The work being carried: read the current rank (what a `RankLocal` lookup starts with).
    #[inline(always)]
    fn work() -> u64 {
        RankId::current().as_u64()
    }

    /// Polls a future that is ready on its first poll. The arms pass the future through
    /// `black_box` first, so the compiler cannot see that `in_current_rank` captured the very rank
    /// that is current at the poll (it would elide the switch; a spawned task is polled elsewhere).
    #[inline(always)]
    fn poll_once<F: Future>(f: F) -> F::Output {
        let mut cx = Context::from_waker(Waker::noop());
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => v,
            Poll::Pending => unreachable!("the future is ready at once"),
        }
    }

    type Op = fn(RankId, u64);

    /// `(group, arm, op)`; the first arm of a group is its reference.
    const ARMS: [(&str, &str, Op); 6] = [
        (
            "bind: run a closure as a rank",
            "direct call f()",
            |_, n| {
                for _ in 0..n {
                    black_box(black_box(work)());
                }
            },
        ),
        (
            "bind: run a closure as a rank",
            "on_behalf_of(rank, f)",
            |r, n| {
                for _ in 0..n {
                    black_box(on_behalf_of(black_box(r), black_box(work)));
                }
            },
        ),
        (
            "bind: run a closure as a rank",
            "rank.bind(f)() (bind + call)",
            |r, n| {
                for _ in 0..n {
                    black_box(black_box(r).bind(black_box(work))());
                }
            },
        ),
        (
            "in_current_rank: build + poll a ready future",
            "bare future",
            |_, n| {
                for _ in 0..n {
                    black_box(poll_once(black_box(async { work() })));
                }
            },
        ),
        (
            "in_current_rank: build + poll a ready future",
            "fut.on_behalf_of(rank)",
            |r, n| {
                for _ in 0..n {
                    black_box(poll_once(async { work() }.on_behalf_of(black_box(r))));
                }
            },
        ),
        (
            "in_current_rank: build + poll a ready future",
            "fut.in_current_rank()",
            |_, n| {
                for _ in 0..n {
                    black_box(poll_once(black_box(async { work() }.in_current_rank())));
                }
            },
        ),
    ];

    pub fn run(dur: Duration) {
        let rank = Rank::new();
        let r = rank.id();
        let batch = 10_000u64;
        let mut best = [f64::INFINITY; ARMS.len()];
        let mut rounds = 0;
        // in_current_rank captures the rank current where it is called: run every arm while
        // acting for `r`, so every arm carries the same rank
        on_behalf_of(r, || {
            for (_, _, op) in &ARMS {
                op(r, batch); // warm up
            }
            let deadline = Instant::now() + dur;
            while rounds < 4 || Instant::now() < deadline {
                for (i, (_, _, op)) in ARMS.iter().enumerate() {
                    let t = Instant::now();
                    op(r, batch);
                    best[i] = best[i].min(t.elapsed().as_nanos() as f64 / batch as f64);
                }
                rounds += 1;
            }
        });
        println!(
            "\ncarrying the rank (1 thread, fastest of {rounds} interleaved rounds of {batch} ops per arm)"
        );
        let mut group = "";
        let (mut base, mut obo) = (0.0, 0.0);
        for (i, (g, arm, _)) in ARMS.iter().enumerate() {
            if *g != group {
                group = g;
                base = best[i];
                obo = best[i + 1];
                println!(
                    "{g}\n  {:<34} {:>9} {:>10} {:>14}",
                    "arm", "ns/op", "x plain", "x on_behalf_of"
                );
            }
            println!(
                "  {arm:<34} {:>9.2} {:>10.2} {:>14.2}",
                best[i],
                best[i] / base,
                best[i] / obo
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Several RankLocals on one thread: every pair used in turn (issue 10, item 6).
// Kept in its own section so other additions to this example merge cleanly.
// ---------------------------------------------------------------------------------------------

/// How many `RankLocal`s the pair section creates.
const PAIR_OBJECTS: usize = 128;

/// ns per `get` when one thread uses `group` (indices into `rls`) in turn, `n` gets each; the
/// best of `rounds` measurements is kept by the caller.
fn in_turn_ns(rls: &[ranklocal::RankLocal<u64>], group: &[usize], n: u64) -> f64 {
    use std::hint::black_box;
    for &k in group {
        black_box(rls[k].get()); // warm: fills the thread cache
    }
    let start = std::time::Instant::now();
    for _ in 0..n {
        for &k in group {
            black_box(*black_box(&rls[k]).get());
        }
    }
    start.elapsed().as_nanos() as f64 / (n * group.len() as u64) as f64
}

/// Times every pair (and selected quadruples) of `PAIR_OBJECTS` live `RankLocal<u64>`s used in
/// turn by one fresh thread; prints the median and the worst. The objects draw their uids in
/// creation order, from consecutive counter values (nothing else draws uids meanwhile), so the
/// pairs `(i, i + 64)` are exactly those whose uids collided under the old direct-mapped index
/// `(rank ^ uid) & 63`, and `(i, i + 16, i + 32, i + 48)` share a set of a 16-set cache.
fn pairs_in_turn(o: &Opts) {
    let quick = o.dur < Duration::from_millis(100);
    let (n, rounds) = if quick { (1_000, 3) } else { (4_000, 5) };
    let report = std::thread::spawn(move || {
        let rls: Vec<ranklocal::RankLocal<u64>> = (0..PAIR_OBJECTS)
            .map(|_| ranklocal::RankLocal::new())
            .collect();
        for (i, rl) in rls.iter().enumerate() {
            rl.get_or(|| i as u64); // creation order = uid order
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for a in 0..PAIR_OBJECTS {
            for b in a + 1..PAIR_OBJECTS {
                groups.push(vec![a, b]);
            }
        }
        let pairs = groups.len();
        for stride in [16, 32] {
            for a in 0..PAIR_OBJECTS - 3 * stride {
                groups.push((0..4).map(|k| a + k * stride).collect());
            }
        }
        let mut best = vec![f64::INFINITY; groups.len()];
        for _ in 0..rounds {
            for (g, b) in groups.iter().zip(&mut best) {
                *b = b.min(in_turn_ns(&rls, g, n));
            }
        }
        let summary = |range: std::ops::Range<usize>, filter: &dyn Fn(&[usize]) -> bool| {
            let mut v: Vec<(f64, &Vec<usize>)> = best[range.clone()]
                .iter()
                .copied()
                .zip(&groups[range])
                .filter(|(_, g)| filter(g))
                .collect();
            v.sort_by(|x, y| x.0.total_cmp(&y.0));
            let median = v[v.len() / 2].0;
            let (worst, wg) = v[v.len() - 1];
            (v.len(), median, worst, wg.clone())
        };
        let rows = [
            ("every pair", summary(0..pairs, &|_| true)),
            (
                "pairs colliding under the old index (i, i+64)",
                summary(0..pairs, &|g| g[1] - g[0] == 64),
            ),
            ("4 in turn (i, i+16, i+32, i+48)", {
                summary(pairs..groups.len(), &|g| g[1] - g[0] == 16)
            }),
            ("4 in turn (i, i+32, i+64, i+96)", {
                summary(pairs..groups.len(), &|g| g[1] - g[0] == 32)
            }),
        ];
        let mut out = format!(
            "\nseveral RankLocals on one thread: {PAIR_OBJECTS} live RankLocal<u64>, each group used in turn, \
             ns/get (best of {rounds} x {n} rounds per group)\n  {:<46} {:>6} {:>9} {:>9} {:>8}  worst group\n",
            "groups", "count", "median", "worst", "w/median"
        );
        for (name, (count, median, worst, wg)) in &rows {
            let _ = writeln!(
                out,
                "  {name:<46} {count:>6} {median:>9.2} {worst:>9.2} {:>8.2}  {wg:?}",
                worst / median
            );
        }
        let overall_median = rows[0].1 .1;
        let slow = best[..pairs]
            .iter()
            .filter(|&&x| x > 2.0 * overall_median)
            .count();
        let _ = writeln!(
            out,
            "  pairs slower than 2x the median pair: {slow} of {pairs} (goal: worst <= 2x median)"
        );
        out
    });
    print!("{}", report.join().expect("pair section panicked"));
}

/// Owner `get` of the object form against the `thread_local` crate's `get`, measured in short
/// alternating rounds on one fresh thread, so that both see the same machine load; reports the
/// best and the median round of each. (The "owner get" table above times each arm once, for
/// longer, one after the other.)
fn owner_interleaved(o: &Opts) {
    use std::hint::black_box;
    let quick = o.dur < Duration::from_millis(100);
    let (n, rounds) = if quick {
        (5_000u64, 301)
    } else {
        (5_000u64, 2_001)
    };
    let out = std::thread::spawn(move || {
        let rl = ranklocal::RankLocal::<u64, Epoch>::new();
        let tl = thread_local::ThreadLocal::<u64>::new();
        rl.get_or(|| 1);
        tl.get_or(|| 1);
        let time = |f: &dyn Fn()| {
            let start = std::time::Instant::now();
            f();
            start.elapsed().as_nanos() as f64 / n as f64
        };
        let (mut t_rl, mut t_tl) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            t_tl.push(time(&|| {
                for _ in 0..n {
                    black_box(*black_box(&tl).get().unwrap());
                }
            }));
            t_rl.push(time(&|| {
                for _ in 0..n {
                    black_box(*black_box(&rl).get());
                }
            }));
        }
        // Each round's ratio is taken between adjacent measurements, which saw the same load.
        let mut paired: Vec<f64> = t_rl.iter().zip(&t_tl).map(|(r, t)| r / t).collect();
        for v in [&mut t_rl, &mut t_tl, &mut paired] {
            v.sort_by(f64::total_cmp);
        }
        let (m_rl, m_tl) = (t_rl[rounds / 2], t_tl[rounds / 2]);
        let (q1, q2, q3) = (
            paired[rounds / 4],
            paired[rounds / 2],
            paired[3 * rounds / 4],
        );
        format!(
            "\nowner get, object form vs thread_local crate: {rounds} alternating rounds of {n} gets, ns/get\n  \
             {:<34} {:>9} {:>9}\n  {:<34} {:>9.3} {:>9.3}\n  {:<34} {:>9.3} {:>9.3}\n  {:<34} {:>9.3} {:>9.3}\n  \
             ratio per round (adjacent rounds): median {q2:.3}, quartiles {q1:.3}-{q3:.3}  (goal <= 1.0)\n",
            "arm", "best", "median",
            "thread_local crate", t_tl[0], m_tl,
            "RankLocal<Epoch> (object form)", t_rl[0], m_rl,
            "ratio of best, of median", t_rl[0] / t_tl[0], m_rl / m_tl
        )
    });
    print!("{}", out.join().expect("owner section panicked"));
}

// ---------------------------------------------------------------------------------------------
// Scoped access (issue 12): the owner's `with` vs `get`, a delegate's `with_for` vs `get_for`
// on a thread-cache hit. Its own section so other additions to this example merge cleanly.
// ---------------------------------------------------------------------------------------------
mod scoped {
    use std::hint::black_box;
    use std::time::{Duration, Instant};

    use ranklocal::{Rank, RankId, RankLocal};

    /// ns per call of `f`, the fastest of `rounds` rounds of about `dur / rounds` each.
    fn best_ns(rounds: u32, per_round: u64, mut f: impl FnMut()) -> f64 {
        let mut best = f64::INFINITY;
        for _ in 0..rounds {
            let start = Instant::now();
            for _ in 0..per_round {
                f();
            }
            best = best.min(start.elapsed().as_nanos() as f64 / per_round as f64);
        }
        best
    }

    pub fn run(dur: Duration) {
        static RL: RankLocal<u64> = RankLocal::new();
        let job = Rank::new();
        let other: RankId = job.id();
        ranklocal::on_behalf_of(other, || RL.with(|_| ()));
        let me = RankId::this_thread();
        RL.with(|_| ()); // the owner's scoped entry
        let _ = RL.get(); // escapes this thread's instance (kept: it is the comparison's `get`)
        let _ = RL.with_for(other, |_| ()); // the delegate's pinned entry for `other`
        let per_round = ((dur.as_nanos() as u64) / 20).clamp(10_000, 50_000_000) / 5;
        let rounds = 21;
        // arms interleaved round by round: get, with, get_for(other), with_for(other)
        let mut t = [f64::INFINITY; 5];
        for _ in 0..rounds {
            t[0] = t[0].min(best_ns(1, per_round, || {
                black_box(*black_box(&RL).get());
            }));
            t[1] = t[1].min(best_ns(1, per_round, || {
                black_box(black_box(&RL).with(|v| *v));
            }));
            t[2] = t[2].min(best_ns(1, per_round, || {
                black_box(black_box(&RL).with_for(black_box(me), |v| *v));
            }));
            // `get_for(other)` would escape `other`'s instance: measured on a twin
            t[3] = t[3].min(best_ns(1, per_round, || {
                black_box(black_box(&RL).with_for(black_box(other), |v| *v));
            }));
        }
        static TWIN: RankLocal<u64> = RankLocal::new();
        ranklocal::on_behalf_of(other, || TWIN.get());
        let _ = TWIN.get_for(other);
        for _ in 0..rounds {
            t[4] = t[4].min(best_ns(1, per_round, || {
                black_box(black_box(&TWIN).get_for(black_box(other)).copied());
            }));
        }
        println!();
        println!("scoped access (issue 12), one thread, fastest of {rounds} interleaved rounds, ns/op (epoch):");
        println!("  owner get                    {:>7.2}", t[0]);
        println!(
            "  owner with                   {:>7.2}   {:.2}x get",
            t[1],
            t[1] / t[0]
        );
        println!(
            "  owner with_for(own rank)     {:>7.2}   {:.2}x get",
            t[2],
            t[2] / t[0]
        );
        println!("  delegate get_for (cache hit) {:>7.2}", t[4]);
        println!(
            "  delegate with_for (pin+hit)  {:>7.2}   {:.2}x get_for",
            t[3],
            t[3] / t[4]
        );
        drop(job);
    }
}
