//! The integration tests of `roce-analyze`, in one binary (one link of the query engine and the
//! observer instead of one per file): one module per subject, the shared helpers in
//! [`support`]. Tests run on parallel threads; the heavy ones (Spark and DuckDB, Chromium, the
//! lab) take [`support::heavy`] so that they run one at a time.

mod support;

mod end_to_end;
mod engines;
mod faults;
mod hosts;
mod html;
mod lab_path;
mod latency;
mod path;
mod report_sql;
