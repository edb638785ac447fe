//! The soak's short version (scripts/soak.py; `scripts/soak.sh MINUTES` is
//! the long one): every role in turn for a few million packets of a
//! realistic trace under control-plane churn, workers in idle mode. The
//! script checks each role: no crash, rx == tx + drops with every drop
//! named, no packet buffer taken once the ports closed and pool use flat
//! while running, RSS flat, every churn operation answered.

use intswitch_tests::{intctl_bin, intswitch_bin, Scratch};
use serde_json::Value;
use std::process::Command;

#[test]
fn every_role_soaks_under_churn_without_leaks_and_with_counters_that_add_up() {
    let d = Scratch::new("soak");
    let json = d.path("soak.json");
    let out = Command::new("python3")
        .arg(intswitch_tests::repo_root().join("scripts/soak.py"))
        .arg("--bin")
        .arg(intswitch_bin())
        .arg("--intctl")
        .arg(intctl_bin())
        .args(["--packets", "3000000", "--minutes", "2", "--idle", "--work"])
        .arg(d.path("work"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run soak.py");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    let results: Vec<Value> = serde_json::from_slice(&std::fs::read(&json).expect("soak.json")).unwrap();
    assert_eq!(results.len(), 11, "every role ran: {text}");
    for r in &results {
        assert_eq!(r["ok"], true, "{r}");
        assert!(r["packets"].as_u64().unwrap() >= 3_000_000, "{r}");
        assert!(r["churn_ops"].as_u64().unwrap() >= 6, "the churn ran: {r}");
        assert_eq!(r["pool_at_exit"], 0, "{r}");
    }
    assert!(out.status.success(), "{text}");
}
