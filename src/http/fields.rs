//! Serialising the `RateLimit-Policy` and `RateLimit` fields: Structured
//! Field Lists (RFC 9651) written straight into a header value's bytes.
//!
//! Written here rather than through `sfv`'s serialiser (which the parser
//! side keeps using): these lists hold only Strings checked to be printable
//! ASCII, Integers, Byte Sequences and constant keys, and `sfv` serialises
//! through a `String` that grows member by member, its integers through
//! `core::fmt`, before the text is copied into a header value. On an
//! admitted request that advertises its limits this measured some 16 000
//! instructions and 14 allocations for the two fields; the unit tests hold
//! the output to `sfv`'s serialiser, byte for byte, and parse it back.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderName, HeaderValue};
use smallvec::SmallVec;

use super::seconds::SF_INTEGER_MAX;
use super::{PartitionKey, PolicyName, QuotaUnit, RateLimitPolicy};
#[cfg(feature = "rules")]
use crate::advertised::Shape;

/// The field name of the policies: `ratelimit-policy`.
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// The field name of the live service limits: `ratelimit`.
pub const RATELIMIT: &str = "ratelimit";

/// The field names as header names, built at compile time: a `&str` name
/// is parsed again on every insert.
pub(crate) const RATELIMIT_POLICY_NAME: HeaderName = HeaderName::from_static(RATELIMIT_POLICY);
pub(crate) const RATELIMIT_NAME: HeaderName = HeaderName::from_static(RATELIMIT);

/// One member of the `RateLimit` field: what is left of a policy's quota
/// for this client now.
///
/// For a token bucket, `r` is the whole tokens available now and `t` the
/// whole seconds (rounded up) until the next token arrives: within `t` the
/// client can spend no more than `r`, which is the draft's "effective
/// window". [`docs/http.md`](crate::guide::http) has the mapping.
///
/// ```
/// use tollgate::http::{PolicyName, ServiceLimit};
///
/// let limit = ServiceLimit::new(PolicyName::new("burst")?, 0).with_reset_seconds(3);
/// assert_eq!((limit.remaining(), limit.reset_seconds()), (0, Some(3)));
/// # Ok::<(), tollgate::http::HttpError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceLimit {
    name: PolicyName,
    remaining: u64,
    reset: Option<u64>,
    partition_key: Option<PartitionKey>,
}

impl ServiceLimit {
    /// `remaining` units left under the policy `name`, with no `t`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("daily")?, 7).reset_seconds(), None);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn new(name: PolicyName, remaining: u64) -> ServiceLimit {
        ServiceLimit {
            name,
            remaining,
            reset: None,
            partition_key: None,
        }
    }

    /// The same limit with an effective window `t` of `seconds`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// let limit = ServiceLimit::new(PolicyName::new("daily")?, 7).with_reset_seconds(60);
    /// assert_eq!(limit.reset_seconds(), Some(60));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_reset_seconds(mut self, seconds: u64) -> ServiceLimit {
        self.reset = Some(seconds);
        self
    }

    /// The same limit tagged with a partition key.
    ///
    /// ```
    /// use tollgate::http::{PartitionKeys, PolicyName, ServiceLimit};
    ///
    /// let name = PolicyName::new("per-address")?;
    /// let pk = PartitionKeys::random().key(&name, "198.51.100.20");
    /// let limit = ServiceLimit::new(name, 3).with_partition_key(pk);
    /// assert_eq!(limit.partition_key(), Some(pk));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_partition_key(mut self, key: PartitionKey) -> ServiceLimit {
        self.partition_key = Some(key);
        self
    }

    /// The policy's name.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("g")?, 1).name().as_str(), "g");
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn name(&self) -> &PolicyName {
        &self.name
    }

    /// The available quota `r`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("g")?, 4).remaining(), 4);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The effective window `t`, in seconds, if set.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("g")?, 4).reset_seconds(), None);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn reset_seconds(&self) -> Option<u64> {
        self.reset
    }

    /// The partition key, if set.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("g")?, 4).partition_key(), None);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn partition_key(&self) -> Option<PartitionKey> {
        self.partition_key
    }
}

