//! Async acquire: delay instead of denial on tokio's (paused) timer, first
//! come first served, and reservations given back when the caller stops
//! waiting.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tollgate::{AcquireError, KeyedLimiter, Limit, ManualClock, Quota, TokenBucket};

const MS: Duration = Duration::from_millis(1);

/// Four tokens, refilled at 4/s (one every 250 ms), spent.
fn drained() -> Arc<TokenBucket<ManualClock>> {
    let bucket = TokenBucket::with_clock(Quota::per_second(4).unwrap(), ManualClock::new());
    bucket.try_acquire(4).unwrap();
    Arc::new(bucket)
}

#[tokio::test(start_paused = true)]
async fn a_caller_waits_exactly_its_reservation() {
    let bucket = drained();
    let started = Instant::now();
    bucket.acquire(2, Duration::from_secs(1)).await.unwrap();
    assert_eq!(started.elapsed(), 500 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_wait_beyond_max_wait_is_refused_at_once_and_spends_nothing() {
    let bucket = drained();
    let started = Instant::now();
    let refused = bucket.acquire(4, 500 * MS).await;
    assert_eq!(
        refused,
        Err(AcquireError::Insufficient {
            retry_after: 500 * MS
        })
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(bucket.retry_after(1), Ok(250 * MS));
}

/// A large request is not starved by small ones: its slot is fixed when it
/// calls, and the small requests that follow are scheduled after it.
#[tokio::test(start_paused = true)]
async fn first_come_first_served() {
    let bucket = drained();
    let started = Instant::now();
    let big = {
        let bucket = Arc::clone(&bucket);
        tokio::spawn(async move {
            bucket.acquire(4, Duration::from_secs(2)).await.unwrap();
            started.elapsed()
        })
    };
    tokio::task::yield_now().await;
    let small: Vec<_> = (0..3)
        .map(|_| {
            let bucket = Arc::clone(&bucket);
            tokio::spawn(async move {
                bucket.acquire(1, Duration::from_secs(2)).await.unwrap();
                started.elapsed()
            })
        })
        .collect();
    let big = big.await.unwrap();
    assert_eq!(big, Duration::from_secs(1));
    let mut waits = Vec::new();
    for task in small {
        waits.push(task.await.unwrap());
    }
    assert_eq!(waits, [1250 * MS, 1500 * MS, 1750 * MS]);
}

/// A caller that gives up before its wait ends gives its reservation back:
/// exactly, when nothing was reserved after it.
#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_gives_the_reservation_back() {
    let bucket = drained();
    let before = bucket.retry_after(1).unwrap();
    let waiting = {
        let bucket = Arc::clone(&bucket);
        tokio::spawn(async move { bucket.acquire(3, Duration::from_secs(1)).await })
    };
    tokio::time::sleep(100 * MS).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert_eq!(bucket.retry_after(1), Ok(before));
    // A timeout around the call is the same cancellation.
    let timed_out = tokio::time::timeout(100 * MS, bucket.acquire(3, Duration::from_secs(1))).await;
    assert!(timed_out.is_err());
    assert_eq!(bucket.retry_after(1), Ok(before));
}

#[tokio::test(start_paused = true)]
async fn keyed_waits_are_per_key_and_cancellable() {
    let limiter = Arc::new(
        KeyedLimiter::builder(Quota::per_second(2).unwrap())
            .clock(ManualClock::new())
            .build::<u32>(),
    );
    limiter.try_acquire(&1, 2).unwrap();
    let started = Instant::now();
    // Key 2 is untouched: no wait.
    limiter.acquire(&2, 2, Duration::ZERO).await.unwrap();
    limiter
        .acquire(&1, 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), 500 * MS);
    let before = limiter.retry_after(&1, 1).unwrap();
    let timed_out =
        tokio::time::timeout(100 * MS, limiter.acquire(&1, 2, Duration::from_secs(2))).await;
    assert!(timed_out.is_err());
    assert_eq!(limiter.retry_after(&1, 1), Ok(before));
}
