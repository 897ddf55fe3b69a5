//! The keyed shared limiter: one budget per key, shared by every node
//! through a [`Store`], with leases only for the keys whose demand pays for
//! them.

mod batch;
mod cold;
mod config;
mod demand;
mod hot_answer;
mod outage;
mod receipt;
mod stats;
mod store_key;
mod table;

use std::num::NonZeroUsize;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::jitter::JitterGenerator;
use crate::keyed::KeyTableStats;
use crate::shared::BudgetError;
use crate::shared::allowance::{add, wait_for};
use crate::shared::pacing::{self, MIN_PAUSE};
use crate::shared::{
    AllowanceConfig, AllowanceError, FailurePolicy, LocalAllowance, Source, Store,
};
use crate::sync::unmodelled::{Arc, Weak};
use crate::{AcquireError, KeyedLimiter};
use batch::Batched;
use cold::{ColdCall, ColdKey, Decided};
pub use config::KeyedAllowanceConfig;
pub use hot_answer::HotAnswer;
use outage::Outage;
pub use receipt::KeyedReceipt;
use receipt::Origin;
pub use stats::KeyedAllowanceStats;
pub use store_key::{LITERAL_MAX as STORE_KEY_LITERAL_MAX, store_key};
use table::Table;

/// One budget per key, shared by every node through a [`Store`]: "100
/// requests a minute per API key, across the fleet".
///
/// **Cold keys** (the many with little traffic) take one store decision per
/// request, for exactly the cost, with nothing leased: a million mostly
/// idle keys strand no tokens. **Hot keys** — those whose demand on this
/// node reaches [`hot_at`](KeyedAllowanceConfig::hot_at) tokens a second —
/// get a lease pool ([`LocalAllowance`]'s, one compare-and-swap per
/// request), returned to the store when their demand falls below
/// [`cold_below`](KeyedAllowanceConfig::cold_below). Local state is
/// bounded by a key cap, a byte bound and a cap on hot keys; idle keys are
/// forgotten, and forgetting a key never gives it fresh credit, since the
/// store holds its budget.
///
/// **The bound**, per key over all nodes: admitted ≤ granted by the store
/// (net of returns) ≤ `B + r·t` on the store's clock, under every
/// interleaving (admissions under [`FailurePolicy::Open`] and
/// [`FailurePolicy::Fallback`] excepted, and counted). [`docs/distributed.md`](crate::guide::distributed)
/// ("Keyed shared budgets") has the proof.
///
/// **Keys** are taken by any form that reads as a string (`AsRef<str>`:
/// `&str`, `String`, `Arc<str>`, a newtype of your own), and the store
/// names a key by that string ([`store_key`]): every node must name a key
/// alike, so a typed key (a tuple, an address) says how with its
/// `AsRef<str>`, or is formatted by the caller.
///
/// **Giving back**: [`take`](Self::take) and [`try_take`](Self::try_take)
/// answer with a [`KeyedReceipt`], whose `undo` returns the tokens to the
/// key's pool they came from or to the store by the one give-back rule,
/// for work that was not done (a later limit refused, the response says
/// so); `acquire` and `try_acquire` are the same calls, receipt kept.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate::shared::{FailurePolicy, HotAnswer, KeyedAllowance, KeyedAllowanceConfig, LocalStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// // 100 a minute per API key, for every node sharing the store.
/// let store = Arc::new(LocalStore::new(Quota::new(100, 100, Duration::from_secs(60))?));
/// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
/// match node.try_acquire("api-key-7", 1) {
///     Ok(HotAnswer::Admitted(_source)) => { /* served from a lease */ }
///     Ok(HotAnswer::AskStore) => {
///         // A cold key: one store decision.
///         node.acquire("api-key-7", 1, Duration::from_millis(50)).await?;
///     }
///     Err(_refused) => { /* 429, 413 or 503 */ }
/// }
/// node.shutdown().await; // hot keys' unused tokens go back
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyedAllowance<S: Store> {
    inner: Arc<Inner<S>>,
}

impl<S: Store> Clone for KeyedAllowance<S> {
    /// Another handle on the same keys and leases.
    fn clone(&self) -> Self {
        KeyedAllowance {
            inner: Arc::clone(&self.inner),
        }
    }
}

#[derive(Debug)]
struct Inner<S: Store> {
    store: Arc<S>,
    /// What hot keys' pools lease from: their refills batched into
    /// `acquire_many` calls.
    batched: Arc<Batched<S>>,
    config: KeyedAllowanceConfig,
    table: Table<S>,
    /// Cold keys' admissions while the store is down, under
    /// [`FailurePolicy::Fallback`]; bounded like the table.
    fallback: Option<KeyedLimiter<String>>,
    /// Holds cold calls back for a while after one failed.
    outage: Outage,
    counters: Arc<stats::Counters>,
    runtime: Handle,
}

