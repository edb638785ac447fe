//! What the benches share: where criterion keeps its results and how a
//! case's estimate is read back for the benches' one-line summaries.

use std::path::PathBuf;

/// Criterion's home beside cargo's scratch directory: `<target>/criterion`,
/// its HTML report in `report/index.html`.
pub fn criterion_home() -> PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).with_file_name("criterion")
}

/// Criterion's estimate of one iteration of `<group>/<name>` in ns, with
/// its 95 % confidence interval: the slope of its linear sampling where it
/// had one, else the mean (what its own report shows as `time`).
pub fn estimate(group: &str, name: &str) -> Option<(f64, f64, f64)> {
    let file = criterion_home().join(group).join(name).join("new/estimates.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    let e = if v["slope"].is_object() { &v["slope"] } else { &v["mean"] };
    let ci = &e["confidence_interval"];
    Some((e["point_estimate"].as_f64()?, ci["lower_bound"].as_f64()?, ci["upper_bound"].as_f64()?))
}
