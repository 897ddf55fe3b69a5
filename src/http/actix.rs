//! Rate-limit rules as actix-web middleware (feature `actix`): an adapter
//! over the rule engine of [`http::rules`](crate::http::rules), with the
//! same [`Rule`](crate::http::rules::Rule)s, decisions and answers as the
//! tower layer, actix's request head read into an `http` one for the
//! rules' extractors.

use std::future::{Future, Ready, ready};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::StatusCode as ActixStatus;
use actix_web::http::header::{HeaderName as ActixName, HeaderValue as ActixValue};
use actix_web::{Error, HttpResponse};
use bytes::Bytes;
use http::request::Parts;

use crate::http::fields::{RATELIMIT_NAME, RATELIMIT_POLICY_NAME};
use crate::http::problem::problem_response;
use crate::http::rules::{
    ActualCost, Decision, Engine, KeptCharges, Protocol, Rules, RulesBuilder,
};
use crate::sync::unmodelled::Arc;

/// What copies request extensions of actix's into the rules' request head
/// ([`RateLimit::with_extensions`]).
type CopyExtensions = dyn Fn(&ServiceRequest, &mut http::Extensions) + Send + Sync;

/// Rate-limit rules as actix-web middleware: `App::wrap(RateLimit::builder()...build())`.
/// Every rule is decided and answered as the tower layer decides and
/// answers it ([`docs/http.md`](crate::guide::http)): 429 with Retry-After,
/// the RateLimit fields and problem+json, 503 for the server's shortage,
/// the 4xx of a request no rule can charge, shared rules waiting for their
/// store, status give-backs and settlement after the response. The peer
/// address is the connection's ([`ServiceRequest::peer_addr`], read by
/// [`extract::peer_ip`](crate::http::rules::extract::peer_ip) and so by `peer_addr` and
/// `forwarded`); a request with none (a Unix socket, a test request
/// without one) is the server's 500, as on every stack. The request's own
/// extensions are actix's, not `http`'s: [`with_extensions`](Self::with_extensions)
/// copies the ones a rule keys on (a principal from authentication).
///
/// ```
/// use std::sync::Arc;
/// use actix_web::{App, web};
/// use tollgate::http::PolicyName;
/// use tollgate::http::actix::RateLimit;
/// use tollgate::http::rules::{Rule, extract};
/// use tollgate::{KeyedLimiter, Quota};
///
/// let per_ip = Arc::new(KeyedLimiter::new(Quota::per_second(10)?));
/// let limit = RateLimit::builder()
///     .rule(Rule::keyed(PolicyName::new("per-ip")?, per_ip, extract::peer_addr))
///     .build();
/// let _app = App::new().wrap(limit).route("/", web::get().to(|| async { "hello" }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RateLimit {
    engine: Arc<Engine>,
    extensions: Option<Arc<CopyExtensions>>,
}

impl RateLimit {
    /// Starts the middleware's rules: none, no jitter, random partition
    /// keys and the RateLimit fields on refusals only.
    ///
    /// ```
    /// use tollgate::http::actix::RateLimit;
    ///
    /// let _middleware = RateLimit::builder().build();
    /// ```
    pub fn builder() -> RulesBuilder<RateLimit> {
        RulesBuilder::new()
    }
}

/// The middleware of a set of rules (the same rules can make a tower layer
/// too: their limiters are shared).
///
/// ```
/// use tollgate::http::actix::RateLimit;
/// use tollgate::http::rules::Rules;
///
/// let _middleware = RateLimit::from(Rules::builder().build());
/// ```
impl From<Rules> for RateLimit {
    fn from(rules: Rules) -> RateLimit {
        RateLimit {
            engine: rules.engine,
            extensions: None,
        }
    }
}

impl RateLimit {
    /// Copies what `copy` takes from actix's request (its extensions, say)
    /// into the request head the rules read, before they are decided: how
    /// a rule keys on a principal that authentication middleware placed in
    /// actix's extensions ([`extract::extension`](crate::http::rules::extract::extension)).
    ///
    /// ```
    /// use actix_web::HttpMessage;
    /// use tollgate::http::actix::RateLimit;
    ///
    /// #[derive(Clone)]
    /// struct Account(u64);
    ///
    /// let _middleware = RateLimit::builder().build().with_extensions(|request, extensions| {
    ///     if let Some(account) = request.extensions().get::<Account>() {
    ///         extensions.insert(account.clone());
    ///     }
    /// });
    /// ```
    pub fn with_extensions(
        mut self,
        copy: impl Fn(&ServiceRequest, &mut http::Extensions) + Send + Sync + 'static,
    ) -> RateLimit {
        self.extensions = Some(Arc::new(copy));
        self
    }
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("rules", &self.engine)
            .field("extensions", &self.extensions.is_some())
            .finish()
    }
}

impl<S, B> Transform<S, ServiceRequest> for RateLimit
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = RateLimitMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<RateLimitMiddleware<S>, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitMiddleware {
            service: Rc::new(service),
            limit: self.clone(),
        }))
    }
}

/// The service [`RateLimit`] wraps around an actix service.
pub struct RateLimitMiddleware<S> {
    service: Rc<S>,
    limit: RateLimit,
}

impl<S> std::fmt::Debug for RateLimitMiddleware<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitMiddleware")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

type Answer<B> = Pin<Box<dyn Future<Output = Result<ServiceResponse<EitherBody<B>>, Error>>>>;

