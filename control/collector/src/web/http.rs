//! The dashboard's HTTP side: GET of its own files, the tick stream
//! (`/events`, server-sent events) and the history (`/api/ticks`). Anything
//! else is refused with a status: other paths 404, other methods 405,
//! malformed requests 400, a head over 8 KiB 431, one not complete within
//! 10 s 408, more than the connection limit 503. HEAD answers as GET
//! without the body.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Hub, WebCounters};

/// A request line and headers larger than this are refused.
const MAX_REQUEST: usize = 8 << 10;

/// A client that sends nothing, or takes nothing, for this long is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle keep-alive comment on the event stream (also how a closed browser
/// is noticed when no tick comes).
const HEARTBEAT: Duration = Duration::from_secs(15);

struct Asset {
    path: &'static str,
    mime: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset { path: "/", mime: "text/html; charset=utf-8", body: include_str!("assets/index.html") },
    Asset { path: "/index.html", mime: "text/html; charset=utf-8", body: include_str!("assets/index.html") },
    Asset { path: "/app.js", mime: "text/javascript; charset=utf-8", body: include_str!("assets/app.js") },
    Asset { path: "/plot.js", mime: "text/javascript; charset=utf-8", body: include_str!("assets/plot.js") },
    Asset { path: "/style.css", mime: "text/css; charset=utf-8", body: include_str!("assets/style.css") },
];

pub(super) fn accept_loop(
    listener: TcpListener,
    hub: Arc<Mutex<Hub>>,
    c: Arc<WebCounters>,
    stop: Arc<AtomicBool>,
    max: usize,
) {
    let open = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut s) = conn else { continue };
        c.requests.fetch_add(1, Ordering::Relaxed);
        let _ = s.set_read_timeout(Some(IO_TIMEOUT));
        let _ = s.set_write_timeout(Some(IO_TIMEOUT));
        if open.load(Ordering::Relaxed) >= max {
            c.refused.fetch_add(1, Ordering::Relaxed);
            let _ = respond(&mut s, "503 Service Unavailable", "", "text/plain", b"too many connections\n", false);
            continue;
        }
        open.fetch_add(1, Ordering::Relaxed);
        let (hub, cc, o, stop) = (hub.clone(), c.clone(), open.clone(), stop.clone());
        let spawned = std::thread::Builder::new().name("web-client".into()).spawn(move || {
            serve(s, &hub, &cc, &stop);
            o.fetch_sub(1, Ordering::Relaxed);
        });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::Relaxed);
            c.refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn respond(
    s: &mut TcpStream,
    status: &str,
    extra: &str,
    mime: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {mime}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
X-Content-Type-Options: nosniff\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )?;
    if !head_only {
        s.write_all(body)?;
    }
    s.flush()
}

/// Answers a request refused before it was served, then closes as the
/// metrics endpoint does (what the client still sends read away, so the
/// close does not reset the answer away).
fn refuse(s: &mut TcpStream, status: &str, extra: &str, why: &str) {
    if respond(s, status, extra, "text/plain", format!("{why}\n").as_bytes(), false).is_ok() {
        control::server::close_after_answer(s);
    }
}

/// Why a request was not read: the status that says so (None: the client
/// went away, nobody to answer) and the reason.
type Unread = (Option<&'static str>, &'static str);

