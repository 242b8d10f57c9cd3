//! Fuzzes the whole replay engine (reader, link layers, datapath, interval snapshots) on
//! arbitrary capture bytes: never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use observer::sources::Discard;
use observer::sources::capture::{Replay, ReplayOptions};

fuzz_target!(|data: &[u8]| {
    let mut out = Discard;
    let mut r = Replay::new(ReplayOptions::default(), &mut out);
    let _ = r.feed_slice("fuzz", "fuzz", data);
    let snaps = r.snapshots();
    // A datapath (and its snapshot) is made at an interface's first frame.
    assert!(
        snaps.len() as u64 <= r.frames,
        "{} snapshots, {} frames",
        snaps.len(),
        r.frames
    );
});
