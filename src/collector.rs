//! The crate's own crossbeam-epoch collector and [`pin`] (crossbeam-epoch's `default.rs` is the
//! model): every epoch pin the crate makes goes through here — the `Epoch` backend's readers and
//! writers, the pin `ArcSwap` takes around a lookup that must protect an instance, and
//! `RankLocal`'s scoped readers and sweeps on every backend (I18, I32, I33).
//!
//! # Why not crossbeam's default collector
//! Pinning or flushing may run deferred closures on the pinning thread; with the default collector
//! those include closures any other crate deferred, and one that first-touched a `RankLocal` would
//! run *inside* its writer, which holds the writer lock, and deadlock (found in review;
//! `tests/deferred.rs`). This collector only ever runs the crate's own closures, which release a
//! version header or set a retired batch's token and run no user code (I18). A side effect: a
//! thread pinned forever on crossbeam's default collector (another crate's long-held guard) does
//! not stop this crate's reclamation.

use crossbeam_epoch::{Collector, Guard, LocalHandle};

use crate::primitive::{lazy_global, tls};

lazy_global! {
    /// The crate's own epoch collector: only this crate defers closures to it, and they run no
    /// user code (I18).
    static COLLECTOR: Collector = Collector::new();
}

tls! {
    /// This thread's handle on [`COLLECTOR`], registered on first use.
    static HANDLE: LocalHandle = COLLECTOR.register();
}

/// `true` while this thread holds a pin of the crate's collector (a scoped read that is not the
/// live owner's, a `for_each`, a lookup in progress).
pub(crate) fn is_pinned() -> bool {
    HANDLE.try_with(LocalHandle::is_pinned).unwrap_or(false)
}

/// Pins this thread on the crate's collector (I18). During thread teardown, once `HANDLE` is gone,
/// a temporary handle is registered for the pin (as crossbeam's own `epoch::pin` does).
#[inline]
pub(crate) fn pin() -> Guard {
    HANDLE
        .try_with(LocalHandle::pin)
        .unwrap_or_else(|_| COLLECTOR.register().pin())
}
