//! A fake Redis on a free local port that answers the connection's
//! handshake like a server (`PING`, `CLIENT`, `HELLO`, `SCRIPT LOAD`) and
//! every script call (`EVALSHA`, `EVAL`) with what the test chose: a
//! canned reply, or silence. For the faults a real server will not
//! produce: malformed or old-format replies, and a server that hangs.
//!
//! Only `std`; the threads end when the fake is dropped.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

/// What the fake answers to a script call.
#[derive(Clone, Debug)]
pub enum ScriptAnswer {
    /// These RESP bytes.
    Reply(Vec<u8>),
    /// Nothing, ever: the call hangs until the client gives up.
    Silence,
}

/// The running fake; stops accepting and answering when dropped.
pub struct FakeRedis {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl FakeRedis {
    /// Starts the fake, answering script calls with `answer`.
    pub fn start(answer: ScriptAnswer) -> FakeRedis {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a local port");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (answer, stopped) = (answer.clone(), Arc::clone(&stopped));
                        thread::spawn(move || serve(stream, &answer, &stopped));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => return,
                }
            }
        });
        FakeRedis { port, stop }
    }

    /// A `redis://` URL for the fake.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for FakeRedis {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(stream: TcpStream, answer: &ScriptAnswer, stop: &AtomicBool) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(20)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while !stop.load(Ordering::Relaxed) {
        let command = match read_command(&mut reader, stop) {
            Some(command) => command,
            None => return,
        };
        let name = command.first().map(|c| c.to_ascii_uppercase());
        let reply: Option<Vec<u8>> = match name.as_deref() {
            Some(b"EVALSHA" | b"EVAL") => match answer {
                ScriptAnswer::Reply(bytes) => Some(bytes.clone()),
                ScriptAnswer::Silence => None,
            },
            Some(b"SCRIPT") => {
                Some(b"$40\r\n0000000000000000000000000000000000000000\r\n".to_vec())
            }
            Some(b"PING") => Some(b"+PONG\r\n".to_vec()),
            _ => Some(b"+OK\r\n".to_vec()),
        };
        if let Some(reply) = reply
            && writer.write_all(&reply).is_err()
        {
            return;
        }
    }
}

/// One RESP command (an array of bulk strings), or `None` once the client
/// is gone or the fake stops.
fn read_command(reader: &mut BufReader<TcpStream>, stop: &AtomicBool) -> Option<Vec<Vec<u8>>> {
    let header = read_line(reader, stop)?;
    let count: usize = header.strip_prefix('*')?.parse().ok()?;
    let mut parts = Vec::with_capacity(count);
    for _ in 0..count {
        let length: usize = read_line(reader, stop)?.strip_prefix('$')?.parse().ok()?;
        let mut part = vec![0; length + 2];
        let mut filled = 0;
        while filled < part.len() {
            match reader.read(&mut part[filled..]) {
                Ok(0) => return None,
                Ok(n) => filled += n,
                Err(e) if is_timeout(&e) && !stop.load(Ordering::Relaxed) => {}
                Err(_) => return None,
            }
        }
        part.truncate(length);
        parts.push(part);
    }
    Some(parts)
}

fn read_line(reader: &mut BufReader<TcpStream>, stop: &AtomicBool) -> Option<String> {
    let mut line = String::new();
    loop {
        match reader.read_line(&mut line) {
            Ok(0) => return None,
            Ok(_) if line.ends_with("\r\n") => return Some(line.trim_end().to_string()),
            Ok(_) => {}
            Err(e) if is_timeout(&e) && !stop.load(Ordering::Relaxed) => {}
            Err(_) => return None,
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}
