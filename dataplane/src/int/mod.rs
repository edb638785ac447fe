//! INT-MD v2.1 stages on a packet: source (insert shim + header + own
//! metadata), transit (push one hop's metadata), sink (extract, then restore
//! the original packet). IPv4, and IPv6 whose upper layer follows the fixed
//! header. Two presence methods (one per INT domain):
//! - UDP destination port: UDP traffic gets NPT=1 (the original dport saved
//!   in the shim), anything else an inserted UDP header with NPT=2 (the
//!   original IP protocol saved).
//! - DSCP: TCP and UDP traffic gets NPT=0, the INT block right after the
//!   L4 header — for TCP after its options (the data offset is left alone,
//!   so the options stay where every TCP parser looks for them and INT sits
//!   where the payload begins); the original DSCP saved in the shim and
//!   restored by the sink. Other protocols are not instrumented.
//!
//! Checksums are updated incrementally (RFC 1624): the INT block always
//! starts at an even offset inside the L4 segment, so the one's-complement
//! sum of what is inserted or removed adjusts the UDP or TCP checksum
//! directly; a zero UDP checksum stays zero.

pub mod analytics;
pub mod report_ring;
pub mod stage;
pub mod watch;

use crate::parse::{PacketMeta, PROTO_TCP, PROTO_UDP};
use crate::pipeline::QuickConsent;
use crate::pktbuf::PacketBuf;
use crate::wire::checksum;
use crate::wire::int_md::{self, emit_hop, hop_words, HopMetadata, IntMd, IntMdRepr, Npt, INT_HDR_LEN, SHIM_LEN};
use crate::DropReason;

/// How INT packets are recognised in a domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// UDP destination port: NPT=1 for UDP, NPT=2 (inserted UDP) otherwise.
    UdpPort(u16),
    /// A TCP or UDP packet whose DSCP & `mask` is `value` carries INT after
    /// its L4 header (NPT=0). A codepoint is mask 0x3f; bit mode is a
    /// one-bit mask. The source sets DSCP to (DSCP & !mask) | value.
    Dscp { value: u8, mask: u8 },
}

/// What a switch puts into INT packets (from the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntParams {
    pub presence: Presence,
    pub bitmap: u16,
    /// Hops that may push (the source's RHC, counting itself).
    pub max_hops: u8,
    pub domain_id: u16,
    /// The source pushes its own metadata too.
    pub source_pushes: bool,
    /// The header's DS Flags (INT-label's A bit; 0 for classic INT).
    pub ds_flags: u16,
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

/// Where a block's domain ID lies from its start (the shim), for
/// `Block::read` and the peek `Block::domain_id_at`.
const DOMAIN_ID_AT: usize = SHIM_LEN + 6;

/// The header of the INT block at `at`, checked and read once: the stage
/// decides the role from it and the transform goes on from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub at: usize,
    pub npt: u8,
    /// The shim's saved dport, protocol or DSCP.
    pub saved: u16,
    /// Bytes of shim + header + stack.
    pub total: usize,
    pub hop_ml: usize,
    pub rhc: u8,
    pub bitmap: u16,
    pub domain_id: u16,
    /// DS Flags (INT-label: bit A).
    pub ds_flags: u16,
    /// D: drop after the sink extracted it.
    pub discard: bool,
    /// One's-complement sum of shim + header as read (what a transit
    /// adjusts the L4 checksum from).
    pub hdr_sum: u32,
}

impl Block {
    /// The block at `at` (what `find` returned), within the IP packet.
    /// Inlined: as a call, its `Result` came back through memory, stored
    /// field by field and read back with wide loads, which stalled on store
    /// forwarding (a third of the INT stage's samples in a transit profile).
    #[inline(always)]
    pub fn read(b: &[u8], meta: &PacketMeta, at: usize) -> Result<Block, DropReason> {
        let mut end = meta.l3_end.min(b.len());
        if meta.key.proto() == PROTO_UDP {
            // The block lies within the UDP datagram: one that runs past
            // the UDP length is not pushed onto (its lengths disagree).
            if let Some(&[hi, lo]) = b.get(meta.l4_offset + 4..meta.l4_offset + 6).and_then(|s| s.first_chunk::<2>()) {
                end = end.min(meta.l4_offset + u16::from_be_bytes([hi, lo]) as usize);
            }
        }
        let end = end.max(at);
        IntMd::new_checked(&b[at..end])?;
        // Checked: shim + header lie within the packet; their fields are
        // read at constant offsets of one view.
        let h = view::<INT_HDR_LEN>(b, at);
        Ok(Block {
            at,
            npt: (h[0] >> 2) & 0x3,
            saved: be16(h, 2),
            total: SHIM_LEN + h[1] as usize * 4,
            hop_ml: (h[SHIM_LEN + 2] & 0x1f) as usize,
            rhc: h[SHIM_LEN + 3],
            bitmap: be16(h, SHIM_LEN + 4),
            domain_id: be16(h, DOMAIN_ID_AT),
            ds_flags: be16(h, SHIM_LEN + 10),
            discard: h[SHIM_LEN] & 0x08 != 0,
            hdr_sum: header_sum(h),
        })
    }

    /// The domain ID of the block at `at`, read alone (no check of the
    /// block): enough to leave another domain's packet to its own stage.
    #[inline(always)]
    pub fn domain_id_at(b: &[u8], at: usize) -> Option<u16> {
        b.get(at + DOMAIN_ID_AT..at + DOMAIN_ID_AT + 2).map(|d| u16::from_be_bytes([d[0], d[1]]))
    }

    /// Hops in the stack (only the sink asks, so transit never computes it).
    #[inline]
    pub fn hops(&self) -> usize {
        int_md::stack_hops((self.total - INT_HDR_LEN) / 4, self.hop_ml).0
    }
}

/// The `N` bytes at `at` as an array: one bounds check, then every field
/// inside is read or written at a constant offset, unchecked. (Parsing
/// guarantees the headers INT touches lie within the packet; indexing a
/// slice per field cost two checks and an overflow test each.)
#[inline(always)]
fn view<const N: usize>(b: &[u8], at: usize) -> &[u8; N] {
    b[at..].first_chunk::<N>().expect("header within the packet")
}

#[inline(always)]
fn view_mut<const N: usize>(b: &mut [u8], at: usize) -> &mut [u8; N] {
    b[at..].first_chunk_mut::<N>().expect("header within the packet")
}

#[inline(always)]
fn be16<const N: usize>(h: &[u8; N], i: usize) -> u16 {
    u16::from_be_bytes([h[i], h[i + 1]])
}

#[inline(always)]
fn put16<const N: usize>(h: &mut [u8; N], i: usize, v: u16) {
    [h[i], h[i + 1]] = v.to_be_bytes();
}

#[inline(always)]
fn rd16(b: &[u8], at: usize) -> u16 {
    be16(view::<2>(b, at), 0)
}

#[inline(always)]
fn wr16(b: &mut [u8], at: usize, v: u16) {
    *view_mut::<2>(b, at) = v.to_be_bytes();
}

