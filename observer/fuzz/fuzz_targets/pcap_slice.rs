//! Fuzzes the capture reader over a capture held in memory (`read_capture_slice`): never a
//! panic; every record within the input, at increasing offsets, on a declared interface, with
//! no more captured bytes than its original length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use observer::sources::capture::pcap_reader::read_capture_slice;
use observer_fuzz::Reading;

fuzz_target!(|data: &[u8]| {
    let mut seen = Reading::default();
    let res = read_capture_slice("fuzz", data, |it| {
        seen.item(it, data.len());
        Ok(())
    });
    seen.end(res, data.len());
});