/// The `RateLimit-Policy` field value for `policies`, or `None` if there
/// are none (an empty List is not sent at all). Names are Strings; `qu` is
/// omitted for the default unit, requests. Integers above 10^15 - 1, the
/// largest a Structured Field carries, are capped there.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate::http::{PolicyName, RateLimitPolicy, rate_limit_policy_value};
///
/// let burst = RateLimitPolicy::from_quota(PolicyName::new("burst")?, &Quota::per_second(10)?);
/// let daily = RateLimitPolicy::from_quota(
///     PolicyName::new("daily")?,
///     &Quota::new(1000, 1000, Duration::from_secs(86_400))?,
/// );
/// let value = rate_limit_policy_value(&[burst, daily]).unwrap();
/// assert_eq!(value, r#""burst";q=10;w=1, "daily";q=1000;w=86400"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn rate_limit_policy_value(policies: &[RateLimitPolicy]) -> Option<HeaderValue> {
    let mut list = ListWriter::default();
    for policy in policies {
        list.member();
        list.policy(policy);
        list.partition_key(policy.partition_key());
    }
    list.finish()
}

/// The `RateLimit` field value for `limits`, or `None` if there are none.
///
/// ```
/// use tollgate::http::{PolicyName, ServiceLimit, rate_limit_value};
///
/// let burst = ServiceLimit::new(PolicyName::new("burst")?, 0).with_reset_seconds(1);
/// let daily = ServiceLimit::new(PolicyName::new("daily")?, 990).with_reset_seconds(87);
/// assert_eq!(rate_limit_value(&[burst, daily]).unwrap(), r#""burst";r=0;t=1, "daily";r=990;t=87"#);
/// # Ok::<(), tollgate::http::HttpError>(())
/// ```
pub fn rate_limit_value(limits: &[ServiceLimit]) -> Option<HeaderValue> {
    let mut list = ListWriter::default();
    for limit in limits {
        list.member();
        list.string(limit.name().as_str());
        list.live(limit.remaining(), limit.reset_seconds());
        list.partition_key(limit.partition_key());
    }
    list.finish()
}

/// One policy's parts of both fields, serialised once (a layer's rule's,
/// when the layer is built): its `RateLimit-Policy` member but for `pk`,
/// which differs per request, and its name as the `RateLimit` member's
/// item. Only the tower layer holds policies long enough to keep them.
#[cfg(feature = "rules")]
#[derive(Clone, Debug)]
pub(crate) struct PolicyText {
    member: Box<[u8]>,
    name: Box<[u8]>,
    /// The `RateLimit-Policy` field of this policy alone, untagged.
    alone: Option<HeaderValue>,
    /// The limit's shape this text says, if the policy follows its limit
    /// (see `Rule::followed_shape`): the text stands while the limit keeps
    /// it.
    pub(crate) shape: Option<Shape>,
}

#[cfg(feature = "rules")]
impl PolicyText {
    /// `policy`, serialised; `shape` the limit's shape it follows, if any.
    pub(crate) fn new(policy: &RateLimitPolicy, shape: Option<Shape>) -> PolicyText {
        let mut member = ListWriter::default();
        member.policy(policy);
        let mut name = ListWriter::default();
        name.string(policy.name().as_str());
        let mut alone = ListWriter::default();
        alone.policy_text_of(&member.bytes, None);
        PolicyText {
            shape,
            alone: alone.finish(),
            member: member.bytes.into_vec().into_boxed_slice(),
            name: name.bytes.into_vec().into_boxed_slice(),
        }
    }

    /// The `RateLimit-Policy` field of this policy alone, with no partition
    /// key: a clone shares the bytes built with the layer.
    pub(crate) fn alone(&self) -> Option<&HeaderValue> {
        self.alone.as_ref()
    }
}

/// A Structured Field List being written: members separated by `, `, each
/// a bare item and its parameters. Only what these fields hold can be
/// written, so the result is always a valid List and a valid header value.
/// The bytes stay on the stack for a few members.
#[derive(Default)]
pub(crate) struct ListWriter {
    bytes: SmallVec<[u8; 256]>,
    members: usize,
}

