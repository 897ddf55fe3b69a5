//! Reading the `RateLimit` and `RateLimit-Policy` fields, for clients.
//!
//! The draft requires malformed fields to be ignored, so nothing here
//! returns an error: a field that is not a valid Structured Field List
//! yields nothing, and a member that is not a valid policy or service limit
//! (an inner list, a name that is not a String or Token, a missing or
//! negative `q` / `r`, a parameter of the wrong type) is skipped while the
//! other members are kept. Lines of one field are combined as RFC 9110
//! combines them (joined by commas) before parsing, so a List split over
//! several lines reads as one.

use std::time::Duration;

use sfv::{BareItem, ListEntry, Parameters, Parser};

use super::QuotaUnit;

/// A `RateLimit` member as received.
///
/// ```
/// use std::time::Duration;
/// use tollgate::http::parse_rate_limit;
///
/// let limits = parse_rate_limit([&br#""burst";r=0;t=2"#[..]]);
/// assert_eq!(limits[0].policy, "burst");
/// assert_eq!(limits[0].reset, Some(Duration::from_secs(2)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedServiceLimit {
    /// The policy's name.
    pub policy: String,
    /// The available quota `r`.
    pub remaining: u64,
    /// The effective window `t`, if sent.
    pub reset: Option<Duration>,
    /// The partition key `pk`, if sent.
    pub partition_key: Option<Vec<u8>>,
}

/// A `RateLimit-Policy` member as received.
///
/// ```
/// use tollgate::http::{QuotaUnit, parse_rate_limit_policy};
///
/// let policies = parse_rate_limit_policy([&br#""upload";q=65535;qu="content-bytes";w=10"#[..]]);
/// assert_eq!(policies[0].quota, 65535);
/// assert_eq!(policies[0].quota_unit(), Some(QuotaUnit::ContentBytes));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedPolicy {
    /// The policy's name.
    pub policy: String,
    /// The quota `q`.
    pub quota: u64,
    /// The quota unit `qu` as sent, if sent (the default is requests).
    pub unit: Option<String>,
    /// The window `w`, if sent.
    pub window: Option<Duration>,
    /// The partition key `pk`, if sent.
    pub partition_key: Option<Vec<u8>>,
}

impl ParsedPolicy {
    /// The quota unit, if it is one this crate knows; requests when `qu` is
    /// absent, `None` for an unregistered unit.
    ///
    /// ```
    /// use tollgate::http::{QuotaUnit, parse_rate_limit_policy};
    ///
    /// let policies = parse_rate_limit_policy([&br#""a";q=1, "b";q=1;qu="widgets""#[..]]);
    /// assert_eq!(policies[0].quota_unit(), Some(QuotaUnit::Requests));
    /// assert_eq!(policies[1].quota_unit(), None);
    /// ```
    pub fn quota_unit(&self) -> Option<QuotaUnit> {
        match &self.unit {
            None => Some(QuotaUnit::Requests),
            Some(unit) => unit.parse().ok(),
        }
    }
}

/// The members of a `RateLimit` field, given the raw value of each of its
/// lines (`headers.get_all("ratelimit")`, as bytes). Never fails: see the
/// module notes for what is skipped.
///
/// ```
/// use tollgate::http::parse_rate_limit;
///
/// let lines: [&[u8]; 2] = [br#""burst";r=0;t=1"#, br#""daily";r=990;t=87;pk=:AAECAwQFBgc=:"#];
/// let limits = parse_rate_limit(lines);
/// assert_eq!(limits.len(), 2);
/// assert_eq!(limits[1].partition_key.as_deref(), Some(&[0, 1, 2, 3, 4, 5, 6, 7][..]));
/// assert!(parse_rate_limit([&b"\"burst\";r=0;t=\xff"[..]]).is_empty());
/// ```
pub fn parse_rate_limit<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<ParsedServiceLimit> {
    members(lines)
        .iter()
        .filter_map(|(policy, params)| {
            Some(ParsedServiceLimit {
                policy: policy.clone(),
                remaining: non_negative(params.get("r")?)?,
                reset: optional(params, "t", |v| non_negative(v).map(Duration::from_secs))?,
                partition_key: optional(params, "pk", bytes)?,
            })
        })
        .collect()
}

