//! Ready-made key extractors and cost functions for [`Rule`](super::Rule)s.
//!
//! Extractors read the request head (`http::request::Parts`) only, so they
//! work whatever the body type, and none depends on a web framework: the
//! values a server places in the request extensions (axum's
//! `ConnectInfo<SocketAddr>`, a principal from authentication) are read by
//! type, with a function to pick out the key.

use std::net::{IpAddr, SocketAddr};

use http::Method;
use http::header::CONTENT_LENGTH;
use http::request::Parts;

use crate::identity::{AddrKey, ForwardedResolver};

/// The request extension of type `T`, cloned: an authenticated principal
/// placed there by earlier middleware, say. Never take an identity from a
/// header the client controls.
///
/// ```
/// use tollgate::http::tower::extract;
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

/// The request extension of type `E`, mapped by `f`: how to read axum's
/// `ConnectInfo<SocketAddr>` without this crate depending on axum
/// (`extension_map(|info: &ConnectInfo<SocketAddr>| info.0.ip())`).
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::http::tower::extract;
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

/// The peer's address from a plain `SocketAddr` extension (what a bare
/// hyper server can insert per connection), as an address key.
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::http::tower::extract;
///
/// let (mut parts, ()) = http::Request::new(()).into_parts();
/// parts.extensions.insert("[2001:db8::1]:80".parse::<SocketAddr>()?);
/// assert_eq!(extract::peer_addr(&parts).map(|k| k.to_string()), Some("2001:db8::".into()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn peer_addr(parts: &Parts) -> Option<AddrKey> {
    parts
        .extensions
        .get::<SocketAddr>()
        .map(|addr| AddrKey::from(addr.ip()))
}

/// The client's address behind trusted proxies: `peer` gives the
/// connection's address, and `resolver` reads its configured header (only
/// when the peer is a trusted proxy). When the header cannot be believed,
/// the key is the resolver's fallback, the nearest trusted hop: coarse, but
/// never an address the client chose. No peer address means no key.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
/// use tollgate::http::tower::extract;
///
/// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::parse(["127.0.0.1"])?);
/// let client = extract::forwarded(resolver, extract::extension_map(|a: &SocketAddr| a.ip()));
///
/// let mut request = http::Request::new(());
/// request.headers_mut().insert("x-forwarded-for", "203.0.113.9".parse()?);
/// request.extensions_mut().insert("127.0.0.1:5000".parse::<SocketAddr>()?);
/// let (parts, ()) = request.into_parts();
/// assert_eq!(client(&parts).map(|k| k.addr()), Some("203.0.113.9".parse::<IpAddr>()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn forwarded<P>(
    resolver: ForwardedResolver,
    peer: P,
) -> impl Fn(&Parts) -> Option<AddrKey> + Send + Sync + Clone
where
    P: Fn(&Parts) -> Option<IpAddr> + Send + Sync + Clone,
{
    move |parts: &Parts| {
        let peer = peer(parts)?;
        let lines = parts
            .headers
            .get_all(resolver.source().header_name())
            .iter()
            .map(|value| value.as_bytes());
        Some(match resolver.resolve(peer, lines) {
            Ok(client) => client.key(),
            Err(unbelievable) => unbelievable.fallback().key(),
        })
    }
}

/// The method and path, for per-operation limits.
///
/// The path is the client's, so its cardinality is too (`/users/1`,
/// `/users/2`, …): prefer a fixed key per route, or axum's matched route
/// template through [`extension_map`] on a route layer.
///
/// ```
/// use http::Method;
/// use tollgate::http::tower::extract;
///
/// let (parts, ()) = http::Request::post("/login").body(())?.into_parts();
/// assert_eq!(extract::method_and_path(&parts), Some((Method::POST, "/login".to_owned())));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn method_and_path(parts: &Parts) -> Option<(Method, String)> {
    Some((parts.method.clone(), parts.uri.path().to_owned()))
}

/// The request's Content-Length, as a cost in bytes; 0 when absent or not
/// a number (a chunked body declares no length, so a per-byte limit also
/// needs a cap on body size to be complete).
///
/// ```
/// use tollgate::http::tower::extract;
///
/// let (parts, ()) = http::Request::post("/upload").header("content-length", "4096").body(())?.into_parts();
/// assert_eq!(extract::content_length(&parts), 4096);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn content_length(parts: &Parts) -> u64 {
    // Only an absent header costs nothing. One that is present but is not
    // plain digits (a sign, an overflow, garbage) costs the most there is,
    // so that it is refused rather than let through for free.
    match parts.headers.get(CONTENT_LENGTH) {
        None => 0,
        Some(value) => value
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|text| text.parse().ok())
            .unwrap_or(u64::MAX),
    }
}
