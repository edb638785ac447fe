//! INT on the control core: the `[int]` section and what it becomes in a
//! generation (`config`), its commands' types (`api`) and operations
//! (`ops`), and Telemetry Report export from the workers' report rings
//! (`export`).

pub mod analytics;
pub mod api;
pub mod config;
pub mod export;
pub mod ops;
