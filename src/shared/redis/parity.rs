//! The scripts' arithmetic against Rust, on a real `redis-server` (started
//! privately, as in `tests/support/src/redis_server.rs`), each call mirrored at
//! the script's own reading of the server clock:
//!
//! - a quota charged per token against the in-process store: one random
//!   sequence of grants and returns on a `LocalStore` whose manual clock
//!   follows the server's. Both must grant, refuse, give back and hold
//!   exactly the same: the give-back rule is one rule, in Lua and in Rust;
//! - quotas charged per request (64 MiB/s, 1 GiB/s, 2^33/s, ...), changed
//!   from one to the next by generation, against the Rust mirror of the
//!   scripts' arithmetic (`Scale::charge`, `fit`, `owed`), state included.
//!   The property tests in `scale.rs` hold that mirror to the rational
//!   model.

use std::time::Duration;

use ::redis::aio::MultiplexedConnection;

use super::eval::{ACQUIRE, RELEASE};
use tollgate_test_support::start_server;

use super::admin;
use super::redis_store::RedisStore;
use super::scale::Scale;
use crate::clock::ManualClock;
use crate::keyed::KeyedLimiter;
use crate::quota::Quota;
use crate::shared::{Lease, LocalStore, Store};

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
    let server = start_server!("the_scripts_give_back_by_the_in_process_rule");
    // T = 50 ms: whole microseconds, so one tick is one microsecond in Redis
    // and every server reading is a whole number of the local nanoseconds.
    let quota = Quota::new(10, 1, Duration::from_millis(50)).unwrap();
    let redis = RedisStore::connect(&server.url(), quota, "parity:", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(redis.setting().scale.ticks_per_micro, 1);
    let mut admin = admin(&server).await;
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
            let [granted, wait, now, left, ..]: [u64; 9] = redis
                .run(&setting, &ACQUIRE, KEY, &[want, setting.fresh()])
                .await
                .unwrap();
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

/// The Rust mirror of one key: the state the scripts should hold, under
/// the quota they should hold it under.
struct Mirror {
    scale: Scale,
    generation: u64,
    /// The state, in the quota's ticks; at or before now is a full bucket.
    tat: u64,
    /// The microsecond the state was converted to its quota, if it was.
    born: u64,
}

impl Mirror {
    /// The continuity rule, as the acquire script applies it on the first
    /// call at a newer generation: whole tokens carry over, clipped; a debt
    /// carries over as the microsecond it is paid, rounded up.
    fn convert(&mut self, to: Scale, generation: u64, now_us: u64) {
        let from = self.scale;
        let snow = now_us * from.ticks_per_micro;
        let nnow = now_us * to.ticks_per_micro;
        let paid = self.tat.saturating_sub(from.tolerance);
        self.tat = if paid > snow {
            paid.div_ceil(from.ticks_per_micro) * to.ticks_per_micro + to.tolerance
        } else {
            let room = snow + from.tolerance - self.tat.max(snow);
            match from.fit(room).min(to.capacity) {
                full if full == to.capacity => nnow,
                tokens => nnow + to.charge(to.capacity - tokens),
            }
        };
        (self.scale, self.generation, self.born) = (to, generation, now_us);
    }

    /// What the acquire script replies: `(granted, wait, left)`.
    fn acquire(&mut self, want: u64, now_us: u64) -> (u64, u64, u64) {
        let s = self.scale;
        let snow = now_us * s.ticks_per_micro;
        let tat = self.tat.max(snow);
        let room = snow + s.tolerance - tat;
        let one = s.charge(1);
        if room < one {
            return (0, (one - room).div_ceil(s.ticks_per_micro), 0);
        }
        let granted = want.min(s.fit(room));
        let cost = s.charge(granted);
        self.tat = tat + cost;
        (granted, 0, s.fit(room - cost))
    }

    /// What the release script gives back, in ticks.
    fn release(&mut self, lease: Lease, unused: u64, now_us: u64) -> u64 {
        let s = self.scale;
        let snow = now_us * s.ticks_per_micro;
        if self.tat <= snow || lease.at < self.born {
            return 0;
        }
        let held = snow - lease.at * s.ticks_per_micro;
        let owed = s.owed(lease.granted, unused, held);
        let returned = owed.min(self.tat - snow);
        self.tat = self.tat.saturating_sub(owed).max(snow);
        returned
    }
}

#[tokio::test]
async fn per_request_scripts_match_their_rust_mirror_across_quota_changes() {
    let server = start_server!("per_request_scripts_match_their_rust_mirror");
    const SECOND: Duration = Duration::from_secs(1);
    let quotas = [
        Quota::new(64 << 20, 64 << 20, SECOND).unwrap(),
        Quota::new(1 << 30, 1 << 30, SECOND).unwrap(),
        Quota::new(1 << 34, 1 << 33, SECOND).unwrap(),
        // Charged per token, between two per-request quotas.
        Quota::new(50, 1000, SECOND).unwrap(),
        Quota::new(1000, 3_000_000_007, SECOND).unwrap(),
        // 900.09 eighths of a µs a token: 0.1 % slow if rounded per token.
        Quota::new(1, 8888, SECOND).unwrap(),
        Quota::new(3, 1, Duration::from_nanos(1001)).unwrap(),
        Quota::new(1000, u64::MAX, Duration::from_nanos(1)).unwrap(),
    ];
    let store = RedisStore::connect(&server.url(), quotas[0], "mirror:", Duration::from_secs(10))
        .await
        .unwrap();
    let mut admin = admin(&server).await;
    // From generation 1 on, so that the key is kept through every change
    // (a state at generation 0 may expire once full, and is then created
    // afresh instead of converted).
    let mut mirror = Mirror {
        scale: store.setting().scale,
        generation: 1,
        tat: 0,
        born: 0,
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut outstanding: Vec<Lease> = Vec::new();
    let (mut partial, mut refused, mut returned_some) = (0, 0, 0);
    for (generation, &quota) in (1u64..).zip(&quotas) {
        store.set_quota(quota, generation).unwrap();
        let setting = store.setting();
        let scale = setting.scale;
        assert_eq!(scale.token_parts > 1, quota != quotas[3], "{quota:?}");
        let mut converted = generation == 1;
        for step in 0..40 {
            if rng.below(3) == 0 {
                tokio::time::sleep(Duration::from_millis(rng.below(3))).await;
            }
            let b = scale.capacity;
            if outstanding.is_empty() || rng.below(3) > 0 {
                // A burst of one to three calls in one pipeline, run back
                // to back by the server: the later ones find the bucket
                // as the first left it, give or take a little refill.
                let wants: Vec<u64> = (0..1 + rng.below(3))
                    .map(|_| match rng.below(4) {
                        0 => 1 + rng.below(3),
                        1 => 1 + rng.below(b),
                        2 => b,
                        _ => 1 + rng.below(b / 50 + 1),
                    })
                    .collect();
                let calls: Vec<_> = wants
                    .iter()
                    .map(|&want| store.call(&setting, &ACQUIRE, KEY, &[want, setting.fresh()]))
                    .collect();
                let replies = store
                    .connection
                    .eval_many(&ACQUIRE, &calls, Duration::from_secs(10))
                    .await;
                for (&want, reply) in wants.iter().zip(replies) {
                    let [granted, wait, now, left, stored, capacity, d, t, parts]: [u64; 9] =
                        store.decode(KEY, &reply.unwrap()).unwrap();
                    if !converted {
                        mirror.convert(scale, generation, now);
                        converted = true;
                    }
                    let expected = mirror.acquire(want, now);
                    let at = format!("generation {generation}, step {step}: {want} of {quota:?}");
                    assert_eq!((granted, wait, left), expected, "{at}");
                    let quota_told = [stored, capacity, d, t, parts];
                    let quota_sent = [
                        generation,
                        b,
                        scale.ticks_per_micro,
                        scale.token_ticks,
                        scale.token_parts,
                    ];
                    assert_eq!(quota_told, quota_sent, "{at}");
                    if granted == 0 {
                        refused += 1;
                    } else {
                        partial += u32::from(granted < want);
                        outstanding.push(Lease { granted, at: now });
                    }
                }
            } else {
                // Mostly the latest lease, whose cost has not refilled yet
                // (at these rates a small one refills within a round trip).
                let pick = match rng.below(3) {
                    0 => rng.below(outstanding.len() as u64) as usize,
                    _ => outstanding.len() - 1,
                };
                let lease = outstanding.swap_remove(pick);
                let unused = match rng.below(2) {
                    0 => lease.granted,
                    _ => 1 + rng.below(lease.granted),
                };
                let [code, returned, now] = store
                    .run(&setting, &RELEASE, KEY, &[lease.granted, lease.at, unused])
                    .await
                    .unwrap();
                assert_eq!(code, 1);
                let expected = mirror.release(lease, unused, now);
                assert_eq!(returned, expected, "generation {generation}, step {step}");
                returned_some += u32::from(returned > 0);
            }
            check_state(&mut admin, &store, &mirror).await;
        }
    }
    // Every way through the scripts was taken.
    eprintln!("{partial} partial grants, {refused} refusals, {returned_some} give-backs");
    assert!(
        partial >= 5 && refused >= 5 && returned_some >= 5,
        "{partial} partial grants, {refused} refusals, {returned_some} give-backs"
    );
}

/// The key holds the mirror's state and quota; or it expired, which it
/// only does once its state is past.
async fn check_state(admin: &mut MultiplexedConnection, store: &RedisStore, mirror: &Mirror) {
    let state: Option<String> = ::redis::cmd("GET")
        .arg(store.redis_key(KEY))
        .query_async(admin)
        .await
        .unwrap();
    let Some(state) = state else {
        let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query_async(admin).await.unwrap();
        let now_us = (secs - super::scale::EPOCH_UNIX_SECS) * 1_000_000 + micros;
        assert!(mirror.tat <= now_us * mirror.scale.ticks_per_micro);
        return;
    };
    let fields: Vec<u64> = state.split(':').map(|f| f.parse().unwrap()).collect();
    let s = mirror.scale;
    let mut expected = vec![
        s.ticks_per_micro,
        mirror.tat,
        fields[2],
        mirror.generation,
        s.token_ticks,
        s.tolerance,
    ];
    if s.token_parts > 1 {
        expected.extend([s.token_parts, s.capacity]);
    }
    assert_eq!(fields, expected, "{state}");
}
