//! GPINT and SQR on the control core: the `[gpint]` section and what it
//! becomes in a generation (`config`), `show_gpint`'s types (`api`) and
//! operation (`ops`). Deliveries and notices leave through the INT report
//! exporter (`int::export`), to the `[[int.collector]]`s.

pub mod api;
pub mod config;
pub mod ops;