/// Adjusts a checksum for data whose one's-complement sum went from `old`
/// to `new` (both folded 16-bit sums).
#[inline(always)]
fn adjust(csum: u16, old: u32, new: u32) -> u16 {
    // RFC 1624 eqn. 3 in one sum: 0xffff_ffff = 0xffff * 0x10001 is zero in
    // one's-complement arithmetic, so 0xffff_ffff - old stands for -old and
    // no operand needs folding first (a shorter dependency chain).
    let acc = (!csum) as u64 + new as u64 + (0xffff_ffff - old) as u64;
    !checksum::fold(checksum::fold_words(acc))
}

/// The UDP checksum field after an adjustment: zero stays zero (not
/// computed), a computed zero is sent as 0xFFFF.
#[inline(always)]
fn udp_adjust(csum: u16, old: u32, new: u32) -> u16 {
    if csum == 0 {
        return 0;
    }
    match adjust(csum, old, new) {
        0 => 0xffff,
        c => c,
    }
}

/// The one's-complement sum of shim + header (16 bytes), as
/// `checksum::sum` would give it, from four big-endian words.
#[inline(always)]
fn header_sum(h: &[u8; INT_HDR_LEN]) -> u32 {
    let w = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as u64;
    checksum::fold_words(w(0) + w(4) + w(8) + w(12))
}

/// Bytes of the IP header that hold its length fields (IPv4: total length
/// and checksum; IPv6: payload length): a view this long covers both.
const IP_LEN_VIEW: usize = 12;
/// Bytes of the TCP header up to and including its checksum.
const TCP_CSUM_VIEW: usize = 18;

/// The length and checksum fields that an insertion into (or removal from)
/// the L4 segment changes. Read before the headers move and written after:
/// reading them back right after the move (wide stores) can stall on store
/// forwarding.
#[derive(Debug, Clone, Copy)]
struct Lengths {
    /// IPv4 total length or IPv6 payload length.
    ip_len: u16,
    /// IPv4 header checksum.
    ip_csum: u16,
    /// UDP length.
    l4_len: u16,
    /// UDP or TCP checksum.
    l4_csum: u16,
}

impl Lengths {
    /// The IP fields only (the L4 ones read as 0).
    #[inline(always)]
    fn read_ip(b: &[u8], meta: &PacketMeta) -> Lengths {
        let ip = view::<IP_LEN_VIEW>(b, meta.l3_offset);
        let (ip_len, ip_csum) = if meta.key.ip_version() == 4 { (be16(ip, 2), be16(ip, 10)) } else { (be16(ip, 4), 0) };
        Lengths { ip_len, ip_csum, l4_len: 0, l4_csum: 0 }
    }

    /// The IP fields and those of the UDP or TCP header.
    #[inline(always)]
    fn read(b: &[u8], meta: &PacketMeta) -> Lengths {
        let l4 = meta.l4_offset;
        let (l4_len, l4_csum) = match meta.key.proto() {
            PROTO_UDP => {
                let u = view::<8>(b, l4);
                (be16(u, 4), be16(u, 6))
            }
            _ => (0, be16(view::<TCP_CSUM_VIEW>(b, l4), 16)),
        };
        Lengths { l4_len, l4_csum, ..Lengths::read_ip(b, meta) }
    }

    /// The IP packet's length, header included (IPv6: 40 + payload length).
    #[inline(always)]
    fn ip_packet_len(&self, meta: &PacketMeta) -> usize {
        if meta.key.ip_version() == 4 {
            self.ip_len as usize
        } else {
            40 + self.ip_len as usize
        }
    }

    /// Writes the IP length `delta` bytes longer (and the IPv4 checksum).
    #[inline(always)]
    fn write_ip(&self, b: &mut [u8], meta: &PacketMeta, delta: i32) {
        let ip = view_mut::<IP_LEN_VIEW>(b, meta.l3_offset);
        let new = (self.ip_len as i32 + delta) as u16;
        if meta.key.ip_version() == 4 {
            put16(ip, 2, new);
            put16(ip, 10, checksum::update16(self.ip_csum, self.ip_len, new));
        } else {
            put16(ip, 4, new);
        }
    }

    /// `write_ip` and `set_dscp` with one IPv4 checksum update for both
    /// words (the DSCP domain's sink restores the DSCP as it shrinks the
    /// packet).
    #[inline(always)]
    fn write_ip_dscp(&self, b: &mut [u8], meta: &PacketMeta, delta: i32, d: u8) {
        if meta.key.ip_version() != 4 {
            self.write_ip(b, meta, delta);
            return set_dscp(b, meta, d);
        }
        let ip = view_mut::<IP_LEN_VIEW>(b, meta.l3_offset);
        let new = (self.ip_len as i32 + delta) as u16;
        let old_w0 = be16(ip, 0);
        ip[1] = with_dscp(ip[1], d);
        put16(ip, 2, new);
        let c = adjust(self.ip_csum, old_w0 as u32 + self.ip_len as u32, be16(ip, 0) as u32 + new as u32);
        put16(ip, 10, c);
    }

    /// Fixes the L4 header after `delta` bytes were inserted into (or
    /// removed from) the segment at an even offset, the one's-complement
    /// sum of the bytes that changed going from `old` to `new`: the UDP
    /// length and checksum (zero stays zero), or the TCP checksum
    /// (pseudo-header length). The IP length is the one read.
    #[inline(always)]
    fn write_l4(&self, b: &mut [u8], meta: &PacketMeta, delta: i32, old: u32, new: u32) {
        let l4 = meta.l4_offset;
        if meta.key.proto() == PROTO_UDP {
            let old_len = self.l4_len;
            let new_len = (old_len as i32 + delta) as u16;
            // Length counts twice: UDP header and pseudo-header.
            let c = udp_adjust(self.l4_csum, old + 2 * old_len as u32, new + 2 * new_len as u32);
            let u = view_mut::<8>(b, l4);
            put16(u, 4, new_len);
            put16(u, 6, c);
        } else {
            let old_len = (self.ip_packet_len(meta) - (l4 - meta.l3_offset)) as u32;
            let new_len = (old_len as i32 + delta) as u32;
            let c = adjust(self.l4_csum, old + old_len, new + new_len);
            put16(view_mut::<TCP_CSUM_VIEW>(b, l4), 16, c);
        }
    }
}

/// Sets the IP protocol (IPv4, with its checksum) or next header (IPv6).
#[inline]
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

/// Whether INT may change the packet's size: an IP packet with its L4
/// header, not a fragment (bytes added to one would break reassembly;
/// later fragments have no L4 header, a first one has IPv4 MF set or an
/// IPv6 Fragment header, which is an extension header).
#[inline]
pub(crate) fn applicable(b: &[u8], meta: &PacketMeta) -> bool {
    let v = meta.key.ip_version();
    meta.l4_offset != 0
        && match v {
            4 => b.get(meta.l3_offset + 6).is_some_and(|f| f & 0x20 == 0),
            6 => meta.l4_offset == meta.l3_offset + 40,
            _ => false,
        }
}

