//! `rank_local!` hygiene: user items named like the macro's helpers (`init`, `INNER`, `SLOT`,
//! ...) always resolve to the user's items, and std's `const { .. }` initializer form is accepted.
//! Found in review: before the fix `A` overflowed the stack (its `init()` called the macro's own
//! `fn init`) and `B` did not compile (its `SLOT` was the macro's thread-local).
//!
//! Its own binary: the user items must sit at the crate root, where the expansion lands, with
//! nothing else named like them. The macro form has no backend parameter.
#![allow(non_upper_case_globals)]

mod common;

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

use ranklocal::rank_local;

fn init() -> u64 {
    7
}
fn __init() -> u64 {
    8
}
static SLOT: AtomicU32 = AtomicU32::new(11);
static INNER: AtomicU32 = AtomicU32::new(12);
static KEY: u32 = 13;
const INIT: u32 = 14;
#[allow(dead_code)]
struct RankLocalKey;
#[allow(dead_code)]
struct RankLocal;
thread_local! {
    static TLS: Cell<u32> = const { Cell::new(15) };
}

rank_local! {
    static A: u64 = init();
    static B: u32 = SLOT.load(Ordering::Relaxed) + INNER.load(Ordering::Relaxed);
    static C: u64 = __init() + u64::from(KEY + INIT);
    static D: u32 = TLS.with(Cell::get);
    pub static E: AtomicU32 = const { AtomicU32::new(16) };
    static F: u32 = const { 17 }
}

#[test]
fn user_names_resolve_to_user_items() {
    assert_eq!(*A.get(), 7);
    assert_eq!(*B.get(), 23);
    assert_eq!(*C.get(), 8 + 13 + 14);
    assert_eq!(*D.get(), 15);
}

#[test]
fn const_initializer_form_is_accepted() {
    assert_eq!(E.get().fetch_add(1, Ordering::Relaxed), 16);
    assert_eq!(E.get().load(Ordering::Relaxed), 17);
    assert_eq!(*F.get(), 17);
}

mod shadowing_inside_a_module {
    use ranklocal::rank_local;

    #[allow(dead_code)]
    fn init() -> u8 {
        1
    }
    rank_local! {
        static M: u8 = init() + 1;
    }

    #[test]
    fn module_items_resolve_too() {
        assert_eq!(*M.get(), 2);
    }
}

/// User constants named like the old helper items, used in the *type*: the type is written again
/// inside the block that declares the helpers, so they must not capture it (found in review:
/// `error[E0391]: cycle detected` with helpers named `SLOT`/`INNER`). std's `thread_local!`
/// accepts the same declarations.
mod user_consts_in_the_type {
    use ranklocal::rank_local;

    const SLOT: usize = 4;
    const INNER: usize = 2;

    struct Arr<const K: usize>([u8; K]);

    rank_local! {
        static X: [u8; SLOT] = [0; SLOT];
        static N: Arr<INNER> = Arr([0; INNER]);
    }

    #[test]
    fn resolve_to_the_users_items() {
        assert_eq!(X.get().len(), 4);
        assert_eq!(N.get().0.len(), 2);
    }
}
