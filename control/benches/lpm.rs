//! The router's longest-prefix match against DPDK's own, on a full-size
//! table: `crate::lpm` (8-bit-stride trie, 4-byte slots) as the worker
//! looks up, one address after another or a burst prefetched first (the
//! pipeline's two passes), beside `rte_fib` (DIR-24-8: rte_lpm's tbl24 and
//! tbl8 layout; rte_lpm itself takes minutes to load a full table, its
//! rule add scanning every rule of the prefix's length) and, for IPv6,
//! `rte_fib6` (trie) and `rte_lpm6`, each in bursts of 32 through its bulk
//! call.
//!
//! Run: `cargo bench -p control --bench lpm`. `LPM_ROUTES=FILE` (lines
//! `PREFIX ...`, as `routes_file` takes them) sets the table, by default
//! `scripts/gen_routes.py`'s 900k IPv4 and 200k IPv6 prefixes, written to
//! `target/lpm-routes.txt` once. The addresses looked up: 1,048,576 a
//! version, each in a prefix drawn at random over the whole table (a
//! working set far beyond the caches). Every table's answer for every
//! address is checked against ours before anything is timed. Prints
//! criterion's lines, then one per case:
//! `lpm=<case> ns_per_lookup=<x.x> ci95=<lo>..<hi>`, and each table's
//! memory and build time.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};

mod common;
use dataplane::dpdk::{DpdkLpm, DpdkLpmKind, Eal, EalArgs};
use dataplane::lpm::{Lpm, Prefix};
use dataplane::rand::XorShift;

const LOOKUPS: usize = 1 << 20;
const BURST: usize = 32;

fn routes_file() -> String {
    if let Ok(f) = std::env::var("LPM_ROUTES") {
        return f;
    }
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target dir").to_path_buf();
    let file = target.join("lpm-routes.txt");
    if !file.exists() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gen_routes.py");
        let out = std::process::Command::new("python3").arg(&script).output().expect("python3 scripts/gen_routes.py");
        assert!(out.status.success(), "gen_routes.py: {}", String::from_utf8_lossy(&out.stderr));
        std::fs::write(&file, out.stdout).expect("write the routes");
    }
    file.to_string_lossy().into_owned()
}

/// The file's prefixes, value = line number (a next hop of its own each).
fn load(file: &str) -> (Vec<Prefix<4>>, Vec<Prefix<16>>) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for (n, line) in text.lines().enumerate() {
        let Some(word) = line.split('#').next().and_then(|l| l.split_whitespace().next()) else { continue };
        let (addr, len) = word.split_once('/').unwrap_or_else(|| panic!("{file} line {}: {word}", n + 1));
        let len: u8 = len.parse().unwrap_or_else(|_| panic!("{file} line {}: {word}", n + 1));
        match addr.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(a)) => v4.push(Prefix { addr: a.octets(), len, value: n as u32 }),
            Ok(std::net::IpAddr::V6(a)) => v6.push(Prefix { addr: a.octets(), len, value: n as u32 }),
            Err(_) => panic!("{file} line {}: {word}", n + 1),
        }
    }
    (v4, v6)
}

/// `LOOKUPS` addresses, each inside a prefix drawn at random.
fn addresses<const N: usize>(routes: &[Prefix<N>], seed: u64) -> Vec<[u8; N]> {
    let mut rng = XorShift::new(seed);
    (0..LOOKUPS)
        .map(|_| {
            let p = &routes[(rng.next_u64() % routes.len() as u64) as usize];
            let mut a = [0u8; N];
            for (i, b) in a.iter_mut().enumerate() {
                let bits = (p.len as i32 - (i as i32) * 8).clamp(0, 8);
                let keep = if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
                *b = (p.addr[i] & keep) | (rng.next_u64() as u8 & !keep);
            }
            a
        })
        .collect()
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let r = f();
    println!("{what}: {:.1} s", t0.elapsed().as_secs_f64());
    r
}

/// One pass over the addresses, a burst at a time, with `lookup_burst`.
fn pass<A>(addrs: &[A], mut lookup_burst: impl FnMut(&[A]) -> u64) -> u64 {
    addrs.chunks(BURST).map(&mut lookup_burst).fold(0, u64::wrapping_add)
}

fn bench(c: &mut Criterion, name: &str, mut one_pass: impl FnMut() -> u64) {
    let mut g = c.benchmark_group("lpm");
    g.throughput(Throughput::Elements(LOOKUPS as u64)).sample_size(10).sampling_mode(SamplingMode::Flat);
    g.bench_function(name, |b| b.iter(|| black_box(one_pass())));
    g.finish();
}

fn to16(a: &[u8; 4]) -> [u8; 16] {
    let mut x = [0u8; 16];
    x[..4].copy_from_slice(a);
    x
}

