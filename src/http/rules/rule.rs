//! One limit the layer charges: which limiter, keyed how, at what cost,
//! for which requests.

use std::fmt;
use std::hash::{BuildHasher, Hash};

use http::StatusCode;
use http::request::Parts;

use super::cost::CostError;
use super::in_flight::InFlight;
use super::key::{IntoKey, NoPeerReport};
use super::kind::{RuleKind, Stage};
use super::settle::{NotSettleable, Settlement};
use super::shadow::{Role, Shadow, ShadowCount};
use super::shared::SharedLimiter;
use super::token::{Global, Keyed, WithKey};
use crate::advertised::{Advertised, Shape};
use crate::concurrency::KeyedConcurrencyLimiter;
use crate::http::{PolicyName, RateLimitPolicy};
use crate::keyed::PerKey;
use crate::shared::{KeyedAllowance, Store};
use crate::sync::unmodelled::Arc;

/// What the layer does with a request that does not carry a rule's key
/// ([`NoKey::NotInRequest`](super::NoKey::NotInRequest)). A request the
/// server gave no peer address ([`NoKey::NoPeer`](super::NoKey::NoPeer))
/// is answered 500 whatever this says: that is the server's
/// misconfiguration, and skipping the rule would quietly lift its limit.
///
/// ```
/// use tollgate::http::rules::MissingKey;
///
/// assert_eq!(MissingKey::default(), MissingKey::Reject);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MissingKey {
    /// Refuse the request with 400 and a problem+json body. The default: a
    /// key that cannot be found is far more often a mistake (authentication
    /// placed after this layer, a header misnamed) than a request that
    /// deserves to go unlimited, and failing loudly shows it at once.
    #[default]
    Reject,
    /// Let the request through this rule uncharged. Right for a rule that
    /// only concerns some requests, such as a per-account limit that
    /// anonymous requests skip (limit those with another rule).
    Skip,
}

type CostFn = dyn Fn(&Parts) -> Result<u64, CostError> + Send + Sync;
type Predicate = dyn Fn(&Parts) -> bool + Send + Sync;

/// One limit of a set of [`Rules`](super::Rules) (a tower layer's, actix middleware's): a global
/// [`Limit`](crate::Limit) (a [`TokenBucket`](crate::TokenBucket), a window counter …)
/// or a [`KeyedLimiter`](crate::KeyedLimiter) with a key extractor, advertised
/// as a [`RateLimitPolicy`], with a cost per request (1 unless set), an
/// optional predicate choosing the requests it applies to, a
/// [`MissingKey`] policy, and the response statuses whose cost it gives
/// back ([`give_back_on`](Self::give_back_on)).
///
/// Cheap to clone: the limiter and the functions are behind `Arc`s.
///
/// ```
/// use std::sync::Arc;
/// use http::StatusCode;
/// use tollgate::{KeyedLimiter, Quota};
/// use tollgate::http::PolicyName;
/// use tollgate::http::rules::{MissingKey, Rule, extract};
///
/// #[derive(Clone, Hash, PartialEq, Eq)]
/// struct Account(u64); // placed in the extensions by authentication
///
/// let per_account = Arc::new(KeyedLimiter::new(Quota::per_second(5)?));
/// let rule = Rule::keyed(PolicyName::new("per-account")?, per_account, extract::extension::<Account>())
///     .on_missing_key(MissingKey::Skip)
///     .give_back_on([StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN])
///     .when(|parts| parts.uri.path().starts_with("/api/"));
/// assert_eq!(rule.policy().name().as_str(), "per-account");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Rule {
    policy: RateLimitPolicy,
    /// The shape the limiter had when the rule was made, which its policy
    /// was built from (none for an in-flight rule, which has no window).
    built: Option<Shape>,
    /// What kind of limit it charges, and how it binds to a request.
    kind: Arc<dyn RuleKind>,
    cost: Option<Arc<CostFn>>,
    when: Option<Arc<Predicate>>,
    missing: MissingKey,
    give_back_on: Vec<StatusCode>,
    /// Whether a request without a peer address has been reported yet:
    /// once per rule, not once per request.
    no_peer: NoPeerReport,
    /// Enforced, or in shadow mode with its count.
    role: Role,
    /// Where the actual cost is read from the response, if the charge is
    /// settled to it.
    settlement: Option<Settlement>,
}

