//! The middleware: charge every rule that applies, all or nothing, answer
//! a refusal from `call` with the 429 (or 503) response, and keep each
//! charge's receipt until the response says whether to give it back.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::body::{BodyKind, EitherBody, InnerBody};
use super::charge::{
    Charge, Link, Progress, Refused, charge_chain, charge_local, charge_shared_now,
    charge_shared_waiting, violated,
};
use super::length::Framing;
use super::rule::{Binder, Rule};
use super::{CostError, MissingKey};
use crate::advertised::Shape;
use crate::http::fields::{ListWriter, PolicyText, RATELIMIT_NAME, RATELIMIT_POLICY_NAME};
use crate::http::problem::client_error;
use crate::http::{
    Jitter, PartitionKey, PartitionKeys, RateLimitPolicy, Refusal, ServiceLimit, delay_seconds,
};
use crate::sync::unmodelled::Arc;

/// A tower [`Layer`] that rate-limits requests with a list of [`Rule`]s.
///
/// For each request, every rule that applies is charged in order with
/// [`try_acquire_all`](crate::try_acquire_all) (so a refusal spends
/// nothing anywhere). An admitted request goes to the inner service and
/// stays charged: only a response whose status a rule gives back
/// ([`Rule::give_back_on`]) returns that rule's charge, by the one rule of
/// [`docs/semantics.md`](crate::guide::semantics) ("Giving back"). A response future that is dropped
/// (the client hung up), an inner error or a panic gives nothing back. A
/// refused request gets the response of [`Refusal`] (429 with Retry-After,
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
    config: Arc<Config>,
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
#[derive(Debug, Default)]
pub struct RateLimitLayerBuilder {
    rules: Vec<Rule>,
    keys: Option<PartitionKeys>,
    jitter: Jitter,
    on_success: bool,
    store_wait: Option<Duration>,
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
    /// after every in-process rule. Add them from the most selective (per
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
        // its own before any shared budget is touched.
        self.rules.sort_by_key(Rule::is_shared);
        RateLimitLayer {
            kind: PhantomData,
            config: Arc::new(Config {
                reads_costs: self.rules.iter().any(Rule::has_cost),
                keeps: self.on_success || self.rules.iter().any(Rule::gives_back_any),
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
        RateLimitService {
            inner,
            config: Arc::clone(&self.config),
            kind: PhantomData,
        }
    }
}

/// The service a [`RateLimitLayer`] wraps around `S`.
///
/// ```
/// use std::convert::Infallible;
/// use std::sync::Arc;
/// use http::{Request, Response};
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// use tollgate::http::PolicyName;
/// use tollgate::http::tower::{RateLimitLayer, Rule};
/// use tower::{Layer, Service, ServiceExt};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let bucket = Arc::new(TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new()));
/// let layer = RateLimitLayer::builder().rule(Rule::global(PolicyName::new("global")?, bucket)).build();
/// let mut service = layer.layer(tower::service_fn(|_req: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hello")))
/// }));
/// let first = service.ready().await?.call(Request::new(String::new())).await?;
/// assert_eq!(first.status(), 200);
/// let second = service.ready().await?.call(Request::new(String::new())).await?;
/// assert_eq!(second.status(), 429);
/// assert_eq!(second.headers()["retry-after"], "1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RateLimitService<S, K = EitherBody> {
    inner: S,
    config: Arc<Config>,
    kind: PhantomData<fn() -> K>,
}

struct Config {
    rules: Vec<Rule>,
    /// Each rule's policy as the fields write it, serialised once.
    texts: Vec<PolicyText>,
    /// Whether a rule has a cost function, which may read the body's
    /// framing.
    reads_costs: bool,
    /// Whether a charge may be kept past `call`: to give it back on some
    /// status, or to advertise it.
    keeps: bool,
    keys: PartitionKeys,
    jitter: Jitter,
    on_success: bool,
    store_wait: Duration,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("rules", &self.rules)
            .field("jitter", &self.jitter)
            .field("on_success", &self.on_success)
            .field("store_wait", &self.store_wait)
            .finish_non_exhaustive()
    }
}

