//! The bodies of the fuzz targets (`tests/fuzz/`, cargo-fuzz / libFuzzer),
//! here so that `tests/fuzz_replay.rs` runs every corpus file through the
//! same code on stable Rust in `cargo test`. Each takes arbitrary bytes; a
//! panic (including a broken invariant below) is a finding.

use dataplane::int::Presence;
use dataplane::wire::int_md::IntMd;

const INT_PORT: Presence = Presence::UdpPort(17768);
const INT_DSCP: Presence = Presence::Dscp { value: 0x17, mask: 0x3f };

/// The packet parser and the wire views on a frame: offsets the parser
/// gives lie within the frame and in order; an INT block it finds is one
/// the checked view accepts only with its stack inside the packet; the
/// Telemetry Report and GPINT headers parse or refuse without panicking.
pub fn wire(data: &[u8]) {
    let _ = dataplane::wire::ethernet::parse_l2(data);
    if let Ok(meta) = dataplane::parse::parse(data, 0) {
        assert!(meta.l3_offset <= data.len() && meta.l3_end <= data.len(), "offsets within the frame");
        assert!(meta.l3_offset <= meta.l3_end, "l3 start before its end");
        if meta.l4_offset != 0 {
            assert!(meta.l3_offset < meta.l4_offset && meta.l4_offset <= meta.l3_end, "l4 inside l3");
        }
        for presence in [INT_PORT, INT_DSCP] {
            if let Some(at) = dataplane::int::find(data, &meta, presence) {
                assert!(at <= meta.l3_end);
                if let Ok(v) = IntMd::new_checked(&data[at..meta.l3_end]) {
                    assert!(at + v.total_len() <= meta.l3_end, "the block lies within the packet");
                    let _ = (v.hops(), v.hop_ml(), v.stack().len());
                }
            }
        }
    }
    // Report and probe headers anywhere in the bytes.
    if let Ok(_g) = dataplane::wire::telemetry_report::parse_group(data) {
        let mut o = 8;
        while let Some(rest) = data.get(o..) {
            let Ok(r) = dataplane::wire::telemetry_report::Individual::parse(rest) else { break };
            o += 4 + 4 * r.len_words as usize;
            if r.len_words == 0xff {
                break;
            }
        }
    }
    let _ = dataplane::wire::gpint::Header::parse(data);
    let _ = dataplane::wire::gpint::Probe::new_checked(data);
    if data.len() >= 32 {
        let (src, dst) = (data[..16].try_into().unwrap(), data[16..32].try_into().unwrap());
        let _ = dataplane::wire::icmp::parse_nd(src, dst, &data[32..]);
    }
}

/// intcollector's report decoder (both presence methods): a decoded
/// report's inner packet lies within the datagram.
pub fn collector(data: &[u8]) {
    for presence in [INT_PORT, INT_DSCP] {
        if let Ok(reports) = intcollector::decode_packet(data, presence) {
            for r in &reports {
                assert!(r.inner.end <= data.len().next_multiple_of(4), "inner packet within the datagram");
                let mut s = String::new();
                r.write_json(&mut s);
                assert!(serde_json::from_str::<serde_json::Value>(&s).is_ok(), "a report's JSON parses: {s}");
            }
        }
    }
}

/// The AM-PM record joiner and the analytics record reader on text lines.
pub fn collector_records(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut j = intcollector::ampm::Joiner::new(2);
    for line in text.lines() {
        for v in j.datagram(line) {
            assert!(v.is_object());
        }
    }
    let _ = j.summary();
    let mut f = intcollector::flows::FlowRecords::default();
    for line in text.lines() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            let _ = f.record(&v);
        }
    }
}

/// The TOML configuration loader: an error or a config, never a panic; a
/// config it accepts validates again from its own serialization.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = control::config::Config::from_toml(&text);
}

/// The control protocol's request parser.
pub fn control_request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        let _ = control::api::Envelope::parse(line);
    }
}

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target by name (the replay test and `scripts/fuzz.sh` use these).
pub const TARGETS: &[(&str, Target)] = &[
    ("wire", wire),
    ("collector", collector),
    ("collector_records", collector_records),
    ("config", config),
    ("control_request", control_request),
];
