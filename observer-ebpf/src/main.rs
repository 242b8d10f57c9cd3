//! roce-observe kernel datapath: XDP (ingress) and tc (ingress fallback, egress) programs that
//! classify every frame with the shared parser (`observer_common::parse::classify_into`), count it
//! per interface and direction, account RoCEv2 packets per QP with BPF atomics
//! (`observer_common::qp::update`), count PFC/PAUSE per source MAC and report first occurrences
//! through a ring buffer. Programs never change traffic: they return XDP_PASS / TC_ACT_OK unless
//! the policy asks for drop-after-observe (dedicated capture ports).
//!
//! The programs are in `programs.rs`, included here and compiled for the BPF target only (`observer/build.rs`
//! builds them through aya-build). On the host this crate is an empty binary, so
//! `cargo build --workspace` and `cargo clippy --workspace` work as a contributor types them
//! (the aya-template pattern).
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", feature(asm_experimental_arch))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]
// The aya `#[classifier]` macro generates the public entry points that take the raw context.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

#[cfg(target_arch = "bpf")]
include!("programs.rs");

/// The host build: nothing to run (the eBPF object is embedded in `roce-observe`).
#[cfg(not(target_arch = "bpf"))]
fn main() {}
