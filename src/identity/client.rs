//! Which host an address stands for: IPv6 spellings of an IPv4 client.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address a client's budget is keyed on: `ip` itself, unless it is an
/// IPv6 address that by definition stands for one IPv4 host, in which case
/// that IPv4 address.
///
/// A client reached through IPv6 *as* an IPv4 host must not get a second
/// budget beside its IPv4 one, nor one budget per IPv6 spelling. The forms
/// recognised, each fixed by its RFC:
///
/// | range | name | the IPv4 host |
/// |---|---|---|
/// | `::ffff:0:0/96` | IPv4-mapped (RFC 4291) | the low 32 bits |
/// | `::ffff:0:0:0/96` | IPv4-translated (RFC 2765) | the low 32 bits |
/// | `::/96` but `::` and `::1` | IPv4-compatible (RFC 4291, deprecated) | the low 32 bits |
/// | `64:ff9b::/96` | NAT64 well-known prefix (RFC 6052) | the low 32 bits |
/// | `2002::/16` | 6to4 (RFC 3056) | bits 16 to 47: the site's whole `/48` is that host's |
/// | `2001::/32` | Teredo (RFC 4380) | the low 32 bits, inverted: the client's public address |
///
/// Everything else, link-local addresses included, is an IPv6 address and
/// stands for itself: an `IpAddr` carries no zone id, so one link-local
/// address is one client whichever interface it arrives on. NAT64 local-use
/// (`64:ff9b:1::/48`) and network-specific prefixes are chosen by the
/// operator, with a length this function cannot know, so they stay IPv6 (see
/// [`docs/identity.md`](crate::guide::identity)).
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::identity::client_addr;
///
/// let host: IpAddr = "192.0.2.1".parse()?;
/// for spelling in ["::ffff:192.0.2.1", "64:ff9b::192.0.2.1", "2002:c000:201:7::9"] {
///     assert_eq!(client_addr(spelling.parse()?), host);
/// }
/// let native: IpAddr = "2001:db8::1".parse()?;
/// assert_eq!(client_addr(native), native);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn client_addr(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => embedded_ipv4(v6).map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// The IPv4 host `v6` stands for, by the table on [`client_addr`].
fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = v6.to_bits();
    // Truncation is the point: the low 32 bits of the address.
    let low = bits as u32;
    let high_96 = bits >> 32;
    let embedded = match (high_96, bits >> 112, bits >> 96) {
        // Mapped, translated, NAT64: a fixed 96-bit prefix.
        (0xffff | 0xffff_0000 | 0x0064_ff9b_0000_0000_0000_0000, _, _) => low,
        // Compatible, but `::` and `::1` are IPv6's own.
        (0, _, _) if low > 1 => low,
        // 6to4: the IPv4 address follows the 16-bit prefix.
        (_, 0x2002, _) => (bits >> 80) as u32,
        // Teredo: the client's public address, stored inverted.
        (_, _, 0x2001_0000) => !low,
        _ => return None,
    };
    Some(Ipv4Addr::from_bits(embedded))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(ip: &str) -> Option<Ipv4Addr> {
        embedded_ipv4(ip.parse().unwrap())
    }

    #[test]
    fn each_form_yields_its_host() {
        let host = Some(Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(v4("::ffff:192.0.2.1"), host);
        assert_eq!(v4("::ffff:0:192.0.2.1"), host);
        assert_eq!(v4("::192.0.2.1"), host);
        assert_eq!(v4("64:ff9b::192.0.2.1"), host);
        assert_eq!(v4("2002:c000:201:ffff:ffff:ffff:ffff:ffff"), host);
        assert_eq!(v4("2001:0:ffff:ffff:ffff:ffff:3fff:fdfe"), host);
        assert_eq!(v4("::2"), Some(Ipv4Addr::new(0, 0, 0, 2)));
    }

    #[test]
    fn the_boundaries_of_each_range_are_ipv6() {
        for ip in [
            "::",
            "::1",
            "::1:0:0:0",
            "::fffe:0:0",
            "::1:ffff:0:0",
            "::fffe:0:0:0",
            "64:ff9b::1:0:0",
            "64:ff9a::c000:201",
            "2001:1::3fff:fdfe",
            "2003::1",
            "2001:db8::1",
            "fe80::1",
        ] {
            assert_eq!(v4(ip), None, "{ip}");
        }
    }
}
