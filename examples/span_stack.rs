//! A per-thread span stack kept the way tracing-subscriber's `Registry` does (its
//! `ThreadLocal<RefCell<SpanStack>>`: `enter` pushes the span's id, marking it a duplicate if it is
//! already on the stack; `exit` removes the innermost entry of that id), on `ranklocal`'s
//! owner-only `with_own` against the `thread_local` crate and std's `thread_local!`.
//!
//! ```text
//! cargo run --release --example span_stack
//! ```
//!
//! Prints the median ns per enter/exit pair of each over interleaved rounds (each round runs every
//! arm once, in turn, so that a slow spell of the machine hits them all alike).

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

use std::cell::RefCell;
use std::hint::black_box;
use std::time::Instant;

use ranklocal::RankLocal;
use thread_local::ThreadLocal;

/// One entry of the stack (tracing-subscriber's `ContextId`).
#[derive(Clone, Copy)]
struct ContextId {
    id: u64,
    duplicate: bool,
}

/// tracing-subscriber's `SpanStack`.
#[derive(Default)]
struct SpanStack {
    stack: Vec<ContextId>,
}

impl SpanStack {
    /// Pushes `id`; `true` unless it was already entered on this thread.
    #[inline]
    fn push(&mut self, id: u64) -> bool {
        let duplicate = self.stack.iter().any(|i| i.id == id);
        self.stack.push(ContextId { id, duplicate });
        !duplicate
    }

    /// Removes the innermost entry of `id`; `true` if it was not a duplicate.
    #[inline]
    fn pop(&mut self, id: u64) -> bool {
        if let Some((idx, _)) = self
            .stack
            .iter()
            .enumerate()
            .rev()
            .find(|(_, ctx)| ctx.id == id)
        {
            let ContextId { duplicate, .. } = self.stack.remove(idx);
            return !duplicate;
        }
        false
    }
}

/// The `Registry` on `ranklocal`: `with_own`, no lock (issue 28).
struct RanklocalRegistry {
    current_spans: RankLocal<RefCell<SpanStack>>,
}

impl RanklocalRegistry {
    #[inline]
    fn enter(&self, id: u64) -> bool {
        self.current_spans.with_own(|s| s.borrow_mut().push(id))
    }
    #[inline]
    fn exit(&self, id: u64) -> bool {
        self.current_spans.with_own(|s| s.borrow_mut().pop(id))
    }
}

/// The `Registry` as tracing-subscriber 0.3 has it: the `thread_local` crate.
struct ThreadLocalRegistry {
    current_spans: ThreadLocal<RefCell<SpanStack>>,
}

impl ThreadLocalRegistry {
    #[inline]
    fn enter(&self, id: u64) -> bool {
        self.current_spans.get_or_default().borrow_mut().push(id)
    }
    #[inline]
    fn exit(&self, id: u64) -> bool {
        self.current_spans.get_or_default().borrow_mut().pop(id)
    }
}

std::thread_local! {
    /// The floor: std's `thread_local!` (one global stack, not one per registry).
    static STD_SPANS: RefCell<SpanStack> = RefCell::new(SpanStack::default());
}

/// `pairs` enter/exit pairs of a child span inside an entered parent, through `enter`/`exit`;
/// returns ns per pair.
fn run(pairs: u64, enter: impl Fn(u64) -> bool, exit: impl Fn(u64) -> bool) -> f64 {
    enter(1);
    let start = Instant::now();
    for i in 0..pairs {
        let id = black_box(2 + (i & 3));
        black_box(enter(id));
        black_box(exit(id));
    }
    let ns = start.elapsed().as_nanos() as f64 / pairs as f64;
    exit(1);
    ns
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, pairs) = if quick { (3, 100_000) } else { (9, 2_000_000) };
    let rl = RanklocalRegistry {
        current_spans: RankLocal::new(),
    };
    let tl = ThreadLocalRegistry {
        current_spans: ThreadLocal::new(),
    };
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        a.push(run(pairs, |id| rl.enter(id), |id| rl.exit(id)));
        b.push(run(pairs, |id| tl.enter(id), |id| tl.exit(id)));
        c.push(run(
            pairs,
            |id| STD_SPANS.with_borrow_mut(|s| s.push(id)),
            |id| STD_SPANS.with_borrow_mut(|s| s.pop(id)),
        ));
    }
    let (a, b, c) = (median(a), median(b), median(c));
    println!("span enter/exit pair, 1 thread, median of {rounds} interleaved rounds of {pairs}:");
    println!("  ranklocal RankLocal<RefCell<SpanStack>> with_own   {a:6.2} ns  ({:.2}x the thread_local crate)", a / b);
    println!("  thread_local ThreadLocal<RefCell<SpanStack>>       {b:6.2} ns");
    println!(
        "  std thread_local! RefCell<SpanStack> (floor)       {c:6.2} ns  ({:.2}x)",
        c / b
    );
}
