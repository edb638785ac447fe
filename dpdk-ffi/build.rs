//! Generates bindings for DPDK 22.11 and compiles the static-inline shim.
//! Compiler flags and the library list both come from `pkg-config libdpdk`.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shim.h");
    println!("cargo:rerun-if-changed=shim.c");

    // Emits the -L/-l lines for every library `pkg-config --libs libdpdk` names.
    let lib = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .unwrap_or_else(|e| panic!("pkg-config could not find libdpdk >= 22.11 ({e}); run scripts/setup.sh"));

    // pkg-config --cflags also carries `-include rte_config.h` and the -march
    // DPDK was built for; pass them through untouched.
    let cflags_out = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("pkg-config --cflags libdpdk");
    let cflags: Vec<String> =
        String::from_utf8_lossy(&cflags_out.stdout).split_whitespace().map(str::to_owned).collect();
    // `-include X` comes as two words; keep pairs together.
    let mut args: Vec<String> = Vec::new();
    let mut it = cflags.into_iter();
    while let Some(a) = it.next() {
        if a == "-include" {
            if let Some(f) = it.next() {
                args.push(format!("-include{f}"));
            }
        } else {
            args.push(a);
        }
    }

    let mut build = cc::Build::new();
    build.file("shim.c").warnings(false).opt_level(3);
    for p in &lib.include_paths {
        build.include(p);
    }
    for a in &args {
        if a.starts_with("-I") {
            continue; // already added from include_paths
        }
        if let Some(f) = a.strip_prefix("-include") {
            build.flag("-include").flag(f);
        } else {
            build.flag(a);
        }
    }
    build.compile("intswitch_dpdk_shim");

    let mut bg = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg("-I.")
        .allowlist_function("rte_eal_.*")
        .allowlist_function("rte_eth_.*")
        .allowlist_function("rte_pktmbuf_pool_create")
        .allowlist_function("rte_pktmbuf_pool_create_by_ops")
        .allowlist_function("rte_pktmbuf_copy")
        .allowlist_function("rte_version")
        .allowlist_function("rte_mempool_.*")
        .allowlist_function("rte_ring_create")
        .allowlist_function("rte_ring_free")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_socket_id")
        .allowlist_function("rte_lcore_.*")
        .allowlist_function("rte_get_next_lcore")
        .allowlist_function("rte_get_main_lcore")
        .allowlist_function("rte_dev_probe")
        .allowlist_function("shim_.*")
        .allowlist_function("rte_fib6?_(add|free|lookup_bulk)")
        .allowlist_function("rte_lpm6_(add|free|lookup_bulk_func)")
        .allowlist_type("rte_eth_.*")
        .allowlist_var("RTE_ETH_.*")
        .allowlist_var("SHIM_.*")
        .allowlist_var("RTE_MBUF_.*")
        .allowlist_var("RTE_PKTMBUF_.*")
        .allowlist_var("RTE_MAX_.*")
        .allowlist_var("RING_F_.*")
        .allowlist_var("SOCKET_ID_ANY")
        .allowlist_var("RTE_ETHER_.*")
        // Packed-and-aligned structs bindgen cannot lay out; used only behind pointers.
        .opaque_type("rte_ether_addr")
        .opaque_type("rte_arp_hdr")
        .opaque_type("rte_arp_ipv4")
        .opaque_type("rte_l2tpv2_combined_msg_hdr")
        .opaque_type("rte_gtp_psc_generic_hdr")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for p in &lib.include_paths {
        bg = bg.clang_arg(format!("-I{}", p.display()));
    }
    for a in &args {
        if a.starts_with("-include") || a.starts_with("-march") || a.starts_with("-m") {
            bg = bg.clang_arg(a);
        }
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    bg.generate()
        .expect("bindgen over DPDK headers")
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");
}
