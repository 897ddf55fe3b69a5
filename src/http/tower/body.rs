//! The body type of the layer's responses: its own answers (a refusal, the
//! 4xx of a request it cannot charge) and the inner service's responses,
//! in one type.

use bytes::Bytes;
use http_body_util::{Either, Full};

use super::metered::{MeteredBody, Metering};

/// The body of the layer's responses by default: its own answers (`Left`)
/// or the inner service's body (`Right`), counted for the rules settled by
/// its bytes ([`MeteredBody`]; frames pass through untouched).
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::{Either, Full};
/// use tollgate::http::tower::RateLimitBody;
///
/// let own: RateLimitBody<String> = Either::Left(Full::new(Bytes::from_static(b"{}")));
/// # let _ = own;
/// ```
pub type RateLimitBody<B> = Either<Full<Bytes>, MeteredBody<B>>;

/// How a [`RateLimitLayer`](super::RateLimitLayer) types the bodies of its
/// responses when the inner service's body is `B`: [`EitherBody`] (the
/// default) or [`InnerBody`]. Sealed: these two are the only kinds.
///
/// ```
/// use bytes::Bytes;
/// use http_body::Body;
/// use http_body_util::Full;
/// use tollgate::http::tower::{BodyKind, InnerBody};
///
/// let body: Full<Bytes> = <InnerBody as BodyKind<Full<Bytes>>>::own(Bytes::from_static(b"{}"));
/// assert_eq!(body.size_hint().exact(), Some(2));
/// ```
pub trait BodyKind<B>: sealed::Sealed {
    /// The body of the layer's responses.
    type Body;

    /// The body of one of the layer's own answers, from its bytes.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http_body_util::Either;
    /// use tollgate::http::tower::{BodyKind, EitherBody};
    ///
    /// let body = <EitherBody as BodyKind<String>>::own(Bytes::new());
    /// assert!(matches!(body, Either::Left(_)));
    /// ```
    fn own(bytes: Bytes) -> Self::Body;

    /// The body of the inner service's response, counted as `metering`
    /// says for the rules settled by its bytes ([`InnerBody`] counts
    /// nothing: see [`Settlement::BodyBytes`](super::Settlement::BodyBytes)).
    ///
    /// ```
    /// use http_body_util::Either;
    /// use tollgate::http::tower::{BodyKind, EitherBody, Metering};
    ///
    /// let body = <EitherBody as BodyKind<String>>::inner(String::from("hello"), Metering::none());
    /// assert!(matches!(body, Either::Right(_)));
    /// ```
    fn inner(body: B, metering: Metering) -> Self::Body;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::EitherBody {}
    impl Sealed for super::InnerBody {}
}

/// The default [`BodyKind`]: [`RateLimitBody<B>`], the layer's own answers
/// beside whatever body type the inner service has.
///
/// ```
/// use tollgate::http::tower::{EitherBody, RateLimitLayer};
///
/// let _layer: RateLimitLayer<EitherBody> = RateLimitLayer::builder().build();
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EitherBody;

impl<B> BodyKind<B> for EitherBody {
    type Body = RateLimitBody<B>;

    fn own(bytes: Bytes) -> RateLimitBody<B> {
        Either::Left(Full::new(bytes))
    }

    fn inner(body: B, metering: Metering) -> RateLimitBody<B> {
        Either::Right(MeteredBody::new(body, metering))
    }
}

/// The inner service's own body type, its answers built from their bytes
/// (`B: From<Bytes>`: axum's `Body`, `Full<Bytes>`, …), chosen with
/// [`RateLimitLayer::with_inner_body`](super::RateLimitLayer::with_inner_body).
/// For a framework that boxes a response body of any type but its own, as
/// axum does once per response: the inner service's responses then pass
/// through unboxed.
///
/// ```
/// use tollgate::http::tower::{InnerBody, RateLimitLayer};
///
/// let _layer: RateLimitLayer<InnerBody> = RateLimitLayer::builder().build().with_inner_body();
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InnerBody;

impl<B: From<Bytes>> BodyKind<B> for InnerBody {
    type Body = B;

    fn own(bytes: Bytes) -> B {
        B::from(bytes)
    }

    /// Counts nothing: a rule settled by the body's bytes keeps its
    /// estimate behind a layer of this kind.
    fn inner(body: B, _: Metering) -> B {
        body
    }
}
