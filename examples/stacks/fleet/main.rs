//! A fleet-wide limit per API key: three axum servers share each key's
//! budget through one store, and a client drives many keys across them,
//! printing per key what was admitted against the bound `B + r·t`. It
//! exits non-zero if any key got more.
//!
//! ```text
//! cargo run -p tollgate-examples --example fleet
//! cargo run -p tollgate-examples --example fleet -- --redis redis://127.0.0.1:6379/
//! ```
//!
//! Without `--redis` the store is the in-process `LocalStore`, which cannot
//! be shared across processes: the three servers are then three tokio
//! tasks of this process, each with its own `KeyedAllowance` (its own view
//! of every key, as a process would have) and its own port. With `--redis`
//! they are three processes (this program, started with `serve`).

mod client;
mod nodes;
mod server;

use std::process::ExitCode;
use std::sync::Arc;

use tollgate::shared::LocalStore;

/// Nodes in the fleet.
const NODES: usize = 3;
/// API keys the client drives.
const KEYS: usize = 50;
/// Requests per key, three times its budget.
const PER_KEY: usize = 30;

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let nodes = match args.as_slice() {
        [] => in_process().await?,
        ["--redis", url] => processes(url)?,
        ["serve", "--redis", url, "--prefix", prefix] => {
            return serve(url, prefix).await.map(|()| ExitCode::SUCCESS);
        }
        _ => {
            eprintln!("usage: fleet [--redis URL]");
            return Ok(ExitCode::FAILURE);
        }
    };
    let urls: Vec<String> = nodes.iter().map(|node| node.url().to_owned()).collect();
    let tally = client::drive(&urls, KEYS, PER_KEY).await?;
    tally.print(&server::per_key_quota());
    Ok(if tally.over_bound(&server::per_key_quota()).is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A node of this run: a task of this process, or a child process.
enum Running {
    Task(String),
    Process(nodes::Node),
}

impl Running {
    fn url(&self) -> &str {
        match self {
            Running::Task(url) => url,
            Running::Process(node) => &node.url,
        }
    }
}

/// Three servers as tasks of this process on one `LocalStore`.
async fn in_process() -> Result<Vec<Running>, Box<dyn std::error::Error>> {
    println!(
        "in-process store: {NODES} servers as tasks of this process (use --redis URL for {NODES} processes)"
    );
    let store = Arc::new(LocalStore::new(server::per_key_quota()));
    let mut running = Vec::with_capacity(NODES);
    for _ in 0..NODES {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        running.push(Running::Task(format!("http://{}/", listener.local_addr()?)));
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            if let Err(error) = server::serve(store, listener).await {
                eprintln!("server: {error}");
            }
        });
    }
    Ok(running)
}

/// Three processes of this program, each a server on the Redis at `url`.
fn processes(url: &str) -> Result<Vec<Running>, Box<dyn std::error::Error>> {
    println!("redis store at {url}: {NODES} server processes");
    // Every node of this run shares one prefix; another run gets fresh
    // budgets under its own.
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let prefix = format!(
        "fleet-example:{}:{}:",
        std::process::id(),
        started.as_millis()
    );
    let program = std::env::current_exe()?;
    (0..NODES)
        .map(|_| {
            let mut command = std::process::Command::new(&program);
            command.args(["serve", "--redis", url, "--prefix", &prefix]);
            Ok(Running::Process(nodes::Node::spawn(command)?))
        })
        .collect()
}

/// This process as one server on the Redis at `url`.
async fn serve(url: &str, prefix: &str) -> Result<(), Box<dyn std::error::Error>> {
    let store = tollgate::shared::RedisStore::connect(
        url,
        server::per_key_quota(),
        prefix,
        server::STORE_WAIT,
    )
    .await?;
    nodes::run(Arc::new(store)).await
}
