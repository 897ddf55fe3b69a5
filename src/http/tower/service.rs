//! The service: [`RateLimitService::call`] decides a request's rules and
//! either answers a refusal at once or calls the inner service, keeping
//! the charges a response may give back.

use std::marker::PhantomData;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower::Service;

use super::body::{BodyKind, EitherBody};
use super::future::ResponseFuture;
use crate::http::rules::{Decision, Engine, Framing, KeptCharges, Protocol};
use crate::sync::unmodelled::Arc;

/// The service a [`RateLimitLayer`](super::RateLimitLayer) wraps around `S`.
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
    engine: Arc<Engine>,
    kind: PhantomData<fn() -> K>,
}

impl<S, K> RateLimitService<S, K> {
    pub(super) fn new(inner: S, engine: Arc<Engine>) -> Self {
        RateLimitService {
            inner,
            engine,
            kind: PhantomData,
        }
    }
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
        let decision = if self.engine.reads_costs {
            let framing = Framing::new(body.is_end_stream(), body.size_hint().exact());
            parts.extensions.insert(framing);
            let decision = self.engine.decide(&parts);
            parts.extensions.remove::<Framing>();
            decision
        } else {
            self.engine.decide(&parts)
        };
        let (mut charges, from) = match decision {
            Decision::Admitted(charges) => {
                let future = self.inner.call(Request::from_parts(parts, body));
                // Nothing to do once the inner service answers: no Arc
                // to count, nothing to drop.
                let admitted = (!charges.is_empty()).then(|| KeptCharges {
                    engine: Arc::clone(&self.engine),
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
        let engine = Arc::clone(&self.engine);
        let request = Request::from_parts(parts, body);
        ResponseFuture::deciding(Box::pin(async move {
            if let Err(refused) = engine.charge_waiting(&mut charges, from).await {
                let protocol = Protocol::of(request.headers());
                return Err(engine.refusal(&charges, refused, protocol));
            }
            engine.count_shadowed(&charges);
            Ok((inner.call(request), KeptCharges { engine, charges }))
        }))
    }
}
