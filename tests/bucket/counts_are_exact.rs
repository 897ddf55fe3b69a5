//! Decision counters: exact under racing threads, and exported through the
//! `metrics` facade.

use std::time::Duration;

#[cfg(feature = "keyed")]
use tollgate::KeyedLimiter;
use tollgate::{Counted, Limit, ManualClock, Quota, TokenBucket};

use common::{Interleaving, race, until_interleaved};
use tollgate_test_support::common;

#[test]
fn counts_are_exact_under_racing_threads() {
    const CAPACITY: u64 = 1_000;
    for threads in [2, 4, 8] {
        // Shown to race: a round counts only if the decisions of two
        // threads interleaved (`common::Interleaving`).
        until_interleaved(1, |_| {
            let clock = ManualClock::new();
            clock.set(Duration::from_secs(1));
            let bucket = Counted::new(TokenBucket::with_clock(
                Quota::per_second(CAPACITY).unwrap(),
                clock,
            ));
            let order = Interleaving::default();
            let tallies = race(threads, |_| {
                let mut me = order.worker();
                let mut admitted = 0;
                for _ in 0..500 {
                    if bucket.try_acquire(1).is_ok() {
                        admitted += 1;
                    }
                    me.step();
                }
                (admitted, me.interleaved())
            });
            let admitted: u64 = tallies.iter().map(|t| t.0).sum();
            let attempts = 500 * threads as u64;
            let stats = bucket.stats();
            assert_eq!(admitted, CAPACITY.min(attempts));
            assert_eq!((stats.admitted, stats.admitted_cost), (admitted, admitted));
            assert_eq!(
                (stats.denied, stats.denied_cost),
                (attempts - admitted, attempts - admitted)
            );
            assert_eq!(stats.rejected, 0);
            tallies.iter().any(|t| t.1)
        });
    }
}

#[test]
fn counts_survive_threads_that_exit() {
    // Threads come and go (a pool recycling its workers): an exited
    // thread's stripe passes to the next thread given its id, counts intact.
    let bucket = Counted::new(TokenBucket::with_clock(
        Quota::per_second(1_000_000).unwrap(),
        ManualClock::new(),
    ));
    for round in 0..16u64 {
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..10 {
                        bucket.try_acquire(2).unwrap();
                    }
                });
            }
        });
        let stats = bucket.stats();
        assert_eq!(stats.admitted, 30 * (round + 1));
        assert_eq!(stats.admitted_cost, 60 * (round + 1));
    }
}

/// A thread-local whose destructor decides through a counted limiter.
struct DecidesOnDrop(std::cell::RefCell<Option<std::sync::Arc<Counted<TokenBucket<ManualClock>>>>>);

impl Drop for DecidesOnDrop {
    fn drop(&mut self) {
        if let Some(bucket) = self.0.borrow_mut().take() {
            bucket.try_acquire(1).unwrap();
        }
    }
}

thread_local! {
    static DECIDES_ON_DROP: DecidesOnDrop = const { DecidesOnDrop(std::cell::RefCell::new(None)) };
}

#[test]
fn decisions_from_thread_local_destructors_are_counted() {
    use std::sync::Arc;

    let bucket = Arc::new(Counted::new(TokenBucket::with_clock(
        Quota::per_second(100).unwrap(),
        ManualClock::new(),
    )));
    // Both orders of thread-local destruction: the destructor registered
    // after the thread's first decision, and before it (so that it runs
    // once the thread's own id is gone).
    for decide_first in [true, false] {
        let bucket_in_thread = Arc::clone(&bucket);
        std::thread::spawn(move || {
            if decide_first {
                bucket_in_thread.try_acquire(1).unwrap();
            }
            DECIDES_ON_DROP.with(|slot| *slot.0.borrow_mut() = Some(Arc::clone(&bucket_in_thread)));
            if !decide_first {
                bucket_in_thread.try_acquire(1).unwrap();
            }
        })
        .join()
        .expect("a decision in a thread-local destructor must not panic");
    }
    let stats = bucket.stats();
    assert_eq!((stats.admitted, stats.admitted_cost), (4, 4));
}

