//! intswitch control plane: configuration, the switch runtime that owns it,
//! the embedded demo and the traffic generator.
pub mod config;
pub mod demo;
pub mod switch;
pub mod traffic;
