//! [`Fifo`]: a `VecDeque` that a `const` can build, for the bookkeeping an empty `RankLocal`
//! holds (`RankLocal::new` is a `const fn`; `VecDeque::new` is `const` only from Rust 1.68 on, and
//! the crate builds on 1.65). Empty until the first push; an empty `VecDeque` allocates nothing
//! either way.

#![deny(unsafe_code)]

use std::collections::VecDeque;

/// A queue: `VecDeque`'s methods the crate uses, on a `VecDeque` made at the first push.
pub(crate) struct Fifo<T>(Option<VecDeque<T>>);

impl<T> Fifo<T> {
    /// An empty queue, usable in a `const`.
    pub(crate) const NEW: Fifo<T> = Fifo(None);

    #[inline]
    pub(crate) fn front(&self) -> Option<&T> {
        self.0.as_ref()?.front()
    }

    #[inline]
    pub(crate) fn back(&self) -> Option<&T> {
        self.0.as_ref()?.back()
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.0.as_ref()?.get(i)
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, VecDeque::len)
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn capacity(&self) -> usize {
        self.0.as_ref().map_or(0, VecDeque::capacity)
    }

    pub(crate) fn push_back(&mut self, t: T) {
        self.0.get_or_insert_with(VecDeque::new).push_back(t);
    }

    pub(crate) fn pop_front(&mut self) -> Option<T> {
        self.0.as_mut()?.pop_front()
    }

    pub(crate) fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        if let Some(q) = &mut self.0 {
            q.retain(keep);
        }
    }

    pub(crate) fn shrink_to(&mut self, capacity: usize) {
        if let Some(q) = &mut self.0 {
            q.shrink_to(capacity);
        }
    }

    /// As `VecDeque::partition_point`: the index of the first element for which `pred` is false.
    pub(crate) fn partition_point(&self, pred: impl FnMut(&T) -> bool) -> usize {
        self.0.as_ref().map_or(0, |q| q.partition_point(pred))
    }

    /// The elements, front first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().flatten()
    }

    /// Every element, front first, leaving the queue empty (and without its buffer).
    pub(crate) fn take_all(&mut self) -> VecDeque<T> {
        self.0.take().unwrap_or_default()
    }
}

impl<T> From<VecDeque<T>> for Fifo<T> {
    fn from(q: VecDeque<T>) -> Fifo<T> {
        Fifo(Some(q))
    }
}

impl<T> Default for Fifo<T> {
    fn default() -> Fifo<T> {
        Fifo::NEW
    }
}
