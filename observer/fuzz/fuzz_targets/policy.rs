//! Fuzzes the policy file parser on arbitrary UTF-8: never a panic; an accepted policy is in
//! range; an error names a line of the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use contract::policy::PolicyConfig;
use contract::policy::PolicyError;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match PolicyConfig::from_toml(text, "fuzz") {
        Ok(p) => {
            assert!(p.expected.rdma_priority <= 7);
            assert!([256, 512, 1024, 2048, 4096].contains(&p.expected_mtu));
            assert!(p.thresholds.pfc_storm_xoff_per_s >= 1);
            assert!(p.thresholds.ce_without_cnp_min_ce >= 1);
            assert!(p.thresholds.pfc_without_ecn_min_xoff >= 1);
        }
        Err(PolicyError::Invalid { line, .. } | PolicyError::Syntax { line, .. }) => {
            assert!(line <= text.matches('\n').count() + 1, "line {line}");
        }
        Err(_) => {}
    }
});
