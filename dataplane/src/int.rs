//! INT-MD v2.1 stages on a packet: source (insert shim + header + own
//! metadata), transit (push one hop's metadata), sink (extract, then restore
//! the original packet). Presence by UDP destination port: UDP traffic gets
//! NPT=1 (the original dport saved in the shim), anything else an inserted
//! UDP header with NPT=2 (the original IP protocol saved). IPv4, and IPv6
//! whose upper layer follows the fixed header.
//!
//! Checksums are updated incrementally (RFC 1624): the INT block always
//! starts at an even offset inside the UDP payload, so the one's-complement
//! sum of what is inserted or removed adjusts the UDP checksum directly; a
//! zero UDP checksum stays zero.

use crate::parse::{PacketMeta, PROTO_UDP};
use crate::pktbuf::PacketBuf;
use crate::wire::checksum;
use crate::wire::int_md::{self, emit_hop, hop_words, HopMetadata, IntMd, IntMdRepr, Npt, INT_HDR_LEN};
use crate::DropReason;

/// What a switch puts into INT packets (from the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntParams {
    pub udp_port: u16,
    pub bitmap: u16,
    /// Hops that may push (the source's RHC, counting itself).
    pub max_hops: u8,
    pub domain_id: u16,
    /// The source pushes its own metadata too.
    pub source_pushes: bool,
}

/// Why a stage left a packet alone (not an error: counted as an event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not an IP packet with a parsed upper layer, or IPv6 with extension headers.
    NotApplicable,
    /// Shim + header alone would exceed the egress MTU (source).
    Mtu,
    /// No headroom left in the buffer.
    NoRoom,
    /// Already carries INT (source) or carries none (transit, sink).
    Presence,
}

/// What transit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transit {
    Pushed,
    /// RHC was 0: nothing pushed, E set.
    Exhausted,
    /// The push would exceed the MTU: nothing pushed, M set.
    MtuExceeded,
}

/// What the sink found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sunk {
    pub hops: usize,
    /// D was set: drop the packet after reporting.
    pub discard: bool,
    /// Bytes removed.
    pub removed: usize,
}

fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn wr16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Adjusts a checksum for data whose one's-complement sum went from `old`
/// to `new` (both folded 16-bit sums).
fn adjust(csum: u16, old: u32, new: u32) -> u16 {
    let old = checksum::fold(old);
    let new = checksum::fold(new);
    !checksum::fold((!csum) as u32 + (!old) as u32 + new as u32)
}

/// The UDP checksum field after an adjustment: zero stays zero (not
/// computed), a computed zero is sent as 0xFFFF.
fn udp_adjust(csum: u16, old: u32, new: u32) -> u16 {
    if csum == 0 {
        return 0;
    }
    match adjust(csum, old, new) {
        0 => 0xffff,
        c => c,
    }
}

/// Adds `delta` to the IP packet length (IPv4 total length with its header
/// checksum, or IPv6 payload length).
fn ip_len_add(b: &mut [u8], meta: &PacketMeta, delta: i32) {
    let l3 = meta.l3_offset;
    if meta.key.ip_version() == 4 {
        let old = rd16(b, l3 + 2);
        let new = (old as i32 + delta) as u16;
        wr16(b, l3 + 2, new);
        let c = checksum::update16(rd16(b, l3 + 10), old, new);
        wr16(b, l3 + 10, c);
    } else {
        let old = rd16(b, l3 + 4);
        wr16(b, l3 + 4, (old as i32 + delta) as u16);
    }
}

/// Sets the IP protocol (IPv4, with its checksum) or next header (IPv6).
fn set_ip_proto(b: &mut [u8], meta: &PacketMeta, proto: u8) {
    let l3 = meta.l3_offset;
    if meta.key.ip_version() == 4 {
        let old = rd16(b, l3 + 8);
        b[l3 + 9] = proto;
        let c = checksum::update16(rd16(b, l3 + 10), old, rd16(b, l3 + 8));
        wr16(b, l3 + 10, c);
    } else {
        b[l3 + 6] = proto;
    }
}

