//! The layer: a [`RateLimitLayer`] built from its rules by a
//! [`RateLimitLayerBuilder`], wrapping services in a
//! [`RateLimitService`].

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use tower::Layer;

use super::body::{EitherBody, InnerBody};
use super::config::{Config, RefusalHook};
use super::rule::Rule;
use super::service::RateLimitService;
use crate::http::fields::PolicyText;
use crate::http::{Jitter, PartitionKeys, Refusal};
use crate::sync::unmodelled::Arc;

/// A tower [`Layer`] that rate-limits requests with a list of [`Rule`]s.
///
/// For each request, every rule that applies is charged, all or nothing:
/// the in-process token rules in one chain, as
/// [`try_acquire_all`](crate::try_acquire_all) charges it, in-flight rules
/// ([`Rule::in_flight`]) by a permit each, shared rules by their store (so
/// a refusal spends nothing anywhere). An admitted request goes to the inner service and
/// stays charged: only a response whose status a rule gives back
/// ([`Rule::give_back_on`]) returns that rule's charge, by the one rule of
/// [`docs/semantics.md`](crate::guide::semantics) ("Giving back"). A response future that is dropped
/// (the client hung up), an inner error or a panic gives nothing back (an
/// in-flight rule's permit does come back: the work is no longer in
/// flight). A
/// refused request gets the response of [`Refusal`](crate::http::Refusal) (429 with Retry-After,
/// the RateLimit fields and a problem+json body; 503 when the limiter
/// itself is short of capacity). Refusals are responses, not errors: the
/// service's error type is the inner service's, and `poll_ready` only asks
/// the inner service. In-process rules never make a request wait; a shared
/// rule ([`Rule::shared`]) whose key this node holds no lease of makes it
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
    pub(super) config: Arc<Config>,
    kind: PhantomData<fn() -> K>,
}

/// Configures a [`RateLimitLayer`].
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
#[derive(Default)]
pub struct RateLimitLayerBuilder {
    rules: Vec<Rule>,
    keys: Option<PartitionKeys>,
    jitter: Jitter,
    on_success: bool,
    store_wait: Option<Duration>,
    on_refusal: Option<Arc<RefusalHook>>,
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("rules", &self.rules)
            .field("jitter", &self.jitter)
            .field("on_success", &self.on_success)
            .field("store_wait", &self.store_wait)
            .field("on_refusal", &self.on_refusal.is_some())
            .finish_non_exhaustive()
    }
}

/// How long a request may wait for shared limits' stores unless set: a
/// round trip or two to a nearby store, short enough that a store that
/// hangs costs a client little.
const DEFAULT_STORE_WAIT: Duration = Duration::from_millis(100);

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
        RateLimitLayerBuilder::default()
    }
}

