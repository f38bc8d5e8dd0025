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
  --ms N           measuring time per arm and thread count, in ms     [default: 300]
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
    /// ns/op for each entry of `Opts::threads`.
    ns: Vec<f64>,
}

fn run_group(world: &World, arms: &[Arm], o: &Opts, rows: &mut Vec<Row>) {
    std::thread::scope(|s| {
        // one team of worker threads per thread count, reused by every arm
        let teams: Vec<arms::Team> = o
            .threads
            .iter()
            .map(|&t| arms::Team::new(s, world, t))
            .collect();
        for arm in arms {
            let mut ns = Vec::new();
            for (team, t) in teams.iter().zip(&o.threads) {
                eprint!("\r  {:<26} {:<34} {t} thread(s)...   ", arm.group, arm.name);
                ns.push(team.run_for(arm.op, o.dur));
            }
            rows.push(Row {
                group: arm.group,
                arm: arm.name,
                ns,
            });
        }
    });
    eprint!("\r{:<90}\r", "");
}

/// The arm each group's ratios are taken against.
fn reference(group: &str) -> (&'static str, &'static str) {
    match group {
        "owner get" => ("std thread_local! (floor)", "x floor"),
        "on_behalf_of enter+exit" => ("on_behalf_of", "x"),
        "get_for, cache miss" => ("RankLocal<Baseline> (baseline)", "speedup"),
        _ => ("RankLocal<Baseline> (baseline)", "speedup"),
    }
}

fn print_table(rows: &[Row], o: &Opts) {
    let mut groups: Vec<&str> = rows.iter().map(|r| r.group).collect();
    groups.dedup();
    for g in groups {
        let (refname, label) = reference(g);
        let refrow = rows.iter().find(|r| r.group == g && r.arm == refname);
        print!("\n{g}\n  {:<34}", "arm");
        for t in &o.threads {
            print!(" {:>9} {:>8}", format!("{t}T ns/op"), label);
        }
        println!();
        for r in rows.iter().filter(|r| r.group == g) {
            print!("  {:<34}", r.arm);
            for (i, ns) in r.ns.iter().enumerate() {
                let ratio = refrow.map(|rr| {
                    if label == "speedup" {
                        rr.ns[i] / ns
                    } else {
                        ns / rr.ns[i]
                    }
                });
                let ratio = ratio.map_or("-".into(), |x| format!("{x:.2}"));
                print!(" {ns:>9.2} {ratio:>8}");
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
        "{{\n  \"machine\": \"{}\",\n  \"ranks\": {},\n  \"miss_ranks\": {},\n  \"ms_per_arm\": {},\n  \"threads\": {:?},\n  \"lookups\": [\n",
        json_escape(&machine()),
        o.ranks,
        o.miss_ranks,
        o.dur.as_millis(),
        o.threads
    );
    for (i, r) in rows.iter().enumerate() {
        let ns: Vec<String> = r.ns.iter().map(|x| format!("{x:.3}")).collect();
        let _ = writeln!(
            s,
            "    {{\"group\": \"{}\", \"arm\": \"{}\", \"ns_per_op\": [{}]}}{}",
            json_escape(r.group),
            json_escape(r.arm),
            ns.join(", "),
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
        "ns/op per thread, {} ms per arm and thread count; ranks looked up round-robin: {} (cache-miss arms: {})",
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

    let inserts = first_touch_section(&o);

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
