//! Which stripe of a per-thread structure this thread uses.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Hands each thread an index, round robin, once.
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
}

/// This thread's stripe among `stripes` (at least 1): threads spread
/// evenly, and a thread always lands on the same stripe.
#[inline]
pub(crate) fn of(stripes: usize) -> usize {
    INDEX.with(|index| *index) % stripes
}