impl RateLimitLayerBuilder {
    /// Adds a rule, charged after the ones added before it, except that
    /// rules over a budget shared by a fleet ([`Rule::shared`]) are charged
    /// after every in-process rule, and in-flight rules ([`Rule::in_flight`])
    /// take their permits before any token is charged. Add them from the most selective (per
    /// address) to the most shared (global), so a request refused early
    /// never touches the shared limit.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::tower::{RateLimitLayer, Rule};
    ///
    /// let global = Arc::new(TokenBucket::new(Quota::per_second(100)?));
    /// let _layer = RateLimitLayer::builder().rule(Rule::global(PolicyName::new("global")?, global)).build();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// How `pk` values are derived (default: [`PartitionKeys::random`],
    /// drawn when the layer is built).
    ///
    /// ```
    /// use tollgate::http::PartitionKeys;
    /// use tollgate::http::tower::RateLimitLayer;
    ///
    /// let _layer = RateLimitLayer::builder().partition_keys(PartitionKeys::with_secret([9; 16])).build();
    /// ```
    pub fn partition_keys(mut self, keys: PartitionKeys) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Jitter added to every advertised `t` (default: none). Retry-After is
    /// never earlier than a violated policy's `t`, so it moves with it.
    ///
    /// ```
    /// use tollgate::http::Jitter;
    /// use tollgate::http::tower::RateLimitLayer;
    ///
    /// let _layer = RateLimitLayer::builder().jitter(Jitter::up_to(3)).build();
    /// ```
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Whether admitted responses carry the RateLimit fields too (default:
    /// no). They are never added to 401 and 403 responses, which would
    /// otherwise tell a client with bad credentials about the budget of the
    /// identity it claimed.
    ///
    /// ```
    /// use tollgate::http::tower::RateLimitLayer;
    ///
    /// let _layer = RateLimitLayer::builder().advertise_on_success(true).build();
    /// ```
    pub fn advertise_on_success(mut self, advertise: bool) -> Self {
        self.on_success = advertise;
        self
    }

    /// The longest a request waits, in all, for the tokens of its shared
    /// rules ([`Rule::shared`]) when this node cannot decide them from a
    /// lease (default: 100 ms): for a hot key's refill to land, or for a
    /// cold key's budget to refill at the store. A request whose tokens do
    /// not exist by then is refused (429); one whose store says they will
    /// not exist within it is refused at once. Each store call is bounded
    /// by its allowance's store timeout, and a store that cannot be reached
    /// answers as its failure policy says (503, or through). In-process
    /// rules never wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::http::tower::RateLimitLayer;
    ///
    /// let _layer = RateLimitLayer::builder().store_wait(Duration::from_millis(20)).build();
    /// ```
    pub fn store_wait(mut self, wait: Duration) -> Self {
        self.store_wait = Some(wait);
        self
    }

    /// Shapes the response of every refusal by a limit (a token, in-flight
    /// or shared rule's, a store that is down) for a stack or convention
    /// this crate does not know: `respond` gets the typed
    /// [`Refusal`](crate::http::Refusal) (its status, the violated policies,
    /// the exact wait, [`Refusal::retry_after`](crate::http::Refusal::retry_after)) and answers the response to
    /// send, or `None` for the layer's own. The answers to requests no rule
    /// can charge as they stand (a missing key, a cost that cannot be read)
    /// are not refusals and do not reach it. It runs in `call` (or, for a
    /// shared rule's store refusal, in the response future); a panic in it
    /// unwinds from there, with nothing charged.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bytes::Bytes;
    /// use http::{Response, StatusCode};
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::tower::{RateLimitLayer, Rule};
    ///
    /// // A plain-text 429 with the exact wait in milliseconds, for an old client.
    /// let layer = RateLimitLayer::builder()
    ///     .rule(Rule::global(PolicyName::new("global")?, Arc::new(TokenBucket::new(Quota::per_second(10)?))))
    ///     .on_refusal(|refusal| {
    ///         let wait = refusal.retry_after()?;
    ///         let mut response = Response::new(Bytes::from(format!("slow down: {} ms\n", wait.as_millis())));
    ///         *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    ///         let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    ///         response.headers_mut().insert("x-retry-after-ms", millis.into());
    ///         Some(response)
    ///     })
    ///     .build();
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_refusal(
        mut self,
        respond: impl Fn(&Refusal) -> Option<Response<Bytes>> + Send + Sync + 'static,
    ) -> Self {
        self.on_refusal = Some(Arc::new(respond));
        self
    }

    /// The layer.
    ///
    /// ```
    /// use tollgate::http::tower::RateLimitLayer;
    ///
    /// let layer = RateLimitLayer::builder().build();
    /// let _clone = layer.clone(); // shares the configuration
    /// ```
    pub fn build(mut self) -> RateLimitLayer {
        // Shared rules after the in-process ones, each group in the order
        // added: a request refused in this process never costs the fleet's
        // store a round trip, and the in-process chain is all or nothing on
        // its own before any shared budget is touched. In-flight rules
        // between them: they are no part of the chain, and their permits
        // are taken before it is charged (`Config::charge`, which relies
        // on this order).
        self.rules.sort_by_key(Rule::rank);
        RateLimitLayer {
            kind: PhantomData,
            config: Arc::new(Config {
                reads_costs: self.rules.iter().any(Rule::has_cost),
                keeps: self.on_success || self.rules.iter().any(Rule::answers_to_response),
                shadows: self.rules.iter().any(|rule| rule.role().is_shadow()),
                texts: self
                    .rules
                    .iter()
                    .map(|rule| PolicyText::new(rule.policy(), rule.followed_shape()))
                    .collect(),
                rules: self.rules,
                keys: self.keys.unwrap_or_default(),
                jitter: self.jitter,
                on_success: self.on_success,
                store_wait: self.store_wait.unwrap_or(DEFAULT_STORE_WAIT),
                on_refusal: self.on_refusal,
            }),
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
            config: self.config,
            kind: PhantomData,
        }
    }
}

impl<S, K> Layer<S> for RateLimitLayer<K> {
    type Service = RateLimitService<S, K>;

    fn layer(&self, inner: S) -> RateLimitService<S, K> {
        RateLimitService::new(inner, Arc::clone(&self.config))
    }
}
