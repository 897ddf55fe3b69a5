//! Delay instead of denial, asynchronously: a reservation slept out on
//! tokio's timer, given back if the caller stops waiting.

use std::time::Duration;

/// Sleeps `wait` on tokio's timer, then returns. If the future is dropped
/// before that (the caller gave up), `give_back` runs: the reservation's
/// tokens return to the bucket instead of being spent on work that will
/// never start.
pub(crate) async fn sleep_or_give_back(wait: Duration, give_back: impl FnOnce()) {
    /// Runs the give-back on drop unless disarmed.
    struct Pending<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Pending<F> {
        fn drop(&mut self) {
            if let Some(give_back) = self.0.take() {
                give_back();
            }
        }
    }
    let mut pending = Pending(Some(give_back));
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    pending.0 = None;
}
