//! One QP's packets processed on several CPUs at once lose no increment.
//!
//! Threads pinned to different CPUs (sched_setaffinity) run BPF_PROG_TEST_RUN concurrently on
//! frames of the same QP key (BPF_PROG_TEST_RUN runs the program on the calling CPU). The
//! per-QP value is shared by all CPUs: the CPU that inserted the key adds to its counters with
//! plain instructions, every other CPU adds to the key's spill value atomically, and the PSN
//! state moves by compare-and-swap. The totals must be exact.
mod common;

use common::{Roce, read_request};
use observer::sources::kernel::{ProgTester, prog};
use observer_common::maps::{Policy, class, dir};
use observer_common::qp::{ev, opcode_bucket};

fn online_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the cpu_set_t it is given.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(
        r,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// The tests here each keep every CPU busy: run one at a time, so that none of them measures
/// the others' load (a give-up on an insert lock is what a stalled lock holder causes).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static M: std::sync::Mutex<()> = std::sync::Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

/// A test's start: root (else it skips, outside CI), its turn (held while it runs) and at least
/// two CPUs, which it returns.
fn multicpu_test(name: &str) -> Option<(std::sync::MutexGuard<'static, ()>, Vec<usize>)> {
    if !observer::testutil::require_root(name) {
        return None;
    }
    let turn = one_at_a_time();
    let cpus = online_cpus();
    assert!(cpus.len() >= 2, "needs at least 2 CPUs, have {cpus:?}");
    Some((turn, cpus))
}

/// The keys in the per-QP table now.
fn live_keys(t: &mut ProgTester) -> Vec<observer_common::maps::QpKey> {
    t.snapshot("test", 0)
        .unwrap()
        .qps
        .iter()
        .map(|(k, _)| *k)
        .collect()
}

/// Per-QP packet counts plus the untracked ones must equal what was sent, and a give-up on an
/// insert lock (its holder's CPU stalled longer than the insert waits, e.g. a vCPU descheduled
/// by the hypervisor) is the only way a RoCE packet goes untracked here. Give-ups are rare: at
/// most 1 packet in 1000.
fn assert_untracked_only_from_give_ups(st: &observer_common::maps::IfaceStats, tracked: u64) {
    assert_eq!(
        tracked + st.roce_untracked,
        st.roce,
        "every packet in a key or untracked"
    );
    assert_eq!(st.qp_insert_failed, st.roce_untracked);
    assert!(
        st.qp_insert_failed * 1000 <= st.roce,
        "{} inserts gave up in {} packets",
        st.qp_insert_failed,
        st.roce
    );
    if st.qp_insert_failed > 0 {
        eprintln!(
            "{} inserts gave up on a contended lock (counted untracked)",
            st.qp_insert_failed
        );
    }
}

fn pin_to(cpu: usize) {
    // SAFETY: as above, with a set holding one CPU; affects the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let r = libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(
            r,
            0,
            "sched_setaffinity({cpu}): {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn one_qp_on_several_cpus_loses_no_count() {
    let Some((_turn, cpus)) = multicpu_test("one_qp_on_several_cpus_loses_no_count") else {
        return;
    };
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
    // The key is inserted before the threads start: an insert takes a lock, and a give-up on
    // it (see `assert_untracked_only_from_give_ups`) would make the counts below inexact for a
    // reason other than the one under test. Concurrent inserts have their own test.
    runners[0].run(&data, 1).unwrap();
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
    // Packets on CPUs other than the key's owner went to its spill value (atomic adds); the
    // snapshot adds them back. Both paths must have run for the test to mean much.
    let spilled = t.spilled_pkts();
    eprintln!("{spilled} packets took the spill path");
    let s = t.snapshot("test", 0).unwrap();
    let m = threads.len() as u64 * CALLS as u64 * REPEAT as u64;
    assert!(
        spilled > 0 && spilled < m,
        "{spilled} of {m} packets spilled: both the owner's and the spill path must run"
    );
    let acks = m / 4;
    // One data packet before the threads, then theirs.
    let n = m + 1;
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
    // Every data packet carries PSN 7: the first (before the threads) sets the PSN, the rest are
    // retransmissions, each counted once (the PSN state moves by compare-and-swap; a CPU that
    // keeps losing the race counts `psn_contended`).
    let st = s.iface_stats[dir::INGRESS as usize];
    assert_eq!(v.psn_retrans + st.psn_contended, datas - 1);
    assert_eq!(v.psn_behind, 0);
    assert_eq!(v.psn_max(), Some(7));
    assert_eq!(st.frames, n, "per-CPU frame counters summed");
    assert_eq!(st.roce, n);
    assert_eq!(st.qp_insert_failed, 0);
    // First occurrences are reported once: the new key by the first packet, the first
    // retransmission once although every CPU raced to report it.
    let mut events = Vec::new();
    t.drain_events(&mut events);
    assert_eq!(st.events_lost, 0);
    let count = |k: u32| events.iter().filter(|e| e.kind == k).count();
    assert_eq!(count(ev::NEW_QP), 1, "{events:?}");
    assert_eq!(count(ev::RETRANS), 1, "{events:?}");
    assert_eq!(events.len(), 2, "{events:?}");
}

/// RDMA READ requests of one key from every CPU at once (metrics.md "RDMA READ requests"): the
/// PSN state, max and the READ window in one 64-bit word, moves only by compare-and-swap, so
/// whatever the order the key ends at the last READ's PSN + n_min - 1 with the window of a READ
/// sent at that PSN, never a max of one READ with another's window. Thread i sends READs of
/// 64 KiB - 256 i bytes (n_min 16, w 240 - i) at PSNs 64 k, k < STEPS, in order.
#[test]
fn read_windows_on_several_cpus() {
    let Some((_turn, cpus)) = multicpu_test("read_windows_on_several_cpus") else {
        return;
    };
    let threads: Vec<usize> = cpus.iter().chain(cpus.iter()).copied().collect();
    const STEPS: u32 = 100;
    const REPEAT: u32 = 50;
    let len = |i: usize| 65536 - 256 * i as u32;
    let t = ProgTester::load(1024, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    let runners: Vec<_> = [prog::XDP, prog::TC_INGRESS]
        .iter()
        .map(|p| t.shared_runner(p).unwrap())
        .collect();
    // inserted first (a give-up on the insert lock is another test's subject): max 15, w 240
    runners[0].run(&read_request(0, len(0)), 1).unwrap();
    let barrier = std::sync::Barrier::new(threads.len());
    std::thread::scope(|s| {
        for (i, &cpu) in threads.iter().enumerate() {
            let (runners, barrier) = (&runners, &barrier);
            s.spawn(move || {
                pin_to(cpu);
                barrier.wait();
                for k in 0..STEPS {
                    let f = read_request(64 * k, len(i));
                    runners[(i + k as usize) % 2].run(&f, REPEAT).unwrap();
                }
            });
        }
    });
    drop(runners);
    let mut t = t;
    let s = t.snapshot("test", 0).unwrap();
    let n = 1 + threads.len() as u64 * STEPS as u64 * REPEAT as u64;
    assert_eq!(s.qps.len(), 1, "one key");
    let (_, v) = s.qps[0];
    let st = s.iface_stats[dir::INGRESS as usize];
    assert_eq!(v.pkts, n, "lost packet counts");
    eprintln!(
        "{n} READs: gaps {}, missing {}, retrans {}, contended {}, final window {}",
        v.psn_gaps, v.psn_missing, v.psn_retrans, st.psn_contended, v.psn_read
    );
    assert_eq!(v.psn_max(), Some(64 * (STEPS - 1) + 15));
    let windows: Vec<u32> = (0..threads.len()).map(|i| 240 - i as u32).collect();
    assert!(
        windows.contains(&v.psn_read),
        "window {} of no READ at the last PSN",
        v.psn_read
    );
    // max is always 15 mod 64 and every PSN 0 mod 64: a packet that does not move max is
    // behind, never the same PSN
    assert_eq!(v.psn_retrans, v.psn_behind);
    // each move raises max by 64 or more: at most STEPS - 1 moves after the first packet, the
    // rest retransmissions (or CAS give-ups, counted)
    assert!(v.psn_retrans + st.psn_contended >= n - STEPS as u64);
    assert!(v.psn_gaps < STEPS as u64);
    assert_eq!(v.qp_incarnations, 0);
}

/// One key whose packets carry more DSCPs and opcodes than its compact kernel value has cells
/// for, sent from every CPU at once: cells are claimed concurrently (compare-and-swap on the
/// tag word of the spill value) and the buckets beyond them go to `QPHIST` with atomic adds
/// from several CPUs. Every bucket's total must be exact.
#[test]
fn histogram_cells_and_overflow_are_exact_across_cpus() {
    let Some((_turn, cpus)) = multicpu_test("histogram_cells_and_overflow_are_exact_across_cpus")
    else {
        return;
    };
    let threads: Vec<usize> = cpus.iter().chain(cpus.iter()).copied().collect();
    const REPEAT: u32 = 300;
    // 10 opcodes (8 cells) and 7 DSCPs (4 cells): each thread starts at a different frame, so
    // the first claims of the cells race
    let opcodes = [0x00u8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x0a];
    let dscps = [26u8, 0, 46, 10, 12, 34, 18];
    let frames: Vec<(u8, u8, Vec<u8>)> = (0..opcodes.len() * dscps.len())
        .map(|i| {
            let (op, d) = (opcodes[i % opcodes.len()], dscps[i % dscps.len()]);
            let f = Roce {
                opcode: op,
                dscp: d,
                psn: 7,
                ..Roce::default()
            }
            .build();
            (op, d, f)
        })
        .collect();
    let t = ProgTester::load(1024, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    let runners: Vec<_> = [prog::XDP, prog::TC_INGRESS]
        .iter()
        .map(|p| t.shared_runner(p).unwrap())
        .collect();
    // inserted first (a give-up on the insert lock is another test's subject)
    runners[0].run(&frames[0].2, 1).unwrap();
    let barrier = std::sync::Barrier::new(threads.len());
    std::thread::scope(|s| {
        for (i, &cpu) in threads.iter().enumerate() {
            let (runners, frames, barrier) = (&runners, &frames, &barrier);
            s.spawn(move || {
                pin_to(cpu);
                barrier.wait();
                for c in 0..frames.len() {
                    let f = &frames[(i * 11 + c) % frames.len()].2;
                    runners[(i + c) % 2].run(f, REPEAT).unwrap();
                }
            });
        }
    });
    drop(runners);
    let mut t = t;
    let spilled = t.spilled_pkts();
    let s = t.snapshot("test", 0).unwrap();
    let per_frame = threads.len() as u64 * REPEAT as u64;
    let n = frames.len() as u64 * per_frame + 1;
    assert!(
        spilled > 0,
        "the spill value's cells must have been claimed concurrently"
    );
    assert_eq!(s.qps.len(), 1, "one key");
    let (_, v) = s.qps[0];
    assert_eq!(v.pkts, n);
    let st = s.iface_stats[dir::INGRESS as usize];
    assert_eq!(st.hist_overflow_lost, 0);
    for &op in &opcodes {
        let want = frames.iter().filter(|f| f.0 == op).count() as u64 * per_frame
            + (op == frames[0].0) as u64;
        assert_eq!(
            v.opcode_hist[opcode_bucket(op)] as u64,
            want,
            "opcode {op:#x}"
        );
    }
    for &d in &dscps {
        let want = frames.iter().filter(|f| f.1 == d).count() as u64 * per_frame
            + (d == frames[0].1) as u64;
        assert_eq!(
            v.dscp_hist[class::DATA][d as usize] as u64,
            want,
            "DSCP {d}"
        );
    }
    assert!(
        t.hist_overflow_entries().unwrap() > 0,
        "buckets beyond the cells must have gone to QPHIST"
    );
}

/// Many new keys inserted at the same moment from every CPU: each key ends up in exactly one
/// slot of the per-QP table (inserts of one key are serialised by its bucket's lock and re-scan
/// under it), every packet is counted in its key or (a give-up on the lock) as untracked, and
/// the table's key count equals the keys.
#[test]
fn concurrent_inserts_of_the_same_keys_make_one_slot_each() {
    let Some((_turn, cpus)) =
        multicpu_test("concurrent_inserts_of_the_same_keys_make_one_slot_each")
    else {
        return;
    };
    let threads: Vec<usize> = cpus.iter().chain(cpus.iter()).copied().collect();
    const KEYS: u32 = 3000;
    const ROUNDS: u32 = 3;
    let t = ProgTester::load(KEYS, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    let frames: Vec<Vec<u8>> = (0..KEYS)
        .map(|q| {
            Roce {
                dest_qp: 0x1000 + q,
                ..Roce::data(1)
            }
            .build()
        })
        .collect();
    let runner = t.shared_runner(prog::XDP).unwrap();
    let barrier = std::sync::Barrier::new(threads.len());
    std::thread::scope(|s| {
        for &cpu in &threads {
            let (runner, frames, barrier) = (&runner, &frames, &barrier);
            s.spawn(move || {
                pin_to(cpu);
                for _ in 0..ROUNDS {
                    // Every thread starts each round together, on the same new keys in the
                    // same order: their first packets race to insert.
                    barrier.wait();
                    for f in frames.iter() {
                        runner.run(f, 1).unwrap();
                    }
                }
            });
        }
    });
    drop(runner);
    let mut t = t;
    let s = t.snapshot("test", 0).unwrap();
    let per_key = threads.len() as u64 * ROUNDS as u64;
    let st = s.iface_stats[dir::INGRESS as usize];
    let mut qpns: Vec<u32> = s.qps.iter().map(|(k, _)| k.dest_qp).collect();
    qpns.sort_unstable();
    assert_eq!(
        qpns,
        (0..KEYS).map(|q| 0x1000 + q).collect::<Vec<_>>(),
        "every key in exactly one slot"
    );
    let tracked: u64 = s.qps.iter().map(|(_, v)| v.pkts).sum();
    assert_eq!(st.roce, KEYS as u64 * per_key);
    assert_untracked_only_from_give_ups(&st, tracked);
    assert!(
        s.qps
            .iter()
            .all(|(_, v)| v.pkts <= per_key && v.pkts + st.roce_untracked >= per_key),
        "per-key counts: {:?}",
        s.qps
            .iter()
            .filter(|(_, v)| v.pkts != per_key)
            .take(3)
            .collect::<Vec<_>>()
    );
    assert_eq!(t.table_len(), KEYS as u64, "the kernel's key count");
}

/// Evicting a key while CPUs keep counting packets of it loses no increment: every packet is
/// in one of the evicted values or in the final value (eviction waits for a grace period
/// before taking a slot's last value, and later packets insert the key afresh).
#[test]
fn eviction_under_traffic_loses_no_count() {
    let Some((_turn, cpus)) = multicpu_test("eviction_under_traffic_loses_no_count") else {
        return;
    };
    let mut t = ProgTester::load(64, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    let frame = Roce::data(3).build();
    let runner = t.shared_runner(prog::XDP).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let sent = std::sync::atomic::AtomicU64::new(0);
    let mut evicted_pkts = 0u64;
    let mut evictions = 0;
    std::thread::scope(|s| {
        for &cpu in &cpus {
            let (runner, frame, stop, sent) = (&runner, &frame, &stop, &sent);
            s.spawn(move || {
                pin_to(cpu);
                // Bounded: at most 4000 calls of 50 packets per CPU.
                for _ in 0..4000 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    runner.run(frame, 50).unwrap();
                    sent.fetch_add(50, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        // Evict the key over and over while the CPUs count into it: 40 rounds, more (up to 400)
        // until 10 evictions have happened (each waits for an RCU grace period, which a loaded
        // machine stretches).
        for round in 0..400 {
            if round >= 40 && evictions >= 10 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            let keys = live_keys(&mut t);
            for (_, v) in t.evict(&keys).unwrap() {
                evicted_pkts += v.pkts;
                evictions += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    drop(runner);
    let s = t.snapshot("test", 0).unwrap();
    let remaining: u64 = s.qps.iter().map(|(_, v)| v.pkts).sum();
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(evictions >= 10, "only {evictions} evictions happened");
    let st = s.iface_stats[dir::INGRESS as usize];
    assert_eq!(st.roce, sent);
    // Every packet is in an evicted value, in the table, or (a give-up on the insert lock, as
    // every eviction makes all CPUs insert the key again at once) counted untracked.
    assert_eq!(
        evicted_pkts + remaining + st.roce_untracked,
        sent,
        "{evictions} evictions: evicted {evicted_pkts} + in table {remaining} + untracked {} != sent {sent}",
        st.roce_untracked
    );
    assert_untracked_only_from_give_ups(&st, evicted_pkts + remaining);
    assert!(s.qps.len() <= 1);
    assert_eq!(t.table_len(), s.qps.len() as u64);
}

/// An insert whose bucket lock is held waits for it (`table::LOCK_WAIT_LOOPS` attempts, in a
/// `bpf_loop`): it takes the key when the holder lets go within the wait, and gives up, counted
/// as an insert failure with the packet untracked, when the holder never does.
#[test]
fn insert_waits_for_a_held_lock_then_gives_up_counted() {
    let Some((_turn, cpus)) = multicpu_test("insert_waits_for_a_held_lock_then_gives_up_counted")
    else {
        return;
    };
    let mut t = ProgTester::load(16, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    let frame = Roce::data(1).build();
    let runner = t.shared_runner(prog::XDP).unwrap();

    // A holder that never lets go: the insert gives up after its whole wait.
    t.hold_insert_locks(true);
    let (act, gave_up_after) = runner.run_timed(&frame, 1).unwrap();
    assert_eq!(act, 2, "XDP_PASS");
    let s = t.snapshot("test", 0).unwrap();
    let st = s.iface_stats[dir::INGRESS as usize];
    assert_eq!((st.roce, st.qp_insert_failed, st.roce_untracked), (1, 1, 1));
    assert!(s.qps.is_empty());
    assert_eq!(
        t.table_len(),
        0,
        "a give-up leaves no key counted in the table"
    );
    eprintln!(
        "an insert gave up after {} attempts in {gave_up_after:?}",
        observer_common::qp_table::LOCK_WAIT_LOOPS
    );

    // A holder that lets go while the insert waits: the insert takes the key. The runner (on one
    // CPU) says when it is about to enter BPF_PROG_TEST_RUN; this thread (on another) then lets
    // the locks go after `delay`. An attempt counts when the run took at least a quarter of the
    // delay, i.e. it waited, and inserted the key. An attempt where the runner entered the run
    // only after the locks were let go, or where this thread was held up past the whole wait
    // (a stalled vCPU), is tried again: up to 200 attempts or 5 s.
    let delay = (gave_up_after / 4).clamp(
        std::time::Duration::from_micros(200),
        std::time::Duration::from_millis(2),
    );
    let mut waited = None;
    let mut gave_up = 1;
    let t0 = std::time::Instant::now();
    for attempt in 0..200u64 {
        if t0.elapsed() > std::time::Duration::from_secs(5) {
            break;
        }
        // The key must be inserted afresh: evict it (none in the table at the first attempt).
        let keys = live_keys(&mut t);
        t.evict(&keys).unwrap();
        t.hold_insert_locks(true);
        let entering = std::sync::atomic::AtomicBool::new(false);
        let took = std::thread::scope(|s| {
            let h = s.spawn(|| {
                pin_to(cpus[0]);
                entering.store(true, std::sync::atomic::Ordering::Release);
                runner.run_timed(&frame, 1).unwrap().1
            });
            pin_to(cpus[1]);
            // Bounded by the runner: it sets the flag before anything that can fail.
            while !entering.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::yield_now();
            }
            std::thread::sleep(delay);
            t.hold_insert_locks(false);
            h.join().unwrap()
        });
        let s = t.snapshot("test", 0).unwrap();
        let st = s.iface_stats[dir::INGRESS as usize];
        assert_eq!(st.roce, 2 + attempt);
        if st.qp_insert_failed > gave_up {
            gave_up = st.qp_insert_failed;
            eprintln!("attempt {attempt}: gave up after {took:?} (lock let go after {delay:?})");
            assert!(s.qps.is_empty());
            continue;
        }
        assert_eq!(s.qps.len(), 1);
        assert_eq!(s.qps[0].1.pkts, 1);
        if took >= delay / 4 {
            waited = Some(took);
            break;
        }
        eprintln!("attempt {attempt}: the run began after the locks were let go ({took:?})");
    }
    assert_eq!(t.table_len(), 1);
    let took = waited.expect("no insert waited for a lock and then took it");
    eprintln!("an insert waited {took:?} for a lock let go after {delay:?}");
}

/// The live loop's incremental read (only slots whose dirty bit was set are expanded, the
/// snapshot updated in place) under traffic from every CPU, with evictions: read as often as possible
/// while the CPUs count into 64 keys (a read can see a packet's count before the rest of its
/// writes), then, once the traffic has stopped, one more incremental read must equal a full
/// read of the table field by field, and every packet sent is in it, in an evicted value or
/// counted untracked.
#[test]
fn incremental_reads_under_traffic_end_exact() {
    let Some((_turn, cpus)) = multicpu_test("incremental_reads_under_traffic_end_exact") else {
        return;
    };
    let mut t = ProgTester::load(1024, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    let frames: Vec<Vec<u8>> = (0..64u32)
        .map(|q| {
            Roce {
                dest_qp: 0x500 + q,
                dscp: [26, 0, 46, 10, 12, 34, 18][q as usize % 7],
                ..Roce::data(q)
            }
            .build()
        })
        .collect();
    let runner = t.shared_runner(prog::XDP).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let sent = std::sync::atomic::AtomicU64::new(0);
    let (mut evicted_pkts, mut reads) = (0u64, 0u32);
    let mut snap = None;
    std::thread::scope(|s| {
        for (n, &cpu) in cpus.iter().enumerate() {
            let (runner, frames, stop, sent) = (&runner, &frames, &stop, &sent);
            s.spawn(move || {
                pin_to(cpu);
                // Bounded: at most 3000 calls of 20 packets per CPU.
                for i in 0..3000usize {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    runner
                        .run(&frames[(i * 7 + n * 13) % frames.len()], 20)
                        .unwrap();
                    sent.fetch_add(20, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        // Bounded: 400 reads; every 50th also evicts four keys.
        for round in 0..400 {
            if let Some(s) = snap.take() {
                t.recycle(s);
            }
            let s = t.snapshot("test", 0).unwrap();
            reads += 1;
            if round % 50 == 49 {
                let keys: Vec<_> = s.qps.iter().take(4).map(|(k, _)| *k).collect();
                for (_, v) in t.evict(&keys).unwrap() {
                    evicted_pkts += v.pkts;
                }
            }
            snap = Some(s);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    drop(runner);
    if let Some(s) = snap.take() {
        t.recycle(s);
    }
    let s = t.snapshot("test", 0).unwrap();
    let full = t.read_all_qps().unwrap();
    let sorted = |mut v: Vec<(observer_common::maps::QpKey, observer_common::maps::QpValue)>| {
        for (_, x) in v.iter_mut() {
            x.first_ns = 0;
            x.last_ns = 0;
        }
        v.sort_by_key(|(k, _)| *k);
        v
    };
    let (inc, full) = (sorted(s.qps.clone()), sorted(full));
    assert_eq!(inc.len(), full.len());
    for ((k, a), (_, b)) in inc.iter().zip(&full) {
        assert_eq!(
            a, b,
            "after {reads} incremental reads under traffic: key {k:?} differs"
        );
    }
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    let st = s.iface_stats[dir::INGRESS as usize];
    let in_table: u64 = inc.iter().map(|(_, v)| v.pkts).sum();
    assert_eq!(st.roce, sent);
    assert_eq!(
        evicted_pkts + in_table + st.roce_untracked,
        sent,
        "evicted {evicted_pkts} + in table {in_table} + untracked {} != sent {sent}",
        st.roce_untracked
    );
}
