//! A set of rules and how their answers are written ([`Rules`]), built by
//! a [`RulesBuilder`] into whatever an adapter wraps services with: a
//! tower layer, actix middleware, or the [`Rules`] themselves.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use bytes::Bytes;
use http::Response;

use super::engine::{Engine, RefusalHook};
use super::rule::Rule;
use crate::http::fields::PolicyText;
use crate::http::{Jitter, PartitionKeys, Refusal};
use crate::sync::unmodelled::Arc;

/// A layer's rules and how their answers are written, as every adapter
/// decides them: the tower layer
/// ([`RateLimitLayer`](crate::http::tower::RateLimitLayer)) and the actix
/// middleware (`tollgate::http::actix::RateLimit`) are each made from one
/// (`From<Rules>`), so one set of rules (and their limiters) can serve both.
///
/// Cheap to clone: the rules are behind an `Arc`.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::{Quota, TokenBucket};
/// use tollgate::http::PolicyName;
/// use tollgate::http::rules::{Rule, Rules};
///
/// let global = Arc::new(TokenBucket::new(Quota::per_second(100)?));
/// let rules: Rules = Rules::builder().rule(Rule::global(PolicyName::new("global")?, global)).build();
/// # let _ = rules;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Rules {
    pub(crate) engine: Arc<Engine>,
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.engine.fmt(f)
    }
}

impl Rules {
    /// Starts a set of rules with none, no jitter, random partition keys
    /// and the RateLimit fields on refusals only.
    ///
    /// ```
    /// use tollgate::http::rules::Rules;
    ///
    /// let _rules: Rules = Rules::builder().build();
    /// ```
    pub fn builder() -> RulesBuilder<Rules> {
        RulesBuilder::new()
    }
}

/// Configures a set of [`Rules`] and builds what `T` is made from them:
/// [`Rules`], a tower layer
/// ([`RateLimitLayer::builder`](crate::http::tower::RateLimitLayer::builder)),
/// actix middleware (`tollgate::http::actix::RateLimit::builder`).
///
/// ```
/// use tollgate::http::{Jitter, PartitionKeys};
/// use tollgate::http::rules::Rules;
///
/// let rules = Rules::builder()
///     .partition_keys(PartitionKeys::with_secret(*b"fleet-wide-key!!"))
///     .jitter(Jitter::up_to(2))
///     .build();
/// # let _ = rules;
/// ```
pub struct RulesBuilder<T> {
    built: PhantomData<fn() -> T>,
    rules: Vec<Rule>,
    keys: Option<PartitionKeys>,
    jitter: Jitter,
    on_success: bool,
    store_wait: Option<Duration>,
    on_refusal: Option<Arc<RefusalHook>>,
}

impl<T> fmt::Debug for RulesBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RulesBuilder")
            .field("rules", &self.rules)
            .field("jitter", &self.jitter)
            .field("on_success", &self.on_success)
            .field("store_wait", &self.store_wait)
            .field("on_refusal", &self.on_refusal.is_some())
            .finish_non_exhaustive()
    }
}

/// How long a request may wait for shared limits' stores unless set: a
/// round trip or two to a nearby store, short enough that a store that
/// hangs costs a client little.
const DEFAULT_STORE_WAIT: Duration = Duration::from_millis(100);

impl<T> Default for RulesBuilder<T> {
    fn default() -> Self {
        RulesBuilder::new()
    }
}

impl<T> RulesBuilder<T> {
    /// A builder with no rules, no jitter, random partition keys and the
    /// RateLimit fields on refusals only.
    ///
    /// ```
    /// use tollgate::http::rules::{Rules, RulesBuilder};
    ///
    /// let _rules = RulesBuilder::<Rules>::new().build();
    /// ```
    pub fn new() -> Self {
        RulesBuilder {
            built: PhantomData,
            rules: Vec::new(),
            keys: None,
            jitter: Jitter::default(),
            on_success: false,
            store_wait: None,
            on_refusal: None,
        }
    }

