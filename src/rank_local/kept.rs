//! The run-time aid for values kept by `get`: how many instances of exited ranks are kept because
//! they were handed out as `&T` (state ESCAPED, I31), and, in debug builds, a one-time warning
//! when a map keeps many of them.

#![deny(unsafe_code)]

use super::init::Access;
use super::raw::Pinned;
use super::RankLocal;
use crate::backend::Backend;
use crate::identity;
#[cfg(all(debug_assertions, not(ranklocal_loom)))]
use crate::primitive::Ordering;

/// The smallest map the debug warning looks at: it checks when the number of instances reaches a
/// power of two from here on.
#[cfg(all(debug_assertions, not(ranklocal_loom)))]
const WARN_FROM: usize = 1024;

impl<T: Send, B: Backend> RankLocal<T, B> {
    /// How many instances are kept for ranks that have exited because they were handed out as a
    /// plain `&T` (by [`get`](Self::get), `get_or`, `get_or_try`, `try_get`, `get_for` or
    /// [`iter`](Self::iter): every instance in its snapshot counts as handed out).
    ///
    /// Such an instance is kept until `&mut` access ([`purge_exited`](Self::purge_exited),
    /// [`clear`](Self::clear)) or the `RankLocal`'s drop; a sweep or
    /// [`reclaim_exited`](Self::reclaim_exited) cannot free it, because the `&T` may still be in
    /// use. A count that grows with the number of threads (or [`Rank`](crate::Rank)s) that ever
    /// ran means the values of ranks that come and go are reached with `get` where
    /// [`with`](Self::with) would let the crate free them, or that a `purge_exited` is missing.
    /// Values only reached through scoped access are not counted: sweeps free those.
    ///
    /// O(n) in the number of instances: it visits the map once (under an epoch pin, as
    /// [`for_each`](Self::for_each) does) and asks which of the ranks it found have exited. Meant
    /// for diagnostics and tests, not for a hot path.
    ///
    /// In debug builds a `RankLocal` also checks this count, when its number of instances reaches
    /// a power of two from 1,024 on (amortized O(1) per first touch), and prints a warning to
    /// stderr, once per `RankLocal`, if at least half of its instances are kept for exited ranks.
    ///
    /// ```
    /// use ranklocal::{on_behalf_of, Rank, RankLocal};
    ///
    /// let mut names: RankLocal<String> = RankLocal::new();
    /// for i in 0..3 {
    ///     let request = Rank::new();
    ///     on_behalf_of(request.id(), || names.get_or(|| format!("request {i}"))); // handed out
    /// } // each `Rank` is dropped here: its rank exits
    /// assert_eq!(names.kept_exited(), 3); // kept: `get_or` handed them out
    /// assert_eq!(names.purge_exited(), 3);
    /// assert_eq!(names.kept_exited(), 0);
    ///
    /// let request = Rank::new();
    /// on_behalf_of(request.id(), || names.with(|name| name.len())); // scoped: not kept
    /// drop(request);
    /// assert_eq!(names.kept_exited(), 0);
    /// names.reclaim_exited();
    /// assert!(names.is_empty());
    /// ```
    pub fn kept_exited(&self) -> usize {
        // `iter()` marks what it yields ESCAPED (I31).
        let mut escaped: Vec<u64> = {
            // The pin covers the snapshot's load and the visit (I33).
            let pin = Pinned::new(self);
            let handed_out = pin.iter().filter(|i| i.handed_out());
            handed_out.map(|i| i.rank()).collect()
        };
        identity::retain_exited(&mut escaped);
        escaped.len()
    }

    /// Called by a first touch after it published its instance, outside the writer lock. In
    /// debug builds, for an instance handed out as `&T`: when the number of instances has just
    /// reached a power of two from `WARN_FROM` on (so the O(n) count is amortized O(1) per
    /// first touch), warns once per `RankLocal` if at least half are kept for exited ranks. Not
    /// under loom: the models would explore the check's extra lock in every first touch.
    #[inline]
    pub(super) fn check_kept(&self, access: Access) {
        #[cfg(all(debug_assertions, not(ranklocal_loom)))]
        if access == Access::Escaped && !self.kept_warned.load(Ordering::Relaxed) {
            let n = self.core.len();
            if n >= WARN_FROM && n.is_power_of_two() {
                self.warn_kept(n);
            }
        }
        #[cfg(not(all(debug_assertions, not(ranklocal_loom))))]
        let _ = access;
    }

    #[cfg(all(debug_assertions, not(ranklocal_loom)))]
    #[cold]
    fn warn_kept(&self, n: usize) {
        let kept = self.kept_exited();
        // Relaxed: the flag only keeps the warning to one print; it orders nothing.
        if kept * 2 >= n && !self.kept_warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "ranklocal: a RankLocal<{}> keeps {kept} of its {n} values for ranks that have \
                 exited, because they were handed out as &T (get, get_or, try_get, get_for, iter, \
                 OwnRef::leak), and such a value is kept until &mut access or the RankLocal's drop. \
                 For the state of threads or Ranks that come and go: a Sync value (a Mutex, an \
                 atomic) can use `with` (freed after its rank exits); any value can use the \
                 owner-only `with_own` or keep `get_own`'s OwnRef guard instead of leaking it \
                 (dropped when its thread exits); a map built with `RankLocal::recycling()` hands an \
                 ended thread's value to the next new thread; or call `purge_exited` from time to \
                 time. `kept_exited()` gives the count. (Printed once per RankLocal, in debug \
                 builds only.)",
                core::any::type_name::<T>()
            );
        }
    }
}
