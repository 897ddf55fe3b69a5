//! Typed outcomes for bad identity configuration and refused forwarded
//! chains.

use super::Resolved;

/// Why a prefix policy, an address or a trusted network could not be built.
///
/// The errors carry no copy of the input: address text may come from a
/// request, and the caller still holds it.
///
/// ```
/// use tollgate::identity::{AddrKey, IdentityError, PrefixPolicy, TrustedProxies};
///
/// assert_eq!(PrefixPolicy::new(40, 64), Err(IdentityError::PrefixTooLong { len: 40, max: 32 }));
/// assert_eq!("192.0.2.256".parse::<AddrKey>(), Err(IdentityError::InvalidAddress));
/// assert_eq!(TrustedProxies::parse(["10.0.0.0/33"]), Err(IdentityError::InvalidNetwork));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// A prefix length longer than its family's address: 32 bits for IPv4,
    /// 128 for IPv6.
    #[error("prefix length {len} exceeds the address width of {max} bits")]
    PrefixTooLong {
        /// The requested length.
        len: u8,
        /// The family's width (32 or 128).
        max: u8,
    },
    /// The text is not a plain IP literal (see
    /// [`AddrKey::parse`](super::AddrKey::parse) for what is accepted).
    #[error("not an IP address literal")]
    InvalidAddress,
    /// The text is neither a CIDR network (`10.0.0.0/8`) nor a plain IP
    /// address.
    #[error("not a CIDR network or IP address")]
    InvalidNetwork,
}

/// Why a forwarded header could not name the client, and which address to
/// key on instead.
///
/// Every variant carries a [`fallback`](ForwardedError::fallback): the
/// nearest **trusted** address the walk had reached before it stopped: the
/// connecting peer, or the last trusted proxy named in the header. It is
/// never an address written left of the offending entry, so it is never
/// chosen by the client. Keying on it is safe but coarse: everyone behind
/// that proxy shares the budget. Refusing the request is the other option;
/// the choice is the caller's.
///
/// `position` counts list elements from the right, starting at 1 for the
/// element the connecting peer appended (empty elements count too).
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::identity::{ForwardedError, ForwardedResolver, HeaderSource, TrustedProxies};
///
/// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::parse(["10.0.0.0/8"])?);
/// let peer: IpAddr = "10.0.0.1".parse()?;
/// let err = resolver.resolve(peer, [&b"192.0.2.7, not-an-address, 10.0.0.2"[..]]).unwrap_err();
/// assert!(matches!(err, ForwardedError::Malformed { position: 2, .. }));
/// assert_eq!(err.fallback().addr(), "10.0.0.2".parse::<IpAddr>()?); // the last trusted hop
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ForwardedError {
    /// An element is not valid syntax, holds no `for=` parameter (or holds
    /// two), or its node is not an address this parser accepts (zone ids,
    /// unquoted IPv6 or ports in `Forwarded`, ...).
    #[error("forwarded element {position} (from the right) is malformed")]
    Malformed {
        /// The element's position, from the right, starting at 1.
        position: usize,
        /// The nearest trusted address before the element.
        fallback: Resolved,
    },
    /// An element names the client with an obfuscated identifier
    /// (`for=_hidden`, RFC 7239 section 6.3): a proxy chose not to reveal
    /// the address.
    #[error("forwarded element {position} (from the right) is an obfuscated identifier")]
    Obfuscated {
        /// The element's position, from the right, starting at 1.
        position: usize,
        /// The nearest trusted address before the element.
        fallback: Resolved,
    },
    /// An element names the client as `unknown`: a proxy did not know the
    /// address.
    #[error("forwarded element {position} (from the right) is `unknown`")]
    Unknown {
        /// The element's position, from the right, starting at 1.
        position: usize,
        /// The nearest trusted address before the element.
        fallback: Resolved,
    },
    /// Under [`ChainPolicy::SingleAddress`](super::ChainPolicy::SingleAddress)
    /// the field held more than one element: the trusted proxy did not
    /// overwrite it as its contract says, so none of it can be believed.
    /// The fallback is the peer.
    #[error("the forwarded field holds a chain where a single address was promised")]
    NotSingleAddress {
        /// The connecting peer.
        fallback: Resolved,
    },
    /// The walk passed `limit` elements without finding the client.
    #[error("more than {limit} forwarded elements to walk")]
    TooManyEntries {
        /// The resolver's limit on elements examined.
        limit: usize,
        /// The last trusted address within the limit.
        fallback: Resolved,
    },
}

impl ForwardedError {
    /// The nearest trusted address (and its key) before the walk stopped:
    /// the peer or the last trusted hop, never anything the client wrote.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, Origin, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::parse(["192.0.2.10"])?);
    /// let peer: IpAddr = "192.0.2.10".parse()?;
    /// let err = resolver.resolve(peer, [&b"for=unknown"[..]]).unwrap_err();
    /// let key = err.fallback();
    /// assert_eq!((key.addr(), key.origin()), (peer, Origin::Peer));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fallback(&self) -> Resolved {
        match *self {
            ForwardedError::Malformed { fallback, .. }
            | ForwardedError::Obfuscated { fallback, .. }
            | ForwardedError::Unknown { fallback, .. }
            | ForwardedError::NotSingleAddress { fallback }
            | ForwardedError::TooManyEntries { fallback, .. } => fallback,
        }
    }

    /// The position (from the right, from 1) of the element that stopped
    /// the walk, when one element did.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::parse(["10.0.0.0/8"])?);
    /// let err = resolver.resolve("10.0.0.1".parse::<IpAddr>()?, [&b"unknown"[..]]).unwrap_err();
    /// assert_eq!(err.position(), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn position(&self) -> Option<usize> {
        match *self {
            ForwardedError::Malformed { position, .. }
            | ForwardedError::Obfuscated { position, .. }
            | ForwardedError::Unknown { position, .. } => Some(position),
            ForwardedError::NotSingleAddress { .. } | ForwardedError::TooManyEntries { .. } => None,
        }
    }
}
