//! Fuzzes the host-QP decoders on arbitrary bytes: RDMA netlink reply payloads (QP, cm id and
//! counter dumps, the counter mode and raw-QP replies) and mlx5's raw QP context. Never a panic;
//! a decoded raw context agrees with the listing it was checked against.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nic::rdma::{qp_counters, resources};
use qps::mlx5::{self, Listed};

fuzz_target!(|data: &[u8]| {
    let _ = resources::decode_qps(data);
    let _ = resources::decode_cm_ids(data);
    let _ = resources::decode_qp_raw(data);
    let _ = qp_counters::decode_counters(data);
    let _ = qp_counters::decode_mode(data);
    let listed = Listed {
        state: Some(3),
        qp_type: Some(2),
        rqpn: data.get(..3).map(|b| u32::from_be_bytes([0, b[0], b[1], b[2]])),
    };
    for qpn in [0, 0x1a2] {
        if let Ok(m) = mlx5::decode(data, qpn, &listed) {
            assert_eq!(m.qpn, qpn);
            assert_eq!(mlx5::ib_state(m.state), Some(3));
            assert_eq!(Some(m.remote_qpn), listed.rqpn);
            assert!(m.unacknowledged() < 1 << 24);
        }
    }
});
