//! Fuzzes the shared parser, the per-QP update and the ICRC check on arbitrary frames.
//! Run: `cargo +nightly fuzz run classify observer-common/fuzz/corpus/classify` from
//! observer-common (see README.md "Fuzzing").
#![no_main]

use libfuzzer_sys::fuzz_target;
use observer_common::maps::{IfaceStats, Policy, QpValue};
use observer_common::{icrc, parse, qp};

fuzz_target!(|data: &[u8]| {
    let f = parse::classify(data);
    let mut s = IfaceStats::default();
    qp::account_iface(&mut s, &f, data.len() as u32);
    assert_eq!(s.frames, 1);
    if f.kind == parse::kind::ROCE {
        assert!(f.bth_off as usize + parse::BTH_LEN <= data.len());
        let mut v = QpValue::ZERO;
        let mut pol = Policy::NONE;
        pol.flags = observer_common::maps::policy_flags::ENABLED;
        pol.dscp = [26, 26, 48];
        // SAFETY: a local value, single thread.
        unsafe { qp::update::<qp::Plain, _>(&mut v, &f, data.len() as u32, 1, &pol) };
        assert_eq!(v.pkts, 1);
        let _ = icrc::verify(data, &f);
    }
});
