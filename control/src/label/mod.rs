//! INT-label on the control core: the `[label]` section and what it becomes
//! in a generation (`config`), `show_label` / `label_set_shift`'s types
//! (`api`) and operations (`ops`). Label reports leave through the INT
//! report exporter (`int::export`), to the `[[int.collector]]`s.

pub mod api;
pub mod config;
pub mod ops;
