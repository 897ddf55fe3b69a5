//! The address key and the prefix policy that shapes it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::IpNet;

use super::{IdentityError, client_addr};

/// The `::ffff:0:0/96` tag that marks an IPv4 key inside the 128-bit
/// encoding. `IpAddr::to_canonical` turns every address in that range into
/// IPv4, and masking a canonical IPv6 address never lands in it (see
/// `AddrKey::new`), so no IPv6 key can carry this tag.
const V4_TAG: u64 = 0xffff_0000_0000;

/// How many leading bits of a client address name its budget.
///
/// [`PrefixPolicy::SUBSCRIBER`] (the default) keys an IPv4 client by its
/// address (`/32`) and an IPv6 client by its `/64`, because one subscriber
/// holds a whole `/64` (often a `/56` or `/48`) and can rotate through its
/// 2^64 addresses at will: keyed one by one, those would be 2^64 fresh
/// budgets and would fill any key table. [`PrefixPolicy::EXACT`] keys every
/// address on its own; a shorter IPv6 length such as `/56` also covers a
/// subscriber hopping between its own subnets. [`docs/identity.md`](crate::guide::identity) weighs the
/// trade-off: the shorter the prefix, the fewer fresh budgets rotation buys,
/// and the more unrelated clients share one.
///
/// The policy applies to the host an address stands for
/// ([`client_addr`](super::client_addr)): an IPv6 spelling of an IPv4 client
/// (mapped, 6to4, NAT64, Teredo, ...) gets the IPv4 length.
///
/// ```
/// use tollgate::identity::{IdentityError, PrefixPolicy};
///
/// let per_subscriber = PrefixPolicy::new(32, 64)?;
/// assert_eq!(per_subscriber, PrefixPolicy::SUBSCRIBER);
/// assert_eq!(PrefixPolicy::default(), PrefixPolicy::SUBSCRIBER);
/// assert_eq!(
///     PrefixPolicy::new(32, 129),
///     Err(IdentityError::PrefixTooLong { len: 129, max: 128 })
/// );
/// # Ok::<(), IdentityError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrefixPolicy {
    v4: u8,
    v6: u8,
}

impl PrefixPolicy {
    /// One key per address: `/32` for IPv4, `/128` for IPv6.
    ///
    /// ```
    /// use tollgate::identity::PrefixPolicy;
    ///
    /// assert_eq!((PrefixPolicy::EXACT.v4_len(), PrefixPolicy::EXACT.v6_len()), (32, 128));
    /// ```
    pub const EXACT: PrefixPolicy = PrefixPolicy { v4: 32, v6: 128 };

    /// One key per IPv4 address and per IPv6 `/64`: the default, and what
    /// every conversion from an address to a key without a policy uses.
    ///
    /// ```
    /// use tollgate::identity::PrefixPolicy;
    ///
    /// let policy = PrefixPolicy::SUBSCRIBER;
    /// assert_eq!((policy.v4_len(), policy.v6_len()), (32, 64));
    /// ```
    pub const SUBSCRIBER: PrefixPolicy = PrefixPolicy { v4: 32, v6: 64 };

    /// Keys IPv4 clients by their first `v4_len` bits and IPv6 clients by
    /// their first `v6_len` bits.
    ///
    /// A length beyond the family's width (32 or 128) is
    /// [`IdentityError::PrefixTooLong`].
    ///
    /// ```
    /// use tollgate::identity::PrefixPolicy;
    ///
    /// assert!(PrefixPolicy::new(24, 56).is_ok());
    /// assert!(PrefixPolicy::new(33, 64).is_err());
    /// ```
    pub const fn new(v4_len: u8, v6_len: u8) -> Result<PrefixPolicy, IdentityError> {
        if v4_len > 32 {
            return Err(IdentityError::PrefixTooLong {
                len: v4_len,
                max: 32,
            });
        }
        if v6_len > 128 {
            return Err(IdentityError::PrefixTooLong {
                len: v6_len,
                max: 128,
            });
        }
        Ok(PrefixPolicy {
            v4: v4_len,
            v6: v6_len,
        })
    }

    /// The prefix length applied to IPv4 clients.
    ///
    /// ```
    /// use tollgate::identity::PrefixPolicy;
    ///
    /// assert_eq!(PrefixPolicy::new(24, 64)?.v4_len(), 24);
    /// # Ok::<(), tollgate::identity::IdentityError>(())
    /// ```
    pub const fn v4_len(self) -> u8 {
        self.v4
    }