impl ListWriter {
    /// Starts the next member.
    pub(crate) fn member(&mut self) {
        if self.members > 0 {
            self.bytes.extend_from_slice(b", ");
        }
        self.members += 1;
    }

    /// A policy's `RateLimit-Policy` member, but for its partition key.
    fn policy(&mut self, policy: &RateLimitPolicy) {
        self.policy_as(policy, policy.quota(), policy.window_seconds());
    }

    /// `policy`'s member with `quota` and `window` in place of its own.
    fn policy_as(&mut self, policy: &RateLimitPolicy, quota: u64, window: Option<u64>) {
        self.string(policy.name().as_str());
        self.integer("q", quota);
        if policy.unit() != QuotaUnit::Requests {
            self.key("qu");
            self.string(policy.unit().as_str());
        }
        if let Some(window) = window {
            self.integer("w", window);
        }
    }

    /// A member of the `RateLimit-Policy` field for `text`'s policy as its
    /// limit is shaped now: the text built with the layer while the limit
    /// keeps the shape it had then, else the policy written anew with the
    /// limit's quota and window (a keyed limiter's quota changed since).
    #[cfg(feature = "rules")]
    pub(crate) fn policy_now(
        &mut self,
        text: &PolicyText,
        policy: &RateLimitPolicy,
        now: Option<Shape>,
        pk: Option<PartitionKey>,
    ) {
        match now.filter(|&now| Some(now) != text.shape) {
            None => self.policy_text_of(&text.member, pk),
            Some(now) => {
                self.member();
                self.policy_as(policy, now.quota, Some(now.window_seconds));
                self.partition_key(pk);
            }
        }
    }

    #[cfg(feature = "rules")]
    fn policy_text_of(&mut self, member: &[u8], pk: Option<PartitionKey>) {
        self.member();
        self.bytes.extend_from_slice(member);
        self.partition_key(pk);
    }

    /// A member of the `RateLimit` field: a policy's name, what is left of
    /// its quota and its effective window.
    #[cfg(feature = "rules")]
    pub(crate) fn limit_text(
        &mut self,
        text: &PolicyText,
        remaining: u64,
        reset: Option<u64>,
        pk: Option<PartitionKey>,
    ) {
        self.member();
        self.bytes.extend_from_slice(&text.name);
        self.live(remaining, reset);
        self.partition_key(pk);
    }

    fn live(&mut self, remaining: u64, reset: Option<u64>) {
        self.integer("r", remaining);
        if let Some(reset) = reset {
            self.integer("t", reset);
        }
    }

    fn partition_key(&mut self, pk: Option<PartitionKey>) {
        if let Some(pk) = pk {
            self.key("pk");
            self.byte_sequence(pk.as_bytes());
        }
    }

    /// `;key=`: the keys written are constant lowercase letters, valid
    /// Structured Field keys.
    fn key(&mut self, key: &str) {
        self.bytes.push(b';');
        self.bytes.extend_from_slice(key.as_bytes());
        self.bytes.push(b'=');
    }

    /// An sf-string. [`PolicyName`] and the units admit only printable
    /// ASCII, all of which an sf-string carries, `"` and `\` escaped.
    fn string(&mut self, text: &str) {
        self.bytes.push(b'"');
        for byte in text.bytes() {
            if byte == b'"' || byte == b'\\' {
                self.bytes.push(b'\\');
            }
            self.bytes.push(byte);
        }
        self.bytes.push(b'"');
    }

    /// `;key=` and an sf-integer, capped at the largest one (10^15 - 1).
    fn integer(&mut self, key: &str, value: u64) {
        self.key(key);
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(value.min(SF_INTEGER_MAX));
        self.bytes.extend_from_slice(digits.as_bytes());
    }

    /// An sf-binary: base64 with padding between colons.
    fn byte_sequence(&mut self, bytes: &[u8]) {
        self.bytes.push(b':');
        let start = self.bytes.len();
        self.bytes.resize(start + bytes.len().div_ceil(3) * 4, 0);
        // Sized exactly above, so the encoding always fits.
        let written = STANDARD
            .encode_slice(bytes, &mut self.bytes[start..])
            .unwrap_or(0);
        self.bytes.truncate(start + written);
        self.bytes.push(b':');
    }

