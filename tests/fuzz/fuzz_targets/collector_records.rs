#![no_main]
// The body is intswitch_tests::fuzz_targets::collector_records (also replayed by cargo test).
libfuzzer_sys::fuzz_target!(|data: &[u8]| intswitch_tests::fuzz_targets::collector_records(data));
