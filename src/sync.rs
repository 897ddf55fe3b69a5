//! The atomics the lock-free state machines are built from, and the one
//! lock the keyed limiter's cap waits on when its table is full.
//!
//! Under `--cfg tollgate_loom` these are loom's instrumented types, so the
//! models in `loom-tests/` explore the interleavings of the real code rather
//! than of a copy. A project-specific cfg (not `loom`) keeps dependencies that
//! test `cfg(loom)` themselves unchanged.

// The whole set, whichever of them a build's features leave in use, so that
// a model can swap in any of them.
#[cfg(tollgate_loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicU64, AtomicUsize, Ordering},
};
#[cfg(not(tollgate_loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicU64, AtomicUsize, Ordering},
};

/// Locks `mutex` (std's, never modelled), using the data even if a thread panicked while holding it:
/// every mutex in this crate guards plain numbers that a panic elsewhere
/// cannot leave inconsistent in a way that matters.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