/// What the response future needs once the inner service answers: the
/// charges kept past `call` (those a status may give back, or every one
/// when the fields are advertised). It has no `Drop`: a request whose
/// response never arrives (a client gone, an outer timeout, an inner error
/// or panic) keeps every charge, because its handler may have done the
/// work and no response said otherwise.
struct Admitted {
    config: Arc<Config>,
    charges: Vec<Charge<'static>>,
}

/// What `call` decided for a request, once every rule that applies is
/// bound (and, unless a store must be asked, charged).
pub(super) enum Decision {
    /// Every rule took its cost; these charges are kept until the response.
    Admitted(Vec<Charge<'static>>),
    /// The request's answer, without calling the inner service: a refusal,
    /// or the 4xx of a request no rule can charge as it stands.
    Refused(Response<Bytes>),
    /// The in-process rules took their cost; the shared rule at `from` (and
    /// those after it) waits for its store.
    Waits {
        charges: Vec<Charge<'static>>,
        from: usize,
    },
}

impl<S, K, ReqB, ResB> Service<Request<ReqB>> for RateLimitService<S, K>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    K: BodyKind<ResB>,
    ReqB: Body + Send + 'static,
{
    type Response = Response<K::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, K>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // The limiter never waits here: a refusal is an answer from `call`,
        // and a shared limit's store is asked by the response future.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        // Only the cost functions need the body's framing, and only while
        // they run: the inner service gets the request as it came. Without
        // cost functions the extension map is left alone (an insert and a
        // remove cost some 300 instructions a request, measured).
        let decision = if self.config.reads_costs {
            parts.extensions.insert(Framing::of(&body));
            let decision = self.config.decide(&parts);
            parts.extensions.remove::<Framing>();
            decision
        } else {
            self.config.decide(&parts)
        };
        let (mut charges, from) = match decision {
            Decision::Admitted(charges) => {
                let future = self.inner.call(Request::from_parts(parts, body));
                // Nothing to do once the inner service answers: no Arc
                // to count, nothing to drop.
                let admitted = (!charges.is_empty()).then(|| Admitted {
                    config: Arc::clone(&self.config),
                    charges,
                });
                return ResponseFuture::admitted(future, admitted);
            }
            Decision::Refused(response) => return ResponseFuture::refused(response),
            Decision::Waits { charges, from } => (charges, from),
        };
        // The store decides after `call` returns, so the inner service is
        // called later, from the future: it takes the service that
        // `poll_ready` readied and leaves a clone in its place (tower's
        // usual way).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        let request = Request::from_parts(parts, body);
        ResponseFuture::deciding(Box::pin(async move {
            if let Err(refused) = charge_shared_waiting(&mut charges, from, config.store_wait).await
            {
                return Err(config.refusal(&charges, refused));
            }
            Ok((inner.call(request), Admitted { config, charges }))
        }))
    }
}

impl Config {
    /// Binds every rule that applies to the request, with its cost, then
    /// charges them; or the 4xx for a request no rule can charge as it
    /// stands (no key, no readable cost), which charges nothing.
    fn decide(&self, parts: &Parts) -> Decision {
        self.bind_from(parts, 0, None)
    }

    /// Binds the in-process rules from `index` on, each on a stack frame of
    /// its own (where its source keeps the request's key: nothing is
    /// allocated), with `bound` the bindings so far; at the first shared
    /// rule, or past the last rule, charges them all.
    fn bind_from(&self, parts: &Parts, index: usize, bound: Option<&Link<'_>>) -> Decision {
        let Some(rule) = self.rules.get(index) else {
            return self.charge(parts, index, bound);
        };
        let Binder::Local(source) = rule.limiter() else {
            return self.charge(parts, index, bound);
        };
        if !rule.applies_to(parts) {
            return self.bind_from(parts, index + 1, bound);
        }
        source.bind(parts, &mut |limit| {
            let Some(limit) = limit else {
                return match rule.missing_key() {
                    MissingKey::Skip => self.bind_from(parts, index + 1, bound),
                    MissingKey::Reject => Unchargeable::NoKey(rule.policy()).decision(),
                };
            };
            match rule.cost_of(parts) {
                Ok(cost) => {
                    let next = Link {
                        rule: index,
                        limit,
                        cost,
                        before: bound,
                    };
                    self.bind_from(parts, index + 1, Some(&next))
                }
                Err(error) => Unchargeable::Cost(rule.policy(), error).decision(),
            }
        })
    }