impl<S: Store> KeyedAllowance<S> {
    /// A keyed allowance over `store`, with no key tracked yet. Must be
    /// called inside a tokio runtime, on which cold calls, refills and the
    /// demand sampler run.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let config = KeyedAllowanceConfig { hot_at: 5, cold_below: 5, ..KeyedAllowanceConfig::new(FailurePolicy::Closed) };
    /// let built = KeyedAllowance::new(store, config);
    /// assert_eq!(built.err(), Some(AllowanceError::DemandThresholds));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(store: Arc<S>, config: KeyedAllowanceConfig) -> Result<Self, AllowanceError> {
        config.validate()?;
        let runtime = Handle::try_current().map_err(|_| AllowanceError::NoRuntime)?;
        let fallback = match config.allowance.on_failure {
            FailurePolicy::Fallback(quota) => Some(
                KeyedLimiter::builder(quota)
                    .max_keys(NonZeroUsize::new(config.max_keys).unwrap_or(NonZeroUsize::MIN))
                    .build(),
            ),
            FailurePolicy::Closed | FailurePolicy::Open => None,
        };
        let counters = Arc::new(stats::Counters::default());
        let inner = Arc::new(Inner {
            batched: Arc::new(Batched::new(
                Arc::clone(&store),
                &runtime,
                config.allowance.timeout,
            )),
            store,
            table: Table::new(&config, Arc::clone(&counters)),
            config,
            fallback,
            outage: Outage::new(),
            counters,
            runtime,
        });
        inner
            .runtime
            .spawn(sample_demand(Arc::downgrade(&inner), config.sample_every));
        Ok(KeyedAllowance { inner })
    }

    /// Takes `cost` tokens of `key`'s budget from its local lease now, or
    /// refuses; never waits, never calls the store. A cold key (or a cost
    /// above `max_lease`) is answered [`HotAnswer::AskStore`], spending and
    /// refusing nothing: route it to [`acquire`](Self::acquire). A hot key
    /// answers from its pool; a pool short of the cost is not the store out
    /// of it, so it is `AskStore` too, unless the store's last word was that the key had no
    /// token yet. A key the store found empty on this node's last call
    /// (cold, or hot through its pool's refill) is refused here, with the
    /// store's wait for its next token (the word trusted until that token,
    /// at most 1 s), and one above its capacity too.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{AcquireError, Quota};
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert_eq!(node.try_acquire("a new key", 1), Ok(HotAnswer::AskStore));
    /// assert_eq!(node.try_acquire("a new key", 0), Err(BudgetError::Limit(AcquireError::ZeroCost)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire<K>(&self, key: &K, cost: u64) -> Result<HotAnswer<Source>, BudgetError>
    where
        K: AsRef<str> + ?Sized,
    {
        // No receipt built: the hot path stays one compare-and-swap, with
        // no allocation nor reference count.
        Ok(
            match self.try_hot(key.as_ref(), cost, |_, source| source)? {
                Some((_, source)) => HotAnswer::Admitted(source),
                None => HotAnswer::AskStore,
            },
        )
    }

    /// [`try_acquire`](Self::try_acquire), with a receipt to give the
    /// tokens back by ([`KeyedReceipt::undo`]): into the key's pool they
    /// came from.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert!(matches!(node.try_take("a cold key", 1), Ok(HotAnswer::AskStore)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_take<K>(&self, key: &K, cost: u64) -> Result<HotAnswer<KeyedReceipt<S>>, BudgetError>
    where
        K: AsRef<str> + ?Sized,
    {
        let hot = self.try_hot(key.as_ref(), cost, |pool, source| {
            (source, Origin::from_pool(pool, source))
        })?;
        Ok(match hot {
            Some((name, (source, origin))) => {
                HotAnswer::Admitted(self.receipt(name.into_owned(), cost, source, origin))
            }
            None => HotAnswer::AskStore,
        })
    }

    /// The non-blocking decision of `try_acquire` and `try_take`, with the
    /// key's store name; `admitted` makes the answer from the key's pool.
    /// `None`: only the store can decide.
    fn try_hot<'k, R>(
        &self,
        key: &'k str,
        cost: u64,
        admitted: impl FnOnce(&Arc<receipt::Pool<S>>, Source) -> R,
    ) -> Result<Option<(std::borrow::Cow<'k, str>, R)>, BudgetError> {
        if cost == 0 {
            return Err(AcquireError::ZeroCost.into());
        }
        let inner = &self.inner;
        let name = store_key(key);
        if cost > inner.config.allowance.max_lease {
            inner.table.within_known_capacity(&name, cost)?;
            return Ok(None);
        }
        let when_down = || inner.when_down(&name, cost).map(|(source, _)| source);
        let answer = inner.table.try_hot(&name, cost, when_down, admitted)?;
        Ok(answer.map(|answer| (name, answer)))
    }

    fn receipt(
        &self,
        name: String,
        tokens: u64,
        source: Source,
        origin: Origin<S>,
    ) -> KeyedReceipt<S> {
        KeyedReceipt {
            inner: Arc::clone(&self.inner),
            name,
            tokens,
            source,
            origin,
        }
    }

    /// Takes `cost` tokens of `key`'s budget, waiting up to `max_wait` for
    /// them. A hot key waits for its refills as
    /// [`LocalAllowance::acquire`] (refused only on the store's word, a
    /// paced refill moved earlier to give it); a cold key is one store decision for
    /// exactly `cost` (bounded by the store timeout, whatever `max_wait`),
    /// asked again after the store's wait (spread by jitter, at most 1 s at
    /// a time) while that wait fits in `max_wait`. A grant short of the cost is returned to the store at once
    /// and the request refused: never half-used. Cancelling the future
    /// returns a grant it had not yet admitted.
    ///
    /// An admission is [`Source::Lease`] whether it came from the key's
    /// pool or from a cold decision: either way a grant of the store,
    /// within the shared bound.
    ///
    /// Refusals ([`BudgetError`]): [`AcquireError::Insufficient`] (with the
    /// store's wait, or after a grant of part of the cost the refill of the
    /// rest; at least 1 ms), [`AcquireError::ExceedsCapacity`] (above the
    /// key's capacity), [`AcquireError::ZeroCost`], and while the store is
    /// unreachable what the [`FailurePolicy`] says.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::{AcquireError, Quota};
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert_eq!(node.acquire("k", 10, Duration::ZERO).await, Ok(Source::Lease));
    /// let refused = node.acquire("k", 1, Duration::ZERO).await;
    /// assert!(matches!(refused, Err(BudgetError::Limit(AcquireError::Insufficient { .. }))));
    /// let never = node.acquire("k", 11, Duration::ZERO).await;
    /// assert!(matches!(never, Err(BudgetError::Limit(AcquireError::ExceedsCapacity { .. }))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn acquire<K>(
        &self,
        key: &K,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Source, BudgetError>
    where
        K: AsRef<str> + ?Sized,
    {
        self.take(key, cost, max_wait).await.map(KeyedReceipt::kept)
    }

    /// [`acquire`](Self::acquire), with a receipt to give the tokens back
    /// by ([`KeyedReceipt::undo`]): into the key's pool, or to the store by
    /// the one rule for a cold decision.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// let receipt = node.take("k", 5, Duration::ZERO).await?;
    /// assert_eq!((receipt.tokens(), receipt.source()), (5, Source::Lease));
    /// receipt.keep();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn take<K>(
        &self,
        key: &K,
        cost: u64,
        max_wait: Duration,
    ) -> Result<KeyedReceipt<S>, BudgetError>
    where
        K: AsRef<str> + ?Sized,
    {
        if cost == 0 {
            return Err(AcquireError::ZeroCost.into());
        }
        let inner = &self.inner;
        let name = store_key(key.as_ref()).into_owned();
        // None past the end of tokio's clock: no deadline at all.
        let deadline = tokio::time::Instant::now().checked_add(max_wait);
        // Drawn only once a cold request has to wait.
        let mut jitter: Option<JitterGenerator> = None;
        loop {
            let leased = if cost <= inner.config.allowance.max_lease {
                inner.table.hot(&name)
            } else {
                None
            };
            if let Some(pool) = leased {
                if inner.table.take_given_back(&name, &pool, cost) {
                    let origin = Origin::Pool(Arc::downgrade(&pool));
                    return Ok(self.receipt(name, cost, Source::Lease, origin));
                }
                let left = deadline.map_or(Duration::MAX, |at| {
                    at.saturating_duration_since(tokio::time::Instant::now())
                });
                return match pool.acquire(cost, left).await {
                    Ok(source) => {
                        let origin = Origin::from_pool(&pool, source);
                        Ok(self.receipt(name, cost, source, origin))
                    }
                    // The pool's policy is `Closed`: the key's failure state
                    // is the node's, whether it is hot or cold.
                    Err(BudgetError::StoreUnavailable) => inner
                        .when_down(&name, cost)
                        .map(|(source, origin)| self.receipt(name, cost, source, origin)),
                    Err(refused) => {
                        inner.table.asked(&name, cost);
                        Err(refused)
                    }
                };
            }
            inner.table.within_known_capacity(&name, cost)?;
            if !inner.table.track(&name, cost) {
                add(&inner.counters.untracked, 1);
            }
            let outcome = match inner.table.refused_for(&name, cost) {
                // The store said the key had no token until later: refused
                // here, no round trip.
                Some(retry_after) => Err(AcquireError::Insufficient { retry_after }.into()),
                None => inner.decide_cold(&name, cost).await,
            };
            let retry_after = match outcome {
                Ok((source, origin)) => return Ok(self.receipt(name, cost, source, origin)),
                Err(BudgetError::Limit(AcquireError::Insufficient { retry_after })) => retry_after,
                Err(refused) => return Err(refused),
            };
            let jitter = jitter.get_or_insert_with(JitterGenerator::from_entropy);
            let word_ends = inner.table.word_holds_for(&name);
            let Some(pause) =
                pacing::pause_before_asking_again(retry_after, word_ends, deadline, jitter)
            else {
                return Err(AcquireError::Insufficient { retry_after }.into());
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Returns every hot key's unused tokens to the store and makes the
    /// keys cold; the result is how many the store took back. Keys become hot
    /// again as their demand is measured: this does not close the
    /// allowance.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert_eq!(node.shutdown().await, 0); // nothing leased yet
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn shutdown(&self) -> u64 {
        let mut returned = 0u64;
        for pool in self.inner.table.cool_all() {
            returned = returned.saturating_add(pool.shutdown().await);
        }
        returned
    }

    /// Whether `key` is hot (served from a lease pool) now.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert!(!node.is_hot("k"));
    ///
    /// // A key type of your own, named in the store by its string.
    /// struct ApiKey(String);
    /// impl AsRef<str> for ApiKey {
    ///     fn as_ref(&self) -> &str {
    ///         &self.0
    ///     }
    /// }
    /// assert!(!node.is_hot(&ApiKey("k".to_owned())));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_hot<K: AsRef<str> + ?Sized>(&self, key: &K) -> bool {
        self.inner.table.hot(&store_key(key.as_ref())).is_some()
    }

    /// Tokens leased for `key` and not yet spent on this node (zero for a
    /// cold key).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert_eq!(node.pooled("k"), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pooled<K: AsRef<str> + ?Sized>(&self, key: &K) -> u64 {
        self.inner.table.pooled(&store_key(key.as_ref()))
    }

    /// A snapshot of the counters.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// node.acquire("k", 1, Duration::ZERO).await?;
    /// let stats = node.stats();
    /// assert_eq!((stats.cold_calls, stats.cold_admitted, stats.tracked_keys), (1, 1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> KeyedAllowanceStats {
        let mut stats = self.inner.counters.snapshot();
        self.inner.table.fill_stats(&mut stats);
        stats
    }

    /// What the key table holds and has dropped so far: keys tracked
    /// (`created`), demand samples and sweeps (`sweeps`), idle keys
    /// forgotten (`evicted`); `overflowed` stays zero (a key past the cap
    /// is served untracked, counted in [`KeyedAllowanceStats::untracked`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// node.acquire("k", 1, Duration::ZERO).await?;
    /// let table = node.table_stats();
    /// assert_eq!((table.keys, table.created, table.max_keys), (1, 1, 10_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn table_stats(&self) -> KeyTableStats {
        self.inner.table.table_stats()
    }

    /// Keys tracked now, as counted against the cap (see
    /// [`KeyedAllowanceConfig::max_keys`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// node.acquire("k", 1, Duration::ZERO).await?;
    /// assert_eq!(node.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.inner.table.len()
    }

    /// Whether no key is tracked.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert!(node.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys tracked at once ([`KeyedAllowanceConfig::max_keys`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let config = KeyedAllowanceConfig { max_keys: 500, ..KeyedAllowanceConfig::new(FailurePolicy::Closed) };
    /// assert_eq!(KeyedAllowance::new(store, config)?.max_keys(), 500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.inner.table.max_keys()
    }

    /// Forgets every key the demand sampler last found idle for
    /// [`forget_after`](KeyedAllowanceConfig::forget_after) and that has
    /// asked for nothing since, and returns how many; the sampler forgets
    /// them too, at its next sample. Forgetting a key never gives it
    /// credit: the store holds its budget. Each shard is write-locked while
    /// it is swept.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// node.acquire("k", 1, Duration::ZERO).await?;
    /// assert_eq!(node.sweep(), 0); // it has just asked
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sweep(&self) -> usize {
        self.inner.table.sweep(self.inner.config.forget_after)
    }
}