#[test]
fn more_live_threads_than_stripes_count_exactly() {
    // Far more threads than stripes, all alive at once: those beyond the
    // stripes share one, with read-modify-writes.
    let bucket = Counted::new(TokenBucket::with_clock(
        Quota::per_second(1_000_000).unwrap(),
        ManualClock::new(),
    ));
    let threads = 8 * std::thread::available_parallelism().map_or(1, usize::from) + 20;
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..100 {
                    bucket.try_acquire(1).unwrap();
                }
            });
        }
    });
    assert_eq!(bucket.stats().admitted, 100 * threads as u64);
}

#[cfg(feature = "keyed")]
#[test]
fn keyed_decisions_are_counted_with_their_costs() {
    let limiter = Counted::new(
        KeyedLimiter::builder(Quota::per_second(5).unwrap())
            .clock(ManualClock::new())
            .build::<u32>(),
    );
    limiter.key(&1).try_acquire(3).unwrap();
    limiter.key(&1).try_acquire(3).unwrap_err();
    limiter.key(&2).try_acquire(0).unwrap_err();
    let stats = limiter.stats();
    assert_eq!((stats.admitted, stats.admitted_cost), (1, 3));
    assert_eq!((stats.denied, stats.denied_cost), (1, 3));
    assert_eq!(stats.rejected, 1);
}

#[test]
fn reservations_count_their_waits_and_refusals() {
    let bucket = Counted::new(TokenBucket::with_clock(
        Quota::per_second(4).unwrap(),
        ManualClock::new(),
    ));
    let second = Duration::from_secs(1);
    assert_eq!(bucket.reserve(4, second), Ok(Duration::ZERO));
    assert_eq!(bucket.reserve(1, second), Ok(Duration::from_millis(250)));
    assert_eq!(bucket.reserve(2, second), Ok(Duration::from_millis(750)));
    // Beyond the longest wait: refused, spending nothing.
    assert!(bucket.reserve(2, second).is_err());
    let stats = bucket.stats();
    assert_eq!((stats.admitted, stats.admitted_cost), (3, 7));
    assert_eq!((stats.denied, stats.denied_cost), (1, 2));
    // A zero wait is no delay.
    assert_eq!((stats.delayed, stats.delay_nanos), (2, 1_000_000_000));
    assert_eq!(stats.abandoned, 0);
}

#[cfg(feature = "tokio")]
#[tokio::test(start_paused = true)]
async fn an_abandoned_wait_is_counted_and_its_tokens_return() {
    let clock = ManualClock::new();
    let limiter = Counted::new(
        KeyedLimiter::builder(Quota::per_second(2).unwrap())
            .clock(clock.clone())
            .build::<u32>(),
    );
    limiter.key(&1).try_acquire(2).unwrap();
    // Two more tokens: a one-second wait, given up after 100 ms.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        limiter.key(&1).acquire(2, Duration::from_secs(5)),
    )
    .await;
    assert!(gave_up.is_err());
    let stats = limiter.stats();
    assert_eq!((stats.delayed, stats.delay_nanos), (1, 1_000_000_000));
    assert_eq!(stats.abandoned, 1);
    // Admitted when reserved; the abandoned one gave its tokens back.
    assert_eq!((stats.admitted, stats.admitted_cost), (2, 4));
    // The reservation went back: a second from now the bucket is full again.
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.inner().available(&1), 2);
    // A wait that completes counts as admitted and delayed, not abandoned.
    limiter.key(&1).try_acquire(2).unwrap();
    limiter
        .key(&1)
        .acquire(1, Duration::from_secs(1))
        .await
        .unwrap();
    let stats = limiter.stats();
    assert_eq!((stats.admitted, stats.delayed, stats.abandoned), (4, 2, 1));
}

