//! Every eBPF program of the object passes the kernel verifier.
use observer::sources::kernel::{ProgTester, prog};
use observer_common::maps::Policy;

#[test]
fn every_program_passes_the_verifier() {
    if !observer::testutil::require_root("every_program_passes_the_verifier") {
        return;
    }
    // ProgTester::load loads (verifies) every program in prog::ALL.
    let mut t = match ProgTester::load(64, &Policy::NONE) {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    };
    // Each one also runs: a minimal Ethernet frame passes through every program.
    let frame = [0u8; 60];
    for p in prog::ALL {
        let (ret, _) = t.run(p, &frame, 1).unwrap_or_else(|e| panic!("{p}: {e}"));
        // XDP_PASS = 2, TC_ACT_OK = 0.
        let want = if p.contains("tc_") { 0 } else { 2 };
        assert_eq!(ret, want, "{p} returned {ret}");
        // Headroom under the verifier's 1,000,000-instruction budget, so a parser change that
        // multiplies the paths fails here with a number rather than at load in the field.
        let n = t.verified_insns(p).unwrap().unwrap_or(0);
        eprintln!("{p}: verifier processed {n} instructions");
        assert!(
            n < 700_000,
            "{p}: {n} verified instructions, near the budget"
        );
    }
}
