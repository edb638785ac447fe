//! Neighbours on the control core: what the workers learned from ARP and
//! NDP, MACs one worker learned that the others should know, packets held
//! until their next hop's MAC is known, and the ARP requests and neighbour
//! solicitations that ask for it.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dataplane::forward::{self, ControlEvent};
use dataplane::mac_table::Sighting;
use dataplane::tables::NeighbourSpec;
use dataplane::worker::HeldPacket;

use super::Switch;
use crate::api::views::ResolutionCounters;
use crate::fields::on_link;

/// A packet waiting for its next hop's MAC, since when, from which worker.
pub(super) struct Held {
    since: Instant,
    worker: usize,
    packet: HeldPacket,
}

/// How long a packet waits for its next hop's MAC before it is dropped.
const HOLD_TIME: Duration = Duration::from_secs(1);
/// Packets held at once, all neighbours together.
const HOLD_MAX: usize = 1024;
/// Re-sends a resolution request for the same address at most this often.
const RESOLVE_INTERVAL: Duration = Duration::from_millis(500);
/// Events taken from one worker's queue per round.
const EVENTS_PER_ROUND: usize = 1024;

/// Held packets and resolutions under way.
#[derive(Default)]
pub(super) struct Neighbours {
    held: VecDeque<Held>,
    /// When each address was last asked for.
    resolving: std::collections::HashMap<IpAddr, Instant>,
    pub(super) counters: ResolutionCounters,
}

impl Switch {
    /// At stop, once the workers stopped: frees every packet still held for
    /// its next hop's MAC (here, or in a worker's held or reinject queue;
    /// their mbufs go back to the pool) and returns how many, for the final
    /// counters to count as `neighbour_unresolved`, as a second miss would.
    pub(super) fn drop_held(&mut self) -> u64 {
        let mut n = self.neighbours.held.len() as u64;
        self.neighbours.held.clear();
        for w in &self.shared.workers {
            while w.held.pop().is_some() {
                n += 1;
            }
            while w.reinject.pop().is_some() {
                n += 1;
            }
        }
        n
    }

    /// Handles events the workers queued: neighbour learning and resolution.
    pub(super) fn drain_events(&mut self) -> Result<(), String> {
        let mut learned = Vec::new();
        let mut resolve = Vec::new();
        for (wi, w) in self.shared.workers.clone().iter().enumerate() {
            for _ in 0..EVENTS_PER_ROUND {
                let Some(ev) = w.events.pop() else { break };
                match ev {
                    ControlEvent::Neighbour { ip, mac, port } => {
                        if self.learn_neighbour(ip, mac, port) {
                            learned.push(ip);
                        }
                    }
                    ControlEvent::Resolve { ip, port } => resolve.push((ip, port)),
                    ControlEvent::MacLearned(s) => self.share_mac(wi, s),
                }
            }
        }
        let now = Instant::now();
        for (wi, w) in self.shared.workers.iter().enumerate() {
            while let Some(packet) = w.held.pop() {
                self.neighbours.held.push_back(Held { since: now, worker: wi, packet });
            }
        }
        if !learned.is_empty() {
            self.publish()?;
        }
        // A held packet gets its second try once its next hop is learned, or
        // after HOLD_TIME (or when more than HOLD_MAX wait); a second miss
        // drops it in the worker, counted as neighbour_unresolved.
        let nb = &mut self.neighbours;
        let overfull = nb.held.len().saturating_sub(HOLD_MAX);
        let mut keep = VecDeque::with_capacity(nb.held.len());
        for (i, h) in std::mem::take(&mut nb.held).into_iter().enumerate() {
            let resolved = learned.contains(&h.packet.hop);
            if !(resolved || i < overfull || now.duration_since(h.since) >= HOLD_TIME) {
                keep.push_back(h);
                continue;
            }
            match self.shared.workers[h.worker].reinject.push(h.packet) {
                Ok(()) if !resolved => nb.counters.gave_up += 1,
                Ok(()) => {}
                // The worker has not drained its queue yet: retry next round.
                Err(packet) => keep.push_back(Held { packet, ..h }),
            }
        }
        nb.held = keep;
        for (ip, port) in resolve {
            self.resolve(ip, port);
        }
        Ok(())
    }

