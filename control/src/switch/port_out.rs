//! The control core's frames out of data-plane ports (exports to
//! collectors behind a port) and the port load the workers put into INT
//! metadata.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dataplane::counters::MAX_PORTS;
use dataplane::dpdk::MbufStash;
use dataplane::tables::TableSpec;
use dataplane::worker::WorkerShared;

use super::Switch;
use crate::collector_tx::PortOut;

/// Exported frames out of data-plane ports: copied into an mbuf here and
/// sent by worker 0 (its `inject` queue, never waited on); destination MACs
/// from the neighbour table.
pub(super) struct PortSender<'a> {
    spec: &'a TableSpec,
    /// Worker 0 and the mbufs frames are built in; None: the workers are
    /// not running (nothing can be sent).
    tx: Option<(&'a WorkerShared, &'a mut MbufStash)>,
    /// Next hops to resolve.
    resolve: Vec<(IpAddr, u16)>,
}

impl<'a> PortSender<'a> {
    pub(super) fn new(spec: &'a TableSpec, tx: Option<(&'a WorkerShared, &'a mut MbufStash)>) -> PortSender<'a> {
        PortSender { spec, tx, resolve: Vec::new() }
    }
}

impl PortOut for PortSender<'_> {
    fn port_info(&self, port: u16, v6: bool) -> Option<([u8; 6], Option<IpAddr>)> {
        let p = self.spec.ports.get(port as usize)?;
        let ip = if v6 {
            p.ipv6.first().map(|(a, _)| IpAddr::from(*a))
        } else {
            p.ipv4.first().map(|(a, _)| IpAddr::from(*a))
        };
        Some((p.mac, ip))
    }

    fn neighbour(&mut self, port: u16, ip: IpAddr) -> Option<[u8; 6]> {
        let known = self.spec.neighbours.iter().find(|n| n.ip == ip && n.port == port).map(|n| n.mac);
        if known.is_none() && !self.resolve.contains(&(ip, port)) {
            self.resolve.push((ip, port));
        }
        known
    }

    fn transmit(&mut self, port: u16, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), String> {
        let (w, mbufs) = self.tx.as_mut().ok_or("the workers have stopped")?;
        let len = u16::try_from(len).map_err(|_| "frame longer than 65535 bytes".to_string())?;
        let mut m = mbufs.take().ok_or("no mbuf free")?;
        fill(m.append(len).ok_or("frame longer than an mbuf")?);
        w.inject.push((port, m)).map_err(|_| "worker 0's hand-off queue is full".to_string())
    }
}

impl Switch {
    /// Runs the report and AM-PM exporters; returns how many reports were
    /// sent. Frames for collectors behind a DPDK port go out through worker
    /// 0; unknown next hops get resolved.
    pub(super) fn export(&mut self) -> usize {
        let (now, mono) = (self.now_ns(), self.mono_ns());
        let mut out = PortSender::new(&self.spec, Some((&self.shared.workers[0], &mut self.export_mbufs)));
        let taken = self.exporter.as_mut().map_or(0, |ex| ex.poll(1 << 16, &mut out));
        // `int export pause` holds the flow records in R_G too.
        let paused = self.exporter.as_ref().is_some_and(|ex| ex.paused);
        let flows = match &mut self.flow_exporter {
            Some(fx) if !paused => fx.poll(1 << 16, &mut out),
            _ => 0,
        };
        if let (Some(ex), Some(setup)) = (&mut self.ampm_exporter, &self.spec.ampm) {
            ex.poll(now, mono, &self.shared, &setup.flows, &mut out);
        }
        for (ip, port) in std::mem::take(&mut out.resolve) {
            self.resolve(ip, port);
        }
        taken + flows
    }

    /// Every 100 ms: each port's TX utilisation and the pool's occupancy,
    /// which workers put into INT metadata.
    pub(super) fn sample_load(&mut self) {
        let now = Instant::now();
        if self.load_sample.as_ref().is_some_and(|(t, _)| now.duration_since(*t) < Duration::from_millis(100)) {
            return;
        }
        let bytes: Vec<u64> = self.ports.iter().map(|p| p.stats().obytes).collect();
        if let Some((t, prev)) = &self.load_sample {
            let dt = now.duration_since(*t).as_secs_f64();
            for (i, p) in self.ports.iter().enumerate().take(MAX_PORTS) {
                let speed = p.link().speed_mbps as f64 * 1e6;
                let util = if speed > 0.0 && dt > 0.0 {
                    let bps = bytes[i].saturating_sub(prev[i]) as f64 * 8.0 / dt;
                    ((bps / speed) * 10_000.0).round().min(10_000.0) as u32
                } else {
                    u32::MAX
                };
                self.shared.load.tx_util[i].store(util, Ordering::Relaxed);
            }
        }
        self.shared.load.pool_in_use.store(self.pool.in_use(), Ordering::Relaxed);
        self.load_sample = Some((now, bytes));
    }
}
