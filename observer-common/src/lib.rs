//! Shared between the eBPF programs (`observer-ebpf`) and userspace (`observer`):
//! the frame parser ([`parse`]), the per-QP state machine ([`qp`]), passive latency ([`latency`]), the map layouts
//! ([`maps`]), the kernel per-QP table ([`qp_table`]), the modify-QP probe's records ([`qp_setup`]) and, in userspace, the ICRC check ([`icrc`])
//! and the frame builder of the tests, benchmarks and lab (`frames`, feature `frames`).
//!
//! Everything here is `no_std`, allocation-free and bounded, so the same code is compiled for
//! `bpfel-unknown-none` and for the host. The definitions follow `shared/docs/metrics.md`;
//! README.md ("What is counted") restates them.
#![cfg_attr(not(test), no_std)]
// The empty assembly statement of `verifier::opaque` (the eBPF build sets RUSTC_BOOTSTRAP).
#![cfg_attr(target_arch = "bpf", feature(asm_experimental_arch))]

// The frame builder allocates; userspace only (the eBPF crate uses no features).
#[cfg(feature = "frames")]
extern crate alloc;

pub mod cursor;
#[cfg(feature = "frames")]
pub mod frames;
#[cfg(feature = "icrc")]
pub mod icrc;
pub mod latency;
pub mod maps;
pub mod parse;
pub mod qp;
pub mod qp_setup;
pub mod qp_table;
pub mod verifier;

pub use cursor::Bytes;
