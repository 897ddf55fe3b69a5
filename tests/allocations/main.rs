//! What the crate allocates, counted by a process-wide allocator: the bytes
//! a hostile key holds in a keyed table, and the heap allocations of a
//! request through the tower layer (none beyond the inner service's).
//!
//! The counter sees every thread of the process, so each test takes
//! [`alone`] first: no other test of this binary runs beside it.

use std::alloc::System;
use std::sync::{Mutex, MutexGuard};

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Held for the whole of a test that reads the counter.
fn alone() -> MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    // A test that failed while holding it leaves nothing half done here.
    ALONE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(feature = "tower")]
mod admitted_request_allocates_nothing;
mod keyed_bytes_bounded;
