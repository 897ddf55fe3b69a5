//! A private three-master Redis Cluster per test: three `redis-server
//! --cluster-enabled yes` on free local ports (no persistence), joined by
//! `redis-cli --cluster create`, used once every node reports
//! `cluster_state:ok`; every node is killed when the cluster is dropped
//! (also when the test panics).
//!
//!
//! The nodes run with `cluster-require-full-coverage no`, so that a killed
//! master stops only its own slots, and a one-second node timeout, so that
//! the others notice it quickly. `redis-cli` is taken from `PATH`, or from
//! `TOLLGATE_REDIS_CLI`.

use std::process::Command;
use std::thread;
use std::time::Duration;

use crate::redis_server::{Options, RedisServer, skip};

const MASTERS: usize = 3;
/// Polls while the cluster forms or heals, and the pause between them: up
/// to 30 s on a slow, loaded CI machine.
const STATE_ATTEMPTS: usize = 600;
const STATE_PAUSE: Duration = Duration::from_millis(50);

/// A running three-master cluster owned by one test.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    access: Access,
}

/// How the nodes are reached, for a cluster over TLS or with ACL users.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// Listen with TLS only, clients and cluster bus (`--tls-cluster yes`).
    pub tls: bool,
    /// More server options: the TLS files, ACL users.
    pub server_args: Vec<String>,
    /// Options every `redis-cli` call needs: `--tls --cacert <file>`,
    /// `--user <name> --pass <password>`.
    pub cli_args: Vec<String>,
}

impl RedisCluster {
    /// Starts and joins the cluster, or explains why it cannot: `None`
    /// after a skip notice on a developer's machine, a panic with `CI` set.
    pub fn start(test: &str) -> Option<RedisCluster> {
        RedisCluster::start_with(test, Access::default())
    }

    /// [`start`](Self::start), the nodes reached as `access` says.
    pub fn start_with(test: &str, access: Access) -> Option<RedisCluster> {
        let mut options = Options {
            tls: access.tls,
            args: [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-require-full-coverage",
                "no",
            ]
            .map(String::from)
            .to_vec(),
        };
        if access.tls {
            options
                .args
                .extend(["--tls-cluster", "yes"].map(String::from));
        }
        options.args.extend(access.server_args.iter().cloned());
        let mut nodes = Vec::with_capacity(MASTERS);
        for _ in 0..MASTERS {
            nodes.push(RedisServer::start_with(test, &options)?);
        }
        let cluster = RedisCluster { nodes, access };
        let mut create = Command::new(cli_binary());
        create.args(&cluster.access.cli_args);
        create.args(["--cluster", "create"]);
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        match create.output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                return skip(
                    test,
                    &format!(
                        "redis-cli --cluster create failed: {}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    ),
                );
            }
            Err(e) => return skip(test, &format!("cannot run redis-cli: {e}")),
        }
        if let Err(e) = cluster.wait_until_ok() {
            return skip(test, &e);
        }
        Some(cluster)
    }

    /// The nodes' `redis://` (or `rediss://`) URLs, seeds for a cluster
    /// client.
    pub fn urls(&self) -> Vec<String> {
        let scheme = if self.access.tls { "rediss" } else { "redis" };
        self.nodes
            .iter()
            .map(|node| format!("{scheme}://127.0.0.1:{}/", node.port()))
            .collect()
    }

    /// Node `i` (0, 1 or 2).
    pub fn node(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Runs `redis-cli` against node `i` with `args` and returns its
    /// output; panics if it cannot run or the server answers an error.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        let text = self.try_cli(i, args);
        assert!(
            text.as_ref()
                .is_some_and(|t| !t.starts_with("ERR") && !t.starts_with("(error)")),
            "redis-cli {args:?} on node {i}: {text:?}"
        );
        text.unwrap_or_default()
    }

    /// `redis-cli` against node `i`: its trimmed output, or `None` if it
    /// could not run or the node is down.
    fn try_cli(&self, i: usize, args: &[&str]) -> Option<String> {
        let out = Command::new(cli_binary())
            .args(&self.access.cli_args)
            .args(["-h", "127.0.0.1", "-p"])
            .arg(self.nodes[i].port().to_string())
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())?;
        let text = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
        (!text.contains("Connection refused")).then_some(text)
    }

    /// Node `i`'s cluster node id.
    pub fn id(&self, i: usize) -> String {
        self.cli(i, &["CLUSTER", "MYID"])
    }

    /// The node that the first live node's map says serves `slot`.
    pub fn owner(&self, slot: u16) -> usize {
        let nodes = (0..MASTERS)
            .find_map(|i| self.try_cli(i, &["CLUSTER", "NODES"]))
            .expect("a live node");
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let serves = fields.iter().skip(8).any(|range| {
                let mut bounds = range.split('-').map(|b| b.parse::<u16>());
                match (bounds.next(), bounds.next()) {
                    (Some(Ok(low)), Some(Ok(high))) => (low..=high).contains(&slot),
                    (Some(Ok(only)), None) => only == slot,
                    _ => false,
                }
            });
            if serves {
                let port = fields[1].split(['@', ':']).nth(1).expect("ip:port@cport");
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port().to_string() == port)
                    .expect("a node of this cluster");
            }
        }
        panic!("no node serves slot {slot}");
    }

    /// Waits until every node reports `cluster_state:ok` and knows all
    /// three masters.
    pub fn wait_until_ok(&self) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..STATE_ATTEMPTS {
            let states: Vec<String> = (0..MASTERS)
                .map(|i| self.try_cli(i, &["CLUSTER", "INFO"]).unwrap_or_default())
                .collect();
            if states.iter().all(|s| {
                s.contains("cluster_state:ok")
                    && s.contains(&format!("cluster_known_nodes:{MASTERS}"))
            }) {
                return Ok(());
            }
            last = states.join(" | ");
            thread::sleep(STATE_PAUSE);
        }
        Err(format!(
            "the cluster did not reach cluster_state:ok: {last}"
        ))
    }
}

fn cli_binary() -> std::ffi::OsString {
    std::env::var_os("TOLLGATE_REDIS_CLI").unwrap_or_else(|| "redis-cli".into())
}
