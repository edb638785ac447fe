//! intswitch control plane: configuration, the switch runtime that owns it,
//! the control API (typed commands, their dispatch, the control loop) and
//! its front ends (unix socket, Prometheus endpoint, `intctl`), capture,
//! the embedded demo and the traffic generator. `intcollector` is a crate
//! of its own (`control/collector`).
//!
//! Dependencies point one way: `fields` <- `config` (+ features' `config`)
//! <- `api` <- `switch` <- features' `ops` <- `dispatch` <- `control_loop`.
pub mod ampm;
pub mod api;
pub mod capture;
pub mod cli_docs;
pub mod client;
pub mod collector_tx;
pub mod config;
pub mod control_loop;
pub mod demo;
pub mod dispatch;
pub mod fields;
pub mod gpint;
pub mod int;
pub mod label;
pub mod line_batch;
pub mod memory_budget;
pub mod metrics;
pub mod server;
pub mod switch;
pub mod traffic;
