//! What the store does: [`Store`]'s acquire, release and batch of acquires
//! on Redis, and the grant an acquire's reply stands for.

use std::future::Future;
use std::time::Duration;

use ::redis::Cmd;

use super::error::RedisStoreError;
use super::eval::{ACQUIRE, DEBIT, RELEASE};
use super::redis_store::{RedisStore, Setting};
use super::scale;
use crate::quota::Quota;
use crate::shared::store::{Grant, Lease, Store};

/// The most tokens one call asks for or gives back: every count a script
/// reads stays exact as a Lua number (below `2^53`), and no bucket the
/// scripts accept holds more (`sane` in `lua.rs`: `B * T + T < 2^53`
/// with `T >= 1`, or `B < 2^51` per request), so a full bucket of any
/// capacity grants it whole in one call.
const MAX_ASK: u64 = scale::EXACT_LIMIT - 1;

impl RedisStore {
    async fn acquire_tokens(&self, key: &str, want: u64) -> Result<Grant, RedisStoreError> {
        let setting = self.setting();
        if want == 0 {
            return Ok(unasked(&setting));
        }
        // The script grants at most the stored quota's capacity, which this
        // node may not know: the ask is only kept exact.
        let want = want.min(MAX_ASK);
        let reply = self
            .run(&setting, &ACQUIRE, key, &[want, setting.fresh()])
            .await?;
        self.grant(want, reply)
    }

    /// Every key's acquire in one batch ([`RedisConnection::eval_many`]):
    /// one round trip to one server, concurrent calls on a cluster.
    async fn acquire_batch(&self, requests: &[(&str, u64)]) -> Vec<Result<Grant, RedisStoreError>> {
        let setting = self.setting();
        let asked: Vec<(usize, u64)> = requests
            .iter()
            .enumerate()
            .filter(|&(_, &(_, want))| want > 0)
            .map(|(i, &(_, want))| (i, want.min(MAX_ASK)))
            .collect();
        let fresh = setting.fresh();
        let calls: Vec<Cmd> = asked
            .iter()
            .map(|&(i, want)| self.call(&setting, &ACQUIRE, requests[i].0, &[want, fresh]))
            .collect();
        let replies = self
            .connection
            .eval_many(&ACQUIRE, &calls, self.timeout)
            .await;
        let mut grants: Vec<Result<Grant, RedisStoreError>> =
            requests.iter().map(|_| Ok(unasked(&setting))).collect();
        for (&(i, want), reply) in asked.iter().zip(replies) {
            grants[i] = reply
                .and_then(|reply| self.decode(requests[i].0, &reply))
                .and_then(|reply| self.grant(want, reply));
        }
        grants
    }

    /// The grant an acquire script's decoded reply stands for, with the
    /// capacity and refill interval of the quota the server decided under.
    /// A reply telling more tokens left than that bucket can hold besides
    /// the grant is no script's: refused, as is any other impossible
    /// combination.
    fn grant(
        &self,
        want: u64,
        [
            granted,
            wait,
            now,
            left,
            generation,
            capacity,
            d,
            ticks,
            parts,
        ]: [u64; 9],
    ) -> Result<Grant, RedisStoreError> {
        let fits = capacity >= 1
            && granted <= capacity
            && left <= capacity - granted
            && generation < scale::EXACT_LIMIT
            && (1..=8).contains(&d)
            && parts >= 1;
        let decided = Grant {
            // Only read when the reply fits, whose `d` and `parts` are not 0.
            refill_interval: if fits {
                token_interval(d, ticks, parts)
            } else {
                Duration::ZERO
            },
            remaining: Some(0),
            ..Grant::nothing(Duration::ZERO, capacity)
        };
        let grant = match (granted, wait, left) {
            (0, wait, 0) if wait > 0 && fits => Grant {
                retry_after: Duration::from_micros(wait),
                ..decided
            },
            (granted, 0, left) if (1..=want).contains(&granted) && fits => Grant {
                tokens: granted,
                lease: Lease { granted, at: now },
                remaining: Some(left),
                ..decided
            },
            _ => {
                return Err(RedisStoreError::BadReply(format!(
                    "acquire of {want} returned {granted} tokens, {left} left of {capacity}, \
                     with a wait of {wait} ticks"
                )));
            }
        };
        self.saw(generation);
        Ok(grant)
    }

