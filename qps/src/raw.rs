//! What the QP listing lacks, from the driver's raw QP context where it has one (mlx5,
//! [`crate::mlx5`]), read for the few QPs that need it each interval:
//!
//! - the **set-up** (traffic class, priority, remote GID) of a connected QP the modify-QP probe
//!   did not see (set up before the observer started, or no probe): read once per QP
//!   incarnation and kept;
//! - the **acknowledged PSN** of an RC QP in RTS whose send PSN did not move since the previous
//!   read: with packets sent and not acknowledged, the time since its acknowledged PSN last
//!   moved is what `qp_stalled` judges (docs/qps.md#stalls).
//!
//! Bounded: at most [`MAX_RAW_PER_READ`] raw reads per interval (each is a firmware command on
//! mlx5); QPs beyond wait for the next read and are counted. A device whose driver has no raw
//! context (rxe, irdma), or without `CAP_NET_ADMIN`, is asked once, then named and
//! skipped; a device of another driver with a raw context of its own layout (bnxt_re, hns) is
//! never asked.

use std::collections::{BTreeMap, HashMap};

use nic::Reading;
use nic::rdma::resources::qp_state;
use serde::{Deserialize, Serialize};

use crate::inventory::{Inventory, QpKey, QpRow, QpSource, SetUp, SetUpSource};
use crate::mlx5::{self, Listed};

type FastHash = foldhash::fast::RandomState;

/// Raw reads per interval, at most.
pub const MAX_RAW_PER_READ: usize = 256;

/// An RC QP in RTS with packets not acknowledged, and since when its acknowledged PSN has not
/// moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckWait {
    pub dev_index: u32,
    pub lqpn: u32,
    pub last_acked_psn: u32,
    pub next_send_psn: u32,
    /// Packets sent and not acknowledged.
    pub unacknowledged: u32,
    /// When the acknowledged PSN was first seen at this value (the read's time, ns).
    pub since_ns: u64,
}

/// One interval's raw reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawRead {
    /// QPs waiting for their acknowledgements (see [`AckWait`]).
    pub waiting: Vec<AckWait>,
    /// Over the run: raw contexts read, used for a set-up, not usable (malformed, a firmware
    /// error, or disagreeing with the listing), and QPs left for a later read by the bound.
    pub reads: u64,
    pub setups: u64,
    pub errors: u64,
    pub deferred: u64,
    /// Devices without a raw QP context, and why (asked once).
    pub unsupported: BTreeMap<String, String>,
}

#[derive(Clone, Copy, Debug)]
struct Known {
    pid: Option<u32>,
    rqpn: Option<u32>,
    setup: Option<SetUp>,
}

/// Raw reads over a run.
#[derive(Debug, Default)]
pub struct RawReader {
    known: HashMap<QpKey, Known, FastHash>,
    waits: HashMap<QpKey, AckWait, FastHash>,
    unsupported: BTreeMap<u32, (String, String)>,
    reads: u64,
    setups: u64,
    errors: u64,
    deferred: u64,
    /// Where the next turn of still QPs starts.
    turn: usize,
    /// Devices whose driver was looked at.
    drivers_checked: std::collections::HashSet<u32>,
}

/// The driver of the devices whose raw QP context [`mlx5`] decodes (the PCI function's).
pub const MLX5_DRIVER: &str = "mlx5_core";

/// Whether the raw QP context of a device with this driver is asked for: mlx5's, or a driver
/// not known (its context is tried, and used only where it decodes). Other drivers (bnxt_re,
/// hns) have raw contexts of their own layouts; rxe and irdma have none.
pub fn decodes_raw_context(driver: Option<&str>) -> bool {
    driver.is_none_or(|d| d == MLX5_DRIVER)
}

fn connected_with_path(r: &QpRow) -> bool {
    matches!(r.qp_type.as_str(), "RC" | "UC")
        && matches!(
            r.state_code,
            Some(qp_state::RTR | qp_state::RTS | qp_state::SQD | qp_state::SQE | qp_state::ERR)
        )
}

