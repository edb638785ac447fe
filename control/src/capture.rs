//! `capture`: mirrors one port's received or transmitted packets into a pcap
//! file without disturbing forwarding. Workers copy matching packets into
//! their capture queues (only while a capture runs); the control loop writes
//! them and answers the request when the count or the timeout is reached.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dataplane::pcap::PcapWriter;

use crate::api::views::{self, Captured, CAPTURE_MAX, CAPTURE_TIMEOUT_MAX_S};
use crate::api::{response, ApiError};
use crate::server::Reply;
use crate::switch::Switch;

/// The capture under way, if one is (one at a time).
pub type Slot = Option<CaptureJob>;

pub struct CaptureJob {
    port: u16,
    tx: bool,
    want: usize,
    got: usize,
    path: String,
    writer: PcapWriter<BufWriter<File>>,
    deadline: Instant,
    id: serde_json::Value,
    reply: Reply,
}

/// A capture request checked against the switch: port index, direction
/// (true: TX), count, path, timeout.
fn checked(sw: &Switch, a: &views::Capture) -> Result<(u16, bool, usize, Duration), ApiError> {
    let port = sw.port_index(&a.port)?;
    let tx = match a.direction.as_deref().unwrap_or("rx") {
        "rx" => false,
        "tx" => true,
        d => return Err(ApiError::bad_argument("direction", format!("'{d}' is not rx or tx"))),
    };
    if !(1..=CAPTURE_MAX).contains(&a.count) {
        return Err(ApiError::bad_argument("count", format!("count must be a number from 1 to {CAPTURE_MAX}")));
    }
    if !a.out.starts_with('/') {
        return Err(ApiError::bad_argument("out", "out must be an absolute path"));
    }
    let t = a.timeout_s.unwrap_or(10.0);
    if !(t > 0.0 && t <= CAPTURE_TIMEOUT_MAX_S) {
        return Err(ApiError::bad_argument(
            "timeout_s",
            format!("timeout_s must be a number of seconds, 0 < t <= {CAPTURE_TIMEOUT_MAX_S}"),
        ));
    }
    Ok((port, tx, a.count as usize, Duration::from_secs_f64(t)))
}

/// Starts a capture; the answer is sent when it ends.
pub fn start(
    sw: &Switch,
    slot: &mut Slot,
    a: &views::Capture,
    id: serde_json::Value,
    reply: Reply,
) -> Result<(), (ApiError, Reply)> {
    if slot.is_some() {
        return Err((ApiError::busy("a capture is already running"), reply));
    }
    let (port, tx, count, timeout) = match checked(sw, a) {
        Ok(c) => c,
        Err(e) => return Err((e, reply)),
    };
    let path = a.out.clone();
    let file = match File::create(&path) {
        Ok(f) => f,
        Err(e) => return Err((ApiError::bad_argument("out", format!("cannot create {path}: {e}")), reply)),
    };
    let writer = match PcapWriter::new(BufWriter::new(file), 65535) {
        Ok(w) => w,
        Err(e) => return Err((ApiError::bad_argument("out", format!("cannot write {path}: {e}")), reply)),
    };
    let mask = if tx { &sw.shared().capture_tx } else { &sw.shared().capture_rx };
    mask.fetch_or(1 << port, Ordering::Release);
    *slot =
        Some(CaptureJob { port, tx, want: count, got: 0, path, writer, deadline: Instant::now() + timeout, id, reply });
    Ok(())
}

/// Writes what the workers mirrored; finishes the job when it is complete.
pub fn progress(sw: &Switch, slot: &mut Slot) {
    let Some(mut job) = slot.take() else { return };
    let mut failed = None;
    for w in &sw.shared().workers {
        while job.got < job.want {
            let Some(c) = w.capture.pop() else { break };
            if c.port != job.port || c.tx != job.tx {
                continue;
            }
            if let Err(e) = job.writer.write(sw.tsc_to_wall_ns(c.tsc), c.mbuf.data()) {
                failed = Some(format!("writing {}: {e}", job.path));
                break;
            }
            job.got += 1;
        }
    }
    let done = job.got >= job.want || Instant::now() >= job.deadline || failed.is_some();
    if !done {
        *slot = Some(job);
        return;
    }
    finish(sw, job, failed);
}

/// Ends a running capture early (the switch is stopping).
pub fn abort(sw: &Switch, slot: &mut Slot, why: &str) {
    if let Some(job) = slot.take() {
        finish(sw, job, Some(why.to_string()));
    }
}

fn finish(sw: &Switch, job: CaptureJob, failed: Option<String>) {
    let mask = if job.tx { &sw.shared().capture_tx } else { &sw.shared().capture_rx };
    mask.fetch_and(!(1 << job.port), Ordering::Release);
    // Leftover copies are freed as they are dropped.
    for w in &sw.shared().workers {
        while w.capture.pop().is_some() {}
    }
    let mut out = job.writer.into_inner();
    let flushed = out.flush();
    let result = match (failed, flushed) {
        (Some(e), _) => Err(ApiError::internal(e)),
        (None, Err(e)) => Err(ApiError::internal(format!("writing {}: {e}", job.path))),
        (None, Ok(())) => serde_json::to_value(Captured {
            port: sw.port_names()[job.port as usize].clone(),
            direction: if job.tx { "tx" } else { "rx" }.into(),
            packets: job.got,
            requested: job.want,
            complete: job.got >= job.want,
            out: job.path,
        })
        .map_err(|e| ApiError::internal(e.to_string())),
    };
    job.reply.send(response(&job.id, result));
}

const _: () = assert!(dataplane::counters::MAX_PORTS <= 32, "capture masks are u32");
