//! `RedisStore` against real `redis-server`s, one private server per test
//! (see `support/redis_server.rs`: without `redis-server` a test is skipped
//! with a notice locally, and fails under CI).
//!
//! Time is the server's: bounds that depend on elapsed time are computed
//! from `TIME` readings taken before and after the calls under test, which
//! bracket the readings the scripts take from the same clock. No test
//! asserts that anything is fast, except that a call to a dead server
//! returns (with an error) within its timeout plus a generous margin.

use tollgate_test_support::redis_server;
use tollgate_test_support::start_server;

use tollgate_test_support::fake_redis;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fake_redis::{FakeRedis, ScriptAnswer};
use redis::aio::MultiplexedConnection;
use redis_server::RedisServer;
use tollgate::Quota;
use tollgate::shared::{Lease, RedisConfig, RedisStore, RedisStoreError, Store};
use tollgate_test_support::admin::admin;

/// Per-call timeout for stores whose server stays up: generous, so that a
/// loaded CI machine never turns a slow reply into a failure.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

async fn store(server: &RedisServer, quota: Quota, prefix: &str) -> RedisStore {
    RedisStore::connect(&server.url(), quota, prefix, CALL_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", server.log_tail()))
}

/// The server's clock, as time since the Unix epoch.
async fn server_time(admin: &mut MultiplexedConnection) -> Duration {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(admin).await.unwrap();
    Duration::from_secs(secs) + Duration::from_micros(micros)
}

/// Whole tokens the quota refills in `elapsed`: `floor(r * elapsed)`.
fn refill(quota: &Quota, elapsed: Duration) -> u64 {
    quota.envelope(elapsed) - quota.capacity()
}

#[tokio::test]
async fn sixteen_connections_racing_for_five_tokens_get_exactly_five() {
    let server = start_server!("sixteen_connections_racing_for_five_tokens_get_exactly_five");
    // One token a day: no refill during the test.
    let quota = Quota::new(5, 1, Duration::from_secs(86_400)).unwrap();
    let mut stores = Vec::new();
    for _ in 0..16 {
        stores.push(store(&server, quota, "race:").await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
    let tasks: Vec<_> = stores
        .into_iter()
        .map(|store| {
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                let mut granted = 0;
                for _ in 0..4 {
                    let grant = store.acquire("hot", 1).await.unwrap();
                    if grant.is_empty() {
                        assert!(grant.retry_after > Duration::ZERO);
                        assert_eq!(grant.lease, Lease::NONE);
                    } else {
                        assert_eq!(grant.tokens, 1);
                        assert_eq!(grant.lease.granted, 1);
                    }
                    granted += grant.tokens;
                }
                granted
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    assert_eq!(total, 5, "64 racing requests on a bucket of 5");
}

#[tokio::test]
async fn a_request_larger_than_the_credit_gets_a_partial_grant_then_an_exact_wait() {
    let server =
        start_server!("a_request_larger_than_the_credit_gets_a_partial_grant_then_an_exact_wait");
    // T = one hour exactly (a whole number of microseconds).
    let period = Duration::from_secs(3600);
    let quota = Quota::new(5, 1, period).unwrap();
    let store = store(&server, quota, "partial:").await;
    let mut admin = admin(&server).await;

    let before = server_time(&mut admin).await;
    assert_eq!(store.acquire("k", 2).await.unwrap().tokens, 2);
    let partial = store.acquire("k", 10).await.unwrap();
    assert_eq!((partial.tokens, partial.lease.granted), (3, 3));
    assert_eq!(partial.retry_after, Duration::ZERO);
    let refused = store.acquire("k", 10).await.unwrap();
    let after = server_time(&mut admin).await;

    // The first grant at n1 left the state at n1 + 2T, the second at
    // n1 + 5T (less than 2T had passed): the bucket is empty, and one token
    // exists at n1 + T. The refusal at n3 waits T - (n3 - n1), and
    // 0 <= n3 - n1 <= after - before.
    assert_eq!(refused.tokens, 0);
    assert_eq!(refused.lease, Lease::NONE);
    let elapsed = after - before;
    assert!(elapsed < period, "the test took over an hour");
    assert!(refused.retry_after <= period, "{:?}", refused.retry_after);
    assert!(
        refused.retry_after >= period - elapsed,
        "{:?} < {:?} - {elapsed:?}",
        refused.retry_after,
        period
    );
    // Asking for more than the capacity asks for the capacity.
    assert_eq!(store.acquire("fresh", u64::MAX).await.unwrap().tokens, 5);
    assert_eq!(store.acquire("other", 0).await.unwrap().tokens, 0);
}

#[tokio::test]
async fn released_tokens_come_back_only_while_their_cost_has_not_refilled() {
    let server = start_server!("released_tokens_come_back_only_while_their_cost_has_not_refilled");
    let mut admin = admin(&server).await;

    // Slow: 5 per hour, T = 12 minutes.
    let slow = Quota::new(5, 5, Duration::from_secs(3600)).unwrap();
    let token = Duration::from_secs(720);
    let store = store(&server, slow, "release:").await;

    // Right after the grant: exactly the unused tokens come back (the time
    // held is far below the 2T that the rule would subtract from 5 - 3).
    let before = server_time(&mut admin).await;
    let grant = store.acquire("now", 5).await.unwrap();
    assert_eq!(grant.tokens, 5);
    // Every grant tells the refill interval, for the nodes' pacing.
    assert_eq!(grant.refill_interval, token);
    store.release("now", grant.lease, 3).await.unwrap();
    let again = store.acquire("now", 10).await.unwrap();
    let elapsed = server_time(&mut admin).await - before;
    assert!(elapsed < 2 * token, "the test took over 24 minutes");
    assert!(again.tokens >= 3, "{again:?}");
    assert!(
        again.tokens <= (3 + refill(&slow, elapsed)).min(5),
        "{again:?}"
    );

    // Returning more than was granted, or the same lease twice (a caller
    // bug), never lifts a bucket above its capacity.
    let grant = store.acquire("capped", 2).await.unwrap();
    store.release("capped", grant.lease, 100).await.unwrap();
    store.release("capped", grant.lease, 2).await.unwrap();
    assert_eq!(store.acquire("capped", 10).await.unwrap().tokens, 5);
    // A full bucket is an absent key: releasing into it writes nothing.
    let grant = store.acquire("gone", 1).await.unwrap();
    store.release("gone", grant.lease, 1).await.unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg(store.redis_key("gone"))
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(!exists, "a refilled bucket's key is deleted");
    store.release("gone", grant.lease, 1).await.unwrap();
    // An empty lease gives nothing back.
    store.release("gone", Lease::NONE, 5).await.unwrap();

    // Fast: 5 per 500 ms, T = 100 ms. Once a grant's whole cost has
    // refilled, releasing it returns nothing.
    let fast = Quota::new(5, 5, Duration::from_millis(500)).unwrap();
    let store = RedisStore::connect(&server.url(), fast, "release-fast:", CALL_TIMEOUT)
        .await
        .unwrap();
    let old = store.acquire("k", 5).await.unwrap();
    assert_eq!(old.tokens, 5);
    let granted_by = server_time(&mut admin).await;
    while server_time(&mut admin).await < granted_by + Duration::from_millis(500) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = server_time(&mut admin).await;
    assert_eq!(store.acquire("k", 5).await.unwrap().tokens, 5, "refilled");
    store.release("k", old.lease, 5).await.unwrap();
    let after_release = store.acquire("k", 5).await.unwrap();
    let elapsed = server_time(&mut admin).await - before;
    // Without the old lease, the bucket emptied at `before` or later holds
    // only what refilled since; a full give-back would have made it 5.
    assert!(
        after_release.tokens <= refill(&fast, elapsed),
        "{after_release:?} after {elapsed:?}"
    );
}

#[tokio::test]
async fn keys_expire_when_their_bucket_is_full_again() {
    let server = start_server!("keys_expire_when_their_bucket_is_full_again");
    let mut admin = admin(&server).await;
    // 5 per second: 3 tokens refill in 600 ms.
    let quota = Quota::new(5, 5, Duration::from_secs(1)).unwrap();
    let store = store(&server, quota, "expiry:").await;
    let key = store.redis_key("k");

    assert_eq!(store.acquire("k", 3).await.unwrap().tokens, 3);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut admin)
        .await
        .unwrap();
    // -1 would be a key without expiry; -2 a key already gone (if this
    // test was descheduled for 600 ms, which is allowed).
    assert!(pttl == -2 || (1..=600).contains(&pttl), "PTTL {pttl}");

    let mut gone = false;
    for _ in 0..200 {
        let exists: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut admin)
            .await
            .unwrap();
        if !exists {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the key outlived its bucket's refill by seconds");
    assert_eq!(store.acquire("k", 5).await.unwrap().tokens, 5, "full again");

    // Emptied: the key lives at most the full refill, 1 s.
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(pttl == -2 || (1..=1000).contains(&pttl), "PTTL {pttl}");
}

#[tokio::test]
async fn scripts_are_reloaded_after_a_script_flush() {
    let server = start_server!("scripts_are_reloaded_after_a_script_flush");
    let mut admin = admin(&server).await;
    let quota = Quota::new(5, 1, Duration::from_secs(3600)).unwrap();
    let store = store(&server, quota, "flush:").await;

    let grant = store.acquire("k", 2).await.unwrap();
    assert_eq!(grant.tokens, 2);
    assert!(cached_scripts(&mut admin).await.is_none_or(|n| n >= 1));
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(cached_scripts(&mut admin).await.is_none_or(|n| n == 0));

    // EVALSHA now answers NOSCRIPT; the store loads the script and retries.
    assert_eq!(store.acquire("k", 10).await.unwrap().tokens, 3);
    store.release("k", grant.lease, 2).await.unwrap();
    assert_eq!(store.acquire("k", 10).await.unwrap().tokens, 2);
    assert!(cached_scripts(&mut admin).await.is_none_or(|n| n >= 2));
}

/// `number_of_cached_scripts` from `INFO memory`, where the server has it.
async fn cached_scripts(admin: &mut MultiplexedConnection) -> Option<u64> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("number_of_cached_scripts:"))
        .and_then(|n| n.trim().parse().ok())
}

#[tokio::test]
async fn a_dead_server_gives_timely_errors_and_a_restarted_one_is_used_again() {
    let mut server =
        start_server!("a_dead_server_gives_timely_errors_and_a_restarted_one_is_used_again");
    let timeout = Duration::from_millis(500);
    let quota = Quota::new(5, 1, Duration::from_secs(3600)).unwrap();
    let store = RedisStore::connect(&server.url(), quota, "restart:", timeout)
        .await
        .unwrap();
    assert_eq!(store.acquire("k", 1).await.unwrap().tokens, 1);

    server.kill();
    for _ in 0..3 {
        // The store's timeout bounds every call; the margin here is only
        // there so that a broken bound fails the test instead of hanging it.
        let outcome =
            tokio::time::timeout(timeout + Duration::from_secs(10), store.acquire("k", 1))
                .await
                .expect("a call to a dead server outlived the store's timeout");
        match outcome {
            Err(RedisStoreError::Redis(_) | RedisStoreError::Timeout(_)) => {}
            other => panic!("a dead server answered {other:?}"),
        }
    }

    server
        .restart()
        .unwrap_or_else(|e| panic!("restarting redis-server on the same port: {e}"));
    let mut recovered = None;
    // Timed-out calls, which may still have reached the new server and
    // debited their token: on a loaded machine one once landed after its
    // 500 ms. (A refused connection never reached it.)
    let mut maybe_applied = 0;
    for _ in 0..120 {
        match store.acquire("k", 1).await {
            Ok(grant) => {
                recovered = Some(grant);
                break;
            }
            Err(error @ (RedisStoreError::Redis(_) | RedisStoreError::Timeout(_))) => {
                maybe_applied += u64::from(matches!(error, RedisStoreError::Timeout(_)));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(other) => panic!("while reconnecting: {other:?}"),
        }
    }
    let grant = recovered.expect("the connection manager never reconnected");
    // The new server is empty: a full bucket, less what failed calls may
    // have debited in it.
    assert_eq!(grant.tokens, 1);
    let left = store.acquire("k", 10).await.unwrap().tokens;
    assert!(
        left <= 4 && left + maybe_applied >= 4,
        "{left} left after {maybe_applied} timed-out calls"
    );
}

/// The Redis Cluster hash tag of a key name: the bytes between the first
/// `{` and the first `}` after it, if non-empty; else the whole name.
fn hash_tag(name: &str) -> &str {
    if let Some(open) = name.find('{')
        && let Some(len) = name[open + 1..].find('}')
        && len > 0
    {
        return &name[open + 1..open + 1 + len];
    }
    name
}

/// Inverts the store's escaping (`\\`, `\[`, `\]`), or `None` if `tag` is
/// not a valid escaped key.
fn unescape(tag: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = tag.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(match chars.next()? {
                '\\' => '\\',
                '[' => '{',
                ']' => '}',
                _ => return None,
            }),
            '{' | '}' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

#[tokio::test]
async fn keys_with_braces_keep_their_own_hash_tag_and_bucket() {
    let server = start_server!("keys_with_braces_keep_their_own_hash_tag_and_bucket");
    let mut admin = admin(&server).await;
    let quota = Quota::new(2, 1, Duration::from_secs(3600)).unwrap();
    let store = store(&server, quota, "tags:").await;
    let keys = [
        "victim",
        "{victim}",
        "x{victim}",
        "victim}",
        "{victim",
        "}{victim}",
        r"\[victim\]",
        r"\",
        r"\\",
        "{}",
        "}",
        "{",
        "",
    ];
    let mut names = BTreeSet::new();
    for key in keys {
        let name = store.redis_key(key);
        assert!(name.starts_with("tags:{") && name.ends_with('}'), "{name}");
        // The hash tag is the whole escaped key, which decodes back to the
        // key: no key can pick another key's tag (or slot by choice).
        let tag = hash_tag(&name);
        if !key.is_empty() {
            assert_eq!(tag, &name["tags:{".len()..name.len() - 1], "{name}");
            assert_eq!(unescape(tag).as_deref(), Some(key), "{name}");
        }
        assert!(names.insert(name), "{key:?} shares a Redis key");
        // Every key has its own full bucket: nothing above was shared.
        assert_eq!(store.acquire(key, 5).await.unwrap().tokens, 2, "{key:?}");
    }
    let stored: Vec<String> = redis::cmd("KEYS")
        .arg("tags:*")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(stored.into_iter().collect::<BTreeSet<_>>(), names);

    // Braces in the prefix would capture every key's tag: refused.
    let client = redis::Client::open(server.url()).unwrap();
    let manager = redis::aio::ConnectionManager::new(client).await.unwrap();
    assert!(matches!(
        RedisStore::new(manager, quota, "tags{shard}:", CALL_TIMEOUT),
        Err(RedisStoreError::InvalidPrefix)
    ));
}

/// A small deterministic generator (xorshift64*), enough to vary requests.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// What racing stores got from two keys ([`race`]).
#[derive(Debug, Default)]
struct Race {
    /// Granted on the key that only acquires.
    plain: u64,
    /// Granted and not given back on the key that also releases.
    kept: u64,
    /// Grants on the first key short of their ask.
    short: u64,
    /// Whether a store's grants had another store's grant between them:
    /// the stores' calls really raced at the server.
    interleaved: bool,
}

/// Each store in a task of its own, `rounds` times: an acquire of `ask`
/// on a key that only acquires, and one on a key of which half the grants
/// give a random part back. A fixed amount of work per task, not a
/// wall-clock duration: the envelope is measured on the server's clock.
async fn race<F>(stores: Vec<RedisStore>, rounds: usize, ask: F) -> Race
where
    F: Fn(&mut Rng) -> u64 + Clone + Send + 'static,
{
    // Every grant, numbered in the order the tasks saw them: a store whose
    // first and last grants are further apart than its own count had
    // another store's grant land between them.
    let order = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tasks: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            let (ask, order) = (ask.clone(), Arc::clone(&order));
            tokio::spawn(async move {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1));
                let mut race = Race::default();
                let mut first = None;
                for round in 0..rounds {
                    let want = ask(&mut rng);
                    let grant = store.acquire("plain", want).await.unwrap();
                    let at = order.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let first = *first.get_or_insert(at);
                    race.interleaved |= at - first > round as u64;
                    race.plain += grant.tokens;
                    race.short += u64::from(grant.tokens < want);
                    let grant = store.acquire("released", ask(&mut rng)).await.unwrap();
                    let mut unused = 0;
                    if grant.tokens > 0 && rng.below(2) == 0 {
                        unused = rng.below(grant.tokens + 1);
                        store
                            .release("released", grant.lease, unused)
                            .await
                            .unwrap();
                    }
                    race.kept += grant.tokens - unused;
                }
                race
            })
        })
        .collect();
    let mut total = Race::default();
    for task in tasks {
        let race = task.await.unwrap();
        total.plain += race.plain;
        total.kept += race.kept;
        total.short += race.short;
        total.interleaved |= race.interleaved;
    }
    total
}

impl Race {
    /// Both keys within the envelope over `elapsed`, bracketed by the
    /// server's clock: every script read it between the two readings, from
    /// the same clock, and every charge is at least its exact refill, so
    /// the envelope needs no slack (it would only if the server's clock
    /// were stepped back during the run). A release gives back at most its
    /// unused tokens, so the tokens kept obey the envelope too. Demand
    /// exceeded supply: at least the burst went out. And the race happened: a
    /// store's grants had another's between them.
    fn within(&self, quota: &Quota, elapsed: Duration) {
        let envelope = quota.envelope(elapsed);
        eprintln!("{elapsed:?}: {self:?}, envelope {envelope}");
        assert!(self.plain <= envelope, "{self:?} over {elapsed:?}");
        assert!(self.kept <= envelope, "{self:?} over {elapsed:?}");
        assert!(self.plain >= quota.capacity(), "{self:?}");
        assert!(self.interleaved, "the stores' calls never raced: {self:?}");
    }
}

#[tokio::test]
async fn many_racing_acquires_stay_within_the_envelope_on_the_server_clock() {
    let server = start_server!("many_racing_acquires_stay_within_the_envelope_on_the_server_clock");
    let mut admin = admin(&server).await;
    // 7 per 30 ms: an interval of 30000/7 µs, exact in ticks of 1/7 µs.
    let quota = Quota::new(10, 7, Duration::from_millis(30)).unwrap();
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(store(&server, quota, "envelope:").await);
    }
    assert!(stores[0].is_exact());
    let start = server_time(&mut admin).await;
    let race = race(stores, 1_000, |rng| 1 + rng.below(4)).await;
    race.within(&quota, server_time(&mut admin).await - start);
}