/// The packet's DSCP (IPv4 TOS or IPv6 traffic class, upper six bits).
#[inline]
pub fn dscp(b: &[u8], meta: &PacketMeta) -> u8 {
    let l3 = meta.l3_offset;
    if meta.key.ip_version() == 4 {
        b[l3 + 1] >> 2
    } else {
        (((b[l3] & 0x0f) << 4) | (b[l3 + 1] >> 4)) >> 2
    }
}

/// A TOS or traffic class byte with DSCP `d` and the ECN bits of `tos`.
#[inline(always)]
fn with_dscp(tos: u8, d: u8) -> u8 {
    (d << 2) | (tos & 0x03)
}

/// Rewrites the DSCP, keeping ECN (and the IPv4 header checksum right).
/// Always inlined: a few stores and a checksum update, less work than a
/// call (which left it out of line behind its callers).
#[inline(always)]
pub fn set_dscp(b: &mut [u8], meta: &PacketMeta, d: u8) {
    let l3 = meta.l3_offset;
    if meta.key.ip_version() == 4 {
        let old = rd16(b, l3);
        b[l3 + 1] = with_dscp(b[l3 + 1], d);
        let c = checksum::update16(rd16(b, l3 + 10), old, rd16(b, l3));
        wr16(b, l3 + 10, c);
    } else {
        let tc = with_dscp(b[l3 + 1] >> 4, d);
        b[l3] = (b[l3] & 0xf0) | (tc >> 4);
        b[l3 + 1] = (b[l3 + 1] & 0x0f) | (tc << 4);
    }
}

/// Where a TCP or UDP segment's payload starts (after TCP options).
#[inline]
fn l4_payload(b: &[u8], meta: &PacketMeta) -> Option<usize> {
    let l4 = meta.l4_offset;
    match meta.key.proto() {
        PROTO_UDP => Some(l4 + 8),
        PROTO_TCP => Some(l4 + (*b.get(l4 + 12)? >> 4) as usize * 4).filter(|at| *at >= l4 + 20),
        _ => None,
    }
}

/// Whether the packet may carry an INT block by `presence`, from the parse
/// and (by DSCP) one byte: false rules a block out without reading further.
#[inline(always)]
pub fn may_carry(b: &[u8], meta: &PacketMeta, presence: Presence) -> bool {
    let k = &meta.key;
    match presence {
        Presence::UdpPort(port) => k.is_udp_to(port),
        Presence::Dscp { value, mask } => matches!(k.proto(), PROTO_UDP | PROTO_TCP) && dscp(b, meta) & mask == value,
    }
}

/// What a stage that acts only on packets [`may_carry`] says lets the
/// router's quick path take: packets to `ports`, but for any that may
/// carry a block by `presence` as the quick path tells them (by DSCP, any
/// protocol with it; by UDP port, also every UDP fragment but the first).
pub fn quick_consent(ports: u32, presence: Presence) -> QuickConsent {
    let to = QuickConsent::to_ports(ports);
    match presence {
        Presence::UdpPort(port) => to.leaving_udp(port),
        Presence::Dscp { value, mask } => to.leaving_dscp(value, mask),
    }
}

/// [`quick_consent`] of the presence last asked about: the stages ask once
/// a burst, and a presence changes only with the tables.
#[derive(Debug, Clone, Copy)]
pub struct ConsentMemo {
    presence: Option<Presence>,
    consent: QuickConsent,
}

impl Default for ConsentMemo {
    fn default() -> ConsentMemo {
        ConsentMemo { presence: None, consent: QuickConsent::NONE }
    }
}

impl ConsentMemo {
    /// Keeps `presence`'s consent, computed only when it is new.
    #[inline(always)]
    pub fn refresh(&mut self, presence: Presence) {
        if self.presence != Some(presence) {
            self.consent = quick_consent(u32::MAX, presence);
            self.presence = Some(presence);
        }
    }

    /// The kept consent, to `ports` (none before a `refresh`).
    #[inline(always)]
    pub fn to_ports(&self, ports: u32) -> QuickConsent {
        match self.presence {
            Some(_) => self.consent.with_ports(ports),
            None => QuickConsent::NONE,
        }
    }
}

/// Offset of the INT block, when the packet carries one by `presence`.
#[inline(always)]
pub fn find(b: &[u8], meta: &PacketMeta, presence: Presence) -> Option<usize> {
    if !applicable(b, meta) {
        return None;
    }
    find_applicable(b, meta, presence)
}

/// [`find`] on a packet the caller already found `applicable`.
#[inline(always)]
pub(crate) fn find_applicable(b: &[u8], meta: &PacketMeta, presence: Presence) -> Option<usize> {
    let at = match presence {
        Presence::UdpPort(port) => meta.key.is_udp_to(port).then_some(meta.l4_offset + 8)?,
        Presence::Dscp { value, mask } => {
            if dscp(b, meta) & mask != value {
                return None;
            }
            l4_payload(b, meta)?
        }
    };
    (at <= meta.l3_end.min(b.len())).then_some(at)
}

/// INT source: inserts shim + header (+ its own metadata).
pub fn source(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    p: &IntParams,
    own: &HopMetadata,
    mtu: usize,
) -> Result<usize, Skip> {
    if find(pkt.bytes(), meta, p.presence).is_some() {
        return Err(Skip::Presence);
    }
    source_unmarked(pkt, meta, p, own, mtu)
}

