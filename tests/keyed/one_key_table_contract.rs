//! Every keyed limiter through one trait, `KeyTable`: an operator's timer
//! holding limiters of every kind behind `dyn KeyTable` sweeps exactly the
//! idle keys of each, and counts them as each limiter counts them itself.
//!
//! The buckets and windows read one manual clock; the keyed allowance
//! (feature `tokio`) reads tokio's paused clock, on which it samples
//! demand every second, and with `forget_after` zero a key is idle once a
//! sample has passed and it has asked for nothing since.

use std::sync::Arc;
use std::time::Duration;

use tollgate::concurrency::KeyedConcurrencyLimiter;
use tollgate::{
    KeyTable, KeyedFixedWindow, KeyedLimiter, KeyedSlidingWindow, ManualClock, Quota, Tiered,
    WindowQuota,
};

const CAP: tollgate::MaxKeys = match tollgate::MaxKeys::new(8) {
    Ok(cap) => cap,
    Err(_) => panic!("not zero"),
};

/// One limiter behind the trait, and what the timer must see of it.
struct Row {
    name: &'static str,
    table: Arc<dyn KeyTable>,
    /// Its keys before, the keys dropped and its keys after, at each tick.
    ticks: [(usize, usize, usize); 2],
    /// Its keys created and evicted, after both ticks.
    lifetime: (u64, u64),
    max_keys: usize,
}

/// The operator's timer: sweeps each table in turn, knowing nothing of
/// what it is, and reports what it saw as the rows expect it.
fn tick(rows: &[Row]) -> Vec<(&'static str, (usize, usize, usize))> {
    rows.iter()
        .map(|row| {
            let before = row.table.len();
            let dropped = row.table.sweep();
            (row.name, (before, dropped, row.table.len()))
        })
        .collect()
}

fn expected(rows: &[Row], tick: usize) -> Vec<(&'static str, (usize, usize, usize))> {
    rows.iter().map(|row| (row.name, row.ticks[tick])).collect()
}

