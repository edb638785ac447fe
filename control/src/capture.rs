//! `capture`: mirrors one port's received or transmitted packets into a pcap
//! file without disturbing forwarding. Workers copy matching packets into
//! their capture queues (only while a capture runs); the control loop writes
//! them and answers the request when the count or the timeout is reached, or
//! the switch stops. Each copy carries its worker's copy number, so the
//! answer counts the copies a full queue (or an empty pool) cost the file.

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
    copies: CopyNumbers,
    id: serde_json::Value,
    reply: Reply,
}

/// Why a capture ended, as its answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Count,
    Timeout,
    Stopped,
}

impl Ended {
    fn name(self) -> &'static str {
        match self {
            Ended::Count => "count",
            Ended::Timeout => "timeout",
            Ended::Stopped => "stopped",
        }
    }
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
    // Read after the mask is set: copies made since are this capture's.
    let copies = CopyNumbers::new(copies_made(sw));
    *slot = Some(CaptureJob {
        port,
        tx,
        want: count,
        got: 0,
        path,
        writer,
        deadline: Instant::now() + timeout,
        copies,
        id,
        reply,
    });
    Ok(())
}

/// Writes what the workers mirrored; finishes the job when it is complete
/// or its time is up.
pub fn progress(sw: &Switch, slot: &mut Slot) {
    let Some(mut job) = slot.take() else { return };
    let ended = if Instant::now() >= job.deadline {
        write_last(sw, &mut job, Ended::Timeout).map(Some)
    } else {
        write_queued(sw, &mut job).map(|()| (job.got >= job.want).then_some(Ended::Count))
    };
    match ended {
        Ok(None) => *slot = Some(job),
        Ok(Some(e)) => finish(sw, job, Ok(e)),
        Err(e) => finish(sw, job, Err(e)),
    }
}

/// Ends a running capture early (the switch is stopping): what the workers
/// mirrored so far is written, and the answer says how far it got.
pub fn stop(sw: &Switch, slot: &mut Slot) {
    if let Some(mut job) = slot.take() {
        let ended = write_last(sw, &mut job, Ended::Stopped);
        finish(sw, job, ended);
    }
}

/// The last pass of a capture that ends before its count: the copies made
/// up to now are written, and those dropped after each worker's last one
/// written are missed too (the file would have held them).
fn write_last(sw: &Switch, job: &mut CaptureJob, why: Ended) -> Result<Ended, String> {
    let made = copies_made(sw);
    write_queued(sw, job)?;
    if job.got >= job.want {
        return Ok(Ended::Count);
    }
    job.copies.end_early(&made);
    Ok(why)
}

/// Writes the copies the workers' queues hold, up to the count.
fn write_queued(sw: &Switch, job: &mut CaptureJob) -> Result<(), String> {
    for (i, w) in sw.shared().workers.iter().enumerate() {
        while job.got < job.want {
            let Some(c) = w.capture.pop() else { break };
            if !job.copies.take(i, c.seq, c.port == job.port && c.tx == job.tx) {
                continue;
            }
            job.writer
                .write(sw.tsc_to_wall_ns(c.tsc), c.mbuf.data())
                .map_err(|e| format!("writing {}: {e}", job.path))?;
            job.got += 1;
        }
    }
    Ok(())
}

/// Each worker's copies made so far (`capture_seq`).
fn copies_made(sw: &Switch) -> Vec<u64> {
    sw.shared().workers.iter().map(|w| w.capture_seq.load(Ordering::Acquire)).collect()
}

/// Which of the workers' copies a capture writes, and its file's gaps: each
/// worker numbers its copies, queued or dropped, so a jump between two
/// copies written is copies dropped between them.
#[derive(Debug)]
struct CopyNumbers {
    /// Per worker, the number its next copy should have.
    next: Vec<u64>,
    /// Copies dropped that the file would have held.
    missed: u64,
}

impl CopyNumbers {
    /// From the copies each worker had made when the capture began.
    fn new(made: Vec<u64>) -> CopyNumbers {
        CopyNumbers { next: made, missed: 0 }
    }