/// Byte quotas too fast and irregular for a whole number of ticks per
/// byte (64 MiB/s: 0.119 eighths of a µs a byte; 1 GiB/s: 0.0075) are
/// charged per request. A full bucket grants its whole capacity at once,
/// tells its refill, and racing acquires and releases of packet- and
/// chunk-sized requests never grant more than the envelope over the
/// interval bracketed by the server's own clock.
#[tokio::test]
async fn byte_quotas_charged_per_request_stay_within_the_envelope() {
    let server = start_server!("byte_quotas_charged_per_request_stay_within_the_envelope");
    let mut admin = admin(&server).await;
    for (i, rate) in [64u64 << 20, 1 << 30].into_iter().enumerate() {
        // A bucket of a millisecond and a half at the rate: small enough
        // that the refill, not the burst, decides most of the run.
        let quota = Quota::new(rate / 640, rate, Duration::from_secs(1)).unwrap();
        let prefix = format!("bytes{i}:");
        let mut stores = Vec::new();
        for _ in 0..4 {
            stores.push(store(&server, quota, &prefix).await);
        }
        assert!(!stores[0].is_exact());
        let whole = stores[0].acquire("burst", u64::MAX).await.unwrap();
        assert_eq!(whole.tokens, quota.capacity());
        // A byte refills in under a nanosecond: the interval told rounds
        // up to one.
        assert_eq!(
            whole.refill_interval,
            Duration::from_nanos(15 - 14 * i as u64)
        );

        let start = server_time(&mut admin).await;
        // A packet, a page, or a chunk of up to a 64th of a second, whose
        // demand outruns the refill.
        let race = race(stores, 300, move |rng| match rng.below(3) {
            0 => 1 + rng.below(1500),
            1 => 4096,
            _ => 1 + rng.below(rate / 64),
        })
        .await;
        race.within(&quota, server_time(&mut admin).await - start);
        // Asks came back short: a chunk is up to ten bursts.
        assert!(race.short > 0, "{race:?}");
    }
}