    async fn debit_tokens(&self, key: &str, tokens: u64) -> Result<(), RedisStoreError> {
        let setting = self.setting();
        if tokens == 0 {
            return Ok(());
        }
        // Past 2^53 tokens a debt lasts for decades whatever its size: the
        // script's arithmetic is kept exact by clamping.
        let tokens = tokens.min(MAX_ASK);
        let [code, _, _] = self
            .run(&setting, &DEBIT, key, &[tokens, setting.fresh()])
            .await?;
        if code == 1 {
            Ok(())
        } else {
            Err(RedisStoreError::BadReply(format!(
                "debit returned code {code}"
            )))
        }
    }

    async fn release_tokens(
        &self,
        key: &str,
        lease: Lease,
        unused: u64,
    ) -> Result<(), RedisStoreError> {
        let setting = self.setting();
        // A lease of this store never lies beyond the range nor exceeds
        // 2^53; the script clamps it to the stored capacity, and clamping
        // here keeps its arithmetic exact whatever it is given.
        let granted = lease.granted.min(MAX_ASK);
        let unused = unused.min(granted);
        if unused == 0 || lease.at >= scale::EXACT_LIMIT {
            return Ok(());
        }
        let [code, _returned, _] = self
            .run(&setting, &RELEASE, key, &[granted, lease.at, unused])
            .await?;
        if code == 1 {
            Ok(())
        } else {
            Err(RedisStoreError::BadReply(format!(
                "release returned code {code}"
            )))
        }
    }
}

/// How long a token of the quota an acquire decided under takes to refill,
/// from its ticks of `1/d` µs per token, `ticks / parts`, in nanoseconds
/// rounded up, so that pacing on it is never early ([`refill_interval`]).
/// A quota charged per request holds the exact interval rounded down to
/// `ticks / parts`, below `(ticks + 1) / parts`: that one is rounded up.
fn token_interval(d: u64, ticks: u64, parts: u64) -> Duration {
    let ticks = u128::from(ticks) + u128::from(parts > 1);
    let nanos = (ticks * 1000).div_ceil(u128::from(parts) * u128::from(d));
    u64::try_from(nanos).map_or(Duration::MAX, Duration::from_nanos)
}

/// The answer to an ask of nothing, given without calling the server:
/// nothing granted, and what is left untold; the capacity and refill of
/// this node's own quota, the only one it knows without asking.
fn unasked(setting: &Setting) -> Grant {
    Grant {
        refill_interval: setting.quota.refill_interval(),
        ..Grant::nothing(Duration::ZERO, setting.scale.capacity)
    }
}

impl Store for RedisStore {
    type Error = RedisStoreError;

    /// The quota of this handle's setting ([`RedisStore::quota`]).
    fn quota(&self) -> Quota {
        RedisStore::quota(self)
    }

    /// False for the errors the server answers about one key or refuses to
    /// decide on: [`ForeignValue`](RedisStoreError::ForeignValue) (that
    /// key's value) and
    /// [`ServerClockOutOfRange`](RedisStoreError::ServerClockOutOfRange)
    /// (a server that answers but whose clock no failure policy should
    /// paper over). True for the rest, [`BadReply`](RedisStoreError::BadReply)
    /// included: the scripts check each key's value themselves
    /// (`ForeignValue`), so a reply no script returns means the server runs
    /// other scripts or is not the store (a fleet half-upgraded), which
    /// holds for every key, not one.
    ///
    /// ```
    /// use tollgate::shared::{RedisStore, RedisStoreError, Store};
    ///
    /// assert!(!RedisStore::unavailable(&RedisStoreError::ForeignValue("rl:{k}".into())));
    /// assert!(RedisStore::unavailable(&RedisStoreError::BadReply("nil".into())));
    /// ```
    fn unavailable(error: &RedisStoreError) -> bool {
        !matches!(
            error,
            RedisStoreError::ForeignValue(_)
                | RedisStoreError::ServerClockOutOfRange
                | RedisStoreError::QuotaConflict { .. }
        )
    }