impl RawReader {
    /// Completes `inv` (the probe's set-ups already joined) from raw contexts: set-ups the
    /// probe did not see, and the acknowledgement state of RC QPs whose send PSN stood still
    /// since `prev`.
    pub fn apply(&mut self, src: &mut dyn QpSource, inv: &mut Inventory, prev: &Inventory) {
        let before = crate::progress::by_key(prev);
        let now_ns = inv.time_ns;
        // What each QP needs, in order of urgency: set-ups, QPs already waiting, then the
        // other QPs whose send PSN stood still, in turns from one read to the next.
        let (mut setups, mut waiting_again, mut still_others) =
            (Vec::new(), Vec::new(), Vec::new());
        let mut still_of = vec![false; inv.qps.len()];
        for (i, r) in inv.qps.iter_mut().enumerate() {
            let key = r.key();
            // A QP number re-used (another creator, another peer) is another QP.
            if let Some(k) = self.known.get(&key)
                && (k.pid != r.pid || k.rqpn != r.rqpn)
            {
                self.known.remove(&key);
                self.waits.remove(&key);
            }
            if r.setup.is_none()
                && let Some(s) = self.known.get(&key).and_then(|k| k.setup)
            {
                r.setup = Some(s);
            }
            let still = r.qp_type == "RC"
                && r.state_code == Some(qp_state::RTS)
                && crate::progress::find(&before, key)
                    .is_some_and(|b| b.sq_psn.is_some() && b.sq_psn == r.sq_psn);
            if !still {
                self.waits.remove(&key);
            }
            if !self.drivers_checked.contains(&r.dev_index) {
                self.drivers_checked.insert(r.dev_index);
                if let Some(d) = src.driver(&r.dev)
                    && !decodes_raw_context(Some(&d))
                {
                    tracing::info!(device = %r.dev, driver = %d, "raw QP context not decoded for this driver: QPs set up before the probe stay marking unknown, qp_stalled is not judged");
                    self.unsupported.insert(
                        r.dev_index,
                        (
                            r.dev.clone(),
                            format!("driver {d}: only mlx5's raw QP context is decoded"),
                        ),
                    );
                }
            }
            if self.unsupported.contains_key(&r.dev_index) {
                continue;
            }
            still_of[i] = still;
            if r.setup.is_none() && connected_with_path(r) && !self.known.contains_key(&key) {
                setups.push(i);
            } else if still && self.waits.contains_key(&key) {
                waiting_again.push(i);
            } else if still {
                still_others.push(i);
            }
        }
        if !still_others.is_empty() {
            let k = self.turn % still_others.len();
            still_others.rotate_left(k);
        }
        let mut budget = MAX_RAW_PER_READ;
        let mut checked_others = 0;
        for (i, is_other) in setups
            .into_iter()
            .map(|i| (i, false))
            .chain(waiting_again.into_iter().map(|i| (i, false)))
            .chain(still_others.into_iter().map(|i| (i, true)))
        {
            if budget == 0 {
                self.deferred += 1;
                continue;
            }
            budget -= 1;
            checked_others += usize::from(is_other);
            self.read_one(src, &mut inv.qps[i], still_of[i], now_ns);
        }
        self.turn = self.turn.wrapping_add(checked_others);
        let mut waiting: Vec<AckWait> = inv
            .qps
            .iter()
            .filter_map(|r| self.waits.get(&r.key()).copied())
            .collect();
        waiting.sort_by_key(|w| (w.dev_index, w.lqpn));
        let now = crate::progress::by_key(inv);
        self.known
            .retain(|k, _| crate::progress::find(&now, *k).is_some());
        self.waits
            .retain(|k, _| crate::progress::find(&now, *k).is_some());
        inv.raw = Some(RawRead {
            waiting,
            reads: self.reads,
            setups: self.setups,
            errors: self.errors,
            deferred: self.deferred,
            unsupported: self.unsupported.values().cloned().collect(),
        });
    }