/// Every grant, empty or not, tells the key's capacity, so a
/// caller can refuse a cost above it as such instead of waiting for a
/// grant that can never come.
#[tokio::test]
async fn every_grant_tells_the_capacity() {
    let server = start_server!("every_grant_tells_the_capacity");
    let quota = Quota::new(3, 1, Duration::from_secs(3600)).unwrap();
    let store = store(&server, quota, "capacity:").await;
    let full = store.acquire("k", 5).await.unwrap();
    assert_eq!((full.tokens, full.capacity), (3, 3));
    let empty = store.acquire("k", 1).await.unwrap();
    assert_eq!((empty.tokens, empty.capacity), (0, 3));
    assert_eq!(store.acquire("k", 0).await.unwrap().capacity, 3);
}

/// A full bucket grants its whole capacity in one call, however large a
/// capacity the store accepts: 8·10^15 tokens refilled at one a
/// microsecond (past 2^52, below the scripts' exact 2^53), asked for
/// exactly or as `u64::MAX`; and a lease that large comes back whole.
#[tokio::test]
async fn a_full_bucket_of_the_largest_capacity_grants_it_in_one_call() {
    let server = start_server!("a_full_bucket_of_the_largest_capacity_grants_it_in_one_call");
    const CAPACITY: u64 = 8_000_000_000_000_000;
    let quota = Quota::new(CAPACITY, 1_000_000, Duration::from_secs(1)).unwrap();
    let store = store(&server, quota, "largest:").await;
    let full = store.acquire("k", CAPACITY).await.unwrap();
    assert_eq!((full.tokens, full.lease.granted), (CAPACITY, CAPACITY));
    assert_eq!(full.remaining, Some(0));
    store.release("k", full.lease, CAPACITY).await.unwrap();
    // Given back less the time held, which refilled meanwhile: full again.
    let again = store.acquire("k", u64::MAX).await.unwrap();
    assert_eq!(again.tokens, CAPACITY);
    assert_eq!(
        store.acquire("fresh", u64::MAX).await.unwrap().tokens,
        CAPACITY
    );
}

