//! The layer: a [`RateLimitLayer`] built from its rules by a
//! [`RateLimitLayerBuilder`] (or made from [`Rules`]), wrapping services in
//! a [`RateLimitService`].

use std::marker::PhantomData;

use tower::Layer;

use super::body::{EitherBody, InnerBody};
use super::service::RateLimitService;
use crate::http::rules::Engine;
use crate::http::rules::{Rules, RulesBuilder};
use crate::sync::unmodelled::Arc;

/// A tower [`Layer`] that rate-limits requests with a list of [`Rule`](crate::http::rules::Rule)s.
///
/// For each request, every rule that applies is charged, all or nothing:
/// the in-process token rules in one chain, as
/// [`try_acquire_all`](crate::try_acquire_all) charges it, in-flight rules
/// ([`Rule::in_flight`](crate::http::rules::Rule::in_flight)) by a permit each, shared rules by their store (so
/// a refusal spends nothing anywhere). An admitted request goes to the inner service and
/// stays charged: only a response whose status a rule gives back
/// ([`Rule::give_back_on`](crate::http::rules::Rule::give_back_on)) returns that rule's charge, by the one rule of
/// [`docs/semantics.md`](crate::guide::semantics) ("Giving back"). A response future that is dropped
/// (the client hung up), an inner error or a panic gives nothing back (an
/// in-flight rule's permit does come back: the work is no longer in
/// flight). A
/// refused request gets the response of [`Refusal`](crate::http::Refusal) (429 with Retry-After,
/// the RateLimit fields and a problem+json body; 503 when the limiter
/// itself is short of capacity). Refusals are responses, not errors: the
/// service's error type is the inner service's, and `poll_ready` only asks
/// the inner service. In-process rules never make a request wait; a shared
/// rule ([`Rule::shared`](crate::http::rules::Rule::shared)) whose key this node holds no lease of makes it
/// wait for the store, in the response future, within
/// [`store_wait`](RateLimitLayerBuilder::store_wait). The inner service is
/// then called from that future, so it must be `Clone + Send + 'static`
/// (axum's are): the future takes the service `poll_ready` readied and
/// leaves a clone in its place. [`docs/http.md`](crate::guide::http) has the contract.
///
/// Cheap to clone: the configuration is behind an `Arc`.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::{Quota, TokenBucket};
/// use tollgate::http::PolicyName;
/// use tollgate::http::tower::{RateLimitLayer, Rule};
///
/// let global = Arc::new(TokenBucket::new(Quota::per_second(100)?));
/// let layer = RateLimitLayer::builder()
///     .rule(Rule::global(PolicyName::new("global")?, global))
///     .advertise_on_success(true)
///     .build();
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct RateLimitLayer<K = EitherBody> {
    engine: Arc<Engine>,
    kind: PhantomData<fn() -> K>,
}

/// Configures a [`RateLimitLayer`]: the rules' builder
/// ([`RulesBuilder`](crate::http::rules::RulesBuilder)), building a layer.
///
/// ```
/// use tollgate::http::{Jitter, PartitionKeys};
/// use tollgate::http::tower::RateLimitLayer;
///
/// let layer = RateLimitLayer::builder()
///     .partition_keys(PartitionKeys::with_secret(*b"fleet-wide-key!!"))
///     .jitter(Jitter::up_to(2))
///     .build();
/// # let _ = layer;
/// ```
pub type RateLimitLayerBuilder = RulesBuilder<RateLimitLayer>;

impl RateLimitLayer {
    /// Starts a layer with no rules, no jitter, random partition keys and
    /// the RateLimit fields on refusals only.
    ///
    /// ```
    /// use tollgate::http::tower::RateLimitLayer;
    ///
    /// let _layer = RateLimitLayer::builder().build();
    /// ```
    pub fn builder() -> RateLimitLayerBuilder {
        RulesBuilder::new()
    }
}

/// The layer of a set of rules.
///
/// ```
/// use tollgate::http::rules::Rules;
/// use tollgate::http::tower::RateLimitLayer;
///
/// let rules = Rules::builder().build();
/// let _layer = RateLimitLayer::from(rules.clone());
/// ```
impl From<Rules> for RateLimitLayer {
    fn from(rules: Rules) -> RateLimitLayer {
        RateLimitLayer {
            engine: rules.engine,
            kind: PhantomData,
        }
    }
}

impl RateLimitLayer {
    /// The same layer, answering in the inner service's own body type: its
    /// own answers (refusals, the 4xx of requests it cannot charge) are
    /// built from their bytes (`B: From<Bytes>`), and the inner service's
    /// responses pass through as they are. For axum, which boxes a
    /// response body of any type but its own (`axum::body::Body`), once per
    /// response: measured on a hello server, that box and the calls through
    /// it cost about what the rest of the layer's bookkeeping does
    /// ([`docs/benchmarks.md`](crate::guide::benchmarks), "A limit on a
    /// real server").
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::sync::Arc;
    /// use bytes::Bytes;
    /// use http::{Request, Response};
    /// use http_body_util::Full;
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::tower::{RateLimitLayer, Rule};
    /// use tower::{Layer, Service, ServiceExt};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let bucket = Arc::new(TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new()));
    /// let layer = RateLimitLayer::builder()
    ///     .rule(Rule::global(PolicyName::new("global")?, bucket))
    ///     .build()
    ///     .with_inner_body();
    /// let mut service = layer.layer(tower::service_fn(|_: Request<String>| async {
    ///     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
    /// }));
    /// // Both answers have the inner service's body type, `Full<Bytes>`.
    /// let first: Response<Full<Bytes>> = service.ready().await?.call(Request::new(String::new())).await?;
    /// let second: Response<Full<Bytes>> = service.ready().await?.call(Request::new(String::new())).await?;
    /// assert_eq!(first.status(), 200);
    /// assert_eq!(second.status(), 429);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_inner_body(self) -> RateLimitLayer<InnerBody> {
        RateLimitLayer {
            engine: self.engine,
            kind: PhantomData,
        }
    }
}

impl<S, K> Layer<S> for RateLimitLayer<K> {
    type Service = RateLimitService<S, K>;

    fn layer(&self, inner: S) -> RateLimitService<S, K> {
        RateLimitService::new(inner, Arc::clone(&self.engine))
    }
}