/// Reads the request head (line and headers, up to the blank line) within
/// `within` in all and `MAX_REQUEST` bytes, so a client that trickles
/// bytes in holds its connection slot no longer than that; returns
/// (method, path) or why not.
fn read_request(s: &mut TcpStream, within: Duration) -> Result<(String, String), Unread> {
    use control::server::{head_complete, read_http_head, HeadError};
    let head = match read_http_head(s, within, MAX_REQUEST) {
        Ok(h) if h.is_empty() => return Err((None, "no request")),
        Ok(h) if !head_complete(&h) => return Err((Some("400 Bad Request"), "request head cut short")),
        Ok(h) => h,
        Err(HeadError::TooLong) => {
            return Err((Some("431 Request Header Fields Too Large"), "request head over 8 KiB"))
        }
        Err(HeadError::TooSlow) => return Err((Some("408 Request Timeout"), "request head not complete within 10 s")),
        Err(HeadError::Io(_)) => return Err((None, "socket error")),
    };
    let bad = (Some("400 Bad Request"), "not an HTTP/1.x request line");
    let line = head.split(|&b| b == b'\n').next().ok_or(bad)?;
    let line = std::str::from_utf8(line).map_err(|_| bad)?;
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(target), Some(version), None) if version.starts_with("HTTP/1.") => {
            let path = target.split('?').next().unwrap_or("").to_string();
            Ok((method.to_string(), path))
        }
        _ => Err(bad),
    }
}

fn serve(mut s: TcpStream, hub: &Mutex<Hub>, c: &WebCounters, stop: &AtomicBool) {
    let (method, path) = match read_request(&mut s, IO_TIMEOUT) {
        Ok(r) => r,
        Err((status, why)) => {
            c.refused.fetch_add(1, Ordering::Relaxed);
            if let Some(status) = status {
                refuse(&mut s, status, "", why);
            }
            return;
        }
    };
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        c.refused.fetch_add(1, Ordering::Relaxed);
        refuse(&mut s, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", "only GET and HEAD");
        return;
    }
    if let Some(a) = ASSETS.iter().find(|a| a.path == path) {
        let _ = respond(&mut s, "200 OK", "", a.mime, a.body.as_bytes(), head_only);
        return;
    }
    match path.as_str() {
        "/api/ticks" => {
            let ticks = Hub::history(hub);
            let mut body = String::from("[");
            for (i, t) in ticks.iter().enumerate() {
                if i > 0 {
                    body.push(',');
                }
                body.push_str(t);
            }
            body.push_str("]\n");
            let _ = respond(&mut s, "200 OK", "", "application/json", body.as_bytes(), head_only);
        }
        "/api/stats" => {
            let body = super::counters_json(c).to_string() + "\n";
            let _ = respond(&mut s, "200 OK", "", "application/json", body.as_bytes(), head_only);
        }
        "/events" if head_only => {
            let _ = s.write_all(EVENTS_HEAD.as_bytes());
        }
        "/events" => events(s, hub, c, stop),
        _ => {
            c.refused.fetch_add(1, Ordering::Relaxed);
            let _ = respond(&mut s, "404 Not Found", "", "text/plain", b"not found\n", head_only);
        }
    }
}

/// The event stream's response head.
const EVENTS_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
X-Content-Type-Options: nosniff\r\nConnection: keep-alive\r\n\r\n";