/// [`source`] on a packet the caller already found to carry no INT (the
/// stage's `find` decided the role).
pub fn source_unmarked(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    p: &IntParams,
    own: &HopMetadata,
    mtu: usize,
) -> Result<usize, Skip> {
    if !applicable(pkt.bytes(), meta) {
        return Err(Skip::NotApplicable);
    }
    let l4 = meta.l4_offset;
    let udp = meta.key.proto() == PROTO_UDP;
    // Where the block goes, how many bytes precede it there (an inserted
    // UDP header), and what the shim announces.
    let (at, extra, npt, saved) = match p.presence {
        // (The destination port as parsed: forwarding rewrites no ports.)
        Presence::UdpPort(_) if udp => (l4 + 8, 0, Npt::UdpPort, meta.key.dst_port()),
        Presence::UdpPort(_) => (l4, 8, Npt::InsertedUdp, meta.key.proto() as u16),
        Presence::Dscp { .. } => {
            let at = l4_payload(pkt.bytes(), meta).filter(|at| *at <= meta.l3_end).ok_or(Skip::NotApplicable)?;
            (at, 0, Npt::Dscp, (dscp(pkt.bytes(), meta) as u16) << 2)
        }
    };
    let hop_ml = hop_words(p.bitmap);
    let lens = match p.presence {
        Presence::UdpPort(_) if !udp => Lengths::read_ip(pkt.bytes(), meta),
        _ => Lengths::read(pkt.bytes(), meta),
    };
    let base = lens.ip_packet_len(meta);
    if base + extra + INT_HDR_LEN > mtu {
        return Err(Skip::Mtu);
    }
    // Push our own metadata only if it fits too; otherwise start INT with M set.
    let push = p.source_pushes && p.max_hops > 0 && base + extra + INT_HDR_LEN + hop_ml * 4 <= mtu;
    let md_len = if push { hop_ml * 4 } else { 0 };
    let n = extra + INT_HDR_LEN + md_len;
    if !pkt.insert_at(at, n) {
        return Err(Skip::NoRoom);
    }
    let b = pkt.bytes_mut();
    let blk = at + extra;
    let mut hdr = IntMdRepr {
        npt,
        saved,
        flag_d: false,
        hop_ml: hop_ml as u8,
        rhc: if push { p.max_hops - 1 } else { p.max_hops },
        bitmap: p.bitmap,
        domain_id: p.domain_id,
        ds_instruction: 0,
        ds_flags: p.ds_flags,
        stack_words: (md_len / 4) as u8,
    }
    .words();
    if !push && p.source_pushes && p.max_hops > 0 {
        hdr[1] |= 0x02 << 24; // M: our own metadata did not fit
    }
    let (out, md) = b[blk..blk + INT_HDR_LEN + md_len].split_at_mut(INT_HDR_LEN);
    // Sums come from the values written, not from re-reading the bytes.
    let hdr_sum = int_md::emit_words(hdr, out);
    let inserted = if push { hdr_sum + emit_hop(p.bitmap, own, md) } else { hdr_sum };
    match p.presence {
        Presence::UdpPort(port) if udp => {
            wr16(b, l4 + 2, port);
            // `saved` is the original destination port.
            lens.write_l4(b, meta, n as i32, saved as u32, port as u32 + inserted);
            lens.write_ip(b, meta, n as i32);
        }
        Presence::UdpPort(port) => {
            let l4_len = lens.ip_packet_len(meta) - (l4 - meta.l3_offset);
            let entropy = (meta.key.hash64() as u16) | 0xc000;
            wr16(b, l4, entropy);
            wr16(b, l4 + 2, port);
            let udp_len = (l4_len + n) as u16;
            wr16(b, l4 + 4, udp_len);
            wr16(b, l4 + 6, 0);
            let c = inserted_udp_checksum(b, meta, l4, n, [entropy, port, udp_len], inserted);
            wr16(b, l4 + 6, c);
            lens.write_ip(b, meta, n as i32);
            set_ip_proto(b, meta, PROTO_UDP);
        }
        Presence::Dscp { value, mask } => {
            lens.write_l4(b, meta, n as i32, 0, inserted);
            lens.write_ip(b, meta, n as i32);
            let d = dscp(b, meta);
            set_dscp(b, meta, (d & !mask) | (value & mask));
        }
    }
    Ok(n)
}

/// The checksum of a UDP header inserted before a segment of `meta`'s
/// protocol (IPv6 forbids a zero one). TCP and ICMPv6 segments carry a
/// checksum over a pseudo-header of the same addresses and length (valid on
/// input: a wrong one stays wrong in the UDP checksum), so their
/// sum cancels that pseudo-header's: the UDP one differs by the protocol
/// and the inserted bytes, and neither the addresses nor the segment are
/// read. Other IPv4 payloads keep RFC 768's zero (no checksum); other IPv6
/// ones are summed. `hdr` is the header's source port, destination port
/// and length as written (not read back: the stores may not have landed),
/// `n` the bytes inserted, `inserted` the sum of the INT block.
#[inline]
fn inserted_udp_checksum(b: &[u8], meta: &PacketMeta, l4: usize, n: usize, hdr: [u16; 3], inserted: u32) -> u16 {
    let proto = meta.key.proto();
    let v6 = meta.key.ip_version() == 6;
    let udp_len = hdr[2];
    let hdr = hdr.iter().map(|&w| w as u64).sum::<u64>();
    let sum = if proto == 6 || (v6 && proto == 58) {
        checksum::fold_words(PROTO_UDP as u64 + (0xffff - proto as u64) + n as u64 + hdr + inserted as u64)
    } else if !v6 {
        return 0;
    } else {
        let ip = &b[meta.l3_offset..meta.l3_offset + 40];
        let (src, dst): ([u8; 16], [u8; 16]) = (ip[8..24].try_into().expect("16"), ip[24..40].try_into().expect("16"));
        let pseudo = checksum::pseudo_v6(&src, &dst, PROTO_UDP, udp_len as u32);
        checksum::sum(pseudo, &b[l4..l4 + udp_len as usize])
    };
    match !checksum::fold(sum) {
        0 => 0xffff,
        c => c,
    }
}

/// INT transit: pushes this hop's metadata (`HopML` x 4 bytes) or sets E / M.
/// `meta` is the packet's parse before the push.
pub fn transit(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    presence: Presence,
    md: &HopMetadata,
    mtu: usize,
) -> Result<Transit, DropReason> {
    let blk = find(pkt.bytes(), meta, presence).ok_or(DropReason::IntTruncated)?;
    transit_at(pkt, meta, blk, md, mtu)
}

/// `transit` on the INT block at `blk` (what `find` returned).
pub fn transit_at(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    blk: usize,
    md: &HopMetadata,
    mtu: usize,
) -> Result<Transit, DropReason> {
    let block = Block::read(pkt.bytes(), meta, blk)?;
    transit_block(pkt, meta, &block, md, mtu)
}

/// `transit` on a block already read.
pub fn transit_block(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    block: &Block,
    md: &HopMetadata,
    mtu: usize,
) -> Result<Transit, DropReason> {
    let Block { at: blk, hop_ml, rhc, bitmap, total, .. } = *block;
    if hop_words(bitmap) != hop_ml {
        return Err(DropReason::IntBadHopMl);
    }
    let old_hdr = block.hdr_sum;
    let n = hop_ml * 4;
    let shim_words = (total - SHIM_LEN) / 4;
    let lens = Lengths::read(pkt.bytes(), meta);
    let (outcome, new) = if rhc == 0 {
        let b = &mut pkt.bytes_mut()[blk..];
        IntMd::new_checked(&mut *b)?.set_flag_e();
        (Transit::Exhausted, checksum::sum(0, &b[..INT_HDR_LEN]))
    } else if lens.ip_packet_len(meta) + n > mtu || shim_words + hop_ml > 255 {
        // No room: the MTU, or the shim's 8-bit length (in words) is full.
        let b = &mut pkt.bytes_mut()[blk..];
        IntMd::new_checked(&mut *b)?.set_flag_m();
        (Transit::MtuExceeded, checksum::sum(0, &b[..INT_HDR_LEN]))
    } else {
        if !pkt.insert_at(blk + INT_HDR_LEN, n) {
            return Err(DropReason::IntTruncated);
        }
        let b = pkt.bytes_mut();
        let pushed = emit_hop(bitmap, md, &mut b[blk + INT_HDR_LEN..blk + INT_HDR_LEN + n]);
        // Written from the values read before the move, and the header's
        // new sum from the two bytes that changed (re-reading what the move
        // just stored can stall on store forwarding): the shim length (low
        // byte of its first 16-bit word) grows by HopML, RHC (low byte of
        // the header's second word) falls by one (+0xfffe in one's complement).
        let h = view_mut::<INT_HDR_LEN>(b, blk);
        h[1] = (shim_words + hop_ml) as u8;
        h[SHIM_LEN + 3] = rhc - 1;
        (Transit::Pushed, old_hdr + hop_ml as u32 + 0xfffe + pushed)
    };
    let pushed = if outcome == Transit::Pushed { n } else { 0 };
    let b = pkt.bytes_mut();
    lens.write_l4(b, meta, pushed as i32, old_hdr, new);
    lens.write_ip(b, meta, pushed as i32);
    Ok(outcome)
}

