//! AM-PM on the control core: the `[ampm]` section (`config`), its
//! commands' types (`api`) and operations (`ops`), and interval record
//! export (`export`).

pub mod api;
pub mod config;
pub mod export;
pub mod ops;