/// Every grant tells the whole tokens its bucket holds after it, exactly
/// (an hour per token: nothing refills during the test), through `acquire`
/// and the pipelined `acquire_many` alike: a release shows in the next
/// grant's count, an empty grant leaves nothing, an ask of zero (answered
/// without calling the server) does not say.
#[tokio::test]
async fn every_grant_tells_the_tokens_left_behind() {
    let server = start_server!("every_grant_tells_the_tokens_left_behind");
    let quota = Quota::new(10, 1, Duration::from_secs(3600)).unwrap();
    let store = store(&server, quota, "left:").await;
    let first = store.acquire("k", 3).await.unwrap();
    assert_eq!((first.tokens, first.remaining), (3, Some(7)));
    let second = store.acquire("k", 4).await.unwrap();
    assert_eq!((second.tokens, second.remaining), (4, Some(3)));
    // Two of the second grant's tokens come back (held well under T).
    store.release("k", second.lease, 2).await.unwrap();
    let partial = store.acquire("k", 9).await.unwrap();
    assert_eq!((partial.tokens, partial.remaining), (5, Some(0)));
    let empty = store.acquire("k", 1).await.unwrap();
    assert_eq!((empty.tokens, empty.remaining), (0, Some(0)));
    assert_eq!(store.acquire("k", 0).await.unwrap().remaining, None);
    let batch = store
        .acquire_many(&[("a", 4), ("b", 10), ("a", 5), ("k", 1), ("c", 0)])
        .await;
    let told: Vec<_> = batch
        .iter()
        .map(|g| g.as_ref().map(|g| (g.tokens, g.remaining)).unwrap())
        .collect();
    assert_eq!(
        told,
        [
            (4, Some(6)),
            (10, Some(0)),
            (5, Some(1)),
            (0, Some(0)),
            (0, None)
        ]
    );
}

