//! Replays every fuzz corpus (`tests/fuzz/corpus/<target>/`) through its
//! target's body (`fuzz_targets.rs`) on stable Rust: what libFuzzer found
//! and kept stays a regression test in CI (`scripts/fuzz.sh` grows the
//! corpora with coverage-guided runs).

use intswitch_tests::fuzz_targets::TARGETS;

#[test]
fn every_corpus_file_goes_through_its_target_without_a_finding() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (name, run) in TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{name}: an empty corpus");
        for f in &files {
            let data = std::fs::read(f).unwrap();
            // A panic names the file: it is the reproducer.
            let ok = std::panic::catch_unwind(|| run(&data));
            assert!(ok.is_ok(), "{name}: {} fails", f.display());
        }
        eprintln!("{name}: {} corpus files", files.len());
    }
}
