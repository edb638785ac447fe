//! GPINT: reliable multi-hop telemetry collection with probes (the
//! monitor's side). `topology` reads the switch graph, `plan` the probe
//! paths (GPINT, Euler, SNMP), `monitor` runs sessions over a plan with
//! SQR recovery (Algorithms 1 and 2).

pub mod monitor;
pub mod plan;
pub mod topology;
