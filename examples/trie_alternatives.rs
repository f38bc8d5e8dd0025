//! The cost a *refcounted-node* trie (issue 11's design (a)) would add to every first touch,
//! measured in isolation against what the chosen design does (papers/design.md §3.4).
//!
//! ```text
//! cargo run --release --example trie_alternatives
//! ```
//!
//! Both arms path-copy the same 64-way trie shape as `ranklocal` at 65,536 ranks (3 levels: a root
//! with 16 children, a full interior node of 64 leaves, a leaf) and free the replaced path, as a
//! first touch does. The refcounted arm also does what design (a) needs: the copy of each interior
//! node bumps the count of each shared child (16 + 64 `fetch_add`s), and freeing the replaced path
//! drops them again (16 + 64 `fetch_sub`s) — on different cache lines, one per child node. This is
//! a synthetic measurement of the extra work, not a full implementation of design (a).

// Examples run on the current toolchain; the library's rust-version (1.65) is checked by
// .ci/msrv.sh.
#![allow(clippy::incompatible_msrv)]

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

const FANOUT: usize = 64;

struct Node {
    slots: [*mut Node; FANOUT],
    count: AtomicUsize,
}

fn node() -> *mut Node {
    Box::into_raw(Box::new(Node {
        slots: [std::ptr::null_mut(); FANOUT],
        count: AtomicUsize::new(1),
    }))
}

/// A 3-level trie like ranklocal's at 65,536 ranks: root with `used` children, each a full
/// interior node of 64 leaves.
fn build(used: usize) -> *mut Node {
    let root = node();
    for i in 0..used {
        let mid = node();
        for j in 0..FANOUT {
            // SAFETY: freshly allocated, private.
            unsafe { (*mid).slots[j] = node() };
        }
        // SAFETY: as above.
        unsafe { (*root).slots[i] = mid };
    }
    root
}

/// Copies the path to the last leaf (root -> mid -> leaf); with `refcount`, bumps the shared
/// children of each copied interior node. Returns the new root and the replaced path.
///
/// # Safety
/// `root` is a live trie built by `build`.
unsafe fn path_copy(root: *mut Node, used: usize, refcount: bool) -> (*mut Node, [*mut Node; 3]) {
    // SAFETY: live nodes (caller).
    unsafe {
        let copy = |n: *mut Node| {
            let c = node();
            (*c).slots = (*n).slots;
            c
        };
        let mid = (*root).slots[used - 1];
        let leaf = (*mid).slots[FANOUT - 1];
        let (nroot, nmid, nleaf) = (copy(root), copy(mid), copy(leaf));
        if refcount {
            for &child in (&(*root).slots)[..used].iter() {
                (*child).count.fetch_add(1, Ordering::Relaxed);
            }
            for &child in (*mid).slots.iter() {
                (*child).count.fetch_add(1, Ordering::Relaxed);
            }
        }
        (*nroot).slots[used - 1] = nmid;
        (*nmid).slots[FANOUT - 1] = nleaf;
        (nroot, [root, mid, leaf])
    }
}

/// Frees the replaced path; with `refcount`, first drops the references its interior nodes held.
///
/// # Safety
/// `old` is the path `path_copy` replaced, freed once.
unsafe fn free_path(old: [*mut Node; 3], used: usize, refcount: bool) {
    // SAFETY: the caller's contract.
    unsafe {
        if refcount {
            for &child in (&(*old[0]).slots)[..used].iter() {
                (*child).count.fetch_sub(1, Ordering::Release);
            }
            for &child in (*old[1]).slots.iter() {
                (*child).count.fetch_sub(1, Ordering::Release);
            }
        }
        for n in old {
            drop(Box::from_raw(n));
        }
    }
}

fn measure(refcount: bool, used: usize, reps: usize) -> f64 {
    let mut root = build(used);
    let start = Instant::now();
    for _ in 0..reps {
        // SAFETY: `root` is live; the replaced path is freed once, after the new root took over.
        unsafe {
            let (nroot, old) = path_copy(root, used, refcount);
            // The new path shares every child the old one had; keep the shared leaves alive by
            // freeing only the three replaced nodes (their copies took their places).
            free_path(old, used, refcount);
            root = black_box(nroot);
        }
    }
    start.elapsed().as_nanos() as f64 / reps as f64
}

fn main() {
    let used = 16; // 65,536 ranks = 16 full interior nodes of 64 leaves of 64
    let reps = 200_000;
    println!("path copy of one first touch at 65,536 ranks (3 levels), ns per first touch:");
    let (mut a, mut b) = (0.0, 0.0);
    for _ in 0..5 {
        b += measure(false, used, reps) / 5.0;
        a += measure(true, used, reps) / 5.0;
    }
    println!("  chosen (raw nodes, writer frees the replaced path)  {b:>8.1}");
    println!(
        "  refcounted nodes (+{} fetch_add, +{} fetch_sub)      {a:>8.1}  ({:.2}x)",
        used + FANOUT,
        used + FANOUT,
        a / b
    );
}
