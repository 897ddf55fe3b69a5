//! A keyed admission's receipt: what it took, from where, and the one way
//! to give it back.

use std::fmt;

use super::KeyedAllowanceState;
use super::batch::Batched;
use super::cold::{ColdKey, return_part_to_store};
use crate::shared::allowance::add;
use crate::shared::{BudgetError, Lease, LocalAllowance, Source, Store};
use crate::sync::unmodelled::{Arc, Weak};

/// A hot key's lease pool.
pub(super) type Pool<S> = LocalAllowance<Batched<S>>;

/// Where an admission's tokens came from, which decides where they may go
/// back.
pub(super) enum Origin<S: Store> {
    /// From this pool (or tokens given back to it): already debited at the
    /// store, so they may go back to this pool, and only this one. Weak: a
    /// receipt must not keep a demoted pool (and its unreturned lease)
    /// alive.
    Pool(Weak<Pool<S>>),
    /// A cold decision, with the store's receipt for exactly the cost.
    Store(Lease),
    /// Nothing the store debited (the failure policy's admissions): there
    /// is nothing to give back.
    Unbacked,
}

impl<S: Store> Origin<S> {
    /// Where tokens `pool` admitted as `source` may go back: to the pool
    /// for its leased tokens, nowhere for the failure policy's.
    pub(super) fn from_pool(pool: &Arc<Pool<S>>, source: Source) -> Origin<S> {
        match source {
            Source::Lease => Origin::Pool(Arc::downgrade(pool)),
            Source::FailedOpen | Source::Fallback => Origin::Unbacked,
        }
    }
}

/// What one admission by a [`KeyedAllowance`](super::KeyedAllowance) took,
/// and the only way to give it back that never mints credit.
///
/// [`undo`](Self::undo) gives the tokens back where they came from:
///
/// - **from a hot key's lease pool**: back into that pool (the store has
///   debited them already, so the pool never holds more than the store
///   granted it), as long as the key is still hot with the same pool. A
///   key demoted or forgotten since has given its pool back to the store,
///   and a receipt holds no store receipt for its tokens: they stay spent
///   (counted as stranded).
/// - **from a cold decision**: to the store, by
///   [`Store::release`] against the grant's receipt — the one rule of
///   [`docs/semantics.md`](crate::guide::semantics) ("Giving back"): at most the cost less the time
///   held, so refill the shared bucket wasted while full is never handed
///   out again. A failed return strands them.
/// - **from the failure policy** (`Open`, `Fallback`): the store debited
///   nothing, so nothing goes back.
///
/// A receipt undoes once (`undo` consumes it) and only on the key and
/// allowance that issued it (it holds both). Dropping it keeps the tokens
/// spent, as [`keep`](Self::keep) says explicitly. A second `undo` does
/// not compile:
///
/// ```compile_fail,E0382
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use tollgate::Quota;
/// # use tollgate::shared::*;
/// # async fn twice(node: KeyedAllowance<LocalStore>) -> Result<(), BudgetError> {
/// let receipt = node.take("k", 1, Duration::ZERO).await?;
/// receipt.undo().await;
/// receipt.undo().await; // error[E0382]: use of moved value
/// # Ok(())
/// # }
/// ```
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::{KeyedLimiter, ManualClock, Quota};
/// use tollgate::shared::*;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// // A store on a clock that stands still: nothing refills while held.
/// let limiter = KeyedLimiter::builder(Quota::per_second(10)?).clock(ManualClock::new()).build();
/// let store = Arc::new(LocalStore::from_limiter(limiter));
/// let node = KeyedAllowance::new(Arc::clone(&store), KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
/// let receipt = node.take("k", 4, Duration::ZERO).await?;
/// assert_eq!(store.limiter().available("k"), 6);
/// assert_eq!(receipt.undo().await, 4); // the work was not done
/// assert_eq!(store.limiter().available("k"), 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping a receipt keeps its tokens spent: call `keep` to say so, or `undo`"]
pub struct KeyedReceipt<S: Store> {
    pub(super) inner: Arc<KeyedAllowanceState<S>>,
    /// The store's name for the key.
    pub(super) name: String,
    pub(super) tokens: u64,
    pub(super) source: Source,
    pub(super) origin: Origin<S>,
}