fn ip_len(b: &[u8], meta: &PacketMeta) -> usize {
    let l3 = meta.l3_offset;
    if meta.key.ip_version() == 4 {
        rd16(b, l3 + 2) as usize
    } else {
        40 + rd16(b, l3 + 4) as usize
    }
}

fn applicable(meta: &PacketMeta) -> bool {
    let v = meta.key.ip_version();
    meta.l4_offset != 0 && (v == 4 || (v == 6 && meta.l4_offset == meta.l3_offset + 40))
}

/// Offset of the INT block, when the packet carries one on `udp_port`.
pub fn find(b: &[u8], meta: &PacketMeta, udp_port: u16) -> Option<usize> {
    (applicable(meta) && meta.key.proto() == PROTO_UDP && meta.key.dst_port() == udp_port)
        .then_some(meta.l4_offset + 8)
        .filter(|at| *at <= b.len())
}

/// INT source: inserts shim + header (+ its own metadata).
pub fn source(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    p: &IntParams,
    own: &HopMetadata,
    mtu: usize,
) -> Result<usize, Skip> {
    if !applicable(meta) {
        return Err(Skip::NotApplicable);
    }
    if find(pkt.bytes(), meta, p.udp_port).is_some() {
        return Err(Skip::Presence);
    }
    let hop_ml = hop_words(p.bitmap);
    let udp = meta.key.proto() == PROTO_UDP;
    let extra = if udp { 0 } else { 8 }; // inserted UDP header
    let base = ip_len(pkt.bytes(), meta);
    if base + extra + INT_HDR_LEN > mtu {
        return Err(Skip::Mtu);
    }
    // Push our own metadata only if it fits too; otherwise start INT with M set.
    let push = p.source_pushes && p.max_hops > 0 && base + extra + INT_HDR_LEN + hop_ml * 4 <= mtu;
    let md_len = if push { hop_ml * 4 } else { 0 };
    let n = extra + INT_HDR_LEN + md_len;
    let at = if udp { meta.l4_offset + 8 } else { meta.l4_offset };
    if !pkt.insert_at(at, n) {
        return Err(Skip::NoRoom);
    }
    let b = pkt.bytes_mut();
    let l4 = meta.l4_offset;
    let (npt, saved, blk) =
        if udp { (Npt::UdpPort, rd16(b, l4 + 2), at) } else { (Npt::InsertedUdp, meta.key.proto() as u16, at + 8) };
    IntMdRepr {
        npt,
        saved,
        flag_d: false,
        hop_ml: hop_ml as u8,
        rhc: if push { p.max_hops - 1 } else { p.max_hops },
        bitmap: p.bitmap,
        domain_id: p.domain_id,
        ds_instruction: 0,
        ds_flags: 0,
        stack_words: (md_len / 4) as u8,
    }
    .emit(&mut b[blk..blk + INT_HDR_LEN]);
    if push {
        emit_hop(p.bitmap, own, &mut b[blk + INT_HDR_LEN..blk + INT_HDR_LEN + md_len]);
    } else if p.source_pushes && p.max_hops > 0 {
        b[blk + 4] |= 0x02; // M: our own metadata did not fit
    }
    if udp {
        let (old_port, old_len) = (rd16(b, l4 + 2), rd16(b, l4 + 4));
        let new_len = old_len + n as u16;
        wr16(b, l4 + 2, p.udp_port);
        wr16(b, l4 + 4, new_len);
        // Length counts twice: UDP header and pseudo-header.
        let old = old_port as u32 + 2 * old_len as u32;
        let new = p.udp_port as u32 + 2 * new_len as u32 + checksum::sum(0, &b[blk..blk + INT_HDR_LEN + md_len]);
        let c = udp_adjust(rd16(b, l4 + 6), old, new);
        wr16(b, l4 + 6, c);
    } else {
        let l4_len = ip_len(b, meta) - (l4 - meta.l3_offset);
        let entropy = (meta.key.hash64() as u16) | 0xc000;
        wr16(b, l4, entropy);
        wr16(b, l4 + 2, p.udp_port);
        wr16(b, l4 + 4, (l4_len + n) as u16);
        wr16(b, l4 + 6, 0); // the inserted UDP header carries no checksum
        set_ip_proto(b, meta, PROTO_UDP);
    }
    ip_len_add(b, meta, n as i32);
    Ok(n)
}

