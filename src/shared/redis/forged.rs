//! The scripts against callers no `RedisStore` is: arguments forged to
//! break the arithmetic, and a server clock that steps back (an epoch sent
//! one second later reads the same `TIME` as one second earlier). Each must
//! be a typed refusal or a decision that never mints.

use std::time::Duration;

use ::redis::{Script, Value};

use super::eval::{ACQUIRE, RELEASE, parse_reply};
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::start_server;

use super::admin;
use super::redis_store::RedisStore;
use super::scale::{EPOCH_UNIX_SECS, EXACT_LIMIT};
use crate::quota::Quota;

const KEY: &str = "k";

/// One call of `script` with every argument as given (`ARGV[1..]`).
async fn eval(store: &RedisStore, script: &Script, argv: &[u64]) -> Vec<i64> {
    let mut call = ::redis::cmd("EVALSHA");
    call.arg(script.get_hash()).arg(1).arg(store.redis_key(KEY));
    for &value in argv {
        call.arg(value);
    }
    let reply: Value = store
        .connection
        .eval(script, &call, Duration::from_secs(10))
        .await
        .unwrap();
    parse_reply(&reply).unwrap()
}

async fn store(server: &RedisServer) -> RedisStore {
    // One token an hour, capacity 10, whole microseconds: d = 1.
    let quota = Quota::new(10, 1, Duration::from_secs(3600)).unwrap();
    RedisStore::connect(&server.url(), quota, "forged:", Duration::from_secs(10))
        .await
        .unwrap()
}

const HOUR: u64 = 3_600_000_000;

#[tokio::test]
async fn forged_quotas_and_generations_are_refused_without_touching_the_key() {
    let server = start_server!("forged_quotas_and_generations_are_refused");
    let store = store(&server).await;
    let last = EXACT_LIMIT - 11 * HOUR;
    // epoch, d, T, BT, last, generation, D, B, want, fresh
    let forged: [[u64; 10]; 16] = [
        [EPOCH_UNIX_SECS, 1, 0, 0, last, 0, 1, 0, 1, 10], // zero quota
        [EPOCH_UNIX_SECS, 0, HOUR, 10 * HOUR, last, 0, 1, 10, 1, 10], // zero tick
        [EPOCH_UNIX_SECS, 9, HOUR, 10 * HOUR, last, 0, 1, 10, 1, 10], // tick finer than 1/8 µs
        [
            EPOCH_UNIX_SECS,
            1,
            HOUR,
            10 * HOUR + 1,
            last,
            0,
            1,
            10,
            1,
            10,
        ], // B*T not a whole B
        [EPOCH_UNIX_SECS, 1, HOUR, 10 * HOUR, last, 0, 1, 9, 1, 10], // B*T not this B
        [EPOCH_UNIX_SECS, 1, HOUR, EXACT_LIMIT, last, 0, 1, 2, 1, 10], // refill past 2^53
        [EPOCH_UNIX_SECS, 1, 7, 3, last, 0, 1, 0, 1, 10], // B < 1
        [
            EPOCH_UNIX_SECS,
            1,
            HOUR,
            10 * HOUR,
            last,
            EXACT_LIMIT,
            1,
            10,
            1,
            10,
        ], // generation past 2^53
        [EPOCH_UNIX_SECS, 1, HOUR, 10 * HOUR, last, 0, 1, 10, 0, 10], // want of nothing
        [EPOCH_UNIX_SECS, 1, HOUR, 10 * HOUR, last, 0, 0, 10, 1, 10], // D = 0
        // Charged per request: 10 tokens of 1000/1024 ticks, L = 10 or 11.
        [EPOCH_UNIX_SECS, 8, 1000, 12, last, 0, 1024, 10, 1, 10], // L too large
        [EPOCH_UNIX_SECS, 8, 1000, 9, last, 0, 1024, 10, 1, 10],  // L too small
        [EPOCH_UNIX_SECS, 8, 1000, 0, last, 0, 1024, 10, 1, 10],  // L = 0
        [EPOCH_UNIX_SECS, 8, 1000, 1, last, 0, 1 << 52, 10, 1, 10], // D past 2^51
        [EPOCH_UNIX_SECS, 8, 1 << 52, 20, last, 0, 1 << 51, 10, 1, 10], // T past 2^52
        [EPOCH_UNIX_SECS, 8, 1, 2, last, 0, 1 << 51, 1 << 51, 1, 10], // B of 2^51
    ];
    for argv in forged {
        assert_eq!(eval(&store, &ACQUIRE, &argv).await[0], -4, "{argv:?}");
    }
    // A sane quota, without the most an absent key starts with.
    let without_fresh = [EPOCH_UNIX_SECS, 1, HOUR, 10 * HOUR, last, 0, 1, 10, 1];
    assert_eq!(eval(&store, &ACQUIRE, &without_fresh).await[0], -4);
    let release = [EPOCH_UNIX_SECS, 1, 0, 0, last, 0, 1, 0, 1, 0, 1];
    assert_eq!(eval(&store, &RELEASE, &release).await[0], -4);
    let mut admin = admin(&server).await;
    let written: Option<String> = ::redis::cmd("GET")
        .arg(store.redis_key(KEY))
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(written, None, "a refused call wrote {written:?}");
}