impl<S: Store> KeyedReceipt<S> {
    /// The tokens this receipt took.
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
    /// let receipt = node.take("k", 3, Duration::ZERO).await?;
    /// assert_eq!(receipt.tokens(), 3);
    /// receipt.keep();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// How the admission was decided: [`Source::Lease`] for a grant of the
    /// store (from the key's pool or a cold decision), otherwise the
    /// failure policy's.
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
    /// let receipt = node.take("k", 1, Duration::ZERO).await?;
    /// assert_eq!(receipt.source(), Source::Lease);
    /// receipt.keep();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn source(&self) -> Source {
        self.source
    }

    /// Gives the tokens back where they came from (see the type's docs)
    /// and returns how many went back: into the key's pool, or confirmed
    /// by the store (which may itself keep part of them by the one rule).
    /// Bounded by the store timeout.
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
    /// let receipt = node.take("k", 2, Duration::ZERO).await?;
    /// // The store confirmed the return (keeping what refilled meanwhile).
    /// assert_eq!(receipt.undo().await, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn undo(self) -> u64 {
        match self.undo_locally() {
            Ok(given) => given,
            Err(to_store) => to_store.send().await,
        }
    }

    /// Undoes what needs no store call, returning the tokens given back;
    /// or the return to the store still to make.
    fn undo_locally(self) -> Result<u64, StoreReturn<S>> {
        let KeyedReceipt {
            inner,
            name,
            tokens,
            origin,
            ..
        } = self;
        match origin {
            Origin::Pool(pool) => {
                if inner.table.give_to_pool(&name, &pool, tokens) {
                    Ok(tokens)
                } else {
                    add(&inner.counters.stranded, tokens);
                    Ok(0)
                }
            }
            Origin::Store(lease) => Err(StoreReturn {
                key: cold_key(&inner, name),
                lease,
                tokens,
                unused: tokens,
            }),
            Origin::Unbacked => Ok(0),
        }
    }

    /// Settles the admission to its actual cost, once it is known: the
    /// excess over what was taken charged to the store into debt
    /// ([`Store::debit`]: every node's later grants for the key wait it
    /// out), or the rest given back where it came from, as
    /// [`undo`](Self::undo) gives back (into the key's pool, or to the
    /// store by the one rule). Bounded by the store timeout.
    ///
    /// # Errors
    ///
    /// [`BudgetError::StoreUnavailable`] when the store did not confirm a
    /// debit (down, timed out): the excess is counted in
    /// [`KeyedAllowanceStats::undebited`](crate::shared::KeyedAllowanceStats::undebited),
    /// spent beyond the shared budget as a store outage lets spend, and
    /// under [`FailurePolicy::Fallback`](crate::shared::FailurePolicy::Fallback)
    /// charged to the node's fallback limiter.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, Limit, ManualClock, Quota};
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let limiter = KeyedLimiter::builder(Quota::per_minute(1000)?).clock(ManualClock::new()).build();
    /// let store = Arc::new(LocalStore::from_limiter(limiter));
    /// let node = KeyedAllowance::new(Arc::clone(&store), KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// // Estimated at 100 tokens; the response used 1500: 500 in debt.
    /// node.take("k", 100, Duration::ZERO).await?.settle(1_500).await?;
    /// assert_eq!(store.limiter().available("k"), 0);
    /// assert_eq!(store.limiter().key("k").retry_after(1)?, Duration::from_millis(30_060));
    /// assert_eq!(node.stats().debited, 1_400);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn settle(self, actual: u64) -> Result<(), BudgetError> {
        match self.settling(actual) {
            Settling::Done => Ok(()),
            Settling::GiveBack(part) => {
                part.undo().await;
                Ok(())
            }
            Settling::Return(to_store) => {
                to_store.send().await;
                Ok(())
            }
            Settling::Debit(debit) => debit.charge().await,
        }
    }

    /// What settling to `actual` takes: nothing, giving back part of the
    /// tokens (to the pool: this receipt, narrowed to them; to the store:
    /// the whole grant's lease, released for them), or a debit of the
    /// excess.
    fn settling(mut self, actual: u64) -> Settling<S> {
        if actual == self.tokens {
            return Settling::Done;
        }
        if actual < self.tokens {
            let part = self.tokens - actual;
            if let Origin::Store(lease) = self.origin {
                return Settling::Return(StoreReturn {
                    key: cold_key(&self.inner, self.name),
                    lease,
                    tokens: self.tokens,
                    unused: part,
                });
            }
            self.tokens = part;
            return Settling::GiveBack(self);
        }
        Settling::Debit(debit(&self.inner, self.name, actual - self.tokens))
    }

    /// Keeps the tokens spent: what dropping the receipt does, said
    /// explicitly.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::shared::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = KeyedAllowance::new(Arc::clone(&store), KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// node.take("k", 10, Duration::ZERO).await?.keep();
    /// assert_eq!(store.limiter().available("k"), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keep(self) {}

    /// Keeps the tokens spent and says how they were admitted: the
    /// receipt-less calls' answer.
    pub(super) fn kept(self) -> Source {
        self.source
    }
}

