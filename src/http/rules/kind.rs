//! What a kind of rule is to the engine: a [`RuleKind`] binds itself to a
//! request (its key read into a [`Held`]) and is then charged, given back,
//! settled and advertised through that binding. The engine matches on no
//! kind: a new kind of rule is one file that implements this trait
//! (`token.rs`, `in_flight.rs`, `shared.rs`).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use http::request::Parts;

use super::key::NoKey;
use super::stash::Stash;
use crate::advertised::Shape;
use crate::error::AcquireError;
use crate::http::refusal::Cause;
use crate::http::{PartitionKey, PartitionKeys, PolicyName};
use crate::limit::{Identity, Taken};

/// What a rule's binding holds for one request: its key (with, for a kind
/// whose receipt is not a token limit's, that receipt: a permit, a shared
/// budget's), and a token limit's receipt once taken. Owned, so a charge
/// outlives the call that bound it with nothing to copy.
#[derive(Default)]
pub(crate) struct Held {
    pub(crate) key: Stash,
    pub(crate) taken: Option<Taken>,
}

/// When a kind of rule is charged among a request's rules. Permits first
/// (a request refused one takes no token), then the in-process limits, then
/// the budgets shared by a fleet (a request refused in this process never
/// costs the store a round trip).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stage {
    InFlight,
    InProcess,
    Shared,
}

impl Stage {
    /// Where a kind's key and cost are read among a request's rules: the
    /// in-process rules', then the shared ones', then the permits', so that
    /// of several rules a request cannot be charged by, the answer is the
    /// first of those (a missing account key's 400 before a permit rule's
    /// missing peer's 500).
    pub(crate) fn bound(self) -> u8 {
        match self {
            Stage::InProcess => 0,
            Stage::Shared => 1,
            Stage::InFlight => 2,
        }
    }
}

/// What taking a rule's cost came to, without awaiting.
pub(crate) enum Now {
    Taken,
    /// Only waiting can tell (a store to ask, a refill that may land in
    /// time): [`RuleKind::take_waiting`] decides.
    Waits,
    Refused(Cause),
}

/// A decision that awaits a store.
pub(crate) type Waiting<'s> = Pin<Box<dyn Future<Output = Result<(), Cause>> + Send + 's>>;

/// A kind of rule: a limiter, how it is bound to a request, and how that
/// binding is charged. Every method but [`bind`](Self::bind) reads a
/// binding this kind made; one it cannot read (a binding of another kind,
/// which the engine never hands it) holds nothing: it takes nothing, gives
/// back nothing and advertises nothing.
pub(crate) trait RuleKind: Send + Sync {
    /// Where this kind is charged among a request's rules.
    fn stage(&self) -> Stage;

    /// This rule bound to the request's key (into `held`, found empty),
    /// or why the request has none.
    fn bind(&self, parts: &Parts, held: &mut Held) -> Result<(), NoKey>;

    /// Takes `cost` now, or refuses, or says that only waiting (at most
    /// `max_wait`) can tell.
    fn take(&self, held: &mut Held, cost: u64, max_wait: Duration) -> Now;

    /// Takes `cost` waiting at most `max_wait`; `asked` says whether
    /// [`take`](Self::take) just answered [`Now::Waits`] (asking again
    /// would count the demand twice). A kind that never waits takes now.
    fn take_waiting<'s>(
        &'s self,
        held: &'s mut Held,
        cost: u64,
        max_wait: Duration,
        _asked: bool,
    ) -> Waiting<'s> {
        let now = match self.take(held, cost, max_wait) {
            Now::Refused(cause) => Err(cause),
            Now::Taken | Now::Waits => Ok(()),
        };
        Box::pin(std::future::ready(now))
    }

    /// Gives back what taking took, once, by the rule that never mints.
    fn give_back(&self, held: &mut Held);

    /// Settles what taking `cost` took to `actual`, once.
    fn settle(&self, held: &mut Held, cost: u64, actual: u64);

    /// Whether a charge of this kind can be settled to an actual cost: a
    /// limit of work in flight charges no tokens.
    fn settles(&self) -> bool {
        true
    }

    /// Whether the client is told of this limit (a limit of work in flight
    /// has no window to advertise).
    fn advertises(&self) -> bool {
        true
    }

    /// Whether what taking took is held until the response whatever the
    /// rule gives back (a permit, released when the work is done).
    fn held_until_response(&self) -> bool {
        false
    }

    /// What this node can vouch for of the limit now: the units left and
    /// the wait until one more exists.
    fn live(&self, held: &Held) -> Option<(u64, Duration)>;

    /// The quota and window the limit advertises now.
    fn shape(&self, held: &Held) -> Option<Shape>;

    /// The wait until the limit would take `cost`, zero if it fits now, or
    /// why it never will; `None` when this node cannot tell.
    fn look(&self, held: &Held, cost: u64) -> Option<Result<Duration, AcquireError>>;

    /// Which limit this is, to tell two rules charging one limit apart from
    /// two limits; `None` for a limit no other rule can share.
    fn identity(&self, held: &Held) -> Option<Identity>;

    /// The partition key the limit is advertised under, if keyed.
    fn partition(
        &self,
        held: &Held,
        keys: &PartitionKeys,
        name: &PolicyName,
    ) -> Option<PartitionKey>;
}
