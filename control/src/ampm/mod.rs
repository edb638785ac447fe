//! AM-PM on the control core: the `[ampm]` section (`config`), its API
//! operations (`api`), and interval record export (`export`).

pub mod api;
pub mod config;
pub mod export;
