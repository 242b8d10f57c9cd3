//! The `roce-observe` binary's tests, one binary: each module was a test binary of its own. None
//! changes the test process's global state (rlimits, signal handlers, environment); each
//! network test makes namespaces and addresses of its own (testing.md), each output directory is
//! a `TempDir`. The lab, which builds whole fabrics and must not share the machine with other
//! tests, is `tests/lab.rs`.

mod collector_lifecycle;
mod collector_netns;
mod collector_semantics;
mod latency;
mod marking_netns;
mod monitoring;
mod nic_command;
mod qps_command;
mod replay;
mod replay_inputs;
mod replay_signals;
mod tui;
