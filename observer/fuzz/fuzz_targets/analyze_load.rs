//! Fuzzes roce-analyze's file checks and decoding (`analysis::load::read_tree`, what the query
//! engine relies on before and after a query) on a flows Parquet file made of
//! the fuzzer's bytes, in a fresh directory per input (on /dev/shm when there is one). An error
//! is fine; a panic that escapes `read_tree` is a finding. As in roce-analyze's `main`,
//! `quiet_decoder_panics` is installed: the parquet / arrow crates' own panics, which `read_tree`
//! catches around decoding, are then errors, and every other panic still aborts (libFuzzer's
//! hook). A caught panic located in this project's code (not in a dependency) is a finding too:
//! it is a bug of ours that the catch would hide.
#![no_main]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use analysis::load::LoadError;
use libfuzzer_sys::fuzz_target;

static N: AtomicU64 = AtomicU64::new(0);

fn base() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// Removes the input's directory, also when `read_tree` panics.
struct Rm(PathBuf);

impl Drop for Rm {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fuzz_target!(init: { analysis::load::quiet_decoder_panics(); }, |data: &[u8]| {
    let dir = base().join(format!(
        "roce-fuzz-load-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _rm = Rm(dir.clone());
    let part = dir.join("flows/date=2026-01-01/hour=00");
    std::fs::create_dir_all(&part).unwrap();
    std::fs::write(part.join("flows-f-x-0000.parquet"), data).unwrap();
    if let Err(LoadError::Corrupt { what, .. }) = analysis::load::read_tree(&dir) {
        assert!(
            !(what.contains("panicked")
                && (what.contains("analysis/src/") || what.contains("observer/src/"))),
            "a panic in this project's code, caught as a decoder panic: {what}"
        );
    }
});