    /// Binds the shared rules from `index` on after the in-process ones in
    /// `bound`, then charges the in-process ones in one chain and the
    /// shared ones from this node's leases, as far as it can without
    /// waiting.
    fn charge(&self, parts: &Parts, index: usize, bound: Option<&Link<'_>>) -> Decision {
        if index == self.rules.len() && !self.keeps {
            // The common case: every rule in process, and no charge kept
            // past the call. Charged as bound, with no charge recorded
            // unless the chain refuses.
            return match charge_chain(bound) {
                Ok(()) => Decision::Admitted(Vec::new()),
                Err(refused) => Decision::Refused(self.refusal(&Link::charges(bound), refused)),
            };
        }
        let mut charges = Link::charges(bound);
        for (index, rule) in self.rules.iter().enumerate().skip(index) {
            let Binder::Shared(source) = rule.limiter() else {
                continue;
            };
            if !rule.applies_to(parts) {
                continue;
            }
            let Some(limit) = source.bind(parts) else {
                match rule.missing_key() {
                    MissingKey::Skip => continue,
                    MissingKey::Reject => return Unchargeable::NoKey(rule.policy()).decision(),
                }
            };
            match rule.cost_of(parts) {
                Ok(cost) => charges.push(Charge::shared(index, limit, cost)),
                Err(error) => return Unchargeable::Cost(rule.policy(), error).decision(),
            }
        }
        if let Err(refused) = charge_local(&mut charges) {
            return Decision::Refused(self.refusal(&charges, refused));
        }
        match charge_shared_now(&mut charges, self.store_wait) {
            Progress::Admitted => Decision::Admitted(
                charges
                    .into_iter()
                    .filter(|charge| self.on_success || self.rules[charge.rule].gives_back_any())
                    .map(Charge::into_owned)
                    .collect(),
            ),
            Progress::Refused(refused) => Decision::Refused(self.refusal(&charges, refused)),
            Progress::Waits(from) => Decision::Waits {
                charges: charges.into_iter().map(Charge::into_owned).collect(),
                from,
            },
        }
    }

    /// What a charge advertises: the request's partition key under its
    /// rule, if keyed, and the live limit this node can vouch for (the
    /// tokens left, the jittered effective window in seconds), if any.
    fn advert(&self, charge: &Charge<'_>) -> Advert {
        let pk = charge.partition(&self.keys, self.rules[charge.rule].policy().name());
        let live = charge
            .live()
            .map(|(remaining, next)| (remaining, self.jitter.apply(delay_seconds(next))));
        // Read only for a policy that follows its limit: one whose quota
        // the caller set says what the caller said.
        let shape = self.texts[charge.rule].shape.and_then(|_| charge.shape());
        Advert {
            rule: charge.rule,
            pk,
            live,
            shape,
        }
    }

