//! Delay instead of denial, asynchronously: a reservation slept out on
//! tokio's timer, given back if the caller stops waiting.

use std::time::Duration;

/// Told what becomes of an async acquire's reservation. The plain limiters
/// pass `()`, whose empty methods compile away; [`Counted`](crate::Counted)
/// passes its counters.
pub(crate) trait WaitObserver {
    /// Tokens were reserved, to be used after `wait` (perhaps zero).
    fn reserved(&self, _wait: Duration) {}
    /// The caller stopped waiting: the reservation was given back.
    fn abandoned(&self) {}
}

impl WaitObserver for () {}

/// Sleeps `wait` on tokio's timer, then returns. If the future is dropped
/// before that (the caller gave up), `give_back` runs: the reservation's
/// tokens return to the bucket instead of being spent on work that will
/// never start.
pub(crate) async fn sleep_or_give_back(
    wait: Duration,
    observer: &impl WaitObserver,
    give_back: impl FnOnce(),
) {
    /// Runs the give-back on drop unless disarmed.
    struct Pending<'a, O: WaitObserver, F: FnOnce()>(&'a O, Option<F>);
    impl<O: WaitObserver, F: FnOnce()> Drop for Pending<'_, O, F> {
        fn drop(&mut self) {
            if let Some(give_back) = self.1.take() {
                give_back();
                self.0.abandoned();
            }
        }
    }
    observer.reserved(wait);
    let mut pending = Pending(observer, Some(give_back));
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    pending.1 = None;
}
