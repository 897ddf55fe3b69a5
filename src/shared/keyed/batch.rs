//! Hot keys' refills, batched: the store their pools lease from queues each
//! request, and one task sends all that are queued together through
//! [`Store::acquire_many`], so a node with many hot keys refills them in
//! one round trip where the store can batch (Redis: one pipeline). Each
//! batch runs as its own task bounded by the store timeout, so a store
//! call that never answers costs its own requests their timeout and
//! never delays the batches after it.

use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use crate::shared::{Grant, Lease, Store};
use crate::sync::unmodelled::Arc;

/// The most requests one `acquire_many` carries: bounds one call's size
/// (and its reply) whatever the number of hot keys.
const MAX_BATCH: usize = 256;

/// Why a batched request got no grant.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BatchError<E: std::error::Error + 'static> {
    /// The store's own error for this request.
    #[error(transparent)]
    Store(E),
    /// No answer: the store did not answer the batch within the timeout
    /// (the call may still have debited), or the batching task has ended
    /// (its keyed allowance was dropped).
    #[error("no answer from the keyed allowance's refill batch")]
    Closed,
}

/// One queued request and where its answer goes.
struct Request<E> {
    key: String,
    want: u64,
    reply: oneshot::Sender<Result<Grant, E>>,
}

/// The store hot keys' pools lease from: acquisitions go through the
/// batching task, releases straight to the store.
pub(crate) struct Batched<S: Store> {
    store: Arc<S>,
    queue: mpsc::UnboundedSender<Request<S::Error>>,
}

impl<S: Store> std::fmt::Debug for Batched<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batched").finish_non_exhaustive()
    }
}

impl<S: Store> Batched<S> {
    /// A batching front for `store`, its task spawned on `runtime`; the
    /// task ends once this is dropped and the queue drained.
    /// Each batch, and each return of a grant nobody waits for, is bounded
    /// by `timeout`.
    pub(crate) fn new(store: Arc<S>, runtime: &Handle, timeout: Duration) -> Self {
        let (queue, requests) = mpsc::unbounded_channel();
        runtime.spawn(send_batches(Arc::clone(&store), requests, timeout));
        Batched { store, queue }
    }
}

impl<S: Store> Store for Batched<S> {
    type Error = BatchError<S::Error>;

    fn quota(&self) -> crate::quota::Quota {
        self.store.quota()
    }

    /// The store's own verdict on its errors; no answer counts as the store
    /// being unreachable, as a timeout does.
    fn unavailable(error: &Self::Error) -> bool {
        match error {
            BatchError::Store(error) => S::unavailable(error),
            BatchError::Closed => true,
        }
    }

    async fn acquire(&self, key: &str, want: u64) -> Result<Grant, Self::Error> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            key: key.to_owned(),
            want,
            reply,
        };
        self.queue.send(request).map_err(|_| BatchError::Closed)?;
        match answer.await {
            Ok(outcome) => outcome.map_err(BatchError::Store),
            Err(_) => Err(BatchError::Closed),
        }
    }

    async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), Self::Error> {
        self.store
            .release(key, lease, unused)
            .await
            .map_err(BatchError::Store)
    }

    async fn debit(&self, key: &str, tokens: u64) -> Result<(), Self::Error> {
        self.store
            .debit(key, tokens)
            .await
            .map_err(BatchError::Store)
    }
}

/// The batching task: takes whatever is queued (up to [`MAX_BATCH`]) and
/// sends it as one `acquire_many` in a task of its own.
async fn send_batches<S: Store>(
    store: Arc<S>,
    mut requests: mpsc::UnboundedReceiver<Request<S::Error>>,
    timeout: Duration,
) {
    loop {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        if requests.recv_many(&mut batch, MAX_BATCH).await == 0 {
            return;
        }
        // One yield lets refills claimed in the same instant join.
        tokio::task::yield_now().await;
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        tokio::spawn(send_batch(Arc::clone(&store), batch, timeout));
    }
}