    /// Adds a rule, charged after the ones added before it, except that
    /// rules over a budget shared by a fleet ([`Rule::shared`]) are charged
    /// after every in-process rule, and in-flight rules ([`Rule::in_flight`])
    /// take their permits before any token is charged. Add them from the most selective (per
    /// address) to the most shared (global), so a request refused early
    /// never touches the shared limit.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::{Rule, Rules};
    ///
    /// let global = Arc::new(TokenBucket::new(Quota::per_second(100)?));
    /// let _rules = Rules::builder().rule(Rule::global(PolicyName::new("global")?, global)).build();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// How `pk` values are derived (default: [`PartitionKeys::random`],
    /// drawn when the layer is built).
    ///
    /// ```
    /// use tollgate::http::PartitionKeys;
    /// use tollgate::http::rules::Rules;
    ///
    /// let _rules = Rules::builder().partition_keys(PartitionKeys::with_secret([9; 16])).build();
    /// ```
    pub fn partition_keys(mut self, keys: PartitionKeys) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Jitter added to every advertised `t` (default: none). Retry-After is
    /// never earlier than a violated policy's `t`, so it moves with it.
    ///
    /// ```
    /// use tollgate::http::Jitter;
    /// use tollgate::http::rules::Rules;
    ///
    /// let _rules = Rules::builder().jitter(Jitter::up_to(3)).build();
    /// ```
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Whether admitted responses carry the RateLimit fields too (default:
    /// no). They are never added to 401 and 403 responses, which would
    /// otherwise tell a client with bad credentials about the budget of the
    /// identity it claimed.
    ///
    /// ```
    /// use tollgate::http::rules::Rules;
    ///
    /// let _rules = Rules::builder().advertise_on_success(true).build();
    /// ```
    pub fn advertise_on_success(mut self, advertise: bool) -> Self {
        self.on_success = advertise;
        self
    }

    /// The longest a request waits, in all, for the tokens of its shared
    /// rules ([`Rule::shared`]) when this node cannot decide them from a
    /// lease (default: 100 ms): for a hot key's refill to land, or for a
    /// cold key's budget to refill at the store. A request whose tokens do
    /// not exist by then is refused (429); one whose store says they will
    /// not exist within it is refused at once. Each store call is bounded
    /// by its allowance's store timeout, and a store that cannot be reached
    /// answers as its failure policy says (503, or through). In-process
    /// rules never wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::http::rules::Rules;
    ///
    /// let _rules = Rules::builder().store_wait(Duration::from_millis(20)).build();
    /// ```
    pub fn store_wait(mut self, wait: Duration) -> Self {
        self.store_wait = Some(wait);
        self
    }

    /// Shapes the response of every refusal by a limit (a token, in-flight
    /// or shared rule's, a store that is down) for a stack or convention
    /// this crate does not know: `respond` gets the typed
    /// [`Refusal`](crate::http::Refusal) (its status, the violated policies,
    /// the exact wait, [`Refusal::retry_after`](crate::http::Refusal::retry_after)) and answers the response to
    /// send, or `None` for the layer's own. The answers to requests no rule
    /// can charge as they stand (a missing key, a cost that cannot be read)
    /// are not refusals and do not reach it. It runs in `call` (or, for a
    /// shared rule's store refusal, in the response future); a panic in it
    /// unwinds from there, with nothing charged.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bytes::Bytes;
    /// use http::{Response, StatusCode};
    /// use tollgate::{Quota, TokenBucket};
    /// use tollgate::http::PolicyName;
    /// use tollgate::http::rules::{Rule, Rules};
    ///
    /// // A plain-text 429 with the exact wait in milliseconds, for an old client.
    /// let rules = Rules::builder()
    ///     .rule(Rule::global(PolicyName::new("global")?, Arc::new(TokenBucket::new(Quota::per_second(10)?))))
    ///     .on_refusal(|refusal| {
    ///         let wait = refusal.retry_after()?;
    ///         let mut response = Response::new(Bytes::from(format!("slow down: {} ms\n", wait.as_millis())));
    ///         *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    ///         let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    ///         response.headers_mut().insert("x-retry-after-ms", millis.into());
    ///         Some(response)
    ///     })
    ///     .build();
    /// # let _ = rules;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_refusal(
        mut self,
        respond: impl Fn(&Refusal) -> Option<Response<Bytes>> + Send + Sync + 'static,
    ) -> Self {
        self.on_refusal = Some(Arc::new(respond));
        self
    }

    /// What `T` is made from these rules.
    ///
    /// ```
    /// use tollgate::http::rules::Rules;
    ///
    /// let rules = Rules::builder().build();
    /// let _clone = rules.clone(); // shares the rules
    /// ```
    pub fn build(mut self) -> T
    where
        T: From<Rules>,
    {
        // Bound in-process rules first, then shared ones, then permits
        // (`Stage::bound`), each group in the order added; charged permits
        // first, then in-process, then shared (`Stage`), so that a request
        // refused a permit takes no token and one refused in this process
        // never costs the fleet's store a round trip; shadow rules after
        // every enforced one. `reorders` says whether the two orders differ.
        self.rules.sort_by_key(|rule| rule.stage().bound());
        let shadows = self.rules.iter().any(|rule| rule.role().is_shadow());
        let reorders = shadows
            || self
                .rules
                .windows(2)
                .any(|pair| pair[0].stage() > pair[1].stage());
        T::from(Rules {
            engine: Arc::new(Engine {
                reads_costs: self.rules.iter().any(Rule::has_cost),
                keeps: self.on_success
                    || self.rules.iter().any(|rule| {
                        rule.answers_to_response() || rule.kind().held_until_response()
                    }),
                shadows,
                reorders,
                texts: self
                    .rules
                    .iter()
                    .map(|rule| PolicyText::new(rule.policy(), rule.followed_shape()))
                    .collect(),
                rules: self.rules,
                keys: self.keys.unwrap_or_default(),
                jitter: self.jitter,
                on_success: self.on_success,
                store_wait: self.store_wait.unwrap_or(DEFAULT_STORE_WAIT),
                on_refusal: self.on_refusal,
            }),
        })
    }
}
