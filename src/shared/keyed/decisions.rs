//! A keyed allowance's decisions: a hot key's from its pool, a cold key's
//! by one store call, and the failure policy while the store is down.

use std::time::Duration;

use super::cold::{ColdAnswer, ColdCall, ColdKey};
use super::receipt::{self, KeyedReceipt, Origin};
use super::store_key::store_key;
use super::{HotAnswer, KeyedAllowance, KeyedAllowanceState};
use crate::error::AcquireError;
use crate::jitter::JitterGenerator;
use crate::shared::allowance::{add, wait_for};
use crate::shared::pacing::{self, MIN_PAUSE};
use crate::shared::{BudgetError, FailurePolicy, Source, Store};
use crate::sync::unmodelled::Arc;

impl<S: Store> KeyedAllowance<S> {
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
    /// [`LocalAllowance::acquire`](crate::shared::LocalAllowance::acquire) (refused only on the store's word, a
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

    /// Charges `tokens` to `key`'s shared budget now, whether or not they
    /// fit, into debt that every node's later grants for the key wait out
    /// ([`Store::debit`]): what [`KeyedReceipt::settle`] does with a
    /// settled cost's excess, for a cost that came with no admission (an
    /// estimate of zero, work billed after the fact). Bounded by the store
    /// timeout.
    ///
    /// # Errors
    ///
    /// [`BudgetError::StoreUnavailable`] when the store did not confirm
    /// the debit (counted in
    /// [`KeyedAllowanceStats::undebited`](crate::shared::KeyedAllowanceStats::undebited)).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(Arc::clone(&store), KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// node.debit("k", 4).await?;
    /// assert_eq!(store.limiter().available("k"), 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn debit<K: AsRef<str> + ?Sized>(
        &self,
        key: &K,
        tokens: u64,
    ) -> Result<(), BudgetError> {
        if tokens == 0 {
            return Ok(());
        }
        let name = store_key(key.as_ref()).into_owned();
        receipt::debit(&self.inner, name, tokens).charge().await
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
}

impl<S: Store> KeyedAllowanceState<S> {
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
            ColdAnswer::Failed { unavailable: true } => {
                self.outage.failed(self.config.allowance.lease_period)
            }
            // A refusal of this key is an answer: the store is up.
            ColdAnswer::Failed { unavailable: false }
            | ColdAnswer::Granted(_)
            | ColdAnswer::Refused { .. } => self.outage.answered(),
        }
        match decided {
            ColdAnswer::Granted(lease) => {
                self.table.learn_grant(name);
                add(&self.counters.cold_admitted, cost);
                Ok((Source::Lease, Origin::Store(lease)))
            }
            ColdAnswer::Refused {
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
            ColdAnswer::Failed { unavailable: true } => self.when_down(name, cost),
            ColdAnswer::Failed { unavailable: false } => Err(BudgetError::StoreRefused),
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
