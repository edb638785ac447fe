use dataplane::counters::CounterValues;
use dataplane::flow_table::FlowTable;
use dataplane::forward::{process, ControlEvent, ControlSink, Ctx};
use dataplane::mac_table::MacTable;
use dataplane::tables::*;
struct S;
impl ControlSink for S {
    fn send(&mut self, _e: ControlEvent) -> bool {
        true
    }
}
fn main() {
    let spec = TableSpec {
        mode: Mode::CrossConnect,
        ports: vec![
            PortState {
                name: "a".into(),
                mac: [2, 0, 0, 0, 0, 1],
                up: true,
                ipv4: vec![],
                ipv6: vec![],
            },
            PortState {
                name: "b".into(),
                mac: [2, 0, 0, 0, 0, 2],
                up: true,
                ipv4: vec![],
                ipv6: vec![],
            },
        ],
        xconnect: vec![Some(1), Some(0)],
        routes: vec![],
        neighbours: vec![],
    };
    let t = Tables::build(&spec, 1).unwrap();
    let mut flows = FlowTable::new(65536, 0);
    let mut macs = MacTable::new(1024, 0);
    let mut c = CounterValues::default();
    let mut s = S;
    let mut f = vec![0u8; 60];
    f[12] = 8;
    f[14] = 0x45;
    f[16] = 0;
    f[17] = 46;
    f[22] = 64;
    f[23] = 17;
    f[38] = 0;
    f[39] = 26;
    let n = 20_000_000u64;
    let t0 = std::time::Instant::now();
    let mut acc = 0u64;
    for i in 0..n {
        f[29] = i as u8 & 63;
        let mut ctx = Ctx {
            tables: &t,
            flows: &mut flows,
            macs: &mut macs,
            counters: &mut c,
            control: &mut s,
            now: i,
            learn_flows: false,
        };
        if let dataplane::forward::Verdict::Tx(p) = process(&mut ctx, &mut f, 0) {
            acc += p as u64;
        }
    }
    let dt = t0.elapsed().as_secs_f64();
    println!("{:.1} ns/pkt ({acc})", dt * 1e9 / n as f64);
    let t0 = std::time::Instant::now();
    for i in 0..n {
        f[29] = i as u8 & 63;
        acc += dataplane::parse::parse(&f, 0)
            .map(|m| m.key.src_port as u64)
            .unwrap_or(1);
    }
    println!(
        "parse {:.1} ns ({acc})",
        t0.elapsed().as_secs_f64() * 1e9 / n as f64
    );
    let m = dataplane::parse::parse(&f, 0).unwrap();
    let t0 = std::time::Instant::now();
    let mut k = m.key;
    for i in 0..n {
        k.src = i as u128;
        acc = acc.wrapping_add(k.hash64());
    }
    println!(
        "hash {:.1} ns ({acc})",
        t0.elapsed().as_secs_f64() * 1e9 / n as f64
    );
    let t0 = std::time::Instant::now();
    for i in 0..n {
        k.src = (i & 63) as u128;
        acc += flows.hit(&k, 60, i).is_some() as u64;
    }
    println!(
        "flow miss {:.1} ns ({acc})",
        t0.elapsed().as_secs_f64() * 1e9 / n as f64
    );
}
#[allow(dead_code)]
fn parts() {}
