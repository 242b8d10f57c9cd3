//! Link arguments for bpf-linker, where the eBPF object's code generation happens.
//!
//! - `--cpu-features=+alu32`: the 32-bit atomics (BPF_ATOMIC W add / or / cmpxchg) of cpu v3.
//!   rustc calls bpf-linker with `--cpu generic` and aya-build sets CARGO_ENCODED_RUSTFLAGS
//!   itself, so `-C target-cpu=v3` cannot be passed; rustc passes no `--cpu-features`.
//! - `--disable-expand-memcpy-in-order`: with it, LLVM's BPF backend expands small memset /
//!   memmove inline instead of calling the byte-loop `memset` that bpf-linker exports (slow,
//!   and a loop subprogram per call site blows the verifier's instruction budget).
//! - `--disable-memory-builtins`: so any remaining memset/memcpy call fails the link instead of
//!   reaching the verifier.
///
/// Only for the BPF target: on the host the crate is an empty binary linked by `cc`.
fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("bpf") {
        return;
    }
    println!("cargo::rustc-link-arg-bins=--cpu-features=+alu32");
    println!("cargo::rustc-link-arg-bins=--disable-expand-memcpy-in-order");
    println!("cargo::rustc-link-arg-bins=--disable-memory-builtins");
}
// Not `+allows-misaligned-mem-access` (wide loads from packet bytes): LLVM then also emits
// misaligned stack stores, which the verifier always rejects ("misaligned stack access").