    /// The prefix length applied to IPv6 clients.
    ///
    /// ```
    /// use tollgate::identity::PrefixPolicy;
    ///
    /// assert_eq!(PrefixPolicy::new(24, 64)?.v6_len(), 64);
    /// # Ok::<(), tollgate::identity::IdentityError>(())
    /// ```
    pub const fn v6_len(self) -> u8 {
        self.v6
    }

    /// The prefix length this policy applies to `ip`: the length of the
    /// family of the host it stands for ([`client_addr`](super::client_addr)),
    /// so an IPv4-mapped or 6to4 address counts as IPv4.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::PrefixPolicy;
    ///
    /// let policy = PrefixPolicy::new(24, 64)?;
    /// let mapped: IpAddr = "::ffff:192.0.2.1".parse()?;
    /// let six_to_four: IpAddr = "2002:c000:201::1".parse()?;
    /// assert_eq!((policy.len_for(mapped), policy.len_for(six_to_four)), (24, 24));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len_for(self, ip: IpAddr) -> u8 {
        match client_addr(ip) {
            IpAddr::V4(_) => self.v4,
            IpAddr::V6(_) => self.v6,
        }
    }

    /// Whether this policy keys every address on its own.
    ///
    /// ```
    /// use tollgate::identity::PrefixPolicy;
    ///
    /// assert!(PrefixPolicy::EXACT.is_exact());
    /// assert!(!PrefixPolicy::new(32, 64)?.is_exact());
    /// # Ok::<(), tollgate::identity::IdentityError>(())
    /// ```
    pub const fn is_exact(self) -> bool {
        self.v4 == 32 && self.v6 == 128
    }
}

impl Default for PrefixPolicy {
    /// [`PrefixPolicy::SUBSCRIBER`]: IPv4 by address, IPv6 by `/64`.
    fn default() -> PrefixPolicy {
        PrefixPolicy::SUBSCRIBER
    }
}

/// A compact, normalised rate-limit key for a client address.
///
/// Two words of 16 bytes in all, 8-byte aligned, so a keyed limiter's map
/// entry stays small (a `u128` would force 16-byte alignment, an `IpAddr`
/// takes 17 bytes padded to 24). The words hold one 128-bit value:
///
/// - an IPv6 client: its address with the host bits cleared by the
///   [`PrefixPolicy`];
/// - an IPv4 client, however spelt ([`client_addr`](super::client_addr):
///   IPv4-mapped, 6to4, NAT64, Teredo, ...): its masked IPv4 address in the
///   IPv4-mapped space `::ffff:0:0/96`. IPv6 keys can never live there,
///   because every IPv4-mapped input is first turned into its IPv4 address,
///   so the two families never collide.
///
/// So `::ffff:192.0.2.1`, `2002:c000:201::1` and `192.0.2.1` are one key,
/// and so are `2001:0db8:0:0::1` and `2001:db8::1`: equal keys are equal
/// hosts (or networks), whatever their spelling.
///
/// **The key does not record its prefix length.** Every (network, length)
/// pair would not fit in 128 bits next to all exact IPv6 addresses, so the
/// `/64` key of `2001:db8::/64` equals the exact key of `2001:db8::`. Keys
/// built with one policy never collide with each other; keep keys from
/// different policies in different maps, and ask the policy (or
/// [`Resolved::network`](super::Resolved::network)) for the length:
/// [`AddrKey::network`] rebuilds the CIDR network for display.
///
/// `Ord` is the numeric order of the 128-bit value: IPv4 keys sort together,
/// in address order.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::identity::{AddrKey, PrefixPolicy};
///
/// let a = AddrKey::parse("2001:db8:1:2::a", PrefixPolicy::new(32, 64)?)?;
/// let b = AddrKey::parse("2001:db8:1:2:ffff::1", PrefixPolicy::new(32, 64)?)?;
/// assert_eq!(a, b);
/// assert_eq!(a.addr(), "2001:db8:1:2::".parse::<IpAddr>()?);
/// assert_eq!(a.network(PrefixPolicy::new(32, 64)?).to_string(), "2001:db8:1:2::/64");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AddrKey {
    // High word first, so the derived `Ord` is the order of the 128-bit value.
    hi: u64,
    lo: u64,
}

