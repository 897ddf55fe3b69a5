//! Loom models of a local allowance's pool (`shared::LeasePool`): consumer
//! threads taking tokens, a refiller leasing from a model store, returns on
//! shutdown, and leases whose reply is lost.
//!
//! The model store is one atomic budget: a lease takes up to what it asks
//! for. Every model checks the invariant the shared bound rests on: tokens
//! taken from the pool never exceed tokens the store granted, and none is
//! lost or duplicated (`taken + drained + pooled + stranded == granted`).
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use loom_tests::model;
use tollgate::shared::{LeasePool, Take};

/// A shared budget of `budget` tokens, the pool, and the books of the run.
struct Node {
    pool: LeasePool,
    budget: AtomicU64,
    granted: AtomicU64,
    taken: AtomicU64,
    stranded: AtomicU64,
    /// Refills running now, counted around the store call: never above one.
    in_flight: AtomicU64,
}

impl Node {
    fn new(budget: u64) -> Arc<Self> {
        Arc::new(Node {
            pool: LeasePool::new(),
            budget: AtomicU64::new(budget),
            granted: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            stranded: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
        })
    }

    /// The store: debits up to `want` from the budget.
    fn lease(&self, want: u64) -> u64 {
        let before = self
            .budget
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                Some(left - left.min(want))
            })
            .unwrap();
        let granted = before.min(want);
        self.granted.fetch_add(granted, Ordering::AcqRel);
        granted
    }

    /// The claimant's refill; `reply_lost` models a reply that never
    /// arrives after the store debited the lease.
    fn refill(&self, want: u64, reply_lost: bool) {
        assert_eq!(
            self.in_flight.fetch_add(1, Ordering::AcqRel),
            0,
            "two refills in flight"
        );
        let granted = self.lease(want);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if reply_lost {
            self.stranded.fetch_add(granted, Ordering::AcqRel);
            self.pool.land(0);
        } else {
            self.pool.land(granted);
        }
    }

    /// One consumer call: take `cost`, and run the refill if it claimed it.
    fn consume(&self, cost: u64, low_water: u64, want: u64, reply_lost: bool) -> bool {
        let (taken, refill) = match self.pool.take(cost, low_water) {
            Take::Taken { refill } => (true, refill),
            Take::Short { refill } => (false, refill),
        };
        if taken {
            self.taken.fetch_add(cost, Ordering::AcqRel);
        }
        if refill {
            self.refill(want, reply_lost);
        }
        taken
    }

    /// The invariant: nothing taken beyond what was granted, nothing lost.
    fn assert_accounted(&self, drained: u64) {
        let granted = self.granted.load(Ordering::Acquire);
        let taken = self.taken.load(Ordering::Acquire);
        let stranded = self.stranded.load(Ordering::Acquire);
        assert!(
            taken <= granted - stranded,
            "taken {taken} of {granted} granted"
        );
        assert_eq!(taken + drained + self.pool.tokens() + stranded, granted);
    }
}

/// Two consumers drive their own refills (whoever crosses the low-water mark
/// claims it) against a store of 3 tokens.
#[test]
fn consumers_never_take_more_than_was_granted() {
    model(|| {
        let node = Node::new(3);
        let consumer = |node: Arc<Node>| {
            thread::spawn(move || {
                for _ in 0..2 {
                    node.consume(1, 2, 2, false);
                }
            })
        };
        let (a, b) = (consumer(Arc::clone(&node)), consumer(Arc::clone(&node)));
        a.join().unwrap();
        b.join().unwrap();
        node.assert_accounted(0);
    });
}

/// A lease lands while two consumers race for the pool's last token: exactly
/// the tokens there were, then the ones that landed, are taken.
#[test]
fn a_lease_landing_during_a_race_for_the_last_token() {
    model(|| {
        let node = Node::new(3);
        assert!(node.pool.claim_refill());
        node.pool.land(node.lease(1));
        assert!(node.pool.claim_refill());
        let granted = node.lease(2);
        let lander = {
            let node = Arc::clone(&node);
            thread::spawn(move || node.pool.land(granted))
        };
        let racer = |node: Arc<Node>| thread::spawn(move || node.consume(1, 0, 1, false));
        let (a, b) = (racer(Arc::clone(&node)), racer(Arc::clone(&node)));
        lander.join().unwrap();
        let passed = u64::from(a.join().unwrap()) + u64::from(b.join().unwrap());
        // One token was there before; two more landed at some point.
        assert!(passed >= 1);
        node.assert_accounted(0);
        assert_eq!(node.pool.tokens(), 3 - passed);
    });
}

/// A shutdown drain races consumers: what it drains plus what they took is
/// exactly what was granted, and nothing is taken after the drain but what
/// a later lease brought.
#[test]
fn shutdown_returns_exactly_what_is_left() {
    model(|| {
        let node = Node::new(4);
        assert!(node.pool.claim_refill());
        node.pool.land(node.lease(3));
        let drainer = {
            let node = Arc::clone(&node);
            thread::spawn(move || node.pool.drain())
        };
        let consumer = {
            let node = Arc::clone(&node);
            thread::spawn(move || {
                for _ in 0..2 {
                    node.consume(1, 1, 1, false);
                }
            })
        };
        let drained = drainer.join().unwrap();
        consumer.join().unwrap();
        node.assert_accounted(drained);
    });
}

/// A refill whose reply is lost after the store debited it strands its
/// tokens: fewer taken, never more, and the next refill can still run.
#[test]
fn a_lost_lease_reply_only_strands_tokens() {
    model(|| {
        let node = Node::new(4);
        let lossy = {
            let node = Arc::clone(&node);
            thread::spawn(move || {
                node.consume(1, 1, 2, true);
                node.consume(1, 1, 2, false)
            })
        };
        let steady = {
            let node = Arc::clone(&node);
            thread::spawn(move || node.consume(1, 1, 2, false))
        };
        lossy.join().unwrap();
        steady.join().unwrap();
        node.assert_accounted(0);
        assert!(!node.pool.refilling());
    });
}