fn main() {
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let chosen = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    let file = routes_file();
    let (v4, v6) = load(&file);
    println!("routes: {} IPv4, {} IPv6 ({file})", v4.len(), v6.len());
    let ours4 = timed("build ours v4", || Lpm::build(&v4).expect("IPv4 routes"));
    let ours6 = timed("build ours v6", || Lpm::build(&v6).expect("IPv6 routes"));
    println!("memory ours: v4 {} MiB, v6 {} MiB", ours4.memory_bytes() >> 20, ours6.memory_bytes() >> 20);
    let eal = Eal::init(&EalArgs {
        program: "lpm-bench".into(),
        lcores: "0".into(),
        memory_mb: Some(2048),
        no_huge: true,
        no_pci: true,
        file_prefix: Some(format!("lpm-bench-{}", std::process::id())),
        log_level: Some("error".into()),
        ..Default::default()
    })
    .expect("EAL");
    let routes4 = (v4.len() as u32 + 1024).next_power_of_two();
    let routes6 = (v6.len() as u32 + 1024).next_power_of_two();
    let mut fib4 = DpdkLpm::new(&eal, DpdkLpmKind::Fib4, "fib4", routes4, 1 << 16).expect("rte_fib");
    let mut fib6 = DpdkLpm::new(&eal, DpdkLpmKind::Fib6, "fib6", routes6, 1 << 19).expect("rte_fib6");
    let mut lpm6 = DpdkLpm::new(&eal, DpdkLpmKind::Lpm6, "lpm6", routes6, 1 << 18).expect("rte_lpm6");
    // Ours sets the last of equal prefixes; so does a DPDK add of a prefix again.
    timed("build rte_fib v4", || {
        v4.iter().for_each(|p| fib4.add(&to16(&p.addr), p.len, p.value).expect("rte_fib_add"))
    });
    timed("build rte_fib6", || v6.iter().for_each(|p| fib6.add(&p.addr, p.len, p.value).expect("rte_fib6_add")));
    timed("build rte_lpm6", || v6.iter().for_each(|p| lpm6.add(&p.addr, p.len, p.value).expect("rte_lpm6_add")));

    let a4 = addresses(&v4, 4);
    let a6 = addresses(&v6, 6);
    let mut ips4: Vec<u32> = a4.iter().map(|a| u32::from_be_bytes(*a)).collect();
    let mut ips6 = a6.clone();
    let miss = DpdkLpm::MISS;
    // Every answer the same as ours.
    let mut out = vec![0u64; LOOKUPS];
    let mut scratch = vec![0i32; LOOKUPS];
    fib4.lookup4(&mut ips4, &mut out);
    for (a, o) in a4.iter().zip(&out) {
        assert_eq!(ours4.lookup(a).map_or(miss, u64::from), *o, "rte_fib and ours differ on {a:?}");
    }
    for t in [&mut fib6, &mut lpm6] {
        t.lookup6(&mut ips6, &mut out, &mut scratch);
        for (a, o) in a6.iter().zip(&out) {
            assert_eq!(ours6.lookup(a).map_or(miss, u64::from), *o, "IPv6 tables differ on {a:?}");
        }
    }
    println!("answers: all {} lookups of each table agree with ours", 2 * LOOKUPS);

    let mut c = Criterion::default()
        .output_directory(&common::criterion_home())
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let mut out = [0u64; BURST];
    let mut scr = [0i32; BURST];
    let mut names = Vec::new();
    let mut case = |c: &mut Criterion, name: &'static str, f: &mut dyn FnMut() -> u64| {
        if chosen(name) {
            bench(c, name, f);
            names.push(name);
        }
    };
    let sum = |v: Option<u32>| v.unwrap_or(0) as u64;
    case(&mut c, "ours-v4", &mut || pass(&a4, |b| b.iter().map(|a| sum(ours4.lookup(a))).sum()));
    case(&mut c, "ours-v4-prefetch", &mut || {
        pass(&a4, |b| {
            b.iter().for_each(|a| ours4.prefetch(a));
            b.iter().map(|a| sum(ours4.lookup(a))).sum()
        })
    });
    case(&mut c, "rte-fib-v4-bulk", &mut || {
        ips4.chunks_mut(BURST)
            .map(|b| {
                fib4.lookup4(b, &mut out);
                out[..b.len()].iter().sum::<u64>()
            })
            .fold(0, u64::wrapping_add)
    });
    case(&mut c, "ours-v6", &mut || pass(&a6, |b| b.iter().map(|a| sum(ours6.lookup(a))).sum()));
    case(&mut c, "ours-v6-prefetch", &mut || {
        pass(&a6, |b| {
            b.iter().for_each(|a| ours6.prefetch(a));
            b.iter().map(|a| sum(ours6.lookup(a))).sum()
        })
    });
    for (name, t) in [("rte-fib6-bulk", &mut fib6), ("rte-lpm6-bulk", &mut lpm6)] {
        case(&mut c, name, &mut || {
            ips6.chunks_mut(BURST)
                .map(|b| {
                    t.lookup6(b, &mut out, &mut scr);
                    out[..b.len()].iter().sum::<u64>()
                })
                .fold(0, u64::wrapping_add)
        });
    }
    for name in names {
        if let Some((ns, lo, hi)) = common::estimate("lpm", name) {
            let n = LOOKUPS as f64;
            println!("lpm={name} ns_per_lookup={:.1} ci95={:.1}..{:.1}", ns / n, lo / n, hi / n);
        }
    }
    c.final_summary();
}