impl<S, B> Service<ServiceRequest> for RateLimitMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = Answer<B>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Answer<B> {
        let engine = Arc::clone(&self.limit.engine);
        let decision = match self.head(&request) {
            Some(parts) => engine.decide(&parts),
            // actix parsed the head, so it converts: were it not to, the
            // request could not be charged.
            None => Decision::Refused(problem_response(
                http::StatusCode::BAD_REQUEST,
                "The request head cannot be read for rate limiting.",
            )),
        };
        let (charges, from) = match decision {
            Decision::Refused(response) => {
                return Box::pin(ready(Ok(answer(request, response))));
            }
            Decision::Admitted(charges) => {
                let called = self.service.call(request);
                return Box::pin(async move {
                    let mut response = called.await?;
                    if !charges.is_empty() {
                        finish(KeptCharges { engine, charges }, &mut response);
                    }
                    Ok(response.map_into_left_body())
                });
            }
            Decision::Waits { charges, from } => (charges, from),
        };
        let service = Rc::clone(&self.service);
        Box::pin(async move {
            let mut charges = charges;
            if let Err(refused) = engine.charge_waiting(&mut charges, from).await {
                let response = engine.refusal(&charges, refused, Protocol::Http);
                return Ok(answer(request, response));
            }
            engine.count_shadowed(&charges);
            let mut response = service.call(request).await?;
            finish(KeptCharges { engine, charges }, &mut response);
            Ok(response.map_into_left_body())
        })
    }
}

impl<S> RateLimitMiddleware<S> {
    /// The request head the rules read: actix's method, URI, version and
    /// headers in `http`'s types, the peer address as a `SocketAddr`
    /// extension, and what [`RateLimit::with_extensions`] copies.
    fn head(&self, request: &ServiceRequest) -> Option<Parts> {
        let mut head = http::Request::builder()
            .method(http::Method::from_bytes(request.method().as_str().as_bytes()).ok()?)
            .uri(request.uri().to_string())
            .version(version(request.version()));
        for (name, value) in request.headers() {
            head = head.header(name.as_str(), value.as_bytes());
        }
        let (mut parts, ()) = head.body(()).ok()?.into_parts();
        if let Some(peer) = request.peer_addr() {
            parts.extensions.insert::<SocketAddr>(peer);
        }
        if let Some(copy) = &self.limit.extensions {
            copy(request, &mut parts.extensions);
        }
        Some(parts)
    }
}

/// actix's HTTP version as `http`'s.
fn version(version: actix_web::http::Version) -> http::Version {
    use actix_web::http::Version as Actix;
    match version {
        Actix::HTTP_09 => http::Version::HTTP_09,
        Actix::HTTP_10 => http::Version::HTTP_10,
        Actix::HTTP_2 => http::Version::HTTP_2,
        Actix::HTTP_3 => http::Version::HTTP_3,
        _ => http::Version::HTTP_11,
    }
}

/// The layer's own answer to `request`, as actix's response.
fn answer<B>(
    request: ServiceRequest,
    response: http::Response<Bytes>,
) -> ServiceResponse<EitherBody<B>> {
    let (parts, body) = response.into_parts();
    let status =
        ActixStatus::from_u16(parts.status.as_u16()).unwrap_or(ActixStatus::INTERNAL_SERVER_ERROR);
    let mut answer = HttpResponse::build(status);
    for (name, value) in &parts.headers {
        if let (Ok(name), Ok(value)) = (
            ActixName::from_bytes(name.as_str().as_bytes()),
            ActixValue::from_bytes(value.as_bytes()),
        ) {
            answer.append_header((name, value));
        }
    }
    let (request, _) = request.into_parts();
    ServiceResponse::new(request, answer.body(body)).map_into_right_body()
}

/// What the response means for the kept charges (give-backs, settlement)
/// and the fields it gets, through the engine's own rules: the
/// response's status, headers and [`ActualCost`] read into an `http`
/// response head, the fields it gains copied back.
fn finish<B>(kept: KeptCharges, response: &mut ServiceResponse<B>) {
    let mut head = http::Response::new(());
    if let Ok(status) = http::StatusCode::from_u16(response.status().as_u16()) {
        *head.status_mut() = status;
    }
    for (name, value) in response.headers().iter().filter_map(to_http) {
        head.headers_mut().append(name, value);
    }
    if let Some(actual) = response.response().extensions().get::<ActualCost>() {
        head.extensions_mut().insert(*actual);
    }
    // actix's body is not counted: a rule settled by its bytes keeps its
    // estimate (`Settlement::BodyBytes`).
    let _estimate_stands = kept.finish(&mut head);
    for name in [RATELIMIT_POLICY_NAME, RATELIMIT_NAME] {
        let field = head
            .headers()
            .get(&name)
            .and_then(|value| to_actix((&name, value)));
        if let Some((name, value)) = field {
            response.headers_mut().insert(name, value);
        }
    }
}

/// A header of `http`'s as actix's (both hold bytes validated alike: a
/// header of one is always one of the other).
fn to_actix(
    (name, value): (&http::HeaderName, &http::HeaderValue),
) -> Option<(ActixName, ActixValue)> {
    let name = ActixName::from_bytes(name.as_str().as_bytes()).ok()?;
    Some((name, ActixValue::from_bytes(value.as_bytes()).ok()?))
}

/// A header of actix's as `http`'s.
fn to_http(
    (name, value): (&ActixName, &ActixValue),
) -> Option<(http::HeaderName, http::HeaderValue)> {
    let name = http::HeaderName::from_bytes(name.as_str().as_bytes()).ok()?;
    Some((name, http::HeaderValue::from_bytes(value.as_bytes()).ok()?))
}
