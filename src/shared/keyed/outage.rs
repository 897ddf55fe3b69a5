//! Whether cold keys should ask the store at all: after a failed cold call,
//! the next ones wait a backoff, as a `LocalAllowance` does after a failed
//! refill, so a store that is down is not asked once per request by every
//! cold key of the node.

use std::time::Duration;

use tokio::time::Instant;

use crate::jitter::JitterGenerator;
use crate::shared::pacing;
use crate::sync::{AtomicBool, Mutex, Ordering, lock};

/// The node's view of its store for cold keys.
#[derive(Debug)]
pub(crate) struct Outage {
    /// Read first on every cold decision, so a healthy store costs one
    /// load, no lock.
    down: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    failures: u32,
    /// No cold call before then.
    until: Instant,
    jitter: JitterGenerator,
}

impl Outage {
    pub(crate) fn new() -> Outage {
        Outage {
            down: AtomicBool::new(false),
            state: Mutex::new(State {
                failures: 0,
                until: Instant::now(),
                jitter: JitterGenerator::from_entropy(),
            }),
        }
    }

    /// Whether cold calls are held back now: the failure policy answers
    /// without asking the store.
    pub(crate) fn in_force(&self) -> bool {
        self.down.load(Ordering::Acquire) && Instant::now() < lock(&self.state).until
    }

    /// A cold call failed: hold cold calls back for a backoff that doubles
    /// with each failure in a row (`pacing::failure_backoff`, spread).
    pub(crate) fn failed(&self, lease_period: Duration) {
        let mut state = lock(&self.state);
        state.failures = state.failures.saturating_add(1);
        let backoff = pacing::failure_backoff(lease_period, state.failures);
        let pause = pacing::spread(backoff, pacing::MAX_PAUSE, &mut state.jitter);
        state.until = Instant::now() + pause;
        self.down.store(true, Ordering::Release);
    }

    /// A cold call got an answer: the store is up.
    pub(crate) fn answered(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            lock(&self.state).failures = 0;
        }
    }
}
