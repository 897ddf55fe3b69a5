//! The fleet's client: many API keys, each sending its requests in turn to
//! every node, and per key what was admitted against the fleet-wide bound.
//! The end-to-end test (`tests/stacks/tests/fleet_e2e.rs`) drives the fleet with it.

use std::time::{Duration, Instant};

use tollgate::Quota;

use super::server::{API_KEY, PER_KEY_POLICY};

/// What one API key got from the fleet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyTally {
    /// The API key.
    pub key: String,
    /// 200 answers.
    pub admitted: u64,
    /// 429 answers.
    pub refused: u64,
    /// The failure policy's answers: a 503 refusing under the per-key
    /// rule while the shared store does not answer (the nodes fail
    /// closed), as a `temporary-reduced-capacity` problem.
    pub unavailable: u64,
    /// Any other answer.
    pub other: u64,
}

/// What the whole run got, and how long it took.
#[derive(Debug)]
pub struct Tally {
    /// One per API key.
    pub keys: Vec<KeyTally>,
    /// From before the first request was sent to after the last answer
    /// arrived: it contains every admission on the store's clock, so
    /// `B + r·t` over it is a bound the fleet must keep.
    pub elapsed: Duration,
}

/// Sends `per_key` requests for each of `keys` API keys, all keys at once,
/// each key's requests one after the other and to the nodes in turn (its
/// first to a different node for each key).
pub async fn drive(nodes: &[String], keys: usize, per_key: usize) -> Result<Tally, reqwest::Error> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    let tasks: Vec<_> = (0..keys)
        .map(|index| {
            let client = client.clone();
            let nodes = nodes.to_vec();
            tokio::spawn(async move {
                let mut tally = KeyTally {
                    key: format!("key-{index:04}"),
                    ..KeyTally::default()
                };
                for request in 0..per_key {
                    let node = &nodes[(index + request) % nodes.len()];
                    let response = client.get(node).header(API_KEY, &tally.key).send().await?;
                    match response.status().as_u16() {
                        200 => tally.admitted += 1,
                        429 => tally.refused += 1,
                        503 if is_store_outage(&response.text().await?) => {
                            tally.unavailable += 1;
                        }
                        _ => tally.other += 1,
                    }
                }
                Ok::<_, reqwest::Error>(tally)
            })
        })
        .collect();
    let mut tallies = Vec::with_capacity(keys);
    for task in tasks {
        tallies.push(task.await.expect("a client task does not panic")?);
    }
    Ok(Tally {
        keys: tallies,
        elapsed: started.elapsed(),
    })
}

/// Whether a 503's body is the per-key rule's failure policy refusing:
/// reduced capacity, naming the rule. (Any other 503 is not the policy's.)
pub fn is_store_outage(problem: &str) -> bool {
    problem.contains("#temporary-reduced-capacity")
        && problem.contains(&format!("\"{PER_KEY_POLICY}\""))
}

impl Tally {
    /// The most any one key may have been admitted: `B + r·t` over the
    /// run, rounded down (admissions are whole).
    pub fn bound(&self, quota: &Quota) -> u64 {
        let (tokens, period) = quota.refill();
        let refilled = u128::from(tokens) * self.elapsed.as_nanos() / period.as_nanos().max(1);
        quota
            .capacity()
            .saturating_add(u64::try_from(refilled).unwrap_or(u64::MAX))
    }

    /// The keys admitted more than the bound.
    pub fn over_bound(&self, quota: &Quota) -> Vec<&KeyTally> {
        let bound = self.bound(quota);
        self.keys
            .iter()
            .filter(|key| key.admitted > bound)
            .collect()
    }

    /// Prints one line per key and the verdict.
    pub fn print(&self, quota: &Quota) {
        let bound = self.bound(quota);
        println!(
            "{:<10} {:>8} {:>8} {:>11} {:>6}  bound",
            "key", "admitted", "refused", "unavailable", "other"
        );
        for key in &self.keys {
            let verdict = if key.admitted > bound {
                "EXCEEDED"
            } else {
                "holds"
            };
            println!(
                "{:<10} {:>8} {:>8} {:>11} {:>6}  <= {bound}: {verdict}",
                key.key, key.admitted, key.refused, key.unavailable, key.other
            );
        }
        let admitted: u64 = self.keys.iter().map(|key| key.admitted).sum();
        println!(
            "{} keys, {admitted} admitted in {:.3} s; per key bound B + r·t = {bound}; {} over it",
            self.keys.len(),
            self.elapsed.as_secs_f64(),
            self.over_bound(quota).len()
        );
    }
}