    /// One raw read for `r`: its set-up if it has none, its acknowledgement wait if `still`.
    fn read_one(&mut self, src: &mut dyn QpSource, r: &mut QpRow, still: bool, now_ns: u64) {
        let key = r.key();
        let need_setup = r.setup.is_none() && !self.known.contains_key(&key);
        let raw = match src.qp_raw(r.dev_index, r.lqpn) {
            Ok(Reading::Read(raw)) => raw,
            Ok(Reading::Unavailable(u)) => {
                if u.reason == nic::UnavailableReason::Absent {
                    return; // the QP went away meanwhile
                }
                if let std::collections::btree_map::Entry::Vacant(e) =
                    self.unsupported.entry(r.dev_index)
                {
                    tracing::info!(device = %r.dev, reason = %u, "no raw QP context on this device: QPs set up before the probe stay marking unknown, qp_stalled is not judged");
                    e.insert((r.dev.clone(), u.to_string()));
                }
                return;
            }
            Err(e) => {
                self.errors += 1;
                tracing::debug!(device = %r.dev, lqpn = r.lqpn, error = %contract::error::chain(&e), "raw QP context unreadable");
                return;
            }
        };
        self.reads += 1;
        let listed = Listed {
            state: r.state_code,
            qp_type: match r.qp_type.as_str() {
                "RC" => Some(2),
                "UC" => Some(3),
                _ => None,
            },
            rqpn: r.rqpn,
        };
        let m = match mlx5::decode(&raw, r.lqpn, &listed) {
            Ok(m) => m,
            Err(e) => {
                self.errors += 1;
                tracing::debug!(device = %r.dev, lqpn = r.lqpn, error = %e, "raw QP context not used");
                return;
            }
        };
        if need_setup {
            let setup = m.set_up().map(|s| SetUp {
                source: SetUpSource::Mlx5Qpc,
                ..s
            });
            if setup.is_some() {
                self.setups += 1;
            }
            self.known.insert(
                key,
                Known {
                    pid: r.pid,
                    rqpn: r.rqpn,
                    setup,
                },
            );
            r.setup = r.setup.or(setup);
        }
        if !still {
            return;
        }
        let unacked = m.unacknowledged();
        if unacked == 0 {
            self.waits.remove(&key);
            return;
        }
        let fresh = AckWait {
            dev_index: r.dev_index,
            lqpn: r.lqpn,
            last_acked_psn: m.last_acked_psn,
            next_send_psn: m.next_send_psn,
            unacknowledged: unacked,
            since_ns: now_ns,
        };
        let w = self.waits.entry(key).or_insert(fresh);
        if w.last_acked_psn != m.last_acked_psn || w.next_send_psn != m.next_send_psn {
            *w = fresh;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::tests::{Script, dev, qp};
    use crate::mlx5::tests::{dump, rts_rc};

    #[test]
    fn raw_context_asked_of_mlx5_and_unknown_drivers_only() {
        assert!(decodes_raw_context(Some(MLX5_DRIVER)));
        assert!(decodes_raw_context(None));
        for d in ["rdma_rxe", "bnxt_en", "hns3", "ice"] {
            assert!(!decodes_raw_context(Some(d)), "{d}");
        }
    }

    fn read(s: &mut Script, t: u64) -> Inventory {
        let mut inv = crate::read(
            s,
            &crate::Procfs {
                root: "/nonexistent".into(),
            },
            100_000,
        )
        .unwrap();
        inv.time_ns = t;
        inv
    }

    #[test]
    fn set_ups_from_the_raw_context_and_acknowledgement_waits() {
        let mut s = Script {
            devices: vec![dev(1), dev(2), dev(3)],
            drivers: [("rxe1", MLX5_DRIVER), ("rxe3", "bnxt_en")]
                .into_iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            ..Script::default()
        };
        // Device 1 has raw contexts; device 2 does not (rxe); device 3 is another driver's,
        // never asked.
        s.qps
            .insert(3, vec![qp(3, 0x30, Some(7), 9, 5, qp_state::RTS)]);
        let rts = qp_state::RTS;
        s.qps.insert(1, vec![qp(1, 0x10, Some(7), 0x100, 5, rts)]);
        s.qps.insert(2, vec![qp(2, 0x20, Some(7), 9, 5, rts)]);
        let mut m = rts_rc(0x10, 0x11);
        m.next_send_psn = 0x100;
        m.last_acked_psn = 0xff;
        s.raw.insert((1, 0x10), dump(&m, true));
        let mut rr = RawReader::default();
        let mut prev = Inventory::default();
        let mut inv = read(&mut s, 1_000);
        rr.apply(&mut s, &mut inv, &prev);
        let r = &inv.qps[0];
        let su = r.setup.unwrap();
        assert_eq!(
            (su.traffic_class, su.sl, su.source),
            (106, 3, SetUpSource::Mlx5Qpc)
        );
        assert_eq!(
            inv.qps[1].setup, None,
            "no raw context on rxe2: unknown, never guessed"
        );
        let raw = inv.raw.clone().unwrap();
        assert_eq!((raw.reads, raw.setups), (1, 1));
        assert_eq!(raw.unsupported.len(), 2);
        assert!(raw.unsupported.contains_key("rxe2"), "{raw:?}");
        assert_eq!(
            raw.unsupported["rxe3"],
            "driver bnxt_en: only mlx5's raw QP context is decoded"
        );
        assert!(raw.waiting.is_empty(), "first read: no PSN to compare");
        assert_eq!(s.raw_calls, vec![(1, 0x10), (2, 0x20)]);

        // Second read: send PSN unchanged, 3 packets unacknowledged since now.
        m.next_send_psn = 0x100;
        m.last_acked_psn = 0xfc;
        s.raw.insert((1, 0x10), dump(&m, true));
        prev = inv;
        let mut inv = read(&mut s, 2_000);
        rr.apply(&mut s, &mut inv, &prev);
        assert_eq!(inv.qps[0].setup, prev.qps[0].setup, "kept, not read again");
        let w = inv.raw.as_ref().unwrap().waiting.clone();
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].unacknowledged, w[0].since_ns), (3, 2_000));
        assert_eq!(s.raw_calls.len(), 3, "rxe2 not asked again");

