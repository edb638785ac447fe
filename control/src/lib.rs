//! intswitch control plane: configuration, the switch runtime that owns it,
//! the control API and its front ends (unix socket, Prometheus endpoint,
//! `intctl`), capture, the embedded demo and the traffic generator.
pub mod ampm;
pub mod api;
pub mod capture;
pub mod client;
pub mod collector;
pub mod collector_tx;
pub mod config;
pub mod demo;
pub mod int;
pub mod metrics;
pub mod server;
pub mod switch;
pub mod traffic;