impl Rule {
    /// One limit shared by every request: any [`Limit`](crate::Limit) (a
    /// [`TokenBucket`](crate::TokenBucket), a [`FixedWindow`](crate::FixedWindow) or
    /// [`SlidingWindow`](crate::SlidingWindow), a
    /// [`StripedBucket`](crate::StripedBucket), any of them
    /// [`Counted`](crate::Counted)), advertised under `name` as the limit
    /// describes itself: a bucket as [`RateLimitPolicy::from_quota`], a
    /// window counter as [`RateLimitPolicy::from_window_quota`] (`q` its
    /// limit, `w` its window). Each response's `RateLimit` field carries
    /// what is left and, in `t`, the wait until one unit more is: for a
    /// fixed window the end of the window; for a sliding one the instant
    /// the previous window's weight has faded by one unit (the window's
    /// end while nothing is counted); for a bucket the next token
    /// ([`docs/http.md`](crate::guide::http)).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{FixedWindow, Quota, TokenBucket, WindowQuota};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::Rule;
    ///
    /// let global = Rule::global(PolicyName::new("global")?, Arc::new(TokenBucket::new(Quota::per_second(1000)?)));
    /// assert_eq!(global.policy().quota(), 1000);
    /// let hourly = Arc::new(FixedWindow::new(WindowQuota::new(600, std::time::Duration::from_secs(3600))?)?);
    /// let hourly = Rule::global(PolicyName::new("hourly")?, hourly);
    /// assert_eq!((hourly.policy().quota(), hourly.policy().window_seconds()), (600, Some(3600)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn global<L: Advertised + Send + 'static>(name: PolicyName, limit: Arc<L>) -> Rule {
        let shape = limit.shape();
        let policy = RateLimitPolicy::from_shape(name, shape);
        Rule::new(policy, Some(shape), Arc::new(Global(limit)))
    }

    /// A limit per key, the key taken from each request by `key`
    /// (see [`extract`](super::extract) for ready-made extractors): a
    /// bucket per key ([`KeyedLimiter`](crate::KeyedLimiter)) or a window
    /// counter per key ([`KeyedFixedWindow`](crate::KeyedFixedWindow),
    /// [`KeyedSlidingWindow`](crate::KeyedSlidingWindow)), advertised as
    /// [`global`](Self::global) advertises the same limit (a window as
    /// `q = N; w = W`), or any other [`PerKey`] limiter (one
    /// [`Counted`](crate::Counted) counts the rule's decisions).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{KeyedLimiter, Quota};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::Rule;
    ///
    /// let per_tenant = Arc::new(KeyedLimiter::<String>::new(Quota::per_second(50)?));
    /// let rule = Rule::keyed(PolicyName::new("per-tenant")?, per_tenant, |parts: &http::request::Parts| {
    ///     parts.headers.get("x-tenant")?.to_str().ok().map(str::to_owned)
    /// });
    /// # let _ = rule;
    /// let hourly = tollgate::KeyedFixedWindow::builder(tollgate::WindowQuota::new(100, std::time::Duration::from_secs(3600))?)
    ///     .build_fixed::<String>()?;
    /// let rule = Rule::keyed(PolicyName::new("hourly")?, Arc::new(hourly), |parts: &http::request::Parts| {
    ///     parts.headers.get("x-tenant")?.to_str().ok().map(str::to_owned)
    /// });
    /// assert_eq!((rule.policy().quota(), rule.policy().window_seconds()), (100, Some(3600)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keyed<L, K, R, F>(name: PolicyName, limiter: Arc<L>, key: F) -> Rule
    where
        L: PerKey<Key = K> + 'static,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        R: IntoKey<K>,
        F: Fn(&Parts) -> R + Send + Sync + 'static,
    {
        let shape = limiter.shape();
        let policy = RateLimitPolicy::from_shape(name, shape);
        Rule::new(
            policy,
            Some(shape),
            Arc::new(Keyed(WithKey::new(limiter, key))),
        )
    }

    /// A budget per key shared by every node of a fleet: one key of a
    /// [`KeyedAllowance`] over a shared [`Store`] (Redis, say), the key
    /// taken from each request by `key` (the same extractors as
    /// [`keyed`](Self::keyed), its `Display` form naming the key in the
    /// store after the rule's name, so two rules over one store keep their
    /// budgets apart), advertised as the quota its store gives every key
    /// ([`KeyedAllowance::quota`]: given once, to the store; a quota the
    /// store changes reaches the fields of the next response, as a keyed
    /// limiter's does).
    ///
    /// A shared rule is charged after every in-process rule, whatever the
    /// order rules were added in. A key this node holds a lease of is
    /// decided in `call` (one compare-and-swap); any other key, or a lease
    /// that ran short, is decided by the response future, which waits for
    /// the store's word (a store decision, or a refill moved earlier so
    /// that it answers in time) within the layer's
    /// [`store_wait`](super::RulesBuilder::store_wait): a node's
    /// empty lease is never taken for the store's empty budget, and a 429
    /// comes only on the store's word, with its wait as Retry-After
    /// ([`docs/http.md`](crate::guide::http), "What a shared rule's refusal
    /// means"). A
    /// refusal by any rule gives back what every rule took for the request,
    /// in-process and shared, and so does a response in
    /// [`give_back_on`](Self::give_back_on) for this rule: each through
    /// its receipt ([`KeyedReceipt`](crate::shared::KeyedReceipt) for a
    /// shared rule: back into the key's lease pool, or to the store by the
    /// one rule). A store that is down is a 503 under
    /// [`FailurePolicy::Closed`](crate::shared::FailurePolicy), and lets
    /// the request through under `Open`. [`docs/http.md`](crate::guide::http) ("Shared rules")
    /// has the contract.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use http::HeaderName;
    /// use tollgate::Quota;
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::{Rule, Rules, extract};
    /// use tollgate::shared::{FailurePolicy, KeyedAllowance, KeyedAllowanceConfig, LocalStore};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// // 100 a minute per API key, across the fleet (here one in-process store).
    /// let quota = Quota::new(100, 100, Duration::from_secs(60))?;
    /// let store = Arc::new(LocalStore::new(quota));
    /// let per_key = KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed))?;
    /// let api_key = extract::header(HeaderName::from_static("x-api-key"));
    /// let rule = Rule::shared(PolicyName::new("per-api-key")?, per_key, api_key);
    /// assert_eq!((rule.policy().quota(), rule.policy().window_seconds()), (100, Some(60)));
    /// let rules = Rules::builder().rule(rule).build();
    /// # let _ = rules;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shared<S, K, R, F>(name: PolicyName, allowance: KeyedAllowance<S>, key: F) -> Rule
    where
        S: Store,
        K: fmt::Display,
        R: IntoKey<K>,
        F: Fn(&Parts) -> R + Send + Sync + 'static,
    {
        let limiter = SharedLimiter::new(&name, allowance, key);
        let shape = Shape::from(&limiter.quota());
        let policy = RateLimitPolicy::from_shape(name, shape);
        Rule::new(policy, Some(shape), Arc::new(limiter))
    }

    /// At most as many units of work in flight per key as `limiter`
    /// allows ([`KeyedConcurrencyLimiter`]), the key taken from each
    /// request by `key` (the extractors of [`keyed`](Self::keyed); one
    /// constant key, `|_| Some(())`, makes it a limit for the whole
    /// server). Each request the rule applies to holds a permit of its
    /// cost (1 unless set) from admission until the inner service has
    /// answered with its response head, or until the request is dropped
    /// unanswered (the client hung up, an outer timeout): then the units
    /// come back exactly. A body streamed after the head is not counted:
    /// the rule bounds handlers that compute their answer first. A
    /// request with no room is refused with 429 and no Retry-After (work in
    /// flight ends when it ends), one whose cost exceeds the limit with
    /// 413, and a new key beyond the limiter's key cap with 503
    /// ([`Refusal::from_in_flight`](crate::http::Refusal::from_in_flight)).
    /// Permits are taken before any token is charged, so a request a
    /// token rule refuses holds none. In-flight rules advertise no
    /// RateLimit fields (their limit has no window); a refusal names the
    /// rule in `violated-policies`. It has no token to give back:
    /// [`give_back_on`](Self::give_back_on) changes nothing for it.
    ///
    /// A permit is kept past `call`, as a charge that a status may give
    /// back is: an admitted request through an in-flight rule allocates
    /// the list of kept charges and the permit's box.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use http::HeaderName;
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::{Rule, Rules, extract};
    ///
    /// // At most 2 reports generated at once per API key.
    /// let reports = Arc::new(KeyedConcurrencyLimiter::<String>::new(2)?);
    /// let api_key = extract::header(HeaderName::from_static("x-api-key"));
    /// let rule = Rule::in_flight(PolicyName::new("reports")?, reports, api_key)
    ///     .when(|parts| parts.uri.path().starts_with("/reports"));
    /// assert_eq!(rule.policy().quota(), 2);
    /// let _rules = Rules::builder().rule(rule).build();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_flight<K, S, R, F>(
        name: PolicyName,
        limiter: Arc<KeyedConcurrencyLimiter<K, S>>,
        key: F,
    ) -> Rule
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        S: BuildHasher + Clone + Send + Sync + 'static,
        R: IntoKey<K>,
        F: Fn(&Parts) -> R + Send + Sync + 'static,
    {
        let policy = RateLimitPolicy::new(name, limiter.max());
        Rule::new(policy, None, Arc::new(InFlight(WithKey::new(limiter, key))))
    }

    fn new(policy: RateLimitPolicy, built: Option<Shape>, kind: Arc<dyn RuleKind>) -> Rule {
        Rule {
            policy,
            built,
            kind,
            cost: None,
            when: None,
            missing: MissingKey::default(),
            give_back_on: Vec::new(),
            no_peer: NoPeerReport::default(),
            role: Role::Enforced,
            settlement: None,
        }
    }

    /// Replaces the advertised policy (to set its unit, say); its name is
    /// what the fields and `violated-policies` carry. A policy with the
    /// limiter's own quota and window keeps following the limiter (a keyed
    /// limiter's [`set_quota`](crate::KeyedLimiter::set_quota) reaches the
    /// fields on the next response); one with another quota or window says
    /// what it says.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::{PolicyName, QuotaUnit};
    /// use tollgate::http::rules::Rule;
    ///
    /// let bytes = Rule::global(PolicyName::new("upload")?, Arc::new(TokenBucket::new(Quota::per_second(1 << 20)?)));
    /// let policy = bytes.policy().clone().with_unit(QuotaUnit::ContentBytes);
    /// let bytes = bytes.with_policy(policy);
    /// assert_eq!(bytes.policy().unit(), QuotaUnit::ContentBytes);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_policy(mut self, policy: RateLimitPolicy) -> Rule {
        self.policy = policy;
        self
    }

    /// Charges `cost(request)` tokens instead of 1. A cost of 0 charges
    /// nothing (an empty body under a per-byte limit); a cost above the
    /// capacity is refused with 413. For a cost read from the request,
    /// which the request can get wrong, use [`try_cost`](Self::try_cost).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::Rule;
    ///
    /// // Searches cost five times what the other routes do.
    /// let work = Rule::global(PolicyName::new("work")?, Arc::new(TokenBucket::new(Quota::per_second(100)?)))
    ///     .cost(|parts| if parts.uri.path().starts_with("/search") { 5 } else { 1 });
    /// # let _ = work;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost(self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Rule {
        self.try_cost(move |parts| Ok(cost(parts)))
    }

    /// Charges `cost(request)` tokens, or answers the request with the
    /// [`CostError`]'s 4xx (a problem+json body, nothing charged on any
    /// rule) when its cost cannot be read from it: the way to charge by
    /// [`extract::content_length`](super::extract::content_length).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::{PolicyName, QuotaUnit};
    /// use tollgate::http::rules::{Rule, extract};
    ///
    /// let bytes = Arc::new(TokenBucket::new(Quota::per_second(1 << 20)?));
    /// let upload = Rule::global(PolicyName::new("upload")?, bytes).try_cost(extract::content_length);
    /// let per_byte = upload.policy().clone().with_unit(QuotaUnit::ContentBytes);
    /// let upload = upload.with_policy(per_byte);
    /// # let _ = upload;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_cost(
        mut self,
        cost: impl Fn(&Parts) -> Result<u64, CostError> + Send + Sync + 'static,
    ) -> Rule {
        self.cost = Some(Arc::new(cost));
        self
    }

    /// Applies this rule only to requests for which `predicate` holds (a
    /// route, a method): the way to give routes their own policies.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::Rule;
    ///
    /// let logins = Rule::global(PolicyName::new("login")?, Arc::new(TokenBucket::new(Quota::per_second(10)?)))
    ///     .when(|parts| parts.method == http::Method::POST && parts.uri.path() == "/login");
    /// # let _ = logins;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn when(mut self, predicate: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Rule {
        self.when = Some(Arc::new(predicate));
        self
    }

    /// What to do when the key cannot be extracted (default:
    /// [`MissingKey::Reject`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{KeyedLimiter, Quota};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::{MissingKey, Rule, extract};
    ///
    /// let limiter = Arc::new(KeyedLimiter::<u64>::new(Quota::per_second(5)?));
    /// let rule = Rule::keyed(PolicyName::new("per-user")?, limiter, extract::extension::<u64>())
    ///     .on_missing_key(MissingKey::Skip);
    /// assert_eq!(rule.missing_key(), MissingKey::Skip);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_missing_key(mut self, policy: MissingKey) -> Rule {
        self.missing = policy;
        self
    }

    /// Gives the request's charge back to this limit when the inner
    /// service answers with one of `statuses`, by the one rule of
    /// [`docs/semantics.md`](crate::guide::semantics) ("Giving back"): all of it if nothing was
    /// admitted from the limit since, otherwise the cost less the time the
    /// request held it (nothing, once that much has refilled). Nothing is
    /// ever given back without a response: a request whose future is
    /// dropped (the client hung up, an outer timeout), whose inner service
    /// fails or panics, stays charged, because its handler may have done
    /// the work.
    ///
    /// Typically 401 and 403, so that bad credentials cost the account
    /// nothing, with a trade-off to know: a client that hangs up before its
    /// 401 arrives stays charged. And a rule keyed on an identity the
    /// request merely *claims* lets anyone drain that identity's budget
    /// either way (send its name, hang up): key per-account rules only on
    /// authenticated identities, placed in the extensions by
    /// authentication that runs before this layer, and keep an address
    /// rule that counts 401 and 403, since that is what slows down
    /// credential guessing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use http::StatusCode;
    /// use tollgate::{KeyedLimiter, Quota};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::{Rule, extract};
    ///
    /// let limiter = Arc::new(KeyedLimiter::<u64>::new(Quota::per_second(5)?));
    /// let rule = Rule::keyed(PolicyName::new("per-user")?, limiter, extract::extension::<u64>())
    ///     .give_back_on([StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN]);
    /// # let _ = rule;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn give_back_on(mut self, statuses: impl IntoIterator<Item = StatusCode>) -> Rule {
        self.give_back_on = statuses.into_iter().collect();
        self
    }

    /// Puts the rule in shadow mode: it is bound and priced like any rule,
    /// and charged apart from the enforced rules, once they admit the
    /// request (so its limit sees what it would see enforced, and it never
    /// touches what an enforced rule holds); a request it would refuse goes
    /// on without it, uncharged by it. On a limit an enforced rule of the
    /// same request charges, it takes nothing and refuses nothing. A
    /// request every enforced rule admits and this one would have refused
    /// is counted ([`shadow_refusals`](Self::shadow_refusals); with feature
    /// `metrics`, counter `tollgate_shadow_refusals_total` labelled
    /// `policy`), whatever the rules' order. For a rule alone the count is
    /// exactly what enforcing it refuses; beside other rules it is an
    /// estimate, since the requests it would refuse still charge the
    /// others. A request another rule refuses takes nothing of it (a
    /// shared rule's refusal, decided later, gives back what it took). A shadow shared rule may make a
    /// request wait for its store, within the layer's
    /// [`store_wait`](super::RulesBuilder::store_wait). `shown` says whether clients see
    /// the rule in the RateLimit fields ([`Shadow::Advertised`]) or not
    /// ([`Shadow::Quiet`]); a shadow rule is never named violated and never
    /// moves Retry-After. How a new limit is rolled out: shadow it, watch
    /// the count, enforce it. A request with no key for it, or a cost it
    /// cannot read, is still answered as an enforced rule answers it: the
    /// rule is being tried, not skipped.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::{Rule, Shadow};
    ///
    /// let tighter = Rule::global(PolicyName::new("next-quarter")?, Arc::new(TokenBucket::new(Quota::per_second(50)?)))
    ///     .shadow(Shadow::Quiet);
    /// assert_eq!(tighter.shadow_refusals(), Some(0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shadow(mut self, shown: Shadow) -> Rule {
        self.role = Role::Shadow(ShadowCount::new(shown, self.policy.name().clone()));
        self
    }

    /// How many requests this rule in shadow mode would have refused so
    /// far (every clone of the rule, and the layer's copy, share the
    /// count); `None` for an enforced rule.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::Rule;
    ///
    /// let rule = Rule::global(PolicyName::new("g")?, Arc::new(TokenBucket::new(Quota::per_second(3)?)));
    /// assert_eq!(rule.shadow_refusals(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shadow_refusals(&self) -> Option<u64> {
        match &self.role {
            Role::Enforced => None,
            Role::Shadow(count) => Some(count.total()),
        }
    }

    pub(super) fn role(&self) -> &Role {
        &self.role
    }

    /// Settles this rule's charge to the request's actual cost, read from
    /// its response as `how` says: the cost function
    /// ([`cost`](Self::cost), [`try_cost`](Self::try_cost)) gives the
    /// estimate charged at admission, and when the inner service answers,
    /// the charge is settled to the actual cost by
    /// [`Receipt::settle`](crate::Receipt::settle)'s rule: the excess
    /// charged into debt that later requests wait out, the rest given back
    /// by the rule that never mints. A response that does not say leaves
    /// the estimate charged, as does a request whose response never comes
    /// (the client hung up: its handler may have done the work). A status
    /// the rule gives back ([`give_back_on`](Self::give_back_on)) gives the
    /// whole charge back instead. What an LLM gateway needs: tokens a
    /// minute per API key, each request estimated, settled to the usage
    /// its response reports.
    ///
    /// A shared rule settles through its receipt
    /// ([`KeyedReceipt::settle`](crate::shared::KeyedReceipt::settle)):
    /// the excess debited at the store, the rest given back where it came
    /// from, in the background once the response head is out.
    ///
    /// # Errors
    ///
    /// [`NotSettleable`] for an in-flight rule, which charges no tokens.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use http::HeaderName;
    /// use tollgate::{KeyedLimiter, Quota};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::{Rule, Settlement, extract};
    ///
    /// // 100 000 tokens a minute per API key, 1000 estimated per request,
    /// // settled to the usage the handler reports (`ActualCost`).
    /// let tokens = Arc::new(KeyedLimiter::<String>::new(Quota::per_minute(100_000)?));
    /// let api_key = extract::header(HeaderName::from_static("x-api-key"));
    /// let rule = Rule::keyed(PolicyName::new("tokens")?, tokens, api_key)
    ///     .cost(|_| 1_000)
    ///     .settled_by(Settlement::Extension)?;
    /// # let _ = rule;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn settled_by(mut self, how: Settlement) -> Result<Rule, NotSettleable> {
        if !self.kind.settles() {
            return Err(NotSettleable {
                policy: self.policy.name().clone(),
            });
        }
        self.settlement = Some(how);
        Ok(self)
    }

    pub(super) fn settlement(&self) -> Option<&Settlement> {
        self.settlement.as_ref()
    }

    /// The advertised policy.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::Rule;
    ///
    /// let rule = Rule::global(PolicyName::new("g")?, Arc::new(TokenBucket::new(Quota::per_second(3)?)));
    /// assert_eq!(rule.policy().window_seconds(), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(&self) -> &RateLimitPolicy {
        &self.policy
    }

    /// The missing-key policy.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::{MissingKey, Rule};
    ///
    /// let rule = Rule::global(PolicyName::new("g")?, Arc::new(TokenBucket::new(Quota::per_second(3)?)));
    /// assert_eq!(rule.missing_key(), MissingKey::Reject);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn missing_key(&self) -> MissingKey {
        self.missing
    }

    /// The limiter's shape this rule's policy follows: the one it was built
    /// from, unless [`with_policy`](Self::with_policy) gave it another
    /// quota or window. A policy that follows its limiter advertises the
    /// limiter's quota as it is at each response (a keyed limiter's
    /// [`set_quota`](crate::KeyedLimiter::set_quota)); one the caller
    /// set says what the caller said.
    pub(super) fn followed_shape(&self) -> Option<Shape> {
        self.built
            .filter(|&built| self.policy.shape() == Some(built))
    }

    pub(super) fn no_peer_report(&self) -> &NoPeerReport {
        &self.no_peer
    }

    pub(super) fn applies_to(&self, parts: &Parts) -> bool {
        self.when.as_ref().is_none_or(|when| when(parts))
    }

    pub(super) fn has_cost(&self) -> bool {
        self.cost.is_some()
    }

    pub(super) fn cost_of(&self, parts: &Parts) -> Result<u64, CostError> {
        self.cost.as_ref().map_or(Ok(1), |cost| cost(parts))
    }

    pub(super) fn kind(&self) -> &dyn RuleKind {
        &*self.kind
    }

    /// Where the engine charges this rule among a request's rules.
    pub(super) fn stage(&self) -> Stage {
        self.kind.stage()
    }

    pub(super) fn gives_back(&self, status: StatusCode) -> bool {
        self.give_back_on.contains(&status)
    }

    /// Whether the response may change this rule's charge (a status that
    /// gives it back, or an actual cost to settle to), so the charge is
    /// kept until the response.
    pub(super) fn answers_to_response(&self) -> bool {
        !self.give_back_on.is_empty() || self.settlement.is_some()
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("policy", &self.policy)
            .field("missing", &self.missing)
            .field("give_back_on", &self.give_back_on)
            .finish_non_exhaustive()
    }
}
