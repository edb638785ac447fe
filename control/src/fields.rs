//! The values every configuration section and API request shares: the
//! error that names a key, and the parsers of names, MACs, addresses,
//! prefixes, protocols, ports and seconds. A leaf: the sections (`config`,
//! `int::config`, `ampm::config`) and the API all use it, it uses none of them.

use std::net::IpAddr;

/// A configuration error: the key it is about and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.key, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

pub(crate) fn cerr(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { key: key.into(), reason: reason.into() }
}

/// The first of `keys` (key, given) that is given, refused with `why`: a
/// key its mode or feature never reads would be taken and do nothing.
pub(crate) fn refuse_given(keys: &[(&str, bool)], why: impl Into<String>) -> Result<(), ConfigError> {
    match keys.iter().find(|(_, given)| *given) {
        Some((key, _)) => Err(cerr(*key, why)),
        None => Ok(()),
    }
}

/// Parses "aa:bb:cc:dd:ee:ff".
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("'{s}' is not a MAC address (six hex bytes separated by ':')"));
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        // One or two hex digits: from_str_radix alone would also take "+f"
        // and a typo such as "09f".
        if !(1..=2).contains(&p.len()) || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("'{s}' is not a MAC address (six hex bytes separated by ':')"));
        }
        m[i] = u8::from_str_radix(p, 16).map_err(|_| format!("'{s}' is not a MAC address"))?;
    }
    Ok(m)
}

/// A station's own MAC (a port's, a neighbour's, a collector's next hop):
/// unicast and not all zeros.
pub fn parse_unicast_mac(s: &str) -> Result<[u8; 6], String> {
    let m = parse_mac(s)?;
    if m[0] & 1 != 0 || m == [0; 6] {
        return Err(format!("'{s}' is not a unicast MAC address"));
    }
    Ok(m)
}

/// A command line's seconds (`--duration`): a fraction allowed; NaN,
/// negative and unrepresentable values are refused.
pub fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !v.is_finite() {
        return Err(format!("'{s}' is not a finite number of seconds"));
    }
    if v < 0.0 {
        return Err(format!("'{s}': must be 0 or more seconds"));
    }
    std::time::Duration::try_from_secs_f64(v).map_err(|_| format!("'{s}': too many seconds"))
}

/// A number on a command line, decimal or 0x-hex (IDs that configs and
/// views write in hex: domain IDs, DSCP codepoints).
pub fn parse_u16_any(s: &str) -> Result<u16, String> {
    match s.strip_prefix("0x") {
        Some(h) => u16::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|_| format!("'{s}' is not a number 0-65535 (decimal or 0x-hex)"))
}

/// As `parse_u16_any`, 0-255.
pub fn parse_u8_any(s: &str) -> Result<u8, String> {
    parse_u16_any(s)?.try_into().map_err(|_| format!("'{s}' is not a number 0-255"))
}

/// A time to run for: more than 0 seconds (`--duration`; omitted, a run
/// lasts until a signal).
pub fn parse_positive_seconds(s: &str) -> Result<std::time::Duration, String> {
    match parse_seconds(s)? {
        d if d.is_zero() => Err(format!("'{s}': must be more than 0 seconds")),
        d => Ok(d),
    }
}

/// Longest name of a port, watch rule, AM-PM flow or slot rule.
pub const MAX_NAME_LEN: usize = 64;

/// Names are what intctl takes as one argument and the views print: 1 to
/// 64 printable ASCII characters, no spaces.
pub fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(cerr(
            key,
            format!(
                "'{}' is not a name: 1 to {MAX_NAME_LEN} printable ASCII characters, no spaces",
                name.escape_debug()
            ),
        ));
    }
    Ok(())
}

/// A neighbour's or gateway's address: a host, not an unspecified,
/// loopback, multicast or broadcast address (nor IPv4 0.0.0.0/8).
pub(crate) fn parse_host_ip(key: &str, s: &str) -> Result<IpAddr, ConfigError> {
    let ip = parse_ip(key, s)?;
    let bad = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || match ip {
            IpAddr::V4(a) => a.is_broadcast() || a.octets()[0] == 0,
            IpAddr::V6(_) => false,
        };
    if bad {
        return Err(cerr(key, format!("'{s}' is not a host address")));
    }
    Ok(ip)
}

pub fn format_mac(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Parses "addr/len" with the length checked against the family.
pub fn parse_prefix(s: &str) -> Result<(IpAddr, u8), String> {
    let (a, l) = s.split_once('/').ok_or_else(|| format!("'{s}' is not a prefix (ADDR/LEN)"))?;
    let ip: IpAddr = a.parse().map_err(|_| format!("'{a}' is not an IP address"))?;
    let len: u8 = l.parse().map_err(|_| format!("'{l}' is not a prefix length"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(format!("prefix length {len} exceeds {max}"));
    }
    Ok((ip, len))
}

/// Parses a route's "network/len": as `parse_prefix`, and refused with
/// host bits set (as `ip route` does), since "10.0.0.1/8" and "10.0.0.0/8"
/// would be two routes to one network.
pub fn parse_network(s: &str) -> Result<(IpAddr, u8), String> {
    let (ip, len) = parse_prefix(s)?;
    let net = match ip {
        IpAddr::V4(a) => IpAddr::from(dataplane::lpm::mask(a.octets(), len)),
        IpAddr::V6(a) => IpAddr::from(dataplane::lpm::mask(a.octets(), len)),
    };
    if net != ip {
        return Err(format!("'{s}' has host bits set (the network is {net}/{len})"));
    }
    Ok((ip, len))
}

/// Whether `ip` is on one of the subnets `addrs` (a port's addresses).
pub fn on_link<const N: usize>(addrs: &[([u8; N], u8)], ip: [u8; N]) -> bool {
    addrs.iter().any(|(p, l)| dataplane::lpm::mask(*p, *l) == dataplane::lpm::mask(ip, *l))
}

pub fn parse_proto(v: &toml::Value) -> Result<u8, String> {
    match v {
        toml::Value::Integer(n) if (0..=255).contains(n) => Ok(*n as u8),
        toml::Value::String(s) => parse_proto_name(s),
        _ => Err("expected a protocol name (udp, tcp, icmp, icmpv6) or number 0-255".into()),
    }
}

pub fn parse_proto_name(s: &str) -> Result<u8, String> {
    match s {
        "udp" => Ok(17),
        "tcp" => Ok(6),
        "icmp" => Ok(1),
        "icmpv6" => Ok(58),
        n => n.parse().map_err(|_| format!("unknown protocol '{n}' (udp, tcp, icmp, icmpv6 or 0-255)")),
    }
}

/// Index of the port named `name`; the error is about `key`.
pub fn port_by_name(names: &[String], key: &str, name: &str) -> Result<u16, ConfigError> {
    names.iter().position(|p| p == name).map(|i| i as u16).ok_or_else(|| cerr(key, format!("no port named '{name}'")))
}

pub(crate) fn parse_ip(key: &str, s: &str) -> Result<IpAddr, ConfigError> {
    s.parse().map_err(|_| cerr(key, format!("'{s}' is not an IP address")))
}