/// Removes the metadata stack (keeping shim and header), after it went
/// into an intermediate report. Returns the bytes removed.
pub fn strip_stack(pkt: &mut impl PacketBuf, meta: &PacketMeta, presence: Presence) -> Result<usize, DropReason> {
    let blk = find(pkt.bytes(), meta, presence).ok_or(DropReason::IntTruncated)?;
    strip_stack_at(pkt, meta, blk)
}

/// `strip_stack` on the INT block at `blk` (what `find` returned).
pub fn strip_stack_at(pkt: &mut impl PacketBuf, meta: &PacketMeta, blk: usize) -> Result<usize, DropReason> {
    let block = Block::read(pkt.bytes(), meta, blk)?;
    let n = block.total - INT_HDR_LEN;
    if n == 0 {
        return Ok(0);
    }
    let lens = Lengths::read(pkt.bytes(), meta);
    let old = removed_sum(pkt.bytes(), meta, &block, &lens);
    if !pkt.remove_at(blk + INT_HDR_LEN, n) {
        return Err(DropReason::IntTruncated);
    }
    // The data before the stack moved back by n bytes: offsets are unchanged
    // relative to the new start, so blk still points at the shim.
    let b = pkt.bytes_mut();
    b[blk + 1] = (int_md::MD_HDR_LEN / 4) as u8;
    let new = checksum::sum(0, &b[blk..blk + INT_HDR_LEN]);
    lens.write_l4(b, meta, -(n as i32), old, new);
    lens.write_ip(b, meta, -(n as i32));
    Ok(n)
}

/// The one's-complement sum of the INT block as read, shim, header and
/// stack (what the L4 checksum loses when the sink takes the block out, or
/// a strip rewrites it): only where there is a checksum to adjust, not in a
/// UDP checksum of zero. The header's sum is the block's; only the stack is
/// summed here.
#[inline(always)]
fn removed_sum(b: &[u8], meta: &PacketMeta, block: &Block, lens: &Lengths) -> u32 {
    if meta.key.proto() == PROTO_UDP && lens.l4_csum == 0 {
        return 0;
    }
    checksum::sum(block.hdr_sum, &b[block.at + INT_HDR_LEN..block.at + block.total])
}

/// INT sink: removes shim + header + stack (and an inserted UDP header) and
/// restores what NPT saved. Before that, `report` gets the packet as it
/// arrived, stack inside, up to its length; returns the bytes copied there.
pub fn sink(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    presence: Presence,
    report: &mut [u8],
) -> Result<(Sunk, usize), DropReason> {
    let blk = find(pkt.bytes(), meta, presence).ok_or(DropReason::IntTruncated)?;
    sink_at(pkt, meta, blk, presence, report)
}

/// `sink` on the INT block at `blk` (what `find` returned).
pub fn sink_at(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    blk: usize,
    presence: Presence,
    report: &mut [u8],
) -> Result<(Sunk, usize), DropReason> {
    let block = Block::read(pkt.bytes(), meta, blk)?;
    sink_block(pkt, meta, &block, presence, report)
}