/// Sends one batch and answers each request. A batch the store does not
/// answer within `timeout` is dropped: its requesters see no answer, a
/// failure that may have debited, as any timed-out call. A grant whose
/// requester stopped waiting (its refill timed out or was cancelled) is
/// returned to the store instead of being stranded.
async fn send_batch<S: Store>(store: Arc<S>, batch: Vec<Request<S::Error>>, timeout: Duration) {
    let asks: Vec<(&str, u64)> = batch.iter().map(|r| (r.key.as_str(), r.want)).collect();
    let Ok(outcomes) = tokio::time::timeout(timeout, store.acquire_many(&asks)).await else {
        return;
    };
    drop(asks);
    // A store answering fewer outcomes than requests fails the rest.
    for (request, outcome) in batch.into_iter().zip(outcomes) {
        if let Err(Ok(grant)) = request.reply.send(outcome) {
            let lease = Lease {
                granted: grant.lease.granted.min(grant.tokens.min(request.want)),
                at: grant.lease.at,
            };
            if lease.granted > 0 {
                let store = Arc::clone(&store);
                // Nobody to report to: a failed or late return is stranded.
                tokio::spawn(async move {
                    let back = store.release(&request.key, lease, lease.granted);
                    let _ = tokio::time::timeout(timeout, back).await;
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Quota;
    use crate::shared::LocalStore;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Waker};

    /// Counts `acquire_many` calls and their sizes.
    struct Counting {
        inner: LocalStore,
        batches: AtomicUsize,
        requests: AtomicUsize,
    }

    impl Store for Counting {
        type Error = crate::error::AcquireError;

        fn quota(&self) -> crate::quota::Quota {
            self.inner.quota()
        }

        async fn acquire(&self, key: &str, want: u64) -> Result<Grant, Self::Error> {
            self.requests.fetch_add(1, Ordering::SeqCst);
            self.inner.acquire(key, want).await
        }

        async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), Self::Error> {
            self.inner.release(key, lease, unused).await
        }

        async fn debit(&self, key: &str, tokens: u64) -> Result<(), Self::Error> {
            self.inner.debit(key, tokens).await
        }

        async fn acquire_many<'a>(
            &'a self,
            requests: &'a [(&'a str, u64)],
        ) -> Vec<Result<Grant, Self::Error>> {
            self.batches.fetch_add(1, Ordering::SeqCst);
            let mut grants = Vec::new();
            for &(key, want) in requests {
                grants.push(self.acquire(key, want).await);
            }
            grants
        }
    }

    #[tokio::test]
    async fn refills_queued_together_go_in_one_call_and_abandoned_grants_go_back() {
        let store = Arc::new(Counting {
            inner: LocalStore::new(Quota::per_second(10).unwrap()),
            batches: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
        });
        let batched = Arc::new(Batched::new(
            Arc::clone(&store),
            &Handle::current(),
            Duration::from_secs(1),
        ));
        let calls: Vec<_> = (0..50)
            .map(|i| {
                let batched = Arc::clone(&batched);
                tokio::spawn(async move { batched.acquire(&format!("k{i}"), 4).await })
            })
            .collect();
        for call in calls {
            assert_eq!(call.await.unwrap().ok().map(|grant| grant.tokens), Some(4));
        }
        assert_eq!(store.requests.load(Ordering::SeqCst), 50);
        assert_eq!(store.batches.load(Ordering::SeqCst), 1);
        // A request whose caller is gone: its grant goes back.
        let mut abandoned = Box::pin(batched.acquire("gone", 3));
        let mut context = Context::from_waker(Waker::noop());
        assert!(abandoned.as_mut().poll(&mut context).is_pending());
        drop(abandoned);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(store.requests.load(Ordering::SeqCst), 51);
        assert_eq!(store.inner.limiter().available("gone"), 10);
    }
}
