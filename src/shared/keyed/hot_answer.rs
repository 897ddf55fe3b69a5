//! What a keyed shared budget's non-blocking call can answer on its own.

/// The answer of [`KeyedAllowance::try_acquire`](super::KeyedAllowance::try_acquire)
/// and [`try_take`](super::KeyedAllowance::try_take) when they do not
/// refuse: admitted from this node's lease of the key, or a decision only
/// the store can make, for the async path.
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
/// let source = match node.try_acquire("api-key-7", 1)? {
///     HotAnswer::Admitted(source) => source,
///     // A key this node holds no lease of: one store decision.
///     HotAnswer::AskStore => node.acquire("api-key-7", 1, Duration::from_millis(50)).await?,
/// };
/// assert_eq!(source, Source::Lease);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "an answer to ask the store leaves the request undecided"]
pub enum HotAnswer<T> {
    /// Admitted from this node's lease of the key (or by its failure
    /// policy while the store is down).
    Admitted(T),
    /// This node cannot decide: the key is cold (no lease here), the cost
    /// is above `max_lease`, or the key's pool is short while the store has
    /// not said the key is empty. Nothing was spent and nothing refused:
    /// decide it with [`acquire`](super::KeyedAllowance::acquire) or
    /// [`take`](super::KeyedAllowance::take).
    AskStore,
}