/// The store's timeout at its extremes is a typed error or an
/// unbounded wait, never a panic: zero is refused by both constructors
/// (each call would time out), `Duration::MAX` waits as long as the server
/// takes.
#[tokio::test]
async fn extreme_timeouts_are_typed_errors_or_unbounded_waits() {
    let server = start_server!("extreme_timeouts_are_typed_errors_or_unbounded_waits");
    let quota = Quota::new(5, 1, Duration::from_secs(3600)).unwrap();
    let endless = RedisStore::connect(&server.url(), quota, "extreme:", Duration::MAX)
        .await
        .unwrap();
    assert_eq!(endless.acquire("k", 2).await.unwrap().tokens, 2);
    assert!(matches!(
        RedisStore::connect(&server.url(), quota, "extreme:", Duration::ZERO).await,
        Err(RedisStoreError::ZeroTimeout)
    ));
    let client = redis::Client::open(server.url()).unwrap();
    let connection = redis::aio::ConnectionManager::new(client).await.unwrap();
    assert!(matches!(
        RedisStore::new(connection, quota, "extreme:", Duration::ZERO),
        Err(RedisStoreError::ZeroTimeout)
    ));
    // Extreme counts: a want of u64::MAX asks for the capacity; a forged
    // lease far beyond it and beyond the store's range gives nothing back.
    assert_eq!(endless.acquire("k", u64::MAX).await.unwrap().tokens, 3);
    let forged = Lease {
        granted: u64::MAX,
        at: u64::MAX,
    };
    endless.release("k", forged, u64::MAX).await.unwrap();
    assert_eq!(endless.acquire("k", 1).await.unwrap().tokens, 0);
}

