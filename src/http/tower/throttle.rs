//! A body streamed at a limit's rate: each chunk's bytes reserved from the
//! limit ([`Limit::reserve`]'s path) and sent when due, by one timer per
//! chunk that has to wait, never a polling loop.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::error::AcquireError;
use crate::limit::{Limit, Taken};

pin_project! {
    /// `B` with its data sent at the rate of limit `L`, a byte a token: a
    /// download capped per client ([`OwnedKey`](crate::OwnedKey) of a
    /// keyed limiter), an upload read at a bucket's pace, any body through
    /// any limit.
    ///
    /// Each chunk is cut into pieces of at most the limit's capacity (so
    /// a chunk larger than the burst still passes, a burst at a time);
    /// each piece is reserved from the limit, a debt of at most its own
    /// size, and sent when its tokens exist, waited out on tokio's timer
    /// (no polling loop, no busy wait; up to a millisecond late, tokio's
    /// timer resolution, a lateness that never accumulates, since each
    /// piece is due by the limit's schedule). Over any interval the bytes
    /// sent are within the limit's envelope. Cancellation-safe: a body
    /// dropped while a piece waits gives that piece's reservation back by
    /// the rule that never mints: exactly while nothing else has charged
    /// the limit since (one body on its own key), otherwise what that rule
    /// allows, which is nothing while the limit is in debt. Trailers pass through; the size hint is the
    /// inner body's (no byte is added or dropped).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bytes::Bytes;
    /// use http_body_util::{BodyExt, Full};
    /// use tollgate::http::tower::ThrottledBody;
    /// use tollgate::{Quota, TokenBucket, TokioClock};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// // 1 MB a second, a burst of 1 MB (on tokio's clock, paused here).
    /// let rate = Arc::new(TokenBucket::with_clock(Quota::per_second(1_000_000)?, TokioClock::new()));
    /// let body = ThrottledBody::new(Full::new(Bytes::from(vec![0; 3_000_000])), rate);
    /// let started = tokio::time::Instant::now();
    /// let sent = body.collect().await?.to_bytes();
    /// assert_eq!(sent.len(), 3_000_000);
    /// // The first MB at once, two more at 1 MB/s.
    /// let took = started.elapsed().as_millis();
    /// assert!((2_000..2_001).contains(&took), "{took} ms");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[project = ThrottledProj]
    pub struct ThrottledBody<B, L: Limit> {
        #[pin]
        inner: B,
        limit: L,
        // What is left of the chunk being sent.
        rest: Bytes,
        // A piece to reserve before the rest: one the limit could not
        // reserve yet.
        next: Option<Bytes>,
        // The piece waiting: its bytes, what was reserved for it (nothing
        // while the limit cannot reserve it yet), and its timer.
        waiting: Option<Waiting>,
    }

    impl<B, L: Limit> PinnedDrop for ThrottledBody<B, L> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(taken) = this.waiting.take().and_then(|waiting| waiting.taken) {
                // Never sent: its reservation goes back.
                this.limit.undo(&taken);
            }
        }
    }
}

/// A piece waiting: for its reserved tokens, or (`taken` none) until the
/// limit says it can be reserved (a window counter reserves within its
/// current window only).
struct Waiting {
    piece: Bytes,
    taken: Option<Taken>,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl<B, L: Limit> ThrottledBody<B, L> {
    /// `body`, sent at the rate of `limit`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use http_body_util::Empty;
    /// use tollgate::http::tower::ThrottledBody;
    /// use tollgate::{KeyedLimiter, OwnedKey, Quota};
    ///
    /// let per_client = Arc::new(KeyedLimiter::<String>::new(Quota::per_second(1 << 20)?));
    /// let client = OwnedKey::new(per_client, "203.0.113.9".to_owned());
    /// let _body = ThrottledBody::new(Empty::<bytes::Bytes>::new(), client);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(body: B, limit: L) -> Self {
        ThrottledBody {
            inner: body,
            limit,
            rest: Bytes::new(),
            next: None,
            waiting: None,
        }
    }
}