    /// The field value, or `None` for an empty List (which is not sent).
    pub(crate) fn finish(&self) -> Option<HeaderValue> {
        if self.members == 0 {
            return None;
        }
        // Only visible ASCII and spaces were written: always a valid value.
        HeaderValue::from_bytes(&self.bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use proptest::prelude::*;
    use sfv::{Integer, KeyRef, ListSerializer, Parser, StringRef};

    use super::*;

    /// The reference: what `sfv`'s own serialiser writes for `policies`.
    fn sfv_policies(policies: &[RateLimitPolicy]) -> String {
        let mut list = ListSerializer::new();
        for policy in policies {
            let mut params = list
                .bare_item(StringRef::from_str(policy.name().as_str()).unwrap())
                .parameter(KeyRef::constant("q"), integer(policy.quota()));
            if policy.unit() != QuotaUnit::Requests {
                params = params.parameter(
                    KeyRef::constant("qu"),
                    StringRef::from_str(policy.unit().as_str()).unwrap(),
                );
            }
            if let Some(window) = policy.window_seconds() {
                params = params.parameter(KeyRef::constant("w"), integer(window));
            }
            if let Some(pk) = policy.partition_key() {
                params = params.parameter(KeyRef::constant("pk"), &pk.as_bytes()[..]);
            }
            params.finish();
        }
        list.finish().unwrap()
    }

    /// The reference for `limits`.
    fn sfv_limits(limits: &[ServiceLimit]) -> String {
        let mut list = ListSerializer::new();
        for limit in limits {
            let mut params = list
                .bare_item(StringRef::from_str(limit.name().as_str()).unwrap())
                .parameter(KeyRef::constant("r"), integer(limit.remaining()));
            if let Some(reset) = limit.reset_seconds() {
                params = params.parameter(KeyRef::constant("t"), integer(reset));
            }
            if let Some(pk) = limit.partition_key() {
                params = params.parameter(KeyRef::constant("pk"), &pk.as_bytes()[..]);
            }
            params.finish();
        }
        list.finish().unwrap()
    }

    fn integer(value: u64) -> Integer {
        Integer::try_from(i64::try_from(value.min(SF_INTEGER_MAX)).unwrap()).unwrap()
    }

    /// Any name a `PolicyName` admits: printable ASCII, quotes and
    /// backslashes included.
    fn name() -> impl Strategy<Value = PolicyName> {
        "[ -~]{1,24}".prop_map(|name| PolicyName::new(name).unwrap())
    }

    /// Integers across the whole range, the capped ones included.
    fn number() -> impl Strategy<Value = u64> {
        prop_oneof![
            0..1000u64,
            any::<u64>(),
            Just(SF_INTEGER_MAX),
            Just(u64::MAX)
        ]
    }

    fn unit() -> impl Strategy<Value = QuotaUnit> {
        prop_oneof![
            Just(QuotaUnit::Requests),
            Just(QuotaUnit::ContentBytes),
            Just(QuotaUnit::ConcurrentRequests),
        ]
    }

    fn pk() -> impl Strategy<Value = Option<PartitionKey>> {
        proptest::option::of(any::<u64>().prop_map(|seed| {
            crate::http::PartitionKeys::with_secret([7; 16])
                .key(&PolicyName::new("k").unwrap(), &seed)
        }))
    }

    fn policy() -> impl Strategy<Value = RateLimitPolicy> {
        (
            name(),
            number(),
            proptest::option::of(1..=u64::MAX),
            unit(),
            pk(),
        )
            .prop_map(|(name, quota, window, unit, pk)| {
                let mut policy = RateLimitPolicy::new(name, quota).with_unit(unit);
                if let Some(window) = window.and_then(NonZeroU64::new) {
                    policy = policy.with_window(window);
                }
                if let Some(pk) = pk {
                    policy = policy.with_partition_key(pk);
                }
                policy
            })
    }

    fn limit() -> impl Strategy<Value = ServiceLimit> {
        (name(), number(), proptest::option::of(number()), pk()).prop_map(
            |(name, remaining, reset, pk)| {
                let mut limit = ServiceLimit::new(name, remaining);
                if let Some(reset) = reset {
                    limit = limit.with_reset_seconds(reset);
                }
                if let Some(pk) = pk {
                    limit = limit.with_partition_key(pk);
                }
                limit
            },
        )
    }

    proptest! {
        /// Both fields are what `sfv` itself serialises, byte for byte, and
        /// parse back as Lists of as many members.
        #[test]
        fn the_fields_are_what_sfv_writes(
            policies in proptest::collection::vec(policy(), 1..5),
            limits in proptest::collection::vec(limit(), 1..5),
        ) {
            let written = rate_limit_policy_value(&policies).unwrap();
            prop_assert_eq!(written.to_str().unwrap(), sfv_policies(&policies));
            let parsed = Parser::new(written.to_str().unwrap()).parse_list().unwrap();
            prop_assert_eq!(parsed.len(), policies.len());
            let written = rate_limit_value(&limits).unwrap();
            prop_assert_eq!(written.to_str().unwrap(), sfv_limits(&limits));
            let parsed = Parser::new(written.to_str().unwrap()).parse_list().unwrap();
            prop_assert_eq!(parsed.len(), limits.len());
        }

        /// The text serialised once per policy, tagged per request, makes
        /// the same fields as the policies and limits built per request,
        /// its limit shaped as when the text was built or shaped anew (a
        /// quota changed since).
        #[cfg(feature = "rules")]
        #[test]
        fn the_serialised_text_makes_the_same_fields(
            members in proptest::collection::vec(
                (policy(), pk(), number(), proptest::option::of(number()), proptest::option::of((number(), 1..=u64::MAX))),
                1..5,
            ),
        ) {
            let mut policies = ListWriter::default();
            let mut limits = ListWriter::default();
            let mut built_policies = Vec::new();
            let mut built_limits = Vec::new();
            for (policy, pk, remaining, reset, now) in &members {
                let text = PolicyText::new(policy, policy.shape());
                let now = now.map(|(quota, window_seconds)| Shape { quota, window_seconds });
                policies.policy_now(&text, policy, now, *pk);
                limits.limit_text(&text, *remaining, *reset, *pk);
                let policy = match now {
                    Some(now) => policy.clone().with_shape(now),
                    None => policy.clone(),
                };
                let untagged = RateLimitPolicy::new(policy.name().clone(), policy.quota())
                    .with_unit(policy.unit());
                let mut untagged = match policy.window_seconds().and_then(NonZeroU64::new) {
                    Some(window) => untagged.with_window(window),
                    None => untagged,
                };
                let mut limit = ServiceLimit::new(policy.name().clone(), *remaining);
                if let Some(reset) = reset {
                    limit = limit.with_reset_seconds(*reset);
                }
                if let Some(pk) = pk {
                    untagged = untagged.with_partition_key(*pk);
                    limit = limit.with_partition_key(*pk);
                }
                built_policies.push(untagged);
                built_limits.push(limit);
            }
            prop_assert_eq!(policies.finish(), rate_limit_policy_value(&built_policies));
            prop_assert_eq!(limits.finish(), rate_limit_value(&built_limits));
        }
    }

    /// A policy's field alone, built once, is the field of that policy.
    #[cfg(feature = "rules")]
    #[test]
    fn a_policy_alone_is_its_field() {
        let policy = RateLimitPolicy::new(PolicyName::new(r#"say "hi" \ bye"#).unwrap(), 10)
            .with_unit(QuotaUnit::ContentBytes);
        let text = PolicyText::new(&policy, None);
        assert_eq!(text.alone(), rate_limit_policy_value(&[policy]).as_ref());
        assert_eq!(
            text.alone().unwrap(),
            r#""say \"hi\" \\ bye";q=10;qu="content-bytes""#
        );
    }

    /// No member, no field.
    #[test]
    fn an_empty_list_is_not_sent() {
        assert_eq!(rate_limit_policy_value(&[]), None);
        assert_eq!(rate_limit_value(&[]), None);
    }
}
