//! Ready-made key extractors and cost functions for [`Rule`](super::Rule)s.
//!
//! Extractors read the request head (`http::request::Parts`) only, so they
//! work whatever the body type, and none depends on a web framework: the
//! values a server places in the request extensions (axum's
//! `ConnectInfo<SocketAddr>`, a principal from authentication) are read by
//! type, with a function to pick out the key.

use std::net::{IpAddr, SocketAddr};

use http::request::Parts;
use http::{HeaderName, Method};

use super::length;
use super::{CostError, NoPeer};
use crate::identity::{AddrKey, ForwardedResolver, PrefixPolicy};

/// The request extension of type `T`, cloned: an authenticated principal
/// placed there by earlier middleware, say. Never take an identity from a
/// header the client controls.
///
/// ```
/// use tollgate::http::rules::extract;
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Account(u64);
///
/// let (mut parts, ()) = http::Request::new(()).into_parts();
/// let key = extract::extension::<Account>();
/// assert_eq!(key(&parts), None);
/// parts.extensions.insert(Account(7));
/// assert_eq!(key(&parts), Some(Account(7)));
/// ```
pub fn extension<T: Clone + Send + Sync + 'static>()
-> impl Fn(&Parts) -> Option<T> + Send + Sync + Clone {
    |parts: &Parts| parts.extensions.get::<T>().cloned()
}

/// The request extension of type `E`, mapped by `f`: a field of a
/// principal that authentication placed there, say. (For the peer address,
/// use [`peer_ip`], whose absence is answered as the server's fault.)
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::http::rules::extract;
///
/// let (mut parts, ()) = http::Request::new(()).into_parts();
/// parts.extensions.insert("192.0.2.7:443".parse::<SocketAddr>()?);
/// let peer = extract::extension_map(|addr: &SocketAddr| addr.ip());
/// assert_eq!(peer(&parts), Some("192.0.2.7".parse::<IpAddr>()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn extension_map<E, K, F>(f: F) -> impl Fn(&Parts) -> Option<K> + Send + Sync + Clone
where
    E: Send + Sync + 'static,
    F: Fn(&E) -> K + Send + Sync + Clone,
{
    move |parts: &Parts| parts.extensions.get::<E>().map(&f)
}

/// The connection's peer address, from what the server placed in the
/// request's extensions: a bare `SocketAddr` (what a plain hyper server
/// inserts per connection), axum's `ConnectInfo<SocketAddr>` (feature
/// `axum`; the server is made with
/// `into_make_service_with_connect_info::<SocketAddr>()`), tonic's
/// `TcpConnectInfo` (feature `tonic`: tonic's server inserts it for every
/// call over TCP) or, over tonic's own TLS, its
/// `TlsConnectInfo<TcpConnectInfo>` (feature `tonic-tls`). No peer is [`NoPeer`]: the server's misconfiguration,
/// which a rule answers 500 and reports through `tracing`, never a 400 that
/// blames the client.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::http::rules::{NoPeer, extract};
///
/// let (mut parts, ()) = http::Request::new(()).into_parts();
/// assert_eq!(extract::peer_ip(&parts), Err(NoPeer));
/// parts.extensions.insert("192.0.2.7:443".parse::<SocketAddr>()?);
/// assert_eq!(extract::peer_ip(&parts), Ok("192.0.2.7".parse::<IpAddr>()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn peer_ip(parts: &Parts) -> Result<IpAddr, NoPeer> {
    let extensions = &parts.extensions;
    let bare = || extensions.get::<SocketAddr>().copied();
    #[cfg(feature = "axum")]
    let bare = || {
        bare().or_else(|| {
            let info = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()?;
            Some(info.0)
        })
    };
    #[cfg(feature = "tonic")]
    let bare = || {
        use tonic::transport::server::TcpConnectInfo;
        bare().or_else(|| extensions.get::<TcpConnectInfo>()?.remote_addr())
    };
    #[cfg(feature = "tonic-tls")]
    let bare = || {
        use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
        bare().or_else(|| {
            let tls = extensions.get::<TlsConnectInfo<TcpConnectInfo>>()?;
            tls.get_ref().remote_addr()
        })
    };
    bare().map(|addr| addr.ip()).ok_or(NoPeer)
}

