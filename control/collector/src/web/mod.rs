//! `intcollector --web ADDR:PORT`: a live dashboard. The decode loop hands
//! points to a bounded channel without waiting (a full channel skips the
//! point and counts it); one thread folds them into a tick every
//! [`TICK`] and sends the tick to every browser over server-sent events.
//! Each browser has its own bounded queue: a slow one loses ticks
//! (counted), never stalls decoding or the other browsers. The page is
//! static files compiled into the binary.

pub mod dashboard;
mod http;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dashboard::Dashboard;
pub use dashboard::{Point, ReportPoint, Totals};

/// How often the dashboard draws a point per series.
pub const TICK: Duration = Duration::from_millis(500);

/// Points the decode loop may have handed over before the next tick.
const FEED_CAPACITY: usize = 1 << 14;

/// Ticks a browser may fall behind before it loses them.
const CLIENT_QUEUE: usize = 64;

/// Browsers (and other HTTP clients) served at once.
const MAX_CONNECTIONS: usize = 16;

/// Counters of the web side, shown on the page and in the summary.
#[derive(Default)]
pub struct WebCounters {
    /// Points the decode loop could not hand over (dashboard busy).
    pub skipped: AtomicU64,
    /// Ticks not sent to a browser whose queue was full.
    pub client_dropped: AtomicU64,
    pub requests: AtomicU64,
    /// Requests answered 4xx/5xx (unknown path, method, malformed, busy).
    pub refused: AtomicU64,
    pub clients: AtomicU64,
}

/// The dashboard (its ring is the history) and the subscribers, shared by
/// the tick and HTTP threads.
pub(crate) struct Hub {
    dash: Dashboard,
    clients: Vec<SyncSender<Arc<str>>>,
}

impl Hub {
    /// A new browser: the history so far and its queue of future ticks.
    pub(crate) fn subscribe(hub: &Mutex<Hub>) -> (Vec<Arc<str>>, Receiver<Arc<str>>) {
        let (tx, rx) = sync_channel(CLIENT_QUEUE);
        let mut h = hub.lock().unwrap_or_else(|e| e.into_inner());
        h.clients.push(tx);
        (h.dash.ring.iter().cloned().collect(), rx)
    }

    pub(crate) fn history(hub: &Mutex<Hub>) -> Vec<Arc<str>> {
        hub.lock().unwrap_or_else(|e| e.into_inner()).dash.ring.iter().cloned().collect()
    }
}

/// The decode loop's end: never blocks.
pub struct Feed {
    tx: SyncSender<Point>,
    pub counters: Arc<WebCounters>,
    pub addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Feed {
    pub fn send(&self, p: Point) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(p) {
            self.counters.skipped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The web side's counters as JSON (the summary's `web`).
    pub fn summary(&self) -> serde_json::Value {
        counters_json(&self.counters)
    }

    /// Stops the tick thread; the accept thread and open browser streams
    /// end at their next connection or write, or with the process (this
    /// thread may be in another namespace than the listener: --netns).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

fn counters_json(c: &WebCounters) -> serde_json::Value {
    serde_json::json!({
        "skipped": c.skipped.load(Ordering::Relaxed),
        "client_dropped": c.client_dropped.load(Ordering::Relaxed),
        "requests": c.requests.load(Ordering::Relaxed),
        "refused": c.refused.load(Ordering::Relaxed),
        "clients": c.clients.load(Ordering::Relaxed),
    })
}

/// Binds `addr` and starts serving; `points` ticks are kept per series,
/// `max_flows` flows get series.
pub fn start(addr: &str, points: usize, max_flows: usize) -> Result<Feed, String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("--web {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let (tx, rx) = sync_channel(FEED_CAPACITY);
    let counters = Arc::new(WebCounters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let hub = Arc::new(Mutex::new(Hub { dash: Dashboard::new(max_flows, points), clients: Vec::new() }));
    let ticker = {
        let (hub, counters, stop) = (hub.clone(), counters.clone(), stop.clone());
        std::thread::Builder::new()
            .name("web-tick".into())
            .spawn(move || tick_loop(rx, &hub, &counters, &stop))
            .map_err(|e| e.to_string())?
    };
    {
        let (counters, stop) = (counters.clone(), stop.clone());
        std::thread::Builder::new()
            .name("web-accept".into())
            .spawn(move || http::accept_loop(listener, hub, counters, stop, MAX_CONNECTIONS))
            .map_err(|e| e.to_string())?;
    }
    Ok(Feed { tx, counters, addr: local, stop, ticker: Some(ticker) })
}

fn tick_loop(rx: Receiver<Point>, hub: &Mutex<Hub>, c: &WebCounters, stop: &AtomicBool) {
    let lock = || hub.lock().unwrap_or_else(|e| e.into_inner());
    let mut next = Instant::now() + TICK;
    while !stop.load(Ordering::Relaxed) {
        match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
            // (Contended only while a browser connects.)
            Ok(p) => lock().dash.add(p),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if Instant::now() < next {
            continue;
        }
        next += TICK;
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let mut h = lock();
        let line = h.dash.tick(now_ms, counters_json(c));
        h.clients.retain(|tx| match tx.try_send(line.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                c.client_dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        });
    }
}
