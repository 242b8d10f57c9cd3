//! Where the pipeline's results go: Parquet tables ([`parquet_files`], rows built by
//! [`row_builders`]), `alerts.jsonl`, the terminal view, `summary.json` ([`summary_json`]) and
//! its text form ([`summary_text`]).

pub mod parquet_files;
pub mod row_builders;
pub mod summary_json;
pub mod summary_text;
pub mod terminal_view;
