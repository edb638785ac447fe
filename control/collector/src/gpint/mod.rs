//! GPINT: reliable multi-hop telemetry collection with probes (the
//! monitor's side). `topology` reads the switch graph, `plan` the probe
//! paths (GPINT, Euler, SNMP).

pub mod plan;
pub mod topology;
