//! A held pin ([`Reading`]): the protection behind [`Reader`](crate::Reader). It pins the crate's
//! collector on its first lookup and keeps that pin until it is dropped, so every lookup after
//! the first costs a map descent and a state load, no pin; each value it lends is SCOPED (never
//! escaped: kept only while the reader lives) and stays allocated until the reader is dropped,
//! because a sweep that unpublishes it retires it behind a grace period that waits for the pin
//! (I32, I33, I40).

use once_cell::unsync::OnceCell;

use super::{Inst, RankLocal};
use crate::backend::Backend;
use crate::collector::{self, Pin};

/// A pin of the crate's collector held across lookups of one `RankLocal` (I40). Made only by
/// [`Reading::new`], which requires `T: Sync + Send`: any rank's value may reach the holding
/// thread. Neither `Send` nor `Sync` (the pin is this thread's).
pub(in crate::rank_local) struct Reading<'rl, T, B: Backend> {
    rl: &'rl RankLocal<T, B>,
    /// Taken by the first lookup, held until the drop.
    pin: OnceCell<Pin>,
}

impl<'rl, T: Sync + Send, B: Backend> Reading<'rl, T, B> {
    /// A reader of `rl`; pins nothing until its first lookup.
    pub(in crate::rank_local) fn new(rl: &'rl RankLocal<T, B>) -> Self {
        Reading {
            rl,
            pin: OnceCell::new(),
        }
    }
}

impl<'rl, T, B: Backend> Reading<'rl, T, B> {
    /// `rank`'s value in the map now, lent for as long as this reading is borrowed; `None` if
    /// absent, being reclaimed or a tombstone. An OWNED instance moves on to SCOPED, as for any
    /// rank-aware scoped read (I39). Never escapes, never uses or fills the thread cache.
    #[inline]
    pub(in crate::rank_local) fn get(&self, rank: u64) -> Option<&T> {
        let pin = self.pin.get_or_init(pin_now);
        // SAFETY: `pin` is a pin of the crate's collector (`collector::pin`, I18).
        let p = unsafe { B::get_pinned(&self.rl.core.map, rank, pin) }?;
        // SAFETY: an instance of this map (I5), loaded under `pin`, which this reading holds
        // until it is dropped, so for as long as `self` is borrowed: a sweep that unpublishes it
        // retires it behind a grace period that waits for the pin (I32, I33, I40).
        let i: Inst<'_, 'rl, T, B> = unsafe { Inst::new(self.rl, rank, p) };
        // `T: Sync`: only `new` makes a `Reading`, and it requires it (I7).
        i.scope_any()
    }
}

/// The held pin, taken by the first lookup; counted as a slow path's (its periodic flush), and
/// as held, so that this thread counts as pinned while it lives, also in thread teardown (I40).
#[cold]
fn pin_now() -> Pin {
    let pin = collector::pin_held();
    collector::count_pin(&pin);
    pin
}