/// `sink` on a block already read (found by `presence`).
pub fn sink_block(
    pkt: &mut impl PacketBuf,
    meta: &PacketMeta,
    block: &Block,
    presence: Presence,
    report: &mut [u8],
) -> Result<(Sunk, usize), DropReason> {
    let Block { at: blk, total, npt, saved, discard, .. } = *block;
    let l4 = meta.l4_offset;
    // NPT 1 and 2 describe a block right after a UDP header. The encoding
    // must be the domain's: a DSCP domain keeps the original DSCP in the
    // shim (NPT 0), a UDP-port one the original port or protocol (NPT 1,
    // 2). Restored from the other, the packet would leave still marked
    // (codepoint or INT port) for the next INT node to misread.
    let after_udp = meta.key.proto() == PROTO_UDP && blk == l4 + 8;
    // Nor may NPT 1 give back the INT port itself, or NPT 0 the domain's
    // own codepoint: no source encodes a packet already marked (that is an
    // INT packet), and restored it would leave looking like INT.
    let encoding_fits = match presence {
        Presence::Dscp { value, mask } => npt == 0 && ((saved as u8) >> 2) & mask != value & mask,
        Presence::UdpPort(port) => npt == 2 || (npt == 1 && saved != port),
    };
    if npt > 2 || (npt != 0 && !after_udp) || !encoding_fits {
        return Err(DropReason::IntBadVersion);
    }
    // NPT 2 saves a transport other than UDP (UDP is NPT 1's); in IPv6 an
    // extension header type would make the payload after it a header.
    let v6_ext = meta.l3 == crate::parse::L3Kind::Ipv6 && crate::wire::ipv6::is_extension(saved as u8);
    if npt == 2 && (saved as u8 == PROTO_UDP || v6_ext) {
        return Err(DropReason::IntBadVersion);
    }
    let copied = report.len().min(meta.l3_end).min(pkt.bytes().len());
    report[..copied].copy_from_slice(&pkt.bytes()[..copied]);
    // Length fields read before the headers move, written after (see `Lengths`).
    let removed = match npt {
        0 | 1 => {
            let lens = Lengths::read(pkt.bytes(), meta);
            let mut old = removed_sum(pkt.bytes(), meta, block, &lens);
            if !pkt.remove_at(blk, total) {
                return Err(DropReason::IntTruncated);
            }
            let b = pkt.bytes_mut();
            // NPT 1: the original destination port comes back (and into the
            // L4 checksum with the block's removal).
            let mut new = 0;
            if npt == 1 {
                wr16(b, l4 + 2, saved);
                (old, new) = (old + meta.key.dst_port() as u32, saved as u32);
            }
            lens.write_l4(b, meta, -(total as i32), old, new);
            // After the length: write_ip (and write_ip_dscp) set the IPv4
            // checksum from the one read.
            if npt == 0 {
                lens.write_ip_dscp(b, meta, -(total as i32), (saved as u8) >> 2);
            } else {
                lens.write_ip(b, meta, -(total as i32));
            }
            total
        }
        _ => {
            let lens = Lengths::read_ip(pkt.bytes(), meta);
            if !pkt.remove_at(l4, 8 + total) {
                return Err(DropReason::IntTruncated);
            }
            let b = pkt.bytes_mut();
            lens.write_ip(b, meta, -((8 + total) as i32));
            set_ip_proto(b, meta, saved as u8);
            8 + total
        }
    };
    Ok((Sunk { hops: block.hops(), discard, removed }, copied))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::parse::{parse, tests::udp4, tests::udp6};
    use crate::pktbuf::VecBuf;
    use crate::wire::int_md::instr;

    const PORT: u16 = 17768;
    const UDP: Presence = Presence::UdpPort(PORT);

    fn params() -> IntParams {
        IntParams {
            presence: UDP,
            bitmap: instr::NODE_ID | instr::L1_PORTS | instr::HOP_LATENCY | instr::QUEUE | instr::INGRESS_TS,
            max_hops: 8,
            domain_id: 0,
            source_pushes: true,
            ds_flags: 0,
        }
    }

    fn md(node: u32) -> HopMetadata {
        HopMetadata { node_id: node, ingress_port: 1, egress_port: 2, hop_latency_ns: 900 + node, ..Default::default() }
    }

    fn fold(mut s: u32) -> u32 {
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16)
        }
        s
    }

    fn sum(d: &[u8]) -> u32 {
        d.chunks(2).map(|c| (c[0] as u32) << 8 | *c.get(1).unwrap_or(&0) as u32).sum::<u32>()
    }

    /// Folded sum of the L4 pseudo-header and segment (0xffff when the
    /// checksum inside is right).
    fn l4_sum(f: &[u8], m: &PacketMeta) -> u32 {
        let l3 = m.l3_offset;
        let len = (m.l3_end - m.l4_offset) as u32;
        let addrs = if m.key.ip_version() == 4 { &f[l3 + 12..l3 + 20] } else { &f[l3 + 8..l3 + 40] };
        fold(sum(addrs) + m.key.proto() as u32 + len + sum(&f[m.l4_offset..m.l3_end]))
    }

    /// Full recomputation, written independently of the incremental code.
    pub(crate) fn checksums_valid(f: &[u8]) -> bool {
        let m = parse(f, 0).expect("parses");
        let (l3, l4) = (m.l3_offset, m.l4_offset);
        let mut ok = m.key.ip_version() == 6 || fold(sum(&f[l3..l3 + 20])) == 0xffff;
        match m.key.proto() {
            PROTO_UDP if (f[l4 + 6], f[l4 + 7]) != (0, 0) => ok &= l4_sum(f, &m) == 0xffff,
            PROTO_TCP => ok &= l4_sum(f, &m) == 0xffff,
            _ => {}
        }
        ok
    }

    /// A TCP segment with `opts` bytes of options, the given DSCP and ECN 1,
    /// checksums computed from scratch.
    pub(crate) fn tcp(v6: bool, dscp: u8, opts: usize, payload: &[u8]) -> Vec<u8> {
        let filler = vec![0u8; 12 + opts + payload.len()];
        let mut f = if v6 {
            udp6([0x20; 16], [0x30; 16], 1, 2, &filler)
        } else {
            udp4([10, 0, 1, 2], [10, 0, 2, 2], 1, 2, &filler)
        };
        let (l3, l4) = (14, if v6 { 54 } else { 34 });
        if v6 {
            f[l3 + 6] = PROTO_TCP;
            let tc = dscp << 2 | 1;
            f[l3] = 0x60 | tc >> 4;
            f[l3 + 1] = tc << 4;
        } else {
            f[l3 + 1] = dscp << 2 | 1;
            f[l3 + 9] = PROTO_TCP;
            f[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
            let c = !fold(sum(&f[l3..l3 + 20])) as u16;
            f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        let t = &mut f[l4..];
        t[..4].copy_from_slice(&[0x0f, 0xa0, 0x14, 0x51]); // 4000 -> 5201
        t[4..12].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]);
        t[12] = (((20 + opts) / 4) << 4) as u8;
        t[13] = 0x18; // PSH ACK
        t[14..20].copy_from_slice(&[2, 0, 0, 0, 0, 0]);
        for (i, o) in t[20..20 + opts].iter_mut().enumerate() {
            *o = if i + 1 == opts { 0 } else { 1 }; // NOPs, then end of options
        }
        t[20 + opts..].copy_from_slice(payload);
        let m = parse(&f, 0).unwrap();
        let c = !l4_sum(&f, &m) as u16;
        f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
        assert!(checksums_valid(&f));
        f
    }

    fn pkt(frame: &[u8]) -> (VecBuf, PacketMeta) {
        (VecBuf::new(frame, 256), parse(frame, 0).unwrap())
    }

    fn run_chain(orig: &[u8], hops: u32) -> (Vec<u8>, Vec<u8>, Sunk) {
        run_chain_with(&params(), orig, hops)
    }

    fn run_chain_with(p: &IntParams, orig: &[u8], hops: u32) -> (Vec<u8>, Vec<u8>, Sunk) {
        let (mut b, m) = pkt(orig);
        source(&mut b, &m, p, &md(1), 1500).unwrap();
        assert!(checksums_valid(b.bytes()), "after source");
        for node in 2..=hops {
            let m = parse(b.bytes(), 0).unwrap();
            assert_eq!(transit(&mut b, &m, p.presence, &md(node), 1500).unwrap(), Transit::Pushed);
            assert!(checksums_valid(b.bytes()), "after transit {node}");
        }
        let m = parse(b.bytes(), 0).unwrap();
        let mut report = vec![0u8; 512];
        let (s, n) = sink(&mut b, &m, p.presence, &mut report).unwrap();
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
        let blk = find(&report, &m, UDP).unwrap();
        let v = IntMd::new_checked(&report[blk..]).unwrap();
        assert_eq!((v.npt(), v.saved(), v.hops(), v.rhc()), (1, 5001, 3, 5));
        assert_eq!(&v.hop(0)[..4], &3u32.to_be_bytes());
        assert_eq!(&v.hop(2)[..4], &1u32.to_be_bytes());
    }

    #[test]
    fn fragments_are_left_alone() {
        // A first IPv4 fragment (MF) has its UDP header, but bytes added to
        // it would break reassembly: not sourced, and INT in it not found.
        let mut orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"first fragment");
        orig[20] |= 0x20;
        orig[24..26].fill(0);
        let c = crate::wire::checksum::checksum(&orig[14..34]);
        orig[24..26].copy_from_slice(&c.to_be_bytes());
        let (mut b, m) = pkt(&orig);
        assert_eq!(m.l4_offset, 34, "a first fragment has ports");
        assert_eq!(source(&mut b, &m, &params(), &md(1), 1500), Err(Skip::NotApplicable));
        assert_eq!(b.bytes(), &orig[..]);
        // INT put in before the packet was fragmented is not touched either.
        let (mut b, m) = pkt(&udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"first fragment"));
        source(&mut b, &m, &params(), &md(1), 1500).unwrap();
        let mut f = b.bytes().to_vec();
        f[20] |= 0x20;
        let m = parse(&f, 0).unwrap();
        assert_eq!(find(&f, &m, UDP), None);
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
        // The inserted header's checksum is valid (IPv6 forbids a zero one),
        // on both IP versions.
        for v6 in [false, true] {
            let tcp = tcp(v6, 0, 0, b"segment");
            let p = params();
            let (mut b, m) = pkt(&tcp);
            let n = source(&mut b, &m, &p, &md(1), 1500).unwrap();
            assert_eq!(n, 8 + 16 + hop_words(p.bitmap) * 4);
            let m2 = parse(b.bytes(), 0).unwrap();
            assert_eq!((m2.key.proto(), m2.key.dst_port()), (17, PORT));
            let l4 = m2.l4_offset;
            assert_ne!(&b.bytes()[l4 + 6..l4 + 8], &[0, 0], "v6 {v6}");
            assert!(checksums_valid(b.bytes()), "v6 {v6}");
            let (after, _, s) = run_chain(&tcp, 3);
            assert_eq!((after, s.hops), (tcp, 3));
        }
        // Another IPv6 payload (no pseudo-header sum to lean on) is summed.
        let mut other = udp6([0x20; 16], [0x30; 16], 1000, 2000, b"gre-ish");
        other[14 + 6] = 47;
        let (mut b, m) = pkt(&other);
        source(&mut b, &m, &params(), &md(1), 1500).unwrap();
        let m2 = parse(b.bytes(), 0).unwrap();
        assert_ne!(&b.bytes()[m2.l4_offset + 6..m2.l4_offset + 8], &[0, 0]);
        assert!(checksums_valid(b.bytes()));
    }

    #[test]
    fn rhc_exhaustion_sets_e_and_pushes_nothing() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"e");
        let p = IntParams { max_hops: 2, ..params() };
        let (mut b, m) = pkt(&orig);
        source(&mut b, &m, &p, &md(1), 1500).unwrap();
        for (node, want) in [(2, Transit::Pushed), (3, Transit::Exhausted), (4, Transit::Exhausted)] {
            let m = parse(b.bytes(), 0).unwrap();
            assert_eq!(transit(&mut b, &m, UDP, &md(node), 1500).unwrap(), want);
            assert!(checksums_valid(b.bytes()));
        }
        let m = parse(b.bytes(), 0).unwrap();
        let v = IntMd::new_checked(&b.bytes()[find(b.bytes(), &m, UDP).unwrap()..]).unwrap();
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
        assert_eq!(transit(&mut b, &m, UDP, &md(2), mtu).unwrap(), Transit::MtuExceeded);
        assert!(checksums_valid(b.bytes()));
        let m = parse(b.bytes(), 0).unwrap();
        assert!(IntMd::new_checked(&b.bytes()[find(b.bytes(), &m, UDP).unwrap()..]).unwrap().flag_m());
        // A source that cannot fit even shim + header does not start INT.
        let (mut b, m) = pkt(&orig);
        assert_eq!(source(&mut b, &m, &p, &md(1), orig.len() - 14 + 15), Err(Skip::Mtu));
        assert_eq!(b.bytes(), &orig[..]);
        // One that fits the header but not its own metadata starts INT with M.
        let (mut b, m) = pkt(&orig);
        assert_eq!(source(&mut b, &m, &p, &md(1), orig.len() - 14 + 16), Ok(16));
        let m = parse(b.bytes(), 0).unwrap();
        let v = IntMd::new_checked(&b.bytes()[find(b.bytes(), &m, UDP).unwrap()..]).unwrap();
        assert!(v.flag_m() && v.hops() == 0);
    }

    #[test]
    fn incremental_adjust_matches_a_full_recompute() {
        // 2000 random 40-byte blocks whose bytes 8..24 change: the adjusted
        // checksum verifies like the recomputed one (one's complement has
        // two zeros, so compare what a receiver checks, not the bits).
        let mut rng = crate::rand::XorShift::new(0x2545_f491_4f6c_dd1d);
        let mut rnd = || rng.next_u64();
        for _ in 0..2000 {
            let mut d: Vec<u8> = (0..40).map(|_| rnd() as u8).collect();
            d[38] = 0;
            d[39] = 0;
            let c = checksum::checksum(&d);
            let old = checksum::sum(0, &d[8..24]);
            for b in &mut d[8..24] {
                *b = rnd() as u8;
            }
            let new = checksum::sum(0, &d[8..24]);
            let c2 = adjust(c, old, new);
            d[38..40].copy_from_slice(&c2.to_be_bytes());
            assert_eq!(checksum::fold(checksum::sum(0, &d)), 0xffff, "{d:?}");
        }
    }

    #[test]
    fn a_full_shim_length_sets_m_instead_of_wrapping() {
        // 19 words per hop (every instruction): 13 hops fill 3 + 247 of the
        // shim's 255 words; a 14th would need 269.
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, &[7; 20]);
        let p = IntParams { bitmap: 0xffff, max_hops: 30, ..params() };
        let (mut b, m) = (VecBuf::new(&orig, 1100), parse(&orig, 0).unwrap());
        source(&mut b, &m, &p, &md(1), 9000).unwrap();
        for hop in 2..=13 {
            let m = parse(b.bytes(), 0).unwrap();
            assert_eq!(transit(&mut b, &m, UDP, &md(hop), 9000).unwrap(), Transit::Pushed, "hop {hop}");
        }
        let m = parse(b.bytes(), 0).unwrap();
        assert_eq!(transit(&mut b, &m, UDP, &md(14), 9000).unwrap(), Transit::MtuExceeded);
        assert!(checksums_valid(b.bytes()));
        let m = parse(b.bytes(), 0).unwrap();
        let v = IntMd::new_checked(&b.bytes()[find(b.bytes(), &m, UDP).unwrap()..]).unwrap();
        assert!(v.flag_m() && v.hops() == 13 && v.total_len() == 4 + 250 * 4);
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
            assert_eq!(transit(&mut bb, &m, UDP, &md(2), 1500), Err(want));
            assert_eq!(bb.bytes(), &f[..], "left untouched");
            let mut r = [0u8; 64];
            assert_eq!(sink(&mut bb, &m, UDP, &mut r).map(|_| ()), Err(want));
        }
        // A UDP length that ends inside the block (the IP payload is
        // longer): the block is not within the datagram, so it is truncated.
        let mut f = good.clone();
        let udp_len = 8 + INT_HDR_LEN as u16; // the datagram ends after the header: the stack lies past it
        f[38..40].copy_from_slice(&udp_len.to_be_bytes());
        let m = parse(&f, 0).unwrap();
        let mut bb = VecBuf::new(&f, 64);
        assert_eq!(transit(&mut bb, &m, UDP, &md(2), 1500), Err(DropReason::IntTruncated));
        assert_eq!(bb.bytes(), &f[..], "left untouched");
        // Already carrying INT: a second source leaves it.
        let m = parse(&good, 0).unwrap();
        let mut bb = VecBuf::new(&good, 64);
        assert_eq!(source(&mut bb, &m, &p, &md(9), 1500), Err(Skip::Presence));
    }

    const CODEPOINT: Presence = Presence::Dscp { value: 0x17, mask: 0x3f };

    #[test]
    fn dscp_mode_follows_the_spec_example() {
        // wire-formats §1: bitmap 0x9000, HopML 2, RHC 8 -> 6 after two
        // pushes, shim `10 07 00 <dscp << 2>`.
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"dscp");
        let p = IntParams { presence: CODEPOINT, bitmap: 0x9000, ..params() };
        let (mut b, m) = pkt(&orig);
        assert_eq!(source(&mut b, &m, &p, &md(1), 1500), Ok(16 + 8));
        let m = parse(b.bytes(), 0).unwrap();
        transit(&mut b, &m, CODEPOINT, &md(2), 1500).unwrap();
        let f = b.bytes();
        assert_eq!(f[15] >> 2, 0x17, "DSCP set to the codepoint");
        assert_eq!(rd16(f, 16) as usize, orig.len() - 14 + 32, "IP total length");
        assert_eq!(rd16(f, 36), 5001, "ports untouched");
        assert_eq!(&f[42..46], &[0x10, 0x07, 0x00, 0x00]);
        assert_eq!(&f[46..58], &[0x20, 0, 0x02, 0x06, 0x90, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&f[58..62], &2u32.to_be_bytes(), "newest hop first");
        assert_eq!(&f[66..70], &1u32.to_be_bytes());
        assert!(checksums_valid(f));
    }

    #[test]
    fn dscp_mode_udp_and_tcp_with_options_round_trip() {
        let p = IntParams { presence: CODEPOINT, ..params() };
        for orig in [
            udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"v4 udp"),
            udp6([0x20; 16], [0x30; 16], 1000, 2000, b"v6 udp, odd"),
            tcp(false, 0x0a, 12, b"tcp v4 payload"),
            tcp(false, 0, 0, b""),
            tcp(true, 0x2e, 8, b"tcp v6 payload, odd"),
        ] {
            let (after, report, s) = run_chain_with(&p, &orig, 3);
            assert_eq!(after, orig, "sink restores every byte (DSCP, ECN, lengths, checksums)");
            assert_eq!(s.hops, 3);
            let m = parse(&report, 0).unwrap();
            let blk = find(&report, &m, CODEPOINT).expect("INT after the L4 header");
            let l4_hdr = if m.key.proto() == PROTO_TCP { (report[m.l4_offset + 12] >> 4) as usize * 4 } else { 8 };
            assert_eq!(blk, m.l4_offset + l4_hdr, "after TCP options");
            let v = IntMd::new_checked(&report[blk..]).unwrap();
            assert_eq!((v.npt(), v.saved() >> 2), (0, dscp(&orig, &parse(&orig, 0).unwrap()) as u16));
            // Ports and protocol stay as the host sent them.
            assert_eq!((m.key.proto(), m.key.dst_port()), (parse(&orig, 0).unwrap().key.proto(), m.key.dst_port()));
        }
    }

    #[test]
    fn dscp_bit_mode_keeps_the_other_bits() {
        let bit = Presence::Dscp { value: 0x01, mask: 0x01 };
        let p = IntParams { presence: bit, ..params() };
        let orig = tcp(true, 0x0a, 4, b"af11");
        let (mut b, m) = pkt(&orig);
        source(&mut b, &m, &p, &md(1), 1500).unwrap();
        let m2 = parse(b.bytes(), 0).unwrap();
        assert_eq!(dscp(b.bytes(), &m2), 0x0b);
        assert_eq!(b.bytes()[15] & 0x30, 0x10, "ECN kept");
        assert!(find(b.bytes(), &m2, bit).is_some());
        assert!(checksums_valid(b.bytes()));
        let (after, _, _) = run_chain_with(&p, &orig, 2);
        assert_eq!(after, orig);
    }

    #[test]
    fn dscp_mode_leaves_other_protocols_and_refuses_mismatched_npt() {
        let p = IntParams { presence: CODEPOINT, ..params() };
        let mut icmp = udp4([10, 0, 1, 2], [10, 0, 2, 2], 1, 2, b"ping");
        icmp[23] = 1;
        icmp[24..26].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&icmp[14..34]);
        icmp[24..26].copy_from_slice(&c.to_be_bytes());
        let (mut b, m) = pkt(&icmp);
        assert_eq!(source(&mut b, &m, &p, &md(1), 1500), Err(Skip::NotApplicable));
        assert_eq!(b.bytes(), &icmp[..]);
        // A TCP packet claiming NPT=1 (a UDP-only encoding) is not restored.
        let (mut b, m) = pkt(&tcp(false, 0, 0, b"x"));
        source(&mut b, &m, &p, &md(1), 1500).unwrap();
        let mut f = b.bytes().to_vec();
        f[54] = 0x14; // type 1, NPT 1
        let m = parse(&f, 0).unwrap();
        let mut bb = VecBuf::new(&f, 64);
        assert_eq!(sink(&mut bb, &m, CODEPOINT, &mut []).map(|_| ()), Err(DropReason::IntBadVersion));
        assert_eq!(bb.bytes(), &f[..]);
        // Sourced by `p`, with byte `at` of the result set to `v`: the sink
        // refuses it and leaves it as it came.
        let refused = |orig: &[u8], p: &IntParams, at: usize, v: u8| {
            let (mut b, m) = pkt(orig);
            source(&mut b, &m, p, &md(1), 1500).unwrap();
            let mut f = b.bytes().to_vec();
            f[at] = v;
            let m = parse(&f, 0).unwrap();
            let mut bb = VecBuf::new(&f, 64);
            assert_eq!(sink(&mut bb, &m, p.presence, &mut []).map(|_| ()), Err(DropReason::IntBadVersion), "{f:02x?}");
            assert_eq!(bb.bytes(), &f[..]);
        };
        let udp = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x");
        // Nor a UDP one: restored from NPT 1 it would leave with the
        // codepoint still on (found by the pipeline fuzz target).
        refused(&udp, &p, 42, 0x14);
        // Nor NPT 0 in a UDP-port domain: the INT port would stay on.
        refused(&udp, &params(), 42, 0x10);
        // Nor NPT 2 saving UDP (the shim's last byte).
        refused(&tcp(false, 0, 0, b"x"), &params(), 45, 17);
        // Nor NPT 1 saving the INT port (17768 = 0x4568, the shim's last
        // two bytes: a packet to port 0x1368 with the high byte made 0x45):
        // restored, it would still be INT to the next node (found by the
        // pipeline fuzz target).
        refused(&udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 0x1368, b"x"), &params(), 44, 0x45);
        // Nor NPT 0 saving the domain's own codepoint (0x17 << 2 in the
        // shim's last byte): restored, the packet would still carry it (found
        // by the pipeline fuzz target, through the analytics sink).
        refused(&udp, &p, 45, 0x17 << 2);
        refused(&udp, &p, 45, (0x17 << 2) | 1);
    }

    #[test]
    fn the_memo_answers_as_quick_consent_and_follows_the_presence() {
        let mut memo = ConsentMemo::default();
        assert_eq!(memo.to_ports(0b110), QuickConsent::NONE, "nothing kept yet");
        let (dscp, udp) = (Presence::Dscp { value: 0x17, mask: 0x3f }, Presence::UdpPort(5000));
        for presence in [dscp, udp, dscp] {
            memo.refresh(presence);
            memo.refresh(presence);
            for ports in [0b110, u32::MAX] {
                assert_eq!(memo.to_ports(ports), quick_consent(ports, presence), "{presence:?} to {ports:#x}");
            }
        }
    }
}
