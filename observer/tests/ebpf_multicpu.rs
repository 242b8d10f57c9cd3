//! One QP's packets processed on several CPUs at once lose no increment.
//!
//! Threads pinned to different CPUs (sched_setaffinity) run BPF_PROG_TEST_RUN concurrently on
//! frames of the same QP key (BPF_PROG_TEST_RUN runs the program on the calling CPU). The
//! per-QP value is shared by all CPUs: counters use atomic adds, the PSN state compare-and-swap.
//! The totals must be exact.
mod common;

use common::Roce;
use observer::live::{ProgTester, prog};
use observer_common::maps::{Policy, class, dir};
use observer_common::qp::opcode_bucket;

fn online_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the cpu_set_t it is given.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(r, 0, "sched_getaffinity: {}", std::io::Error::last_os_error());
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

fn pin_to(cpu: usize) {
    // SAFETY: as above, with a set holding one CPU; affects the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let r = libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(r, 0, "sched_setaffinity({cpu}): {}", std::io::Error::last_os_error());
    }
}

#[test]
fn one_qp_on_several_cpus_loses_no_count() {
    if !observer::testutil::require_root("one_qp_on_several_cpus_loses_no_count") {
        return;
    }
    let cpus = online_cpus();
    assert!(cpus.len() >= 2, "needs at least 2 CPUs, have {cpus:?}");
    // Two threads per CPU, so each CPU also switches between runs of one key.
    let threads: Vec<usize> = cpus.iter().chain(cpus.iter()).copied().collect();
    const CALLS: u32 = 200;
    const REPEAT: u32 = 500;

    let t = ProgTester::load(1024, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    let data = Roce::data(7).build();
    let ack = Roce {
        opcode: 0x11,
        aeth: Some(5),
        payload: 4,
        ..Roce::default()
    }
    .build();
    let runners: Vec<_> = [prog::XDP, prog::TC_INGRESS]
        .iter()
        .map(|p| t.shared_runner(p).unwrap())
        .collect();
    let barrier = std::sync::Barrier::new(threads.len());
    std::thread::scope(|s| {
        for (i, &cpu) in threads.iter().enumerate() {
            let (runners, data, ack, barrier) = (&runners, &data, &ack, &barrier);
            s.spawn(move || {
                pin_to(cpu);
                barrier.wait();
                for c in 0..CALLS {
                    // Alternate XDP and tc, data and ACK frames of the same key.
                    let r = &runners[(i + c as usize) % 2];
                    let f = if c % 4 == 3 { ack } else { data };
                    r.run(f, REPEAT).unwrap();
                }
            });
        }
    });
    drop(runners);
    let mut t = t;
    let s = t.snapshot("test", 0).unwrap();
    let n = threads.len() as u64 * CALLS as u64 * REPEAT as u64;
    let acks = n / 4;
    let datas = n - acks;
    assert_eq!(s.qps.len(), 1, "one key");
    let (k, v) = s.qps[0];
    assert_eq!(k.dir, dir::INGRESS);
    assert_eq!(v.pkts, n, "lost packet counts");
    assert_eq!(
        v.bytes_l2,
        datas * data.len() as u64 + acks * ack.len() as u64,
        "lost byte counts"
    );
    assert_eq!(v.opcode_hist[opcode_bucket(0x04)] as u64, datas);
    assert_eq!(v.opcode_hist[opcode_bucket(0x11)] as u64, acks);
    assert_eq!(v.class_pkts(class::DATA), datas);
    assert_eq!(v.class_pkts(class::ACK), acks);
    assert_eq!(v.dscp_hist[class::DATA][26] as u64, datas);
    // Every data packet carries PSN 7: exactly one is the first, the rest are retransmissions
    // (the compare-and-swap lets exactly one CPU set the first PSN).
    let st = s.iface_stats[dir::INGRESS as usize];
    assert_eq!(v.psn_retrans + st.psn_contended, datas - 1);
    assert_eq!(v.psn_behind, 0);
    assert_eq!(v.psn_max(), Some(7));
    assert_eq!(st.frames, n, "per-CPU frame counters summed");
    assert_eq!(st.roce, n);
    assert_eq!(st.qp_insert_failed, 0);
}