/// A state written before keys kept their creation time (`"<d>:<tat>"`) or
/// their quota (`"<d>:<tat>:<born>"`) is still read, as a key born at the
/// epoch or then, kept under the caller's quota at generation 0: a rolling
/// upgrade neither refuses old keys as foreign nor resets their debt.
#[tokio::test]
async fn a_state_written_without_its_creation_time_is_still_read() {
    let server = start_server!("a_state_written_without_its_creation_time_is_still_read");
    let mut admin = admin(&server).await;
    // T = one hour, whole microseconds: d = 1.
    let quota = Quota::new(5, 1, Duration::from_secs(3600)).unwrap();
    let store = store(&server, quota, "upgrade:").await;
    let grant = store.acquire("k", 2).await.unwrap();
    let key = store.redis_key("k");
    let state: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut admin)
        .await
        .unwrap();
    let fields: Vec<&str> = state.split(':').collect();
    assert_eq!(fields.len(), 6, "{state}");
    // "<d>:<tat>:<born>:<generation>:<T>:<B*T>", T = 3.6e9 µs.
    assert_eq!(&fields[3..], ["0", "3600000000", "18000000000"], "{state}");
    let born = format!("{}:{}:{}", fields[0], fields[1], fields[2]);
    let oldest = format!("{}:{}", fields[0], fields[1]);
    for old in [born, oldest] {
        let () = redis::cmd("SET")
            .arg(&key)
            .arg(&old)
            .arg("PX")
            .arg(60_000)
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(store.acquire("k", 1).await.unwrap().tokens, 1, "{old}");
        store.release("k", grant.lease, 2).await.unwrap();
        assert_eq!(store.acquire("k", 5).await.unwrap().tokens, 4, "{old}");
    }
}

/// `acquire_many` is one pipeline; after `SCRIPT FLUSH` every call in it
/// answers NOSCRIPT (none ran), the script is loaded and exactly those
/// calls are sent again: each key's debits count once.
#[tokio::test]
async fn a_pipelined_batch_reloads_the_script_after_a_flush_and_counts_each_debit_once() {
    let server = start_server!(
        "a_pipelined_batch_reloads_the_script_after_a_flush_and_counts_each_debit_once"
    );
    let mut admin = admin(&server).await;
    let quota = Quota::new(5, 1, Duration::from_secs(3600)).unwrap();
    let store = store(&server, quota, "batch:").await;
    let tokens = |grants: Vec<Result<tollgate::shared::Grant, RedisStoreError>>| -> Vec<u64> {
        grants
            .into_iter()
            .map(|g| g.expect("a batch").tokens)
            .collect()
    };

    let first = store.acquire_many(&[("a", 2), ("b", 2), ("z", 0)]).await;
    // Every grant of a batch, empty or not, tells what a single call would.
    for grant in &first {
        let grant = grant.as_ref().expect("a batch");
        assert_eq!(grant.capacity, 5);
        assert_eq!(grant.refill_interval, Duration::from_secs(3600));
    }
    assert_eq!(tokens(first), [2, 2, 0]);
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
    let batch = store
        .acquire_many(&[("a", 2), ("b", 5), ("c", 1), ("a", 9)])
        .await;
    assert_eq!(tokens(batch), [2, 3, 1, 1]);
    assert_eq!(
        tokens(store.acquire_many(&[("a", 5), ("b", 5), ("c", 5)]).await),
        [0, 0, 4]
    );
}