    /// Refills `key`'s bucket to the server's now and grants up to `want`
    /// tokens of it, in one script. Nothing granted means `retry_after` is
    /// the exact wait for one token (rounded up to the microsecond). Every
    /// grant carries the quota's capacity. `want = 0` returns an empty grant
    /// without calling the server; a `want` above the capacity asks for the
    /// capacity.
    ///
    /// # Errors
    ///
    /// Any [`RedisStoreError`] but the construction ones. After
    /// [`Redis`](RedisStoreError::Redis) or
    /// [`Timeout`](RedisStoreError::Timeout) the tokens may have been
    /// debited: count them as spent.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// use tollgate::shared::{RedisStore, Store};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// let grant = store.acquire("alice", 3).await?;
    /// assert!(grant.tokens <= 3);
    /// # Ok(())
    /// # }
    /// ```
    fn acquire(
        &self,
        key: &str,
        want: u64,
    ) -> impl Future<Output = Result<Grant, Self::Error>> + Send {
        self.acquire_tokens(key, want)
    }

    /// Gives back up to `unused` tokens of the grant `lease` (clamped to
    /// `lease.granted`): the state moves back by
    /// `min(unused, granted - held)` tokens, where `held` is the time since
    /// the grant on the server's clock, so the refill a full bucket wasted
    /// meanwhile is never handed out again. An expired key (a full bucket)
    /// takes nothing back. Release each lease once: a repeated release
    /// returns its tokens again.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Store::acquire); a failed release may or may not have
    /// been applied, so it must not be retried blindly.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// use tollgate::shared::{RedisStore, Store};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// let grant = store.acquire("alice", 5).await?;
    /// // Used two of them.
    /// store.release("alice", grant.lease, grant.tokens.saturating_sub(2)).await?;
    /// # Ok(())
    /// # }
    /// ```
    fn release(
        &self,
        key: &str,
        lease: Lease,
        unused: u64,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.release_tokens(key, lease, unused)
    }

    /// Charges `tokens` to `key`'s bucket on the server's clock whether or
    /// not they fit, in one script: `tat` moves to `max(tat, now)` plus
    /// the tokens' ticks (rounded up), into debt that every node's grants
    /// wait out. An absent key is a full bucket (as an acquire finds it);
    /// a key under an older quota generation is converted first, as an
    /// acquire converts it.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Store::acquire); a failed debit may or may not have
    /// been applied.
    fn debit(
        &self,
        key: &str,
        tokens: u64,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.debit_tokens(key, tokens)
    }

    /// Acquires for every key in one batch: one pipeline of script calls
    /// on one server (one round trip), or every call at once on a cluster,
    /// each routed to its key's master. Each key is still decided by its
    /// own atomic script; each outcome is as [`acquire`](Store::acquire)'s,
    /// in order. The whole batch is bounded by one timeout (each call on a
    /// cluster by its own, so a dead master fails only its keys).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// use tollgate::shared::{RedisStore, Store};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// let grants = store.acquire_many(&[("alice", 3), ("bob", 9)]).await;
    /// assert_eq!(grants.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    fn acquire_many<'a>(
        &'a self,
        requests: &'a [(&'a str, u64)],
    ) -> impl Future<Output = Vec<Result<Grant, Self::Error>>> + Send + 'a {
        self.acquire_batch(requests)
    }
}
