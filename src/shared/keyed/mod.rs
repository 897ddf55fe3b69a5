//! The keyed shared limiter: one budget per key, shared by every node
//! through a [`Store`], with leases only for the keys whose demand pays for
//! them.

mod batch;
mod cold;
mod config;
mod decisions;
mod demand;
mod hot_answer;
mod outage;
mod receipt;
mod sampler;
mod stats;
mod store_key;
mod tracked_keys;

use tokio::runtime::Handle;

use crate::keyed::{KeyTable, KeyTableStats, KeyedLimiter};
use crate::quota::Quota;
use crate::shared::{AllowanceError, FailurePolicy, Store};
use crate::sync::unmodelled::Arc;
use batch::Batched;
pub use config::KeyedAllowanceConfig;
pub use hot_answer::HotAnswer;
use outage::Outage;
pub use receipt::KeyedReceipt;
use sampler::sample_demand;
pub use stats::KeyedAllowanceStats;
pub use store_key::{LITERAL_MAX as STORE_KEY_LITERAL_MAX, store_key};
use tracked_keys::TrackedKeys;

/// One budget per key, shared by every node through a [`Store`]: "100
/// requests a minute per API key, across the fleet".
///
/// **Cold keys** (the many with little traffic) take one store decision per
/// request, for exactly the cost, with nothing leased: a million mostly
/// idle keys strand no tokens. **Hot keys** — those whose demand on this
/// node reaches [`hot_at`](KeyedAllowanceConfig::hot_at) tokens a second —
/// get a lease pool ([`LocalAllowance`](crate::shared::LocalAllowance)'s, one compare-and-swap per
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
    inner: Arc<KeyedAllowanceState<S>>,
}

impl<S: Store> Clone for KeyedAllowance<S> {
    /// Another handle on the same keys and leases.
    fn clone(&self) -> Self {
        KeyedAllowance {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S: Store> KeyTable for KeyedAllowance<S> {
    fn len(&self) -> usize {
        KeyedAllowance::len(self)
    }

    fn max_keys(&self) -> usize {
        KeyedAllowance::max_keys(self)
    }

    fn sweep(&self) -> usize {
        KeyedAllowance::sweep(self)
    }

    fn table_stats(&self) -> KeyTableStats {
        KeyedAllowance::table_stats(self)
    }
}

#[derive(Debug)]
struct KeyedAllowanceState<S: Store> {
    store: Arc<S>,
    /// What hot keys' pools lease from: their refills batched into
    /// `acquire_many` calls.
    batched: Arc<Batched<S>>,
    config: KeyedAllowanceConfig,
    table: TrackedKeys<S>,
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
                    .max_keys(config.max_keys)
                    .build(),
            ),
            FailurePolicy::Closed | FailurePolicy::Open => None,
        };
        let counters = Arc::new(stats::Counters::default());
        let inner = Arc::new(KeyedAllowanceState {
            batched: Arc::new(Batched::new(
                Arc::clone(&store),
                &runtime,
                config.allowance.timeout,
            )),
            store,
            table: TrackedKeys::new(&config, Arc::clone(&counters)),
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

    /// The tokio runtime the allowance was built on, where its cold calls,
    /// refills and demand sampler run: where code that cannot await (a
    /// response's completion, a `Drop`) spawns a receipt's `undo` or
    /// `settle`, or a `debit`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// let answer = node.try_take("acme", 1)?;
    /// if let HotAnswer::Admitted(receipt) = answer {
    ///     node.runtime().spawn(receipt.undo());
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn runtime(&self) -> &Handle {
        &self.inner.runtime
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

    /// The quota the store gives every key, as the store's handle knows it
    /// ([`Store::quota`]): what a shared rule over this allowance
    /// advertises.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_minute(100)?));
    /// let node = KeyedAllowance::new(Arc::clone(&store), KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert_eq!(node.quota(), Quota::per_minute(100)?);
    /// store.set_quota(Quota::per_minute(200)?);
    /// assert_eq!(node.quota().capacity(), 200);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.inner.store.quota()
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
    /// use tollgate::{MaxKeys, Quota};
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let config = KeyedAllowanceConfig { max_keys: MaxKeys::new(500)?, ..KeyedAllowanceConfig::new(FailurePolicy::Closed) };
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
