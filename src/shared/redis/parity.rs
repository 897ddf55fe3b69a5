//! The scripts' arithmetic against the in-process store's: one random
//! sequence of grants and returns, run on a real `redis-server` (started
//! privately, as in `tests/support/redis_server.rs`) and mirrored on a
//! `LocalStore` whose manual clock is set to each script's own reading of
//! the server clock. Both must grant, refuse, give back and hold exactly
//! the same: the give-back rule is one rule, in Lua and in Rust.

use std::time::Duration;

use ::redis::aio::MultiplexedConnection;

use super::redis_server::RedisServer;
use super::{ACQUIRE, RELEASE, RedisStore};
use crate::shared::{Lease, LocalStore, Store};
use crate::{KeyedLimiter, ManualClock, Quota};

const KEY: &str = "k";

/// A small deterministic generator: the sequence is the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Whole tokens in the Redis bucket at the server tick `now`, from its state.
async fn redis_available(store: &RedisStore, admin: &mut MultiplexedConnection, now: u64) -> u64 {
    let state: Option<String> = ::redis::cmd("GET")
        .arg(store.redis_key(KEY))
        .query_async(admin)
        .await
        .unwrap();
    let tat = state.map_or(now, |state| {
        let tat = state.split(':').nth(1).expect("a state");
        tat.parse::<u64>().expect("integer ticks").max(now)
    });
    (now + store.setting().scale.tolerance - tat) / store.setting().scale.token_ticks
}

#[tokio::test]
async fn the_scripts_give_back_by_the_in_process_rule() {
    let Some(server) = RedisServer::start("the_scripts_give_back_by_the_in_process_rule") else {
        return;
    };
    // T = 50 ms: whole microseconds, so one tick is one microsecond in Redis
    // and every server reading is a whole number of the local nanoseconds.
    let quota = Quota::new(10, 1, Duration::from_millis(50)).unwrap();
    let redis = RedisStore::connect(&server.url(), quota, "parity:", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(redis.setting().scale.ticks_per_micro, 1);
    let mut admin = ::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let clock = ManualClock::new();
    let local = LocalStore::from_limiter(KeyedLimiter::builder(quota).clock(clock.clone()).build());
    // The server tick the local clock's zero stands for.
    let mut origin = None;
    let mut follow = |now: u64| {
        let origin = *origin.get_or_insert(now);
        clock.set(Duration::from_micros(now - origin));
    };
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    // Leases not yet given back: the server's receipt and the local one.
    let mut outstanding: Vec<(Lease, Lease)> = Vec::new();
    // Returns where the cost less the time held, not the unused part, bound.
    let (mut grants, mut returns, mut held_bound) = (0, 0, 0);
    for step in 0..150 {
        // Hold leases for 0 to 30 ms (up to 0.6 token of refill), so that
        // both halves of the rule bind: the unused part, and the cost less
        // the time held.
        if rng.below(2) == 0 {
            tokio::time::sleep(Duration::from_millis(rng.below(30))).await;
        }
        let now = if outstanding.is_empty() || rng.below(5) < 3 {
            let want = 1 + rng.below(6);
            let setting = redis.setting();
            let [granted, wait, now, left, ..]: [u64; 7] =
                redis.run(&setting, &ACQUIRE, KEY, &[want]).await.unwrap();
            follow(now);
            let grant = local.acquire(KEY, want).await.unwrap();
            assert_eq!(grant.tokens, granted, "step {step}: grant of {want}");
            assert_eq!(
                grant.remaining,
                Some(left),
                "step {step}: left after {want}"
            );
            if granted == 0 {
                assert_eq!(
                    grant.retry_after,
                    Duration::from_micros(wait),
                    "step {step}"
                );
            } else {
                grants += 1;
                outstanding.push((Lease { granted, at: now }, grant.lease));
            }
            now
        } else {
            let pick = rng.below(outstanding.len() as u64) as usize;
            let (remote, near) = outstanding.swap_remove(pick);
            // Half the time all of it: then any time held binds.
            let unused = match rng.below(2) {
                0 => remote.granted,
                _ => rng.below(remote.granted + 1),
            };
            let [_, _, now] = redis
                .run(
                    &redis.setting(),
                    &RELEASE,
                    KEY,
                    &[remote.granted, remote.at, unused],
                )
                .await
                .unwrap();
            follow(now);
            local.release(KEY, near, unused).await.unwrap();
            returns += 1;
            let token = redis.setting().scale.token_ticks;
            let cost_less_held = (remote.granted * token).checked_sub(now - remote.at);
            if cost_less_held.is_some_and(|left| left < unused * token) {
                held_bound += 1;
            }
            now
        };
        assert_eq!(
            redis_available(&redis, &mut admin, now).await,
            local.limiter().available(KEY),
            "step {step}"
        );
    }
    // The sequence exercised both operations, and both halves of the rule.
    assert!(
        grants >= 30 && returns >= 20 && held_bound >= 10,
        "{grants} grants, {returns} returns, {held_bound} bound by the time held"
    );
}
