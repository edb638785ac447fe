//! INT sink analytics on the control core: the `[int.analytics]` section
//! (`config`), the export of the workers' flow records from R_G as JSON
//! lines to the INT collectors (`export`), and their commands (`api`,
//! `ops`: `show int analytics`, `int flows flush`, `int flow show`).

pub mod api;
pub mod config;
pub mod export;
pub mod ops;