#[cfg(feature = "keyed")]
#[test]
fn the_key_table_counts_sweeps_evictions_and_overflow() {
    use std::num::NonZeroUsize;
    use tollgate::{AtCapacity, KeyTableStats, try_acquire_all};

    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap())
        .clock(clock.clone())
        .max_keys(NonZeroUsize::new(2).unwrap().into())
        .at_capacity(AtCapacity::SharedOverflow)
        .build::<u32>();
    limiter.try_acquire(&1, 1).unwrap();
    limiter.try_acquire(&2, 1).unwrap();
    // The table is full: key 3's arrival sweeps automatically, nothing has
    // refilled, so the overflow bucket serves it.
    limiter.try_acquire(&3, 1).unwrap();
    assert_eq!(
        limiter.table_stats(),
        KeyTableStats {
            keys: 2,
            max_keys: 2,
            created: 2,
            sweeps: 1,
            evicted: 0,
            overflowed: 1,
            cached: 0,
        }
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), 2);
    // A key created for a chain that a later limit refuses is dropped again.
    let empty = TokenBucket::with_clock(Quota::per_second(1).unwrap(), clock.clone());
    empty.try_acquire(1).unwrap();
    assert!(try_acquire_all(&[limiter.key(&4).cost(1), empty.cost(1)]).is_err());
    let stats = limiter.table_stats();
    assert_eq!((stats.keys, stats.sweeps, stats.evicted), (0, 2, 3));
    assert_eq!(stats.created, stats.keys + stats.evicted);
}

#[cfg(feature = "metrics")]
mod export {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder,
        SharedString, Unit,
    };
    use tollgate::{Counted, Limit, ManualClock, Quota, TokenBucket};
    #[cfg(feature = "tokio")]
    use tollgate::{KeyedLimiter, shared::AllowanceStats};

    /// A recorder that keeps each counter's and gauge's value, by name
    /// (a gauge's as whole units).
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

    impl GaugeFn for Value {
        fn increment(&self, value: f64) {
            self.0.fetch_add(value as u64, Ordering::SeqCst);
        }
        fn decrement(&self, value: f64) {
            self.0.fetch_sub(value as u64, Ordering::SeqCst);
        }
        fn set(&self, value: f64) {
            self.0.store(value as u64, Ordering::SeqCst);
        }
    }

    impl Values {
        fn value(&self, key: &Key) -> Arc<Value> {
            let mut values = self.0.lock().unwrap();
            Arc::clone(values.entry(key.name().to_owned()).or_default())
        }

        fn read(&self, name: &str) -> u64 {
            self.0.lock().unwrap()[name].0.load(Ordering::SeqCst)
        }
    }

    impl Recorder for Values {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(self.value(key))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(self.value(key))
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
            bucket.stats().export("api");
            bucket.stats().export("api"); // absolute: exporting twice counts nothing twice
        });
        let read = |name: &str| recorder.read(name);
        assert_eq!(read("api_admitted_total"), 1);
        assert_eq!(read("api_admitted_cost_total"), 2);
        assert_eq!(read("api_denied_total"), 1);
        assert_eq!(read("api_denied_cost_total"), 1);
        assert_eq!(read("api_rejected_total"), 0);
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn table_and_allowance_snapshots_export_counters_and_gauges() {
        let recorder = Values::default();
        let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap())
            .clock(ManualClock::new())
            .build::<u32>();
        limiter.try_acquire(&1, 1).unwrap();
        limiter.sweep();
        let allowance = AllowanceStats {
            leases: 3,
            leased: 70,
            returned: 5,
            stranded: 2,
            store_errors: 1,
            failed_open: 4,
            fallback: 6,
            largest_lease: 40,
            pooled: 9,
        };
        metrics::with_local_recorder(&recorder, || {
            limiter.table_stats().export("per_client");
            allowance.export("budget");
        });
        let read = |name: &str| recorder.read(name);
        assert_eq!(read("per_client_keys"), 1);
        assert_eq!(read("per_client_max_keys"), 1 << 20);
        assert_eq!(read("per_client_created_total"), 1);
        assert_eq!(read("per_client_sweeps_total"), 1);
        assert_eq!(read("per_client_evicted_total"), 0);
        assert_eq!(read("per_client_overflowed_total"), 0);
        for (name, value) in [
            ("budget_leases_total", 3),
            ("budget_leased_tokens_total", 70),
            ("budget_returned_tokens_total", 5),
            ("budget_stranded_tokens_total", 2),
            ("budget_store_errors_total", 1),
            ("budget_failed_open_tokens_total", 4),
            ("budget_fallback_tokens_total", 6),
            ("budget_largest_lease_tokens", 40),
            ("budget_pooled_tokens", 9),
        ] {
            assert_eq!(read(name), value, "{name}");
        }
    }
}
