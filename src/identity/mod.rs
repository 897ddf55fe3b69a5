//! Client identity: normalised address keys and forwarded-address resolution.
//!
//! A rate limit keyed by address needs two things this module provides:
//!
//! - [`AddrKey`]: a 16-byte key in which every spelling of one client is one
//!   value. Under the default [`PrefixPolicy`] that is one IPv4 address or
//!   one IPv6 `/64`: every address of `2001:db8:1:2::/64` is
//!   `2001:db8:1:2::`, so rotating through it buys nothing; and
//!   `::ffff:192.0.2.1` or the 6to4 `2002:c000:201::1` is `192.0.2.1`
//!   ([`client_addr`]).
//! - [`ForwardedResolver`]: the client's address behind the reverse proxies
//!   you trust ([`TrustedProxies`]), read from exactly one header
//!   ([`HeaderSource`]) under a [`ChainPolicy`], never from a header the
//!   client could have chosen.
//!
//! An address key is an address-level budget, not a person's or an
//! account's: clients behind one NAT share it, and a client that moves gets
//! a new one. Key per-account limits on the principal your authentication
//! verified, never on a header. [`docs/identity.md`](crate::guide::identity) has the whole story.
//!
//! ```
//! use std::net::IpAddr;
//! use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
//!
//! let resolver = ForwardedResolver::new(
//!     HeaderSource::XForwardedFor,
//!     TrustedProxies::parse(["10.0.0.0/8", "2001:db8:ffff::/48"])?,
//! );
//!
//! let peer: IpAddr = "10.0.0.1".parse()?;
//! let key = match resolver.resolve(peer, [&b"2001:db8:1:2::77"[..]]) {
//!     Ok(client) => client.key(),
//!     // The header could not be believed: key on the nearest trusted hop.
//!     Err(refused) => refused.fallback().key(),
//! };
//! assert_eq!(key.to_string(), "2001:db8:1:2::");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod client;
mod error;
mod forwarded;
mod key;
mod lex;
mod trust;

pub use client::client_addr;
pub use error::{ForwardedError, IdentityError};
pub use forwarded::{ChainPolicy, ForwardedResolver, HeaderSource, Origin, Resolved};
pub use key::{AddrKey, PrefixPolicy};
pub use trust::TrustedProxies;