impl<S: Store> Inner<S> {
    /// One store decision for exactly `cost` tokens of the key named
    /// `name`, and where its tokens would go back.
    async fn decide_cold(&self, name: &str, cost: u64) -> Result<(Source, Origin<S>), BudgetError> {
        if self.outage.in_force() {
            return self.when_down(name, cost);
        }
        let key = ColdKey {
            store: Arc::clone(&self.store),
            key: name.to_owned(),
            timeout: self.config.allowance.timeout,
            counters: Arc::clone(&self.counters),
        };
        let decided = ColdCall::start(key, cost, &self.runtime).answer().await;
        match decided {
            Decided::Failed { unavailable: true } => {
                self.outage.failed(self.config.allowance.lease_period)
            }
            // A refusal of this key is an answer: the store is up.
            Decided::Failed { unavailable: false }
            | Decided::Granted(_)
            | Decided::Refused { .. } => self.outage.answered(),
        }
        match decided {
            Decided::Granted(lease) => {
                self.table.learn_grant(name);
                add(&self.counters.cold_admitted, cost);
                Ok((Source::Lease, Origin::Store(lease)))
            }
            Decided::Refused {
                had,
                first_token,
                refill_interval,
                capacity,
            } => {
                self.table
                    .learn_refusal(name, capacity, had, first_token, refill_interval);
                if cost > capacity {
                    Err(AcquireError::ExceedsCapacity { cost, capacity }.into())
                } else {
                    let retry_after = wait_for(cost, had, first_token, refill_interval);
                    Err(AcquireError::Insufficient {
                        retry_after: retry_after.max(MIN_PAUSE),
                    }
                    .into())
                }
            }
            Decided::Failed { unavailable: true } => self.when_down(name, cost),
            Decided::Failed { unavailable: false } => Err(BudgetError::StoreRefused),
        }
    }

