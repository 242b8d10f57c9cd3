//! Fuzzes the streaming capture reader (`read_capture`) with the capture delivered in pieces of
//! fuzzer-chosen sizes (and interrupted reads): the input is `[k][k piece sizes][capture]`
//! (see `observer_fuzz::split_stream_input`). Never a panic, the reader's invariants hold, and
//! the stream gives exactly the records, and the same ending, as the in-memory reader.
#![no_main]

use libfuzzer_sys::fuzz_target;
use observer::sources::capture::pcap_reader::{read_capture, read_capture_slice};
use observer_fuzz::{Chunked, Reading, split_stream_input};

fuzz_target!(|data: &[u8]| {
    let (sizes, cap) = split_stream_input(data);
    let mut streamed = Reading::default();
    let res = read_capture("fuzz", Chunked::new(cap, sizes), |it| {
        streamed.item(it, cap.len());
        Ok(())
    });
    streamed.end(res, cap.len());

    let mut whole = Reading::default();
    let res = read_capture_slice("fuzz", cap, |it| {
        whole.item(it, cap.len());
        Ok(())
    });
    whole.end(res, cap.len());
    assert_eq!(
        streamed.ifaces, whole.ifaces,
        "interfaces: streamed vs in memory"
    );
    assert_eq!(
        streamed.records, whole.records,
        "records: streamed vs in memory"
    );
    assert_eq!(streamed.end, whole.end, "ending: streamed vs in memory");
});
