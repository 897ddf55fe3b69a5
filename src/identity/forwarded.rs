//! Who the client is, given the connecting peer and a forwarded header.

use std::net::IpAddr;
use std::num::NonZeroUsize;

use ipnet::IpNet;

use super::lex::{Lines, Node, ReverseList};
use super::{AddrKey, ForwardedError, PrefixPolicy, TrustedProxies};

/// The one header field a [`ForwardedResolver`] reads.
///
/// Exactly one, never both: a proxy that writes one of them usually passes
/// the other through from the client untouched, so a resolver that consulted
/// both would believe whatever the client put in the field the proxy does
/// not manage. Pick the field your proxies write, and configure them to
/// append to it (or overwrite it).
///
/// ```
/// use tollgate::identity::HeaderSource;
///
/// assert_eq!(HeaderSource::Forwarded.header_name(), "forwarded");
/// assert_eq!(HeaderSource::XForwardedFor.header_name(), "x-forwarded-for");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderSource {
    /// RFC 7239 `Forwarded`, its `for=` parameter.
    Forwarded,
    /// The de-facto `X-Forwarded-For` list.
    XForwardedFor,
}

impl HeaderSource {
    /// The field name, lower case, as HTTP/2 and HTTP/3 spell it (field
    /// names are case-insensitive).
    ///
    /// ```
    /// use tollgate::identity::HeaderSource;
    ///
    /// assert!(HeaderSource::XForwardedFor.header_name().eq_ignore_ascii_case("X-Forwarded-For"));
    /// ```
    pub const fn header_name(self) -> &'static str {
        match self {
            HeaderSource::Forwarded => "forwarded",
            HeaderSource::XForwardedFor => "x-forwarded-for",
        }
    }
}

/// How the trusted proxies fill the header, and so how it is read.
///
/// ```
/// use tollgate::identity::ChainPolicy;
///
/// assert_eq!(ChainPolicy::default(), ChainPolicy::Recursive);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ChainPolicy {
    /// Each proxy appends the address it received the request from (what
    /// nginx's `$proxy_add_x_forwarded_for` and RFC 7239 do). The list is
    /// walked from the right, skipping trusted proxies; the first address
    /// that is not trusted is the client: nginx's `real_ip_recursive on`.
    #[default]
    Recursive,
    /// The trusted proxy overwrites the field with exactly one address, the
    /// client it saw. More than one element means the contract was broken,
    /// and the whole field is refused.
    SingleAddress,
}

/// How a [`Resolved`] client address was found.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::identity::{ForwardedResolver, HeaderSource, Origin, TrustedProxies};
///
/// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::parse(["10.0.0.0/8"])?);
/// let via_two = resolver.resolve("10.0.0.1".parse::<IpAddr>()?, [&b"198.51.100.8, 10.0.0.2"[..]])?;
/// assert_eq!(via_two.origin(), Origin::Forwarded { trusted_hops: 1 });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Origin {
    /// The connecting peer itself: it is not trusted, or it sent no
    /// forwarded entry.
    Peer,
    /// An element of the forwarded header, with `trusted_hops` trusted
    /// proxy addresses to its right (0: the element the peer appended).
    Forwarded {
        /// The trusted addresses skipped to reach this one.
        trusted_hops: usize,
    },
}

/// A client address and its rate-limit key.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::identity::{ForwardedResolver, HeaderSource, Origin, PrefixPolicy, TrustedProxies};
///
/// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::none())
///     .with_prefix_policy(PrefixPolicy::new(32, 64)?);
/// let client = resolver.resolve("2001:db8:1:2::99".parse::<IpAddr>()?, [])?;
/// assert_eq!(client.addr(), "2001:db8:1:2::99".parse::<IpAddr>()?);
/// assert_eq!(client.network().to_string(), "2001:db8:1:2::/64");
/// assert_eq!(client.key().to_string(), "2001:db8:1:2::");
/// assert_eq!(client.origin(), Origin::Peer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Resolved {
    addr: IpAddr,
    key: AddrKey,
    prefix_len: u8,
    origin: Origin,
}

impl Resolved {
    fn new(addr: IpAddr, policy: PrefixPolicy, origin: Origin) -> Resolved {
        let addr = addr.to_canonical();
        Resolved {
            addr,
            key: AddrKey::new(addr, policy),
            prefix_len: policy.len_for(addr),
            origin,
        }
    }

