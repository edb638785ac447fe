//! Deployment files: the binaries' shell completions and man pages, the
//! systemd unit (checked by `systemd-analyze verify` against the built
//! binaries), and `scripts/nic-setup.sh` (status, a switch config's plan,
//! bad input) on a machine without NICs for DPDK.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use intswitch_tests::{workspace_bin, Scratch};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output { status, stdout, stderr } = cmd.output().unwrap();
    (status.code().unwrap_or(-1), String::from_utf8_lossy(&stdout).into(), String::from_utf8_lossy(&stderr).into())
}

#[test]
fn every_binary_writes_completions_for_three_shells_and_a_man_page() {
    for (bin, sub) in [("intswitch", "gen-traffic"), ("intctl", "capture"), ("intcollector", "plot")] {
        for shell in ["bash", "zsh", "fish"] {
            let (rc, out, err) = run(Command::new(workspace_bin(bin)).args(["completions", shell]));
            assert_eq!(rc, 0, "{bin} completions {shell}: {err}");
            assert!(out.contains(sub) && out.contains(bin), "{bin} {shell}: no '{sub}' in\n{out}");
        }
        let (rc, out, err) = run(Command::new(workspace_bin(bin)).arg("manpage"));
        assert_eq!(rc, 0, "{bin} manpage: {err}");
        assert!(out.contains(&format!(".TH {bin} 1")), "{out}");
        assert!(out.contains(&format!(".SH \"{} {}\"", bin.to_uppercase(), sub.to_uppercase())), "{bin}: {out}");
        let (rc, _, err) = run(Command::new(workspace_bin(bin)).args(["completions", "powershell"]));
        assert_eq!(rc, 2, "an unknown shell is refused: {err}");
    }
}

#[test]
fn the_systemd_unit_verifies_against_the_built_binaries() {
    let unit = std::fs::read_to_string(repo().join("configs/systemd/intswitch@.service")).unwrap();
    // What the unit must do, whatever systemd is there.
    for needle in [
        "ExecStartPre=/usr/local/bin/intswitch --config /etc/intswitch/%i.toml --check",
        "ExecStartPre=/usr/local/sbin/intswitch-nic-setup up /etc/intswitch/%i.toml",
        "ExecStart=/usr/local/bin/intswitch --config /etc/intswitch/%i.toml",
        "Restart=on-failure",
        "RuntimeDirectory=intswitch",
    ] {
        assert!(unit.contains(needle), "the unit lacks {needle}");
    }
    // systemd's own checker, with the installed paths pointing at this build.
    let d = Scratch::new("unit");
    let local = unit
        .replace("/usr/local/bin/intswitch", &workspace_bin("intswitch").display().to_string())
        .replace("/usr/local/sbin/intswitch-nic-setup", &repo().join("scripts/nic-setup.sh").display().to_string());
    std::fs::write(d.path("intswitch@lab.service"), local).unwrap();
    let (rc, out, err) =
        run(Command::new("systemd-analyze").args(["verify", "--man=no", "./intswitch@lab.service"]).current_dir(&d.0));
    assert_eq!(rc, 0, "systemd-analyze verify: {out}{err}");
    // And a broken one is caught (the check can fail).
    std::fs::write(d.path("intswitch@bad.service"), unit.replace("ExecStart=/usr/local/bin/", "ExecStart=nowhere/"))
        .unwrap();
    let (rc, _, _) =
        run(Command::new("systemd-analyze").args(["verify", "--man=no", "./intswitch@bad.service"]).current_dir(&d.0));
    assert_ne!(rc, 0);
}

#[test]
fn nic_setup_reports_status_plans_a_config_and_refuses_bad_input() {
    let script = repo().join("scripts/nic-setup.sh");
    let (rc, out, err) = run(Command::new(&script).arg("status"));
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("hugepages:") && out.contains("2048kB") && out.contains("network devices:"), "{out}");

    let d = Scratch::new("nicsetup");
    std::fs::write(
        d.path("nic.toml"),
        "[eal]\nhuge = true\nmemory_mb = 2048\n[[port]]\nname = \"p0\"\ndevice = \"0000:3b:00.0\"\n\
[[port]]\nname = \"p1\"\ndevice = \"3b:00.1,rx_queues=2\"\n[[port]]\nname = \"v\"\ndevice = \"net_null0\"\n",
    )
    .unwrap();
    let (rc, out, err) = run(Command::new(&script).arg("up").arg(d.path("nic.toml")).arg("--dry-run"));
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains("port p0 is PCI device 0000:3b:00.0") && out.contains("port p1 is PCI device 3b:00.1"),
        "{out}"
    );
    assert!(!out.contains("port v "), "a vdev is not bound: {out}");
    assert!(out.contains("1280 pages of 2 MiB") && out.contains("binding 0000:3b:00.0 3b:00.1 to vfio-pci"), "{out}");
    // The demo's config: vdevs, no hugepages.
    let (rc, out, _) = run(Command::new(&script).arg("up").arg(repo().join("configs/demo.toml")).arg("--dry-run"));
    assert_eq!(rc, 0);
    assert!(out.contains("no hugepages needed") && out.contains("nothing to bind"), "{out}");

    std::fs::write(d.path("bad.toml"), "x = [\n").unwrap();
    for args in [
        vec!["bind".to_string(), "0000:zz".into()],
        vec!["hugepages".into(), "many".into()],
        vec!["hugepages".into(), "4".into(), "--size".into(), "3M".into()],
        vec!["up".into(), d.path("bad.toml").display().to_string()],
        vec!["up".into(), "/nonexistent.toml".into()],
        vec!["frobnicate".into()],
    ] {
        let (rc, _, err) = run(Command::new(&script).args(&args));
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(!err.is_empty(), "{args:?}: says why");
    }
}