/// Replies no version of the scripts gives — the two-field reply of an
/// older acquire, more tokens than asked, nothing granted without a wait,
/// more tokens left than the bucket holds, an unknown code, other types —
/// are `BadReply` for every call, never a grant and never a panic; the
/// scripts' own error codes keep their meaning. The three-value grant of
/// the acquire script before it told the tokens left is a bad reply to an
/// acquire (a valid one to a release, whose reply keeps that shape).
#[tokio::test]
async fn malformed_or_old_format_replies_are_bad_replies_never_grants() {
    let quota = Quota::new(5, 1, Duration::from_secs(3600)).unwrap();
    // Each reply, and whether it is bad for a release too (a release's
    // reply keeps the three-value shape the old acquire had).
    let malformed: [(&[u8], bool); 22] = [
        (b"*2\r\n:1\r\n:0\r\n", true),
        (b"*3\r\n:9\r\n:0\r\n:7\r\n", true),
        (b"*3\r\n:0\r\n:0\r\n:7\r\n", true),
        (b"*3\r\n:-7\r\n:0\r\n:7\r\n", true),
        (b"*3\r\n:1\r\n$1\r\nx\r\n:7\r\n", true),
        (b"*4\r\n:1\r\n:0\r\n:7\r\n:5\r\n", true),
        (b"$5\r\nhello\r\n", true),
        (b":1\r\n", true),
        (b"*0\r\n", true),
        // The old acquire's grants; a refusal telling tokens left; a
        // fifth value from no known script.
        (b"*3\r\n:1\r\n:0\r\n:7\r\n", false),
        (b"*3\r\n:3\r\n:0\r\n:7\r\n", true),
        (b"*4\r\n:0\r\n:5\r\n:7\r\n:2\r\n", true),
        (b"*5\r\n:1\r\n:0\r\n:7\r\n:0\r\n:0\r\n", true),
        // The four-value grant before grants told their quota; the
        // seven-value one before they told its ticks per token; a grant
        // from a bucket of capacity 0, or of more than its capacity; more
        // left than the capacity; a tick of 0 or 1/9 µs; a token of zero
        // parts; arguments the script refused.
        (b"*4\r\n:1\r\n:0\r\n:7\r\n:0\r\n", true),
        (b"*7\r\n:1\r\n:0\r\n:7\r\n:0\r\n:0\r\n:5\r\n:1000\r\n", true),
        (
            b"*9\r\n:1\r\n:0\r\n:7\r\n:0\r\n:0\r\n:0\r\n:1\r\n:1\r\n:1\r\n",
            true,
        ),
        (
            b"*9\r\n:3\r\n:0\r\n:7\r\n:0\r\n:0\r\n:2\r\n:1\r\n:1\r\n:1\r\n",
            true,
        ),
        (
            b"*9\r\n:1\r\n:0\r\n:7\r\n:5\r\n:0\r\n:5\r\n:1\r\n:1\r\n:1\r\n",
            true,
        ),
        (
            b"*9\r\n:1\r\n:0\r\n:7\r\n:0\r\n:0\r\n:5\r\n:0\r\n:1\r\n:1\r\n",
            true,
        ),
        (
            b"*9\r\n:1\r\n:0\r\n:7\r\n:0\r\n:0\r\n:5\r\n:9\r\n:1\r\n:1\r\n",
            true,
        ),
        (
            b"*9\r\n:1\r\n:0\r\n:7\r\n:0\r\n:0\r\n:5\r\n:1\r\n:1\r\n:0\r\n",
            true,
        ),
        (b"*3\r\n:-4\r\n:0\r\n:0\r\n", true),
    ];
    for (reply, bad_release) in malformed {
        let fake = FakeRedis::start(ScriptAnswer::Reply(reply.to_vec()));
        let store = RedisStore::connect(&fake.url(), quota, "bad:", CALL_TIMEOUT)
            .await
            .expect("the fake answers the handshake");
        let shown = String::from_utf8_lossy(reply);
        let acquired = store.acquire("k", 3).await;
        assert!(
            matches!(acquired, Err(RedisStoreError::BadReply(_))),
            "{shown}: {acquired:?}"
        );
        for grant in store.acquire_many(&[("k", 3), ("j", 1)]).await {
            assert!(
                matches!(grant, Err(RedisStoreError::BadReply(_))),
                "{shown}: {grant:?}"
            );
        }
        let released = store.release("k", Lease { granted: 3, at: 1 }, 2).await;
        assert_eq!(
            matches!(released, Err(RedisStoreError::BadReply(_))),
            bad_release,
            "{shown}: {released:?}"
        );
    }
    // The new shape, for contrast: a grant of 1 leaving 0, of a bucket of
    // 9 refilled every microsecond (a tick of 1/8 µs, 8 ticks a token) at
    // generation 2, is accepted.
    let current = FakeRedis::start(ScriptAnswer::Reply(
        b"*9\r\n:1\r\n:0\r\n:7\r\n:0\r\n:2\r\n:9\r\n:8\r\n:8\r\n:1\r\n".to_vec(),
    ));
    let store = RedisStore::connect(&current.url(), quota, "new:", CALL_TIMEOUT)
        .await
        .unwrap();
    let grant = store.acquire("k", 3).await.unwrap();
    assert_eq!((grant.tokens, grant.remaining), (1, Some(0)));
    assert_eq!(
        (
            grant.capacity,
            grant.refill_interval,
            store.stored_generation()
        ),
        (9, Duration::from_micros(1), 2)
    );
    let foreign = FakeRedis::start(ScriptAnswer::Reply(b"*3\r\n:-2\r\n:0\r\n:7\r\n".to_vec()));
    let store = RedisStore::connect(&foreign.url(), quota, "bad:", CALL_TIMEOUT)
        .await
        .unwrap();
    assert!(matches!(
        store.acquire("k", 1).await,
        Err(RedisStoreError::ForeignValue(_))
    ));
    let clock = FakeRedis::start(ScriptAnswer::Reply(b"*3\r\n:-1\r\n:0\r\n:0\r\n".to_vec()));
    let store = RedisStore::connect(&clock.url(), quota, "bad:", CALL_TIMEOUT)
        .await
        .unwrap();
    assert!(matches!(
        store.acquire("k", 1).await,
        Err(RedisStoreError::ServerClockOutOfRange)
    ));
}

/// A key holding something no store wrote is left alone and reported: a
/// string as `ForeignValue`, another type as the server's error.
#[tokio::test]
async fn a_key_holding_something_else_is_reported_and_left_alone() {
    let server = start_server!("a_key_holding_something_else_is_reported_and_left_alone");
    let mut admin = admin(&server).await;
    let quota = Quota::new(5, 1, Duration::from_secs(3600)).unwrap();
    let store = store(&server, quota, "foreign:").await;
    let name = store.redis_key("k");
    let () = redis::cmd("SET")
        .arg(&name)
        .arg("not-a-bucket")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        matches!(store.acquire("k", 1).await, Err(RedisStoreError::ForeignValue(n)) if n == name)
    );
    let kept: String = redis::cmd("GET")
        .arg(&name)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(kept, "not-a-bucket");
    let list = store.redis_key("list");
    let () = redis::cmd("RPUSH")
        .arg(&list)
        .arg("x")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(matches!(
        store.acquire("list", 1).await,
        Err(RedisStoreError::Redis(_))
    ));
}

