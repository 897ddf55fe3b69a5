//! Server nodes as child processes: the parent starts each with a command,
//! learns its address from the line it prints, and ends it by closing its
//! stdin (or killing it), so no node outlives the run.

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;

use tokio::net::TcpListener;
use tollgate::shared::Store;

use super::server;

/// What a node prints once it listens, before its URL.
const LISTENING: &str = "listening on ";

/// A node process, killed when dropped.
pub struct Node {
    child: Child,
    /// Held so the node's stdin stays open: it exits when it closes.
    _stdin: Option<ChildStdin>,
    /// The node's URL.
    pub url: String,
}

impl Node {
    /// Starts `command` as a node and waits for the line with its URL.
    pub fn spawn(mut command: Command) -> std::io::Result<Node> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            match lines.next() {
                Some(line) => {
                    if let Some(url) = line?.strip_prefix(LISTENING) {
                        break url.trim().to_owned();
                    }
                }
                None => {
                    let _ = child.kill();
                    let status = child.wait()?;
                    return Err(std::io::Error::other(format!(
                        "the node exited ({status}) before listening"
                    )));
                }
            }
        };
        // The rest of its output is not read: drained by a thread, so a
        // node that prints never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Node {
            child,
            _stdin: stdin,
            url,
        })
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs this process as a node on `store`: listens on a free loopback port, prints its URL for the parent, and
/// exits when its stdin closes (the parent ended, whichever way).
pub async fn run(store: Arc<impl Store>) -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await?;
    println!("{LISTENING}http://{}/", listener.local_addr()?);
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    server::serve(store, listener).await
}