    /// The policies of the charged rules and the live limits this node can
    /// vouch for, each tagged with the request's partition key: what a
    /// refusal carries.
    fn advertised(&self, charges: &[Charge<'_>]) -> (Vec<RateLimitPolicy>, Vec<ServiceLimit>) {
        let mut policies = Vec::with_capacity(charges.len());
        let mut limits = Vec::with_capacity(charges.len());
        for charge in charges {
            let advert = self.advert(charge);
            let (pk, live) = (advert.pk, advert.live);
            let mut policy = self.rules[advert.rule].policy().clone();
            if let Some(shape) = advert.shape {
                policy = policy.with_shape(shape);
            }
            if let Some((remaining, reset)) = live {
                let limit =
                    ServiceLimit::new(policy.name().clone(), remaining).with_reset_seconds(reset);
                limits.push(match pk {
                    Some(pk) => limit.with_partition_key(pk),
                    None => limit,
                });
            }
            if let Some(pk) = pk {
                policy = policy.with_partition_key(pk);
            }
            policies.push(policy);
        }
        (policies, limits)
    }

    /// The fields of an admitted request's response, written from each
    /// rule's text serialised when the layer was built: the same values
    /// [`rate_limit_policy_value`](crate::http::rate_limit_policy_value) and
    /// [`rate_limit_value`](crate::http::rate_limit_value) make of
    /// [`advertised`](Self::advertised)'s policies and limits, without
    /// building them.
    fn fields(&self, charges: &[Charge<'_>]) -> (Option<HeaderValue>, Option<HeaderValue>) {
        let mut policies = ListWriter::default();
        let mut limits = ListWriter::default();
        let mut as_built = None;
        for charge in charges {
            let Advert {
                rule,
                pk,
                live,
                shape,
            } = self.advert(charge);
            let text = &self.texts[rule];
            policies.policy_now(text, self.rules[rule].policy(), shape, pk);
            if let Some((remaining, reset)) = live {
                limits.limit_text(text, remaining, Some(reset), pk);
            }
            as_built = (pk.is_none() && shape == text.shape).then_some(rule);
        }
        let policies = match (charges.len(), as_built) {
            // One policy, no key to tag, the limit shaped as when the layer
            // was built: the value built with the layer.
            (1, Some(rule)) => self.texts[rule].alone().cloned(),
            _ => policies.finish(),
        };
        (policies, limits.finish())
    }

    fn refusal(&self, charges: &[Charge<'_>], refused: Refused) -> Response<Bytes> {
        let (policies, limits) = self.advertised(charges);
        let refusal = Refusal::of_chain(refused.charge, refused.cause, &policies);
        if refused.cause.retry_after().is_none() {
            // A refusal no wait can cure (a cost above the capacity) or one
            // that is the limiter's own shortage (a full key table, a store
            // down): the policies' windows say nothing about when to come
            // back, so they neither move Retry-After nor count as violated
            // by waiting.
            return refusal.into_response();
        }
        // Every limit that would refuse its cost now is violated, not only
        // the first one that did.
        let violated = violated(charges)
            .into_iter()
            .zip(&policies)
            .filter(|(violated, _)| *violated)
            .map(|(_, policy)| policy.name().clone())
            .collect::<Vec<_>>();
        refusal
            .with_violated(violated)
            .with_service_limits(limits)
            .into_response()
    }
}

/// What one charge advertises ([`Config::advert`]).
struct Advert {
    rule: usize,
    pk: Option<PartitionKey>,
    /// The tokens left and the effective window in seconds.
    live: Option<(u64, u64)>,
    /// The limit's shape now, if the rule's policy follows it.
    shape: Option<Shape>,
}

/// Why a rule cannot charge a request as it stands: it names the rule's
/// policy.
enum Unchargeable<'a> {
    /// The rule's key extractor found nothing, and the rule rejects that.
    NoKey(&'a RateLimitPolicy),
    /// The rule's cost function could not read a cost.
    Cost(&'a RateLimitPolicy, CostError),
}

impl Unchargeable<'_> {
    /// The 4xx that says so: a 400 for a missing key, the cost error's own.
    fn decision(self) -> Decision {
        Decision::Refused(self.response())
    }

    fn response(self) -> Response<Bytes> {
        match self {
            Unchargeable::NoKey(policy) => {
                let detail = format!(
                    "The request carries no identity for rate-limit policy \"{}\".",
                    policy.name()
                );
                client_error(StatusCode::BAD_REQUEST, &detail)
            }
            Unchargeable::Cost(policy, error) => error.response(policy),
        }
    }
}

pin_project! {
    /// The future of [`RateLimitService::call`]: the refusal, ready at
    /// once, or the inner service's response (with give-backs and fields
    /// applied). Polled again once complete, or after the inner future
    /// panicked, it answers an empty 500 rather than panicking or resuming
    /// the inner future. It holds the inner future in place, so it is
    /// `Unpin` only when that future is: pin it (`std::pin::pin!`) to poll
    /// it by hand.
    pub struct ResponseFuture<F, K = EitherBody> {
        #[pin]
        state: State<F>,
        kind: PhantomData<fn() -> K>,
    }
}

/// What the decision of a shared limit's store comes to: the inner
/// service's future, called once every limit took its cost, or the refusal.
type Decided<F> = Result<(F, Admitted), Response<Bytes>>;

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // `None` once answered.
        Refused { response: Option<Response<Bytes>> },
        // Waiting for a shared limit's store.
        Deciding { decision: Pin<Box<dyn Future<Output = Decided<F>> + Send>> },
        Admitted {
            #[pin]
            future: F,
            // `None` when nothing is left to do once it answers.
            admitted: Option<Admitted>,
            // Set while the inner future is polled: found set, that poll
            // panicked, and the inner future is not resumed.
            polling: bool,
        },
        Done,
    }
}

impl<F, K> ResponseFuture<F, K> {
    fn refused(response: Response<Bytes>) -> Self {
        ResponseFuture::at(State::Refused {
            response: Some(response),
        })
    }