impl AddrKey {
    /// The key of `ip` under `policy`: the host it stands for
    /// ([`client_addr`](super::client_addr)), masked to the policy's prefix
    /// length for that host's family.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::{AddrKey, PrefixPolicy};
    ///
    /// let ip: IpAddr = "198.51.100.77".parse()?;
    /// let key = AddrKey::new(ip, PrefixPolicy::new(24, 64)?);
    /// assert_eq!(key.to_string(), "198.51.100.0");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(ip: IpAddr, policy: PrefixPolicy) -> AddrKey {
        match client_addr(ip) {
            IpAddr::V4(v4) => AddrKey::from_bits(
                u128::from(V4_TAG) | u128::from(mask_v4(v4.to_bits(), policy.v4)),
            ),
            // Masking keeps the top `len` bits. For `len >= 96` those include
            // the whole `::ffff:0:0/96` test, which an address `client_addr`
            // leaves IPv6 fails; for `len < 96` bit 95 (a one in the tag) is cleared. So
            // an IPv6 key never carries the IPv4 tag.
            IpAddr::V6(v6) => AddrKey::from_bits(mask_v6(v6.to_bits(), policy.v6)),
        }
    }

    /// Parses an IP literal and keys it under `policy`.
    ///
    /// Deliberately strict: the text must be exactly what
    /// [`IpAddr::from_str`] accepts (`192.0.2.1`, `2001:db8::1`,
    /// `::ffff:192.0.2.1`). Brackets, ports, zone ids (`fe80::1%eth0`),
    /// surrounding whitespace and IPv4 octets with leading zeros are
    /// [`IdentityError::InvalidAddress`]; forwarded-header syntax belongs to
    /// [`ForwardedResolver`](super::ForwardedResolver), not here.
    ///
    /// ```
    /// use tollgate::identity::{AddrKey, IdentityError, PrefixPolicy};
    ///
    /// let exact = PrefixPolicy::EXACT;
    /// assert_eq!(AddrKey::parse("2001:0db8:0:0::1", exact)?, AddrKey::parse("2001:db8::1", exact)?);
    /// assert_eq!(AddrKey::parse("[2001:db8::1]:443", exact), Err(IdentityError::InvalidAddress));
    /// # Ok::<(), IdentityError>(())
    /// ```
    pub fn parse(text: &str, policy: PrefixPolicy) -> Result<AddrKey, IdentityError> {
        let ip = IpAddr::from_str(text).map_err(|_| IdentityError::InvalidAddress)?;
        Ok(AddrKey::new(ip, policy))
    }

    /// The address the key stands for: the client's host
    /// ([`client_addr`](super::client_addr)) with the host bits cleared (the
    /// network address under an aggregating policy). IPv4 keys give back
    /// IPv4 addresses.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::AddrKey;
    ///
    /// let mapped: IpAddr = "::ffff:203.0.113.9".parse()?;
    /// assert_eq!(AddrKey::from(mapped).addr(), "203.0.113.9".parse::<IpAddr>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn addr(self) -> IpAddr {
        // Only IPv4 keys carry the tag (see `new`), so canonicalising the
        // 128-bit value recovers the family.
        IpAddr::V6(Ipv6Addr::from_bits(self.bits())).to_canonical()
    }

    /// Whether the key is an IPv4 client's (or network's).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::AddrKey;
    ///
    /// assert!(AddrKey::from("::ffff:192.0.2.1".parse::<IpAddr>()?).is_ipv4());
    /// assert!(!AddrKey::from("2001:db8::1".parse::<IpAddr>()?).is_ipv4());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_ipv4(self) -> bool {
        self.addr().is_ipv4()
    }

    /// The key as a CIDR network, given the policy it was built with (the
    /// key itself does not record its length: see the type's docs).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::{AddrKey, PrefixPolicy};
    ///
    /// let policy = PrefixPolicy::new(24, 56)?;
    /// let key = AddrKey::new("2001:db8:aa:bb::1".parse::<IpAddr>()?, policy);
    /// assert_eq!(key.network(policy).to_string(), "2001:db8:aa::/56");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn network(self, policy: PrefixPolicy) -> IpNet {
        let addr = self.addr();
        let len = policy.len_for(addr);
        IpNet::new(addr, len)
            .expect("policy lengths are validated against the family width")
            .trunc()
    }

    /// The 128-bit value of the key (IPv4 keys in `::ffff:0:0/96`).
    fn bits(self) -> u128 {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }

    fn from_bits(bits: u128) -> AddrKey {
        // Truncation is the point: the high and low halves of the value.
        AddrKey {
            hi: (bits >> 64) as u64,
            lo: bits as u64,
        }
    }
}

