//! Front ends of the control API: a unix socket speaking newline-delimited
//! JSON, and a Prometheus text endpoint over HTTP. Both only read requests
//! and hand them to the control loop (`Server::try_next`); every handler runs
//! on the control core, never on a worker. A metrics scrape asks for the
//! text itself (no JSON on the way); the endpoint counts the scrapes it
//! could not answer (a client that went away, a slow or malformed head).
//!
//! Framing: one JSON object per line (UTF-8, '\n'-terminated, at most
//! `MAX_REQUEST` bytes); one response line per request, in order.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 1 << 20;
/// Concurrent socket clients; more are told to retry and closed.
pub const MAX_CLIENTS: usize = 256;
/// A client idle this long is disconnected.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a request may wait for the control loop (captures included).
const REPLY_TIMEOUT: Duration = Duration::from_secs(330);
/// A metrics request's head must arrive within this, and be at most this long.
const HTTP_HEAD_TIMEOUT: Duration = Duration::from_secs(3);
const HTTP_MAX_HEAD: usize = 8192;

/// Where a response goes.
pub struct Reply(SyncSender<String>);

/// The front ends' way to the control loop: its queue, and whether the
/// switch is stopping (then requests are answered at once, not queued).
#[derive(Clone)]
struct ToControl {
    tx: SyncSender<Request>,
    stopping: Arc<AtomicBool>,
}

impl Reply {
    pub fn send(self, line: String) {
        let _ = self.0.send(line);
    }
}

/// What a front end asks the control loop for, and where the answer goes.
pub enum Request {
    /// A request line of the API; answered with a response line.
    Api { line: String, reply: Reply },
    /// The Prometheus text (a scrape of /metrics); answered with the text.
    Metrics { reply: Reply },
}

/// What the metrics endpoint did, since start.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Scrapes answered 200.
    pub served: AtomicU64,
    /// Requests for another path (answered 404).
    pub not_found: AtomicU64,
    /// Requests that are not HTTP/1.x (400) or use another method than GET
    /// or HEAD (405).
    pub bad_request: AtomicU64,
    /// Requests that failed: head too slow (408), too long (431) or
    /// unreadable, the control loop busy (503), or the answer not written.
    pub failed: AtomicU64,
}

pub struct Server {
    rx: Receiver<Request>,
    stopping: Arc<AtomicBool>,
    socket: PathBuf,
    pub metrics_addr: Option<SocketAddr>,
    http: Arc<HttpCounters>,
}

fn error_line(code: &'static str, message: &str) -> String {
    crate::api::response(&serde_json::Value::Null, Err(crate::api::ApiError::new(code, None, message)))
}