/// INT transit: pushes this hop's metadata (`HopML` x 4 bytes) or sets E / M.
/// `meta` is the packet's parse before the push.
pub fn transit(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    udp_port: u16,
    md: &HopMetadata,
    mtu: usize,
) -> Result<Transit, DropReason> {
    let blk = find(pkt.bytes(), meta, udp_port).ok_or(DropReason::IntTruncated)?;
    let (hop_ml, rhc, bitmap) = {
        let v = IntMd::new_checked(&pkt.bytes()[blk..])?;
        (v.hop_ml(), v.rhc(), v.bitmap())
    };
    if hop_words(bitmap) != hop_ml {
        return Err(DropReason::IntBadHopMl);
    }
    let l4 = meta.l4_offset;
    let old_hdr = checksum::sum(0, &pkt.bytes()[blk..blk + INT_HDR_LEN]);
    let n = hop_ml * 4;
    let outcome = if rhc == 0 {
        IntMd::new_checked(&mut pkt.bytes_mut()[blk..])?.set_flag_e();
        Transit::Exhausted
    } else if ip_len(pkt.bytes(), meta) + n > mtu {
        IntMd::new_checked(&mut pkt.bytes_mut()[blk..])?.set_flag_m();
        Transit::MtuExceeded
    } else {
        if !pkt.insert_at(blk + INT_HDR_LEN, n) {
            return Err(DropReason::IntTruncated);
        }
        let b = pkt.bytes_mut();
        emit_hop(bitmap, md, &mut b[blk + INT_HDR_LEN..blk + INT_HDR_LEN + n]);
        let mut v = IntMd::new_checked(&mut b[blk..])?;
        v.grow(hop_ml as u8);
        v.set_rhc(rhc - 1);
        Transit::Pushed
    };
    let pushed = if outcome == Transit::Pushed { n } else { 0 };
    let b = pkt.bytes_mut();
    let mut old = old_hdr;
    let mut new = checksum::sum(0, &b[blk..blk + INT_HDR_LEN + pushed]);
    if pushed > 0 {
        let old_len = rd16(b, l4 + 4);
        let new_len = old_len + pushed as u16;
        wr16(b, l4 + 4, new_len);
        old += 2 * old_len as u32;
        new += 2 * new_len as u32;
        ip_len_add(b, meta, pushed as i32);
    }
    let c = udp_adjust(rd16(b, l4 + 6), old, new);
    wr16(b, l4 + 6, c);
    Ok(outcome)
}

/// Removes the metadata stack (keeping shim and header), after it went
/// into an intermediate report. Returns the bytes removed.
pub fn strip_stack(pkt: &mut impl PacketBuf, meta: &PacketMeta, udp_port: u16) -> Result<usize, DropReason> {
    let blk = find(pkt.bytes(), meta, udp_port).ok_or(DropReason::IntTruncated)?;
    let total = IntMd::new_checked(&pkt.bytes()[blk..])?.total_len();
    let n = total - INT_HDR_LEN;
    if n == 0 {
        return Ok(0);
    }
    let l4 = meta.l4_offset;
    let b = pkt.bytes();
    let old_len = rd16(b, l4 + 4);
    let new_len = old_len - n as u16;
    let old = checksum::sum(0, &b[blk..blk + total]) + 2 * old_len as u32;
    let csum = rd16(b, l4 + 6);
    if !pkt.remove_at(blk + INT_HDR_LEN, n) {
        return Err(DropReason::IntTruncated);
    }
    // The data before the stack moved back by n bytes: offsets are unchanged
    // relative to the new start, so blk still points at the shim.
    let b = pkt.bytes_mut();
    b[blk + 1] = (int_md::MD_HDR_LEN / 4) as u8;
    wr16(b, l4 + 4, new_len);
    let new = checksum::sum(0, &b[blk..blk + INT_HDR_LEN]) + 2 * new_len as u32;
    wr16(b, l4 + 6, udp_adjust(csum, old, new));
    ip_len_add(b, meta, -(n as i32));
    Ok(n)
}

