//! Classic libpcap file format (Ethernet link type): writer for captures and
//! the demo traffic, reader for tests and tools.

use std::io::{self, Read, Write};

const MAGIC_NS: u32 = 0xa1b2_3c4d;
const MAGIC_US: u32 = 0xa1b2_c3d4;
const LINKTYPE_ETHERNET: u32 = 1;

/// Writes nanosecond-resolution pcap records.
pub struct PcapWriter<W: Write> {
    out: W,
    snaplen: u32,
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut out: W, snaplen: u32) -> io::Result<Self> {
        out.write_all(&MAGIC_NS.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&snaplen.to_le_bytes())?;
        out.write_all(&LINKTYPE_ETHERNET.to_le_bytes())?;
        Ok(PcapWriter { out, snaplen })
    }

    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> io::Result<()> {
        let cap = frame.len().min(self.snaplen as usize);
        self.out.write_all(&((ts_ns / 1_000_000_000) as u32).to_le_bytes())?;
        self.out.write_all(&((ts_ns % 1_000_000_000) as u32).to_le_bytes())?;
        self.out.write_all(&(cap as u32).to_le_bytes())?;
        self.out.write_all(&(frame.len() as u32).to_le_bytes())?;
        self.out.write_all(&frame[..cap])
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Reads every record of a pcap file (either timestamp resolution, either
/// byte order): (timestamp in ns, frame bytes).
pub fn read_all(mut r: impl Read) -> io::Result<Vec<(u64, Vec<u8>)>> {
    let mut buf = Vec::new();
    r.read_to_end(&mut buf)?;
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    if buf.len() < 24 {
        return Err(bad("pcap: file shorter than its global header"));
    }
    let m_le = u32::from_le_bytes(buf[0..4].try_into().unwrap());
    let m_be = u32::from_be_bytes(buf[0..4].try_into().unwrap());
    let (le, ns) = match (m_le, m_be) {
        (MAGIC_NS, _) => (true, true),
        (MAGIC_US, _) => (true, false),
        (_, MAGIC_NS) => (false, true),
        (_, MAGIC_US) => (false, false),
        _ => return Err(bad("pcap: bad magic number")),
    };
    let rd = |b: &[u8]| {
        let a: [u8; 4] = b.try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= buf.len() {
        let (sec, frac, caplen) = (rd(&buf[off..off + 4]), rd(&buf[off + 4..off + 8]), rd(&buf[off + 8..off + 12]));
        off += 16;
        let end = off + caplen as usize;
        if end > buf.len() {
            return Err(bad("pcap: record runs past the end of the file"));
        }
        let ts = sec as u64 * 1_000_000_000 + if ns { frac as u64 } else { frac as u64 * 1000 };
        out.push((ts, buf[off..end].to_vec()));
        off = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_truncation() {
        let mut w = PcapWriter::new(Vec::new(), 8).unwrap();
        w.write(1_500_000_123, &[1, 2, 3]).unwrap();
        w.write(2_000_000_000, &[9; 20]).unwrap();
        let bytes = w.into_inner();
        let pkts = read_all(&bytes[..]).unwrap();
        assert_eq!(pkts, vec![(1_500_000_123, vec![1, 2, 3]), (2_000_000_000, vec![9; 8])]);
        assert!(read_all(&bytes[..bytes.len() - 1]).is_err());
        assert!(read_all(&[0u8; 24][..]).is_err());
    }
}