/// What settling a receipt takes.
enum Settling<S: Store> {
    Done,
    /// The receipt, narrowed to the tokens to give back to its pool.
    GiveBack(KeyedReceipt<S>),
    /// Part of a cold grant, back to the store.
    Return(StoreReturn<S>),
    Debit(Debit<S>),
}

/// A settled cost's excess on its way to the store.
pub(super) struct Debit<S: Store> {
    inner: Arc<KeyedAllowanceState<S>>,
    name: String,
    tokens: u64,
}

/// A debit of `tokens` to the key the store names `name`, to send.
pub(super) fn debit<S: Store>(
    inner: &Arc<KeyedAllowanceState<S>>,
    name: String,
    tokens: u64,
) -> Debit<S> {
    Debit {
        inner: Arc::clone(inner),
        name,
        tokens,
    }
}

impl<S: Store> Debit<S> {
    /// Charges the store, within the timeout, counting the outcome. A
    /// store that does not confirm it leaves the excess on this node's
    /// fallback limiter under [`FailurePolicy::Fallback`](crate::shared::FailurePolicy::Fallback),
    /// as that policy charges what it admits while the store is down.
    pub(super) async fn charge(self) -> Result<(), BudgetError> {
        let Debit {
            inner,
            name,
            tokens,
        } = self;
        let timeout = inner.config.allowance.timeout;
        let sent = tokio::time::timeout(timeout, inner.store.debit(&name, tokens)).await;
        if let Ok(Ok(())) = sent {
            add(&inner.counters.debited, tokens);
            return Ok(());
        }
        add(&inner.counters.store_errors, 1);
        add(&inner.counters.undebited, tokens);
        if let Some(fallback) = &inner.fallback {
            let _recorded = fallback.debit_key(name.as_str(), tokens);
        }
        Err(BudgetError::StoreUnavailable)
    }
}

/// The key the store names `name`, with the allowance's store, timeout and
/// counters, for a call of its own.
fn cold_key<S: Store>(inner: &Arc<KeyedAllowanceState<S>>, name: String) -> ColdKey<S> {
    ColdKey {
        store: Arc::clone(&inner.store),
        key: name,
        timeout: inner.config.allowance.timeout,
        counters: Arc::clone(&inner.counters),
    }
}

/// A cold grant's tokens on their way back to the store: `unused` of the
/// `tokens` its lease covers.
struct StoreReturn<S: Store> {
    key: ColdKey<S>,
    lease: Lease,
    tokens: u64,
    unused: u64,
}

impl<S: Store> StoreReturn<S> {
    async fn send(self) -> u64 {
        return_part_to_store(&self.key, self.lease, self.tokens, self.unused).await
    }
}

impl<S: Store> fmt::Debug for KeyedReceipt<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedReceipt")
            .field("tokens", &self.tokens)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}
