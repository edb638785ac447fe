//! `capture`: mirrors one port's received or transmitted packets into a pcap
//! file without disturbing forwarding. Workers copy matching packets into
//! their capture queues (only while a capture runs); the control loop writes
//! them and answers the request when the count or the timeout is reached.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dataplane::pcap::PcapWriter;
use serde_json::json;

use crate::api::{response, ApiError};
use crate::server::Reply;
use crate::switch::Switch;

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

/// Starts a capture; the answer is sent when it ends.
#[allow(clippy::too_many_arguments)]
pub fn start(
    sw: &mut Switch,
    port: u16,
    tx: bool,
    count: usize,
    path: String,
    timeout: Duration,
    id: serde_json::Value,
    reply: Reply,
) -> Result<(), (ApiError, Reply)> {
    if sw.capture.is_some() {
        return Err((ApiError::busy("a capture is already running"), reply));
    }
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
    sw.capture =
        Some(CaptureJob { port, tx, want: count, got: 0, path, writer, deadline: Instant::now() + timeout, id, reply });
    Ok(())
}

/// Writes what the workers mirrored; finishes the job when it is complete.
pub fn progress(sw: &mut Switch) {
    let Some(mut job) = sw.capture.take() else { return };
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
        sw.capture = Some(job);
        return;
    }
    finish(sw, job, failed);
}

/// Ends a running capture early (the switch is stopping).
pub fn abort(sw: &mut Switch, why: &str) {
    if let Some(job) = sw.capture.take() {
        finish(sw, job, Some(why.to_string()));
    }
}

fn finish(sw: &mut Switch, job: CaptureJob, failed: Option<String>) {
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
        (None, Ok(())) => Ok(json!({
            "port": sw.port_names()[job.port as usize],
            "direction": if job.tx { "tx" } else { "rx" },
            "packets": job.got,
            "requested": job.want,
            "complete": job.got >= job.want,
            "out": job.path,
        })),
    };
    job.reply.send(response(&job.id, result));
}