/// A keyed allowance whose keys a and b asked before its sample at 1 s and
/// c after it, at 1.5 s on tokio's paused clock. With `forget_after` zero,
/// a key is idle once a sample has passed and it has asked nothing since:
/// a and b now, c after the sample at 2 s.
#[cfg(feature = "tokio")]
async fn allowance() -> Option<Row> {
    use tollgate::shared::{FailurePolicy, KeyedAllowance, KeyedAllowanceConfig, LocalStore};

    let store = Arc::new(LocalStore::new(Quota::per_second(10).unwrap()));
    let config = KeyedAllowanceConfig {
        max_keys: CAP,
        sample_every: Duration::from_secs(1),
        forget_after: Duration::ZERO,
        ..KeyedAllowanceConfig::new(FailurePolicy::Closed)
    };
    let allowance = KeyedAllowance::new(store, config).unwrap();
    for key in ["a", "b"] {
        allowance.acquire(key, 1, Duration::ZERO).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    allowance.acquire("c", 1, Duration::ZERO).await.unwrap();
    Some(Row {
        name: "allowance",
        table: Arc::new(allowance),
        ticks: [(3, 2, 1), (1, 1, 0)],
        lifetime: (3, 3),
        max_keys: 8,
    })
}

#[cfg(not(feature = "tokio"))]
async fn allowance() -> Option<Row> {
    None
}

#[tokio::test(start_paused = true)]
async fn one_timer_sweeps_exactly_the_idle_keys_of_every_keyed_limiter() {
    let clock = ManualClock::new();
    let half = Duration::from_millis(500);
    // No automatic sweeps: only the timer drops keys here.
    let buckets = KeyedLimiter::builder(Quota::per_second(1).unwrap())
        .clock(clock.clone())
        .max_keys(CAP)
        .sweep_interval(None)
        .build::<&str>();
    // Ids from 100 are in the second tier, which refills once a minute.
    let tiers = Tiered::new(
        [Quota::per_second(1).unwrap(), Quota::per_minute(1).unwrap()].map(|quota| {
            KeyedLimiter::builder(quota)
                .clock(clock.clone())
                .max_keys(CAP)
                .sweep_interval(None)
                .build::<u32>()
        }),
        |id: &u32| usize::from(*id >= 100),
    );
    let fixed = KeyedFixedWindow::builder(WindowQuota::per_second(1).unwrap())
        .clock(clock.clone())
        .max_keys(CAP)
        .sweep_interval(None)
        .build_fixed::<&str>()
        .unwrap();
    let sliding = KeyedSlidingWindow::builder(WindowQuota::per_second(1).unwrap())
        .clock(clock.clone())
        .max_keys(CAP)
        .sweep_interval(None)
        .build_sliding::<&str>()
        .unwrap();
    let in_flight = KeyedConcurrencyLimiter::<&str>::with_max_keys(1, CAP).unwrap();

    // At 0 s: every bucket and window spent is empty; two keys hold work.
    for key in ["a", "b"] {
        buckets.try_acquire(&key, 1).unwrap();
        fixed.try_acquire(&key, 1).unwrap();
    }
    tiers.try_acquire(&1, 1).unwrap();
    tiers.try_acquire(&500, 1).unwrap();
    sliding.try_acquire(&"a", 1).unwrap();
    let permit_a = in_flight.try_acquire(&"a", 1).unwrap();
    let _permit_b = in_flight.try_acquire(&"b", 1).unwrap();
    // At 0.5 s.
    clock.advance(half);
    buckets.try_acquire(&"c", 1).unwrap();
    sliding.try_acquire(&"b", 1).unwrap();
    // At 1 s, the fixed window's second window.
    clock.advance(half);
    fixed.try_acquire(&"c", 1).unwrap();

    let rows: Vec<Row> = [
        Row {
            name: "buckets",
            table: Arc::new(buckets),
            // a and b full again at 1 s, c half a token short until 1.5 s.
            ticks: [(3, 2, 1), (1, 1, 0)],
            lifetime: (3, 3),
            max_keys: 8,
        },
        Row {
            name: "tiers",
            table: Arc::new(tiers),
            // 1 full again at 1 s; 500 not before a minute.
            ticks: [(2, 1, 1), (1, 0, 1)],
            lifetime: (2, 1),
            max_keys: 16,
        },
        Row {
            name: "fixed",
            table: Arc::new(fixed),
            // a and b's window ended at 1 s, c's at 2 s.
            ticks: [(3, 2, 1), (1, 1, 0)],
            lifetime: (3, 3),
            max_keys: 8,
        },
        Row {
            name: "sliding",
            table: Arc::new(sliding),
            // a and b weigh in the window after theirs too, until 2 s.
            ticks: [(2, 0, 2), (2, 2, 0)],
            lifetime: (2, 2),
            max_keys: 8,
        },
        Row {
            name: "in flight",
            table: Arc::new(in_flight),
            // Work in flight is never idle; a's entry goes with its permit
            // between the ticks.
            ticks: [(2, 0, 2), (1, 0, 1)],
            lifetime: (2, 1),
            max_keys: 8,
        },
    ]
    .into_iter()
    .chain(allowance().await)
    .collect();

    assert_eq!(tick(&rows), expected(&rows, 0));
    drop(permit_a);
    clock.advance(Duration::from_secs(1));
    // Past the allowance's sample at 2 s (a no-op without it).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(tick(&rows), expected(&rows, 1));

    // What each table says of itself agrees with what the timer saw.
    for row in &rows {
        let stats = row.table.table_stats();
        let name = row.name;
        assert_eq!((stats.created, stats.evicted), row.lifetime, "{name}");
        assert_eq!(stats.keys, row.table.len() as u64, "{name}");
        assert_eq!(stats.keys, stats.created - stats.evicted, "{name}");
        assert_eq!(
            (row.table.max_keys(), stats.max_keys),
            (row.max_keys, row.max_keys as u64),
            "{name}"
        );
        assert_eq!(row.table.is_empty(), row.ticks[1].2 == 0, "{name}");
        assert!(stats.sweeps >= 2, "{name}: {} sweeps", stats.sweeps);
    }
}
