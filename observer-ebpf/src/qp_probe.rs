//! The modify-QP probe (docs/qp-probe.md): a kprobe on ib_core's `_ib_modify_qp` (or on the
//! exported `ib_modify_qp_with_udata` and `ib_modify_qp` where it is not in kallsyms) stashes
//! the call's (qp, attr, mask) per thread; the kretprobe, when the modify succeeded, reads the
//! QP's identity and the masked attributes at the offsets userspace found in BTF (the
//! read-only global `QP_OFFSETS`), sends the record to a ring buffer and merges it into an LRU
//! table keyed by (device index, QP number). Everything left out is counted.
//!
//! Built for the BPF target only (`observer/build.rs`); an empty binary on the host.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(target_arch = "bpf")]
include!("qp_probe_programs.rs");

/// The host build: nothing to run (the object is embedded in `observer`).
#[cfg(not(target_arch = "bpf"))]
fn main() {}