impl Server {
    /// Binds the socket (mode 0660; a stale file from a dead switch is
    /// replaced, a live one is an error) and the metrics endpoint.
    pub fn bind(socket: &str, metrics: Option<&str>) -> Result<Server, String> {
        let path = PathBuf::from(socket);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("control.socket: cannot create {}: {e}", dir.display()))?;
        }
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                return Err(format!("control.socket: {socket} exists and is not a socket"));
            }
            if UnixStream::connect(&path).is_ok() {
                return Err(format!(
                    "control.socket: {socket} is in use by a running intswitch (stop it, or set another control.socket)"
                ));
            }
            std::fs::remove_file(&path).map_err(|e| format!("control.socket: cannot remove stale {socket}: {e}"))?;
        }
        let listener = UnixListener::bind(&path).map_err(|e| format!("control.socket: cannot bind {socket}: {e}"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660))
            .map_err(|e| format!("control.socket: chmod {socket}: {e}"))?;
        let (tx, rx) = mpsc::sync_channel::<Request>(1024);
        let stopping = Arc::new(AtomicBool::new(false));
        let tx = ToControl { tx, stopping: stopping.clone() };
        let http = Arc::new(HttpCounters::default());
        let metrics_addr = match metrics {
            Some(addr) => {
                let l =
                    TcpListener::bind(addr).map_err(|e| format!("control.metrics: cannot listen on {addr}: {e}"))?;
                let a = l.local_addr().map_err(|e| format!("control.metrics: {e}"))?;
                let (tx, http) = (tx.clone(), http.clone());
                std::thread::Builder::new()
                    .name("intswitch-metrics".into())
                    .spawn(move || serve_metrics(l, tx, &http))
                    .map_err(|e| format!("metrics thread: {e}"))?;
                Some(a)
            }
            None => None,
        };
        std::thread::Builder::new()
            .name("intswitch-api".into())
            .spawn(move || accept_loop(listener, tx))
            .map_err(|e| format!("control socket thread: {e}"))?;
        Ok(Server { rx, stopping, socket: path, metrics_addr, http })
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// The metrics endpoint's counters.
    pub fn http(&self) -> &HttpCounters {
        &self.http
    }

    /// The next request waiting for the control loop, if any.
    pub fn try_next(&self) -> Option<Request> {
        self.rx.try_recv().ok()
    }

    /// The control loop has ended: requests still queued, and any that
    /// come while the switch stops (which can take seconds: the workers'
    /// flow records are sent first), are answered `stopping` at once.
    pub fn close(&self) {
        self.stopping.store(true, Ordering::Release);
        // Dropping a request drops its reply: the front end answers.
        while self.rx.try_recv().is_ok() {}
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn accept_loop(listener: UnixListener, tx: ToControl) {
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        if active.load(Ordering::Acquire) >= MAX_CLIENTS {
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = writeln!(stream, "{}", error_line("busy", "too many clients; retry later"));
            continue;
        }
        active.fetch_add(1, Ordering::AcqRel);
        let (tx, active2) = (tx.clone(), active.clone());
        let spawned = std::thread::Builder::new().name("intswitch-client".into()).spawn(move || {
            serve_client(stream, tx);
            active2.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Reads request lines from one client until it closes, idles out or
/// misbehaves; each request is answered before the next is read.
fn serve_client(stream: UnixStream, tx: ToControl) {
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let Ok(mut out) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = match (&mut reader).take(MAX_REQUEST as u64 + 1).read_until(b'\n', &mut buf) {
            Ok(n) => n,
            Err(_) => return, // idle timeout or reset
        };
        if n == 0 {
            return; // closed
        }
        if buf.last() != Some(&b'\n') {
            if buf.len() > MAX_REQUEST {
                let _ =
                    writeln!(out, "{}", error_line("too_large", &format!("request longer than {MAX_REQUEST} bytes")));
            }
            return; // too large, or the client went away mid-request
        }
        let line = match String::from_utf8(std::mem::take(&mut buf)) {
            Ok(l) => l,
            Err(_) => {
                let _ = writeln!(out, "{}", error_line("bad_request", "request is not UTF-8"));
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let resp = ask(&tx, line);
        if writeln!(out, "{resp}").is_err() {
            return;
        }
    }
}

/// Passes a request to the control loop and waits for its answer; the
/// error is why there is none.
fn ask_for(to: &ToControl, make: impl FnOnce(Reply) -> Request) -> Result<String, (&'static str, &'static str)> {
    const STOPPING: (&str, &str) = ("stopping", "the switch is stopping");
    if to.stopping.load(Ordering::Acquire) {
        return Err(STOPPING);
    }
    let (rtx, rrx) = mpsc::sync_channel(1);
    match to.tx.try_send(make(Reply(rtx))) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => return Err(("busy", "control loop queue is full; retry")),
        Err(TrySendError::Disconnected(_)) => return Err(STOPPING),
    }
    rrx.recv_timeout(REPLY_TIMEOUT).map_err(|_| {
        // Its reply dropped unanswered as the loop ended.
        if to.stopping.load(Ordering::Acquire) {
            STOPPING
        } else {
            ("internal", "no answer from the control loop")
        }
    })
}

/// Passes a request line to the control loop and waits for its answer.
fn ask(to: &ToControl, line: String) -> String {
    ask_for(to, |reply| Request::Api { line, reply }).unwrap_or_else(|(code, m)| error_line(code, m))
}

fn serve_metrics(listener: TcpListener, tx: ToControl, http: &HttpCounters) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            http.failed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let counter = match serve_http(stream, &tx) {
            Ok(HttpOutcome::Served) => &http.served,
            Ok(HttpOutcome::NotFound) => &http.not_found,
            Ok(HttpOutcome::BadRequest) => &http.bad_request,
            Err(_) => &http.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the metrics endpoint answered a request (a failure is an Err).
enum HttpOutcome {
    Served,
    NotFound,
    BadRequest,
}

/// Why a request head was not read; the status that says so, if any.
pub enum HeadError {
    TooSlow,
    TooLong,
    Io(std::io::Error),
}

/// Whether `head` holds a whole request head (up to its blank line).
pub fn head_complete(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

/// Reads an HTTP request head (up to the blank line) within `within` in
/// all and `max` bytes: a client that trickles bytes in cannot hold the
/// thread (the metrics endpoint's one, a dashboard connection's) longer
/// than that. At the client's end of stream, what it sent (perhaps not a
/// whole head: `head_complete`).
pub fn read_http_head(stream: &mut TcpStream, within: Duration, max: usize) -> Result<Vec<u8>, HeadError> {
    let deadline = Instant::now() + within;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head_complete(&head) {
        if head.len() >= max {
            return Err(HeadError::TooLong);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::TooSlow);
        }
        stream.set_read_timeout(Some(left)).map_err(HeadError::Io)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(HeadError::TooSlow)
            }
            Err(e) => return Err(HeadError::Io(e)),
        }
    }
    Ok(head)
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    extra: &str,
    ctype: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{}",
        body.len(),
        if head_only { "" } else { body }
    )
}

/// Reads away (briefly, boundedly) what the client still sends after an
/// early answer: closing with unread bytes resets the connection, and the
/// client may lose the answer with it.
pub fn close_after_answer(stream: &mut TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + Duration::from_millis(300);
    let mut buf = [0u8; 4096];
    for _ in 0..64 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        if !matches!(stream.read(&mut buf), Ok(n) if n > 0) {
            break;
        }
    }
}

/// Answers one HTTP request: GET (or HEAD) /metrics with the text, another
/// path 404, another method 405, a request that is not HTTP/1.x 400, a
/// head too long 431 or too slow 408 (those two, and an unread head or
/// no answer from the control loop (503), are Err: failed).
fn serve_http(mut stream: TcpStream, tx: &ToControl) -> std::io::Result<HttpOutcome> {
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let head = match read_http_head(&mut stream, HTTP_HEAD_TIMEOUT, HTTP_MAX_HEAD) {
        Ok(h) => h,
        Err(e) => {
            let (status, why) = match e {
                HeadError::TooLong => ("431 Request Header Fields Too Large", "request head over 8192 bytes"),
                HeadError::TooSlow => ("408 Request Timeout", "request head not complete within 3 s"),
                HeadError::Io(e) => return Err(e),
            };
            if respond(&mut stream, status, "", "text/plain", &format!("{why}\n"), false).is_ok() {
                close_after_answer(&mut stream);
            }
            return Err(std::io::Error::other(why));
        }
    };
    let first = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
    let parts: Vec<&str> = first.split_whitespace().collect();
    let (method, path) = match parts[..] {
        [m, p, v] if v.starts_with("HTTP/1.") && p.starts_with('/') => (m, p),
        _ => {
            respond(&mut stream, "400 Bad Request", "", "text/plain", "not an HTTP/1.x request line\n", false)?;
            close_after_answer(&mut stream);
            return Ok(HttpOutcome::BadRequest);
        }
    };
    if !(path == "/metrics" || path.starts_with("/metrics?")) {
        respond(&mut stream, "404 Not Found", "", "text/plain", "only /metrics is served here\n", method == "HEAD")?;
        return Ok(HttpOutcome::NotFound);
    }
    if method != "GET" && method != "HEAD" {
        let body = "/metrics takes GET or HEAD\n";
        respond(&mut stream, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", "text/plain", body, false)?;
        close_after_answer(&mut stream);
        return Ok(HttpOutcome::BadRequest);
    }
    match ask_for(tx, |reply| Request::Metrics { reply }) {
        Ok(t) => {
            respond(&mut stream, "200 OK", "", "text/plain; version=0.0.4; charset=utf-8", &t, method == "HEAD")?;
            Ok(HttpOutcome::Served)
        }
        Err((_, m)) => {
            respond(&mut stream, "503 Service Unavailable", "", "text/plain", &format!("{m}\n"), false)?;
            Err(std::io::Error::other(m))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request line over a fresh connection; the answer line.
    fn request(socket: &Path) -> String {
        let mut s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        writeln!(s, r#"{{"version": 1, "id": 1, "cmd": "show_version", "args": {{}}}}"#).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        line
    }

    #[test]
    fn requests_at_and_after_the_loops_end_are_answered_stopping() {
        let socket = std::env::temp_dir().join(format!("intswitch-server-close-{}.sock", std::process::id()));
        let srv = Server::bind(socket.to_str().unwrap(), None).unwrap();
        // One the loop took and never answered: its reply is dropped.
        let client = {
            let socket = socket.clone();
            std::thread::spawn(move || request(&socket))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let taken = loop {
            if let Some(r) = srv.try_next() {
                break r;
            }
            assert!(Instant::now() < deadline, "the request did not reach the loop");
            std::thread::sleep(Duration::from_millis(5));
        };
        srv.close();
        drop(taken);
        let answer = client.join().unwrap();
        assert!(answer.contains(r#""code":"stopping""#), "{answer}");
        // One that comes after: answered at once, never queued.
        let answer = request(&socket);
        assert!(answer.contains(r#""code":"stopping""#) && answer.contains("the switch is stopping"), "{answer}");
        assert!(srv.try_next().is_none());
    }
}
