//! Thread ids: a small id per live thread, recycled when the thread exits,
//! and the stripe of a per-thread structure that id picks.
//!
//! Hand-written rather than taken from the `thread_local` crate: its slot
//! creation panics when reached from a thread-local destructor once its own
//! guard is gone (and a panic there aborts the process), while a limiter
//! must decide from anywhere, destructors included. Here the only
//! thread-local is ours, so `try_with` tells exactly when it is gone.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::sync::unmodelled::{Mutex, lock, thread_local};

/// Ids handed out so far, and those released by exited threads.
struct Ids {
    next: usize,
    /// Smallest first, so live threads keep the lowest ids and per-thread
    /// arrays stay dense.
    free: BinaryHeap<Reverse<usize>>,
}

static IDS: Mutex<Ids> = Mutex::new(Ids {
    next: 0,
    free: BinaryHeap::new(),
});

/// A thread's id, released when the thread's thread-locals are destroyed.
struct Held(usize);

impl Drop for Held {
    fn drop(&mut self) {
        lock(&IDS).free.push(Reverse(self.0));
    }
}

thread_local! {
    static ID: Held = Held({
        let mut ids = lock(&IDS);
        ids.free.pop().map_or_else(
            || {
                ids.next += 1;
                ids.next - 1
            },
            |Reverse(id)| id,
        )
    });
}

/// This thread's id: no other live thread has it, and a thread that gets it
/// after this one exits does so through the lock this one released it
/// under, so it sees everything this one wrote while holding it. `None`
/// while the thread's thread-locals are being destroyed.
#[inline]
pub(crate) fn current() -> Option<usize> {
    ID.try_with(|held| held.0).ok()
}

/// This thread's stripe among `stripes` (at least 1): live threads spread
/// evenly, and a thread always lands on the same stripe.
#[inline]
pub(crate) fn stripe(stripes: usize) -> usize {
    #[cfg(tollgate_loom)]
    if let Some(pinned) = PINNED.with(std::cell::Cell::get) {
        return pinned % stripes;
    }
    current().unwrap_or(0) % stripes
}

#[cfg(tollgate_loom)]
loom::thread_local! {
    /// Under loom, the stripe a model pins its thread to: loom's threads
    /// share one OS thread and so one id, and a model of two pools needs
    /// two threads on two stripes. A `Cell` of a `Copy`, so no destructor
    /// reaches for a static loom has already dropped.
    static PINNED: std::cell::Cell<Option<usize>> = std::cell::Cell::new(None);
}

/// Pins the calling loom thread to `stripe` of every striped structure
/// (for the loom models only).
#[cfg(tollgate_loom)]
pub fn pin_stripe(stripe: usize) {
    PINNED.with(|pinned| pinned.set(Some(stripe)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_threads_have_distinct_ids_and_exited_ones_release_theirs() {
        let barrier = std::sync::Barrier::new(4);
        let ids: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let id = current().expect("a live thread has an id");
                        barrier.wait(); // all four alive at once
                        id
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "{ids:?}");
        // Exited threads release their ids: a hundred threads, one after
        // the other, take far fewer than a hundred new ones (other tests'
        // threads may take some meanwhile).
        let before = lock(&IDS).next;
        for _ in 0..100 {
            std::thread::spawn(|| current().unwrap()).join().unwrap();
        }
        let grown = lock(&IDS).next - before;
        assert!(grown < 50, "{grown} new ids for 100 threads in turn");
    }
}