/// The members of a `RateLimit-Policy` field, given the raw value of each
/// of its lines. Never fails: see the module notes for what is skipped.
///
/// ```
/// use std::time::Duration;
/// use tollgate::http::parse_rate_limit_policy;
///
/// let policies = parse_rate_limit_policy([&br#""burst";q=100;w=60, "daily";q=1000;w=86400"#[..]]);
/// assert_eq!(policies[1].window, Some(Duration::from_secs(86_400)));
/// assert!(parse_rate_limit_policy([&b"\"x\";w=60"[..]]).is_empty()); // no q
/// ```
pub fn parse_rate_limit_policy<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<ParsedPolicy> {
    members(lines)
        .iter()
        .filter_map(|(policy, params)| {
            Some(ParsedPolicy {
                policy: policy.clone(),
                quota: non_negative(params.get("q")?)?,
                unit: optional(params, "qu", |v| {
                    v.as_string().map(|s| s.as_str().to_owned())
                })?,
                window: optional(params, "w", |v| {
                    non_negative(v).filter(|&w| w > 0).map(Duration::from_secs)
                })?,
                partition_key: optional(params, "pk", bytes)?,
            })
        })
        .collect()
}

/// The wait a refused client can hand to
/// [`Attempt::with_rate_limit_wait`](crate::retry::Attempt::with_rate_limit_wait):
/// the longest effective window among the policies with nothing left
/// (`r=0`), or `None` when no policy is exhausted or none says how long.
///
/// ```
/// use std::time::Duration;
/// use tollgate::http::{parse_rate_limit, rate_limit_wait};
///
/// let limits = parse_rate_limit([&br#""burst";r=0;t=2, "daily";r=0;t=90, "hourly";r=5;t=600"#[..]]);
/// assert_eq!(rate_limit_wait(&limits), Some(Duration::from_secs(90)));
/// assert_eq!(rate_limit_wait(&parse_rate_limit([&br#""a";r=1;t=5"#[..]])), None);
/// ```
pub fn rate_limit_wait(limits: &[ParsedServiceLimit]) -> Option<Duration> {
    limits
        .iter()
        .filter(|limit| limit.remaining == 0)
        .filter_map(|limit| limit.reset)
        .max()
}

/// The (name, parameters) of every Item member whose bare item is a String
/// or a Token; nothing if the combined field does not parse.
fn members<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<(String, Parameters)> {
    let mut combined = Vec::new();
    for line in lines {
        if !combined.is_empty() {
            combined.extend_from_slice(b", ");
        }
        combined.extend_from_slice(line);
    }
    if combined.is_empty() {
        return Vec::new();
    }
    let Ok(list) = Parser::new(&combined).parse_list() else {
        return Vec::new();
    };
    list.into_iter()
        .filter_map(|entry| {
            let ListEntry::Item(item) = entry else {
                return None;
            };
            // The draft says String; earlier drafts used Tokens, and a
            // lenient reader loses nothing by accepting both.
            let name = match &item.bare_item {
                BareItem::String(s) => s.as_str().to_owned(),
                BareItem::Token(t) => t.as_str().to_owned(),
                _ => return None,
            };
            Some((name, item.params))
        })
        .collect()
}

/// `Some(None)` when `key` is absent, `Some(Some(v))` when it is present and
/// valid, `None` (skip the member) when it is present and invalid.
fn optional<T>(
    params: &Parameters,
    key: &str,
    read: impl Fn(&BareItem) -> Option<T>,
) -> Option<Option<T>> {
    match params.get(key) {
        None => Some(None),
        Some(value) => read(value).map(Some),
    }
}

fn non_negative(value: &BareItem) -> Option<u64> {
    u64::try_from(i64::from(value.as_integer()?)).ok()
}

fn bytes(value: &BareItem) -> Option<Vec<u8>> {
    value.as_byte_sequence().map(<[u8]>::to_vec)
}