/// The peer's address ([`peer_ip`]) as a key under the default
/// [`PrefixPolicy`]: one budget per IPv4 address and per IPv6 network the
/// policy names, so that a client cannot buy fresh budgets by rotating
/// through the addresses of its own IPv6 prefix. [`peer_addr_with`]
/// chooses the policy. No peer address is [`NoPeer`] (500).
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::http::rules::extract;
///
/// let (mut parts, ()) = http::Request::new(()).into_parts();
/// parts.extensions.insert("[2001:db8::1]:80".parse::<SocketAddr>()?);
/// assert_eq!(extract::peer_addr(&parts).map(|k| k.to_string()), Ok("2001:db8::".into()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn peer_addr(parts: &Parts) -> Result<AddrKey, NoPeer> {
    peer_key(parts, PrefixPolicy::default())
}

/// The peer's address ([`peer_ip`]) as a key under `policy`:
/// [`peer_addr`] with another prefix length (a `/56` for an ISP that hands
/// each subscriber one, say).
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::http::rules::extract;
/// use tollgate::identity::PrefixPolicy;
///
/// let per_subscriber = extract::peer_addr_with(PrefixPolicy::new(32, 56)?);
/// let (mut parts, ()) = http::Request::new(()).into_parts();
/// parts.extensions.insert("[2001:db8:0:ab::1]:80".parse::<SocketAddr>()?);
/// assert_eq!(per_subscriber(&parts).map(|k| k.to_string()), Ok("2001:db8::".into()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn peer_addr_with(
    policy: PrefixPolicy,
) -> impl Fn(&Parts) -> Result<AddrKey, NoPeer> + Send + Sync + Clone {
    move |parts: &Parts| peer_key(parts, policy)
}

fn peer_key(parts: &Parts, policy: PrefixPolicy) -> Result<AddrKey, NoPeer> {
    peer_ip(parts).map(|ip| AddrKey::new(ip, policy))
}

/// The client's address behind trusted proxies: `peer` gives the
/// connection's address ([`peer_ip`] reads every server's; a function of
/// your own reads another connection type), and `resolver` reads its
/// configured header (only when the peer is a trusted proxy). When the
/// header cannot be believed, the key is the resolver's fallback, the
/// nearest trusted hop: coarse, but never an address the client chose. No
/// peer address is [`NoPeer`] (500). The key is the address under the
/// resolver's prefix policy
/// ([`ForwardedResolver::with_prefix_policy`]).
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
/// use tollgate::http::rules::extract;
///
/// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::parse(["127.0.0.1"])?);
/// let client = extract::forwarded(resolver, extract::peer_ip);
///
/// let mut request = http::Request::new(());
/// request.headers_mut().insert("x-forwarded-for", "203.0.113.9".parse()?);
/// request.extensions_mut().insert("127.0.0.1:5000".parse::<SocketAddr>()?);
/// let (parts, ()) = request.into_parts();
/// assert_eq!(client(&parts).map(|k| k.addr()), Ok("203.0.113.9".parse::<IpAddr>()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn forwarded<P>(
    resolver: ForwardedResolver,
    peer: P,
) -> impl Fn(&Parts) -> Result<AddrKey, NoPeer> + Send + Sync + Clone
where
    P: Fn(&Parts) -> Result<IpAddr, NoPeer> + Send + Sync + Clone,
{
    move |parts: &Parts| {
        let peer = peer(parts)?;
        let lines = parts
            .headers
            .get_all(resolver.source().header_name())
            .iter()
            .map(|value| value.as_bytes());
        Ok(match resolver.resolve(peer, lines) {
            Ok(client) => client.key(),
            Err(unbelievable) => unbelievable.fallback().key(),
        })
    }
}

/// The longest header value [`header`] takes as a key, in bytes: longer
/// ones give no key. API keys and tenant ids are far shorter; a bound keeps
/// a client from making every key it sends cost a kilobyte of the table.
///
/// ```
/// use http::{HeaderName, Request};
/// use tollgate::http::rules::extract;
///
/// let api_key = extract::header(HeaderName::from_static("x-api-key"));
/// let long = "k".repeat(extract::MAX_HEADER_KEY_LEN + 1);
/// let (parts, ()) = Request::get("/").header("x-api-key", long).body(()).unwrap().into_parts();
/// assert!(api_key(&parts).is_none());
/// ```
pub const MAX_HEADER_KEY_LEN: usize = 256;