/// The server clock steps back one second between two calls, and the
/// second brings a new quota: the state written in the future is a debt
/// at the earlier now (its tat lies past now + B*T), and it carries over as
/// the instant it is paid. No tokens appear from the step back.
#[tokio::test]
async fn a_quota_change_while_the_clock_stepped_back_carries_the_debt_as_time() {
    let server = start_server!("a_quota_change_while_the_clock_stepped_back");
    let store = store(&server).await;
    let last = EXACT_LIMIT - 11 * HOUR;
    let old = [EPOCH_UNIX_SECS, 1, HOUR, 10 * HOUR, last, 0, 1, 10];
    // Empty the bucket of 10: tat = now + 10 h.
    let grant = eval(&store, &ACQUIRE, &[&old[..], &[10, 10]].concat()).await;
    assert_eq!((grant[0], grant[3]), (10, 0), "{grant:?}");
    let emptied_at = u64::try_from(grant[2]).unwrap();
    // One second earlier (epoch + 1 s), a quota of 4 per 2 h (T = 30 min,
    // capacity 4) at generation 1: the old state owes 1 s beyond empty, so
    // the new one is empty until then, and its first token comes 30 min
    // after that.
    let new = [
        EPOCH_UNIX_SECS + 1,
        1,
        HOUR / 2,
        2 * HOUR,
        last,
        1,
        1,
        4,
        1,
        4,
    ];
    let refused = eval(&store, &ACQUIRE, &new).await;
    let now = u64::try_from(refused[2]).unwrap();
    assert!(now < emptied_at, "the clock did not step back");
    assert_eq!(refused[0], 0, "tokens from a step back: {refused:?}");
    // Paid when the old tat (emptied_at + B*T) less B*T comes.
    let paid = emptied_at;
    let wait = u64::try_from(refused[1]).unwrap();
    assert_eq!(now + wait, paid + HOUR / 2, "{refused:?}");
    assert_eq!(&refused[4..], [1, 4, 1, HOUR as i64 / 2, 1]);
    // Back at the present, at the old generation: decided under the stored
    // quota of generation 1, still nothing.
    let stale = eval(&store, &ACQUIRE, &[&old[..], &[10, 10]].concat()).await;
    assert_eq!((stale[0], stale[4], stale[5]), (0, 1, 4), "{stale:?}");
    // A lease of the old state, given back while the clock is behind its
    // grant: nothing (the time held is unknown), and the state is kept.
    let back = [
        EPOCH_UNIX_SECS + 1,
        1,
        HOUR,
        10 * HOUR,
        last,
        0,
        1,
        10,
        10,
        emptied_at,
        10,
    ];
    assert_eq!(eval(&store, &RELEASE, &back).await[..2], [1, 0]);
    let again = eval(&store, &ACQUIRE, &new).await;
    assert_eq!(again[0], 0, "{again:?}");
}