    /// The client's address as it arrived, canonical (an IPv4-mapped
    /// address is given as IPv4) and not masked. The [key](Resolved::key)
    /// may stand for the IPv4 host this address embeds (6to4, NAT64,
    /// Teredo: see [`client_addr`](super::client_addr)); logs keep the
    /// address itself.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    /// let client = resolver.resolve("::ffff:192.0.2.1".parse::<IpAddr>()?, [])?;
    /// assert_eq!(client.addr(), "192.0.2.1".parse::<IpAddr>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The rate-limit key: the address under the resolver's prefix policy.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::{AddrKey, ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    /// let peer: IpAddr = "192.0.2.1".parse()?;
    /// assert_eq!(resolver.resolve(peer, [])?.key(), AddrKey::from(peer));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key(&self) -> AddrKey {
        self.key
    }

    /// The key as a CIDR network (`192.0.2.1/32`, `2001:db8:1:2::/64`), for
    /// logs and diagnostics.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    /// let client = resolver.resolve("192.0.2.1".parse::<IpAddr>()?, [])?;
    /// assert_eq!(client.network().to_string(), "192.0.2.1/32");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn network(&self) -> IpNet {
        IpNet::new(self.key.addr(), self.prefix_len)
            .expect("the length came from a validated policy for this family")
    }

    /// How the address was found.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, Origin, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    /// assert_eq!(resolver.resolve("192.0.2.1".parse::<IpAddr>()?, [])?.origin(), Origin::Peer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn origin(&self) -> Origin {
        self.origin
    }
}

/// Finds the client address behind trusted reverse proxies, from the
/// connecting peer and one forwarded header, and keys it.
///
/// The rules, in order ([`docs/identity.md`](crate::guide::identity) has a worked example):
///
/// 1. **The peer is not a trusted proxy**: the peer is the client. The
///    header is not read at all, so a client connecting directly can never
///    choose its key.
/// 2. **The peer is trusted and the field is absent or empty**: the peer.
/// 3. [`ChainPolicy::Recursive`]: the field's elements (all lines of the
///    field, in the order received, as one list) are walked from the
///    right. A trusted address is skipped; the first address that is not
///    trusted is the client. If every element is trusted, the leftmost is.
///    The leftmost element is never taken otherwise: the client writes the
///    start of the list, so "take the first address" lets anyone pick a
///    fresh key per request.
/// 4. Walking, an element that is malformed, `unknown` or an obfuscated
///    identifier stops the walk with a [`ForwardedError`] whose
///    [`fallback`](ForwardedError::fallback) is the nearest trusted address
///    reached (the peer or the last trusted hop). Elements left of the
///    client are never read for meaning: only the client wrote them, and
///    garbage there changes nothing.
/// 5. [`ChainPolicy::SingleAddress`]: the field must hold exactly one
///    element, a valid address, which is the client. A chain is
///    [`ForwardedError::NotSingleAddress`], and a malformed, `unknown` or
///    obfuscated element its own error; every fallback is the peer.
/// 6. No more than [`max_entries`](ForwardedResolver::max_entries) elements
///    are examined (empty ones included); past that,
///    [`ForwardedError::TooManyEntries`]. Each element is read once, from
///    the right, and each line only when the walk reaches it, so the work
///    is linear in the bytes reached and bounded by the limit, whatever the
///    header's length or number of lines.
///
/// Parsing is strict where ambiguity could help an attacker and documented
/// where lenient: see [`resolve`](ForwardedResolver::resolve). No input
/// bytes make it panic.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::identity::{ForwardedResolver, HeaderSource, Origin, TrustedProxies};
///
/// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::parse(["10.0.0.0/8"])?);
/// // The client claimed 1.2.3.4; the edge proxy appended the address it saw.
/// let client = resolver.resolve("10.0.0.1".parse::<IpAddr>()?, [&b"1.2.3.4, 198.51.100.8"[..]])?;
/// assert_eq!(client.addr(), "198.51.100.8".parse::<IpAddr>()?);
/// assert_eq!(client.origin(), Origin::Forwarded { trusted_hops: 0 });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardedResolver {
    proxies: TrustedProxies,
    source: HeaderSource,
    chain: ChainPolicy,
    prefix: PrefixPolicy,
    max_entries: NonZeroUsize,
}

impl ForwardedResolver {
    /// The default limit on elements examined: far more trusted hops than
    /// any real proxy chain, far fewer than a hostile header can hold.
    ///
    /// ```
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    /// assert_eq!(resolver.max_entries(), ForwardedResolver::DEFAULT_MAX_ENTRIES);
    /// ```
    pub const DEFAULT_MAX_ENTRIES: NonZeroUsize = NonZeroUsize::new(32).unwrap();

