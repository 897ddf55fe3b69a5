//! The response future: the refusal ready at once, the wait for a shared
//! rule's store, or the inner service's response with the give-backs and
//! fields its charges call for.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Response, StatusCode};
use pin_project_lite::pin_project;

use super::body::{BodyKind, EitherBody};
use super::metered::Metering;
use crate::http::rules::KeptCharges;

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
pub(super) type StoreAnswer<F> = Result<(F, KeptCharges), Response<Bytes>>;

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // `None` once answered.
        Refused { response: Option<Response<Bytes>> },
        // Waiting for a shared limit's store.
        Deciding { decision: Pin<Box<dyn Future<Output = StoreAnswer<F>> + Send>> },
        Admitted {
            #[pin]
            future: F,
            // `None` when nothing is left to do once it answers.
            admitted: Option<KeptCharges>,
            // Set while the inner future is polled: found set, that poll
            // panicked, and the inner future is not resumed.
            polling: bool,
        },
        Done,
    }
}

impl<F, K> ResponseFuture<F, K> {
    pub(super) fn refused(response: Response<Bytes>) -> Self {
        ResponseFuture::at(State::Refused {
            response: Some(response),
        })
    }

    pub(super) fn deciding(decision: Pin<Box<dyn Future<Output = StoreAnswer<F>> + Send>>) -> Self {
        ResponseFuture::at(State::Deciding { decision })
    }

    pub(super) fn admitted(future: F, admitted: Option<KeptCharges>) -> Self {
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
                        let metering = Metering(
                            admitted
                                .and_then(|admitted| admitted.finish(&mut response))
                                .map(Box::new),
                        );
                        response.map(|body| K::inner(body, metering))
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
