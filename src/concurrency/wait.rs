//! Async waiting for room (feature `tokio`): waiters park on an
//! `event_listener::Event`, and every release that finds a waiter wakes them
//! all to retry.
//!
//! The lost-wake-up window is closed by a handshake on two words, each side
//! writing one and then reading the other, all four accesses `SeqCst`:
//!
//! - a waiter increments `count` (then listens) and then re-reads the units
//!   in flight;
//! - a release subtracts its units and then reads `count`.
//!
//! In the single `SeqCst` order one of the two writes comes first, so either
//! the waiter's re-read sees the release (and it takes the units), or the
//! release sees the waiter and notifies. A waiter counted but not yet
//! listening when the notify runs is covered by the event's own mutex: the
//! notify's critical section then precedes the waiter's `listen`, so the
//! release happens before the re-read that follows it.
//!
//! Why a count of our own: `Event::notify` in event-listener 5 emits a
//! `SeqCst` fence and takes the event's mutex even when nobody listens (and
//! allocates the event's state on first use). Reading `count` first keeps a
//! release with no waiter to a `fetch_sub` and one load of a line that only
//! changes when someone starts or stops waiting.
//!
//! Every release with waiters wakes all of them, not `weight` of them: a
//! woken waiter too heavy for the freed units would otherwise swallow a
//! wake-up a lighter one could have used. The price is a herd of retries per
//! release when many tasks wait.

use event_listener::Event;
use std::time::Duration;

use tokio::time::{Instant, timeout_at};

use super::InFlightError;
use crate::sync::{AtomicUsize, Ordering};

/// The tasks waiting for room on one limiter.
#[derive(Debug)]
pub(crate) struct Waiters {
    /// Tasks between their first refusal and their return from `wait`.
    count: AtomicUsize,
    event: Event,
}

/// A task counted in [`Waiters::count`], uncounted on drop, so that a
/// cancelled wait (its future dropped) stops costing releases a notify.
struct Registered<'a>(&'a AtomicUsize);

impl<'a> Registered<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Registered(count)
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        // A release that still sees this task merely notifies for nothing.
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Waiters {
    pub(crate) fn new() -> Self {
        Waiters {
            count: AtomicUsize::new(0),
            event: Event::new(),
        }
    }

    /// Wakes every waiter, if there is one. Called after each release's
    /// `SeqCst` subtraction (the release half of the handshake).
    #[inline]
    pub(crate) fn released(&self) {
        if self.count.load(Ordering::SeqCst) != 0 {
            self.wake_all();
        }
    }

    #[cold]
    fn wake_all(&self) {
        self.event.notify(usize::MAX);
    }

    /// Calls `attempt` until it returns anything but `Full`, sleeping
    /// between attempts until a release or the end of `max_wait`, whichever
    /// is first. A `max_wait` past the end of the timer's range waits for a
    /// release only (no `Instant` arithmetic can overflow).
    ///
    /// `attempt` takes the ordering of its first load: a retry after
    /// registering must read `SeqCst` (the waiter half of the handshake).
    /// Nothing is taken except by a successful `attempt`, whose permit is
    /// returned in the same poll, so dropping the future at any await point
    /// leaves the limiter as it was.
    pub(crate) async fn wait<P>(
        &self,
        max_wait: Duration,
        mut attempt: impl FnMut(Ordering) -> Result<P, InFlightError>,
    ) -> Result<P, InFlightError> {
        match attempt(Ordering::Acquire) {
            Err(InFlightError::Full { .. }) => {}
            decided => return decided,
        }
        let deadline = Instant::now().checked_add(max_wait);
        let _registered = Registered::new(&self.count);
        loop {
            let listener = self.event.listen();
            // The re-try after registering and listening: a release that
            // landed before either is seen here, one after them notifies
            // `listener`.
            match attempt(Ordering::SeqCst) {
                Err(InFlightError::Full { .. }) => {}
                decided => return decided,
            }
            match deadline {
                Some(deadline) => {
                    if timeout_at(deadline, listener).await.is_err() {
                        return Err(InFlightError::Timeout);
                    }
                }
                None => listener.await,
            }
        }
    }
}