    /// Reads `source` when the peer is in `proxies`, walking
    /// [`ChainPolicy::Recursive`], keying with the default
    /// [`PrefixPolicy::SUBSCRIBER`] (IPv4 by address, IPv6 by `/64`), and
    /// examining at most [`DEFAULT_MAX_ENTRIES`](Self::DEFAULT_MAX_ENTRIES)
    /// elements.
    ///
    /// ```
    /// use tollgate::identity::{ChainPolicy, ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::parse(["192.0.2.10"])?);
    /// assert_eq!(resolver.chain_policy(), ChainPolicy::Recursive);
    /// # Ok::<(), tollgate::identity::IdentityError>(())
    /// ```
    pub fn new(source: HeaderSource, proxies: TrustedProxies) -> ForwardedResolver {
        ForwardedResolver {
            proxies,
            source,
            chain: ChainPolicy::Recursive,
            prefix: PrefixPolicy::default(),
            max_entries: Self::DEFAULT_MAX_ENTRIES,
        }
    }

    /// The same resolver, reading the header as `chain` says.
    ///
    /// ```
    /// use tollgate::identity::{ChainPolicy, ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::none())
    ///     .with_chain_policy(ChainPolicy::SingleAddress);
    /// assert_eq!(resolver.chain_policy(), ChainPolicy::SingleAddress);
    /// ```
    pub fn with_chain_policy(mut self, chain: ChainPolicy) -> ForwardedResolver {
        self.chain = chain;
        self
    }

