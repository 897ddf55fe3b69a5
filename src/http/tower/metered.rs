//! A response body counted as it streams, for the rules settled to the
//! bytes they sent ([`Settlement::BodyBytes`](super::Settlement::BodyBytes)).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::http::rules::Meter;

/// What the layer counts of a response body, if a rule settles by its
/// bytes: handed to [`BodyKind::inner`](super::BodyKind::inner), opaque.
///
/// ```
/// use tollgate::http::tower::Metering;
///
/// let _nothing_counted = Metering::none();
/// ```
// Boxed: the body of every response carries it, and without a rule
// settled by bytes it is one null word.
pub struct Metering(pub(super) Option<Box<Meter>>);

impl Metering {
    /// Nothing to count: no rule settles by the body's bytes.
    ///
    /// ```
    /// use tollgate::http::tower::{BodyKind, EitherBody, Metering};
    ///
    /// let _body = <EitherBody as BodyKind<String>>::inner(String::new(), Metering::none());
    /// ```
    pub fn none() -> Metering {
        Metering(None)
    }
}

impl std::fmt::Debug for Metering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Metering").field(&self.0.is_some()).finish()
    }
}

pin_project! {
    /// The inner service's response body, its data bytes counted for the
    /// rules settled by them ([`Settlement::BodyBytes`](super::Settlement::BodyBytes)):
    /// settled when the body ends, or to the bytes sent so far when it is
    /// dropped before (the client hung up mid-stream). Frames pass through
    /// untouched; without such a rule nothing is counted.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http_body::Body;
    /// use http_body_util::Full;
    /// use tollgate::http::tower::{MeteredBody, Metering};
    ///
    /// let body = MeteredBody::new(Full::new(Bytes::from_static(b"hello")), Metering::none());
    /// assert_eq!(body.size_hint().exact(), Some(5));
    /// ```
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        meter: Option<Box<Meter>>,
    }

    impl<B> PinnedDrop for MeteredBody<B> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(meter) = this.project().meter.take() {
                meter.settle();
            }
        }
    }
}

impl<B> MeteredBody<B> {
    /// `body`, counted as `metering` says.
    pub fn new(body: B, metering: Metering) -> MeteredBody<B> {
        MeteredBody {
            inner: body,
            meter: metering.0,
        }
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for MeteredBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredBody")
            .field("inner", &self.inner)
            .field("metered", &self.meter.is_some())
            .finish()
    }
}

impl<B: Body> Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if let Some(meter) = this.meter.as_mut() {
            match &frame {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        use bytes::Buf;
                        meter.count(data.remaining() as u64);
                    }
                }
                // The end, or a failure that ends it: what was sent is what
                // it cost.
                None | Some(Err(_)) => {
                    if let Some(meter) = this.meter.take() {
                        meter.settle();
                    }
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
