//! The live and replay commands: options (clap), wiring of a source to the pipeline and its
//! sinks, and the messages a person reads when something is wrong. The only place `anyhow` is
//! used. The `roce-observe` binary (crate roce-observe) parses the command line and dispatches
//! to them, to the lab crate's command and to the nic crate's.

pub mod args;
pub mod live;
pub mod replay;

pub use contract::cli::ExitStatus;
