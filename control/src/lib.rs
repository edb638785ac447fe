//! intswitch control plane: configuration, the switch runtime that owns it,
//! the control API and its front ends (unix socket, Prometheus endpoint,
//! `intctl`), capture, the embedded demo and the traffic generator.
pub mod ampm_api;
pub mod ampm_collector;
pub mod ampm_config;
pub mod ampm_export;
pub mod api;
pub mod capture;
pub mod client;
pub mod collector;
pub mod collector_tx;
pub mod config;
pub mod demo;
pub mod int_config;
pub mod int_export;
pub mod metrics;
pub mod server;
pub mod switch;
pub mod traffic;
