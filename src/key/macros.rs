//! [`rank_local!`](crate::rank_local): declares rank-local statics, each a `RankLocalKey` in a
//! `static` of its own with its own thread-local slot.

/// Declares rank-local statics, like `std::thread_local!`.
///
/// Each static is a [`RankLocalKey`](crate::RankLocalKey): one instance per rank, built by the
/// initializer on the rank's first use (by its own thread or a delegate), with its own
/// thread-local slot so that the owner's `get` is a single thread-local read plus the delegation
/// check.
///
/// ```
/// use ranklocal::{on_behalf_of, rank_local, RankId};
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// rank_local! {
///     /// Per-rank step counter.
///     pub static STEPS: AtomicU32 = AtomicU32::new(0);
///     static NAME: String = format!("rank {}", RankId::current());
/// }
///
/// STEPS.get().fetch_add(1, Ordering::Relaxed);
/// let me = RankId::current();
/// std::thread::spawn(move || on_behalf_of(me, || STEPS.get().fetch_add(1, Ordering::Relaxed)))
///     .join()
///     .unwrap();
/// assert_eq!(STEPS.get().load(Ordering::Relaxed), 2);
/// assert_eq!(NAME.get(), &format!("rank {me}"));
/// ```
///
/// As in `thread_local!`, the initializer may be written `const { EXPR }`
/// (`static N: AtomicU32 = const { AtomicU32::new(0) };`). The value type must be `Send` (an `Rc`
/// is rejected with one error naming that requirement); a `Cell` or `RefCell` value is reached
/// with the owner-only family (`with_own`, `get_own`, ...), and the rank-aware methods (`get`,
/// `with`, `get_for`, ...) need it to be `Sync` too.
///
/// Hygiene: the initializer is compiled outside the block that declares the macro's helper items,
/// so every name in it (`init`, `SLOT`, `INNER`, ...) means the caller's item.
///
/// Under a dependent's loom build (`--cfg loom` and the `loom` feature) a key, like a `static
/// RankLocal`, is built afresh in each execution of a model; the crate's own loom models (which
/// also pass `--cfg crossbeam_loom`) have no keys.
#[macro_export]
macro_rules! rank_local {
    () => {};
    // std's `const { EXPR }` form: evaluated at compile time, as in `thread_local!`.
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const $init:block; $($rest:tt)*) => {
        $crate::__rank_local_inner!($(#[$attr])* $vis $name, $t, {
            // a `const` item, not an inline `const { }` block (Rust 1.79): evaluated at compile time
            const __RANKLOCAL_INIT: $t = $init;
            __RANKLOCAL_INIT
        });
        $crate::rank_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const $init:block) => {
        $crate::__rank_local_inner!($(#[$attr])* $vis $name, $t, {
            // a `const` item, not an inline `const { }` block (Rust 1.79): evaluated at compile time
            const __RANKLOCAL_INIT: $t = $init;
            __RANKLOCAL_INIT
        });
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $crate::__rank_local_inner!($(#[$attr])* $vis $name, $t, $init);
        $crate::rank_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $crate::__rank_local_inner!($(#[$attr])* $vis $name, $t, $init);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __rank_local_inner {
    ($(#[$attr:meta])* $vis:vis $name:ident, $t:ty, $init:expr) => {
        $(#[$attr])*
        $vis static $name: $crate::RankLocalKey<$t> = {
            // Hygiene: the user's initializer is compiled here, outside the block below that
            // declares the helper items, so every name in it resolves to the user's items. (A
            // `let` binding made by the macro is hygienic: the user cannot name it.) The type is
            // written again inside the block, so the helper items there carry `__RANKLOCAL_`
            // names (as std's `thread_local!` does) that a user constant in `$t` won't meet, and
            // every path is `$crate::`-rooted (a user `core` crate or module changes nothing).
            let init: fn() -> $t = || $init;
            {
                static __RANKLOCAL_STORAGE: $crate::__private::KeyStorage<$t> =
                    $crate::__private::KeyStorage::new();
                $crate::__private::thread_local! {
                    static __RANKLOCAL_SLOT: $crate::__private::Cell<
                        $crate::__private::Option<&'static $t>,
                    > = const { $crate::__private::Cell::new($crate::__private::Option::None) };
                }
                // declared just above, by this expansion, for this key alone (I8)
                $crate::RankLocalKey::__new(&__RANKLOCAL_STORAGE, &__RANKLOCAL_SLOT, init)
            }
        };
    };
}
