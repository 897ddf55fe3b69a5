//! The set of proxies whose forwarded claims are believed.

use std::net::IpAddr;
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net};

use super::IdentityError;

/// The networks of the proxies you operate (or pay to operate) in front of
/// the server: only a connection from one of them, or a hop those proxies
/// vouch for, may name a different client.
///
/// Addresses are compared in canonical form: an IPv4-mapped peer
/// (`::ffff:10.0.0.1`, as a dual-stack socket reports IPv4 clients) matches
/// `10.0.0.0/8`, and a network written in the mapped space
/// (`::ffff:10.0.0.0/104`) is stored as its IPv4 network. Any other IPv6
/// network, even `::/0`, never matches an IPv4 address.
///
/// Host bits in a network are ignored (`10.1.2.3/8` is `10.0.0.0/8`);
/// overlapping networks are merged.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::identity::TrustedProxies;
///
/// let proxies = TrustedProxies::parse(["10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.10"])?;
/// assert!(proxies.contains("::ffff:10.9.8.7".parse::<IpAddr>()?));
/// assert!(proxies.contains("192.0.2.10".parse::<IpAddr>()?));
/// assert!(!proxies.contains("192.0.2.11".parse::<IpAddr>()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// Trusts the given networks.
    ///
    /// ```
    /// use tollgate::identity::TrustedProxies;
    ///
    /// let proxies = TrustedProxies::new(["10.0.0.0/8".parse()?, "10.1.0.0/16".parse()?]);
    /// assert_eq!(proxies.networks(), ["10.0.0.0/8".parse()?]); // merged
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(nets: impl IntoIterator<Item = IpNet>) -> TrustedProxies {
        let canonical: Vec<IpNet> = nets.into_iter().map(canonical_net).collect();
        TrustedProxies {
            nets: IpNet::aggregate(&canonical),
        }
    }

    /// Trusts nobody: every peer is the client, and forwarded headers are
    /// never read.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::TrustedProxies;
    ///
    /// assert!(!TrustedProxies::none().contains("127.0.0.1".parse::<IpAddr>()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn none() -> TrustedProxies {
        TrustedProxies::default()
    }

    /// Parses networks in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`) or
    /// single addresses (`192.0.2.10`, meaning `/32` or `/128`).
    ///
    /// The first entry that is neither is [`IdentityError::InvalidNetwork`].
    ///
    /// ```
    /// use tollgate::identity::{IdentityError, TrustedProxies};
    ///
    /// assert!(TrustedProxies::parse(["10.0.0.0/8", "::1"]).is_ok());
    /// assert_eq!(TrustedProxies::parse(["10.0.0.0/8", "proxy.internal"]), Err(IdentityError::InvalidNetwork));
    /// ```
    pub fn parse<I>(items: I) -> Result<TrustedProxies, IdentityError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let nets = items
            .into_iter()
            .map(|item| parse_net(item.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustedProxies::new(nets))
    }

    /// Whether `ip` (canonicalised) is inside a trusted network.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::identity::TrustedProxies;
    ///
    /// let proxies = TrustedProxies::parse(["::ffff:10.0.0.0/104"])?;
    /// assert!(proxies.contains("10.1.2.3".parse::<IpAddr>()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// The trusted networks, canonicalised and merged.
    ///
    /// ```
    /// use tollgate::identity::TrustedProxies;
    ///
    /// let proxies = TrustedProxies::parse(["::ffff:192.0.2.0/120"])?;
    /// assert_eq!(proxies.networks(), ["192.0.2.0/24".parse()?]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn networks(&self) -> &[IpNet] {
        &self.nets
    }
}

impl FromIterator<IpNet> for TrustedProxies {
    fn from_iter<T: IntoIterator<Item = IpNet>>(iter: T) -> TrustedProxies {
        TrustedProxies::new(iter)
    }
}

/// A CIDR network, or a bare address as its single-address network.
fn parse_net(text: &str) -> Result<IpNet, IdentityError> {
    if text.contains('/') {
        IpNet::from_str(text).map_err(|_| IdentityError::InvalidNetwork)
    } else {
        IpAddr::from_str(text)
            .map(IpNet::from)
            .map_err(|_| IdentityError::InvalidNetwork)
    }
}

/// Host bits cleared, and a network inside `::ffff:0:0/96` turned into the
/// IPv4 network it covers, so it matches canonicalised peers.
fn canonical_net(net: IpNet) -> IpNet {
    let net = net.trunc();
    let IpNet::V6(v6) = net else {
        return net;
    };
    match v6.network().to_ipv4_mapped() {
        Some(v4) if v6.prefix_len() >= 96 => {
            let v4_net = Ipv4Net::new(v4, v6.prefix_len() - 96)
                .expect("a length of at most 128 - 96 = 32 is a valid IPv4 prefix");
            IpNet::V4(v4_net)
        }
        _ => net,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_networks_become_ipv4_and_others_stay() {
        let net = |text: &str| canonical_net(text.parse().unwrap()).to_string();
        assert_eq!(net("::ffff:10.0.0.0/104"), "10.0.0.0/8");
        assert_eq!(net("::ffff:192.0.2.10/128"), "192.0.2.10/32");
        assert_eq!(net("::ffff:0:0/96"), "0.0.0.0/0");
        // Wider than the mapped space: kept as IPv6, matching no IPv4 peer.
        assert_eq!(net("::/0"), "::/0");
        assert_eq!(net("10.1.2.3/8"), "10.0.0.0/8");
    }

    #[test]
    fn ipv6_networks_do_not_match_ipv4_peers() {
        let all_v6 = TrustedProxies::parse(["::/0"]).unwrap();
        assert!(!all_v6.contains("10.0.0.1".parse().unwrap()));
        assert!(!all_v6.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(all_v6.contains("2001:db8::1".parse().unwrap()));
    }
}
