//! Every synchronization primitive the crate uses, from one place (as
//! crossbeam's `primitive` module does): atomics, `Arc`, `Mutex` and its
//! poison-tolerant lock, and the swappable `Arc` of a changed bucket's
//! state ([`swap`]).
//!
//! Under `--cfg tollgate_loom` these are loom's instrumented types, so the
//! models in `loom-tests/` explore the interleavings of the real code rather
//! than of a copy, and any structure built on them can be given a model. A
//! project-specific cfg (not `loom`) keeps dependencies that test
//! `cfg(loom)` themselves unchanged.
//!
//! What loom cannot stand in for is in [`unmodelled`], std's in every build.
//! Outside this module: tokio's `Notify` and channels stay tokio's (the
//! async layers are tested on tokio's paused clock, not under loom), and the
//! unit tests' own barriers and counters stay std's (they are the test's
//! instruments, not the code under test).

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

// Only the keyed limiter's overflow bucket takes a read-write lock (while
// its quota changes), and only its quota slots a fence.
#[cfg(all(tollgate_loom, feature = "keyed"))]
pub(crate) use loom::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, atomic::fence};
#[cfg(all(not(tollgate_loom), feature = "keyed"))]
pub(crate) use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, atomic::fence};

// Only the local allowance, the keyed allowance's outage flag and the keyed
// concurrency limiter's stale-entry flag use a boolean word.
#[cfg(all(tollgate_loom, any(feature = "tokio", feature = "keyed")))]
pub(crate) use loom::sync::atomic::AtomicBool;
#[cfg(all(not(tollgate_loom), any(feature = "tokio", feature = "keyed")))]
pub(crate) use std::sync::atomic::AtomicBool;

// Only the local allowance keeps a float in a word: its smoothed demand.
#[cfg(all(not(tollgate_loom), feature = "tokio"))]
pub(crate) use atomic_float::AtomicF64;
#[cfg(all(tollgate_loom, feature = "tokio"))]
pub(crate) use modelled_float::AtomicF64;

/// The models' stand-in for atomic_float's `AtomicF64`, whose word is
/// core's `AtomicU64` and so invisible to loom: the same methods, on loom's
/// `AtomicU64`, so that a model schedules every access.
#[cfg(all(tollgate_loom, feature = "tokio"))]
mod modelled_float {
    use super::{AtomicU64, Ordering};

    #[derive(Debug)]
    pub(crate) struct AtomicF64(AtomicU64);

    impl AtomicF64 {
        pub(crate) fn new(value: f64) -> Self {
            AtomicF64(AtomicU64::new(value.to_bits()))
        }

        pub(crate) fn load(&self, order: Ordering) -> f64 {
            f64::from_bits(self.0.load(order))
        }

        pub(crate) fn store(&self, value: f64, order: Ordering) {
            self.0.store(value.to_bits(), order);
        }
    }
}

/// Locks `mutex`, using the data even if a thread panicked while holding
/// it: every mutex in this crate guards plain numbers (or nothing, as a
/// bucket's quota changes, serialised by one) that a panic elsewhere cannot
/// leave inconsistent in a way that matters. loom's mutexes never report
/// poisoning (a panic ends the model instead), so the same call serves
/// both builds.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    unpoisoned(mutex.lock())
}

/// [`lock`] for reading a read-write lock.
#[cfg(feature = "keyed")]
pub(crate) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    unpoisoned(lock.read())
}

/// [`lock`] for writing a read-write lock.
#[cfg(feature = "keyed")]
pub(crate) fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    unpoisoned(lock.write())
}

/// The guard of a lock, poisoned or not.
fn unpoisoned<G>(locked: std::sync::LockResult<G>) -> G {
    locked.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An `Option<Arc<T>>` that one thread swaps while others read it: a
/// changed bucket's current state and each state's successor.
///
/// arc-swap's `ArcSwapOption` in every build but the models: its loads
/// borrow the pointer through per-thread slots instead of incrementing the
/// shared reference count, so readers on many threads do not contend. Its
/// internals are std's atomics, which loom cannot schedule; under
/// `--cfg tollgate_loom` it is a loom `Mutex<Option<Arc<T>>>` whose load
/// clones the `Arc`: the same interface and the same guarantee (a load
/// sees the latest store, and everything written before it), with every
/// access a point loom can interleave.
pub(crate) mod swap {
    #[cfg(not(tollgate_loom))]
    pub(crate) use arc_swap::ArcSwapOption as Swap;

    /// What a load returns: the `Option<Arc<T>>`, borrowed or cloned.
    #[cfg(not(tollgate_loom))]
    pub(crate) type Loaded<T> = arc_swap::Guard<Option<super::Arc<T>>>;
    #[cfg(tollgate_loom)]
    pub(crate) type Loaded<T> = Option<super::Arc<T>>;

    /// The models' stand-in for arc-swap's `ArcSwapOption`.
    #[cfg(tollgate_loom)]
    #[derive(Debug)]
    pub(crate) struct Swap<T>(super::Mutex<Option<super::Arc<T>>>);

    #[cfg(tollgate_loom)]
    impl<T> Swap<T> {
        pub(crate) fn empty() -> Self {
            Swap(super::Mutex::new(None))
        }

        pub(crate) fn load(&self) -> Loaded<T> {
            super::lock(&self.0).clone()
        }

        pub(crate) fn store(&self, value: Option<super::Arc<T>>) {
            *super::lock(&self.0) = value;
        }
    }
}

/// What loom cannot model: std's types in every build.
///
/// loom has no `Weak`, and its `Arc` can be neither a method receiver
/// (`self: &Arc<Self>`) nor unsized into a trait object; nor is it the `Arc`
/// a caller hands in. Shared ownership that needs any of these is std's;
/// what it shares is built on the modelled atomics all the same.
pub(crate) mod unmodelled {
    pub(crate) use std::sync::{Arc, Weak};

    /// The coarse clock's time: written by the clock's own OS thread,
    /// which no model can schedule.
    pub(crate) use std::sync::atomic::AtomicU64;

    /// The thread-id registry's lock and thread-local. An exiting thread
    /// releases its id from a thread-local destructor, and loom drops its
    /// statics before the main model thread's thread-locals, so a modelled
    /// registry would be gone when that thread releases into it. loom's
    /// threads share one OS thread, so under loom they share one id: the
    /// striped models are written for that.
    pub(crate) use std::sync::{Mutex, MutexGuard};
    pub(crate) use std::thread_local;

    /// [`lock`](super::lock), for the unmodelled mutex.
    pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
        super::unpoisoned(mutex.lock())
    }

    /// The Redis scripts, compiled once per process.
    #[cfg(feature = "redis")]
    pub(crate) use std::sync::LazyLock;
}