/// The value of header `name` as a key (an API key, a tenant id): only a
/// request with exactly one line of it, holding 1 to
/// [`MAX_HEADER_KEY_LEN`] bytes of visible ASCII, has one. A duplicated
/// header gives no key (two lines, or a list a proxy folded into one:
/// which of them would be charged depends on who reads first, so neither
/// is), nor does an empty, over-long or non-ASCII value; the rule's
/// [`MissingKey`](super::MissingKey) policy then decides (400 by default).
///
/// The key charged is the one the request *claims*: anyone who sends
/// another client's API key spends that client's budget. Charge claimed
/// keys only where that is acceptable (the key is a secret), keep an
/// address rule beside it, and prefer a principal that authentication
/// placed in the extensions ([`extension`]).
///
/// ```
/// use http::HeaderName;
/// use tollgate::http::rules::extract;
///
/// let api_key = extract::header(HeaderName::from_static("x-api-key"));
/// let (parts, ()) = http::Request::get("/").header("x-api-key", "k-7f3a").body(())?.into_parts();
/// assert_eq!(api_key(&parts).as_deref(), Some("k-7f3a"));
/// let (parts, ()) = http::Request::get("/")
///     .header("x-api-key", "k-7f3a")
///     .header("x-api-key", "k-0000")
///     .body(())?
///     .into_parts();
/// assert_eq!(api_key(&parts), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn header(name: HeaderName) -> impl Fn(&Parts) -> Option<String> + Send + Sync + Clone {
    move |parts: &Parts| {
        let mut lines = parts.headers.get_all(&name).iter();
        let value = lines.next()?.as_bytes();
        let one_value = lines.next().is_none() && !value.contains(&b',');
        let plain = (1..=MAX_HEADER_KEY_LEN).contains(&value.len())
            && value.iter().all(|byte| byte.is_ascii_graphic());
        (one_value && plain).then(|| String::from_utf8_lossy(value).into_owned())
    }
}

/// The method and path, for per-operation limits.
///
/// The path is the client's, so its cardinality is too (`/users/1`,
/// `/users/2`, …): prefer a fixed key per route, or axum's matched route
/// template through [`extension_map`] on a route layer.
///
/// ```
/// use http::{HeaderName, Method};
/// use tollgate::http::rules::extract;
///
/// let (parts, ()) = http::Request::post("/login").body(())?.into_parts();
/// assert_eq!(extract::method_and_path(&parts), Some((Method::POST, "/login".to_owned())));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn method_and_path(parts: &Parts) -> Option<(Method, String)> {
    Some((parts.method.clone(), parts.uri.path().to_owned()))
}

/// The length the request declares for its body, as a cost in bytes for
/// [`Rule::try_cost`](super::Rule::try_cost); never 0 for a body that
/// has bytes.
///
/// - One Content-Length (or several lines or list members that all agree,
///   as RFC 9110 allows) of plain digits that fits a `u64`: that length.
///   Anything else (a sign, garbage, an overflow, values that disagree) is
///   [`CostError::InvalidContentLength`], answered 400.
/// - A Transfer-Encoding (a chunked body) declares no length:
///   [`CostError::LengthRequired`], answered 411 before a byte of the body
///   is read; beside a Content-Length it is
///   [`CostError::InvalidContentLength`] (framed two ways).
/// - No Content-Length: inside the layer, the body's own framing decides
///   (an empty body costs 0, a body of known size its size, an HTTP/2
///   stream of unknown size is [`CostError::LengthRequired`]), and a
///   Content-Length it contradicts is [`CostError::InvalidContentLength`].
///   Called on a bare request head, an HTTP/1 request costs 0 (it has no
///   body) and an HTTP/2 or 3 one is [`CostError::LengthRequired`].
///
/// The length is what the client declared: a per-byte limit charges it
/// before the body arrives, and the server (hyper does) must read no more
/// than that.
///
/// ```
/// use tollgate::http::rules::{CostError, extract};
///
/// let (parts, ()) = http::Request::post("/upload").header("content-length", "4096").body(())?.into_parts();
/// assert_eq!(extract::content_length(&parts), Ok(4096));
/// let (parts, ()) = http::Request::post("/upload").header("transfer-encoding", "chunked").body(())?.into_parts();
/// assert_eq!(extract::content_length(&parts), Err(CostError::LengthRequired));
/// let (parts, ()) = http::Request::post("/upload").header("content-length", "4, 5").body(())?.into_parts();
/// assert_eq!(extract::content_length(&parts), Err(CostError::InvalidContentLength));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn content_length(parts: &Parts) -> Result<u64, CostError> {
    length::declared(parts)
}