    /// The same resolver, keying clients under `prefix`.
    ///
    /// ```
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, PrefixPolicy, TrustedProxies};
    ///
    /// let policy = PrefixPolicy::new(32, 56)?;
    /// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::none())
    ///     .with_prefix_policy(policy);
    /// assert_eq!(resolver.prefix_policy(), policy);
    /// # Ok::<(), tollgate::identity::IdentityError>(())
    /// ```
    pub fn with_prefix_policy(mut self, prefix: PrefixPolicy) -> ForwardedResolver {
        self.prefix = prefix;
        self
    }

    /// The same resolver, examining at most `limit` elements per request.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let limit = NonZeroUsize::new(4).unwrap();
    /// let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::none())
    ///     .with_max_entries(limit);
    /// assert_eq!(resolver.max_entries(), limit);
    /// ```
    pub fn with_max_entries(mut self, limit: NonZeroUsize) -> ForwardedResolver {
        self.max_entries = limit;
        self
    }

    /// The header field this resolver reads.
    ///
    /// ```
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    /// assert_eq!(resolver.source().header_name(), "forwarded");
    /// ```
    pub fn source(&self) -> HeaderSource {
        self.source
    }

    /// How the header is read.
    ///
    /// ```
    /// use tollgate::identity::{ChainPolicy, ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    /// assert_eq!(resolver.chain_policy(), ChainPolicy::Recursive);
    /// ```
    pub fn chain_policy(&self) -> ChainPolicy {
        self.chain
    }

    /// The prefix policy of the keys produced.
    ///
    /// ```
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, PrefixPolicy, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    /// assert_eq!(resolver.prefix_policy(), PrefixPolicy::SUBSCRIBER);
    /// ```
    pub fn prefix_policy(&self) -> PrefixPolicy {
        self.prefix
    }

    /// The most elements examined per request.
    ///
    /// ```
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    /// assert_eq!(resolver.max_entries().get(), 32);
    /// ```
    pub fn max_entries(&self) -> NonZeroUsize {
        self.max_entries
    }

    /// The trusted proxies.
    ///
    /// ```
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let proxies = TrustedProxies::parse(["10.0.0.0/8"])?;
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, proxies.clone());
    /// assert_eq!(resolver.proxies(), &proxies);
    /// # Ok::<(), tollgate::identity::IdentityError>(())
    /// ```
    pub fn proxies(&self) -> &TrustedProxies {
        &self.proxies
    }

    /// The client behind `peer` (the address of the connection), given the
    /// raw value of each line of the chosen header field, in the order
    /// received. Pass no lines when the field is absent.
    ///
    /// The lines are read from the back, one at a time, as the walk
    /// reaches them (an array, a slice's iterator and
    /// `HeaderMap::get_all(..).iter()` all can be): lines left of where the
    /// walk stops are never touched, however many the client sent.
    ///
    /// The rules are on the [type](ForwardedResolver). Syntax accepted:
    ///
    /// - `X-Forwarded-For`: comma-separated entries with optional spaces or
    ///   tabs; an entry is `IPv4`, `IPv4:port`, `IPv6`, `[IPv6]`,
    ///   `[IPv6]:port` or `unknown`. Ports are 1 to 5 digits, at most 65535.
    /// - `Forwarded`: RFC 7239 elements separated by commas, pairs by
    ///   semicolons (optional whitespace is accepted around both, none around
    ///   `=`), case-insensitive names, token or quoted-string values with
    ///   quoted-pair escapes. The element must hold exactly one `for=`,
    ///   whose node is `IPv4`, `"IPv4:port"`, `"[IPv6]"`, `"[IPv6]:port"`,
    ///   `unknown` or `_obfuscated` (ports may be obfuscated too). As the RFC
    ///   requires, a port or an IPv6 address must be quoted: an unquoted one
    ///   is malformed rather than guessed at.
    /// - Both: IPv4 as std parses it (dotted quad, no leading zeros); IPv6
    ///   without a zone id (`fe80::1%eth0` is malformed); bytes that are not
    ///   UTF-8 are malformed, never a panic.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
    ///
    /// let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::parse(["192.0.2.0/24"])?);
    /// let lines: [&[u8]; 2] = [br#"for="[2001:db8:cafe::17]:4711""#, b"for=192.0.2.43;proto=https"];
    /// let client = resolver.resolve("192.0.2.10".parse::<IpAddr>()?, lines)?;
    /// assert_eq!(client.addr(), "2001:db8:cafe::17".parse::<IpAddr>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve<'h, L>(&self, peer: IpAddr, header_values: L) -> Result<Resolved, ForwardedError>
    where
        L: IntoIterator<Item = &'h [u8]>,
        L::IntoIter: DoubleEndedIterator,
    {
        let peer = self.resolved(peer, Origin::Peer);
        if !self.proxies.contains(peer.addr) {
            return Ok(peer);
        }
        let list = ReverseList::new(self.source, header_values.into_iter());
        let limited = Limited {
            list,
            limit: self.max_entries.get(),
            seen: 0,
        };
        match self.chain {
            ChainPolicy::Recursive => self.walk(peer, limited),
            ChainPolicy::SingleAddress => self.single(peer, limited),
        }
    }

    /// Rule 3 and 4: right to left, past trusted addresses.
    fn walk<'h>(
        &self,
        peer: Resolved,
        mut list: Limited<'h, impl Lines<'h>>,
    ) -> Result<Resolved, ForwardedError> {
        let mut nearest = peer;
        let mut trusted_hops = 0;
        while let Some(node) = list.next_node(nearest)? {
            let ip = match node {
                Node::Empty => continue,
                Node::Addr(ip) => ip,
                other => return Err(stop(other, list.seen, nearest)),
            };
            let found = self.resolved(ip, Origin::Forwarded { trusted_hops });
            if !self.proxies.contains(found.addr) {
                return Ok(found);
            }
            nearest = found;
            trusted_hops += 1;
        }
        // Every element was trusted (the leftmost is the client) or there
        // was none (the peer is).
        Ok(nearest)
    }

    /// Rule 5: one element, or none at all.
    fn single<'h>(
        &self,
        peer: Resolved,
        mut list: Limited<'h, impl Lines<'h>>,
    ) -> Result<Resolved, ForwardedError> {
        let mut first: Option<(Node, usize)> = None;
        while let Some(node) = list.next_node(peer)? {
            match (node, first) {
                (Node::Empty, _) => {}
                (Node::Malformed, None) => return Err(stop(node, list.seen, peer)),
                (_, None) => first = Some((node, list.seen)),
                (_, Some(_)) => return Err(ForwardedError::NotSingleAddress { fallback: peer }),
            }
        }
        match first {
            None => Ok(peer),
            Some((Node::Addr(ip), _)) => {
                Ok(self.resolved(ip, Origin::Forwarded { trusted_hops: 0 }))
            }
            Some((node, position)) => Err(stop(node, position, peer)),
        }
    }

    fn resolved(&self, ip: IpAddr, origin: Origin) -> Resolved {
        Resolved::new(ip, self.prefix, origin)
    }
}

/// The error for an element that is not an address (`node` is never `Addr`
/// or `Empty` here).
fn stop(node: Node, position: usize, fallback: Resolved) -> ForwardedError {
    match node {
        Node::Unknown => ForwardedError::Unknown { position, fallback },
        Node::Obfuscated => ForwardedError::Obfuscated { position, fallback },
        Node::Empty | Node::Addr(_) | Node::Malformed => {
            ForwardedError::Malformed { position, fallback }
        }
    }
}

/// The reversed list, cut off after `limit` elements.
struct Limited<'h, L> {
    list: ReverseList<'h, L>,
    limit: usize,
    /// Elements produced so far: the position of the last one.
    seen: usize,
}

impl<'h, L: Lines<'h>> Limited<'h, L> {
    /// The next element, or `TooManyEntries` with `fallback` if the limit
    /// is reached and another element exists.
    fn next_node(&mut self, fallback: Resolved) -> Result<Option<Node>, ForwardedError> {
        let Some(node) = self.list.next() else {
            return Ok(None);
        };
        if self.seen == self.limit {
            return Err(ForwardedError::TooManyEntries {
                limit: self.limit,
                fallback,
            });
        }
        self.seen += 1;
        Ok(Some(node))
    }
}
