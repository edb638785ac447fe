//! INT on the control core: the `[int]` section and what it becomes in a
//! generation (`config`), and Telemetry Report export from the workers'
//! report rings (`export`).

pub mod config;
pub mod export;