    /// Passes a MAC that worker `from` learned to every other worker; one
    /// whose queue is full misses it (counted, and it learns the address
    /// from the next announcement or from frames of its own).
    fn share_mac(&self, from: usize, s: Sighting) {
        for (wi, w) in self.shared.workers.iter().enumerate() {
            if wi != from && w.mac_sync.push(s).is_err() {
                w.mac_sync_lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records a neighbour if it is on one of the port's subnets; returns
    /// whether the tables changed. Configured entries are never overwritten.
    fn learn_neighbour(&mut self, ip: IpAddr, mac: [u8; 6], port: u16) -> bool {
        let Some(ps) = self.spec.ports.get(port as usize) else { return false };
        let ok = match ip {
            IpAddr::V4(a) => on_link(&ps.ipv4, a.octets()),
            IpAddr::V6(a) => on_link(&ps.ipv6, a.octets()),
        };
        if !ok {
            return false;
        }
        self.neighbours.resolving.remove(&ip);
        match self.spec.neighbours.iter_mut().find(|n| n.ip == ip) {
            Some(n) if n.permanent || (n.mac == mac && n.port == port) => false,
            Some(n) => {
                n.mac = mac;
                n.port = port;
                true
            }
            None => {
                self.spec.neighbours.push(NeighbourSpec { ip, mac, port, permanent: false });
                true
            }
        }
    }

    /// Sends an ARP request or neighbour solicitation through worker 0
    /// (at most every RESOLVE_INTERVAL per address); what it cannot send is
    /// counted by reason.
    pub(super) fn resolve(&mut self, ip: IpAddr, port: u16) {
        let now = Instant::now();
        if self.neighbours.resolving.get(&ip).is_some_and(|t| now.duration_since(*t) < RESOLVE_INTERVAL) {
            return;
        }
        let c = &mut self.neighbours.counters;
        let Some(ps) = self.spec.ports.get(port as usize) else { return };
        let has_address = if ip.is_ipv4() { !ps.ipv4.is_empty() } else { !ps.ipv6.is_empty() };
        if !has_address {
            c.no_address += 1;
            return;
        }
        let Some(mut m) = self.pool.alloc() else {
            c.no_mbuf += 1;
            return;
        };
        let Some(len) = request(&mut m, ps, ip) else {
            c.no_mbuf += 1;
            return;
        };
        m.set_len(len);
        if self.shared.workers[0].inject.push((port, m)).is_ok() {
            c.sent += 1;
            self.neighbours.resolving.insert(ip, now);
        } else {
            c.queue_full += 1;
        }
    }
}

/// Builds the ARP request or neighbour solicitation for `ip` out of port
/// `ps` into `m`, from the port's address on `ip`'s subnet (else its
/// first); None when the port has no address of the family or the buffer
/// is too short.
fn request(m: &mut dataplane::dpdk::Mbuf, ps: &dataplane::tables::PortState, ip: IpAddr) -> Option<usize> {
    Some(match ip {
        IpAddr::V4(a) => {
            let (src, _) = ps.ipv4.iter().find(|(p, l)| on_link(&[(*p, *l)], a.octets())).or(ps.ipv4.first())?;
            forward::build_arp_request(m.append(60)?, ps.mac, *src, a.octets())
        }
        IpAddr::V6(a) => {
            let (src, _) = ps.ipv6.iter().find(|(p, l)| on_link(&[(*p, *l)], a.octets())).or(ps.ipv6.first())?;
            forward::build_ns(m.append(86)?, ps.mac, *src, a.octets())
        }
    })
}
