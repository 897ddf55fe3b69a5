//! What a rule's key extractor answers: a key, or why the request has
//! none, which decides who is told (the client, or the server's operator).

use http::request::Parts;

use crate::http::PolicyName;
use crate::sync::unmodelled::Arc;
use crate::sync::{AtomicBool, Ordering};

/// A rule's key extractor, its answer read: the key, or why there is none.
pub(super) type KeyFn<K> = dyn Fn(&Parts) -> Result<K, NoKey> + Send + Sync;

/// The server gave the request no peer address: nothing in its extensions
/// that a connection's address is read from (a `SocketAddr`; with feature
/// `axum`, axum's `ConnectInfo<SocketAddr>`; with feature `tonic`, tonic's
/// `TcpConnectInfo`; with `tonic-tls`, its `TlsConnectInfo`). That is the server's misconfiguration, never the
/// client's doing: the layer answers 500 and reports it through `tracing`
/// ([`extract::peer_ip`](super::extract::peer_ip)).
///
/// ```
/// use tollgate::http::rules::{NoPeer, extract};
///
/// let (parts, ()) = http::Request::new(()).into_parts();
/// assert_eq!(extract::peer_ip(&parts), Err(NoPeer));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error(
    "the server gave the request no peer address (axum needs \
     `into_make_service_with_connect_info::<SocketAddr>()` and tollgate's feature \
     `axum`; tonic over its own TLS needs feature `tonic-tls`; a bare hyper \
     server inserts the connection's `SocketAddr` into each request's extensions)"
)]
pub struct NoPeer;

/// Why a request has no key for a rule.
///
/// ```
/// use tollgate::http::rules::{IntoKey, NoKey, NoPeer};
///
/// assert_eq!(None::<u64>.into_key(), Err(NoKey::NotInRequest));
/// assert_eq!(Err::<u64, _>(NoPeer).into_key(), Err(NoKey::NoPeer));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NoKey {
    /// The request does not carry it (no API key header, no principal
    /// from authentication): the rule's [`MissingKey`](super::MissingKey)
    /// policy answers.
    NotInRequest,
    /// The server gave the request no peer address ([`NoPeer`]): 500,
    /// whatever the rule's missing-key policy, because a server that
    /// cannot see its peers must not quietly run without its per-address
    /// limits.
    NoPeer,
}

/// What a key extractor returns: `Option<K>` (`None` is
/// [`NoKey::NotInRequest`]) or `Result<K, NoPeer>` (what the peer
/// extractors of [`extract`](super::extract) return). Sealed: an
/// extractor says why a key is missing with one of the two.
///
/// ```
/// use tollgate::http::rules::IntoKey;
///
/// assert_eq!(Some(7).into_key(), Ok(7));
/// ```
pub trait IntoKey<K>: sealed::Sealed {
    /// The key, or why there is none.
    fn into_key(self) -> Result<K, NoKey>;
}

impl<K> sealed::Sealed for Option<K> {}

impl<K> IntoKey<K> for Option<K> {
    fn into_key(self) -> Result<K, NoKey> {
        self.ok_or(NoKey::NotInRequest)
    }
}

impl<K> sealed::Sealed for Result<K, NoPeer> {}

impl<K> IntoKey<K> for Result<K, NoPeer> {
    fn into_key(self) -> Result<K, NoKey> {
        self.map_err(|NoPeer| NoKey::NoPeer)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Reports the first request of a rule that had no peer address through
/// `tracing`, with the cause and the fix; later ones are answered 500
/// without a report each (a misconfigured server would log every request).
#[derive(Clone, Debug, Default)]
pub(super) struct NoPeerReport {
    reported: Arc<AtomicBool>,
}

impl NoPeerReport {
    pub(super) fn report(&self, policy: &PolicyName) {
        if !self.reported.swap(true, Ordering::Relaxed) {
            tracing::error!(
                policy = policy.as_str(),
                cause = %NoPeer,
                "rate-limit rule keyed on the peer address found none: \
                 answering 500 to every request it applies to until the server is fixed"
            );
        }
    }
}