    /// Whether worker `w`'s copy `seq` goes into the file; `ours`: of the
    /// capture's port and direction.
    fn take(&mut self, w: usize, seq: u64, ours: bool) -> bool {
        let Some(next) = self.next.get_mut(w) else { return false };
        // Made before this capture began.
        if seq < *next {
            return false;
        }
        // Not ours: an earlier capture's, made as it ended; no gap of ours.
        if ours {
            self.missed += seq - *next;
        }
        *next = seq + 1;
        ours
    }

    /// A capture ending before its count: what each worker made up to
    /// `made` and the file does not hold was dropped.
    fn end_early(&mut self, made: &[u64]) {
        self.missed += made.iter().zip(&self.next).map(|(m, n)| m.saturating_sub(*n)).sum::<u64>();
    }
}

fn finish(sw: &Switch, job: CaptureJob, ended: Result<Ended, String>) {
    let mask = if job.tx { &sw.shared().capture_tx } else { &sw.shared().capture_rx };
    mask.fetch_and(!(1 << job.port), Ordering::Release);
    // Leftover copies are freed as they are dropped.
    for w in &sw.shared().workers {
        while w.capture.pop().is_some() {}
    }
    let mut out = job.writer.into_inner();
    let flushed = out.flush();
    let result = match (ended, flushed) {
        (Err(e), _) => Err(ApiError::internal(e)),
        (Ok(_), Err(e)) => Err(ApiError::internal(format!("writing {}: {e}", job.path))),
        (Ok(ended), Ok(())) => serde_json::to_value(Captured {
            port: sw.port_names()[job.port as usize].clone(),
            direction: if job.tx { "tx" } else { "rx" }.into(),
            packets: job.got,
            requested: job.want,
            complete: job.got >= job.want,
            ended: ended.name().into(),
            missed: job.copies.missed,
            out: job.path,
        })
        .map_err(|e| ApiError::internal(e.to_string())),
    };
    job.reply.send(response(&job.id, result));
}

const _: () = assert!(dataplane::counters::MAX_PORTS <= 32, "capture masks are u32");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_in_sequence_leave_no_gap() {
        let mut c = CopyNumbers::new(vec![10, 0]);
        assert!((10..20).all(|s| c.take(0, s, true)));
        assert!((0..5).all(|s| c.take(1, s, true)));
        assert_eq!(c.missed, 0);
        c.end_early(&[20, 5]);
        assert_eq!(c.missed, 0, "nothing made after the last copy written");
    }

    #[test]
    fn a_jump_counts_the_copies_dropped_between() {
        let mut c = CopyNumbers::new(vec![100, 7]);
        assert!(c.take(0, 100, true));
        assert!(c.take(0, 104, true), "101-103 dropped");
        assert!(c.take(1, 9, true), "7 and 8 dropped");
        assert_eq!(c.missed, 5);
    }

    #[test]
    fn older_copies_and_other_ports_are_not_written_nor_gaps() {
        let mut c = CopyNumbers::new(vec![50]);
        assert!(!c.take(0, 49, true), "made before the capture began");
        assert!(!c.take(0, 50, false), "an earlier capture's port");
        assert!(c.take(0, 51, true));
        assert_eq!(c.missed, 0);
        assert!(!c.take(3, 0, true), "no such worker");
    }

    #[test]
    fn an_early_end_counts_the_tail_dropped() {
        let mut c = CopyNumbers::new(vec![0, 0]);
        assert!(c.take(0, 0, true));
        assert!(c.take(1, 0, true));
        // Worker 0 made 4 copies (1-3 dropped), worker 1 none after its
        // last one written.
        c.end_early(&[4, 1]);
        assert_eq!(c.missed, 3);
        // A copy made after the numbers were read is not a gap.
        let mut c = CopyNumbers::new(vec![0]);
        assert!(c.take(0, 0, true) && c.take(0, 1, true));
        c.end_early(&[1]);
        assert_eq!(c.missed, 0);
    }
}
