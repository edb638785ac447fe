//! INT sink analytics on the control core: the `[int.analytics]` section
//! (`config`), the export of the workers' flow records (R_G), event records
//! (R_I) and histogram snapshots as JSON lines to the INT collectors
//! (`export`, `histogram`), and their commands (`api`, `ops`: `show int
//! analytics`, `int flows flush`, `int flow show`, `int event set|show`,
//! `show int histograms`, `int detect add|del|show`), and the detection
//! rules' section (`detect`), and the control core's T threshold
//! feedback (`budget`).

pub mod api;
pub mod budget;
pub mod config;
pub mod detect;
pub mod export;
pub mod histogram;
pub mod ops;
