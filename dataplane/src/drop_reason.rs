//! Every reason the data path drops a packet. The enum indexes the per-worker
//! drop counters, so adding a reason adds a counter.

/// Why a packet was dropped. `#[repr(u8)]`: the value is the counter index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DropReason {
    /// Frame shorter than its Ethernet / VLAN header.
    EthTruncated,
    /// More than two stacked VLAN tags.
    VlanTooDeep,
    /// IPv4 header shorter than 20 bytes or the frame cuts it.
    Ipv4Truncated,
    Ipv4BadVersion,
    /// IHL below 5 or pointing past the frame.
    Ipv4BadIhl,
    /// Total length below the header length or past the frame.
    Ipv4BadTotalLength,
    Ipv4BadChecksum,
    Ipv6Truncated,
    Ipv6BadVersion,
    /// Payload length past the frame.
    Ipv6BadPayloadLength,
    /// An extension header runs off the end of the packet.
    Ipv6ExtTruncated,
    /// More extension headers than the parser walks (8).
    Ipv6ExtTooMany,
    /// UDP header cut short, or its length field disagrees with IP.
    UdpBadLength,
    /// TCP header cut short, or data offset below 5 / past the packet.
    TcpBadHeader,
    /// ARP that is not Ethernet/IPv4 or is cut short.
    ArpMalformed,
    /// ICMP/ICMPv6 message to the switch cut short or with a bad checksum.
    IcmpMalformed,
    /// IPv4 TTL would reach zero.
    TtlExceeded,
    /// IPv6 hop limit would reach zero.
    HopLimitExceeded,
    /// L3 mode: no route matches the destination.
    NoRoute,
    /// L3 mode: next hop's MAC not known yet (resolution requested).
    NeighbourUnresolved,
    /// L3 mode: unicast frame not addressed to the port's MAC.
    NotOurMac,
    /// L3 mode: neither IPv4, IPv6 nor ARP.
    UnsupportedEthertype,
    /// Addressed to the switch but not a protocol it answers.
    LocalUnhandled,
    /// ARP request for an address the switch does not own.
    ArpNotForUs,
    /// Flow table entry says drop.
    FlowDrop,
    /// Cross-connect: the input port has no peer.
    NoPeer,
    /// Bridge: destination is on the port the frame came from.
    L2SameSegment,
    /// The chosen output port is administratively down.
    PortDown,
    /// Output port equals input port where hairpinning is not allowed.
    Hairpin,
    /// The TX queue stayed full after retries.
    TxFull,
    /// Chained (multi-segment) mbufs are not processed.
    MultiSegment,
    /// Multicast or broadcast where the mode does not forward it.
    L3Multicast,
    /// Link emulation on the output port dropped it at random (`loss`).
    ImpairLoss,
    /// Link emulation queue on the output port was full (`limit`).
    ImpairQueueFull,
    /// INT shim/header cut short, or the shim length runs past the packet.
    IntTruncated,
    /// INT type not INT-MD, or header version not 2.
    IntBadVersion,
    /// INT HopML of 0.
    IntBadHopMl,
    /// INT stack length not a multiple of HopML.
    IntBadStack,
    /// INT D flag: the sink discards the packet after extracting its metadata.
    IntDiscard,
    /// GPINT block shorter than its header, an unknown version or kind, or
    /// MEA records running past the packet.
    GpintMalformed,
    /// GPINT SR count (or SR left) needs more bytes than the probe has.
    GpintSrBeyondBytes,
    /// A GPINT probe with no SR entry left reached a switch.
    GpintSrExhausted,
    /// The GPINT SR entry's next port is not a port of this switch.
    GpintBadNextPort,
    /// The GPINT SR entry asks for counters beyond this switch's registers.
    GpintMeaRange,
    /// The GPINT probe with this hop's INT and MEA would exceed the egress
    /// MTU or the mbuf room.
    GpintOverMtu,
    /// SQR: a stored probe copy got no feedback within `hold_ms`; it went to
    /// the collectors as a recovery notice (the reason the notice carries).
    GpintFeedbackTimeout,
    /// No headroom left in the buffer for this hop's MEA record.
    GpintNoHeadroom,
}

