//! Batches readied inside a read (I32): a sweep that finds batches past their grace period while
//! its thread holds a pin of the crate's collector (a first touch nested in another read) must
//! not drop them there — a value's `Drop` may wait for a grace period, which would wait for that
//! pin. It moves them to the `RankLocal`'s [`Limbo`] instead, and asks the thread to drain the
//! limbo when its outermost read ends ([`collector::after_reads`]). Any call on the `RankLocal`
//! made outside every read, on any thread, drains it too, and `&mut` calls and the drop take
//! what is left. So a service whose every first touch is nested in another read stays bounded.

use super::instance::drop_all;
use super::{Payload, Removed};
use crate::collector;
use crate::erased::Erased;
use crate::primitive::{lock, Arc, Mutex};

/// Freed instances of one `RankLocal`, unpublished and past their grace period and every walk
/// that may hold them (I31, I32), waiting for a thread outside every read to drop them. Shared
/// (an `Arc`) with the threads that will drain it: it holds no pointer to the `RankLocal`,
/// which may move, only the instances and a function typed for its `T`.
pub(super) struct Limbo {
    inner: Mutex<LimboInner>,
    /// `drop_all::<T>` for the `RankLocal`'s `T`.
    free: unsafe fn(usize, Vec<(u64, Erased)>) -> Option<Payload>,
}

/// What the limbo lock guards.
struct LimboInner {
    /// `false` once the `RankLocal` is dropped: its drop took what was left, drains do nothing.
    open: bool,
    /// The `RankLocal`'s address when the instances were taken (for `check_not_dropping`).
    owner: usize,
    entries: Vec<(u64, Erased)>,
    /// Instances a drain took out and has not dropped yet.
    in_flight: usize,
    /// The first `T::drop` panic of a drain, for the `RankLocal`'s next explicit reclamation
    /// call.
    panic: Option<Payload>,
}

impl Limbo {
    /// An empty, open limbo for a `RankLocal<T, _>` at `owner`.
    pub(super) fn new<T>(owner: usize) -> Arc<Limbo> {
        Arc::new(Limbo {
            inner: Mutex::new(LimboInner {
                open: true,
                owner,
                entries: Vec::new(),
                in_flight: 0,
                panic: None,
            }),
            free: drop_all::<T>,
        })
    }

    /// Instances not dropped yet (waiting, or being dropped by a drain), for `len`.
    pub(super) fn kept(&self) -> usize {
        let s = lock(&self.inner);
        s.entries.len() + s.in_flight
    }

    /// `true` while a drain drops instances it took.
    pub(super) fn in_flight(&self) -> bool {
        lock(&self.inner).in_flight > 0
    }

    /// Adds `removed`'s instances and asks this thread to drain the limbo at the end of its
    /// outermost read.
    pub(super) fn defer<T>(this: &Arc<Limbo>, removed: Removed<T>) {
        let (owner, entries) = removed.into_entries();
        if entries.is_empty() {
            return;
        }
        {
            let mut s = lock(&this.inner);
            s.owner = owner;
            s.entries.extend(entries);
        }
        let limbo = Arc::clone(this);
        collector::after_reads(Arc::as_ptr(this) as usize, Box::new(move || limbo.drain()));
    }

    /// Drops what waits here, on this thread (outside every read); a `T::drop` panic is kept
    /// for the `RankLocal`'s next explicit reclamation call (a drain runs at the end of an
    /// unrelated read, which must not panic with it). Never unwinds.
    fn drain(&self) {
        let (owner, entries) = {
            let mut s = lock(&self.inner);
            if !s.open || s.entries.is_empty() {
                return;
            }
            let entries = core::mem::take(&mut s.entries);
            s.in_flight += entries.len();
            (s.owner, entries)
        };
        let n = entries.len();
        // SAFETY: `entries` are instances of the `RankLocal<T, _>` that made this limbo with
        // `drop_all::<T>` (I5), unpublished, past their grace period and every walk that may
        // hold them (they came out of its batch queue, I31, I32), taken out of the limbo under its
        // lock, so each is dropped once (I10). The `RankLocal` may be gone since: its values'
        // lifetimes are still alive here, since this drain runs inside the read (a call on this
        // thread) whose closure used the `RankLocal`, and a drop does not wait for it (I32).
        let panic = unsafe { (self.free)(owner, entries) };
        let mut s = lock(&self.inner);
        s.in_flight -= n;
        if let Some(p) = panic {
            if s.open && s.panic.is_none() {
                s.panic = Some(p);
            } else {
                drop(s);
                super::drop_payload(p);
            }
        }
    }

    /// For a call outside every read (or `&mut`, or the drop, if `close`): takes what waits here
    /// and, if `panic`, the panic a drain kept; a drop also closes the limbo, so later drains do
    /// nothing.
    pub(super) fn take(&self, close: bool, panic: bool) -> (Vec<(u64, Erased)>, Option<Payload>) {
        let mut s = lock(&self.inner);
        if close {
            s.open = false;
        }
        let panic = if panic { s.panic.take() } else { None };
        (core::mem::take(&mut s.entries), panic)
    }
}
