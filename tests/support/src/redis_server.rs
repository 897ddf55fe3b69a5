//! A private `redis-server` per test: started on a free local port with no
//! persistence, answered PING before use, killed when dropped.
//!
//! Start a server with [`RedisServer::start`] (or
//! [`RedisServer::start_with`] for extra options: cluster mode, TLS), which
//! returns `None` (after printing why) when `redis-server` cannot be run on
//! a developer's machine, and panics instead when the `CI` environment
//! variable is set, so that CI never passes by skipping. The binary is
//! `redis-server` from `PATH`, or the path in `TOLLGATE_REDIS_SERVER`.
//!
//! Only `std`: usable from any test crate, sync or async, and from the
//! library's own unit tests.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many times a fresh port is tried when the server fails to start
/// (another process may take the port between our probe and its bind).
const PORT_ATTEMPTS: usize = 5;
/// PING attempts while a server starts, and the pause between them: up to
/// 20 s for a slow, loaded CI machine.
const PING_ATTEMPTS: usize = 400;
const PING_PAUSE: Duration = Duration::from_millis(50);

/// A running `redis-server` owned by one test.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    options: Options,
}

/// How a server listens and what else it is told.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Listen with TLS only (`--port 0 --tls-port <port>`); the TLS files
    /// go in `args`. Readiness is then a TCP connection, not a PING.
    pub tls: bool,
    /// More command-line options, e.g. `--cluster-enabled yes`.
    pub args: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free port, or explains why it cannot: returns
    /// `None` after printing a skip notice for `test` to stderr, unless the
    /// `CI` environment variable is set, in which case it panics.
    pub fn start(test: &str) -> Option<RedisServer> {
        RedisServer::start_with(test, &Options::default())
    }

    /// [`start`](Self::start) with `options`.
    pub fn start_with(test: &str, options: &Options) -> Option<RedisServer> {
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = match free_port() {
                Ok(port) => port,
                Err(e) => {
                    last_error = format!("no free local port: {e}");
                    continue;
                }
            };
            match RedisServer::launch(port, options, None) {
                Ok(server) => return Some(server),
                Err(StartError::NotInstalled(e)) => {
                    last_error = e;
                    break;
                }
                Err(StartError::Failed(e)) => last_error = e,
            }
        }
        skip(test, &format!("cannot start redis-server ({last_error})"))
    }

    /// Starts a server on `port`, waiting until it answers PING.
    pub fn start_on(port: u16) -> Result<RedisServer, StartError> {
        RedisServer::launch(port, &Options::default(), None)
    }

    /// Starts a server on `port` with `options`, in `dir` (a fresh one if
    /// `None`), and waits until it is ready.
    fn launch(
        port: u16,
        options: &Options,
        dir: Option<PathBuf>,
    ) -> Result<RedisServer, StartError> {
        let dir = match dir {
            Some(dir) => dir,
            None => scratch_dir(port).map_err(|e| StartError::Failed(format!("temp dir: {e}")))?,
        };
        let binary =
            std::env::var_os("TOLLGATE_REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
        let mut command = Command::new(&binary);
        if options.tls {
            command.args(["--port", "0", "--tls-port"]);
        } else {
            command.arg("--port");
        }
        let spawned = command
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--protected-mode", "yes"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .args(&options.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                let message = format!("{}: {e}", binary.to_string_lossy());
                return Err(if e.kind() == ErrorKind::NotFound {
                    StartError::NotInstalled(message)
                } else {
                    StartError::Failed(message)
                });
            }
        };
        let mut server = RedisServer {
            child: Some(child),
            port,
            dir,
            options: options.clone(),
        };
        for _ in 0..PING_ATTEMPTS {
            if (options.tls && listening(port)) || (!options.tls && ping(port)) {
                return Ok(server);
            }
            if let Some(child) = server.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(StartError::Failed(format!(
                    "redis-server on port {port} exited with {status}: {}",
                    server.log_tail()
                )));
            }
            thread::sleep(PING_PAUSE);
        }
        Err(StartError::Failed(format!(
            "redis-server on port {port} did not answer PING: {}",
            server.log_tail()
        )))
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A `redis://` URL for the server.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's clock in microseconds (`TIME`, in RESP over a plain
    /// connection): the clock a store's bound is measured on. Panics if the
    /// server does not answer.
    pub fn time_micros(&self) -> u64 {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
            .expect("connect to the test server for TIME");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("a read timeout");
        stream
            .write_all(b"*1\r\n$4\r\nTIME\r\n")
            .expect("send TIME");
        // `*2`, then two bulk strings: five lines, each ending in CRLF.
        let mut reply = Vec::new();
        let mut chunk = [0; 64];
        while reply.windows(2).filter(|w| w == b"\r\n").count() < 5 {
            let read = stream.read(&mut chunk).expect("read the TIME reply");
            assert!(
                read > 0,
                "redis closed the connection before answering TIME"
            );
            reply.extend_from_slice(&chunk[..read]);
        }
        let text = String::from_utf8(reply).expect("a TIME reply is ASCII");
        let lines: Vec<&str> = text.split("\r\n").collect();
        let number = |line: &str| -> u64 { line.parse().expect("a TIME reply holds integers") };
        number(lines[2]) * 1_000_000 + number(lines[4])
    }

    /// Kills the server (SIGKILL: no clean shutdown) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a new, empty server on the same port with the same options
    /// and directory (a cluster node finds its node id and slots again in
    /// its `nodes.conf`; nothing else is kept, without persistence),
    /// killing the current one first if it still runs.
    pub fn restart(&mut self) -> Result<(), StartError> {
        self.kill();
        let mut fresh = RedisServer::launch(self.port, &self.options, Some(self.dir.clone()))?;
        self.child = fresh.child.take();
        fresh.dir = PathBuf::new();
        Ok(())
    }

    /// The server's working directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The end of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Gives up on `test` because `why`: `None` after a skip notice on a
/// developer's machine, a panic when the `CI` environment variable is set.
pub fn skip<T>(test: &str, why: &str) -> Option<T> {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why}, and CI is set");
    }
    // Straight to the process's stderr: the test harness captures
    // `eprintln!` of passing tests, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why}; install redis-server and redis-tools \
         (apt-get install redis-server redis-tools) to run this test"
    );
    None
}

/// Why [`RedisServer::start_on`] failed.
#[derive(Debug)]
pub enum StartError {
    /// The binary does not exist: no other port will help.
    NotInstalled(String),
    /// It ran but did not come up (port taken, crashed, no PING reply).
    Failed(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::NotInstalled(e) => write!(f, "redis-server not installed: {e}"),
            StartError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// A port that was free a moment ago: the kernel's choice for port 0.
fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// A fresh empty directory for one server's working files and log.
fn scratch_dir(port: u16) -> std::io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "tollgate-redis-{}-{port}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Whether something accepts TCP connections on `port`: a TLS-only server
/// is ready once it listens.
fn listening(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
}

/// Whether a server on `port` answers PING with PONG, in RESP, with short
/// timeouts so that one attempt never hangs.
fn ping(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
        return false;
    };
    let timeout = Some(Duration::from_millis(500));
    if stream.set_read_timeout(timeout).is_err() || stream.set_write_timeout(timeout).is_err() {
        return false;
    }
    if stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

/// Starts this test's server, or returns from the test when one cannot be
/// started outside CI ([`RedisServer::start`] prints why; under CI it
/// panics).
#[macro_export]
macro_rules! start_server {
    ($test:expr) => {
        match $crate::redis_server::RedisServer::start($test) {
            Some(server) => server,
            None => return,
        }
    };
}
