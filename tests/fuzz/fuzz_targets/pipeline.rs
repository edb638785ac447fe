#![no_main]
// The body is dataplane::pipeline_fuzz::Roles::run (its corpus is replayed by
// dataplane's `cargo test`): the first byte picks the role, the rest is the
// frame; each role keeps its state across inputs, as a worker does.
use std::cell::RefCell;

thread_local!(static ROLES: RefCell<dataplane::pipeline_fuzz::Roles> = RefCell::new(dataplane::pipeline_fuzz::Roles::new()));

libfuzzer_sys::fuzz_target!(|data: &[u8]| ROLES.with(|r| r.borrow_mut().run(data)));
