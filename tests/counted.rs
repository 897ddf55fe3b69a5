//! Decision counters: exact under racing threads, and exported through the
//! `metrics` facade.

use std::time::Duration;

use tollgate::{Counted, KeyedLimiter, ManualClock, Quota, TokenBucket};

mod common;
use common::race;

#[test]
fn counts_are_exact_under_racing_threads() {
    const CAPACITY: u64 = 1_000;
    for threads in [2, 4, 8] {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(1));
        let bucket = Counted::new(TokenBucket::with_clock(
            Quota::per_second(CAPACITY).unwrap(),
            clock,
        ));
        let admitted: u64 = race(threads, |_| {
            (0..500).filter(|_| bucket.try_acquire(1).is_ok()).count() as u64
        })
        .iter()
        .sum();
        let attempts = 500 * threads as u64;
        let stats = bucket.stats();
        assert_eq!(admitted, CAPACITY.min(attempts));
        assert_eq!((stats.admitted, stats.admitted_cost), (admitted, admitted));
        assert_eq!(
            (stats.denied, stats.denied_cost),
            (attempts - admitted, attempts - admitted)
        );
        assert_eq!(stats.rejected, 0);
    }
}

#[test]
fn keyed_decisions_are_counted_with_their_costs() {
    let limiter = Counted::new(
        KeyedLimiter::builder(Quota::per_second(5).unwrap())
            .clock(ManualClock::new())
            .build::<u32>(),
    );
    limiter.try_acquire(&1, 3).unwrap();
    limiter.try_acquire(&1, 3).unwrap_err();
    limiter.try_acquire(&2, 0).unwrap_err();
    let stats = limiter.stats();
    assert_eq!((stats.admitted, stats.admitted_cost), (1, 3));
    assert_eq!((stats.denied, stats.denied_cost), (1, 3));
    assert_eq!(stats.rejected, 1);
}

#[cfg(feature = "metrics")]
mod export {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };
    use tollgate::{Counted, ManualClock, Quota, TokenBucket};

    /// A recorder that keeps each counter's value, by name.
    #[derive(Default)]
    struct Values(Mutex<BTreeMap<String, Arc<Value>>>);

    #[derive(Default)]
    struct Value(AtomicU64);

    impl CounterFn for Value {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::SeqCst);
        }
        fn absolute(&self, value: u64) {
            self.0.store(value, Ordering::SeqCst);
        }
    }

    impl Recorder for Values {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let mut values = self.0.lock().unwrap();
            let value = values.entry(key.name().to_owned()).or_default();
            Counter::from_arc(Arc::clone(value))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn export_publishes_absolute_counts() {
        let recorder = Values::default();
        let bucket = Counted::new(TokenBucket::with_clock(
            Quota::per_second(2).unwrap(),
            ManualClock::new(),
        ));
        bucket.try_acquire(2).unwrap();
        bucket.try_acquire(1).unwrap_err();
        metrics::with_local_recorder(&recorder, || {
            bucket.export("api");
            bucket.export("api"); // absolute: exporting twice counts nothing twice
        });
        let values = recorder.0.lock().unwrap();
        let read = |name: &str| values[name].0.load(Ordering::SeqCst);
        assert_eq!(read("api_admitted_total"), 1);
        assert_eq!(read("api_admitted_cost_total"), 2);
        assert_eq!(read("api_denied_total"), 1);
        assert_eq!(read("api_denied_cost_total"), 1);
        assert_eq!(read("api_rejected_total"), 0);
    }
}