/// Keeps the top `len` bits of an IPv4 address (`len <= 32`).
fn mask_v4(bits: u32, len: u8) -> u32 {
    // `checked_shl` covers `len == 0`, where the shift would be 32 bits.
    bits & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

/// Keeps the top `len` bits of an IPv6 address (`len <= 128`).
fn mask_v6(bits: u128, len: u8) -> u128 {
    bits & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

impl From<IpAddr> for AddrKey {
    /// The key of `ip` under the default policy
    /// ([`PrefixPolicy::SUBSCRIBER`]: IPv4 by address, IPv6 by `/64`).
    fn from(ip: IpAddr) -> AddrKey {
        AddrKey::new(ip, PrefixPolicy::default())
    }
}

impl From<Ipv4Addr> for AddrKey {
    /// The key of `ip`: the address itself under every default.
    fn from(ip: Ipv4Addr) -> AddrKey {
        AddrKey::from(IpAddr::V4(ip))
    }
}

impl From<Ipv6Addr> for AddrKey {
    /// The key of `ip` under the default policy: its `/64`, or the IPv4
    /// host it stands for (see [`client_addr`](super::client_addr)).
    fn from(ip: Ipv6Addr) -> AddrKey {
        AddrKey::from(IpAddr::V6(ip))
    }
}

impl FromStr for AddrKey {
    type Err = IdentityError;

    /// [`AddrKey::parse`] with the default policy
    /// ([`PrefixPolicy::SUBSCRIBER`]).
    fn from_str(text: &str) -> Result<AddrKey, IdentityError> {
        AddrKey::parse(text, PrefixPolicy::default())
    }
}

impl fmt::Display for AddrKey {
    /// The key's address in its canonical text form (RFC 5952 for IPv6),
    /// without a prefix length: use [`AddrKey::network`] for CIDR.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.addr(), f)
    }
}

impl fmt::Debug for AddrKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AddrKey({})", self.addr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn sixteen_bytes_aligned_to_eight() {
        assert_eq!(size_of::<AddrKey>(), 16);
        assert_eq!(align_of::<AddrKey>(), 8);
    }

    #[test]
    fn ipv4_keys_sit_in_the_mapped_space() {
        let key = AddrKey::from(ip("192.0.2.1"));
        assert_eq!(key.bits(), 0xffff_c000_0201);
        assert_eq!(key.addr(), ip("192.0.2.1"));
    }

    #[test]
    fn masking_an_ipv6_address_never_produces_the_ipv4_tag() {
        // The addresses closest to the tag: one bit off it just below and
        // above the tag's boundary, masked at every length around bit 95.
        let near = [
            "::fffe:0:0",
            "::1:ffff:0:0",
            "::ffff:ffff:0:0",
            "::7fff:0:0",
        ];
        for text in near {
            for len in 0..=128 {
                let key = AddrKey::new(ip(text), PrefixPolicy::new(32, len).unwrap());
                assert!(!key.is_ipv4(), "{text}/{len} decoded as IPv4");
            }
        }
    }

    #[test]
    fn masks_keep_exactly_the_prefix() {
        assert_eq!(mask_v4(u32::MAX, 0), 0);
        assert_eq!(mask_v4(u32::MAX, 1), 0x8000_0000);
        assert_eq!(mask_v4(u32::MAX, 32), u32::MAX);
        assert_eq!(mask_v6(u128::MAX, 0), 0);
        assert_eq!(mask_v6(u128::MAX, 64), u128::MAX << 64);
        assert_eq!(mask_v6(u128::MAX, 128), u128::MAX);
    }

    #[test]
    fn zero_length_prefixes_key_a_whole_family_together() {
        let all = PrefixPolicy::new(0, 0).unwrap();
        let v4 = AddrKey::new(ip("203.0.113.9"), all);
        let v6 = AddrKey::new(ip("2001:db8::1"), all);
        assert_eq!(v4, AddrKey::new(ip("10.0.0.1"), all));
        assert_eq!(v6, AddrKey::new(ip("::1"), all));
        assert_ne!(v4, v6);
        assert_eq!(v4.network(all).to_string(), "0.0.0.0/0");
        assert_eq!(v6.network(all).to_string(), "::/0");
    }
}