impl DropReason {
    pub const COUNT: usize = DropReason::GpintNoHeadroom as usize + 1;

    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::EthTruncated,
        DropReason::VlanTooDeep,
        DropReason::Ipv4Truncated,
        DropReason::Ipv4BadVersion,
        DropReason::Ipv4BadIhl,
        DropReason::Ipv4BadTotalLength,
        DropReason::Ipv4BadChecksum,
        DropReason::Ipv6Truncated,
        DropReason::Ipv6BadVersion,
        DropReason::Ipv6BadPayloadLength,
        DropReason::Ipv6ExtTruncated,
        DropReason::Ipv6ExtTooMany,
        DropReason::UdpBadLength,
        DropReason::TcpBadHeader,
        DropReason::ArpMalformed,
        DropReason::IcmpMalformed,
        DropReason::TtlExceeded,
        DropReason::HopLimitExceeded,
        DropReason::NoRoute,
        DropReason::NeighbourUnresolved,
        DropReason::NotOurMac,
        DropReason::UnsupportedEthertype,
        DropReason::LocalUnhandled,
        DropReason::ArpNotForUs,
        DropReason::FlowDrop,
        DropReason::NoPeer,
        DropReason::L2SameSegment,
        DropReason::PortDown,
        DropReason::Hairpin,
        DropReason::TxFull,
        DropReason::MultiSegment,
        DropReason::L3Multicast,
        DropReason::ImpairLoss,
        DropReason::ImpairQueueFull,
        DropReason::IntTruncated,
        DropReason::IntBadVersion,
        DropReason::IntBadHopMl,
        DropReason::IntBadStack,
        DropReason::IntDiscard,
        DropReason::GpintMalformed,
        DropReason::GpintSrBeyondBytes,
        DropReason::GpintSrExhausted,
        DropReason::GpintBadNextPort,
        DropReason::GpintMeaRange,
        DropReason::GpintOverMtu,
        DropReason::GpintFeedbackTimeout,
        DropReason::GpintNoHeadroom,
    ];

    /// Stable snake_case name used in counters, logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::EthTruncated => "eth_truncated",
            DropReason::VlanTooDeep => "vlan_too_deep",
            DropReason::Ipv4Truncated => "ipv4_truncated",
            DropReason::Ipv4BadVersion => "ipv4_bad_version",
            DropReason::Ipv4BadIhl => "ipv4_bad_ihl",
            DropReason::Ipv4BadTotalLength => "ipv4_bad_total_length",
            DropReason::Ipv4BadChecksum => "ipv4_bad_checksum",
            DropReason::Ipv6Truncated => "ipv6_truncated",
            DropReason::Ipv6BadVersion => "ipv6_bad_version",
            DropReason::Ipv6BadPayloadLength => "ipv6_bad_payload_length",
            DropReason::Ipv6ExtTruncated => "ipv6_ext_truncated",
            DropReason::Ipv6ExtTooMany => "ipv6_ext_too_many",
            DropReason::UdpBadLength => "udp_bad_length",
            DropReason::TcpBadHeader => "tcp_bad_header",
            DropReason::ArpMalformed => "arp_malformed",
            DropReason::IcmpMalformed => "icmp_malformed",
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::HopLimitExceeded => "hop_limit_exceeded",
            DropReason::NoRoute => "no_route",
            DropReason::NeighbourUnresolved => "neighbour_unresolved",
            DropReason::NotOurMac => "not_our_mac",
            DropReason::UnsupportedEthertype => "unsupported_ethertype",
            DropReason::LocalUnhandled => "local_unhandled",
            DropReason::ArpNotForUs => "arp_not_for_us",
            DropReason::FlowDrop => "flow_drop",
            DropReason::NoPeer => "no_peer",
            DropReason::L2SameSegment => "l2_same_segment",
            DropReason::PortDown => "port_down",
            DropReason::Hairpin => "hairpin",
            DropReason::TxFull => "tx_full",
            DropReason::MultiSegment => "multi_segment",
            DropReason::L3Multicast => "l3_multicast",
            DropReason::ImpairLoss => "impair_loss",
            DropReason::ImpairQueueFull => "impair_queue_full",
            DropReason::IntTruncated => "int_truncated",
            DropReason::IntBadVersion => "int_bad_version",
            DropReason::IntBadHopMl => "int_bad_hop_ml",
            DropReason::IntBadStack => "int_bad_stack",
            DropReason::IntDiscard => "int_discard",
            DropReason::GpintMalformed => "gpint_malformed",
            DropReason::GpintSrBeyondBytes => "gpint_sr_beyond_bytes",
            DropReason::GpintSrExhausted => "gpint_sr_exhausted",
            DropReason::GpintBadNextPort => "gpint_bad_next_port",
            DropReason::GpintMeaRange => "gpint_mea_range",
            DropReason::GpintOverMtu => "gpint_over_mtu",
            DropReason::GpintFeedbackTimeout => "gpint_feedback_timeout",
            DropReason::GpintNoHeadroom => "gpint_no_headroom",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_indexed_by_discriminant_and_names_unique() {
        let mut names = std::collections::HashSet::new();
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            assert!(names.insert(r.name()));
        }
    }
}