/// A server that accepts and never answers: connecting fails with
/// `Timeout`, and so does every call on a connection whose server stops
/// answering, each within its timeout (the outer bound only turns a broken
/// timeout into a failure instead of a hang).
#[tokio::test]
async fn a_server_that_never_answers_times_out_and_never_blocks() {
    let timeout = Duration::from_millis(200);
    let quota = Quota::new(5, 1, Duration::from_secs(3600)).unwrap();
    let bound = timeout + Duration::from_secs(10);

    // The kernel completes the TCP handshake; nothing ever reads or writes.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", mute.local_addr().unwrap());
    let connecting =
        tokio::time::timeout(bound, RedisStore::connect(&url, quota, "mute:", timeout))
            .await
            .expect("connecting outlived the timeout");
    assert!(
        matches!(connecting, Err(RedisStoreError::Timeout(_))),
        "{connecting:?}"
    );

    let fake = FakeRedis::start(ScriptAnswer::Silence);
    let store = RedisStore::connect(&fake.url(), quota, "mute:", timeout)
        .await
        .expect("the fake answers the handshake");
    let acquired = tokio::time::timeout(bound, store.acquire("k", 1))
        .await
        .expect("acquire returned");
    assert!(
        matches!(acquired, Err(RedisStoreError::Timeout(t)) if t == timeout),
        "{acquired:?}"
    );
    let batch = tokio::time::timeout(bound, store.acquire_many(&[("k", 1), ("j", 2)]))
        .await
        .expect("acquire_many returned");
    assert!(
        batch
            .iter()
            .all(|g| matches!(g, Err(RedisStoreError::Timeout(_)))),
        "{batch:?}"
    );
    let released = tokio::time::timeout(bound, store.release("k", Lease { granted: 1, at: 1 }, 1))
        .await
        .expect("release returned");
    assert!(
        matches!(released, Err(RedisStoreError::Timeout(_))),
        "{released:?}"
    );
}

/// A configuration is checked before any connection: no node, a zero
/// timeout and a prefix with braces are typed errors, with no server.
#[tokio::test]
async fn bad_configurations_are_refused_before_connecting() {
    let quota = Quota::new(5, 1, Duration::from_secs(3600)).unwrap();
    let nowhere = RedisConfig::cluster(Vec::<String>::new());
    let refused = RedisStore::connect_with(&nowhere, quota, "rl:").await;
    assert!(
        matches!(refused, Err(RedisStoreError::NoNodes)),
        "{refused:?}"
    );
    // Port 1 on loopback: nothing listens, but these fail before trying.
    let unreachable = RedisConfig::node("redis://127.0.0.1:1/");
    let zero = unreachable.clone().timeout(Duration::ZERO);
    let refused = RedisStore::connect_with(&zero, quota, "rl:").await;
    assert!(
        matches!(refused, Err(RedisStoreError::ZeroTimeout)),
        "{refused:?}"
    );
    let refused = RedisStore::connect_with(&unreachable, quota, "rl:{x}").await;
    assert!(
        matches!(refused, Err(RedisStoreError::InvalidPrefix)),
        "{refused:?}"
    );
}

/// `RedisConfig`'s `Debug` never shows a password, however the URL carries
/// it: a `redis+unix://` URL takes its credentials from the query
/// (`?user=...&pass=...`), and a configuration is the kind of value that
/// ends up in logs.
#[test]
fn debug_of_a_redis_config_hides_a_password_given_in_the_url_query() {
    for url in [
        "redis+unix:///run/redis.sock?db=0&user=limiter&pass=hunter2",
        "unix:///run/redis.sock?pass=hunter2",
        "redis://limiter:hunter2@10.0.0.1:6379/0",
        "rediss://:hunter2@cache.internal:6380/#hunter2",
    ] {
        let shown = format!("{:?}", RedisConfig::node(url));
        assert!(!shown.contains("hunter2"), "{url} shows as {shown}");
        let shown = format!("{:?}", RedisConfig::cluster([url, url]));
        assert!(!shown.contains("hunter2"), "{url} shows as {shown}");
    }
}

/// A debit charges the key whether or not it fits: an absent key is a
/// full bucket charged the tokens, a debt beyond it is waited out by every
/// handle's acquires (the wait the debt's size says), and a key in debt
/// does not expire while its debt lasts. The same arithmetic as
/// `LocalStore`'s.
#[tokio::test]
async fn a_debit_charges_into_debt_that_every_handle_waits_out() {
    let server = start_server!("a_debit_charges_into_debt_that_every_handle_waits_out");
    // T = one hour: no refill during the test.
    let period = Duration::from_secs(3600);
    let quota = Quota::new(5, 1, period).unwrap();
    let store = store(&server, quota, "debit:").await;
    let other = self::store(&server, quota, "debit:").await;
    let mut admin = admin(&server).await;

    // An absent key, charged 3 of its 5.
    let before = server_time(&mut admin).await;
    store.debit("k", 3).await.unwrap();
    assert_eq!(other.acquire("k", 5).await.unwrap().tokens, 2);
    // 4 more beyond an empty bucket: a debt of 4 tokens, 5 hours to a token
    // after the first debit (which set the state this one adds to).
    store.debit("k", 4).await.unwrap();
    let refused = other.acquire("k", 1).await.unwrap();
    let after = server_time(&mut admin).await;
    assert_eq!(refused.tokens, 0);
    let five_hours = 5 * period;
    assert!(
        refused.retry_after <= five_hours,
        "{:?}",
        refused.retry_after
    );
    assert!(
        refused.retry_after >= five_hours - (after - before),
        "{:?}",
        refused.retry_after
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg("debit:{k}")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        ttl > (five_hours + period).as_millis() as i64 * 9 / 10,
        "expires with its debt: {ttl} ms"
    );
    // Nothing debited is nothing charged.
    store.debit("z", 0).await.unwrap();
    assert_eq!(store.acquire("z", 5).await.unwrap().tokens, 5);
}