        // Third read: nothing moved: the wait keeps its start.
        prev = inv;
        let mut inv = read(&mut s, 3_000);
        rr.apply(&mut s, &mut inv, &prev);
        assert_eq!(inv.raw.as_ref().unwrap().waiting[0].since_ns, 2_000);

        // The acknowledgements catch up: no wait.
        m.last_acked_psn = 0xff;
        s.raw.insert((1, 0x10), dump(&m, true));
        prev = inv;
        let mut inv = read(&mut s, 4_000);
        rr.apply(&mut s, &mut inv, &prev);
        assert!(inv.raw.as_ref().unwrap().waiting.is_empty());

        // The send PSN moves: not read for a wait at all.
        s.qps.insert(1, vec![qp(1, 0x10, Some(7), 0x180, 5, rts)]);
        let calls = s.raw_calls.len();
        prev = inv;
        let mut inv = read(&mut s, 5_000);
        rr.apply(&mut s, &mut inv, &prev);
        assert_eq!(s.raw_calls.len(), calls);

        // Another creator of the same QP number: its own context is read again.
        s.qps.insert(1, vec![qp(1, 0x10, Some(8), 0x180, 5, rts)]);
        prev = inv;
        let mut inv = read(&mut s, 6_000);
        rr.apply(&mut s, &mut inv, &prev);
        assert_eq!(s.raw_calls.len(), calls + 1, "another creator: read again");
        assert!(inv.qps[0].setup.is_some());
        assert_eq!(inv.raw.as_ref().unwrap().errors, 0);
        // A context that disagrees with the listing is counted, not used.
        let mut bad = m;
        bad.remote_qpn = 0x999;
        s.raw.insert((1, 0x10), dump(&bad, true));
        s.qps.insert(1, vec![qp(1, 0x10, Some(9), 0x180, 5, rts)]);
        prev = inv;
        let mut inv = read(&mut s, 7_000);
        rr.apply(&mut s, &mut inv, &prev);
        assert_eq!(inv.qps[0].setup, None);
        assert_eq!(inv.raw.as_ref().unwrap().errors, 1);
    }

    #[test]
    fn raw_reads_are_bounded_per_interval() {
        let mut s = Script {
            devices: vec![dev(1)],
            ..Script::default()
        };
        let n = MAX_RAW_PER_READ as u32 + 10;
        s.qps.insert(
            1,
            (0..n)
                .map(|i| qp(1, 0x100 + i, Some(7), 1, 1, qp_state::RTS))
                .collect(),
        );
        for i in 0..n {
            s.raw
                .insert((1, 0x100 + i), dump(&rts_rc(0x100 + i, 0x101 + i), true));
        }
        let mut rr = RawReader::default();
        let mut inv = read(&mut s, 1);
        rr.apply(&mut s, &mut inv, &Inventory::default());
        let raw = inv.raw.clone().unwrap();
        assert_eq!(raw.reads, MAX_RAW_PER_READ as u64);
        assert_eq!(raw.deferred, 10);
        let prev = inv;
        let mut inv = read(&mut s, 2);
        rr.apply(&mut s, &mut inv, &prev);
        assert!(
            inv.qps.iter().all(|r| r.setup.is_some()),
            "the rest next read"
        );
    }
}
