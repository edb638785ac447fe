//! intcollector's Redis export (issue 34 §6): each decoded record as an
//! entry of a capped stream (`XADD int:events|int:flows|int:reports|
//! int:histograms MAXLEN ~ N * r <json>`), histogram chunks also as hash
//! fields (`HSET int:hist:<node>:<metric> <first bin> <counts>`), pipelined
//! per batch over TCP or a unix socket (RESP, written here: two commands
//! and their replies need no client library).
//!
//! A dead or slow store never stops the decoding: a batch that cannot be
//! written or answered is dropped and counted, the connection is closed
//! and tried again with a doubling backoff (0.1 s to 5 s); records that
//! arrive meanwhile are dropped and counted too.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Where the store listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tcp(String),
    Unix(String),
}

impl Target {
    /// `redis://HOST:PORT` or `redis+unix:///PATH`.
    pub fn parse(url: &str) -> Result<Target, String> {
        if let Some(a) = url.strip_prefix("redis://") {
            let a = a.trim_end_matches('/');
            if a.is_empty() || !a.contains(':') {
                return Err(format!("'{url}': redis://HOST:PORT needs a host and a port"));
            }
            Ok(Target::Tcp(a.to_string()))
        } else if let Some(p) = url.strip_prefix("redis+unix://") {
            if !p.starts_with('/') {
                return Err(format!("'{url}': redis+unix:///PATH needs an absolute path"));
            }
            Ok(Target::Unix(p.to_string()))
        } else {
            Err(format!("'{url}' is not redis://HOST:PORT or redis+unix:///PATH"))
        }
    }
}

enum Conn {
    Tcp(BufReader<TcpStream>),
    Unix(BufReader<UnixStream>),
}

impl Conn {
    fn open(t: &Target, timeout: Duration) -> std::io::Result<Conn> {
        Ok(match t {
            Target::Tcp(a) => {
                let s = TcpStream::connect(a)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                s.set_nodelay(true)?;
                Conn::Tcp(BufReader::new(s))
            }
            Target::Unix(p) => {
                let s = UnixStream::connect(p)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                Conn::Unix(BufReader::new(s))
            }
        })
    }

    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Conn::Tcp(r) => r.get_mut().write_all(b),
            Conn::Unix(r) => r.get_mut().write_all(b),
        }
    }

    fn reader(&mut self) -> &mut dyn BufRead {
        match self {
            Conn::Tcp(r) => r,
            Conn::Unix(r) => r,
        }
    }
}

/// What the export counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RedisCounters {
    /// Commands the store accepted.
    pub written: u64,
    /// Commands it answered with an error.
    pub errors: u64,
    /// Commands dropped: no connection, or lost with their batch.
    pub dropped: u64,
    pub connects: u64,
    pub connection_lost: u64,
}

pub struct RedisSink {
    target: Target,
    maxlen: u64,
    conn: Option<Conn>,
    /// The batch: commands in RESP, and how many.
    batch: Vec<u8>,
    queued: u64,
    next_try: Instant,
    backoff: Duration,
    pub counters: RedisCounters,
}

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long a write or a reply may take before the store counts as gone:
/// longer than a loaded host's scheduling stall, since a batch whose replies
/// time out counts as dropped although the store may have taken it.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Commands a batch holds at most before it is sent.
const BATCH_MAX: u64 = 4096;

/// One command in RESP: an array of bulk strings.
fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Reads one reply; Ok(false) for an error reply.
fn reply(r: &mut dyn BufRead) -> std::io::Result<bool> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the store closed the connection"));
    }
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not a RESP reply");
    match line.as_bytes().first() {
        Some(b'+') | Some(b':') => Ok(true),
        Some(b'-') => Ok(false),
        Some(b'$') => {
            let n: i64 = line[1..].trim().parse().map_err(|_| bad())?;
            if n >= 0 {
                let mut body = vec![0u8; n as usize + 2];
                r.read_exact(&mut body)?;
            }
            Ok(true)
        }
        Some(b'*') => {
            let n: i64 = line[1..].trim().parse().map_err(|_| bad())?;
            let mut ok = true;
            for _ in 0..n.max(0) {
                ok &= reply(r)?;
            }
            Ok(ok)
        }
        _ => Err(bad()),
    }
}

impl RedisSink {
    pub fn new(target: Target, maxlen: u64) -> RedisSink {
        RedisSink {
            target,
            maxlen,
            conn: None,
            batch: Vec::with_capacity(1 << 16),
            queued: 0,
            next_try: Instant::now(),
            backoff: BACKOFF_MIN,
            counters: RedisCounters::default(),
        }
    }