/// The tick stream: the history first, then every tick as it closes.
fn events(mut s: TcpStream, hub: &Mutex<Hub>, c: &WebCounters, stop: &AtomicBool) {
    if s.write_all(EVENTS_HEAD.as_bytes()).and_then(|_| s.write_all(b"retry: 2000\n\n")).is_err() {
        return;
    }
    let (history, rx) = Hub::subscribe(hub);
    c.clients.fetch_add(1, Ordering::Relaxed);
    let send = |s: &mut TcpStream, line: &str| write!(s, "data: {line}\n\n").and_then(|_| s.flush());
    let mut ok = history.iter().all(|t| send(&mut s, t).is_ok());
    while ok && !stop.load(Ordering::Relaxed) {
        ok = match rx.recv_timeout(HEARTBEAT) {
            Ok(t) => send(&mut s, &t).is_ok(),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => s.write_all(b": keep-alive\n\n").is_ok(),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => false,
        };
    }
    c.clients.fetch_sub(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn get(addr: std::net::SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(req).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // Reads until close or the first event of a stream.
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if out.windows(6).any(|w| w == b"data: ") && out.ends_with(b"\n\n") {
                break;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn serves_its_files_and_the_stream_and_refuses_the_rest() {
        let feed = super::super::start("127.0.0.1:0", 10, 4).unwrap();
        let a = feed.addr;
        let page = get(a, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(page.starts_with("HTTP/1.1 200 OK") && page.contains("<canvas"), "{page}");
        assert!(get(a, b"GET /plot.js HTTP/1.0\r\n\r\n").contains("text/javascript"));
        assert!(get(a, b"GET /../../etc/passwd HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        let post = get(a, b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
        assert!(post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET, HEAD\r\n"), "{post}");
        assert!(get(a, b"GARBAGE\r\n\r\n").starts_with("HTTP/1.1 400"));
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(10_000));
        assert!(get(a, long.as_bytes()).starts_with("HTTP/1.1 431"));
        // HEAD: GET's status and headers, no body.
        let head = get(a, b"HEAD /app.js HTTP/1.1\r\n\r\n");
        let js = get(a, b"GET /app.js HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"), "{head}");
        assert_eq!(head, js.split("\r\n\r\n").next().unwrap().to_string() + "\r\n\r\n");
        assert!(get(a, b"HEAD /nothing HTTP/1.1\r\n\r\n").ends_with("\r\n\r\n"));
        let ev = get(a, b"HEAD /events HTTP/1.1\r\n\r\n");
        assert!(ev.starts_with("HTTP/1.1 200") && ev.ends_with("\r\n\r\n"), "{ev}");
        feed.send(super::super::Point::Totals(super::super::Totals { reports: 7, ..Default::default() }));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !get(a, b"GET /api/ticks HTTP/1.1\r\n\r\n").contains("\"reports\":7") {
            assert!(std::time::Instant::now() < deadline, "no tick with the fed totals");
            std::thread::sleep(Duration::from_millis(100));
        }
        // A new stream starts with the history.
        let ev = get(a, b"GET /events HTTP/1.1\r\n\r\n");
        assert!(ev.contains("text/event-stream") && ev.contains("\"reports\":7"), "{ev}");
        let stats = get(a, b"GET /api/stats HTTP/1.1\r\n\r\n");
        let body: serde_json::Value = serde_json::from_str(stats.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["refused"], 5, "{body}");
        feed.stop();
    }

    /// A head that trickles in past the time allowed is answered 408; one
    /// cut short 400; a connection closed before a byte has nobody to answer.
    #[test]
    fn a_slow_or_cut_request_head_is_refused_with_its_status() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(a).unwrap();
            for b in b"GET / HTT" {
                s.write_all(&[*b]).unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
            s
        });
        let (mut s, _) = l.accept().unwrap();
        assert_eq!(read_request(&mut s, Duration::from_millis(200)).unwrap_err().0, Some("408 Request Timeout"));
        drop(client.join().unwrap());
        let mut c = TcpStream::connect(a).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
        drop(c);
        let (mut s, _) = l.accept().unwrap();
        assert_eq!(read_request(&mut s, Duration::from_secs(5)).unwrap_err().0, Some("400 Bad Request"));
        drop(TcpStream::connect(a).unwrap());
        let (mut s, _) = l.accept().unwrap();
        assert_eq!(read_request(&mut s, Duration::from_secs(5)).unwrap_err().0, None);
    }

    #[test]
    fn a_stalled_browser_blocks_neither_the_feed_nor_other_browsers() {
        let feed = super::super::start("127.0.0.1:0", 4, 4).unwrap();
        let mut s = TcpStream::connect(feed.addr).unwrap();
        s.write_all(b"GET /events HTTP/1.1\r\n\r\n").unwrap();
        // It never reads; the feed takes points without waiting meanwhile.
        let t0 = std::time::Instant::now();
        for i in 0..200_000u64 {
            feed.send(super::super::Point::Totals(super::super::Totals { reports: i, ..Default::default() }));
        }
        assert!(t0.elapsed() < Duration::from_secs(5));
        // A second browser still gets the stream.
        let ev = get(feed.addr, b"GET /events HTTP/1.1\r\n\r\n");
        assert!(ev.contains("data: {"), "{ev}");
        drop(s);
        feed.stop();
    }
}