/// INT sink: removes shim + header + stack (and an inserted UDP header) and
/// restores what NPT saved. Before that, `report` gets the packet as it
/// arrived, stack inside, up to its length; returns the bytes copied there.
pub fn sink(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    udp_port: u16,
    report: &mut [u8],
) -> Result<(Sunk, usize), DropReason> {
    let blk = find(pkt.bytes(), meta, udp_port).ok_or(DropReason::IntTruncated)?;
    let (total, npt, saved, hops, discard) = {
        let v = IntMd::new_checked(&pkt.bytes()[blk..])?;
        (v.total_len(), v.npt(), v.saved(), v.hops(), v.flag_d())
    };
    let copied = report.len().min(meta.l3_end).min(pkt.bytes().len());
    report[..copied].copy_from_slice(&pkt.bytes()[..copied]);
    let l4 = meta.l4_offset;
    let removed = match npt {
        1 => {
            let b = pkt.bytes();
            let (port, old_len) = (rd16(b, l4 + 2), rd16(b, l4 + 4));
            let new_len = old_len - total as u16;
            let old = port as u32 + 2 * old_len as u32 + checksum::sum(0, &b[blk..blk + total]);
            let new = saved as u32 + 2 * new_len as u32;
            let c = udp_adjust(rd16(b, l4 + 6), old, new);
            if !pkt.remove_at(blk, total) {
                return Err(DropReason::IntTruncated);
            }
            let b = pkt.bytes_mut();
            wr16(b, l4 + 2, saved);
            wr16(b, l4 + 4, new_len);
            wr16(b, l4 + 6, c);
            total
        }
        2 => {
            if !pkt.remove_at(l4, 8 + total) {
                return Err(DropReason::IntTruncated);
            }
            set_ip_proto(pkt.bytes_mut(), meta, saved as u8);
            8 + total
        }
        _ => return Err(DropReason::IntBadVersion),
    };
    ip_len_add(pkt.bytes_mut(), meta, -(removed as i32));
    Ok((Sunk { hops, discard, removed }, copied))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse, tests::udp4, tests::udp6};
    use crate::pktbuf::VecBuf;
    use crate::wire::int_md::instr;

    const PORT: u16 = 17768;

    fn params() -> IntParams {
        IntParams {
            udp_port: PORT,
            bitmap: instr::NODE_ID | instr::L1_PORTS | instr::HOP_LATENCY | instr::QUEUE | instr::INGRESS_TS,
            max_hops: 8,
            domain_id: 0,
            source_pushes: true,
        }
    }

    fn md(node: u32) -> HopMetadata {
        HopMetadata { node_id: node, ingress_port: 1, egress_port: 2, hop_latency_ns: 900 + node, ..Default::default() }
    }

    /// Full recomputation, written independently of the incremental code.
    fn checksums_valid(f: &[u8]) -> bool {
        let m = parse(f, 0).expect("parses");
        let l3 = m.l3_offset;
        let fold = |mut s: u32| {
            while s > 0xffff {
                s = (s & 0xffff) + (s >> 16)
            }
            s
        };
        let sum = |d: &[u8]| d.chunks(2).map(|c| (c[0] as u32) << 8 | *c.get(1).unwrap_or(&0) as u32).sum::<u32>();
        let mut ok = true;
        let (pseudo, l4) = if m.key.ip_version() == 4 {
            ok &= fold(sum(&f[l3..l3 + 20])) == 0xffff;
            let len = m.l3_end - m.l4_offset;
            (sum(&f[l3 + 12..l3 + 20]) + m.key.proto() as u32 + len as u32, &f[m.l4_offset..m.l3_end])
        } else {
            let len = m.l3_end - m.l4_offset;
            (sum(&f[l3 + 8..l3 + 40]) + m.key.proto() as u32 + len as u32, &f[m.l4_offset..m.l3_end])
        };
        if m.key.proto() == PROTO_UDP && (l4[6], l4[7]) != (0, 0) {
            ok &= fold(pseudo + sum(l4)) == 0xffff;
        }
        ok
    }

    fn pkt(frame: &[u8]) -> (VecBuf, PacketMeta) {
        (VecBuf::new(frame, 256), parse(frame, 0).unwrap())
    }

    fn run_chain(orig: &[u8], hops: u32) -> (Vec<u8>, Vec<u8>, Sunk) {
        let p = params();
        let (mut b, m) = pkt(orig);
        source(&mut b, &m, &p, &md(1), 1500).unwrap();
        assert!(checksums_valid(b.bytes()), "after source");
        for node in 2..=hops {
            let m = parse(b.bytes(), 0).unwrap();
            assert_eq!(transit(&mut b, &m, PORT, &md(node), 1500).unwrap(), Transit::Pushed);
            assert!(checksums_valid(b.bytes()), "after transit {node}");
        }
        let m = parse(b.bytes(), 0).unwrap();
        let mut report = vec![0u8; 512];
        let (s, n) = sink(&mut b, &m, PORT, &mut report).unwrap();
        report.truncate(n);
        (b.bytes().to_vec(), report, s)
    }

    #[test]
    fn udp_v4_source_transit_sink_restores_the_packet() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"hello int");
        let (after, report, s) = run_chain(&orig, 3);
        assert_eq!(after, orig, "sink restores every byte");
        assert!(checksums_valid(&after));
        assert_eq!((s.hops, s.discard), (3, false));
        // The report holds the packet with its stack: newest hop first.
        let m = parse(&report, 0).unwrap();
        let blk = find(&report, &m, PORT).unwrap();
        let v = IntMd::new_checked(&report[blk..]).unwrap();
        assert_eq!((v.npt(), v.saved(), v.hops(), v.rhc()), (1, 5001, 3, 5));
        assert_eq!(&v.hop(0)[..4], &3u32.to_be_bytes());
        assert_eq!(&v.hop(2)[..4], &1u32.to_be_bytes());
    }

    #[test]
    fn zero_udp_checksum_stays_zero() {
        let mut orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x");
        orig[40] = 0;
        orig[41] = 0;
        let p = params();
        let (mut b, m) = pkt(&orig);
        source(&mut b, &m, &p, &md(1), 1500).unwrap();
        assert_eq!(&b.bytes()[40..42], &[0, 0]);
        let (after, _, _) = run_chain(&orig, 2);
        assert_eq!(after, orig);
    }

    #[test]
    fn udp_v6_and_inserted_udp_for_tcp() {
        let orig = udp6([0x20; 16], [0x30; 16], 1000, 2000, b"six");
        let (after, _, s) = run_chain(&orig, 2);
        assert_eq!((after, s.hops), (orig, 2));
        // TCP: NPT=2 with an inserted UDP header; the TCP bytes are untouched.
        let mut tcp = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 80, &[0u8; 12]);
        tcp[23] = 6; // protocol TCP, 20-byte TCP header from the UDP header + payload
        tcp[46] = 5 << 4;
        tcp[24..26].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&tcp[14..34]);
        tcp[24..26].copy_from_slice(&c.to_be_bytes());
        let p = params();
        let (mut b, m) = pkt(&tcp);
        let n = source(&mut b, &m, &p, &md(1), 1500).unwrap();
        assert_eq!(n, 8 + 16 + hop_words(p.bitmap) * 4);
        let m2 = parse(b.bytes(), 0).unwrap();
        assert_eq!((m2.key.proto(), m2.key.dst_port()), (17, PORT));
        assert!(checksums_valid(b.bytes()));
        let (after, _, s) = run_chain(&tcp, 3);
        assert_eq!((after, s.hops), (tcp, 3));
    }

    #[test]
    fn rhc_exhaustion_sets_e_and_pushes_nothing() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"e");
        let p = IntParams { max_hops: 2, ..params() };
        let (mut b, m) = pkt(&orig);
        source(&mut b, &m, &p, &md(1), 1500).unwrap();
        for (node, want) in [(2, Transit::Pushed), (3, Transit::Exhausted), (4, Transit::Exhausted)] {
            let m = parse(b.bytes(), 0).unwrap();
            assert_eq!(transit(&mut b, &m, PORT, &md(node), 1500).unwrap(), want);
            assert!(checksums_valid(b.bytes()));
        }
        let m = parse(b.bytes(), 0).unwrap();
        let v = IntMd::new_checked(&b.bytes()[find(b.bytes(), &m, PORT).unwrap()..]).unwrap();
        assert!(v.flag_e() && !v.flag_m());
        assert_eq!((v.hops(), v.rhc()), (2, 0));
    }

    #[test]
    fn small_mtu_sets_m() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, &[7; 100]);
        let p = params();
        let (mut b, m) = pkt(&orig);
        let len = source(&mut b, &m, &p, &md(1), 1500).unwrap();
        let ip_len = orig.len() - 14 + len;
        let m = parse(b.bytes(), 0).unwrap();
        // One byte short of room for this hop's push.
        let mtu = ip_len + hop_words(p.bitmap) * 4 - 1;
        assert_eq!(transit(&mut b, &m, PORT, &md(2), mtu).unwrap(), Transit::MtuExceeded);
        assert!(checksums_valid(b.bytes()));
        let m = parse(b.bytes(), 0).unwrap();
        assert!(IntMd::new_checked(&b.bytes()[find(b.bytes(), &m, PORT).unwrap()..]).unwrap().flag_m());
        // A source that cannot fit even shim + header does not start INT.
        let (mut b, m) = pkt(&orig);
        assert_eq!(source(&mut b, &m, &p, &md(1), orig.len() - 14 + 15), Err(Skip::Mtu));
        assert_eq!(b.bytes(), &orig[..]);
        // One that fits the header but not its own metadata starts INT with M.
        let (mut b, m) = pkt(&orig);
        assert_eq!(source(&mut b, &m, &p, &md(1), orig.len() - 14 + 16), Ok(16));
        let m = parse(b.bytes(), 0).unwrap();
        let v = IntMd::new_checked(&b.bytes()[find(b.bytes(), &m, PORT).unwrap()..]).unwrap();
        assert!(v.flag_m() && v.hops() == 0);
    }

    #[test]
    fn malformed_int_is_refused_and_left_alone() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"m");
        let p = params();
        let (mut b, m) = pkt(&orig);
        source(&mut b, &m, &p, &md(1), 1500).unwrap();
        let good = b.bytes().to_vec();
        let blk = 42;
        for (idx, val, want) in [
            (blk + 1, 60u8, DropReason::IntTruncated),  // shim length past the packet
            (blk + 6, 0, DropReason::IntBadHopMl),      // HopML 0
            (blk + 6, 5, DropReason::IntBadStack),      // stack not a multiple of HopML
            (blk + 4, 0x30, DropReason::IntBadVersion), // version 3
        ] {
            let mut f = good.clone();
            f[idx] = val;
            let mut bb = VecBuf::new(&f, 64);
            let m = parse(&f, 0).unwrap();
            assert_eq!(transit(&mut bb, &m, PORT, &md(2), 1500), Err(want));
            assert_eq!(bb.bytes(), &f[..], "left untouched");
            let mut r = [0u8; 64];
            assert_eq!(sink(&mut bb, &m, PORT, &mut r).map(|_| ()), Err(want));
        }
        // Already carrying INT: a second source leaves it.
        let m = parse(&good, 0).unwrap();
        let mut bb = VecBuf::new(&good, 64);
        assert_eq!(source(&mut bb, &m, &p, &md(9), 1500), Err(Skip::Presence));
    }
}
