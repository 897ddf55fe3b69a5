//! Delay instead of denial, asynchronously: a reservation slept out on
//! tokio's timer, given back if the caller stops waiting.

use std::time::Duration;

use crate::error::AcquireError;
use crate::limit::sealed::Sealed;

/// [`Limit::acquire`](crate::Limit::acquire) for every limit: reserves `cost` within `max_wait`,
/// then sleeps the wait out. If the future is dropped before that (the
/// caller gave up), the reservation is undone: its tokens return to the
/// limit instead of being spent on work that will never start. A counted
/// limit counts the reservation when it is taken and the abandonment when
/// it is undone.
pub(crate) async fn acquire<L: Sealed + ?Sized>(
    limit: &L,
    cost: u64,
    max_wait: Duration,
) -> Result<(), AcquireError> {
    /// Undoes the reservation on drop unless disarmed.
    struct Pending<'a, L: Sealed + ?Sized>(&'a L, Option<crate::limit::Taken>);
    impl<L: Sealed + ?Sized> Drop for Pending<'_, L> {
        fn drop(&mut self) {
            if let Some(taken) = self.1.take() {
                self.0.undo(&taken);
            }
        }
    }
    let (taken, wait) = limit.take_within(cost, max_wait)?;
    let mut pending = Pending(limit, Some(taken));
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    pending.1 = None;
    Ok(())
}