    fn deciding(decision: Pin<Box<dyn Future<Output = Decided<F>> + Send>>) -> Self {
        ResponseFuture::at(State::Deciding { decision })
    }

    fn admitted(future: F, admitted: Option<Admitted>) -> Self {
        ResponseFuture::at(State::Admitted {
            future,
            admitted,
            polling: false,
        })
    }

    fn at(state: State<F>) -> Self {
        ResponseFuture {
            state,
            kind: PhantomData,
        }
    }
}

impl<F, K> fmt::Debug for ResponseFuture<F, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Refused { .. } => "refused",
            State::Deciding { .. } => "deciding",
            State::Admitted { .. } => "admitted",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<F, K, B, E> Future for ResponseFuture<F, K>
where
    F: Future<Output = Result<Response<B>, E>>,
    K: BodyKind<B>,
{
    type Output = Result<Response<K::Body>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            match state.as_mut().project() {
                StateProj::Refused { response } => {
                    // Taken, so that polled again it answers 500 rather
                    // than the refusal twice.
                    let response = response.take().unwrap_or_else(spent);
                    return Poll::Ready(Ok(response.map(K::own)));
                }
                StateProj::Done => return Poll::Ready(Ok(spent().map(K::own))),
                StateProj::Deciding { decision } => match decision.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(refusal)) => {
                        state.set(State::Done);
                        return Poll::Ready(Ok(refusal.map(K::own)));
                    }
                    Poll::Ready(Ok((future, admitted))) => {
                        state.set(State::Admitted {
                            future,
                            admitted: Some(admitted),
                            polling: false,
                        });
                    }
                },
                StateProj::Admitted {
                    future,
                    admitted,
                    polling,
                } => {
                    if *polling {
                        // The last poll of the inner future panicked: its
                        // charges stay spent, and it is not resumed.
                        state.set(State::Done);
                        return Poll::Ready(Ok(spent().map(K::own)));
                    }
                    *polling = true;
                    let answer = future.poll(cx);
                    *polling = false;
                    let Poll::Ready(answer) = answer else {
                        return Poll::Pending;
                    };
                    let admitted = admitted.take();
                    state.set(State::Done);
                    return Poll::Ready(answer.map(|mut response| {
                        if let Some(admitted) = admitted {
                            admitted.finish(&mut response);
                        }
                        response.map(K::inner)
                    }));
                }
            }
        }
    }
}

fn spent() -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}

impl Admitted {
    /// Gives back the charges of the rules configured to give back this
    /// status, each through its receipt (the one rule that never mints
    /// credit), then adds the fields if configured (never to 401 or 403).
    fn finish<B>(mut self, response: &mut Response<B>) {
        let status = response.status();
        for charge in &mut self.charges {
            if self.config.rules[charge.rule].gives_back(status) {
                charge.give_back();
            }
        }
        let private = status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN;
        if !self.config.on_success || private || self.charges.is_empty() {
            return;
        }
        let (policies, limits) = self.config.fields(&self.charges);
        let headers = response.headers_mut();
        if let Some(value) = policies {
            headers.insert(RATELIMIT_POLICY_NAME, value);
        }
        if let Some(value) = limits {
            headers.insert(RATELIMIT_NAME, value);
        }
    }
}