impl<B, L: Limit> fmt::Debug for ThrottledBody<B, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottledBody")
            .field("rest", &self.rest.len())
            .field("waiting", &self.waiting.as_ref().map(|w| w.piece.len()))
            .finish_non_exhaustive()
    }
}

/// Why a throttled body stopped: its own error, or the limit's refusal (a
/// key its limiter cannot track).
#[derive(Debug, thiserror::Error)]
pub enum ThrottleError<E> {
    /// The inner body failed.
    #[error("the throttled body failed: {0}")]
    Body(E),
    /// The limit refused a piece for good ([`AcquireError::TooManyKeys`]:
    /// the limiter's key table is full). A refusal for want of tokens is
    /// waited out instead.
    #[error("the body's rate limit refused it: {0}")]
    Limit(AcquireError),
}

impl<B, L> Body for ThrottledBody<B, L>
where
    B: Body<Data = Bytes>,
    L: Limit,
{
    type Data = Bytes;
    type Error = ThrottleError<B::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        loop {
            if let Some(waiting) = this.waiting.as_mut() {
                ready!(waiting.timer.as_mut().poll(cx));
                if let Some(waiting) = this.waiting.take() {
                    if waiting.taken.is_some() {
                        return Poll::Ready(Some(Ok(Frame::data(waiting.piece))));
                    }
                    // The limit said when it could take the piece: now.
                    *this.next = Some(waiting.piece);
                }
            }
            let piece = match this.next.take() {
                Some(piece) => piece,
                None if !this.rest.is_empty() => {
                    let capacity = usize::try_from(this.limit.capacity()).unwrap_or(usize::MAX);
                    let size = this.rest.len().min(capacity);
                    this.rest.split_to(size)
                }
                None => match ready!(this.inner.as_mut().poll_frame(cx)) {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => {
                            *this.rest = data;
                            continue;
                        }
                        Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                    },
                    Some(Err(error)) => return Poll::Ready(Some(Err(ThrottleError::Body(error)))),
                    None => return Poll::Ready(None),
                },
            };
            // At most the capacity, reserved with no limit on the wait: a
            // bucket never refuses it for want of tokens; a window counter
            // may, until its window turns, and says when.
            let (taken, wait) = match this.limit.take_within(piece.len() as u64, Duration::MAX) {
                Ok((taken, wait)) => (Some(taken), wait),
                // Never a zero wait for a piece still to reserve: a timer
                // tick at least, so that nothing spins.
                Err(AcquireError::Insufficient { retry_after }) => {
                    (None, retry_after.max(Duration::from_millis(1)))
                }
                // The capacity fell below the piece (a quota changed mid
                // stream): cut it to the new capacity, the rest first in
                // line.
                Err(AcquireError::ExceedsCapacity { capacity, .. }) if capacity > 0 => {
                    let mut piece = piece;
                    let size = usize::try_from(capacity)
                        .unwrap_or(usize::MAX)
                        .min(piece.len());
                    let tail = piece.split_off(size);
                    if !tail.is_empty() {
                        *this.rest = if this.rest.is_empty() {
                            tail
                        } else {
                            [tail, std::mem::take(this.rest)].concat().into()
                        };
                    }
                    *this.next = Some(piece);
                    continue;
                }
                Err(refused) => return Poll::Ready(Some(Err(ThrottleError::Limit(refused)))),
            };
            if taken.is_some() && wait.is_zero() {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            *this.waiting = Some(Waiting {
                piece,
                taken,
                timer: Box::pin(tokio::time::sleep(wait)),
            });
        }
    }

    fn is_end_stream(&self) -> bool {
        self.waiting.is_none()
            && self.next.is_none()
            && self.rest.is_empty()
            && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let waiting = self.waiting.as_ref().map_or(0, |w| w.piece.len());
        let pending = (self.rest.len() + waiting + self.next.as_ref().map_or(0, Bytes::len)) as u64;
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(pending));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(pending));
        }
        hint
    }
}