    /// The failure policy, for one cold request whose store call failed:
    /// nothing debited at the store, so nothing for a receipt to give back.
    fn when_down(&self, name: &str, cost: u64) -> Result<(Source, Origin<S>), BudgetError> {
        match (self.config.allowance.on_failure, &self.fallback) {
            (FailurePolicy::Open, _) => {
                add(&self.counters.failed_open, cost);
                Ok((Source::FailedOpen, Origin::Unbacked))
            }
            (FailurePolicy::Fallback(_), Some(local)) => {
                local.try_acquire(name, cost)?;
                add(&self.counters.fallback, cost);
                Ok((Source::Fallback, Origin::Unbacked))
            }
            _ => Err(BudgetError::StoreUnavailable),
        }
    }
}

/// Samples every tracked key's demand each `every`, switching keys
/// between cold and hot and forgetting idle ones, until the allowance is
/// dropped.
async fn sample_demand<S: Store>(inner: Weak<Inner<S>>, every: Duration) {
    let mut last = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        let now = tokio::time::Instant::now();
        let promoted = inner.table.sample(now.duration_since(last), &inner.config);
        last = now;
        for name in promoted {
            inner.runtime.spawn(promote(Arc::downgrade(&inner), name));
        }
    }
}

/// Gives the key named `name` a lease pool, warmed by one lease before it
/// serves, so the switch never refuses callers the store would admit.
async fn promote<S: Store>(inner: Weak<Inner<S>>, name: String) {
    let pool = {
        let Some(inner) = inner.upgrade() else { return };
        // The configuration was validated when the allowance was built, so
        // this fails only outside a runtime, which a task is not.
        // `Closed`: an outage is answered by the node's per-key failure
        // state (`Inner::when_down`), not by a fallback bucket of the pool
        // that would start full at each promotion.
        let config = AllowanceConfig {
            on_failure: FailurePolicy::Closed,
            ..inner.config.allowance
        };
        LocalAllowance::new(Arc::clone(&inner.batched), name.clone(), config)
            .ok()
            .map(Arc::new)
    };
    if let Some(pool) = &pool {
        // A failed warm-up leaves the pool to its own failure policy.
        let _ = pool.refill().await;
    }
    if let Some(inner) = inner.upgrade() {
        inner.table.install(&name, pool);
    }
    // Otherwise the pool drops here and gives its lease back.
}