    /// Adds `json` to stream `stream` (capped near `maxlen` entries).
    pub fn xadd(&mut self, stream: &str, json: &str) {
        let maxlen = self.maxlen.to_string();
        command(
            &mut self.batch,
            &[b"XADD", stream.as_bytes(), b"MAXLEN", b"~", maxlen.as_bytes(), b"*", b"r", json.as_bytes()],
        );
        self.queued += 1;
        if self.queued >= BATCH_MAX {
            self.flush();
        }
    }

    /// Sets `field` of hash `key`.
    pub fn hset(&mut self, key: &str, field: &str, value: &str) {
        command(&mut self.batch, &[b"HSET", key.as_bytes(), field.as_bytes(), value.as_bytes()]);
        self.queued += 1;
        if self.queued >= BATCH_MAX {
            self.flush();
        }
    }

    /// Sends the batch and reads its replies. Without a connection (and
    /// none to be had yet) the batch is dropped and counted.
    pub fn flush(&mut self) {
        if self.queued == 0 {
            return;
        }
        let n = std::mem::take(&mut self.queued);
        if self.conn.is_none() && Instant::now() >= self.next_try {
            match Conn::open(&self.target, IO_TIMEOUT) {
                Ok(c) => {
                    self.conn = Some(c);
                    self.counters.connects += 1;
                    self.backoff = BACKOFF_MIN;
                }
                Err(_) => {
                    self.next_try = Instant::now() + self.backoff;
                    self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
        let Some(conn) = &mut self.conn else {
            self.counters.dropped += n;
            self.batch.clear();
            return;
        };
        let sent = conn.write_all(&self.batch).and_then(|()| {
            let (mut ok, mut err) = (0, 0);
            for _ in 0..n {
                if reply(conn.reader())? {
                    ok += 1;
                } else {
                    err += 1;
                }
            }
            Ok((ok, err))
        });
        self.batch.clear();
        match sent {
            Ok((ok, err)) => {
                self.counters.written += ok;
                self.counters.errors += err;
            }
            Err(_) => {
                // Which of the batch the store took is unknown: all of it
                // counts as dropped.
                self.counters.dropped += n;
                self.counters.connection_lost += 1;
                self.conn = None;
                self.next_try = Instant::now() + self.backoff;
            }
        }
    }

    pub fn summary(&self) -> serde_json::Value {
        let c = &self.counters;
        serde_json::json!({ "redis_summary": {
            "written": c.written, "errors": c.errors, "dropped": c.dropped,
            "connects": c.connects, "connection_lost": c.connection_lost,
        }})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(Target::parse("redis://127.0.0.1:6379"), Ok(Target::Tcp("127.0.0.1:6379".into())));
        assert_eq!(Target::parse("redis+unix:///tmp/r.sock"), Ok(Target::Unix("/tmp/r.sock".into())));
        for bad in ["redis://", "redis://host", "http://x:1", "redis+unix://rel/path"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn commands_and_replies_in_resp() {
        let mut out = Vec::new();
        command(&mut out, &[b"HSET", b"k", b"f", b"v"]);
        assert_eq!(out, b"*4\r\n$4\r\nHSET\r\n$1\r\nk\r\n$1\r\nf\r\n$1\r\nv\r\n");
        let mut r: &[u8] = b"$15\r\n1700000000000-0\r\n:1\r\n-ERR wrong\r\n+OK\r\n*2\r\n:1\r\n$-1\r\n";
        let got: Vec<bool> = (0..5).map(|_| reply(&mut r).unwrap()).collect();
        assert_eq!(got, [true, true, false, true, true]);
        assert!(reply(&mut r).is_err(), "end of stream");
    }

    #[test]
    fn without_a_store_records_are_dropped_and_counted() {
        let dir = std::env::temp_dir().join(format!("redis-none-{}", std::process::id()));
        let mut s = RedisSink::new(Target::Unix(dir.join("none.sock").display().to_string()), 100);
        s.xadd("int:flows", "{}");
        s.hset("int:hist:1:queue", "0", "[1]");
        s.flush();
        assert_eq!(s.counters, RedisCounters { dropped: 2, ..RedisCounters::default() });
        s.xadd("int:flows", "{}");
        s.flush();
        assert_eq!(s.counters.dropped, 3, "within the backoff: not even tried");
    }
}
