//! What changed between two inventories: each QP's packets in each direction (from its PSNs)
//! and its fate (a move to ERR or SQE).
//!
//! PSNs are 24 bits and wrap: the packets sent in an interval are `(sq_psn_now - sq_psn_before)
//! mod 2^24` (the send queue's next PSN advances by one per packet sent), the packets received
//! in sequence likewise from `rq_psn` (RC and UC only). PSNs compare as serial numbers
//! ([`psn_advance`]): a move of 2^23 or more forward is a move backward, which a requester's
//! send PSN makes when it goes back N (rxe reports its next PSN rewound to the first packet not
//! acknowledged while it retries: 5,867,605 then 5,867,545 and 5,867,480 under netem loss 100 %
//! in the soft-RoCE VM). Such an interval counts 0 packets, never 2^24 minus the rewind; the
//! packets re-sent after it count again as the PSN moves forward over them (they were sent
//! again). 2^23 or more packets in one interval cannot be told from a rewind; at the default
//! interval that is over 1.6 million packets per second on one QP — a limit of the kernel's
//! counters, documented in docs/qps.md.
//!
//! A QP number re-used by a new QP (another creator, or a QP back in RESET or INIT) is a new
//! incarnation: no delta is taken across it.

use nic::rdma::resources::qp_state;
use serde::{Deserialize, Serialize};

use crate::inventory::{Inventory, QpKey, QpRow};

/// `(now - before) mod 2^24`.
pub fn psn_delta(before: u32, now: u32) -> u32 {
    now.wrapping_sub(before) & 0x00ff_ffff
}

/// How far a PSN moved forward from `before` to `now` as a 24-bit serial number: the distance
/// when it is under 2^23, else 0 (it moved backward: a go-back-N rewind of a send PSN).
pub fn psn_advance(before: u32, now: u32) -> u32 {
    match psn_delta(before, now) {
        d if d < 1 << 23 => d,
        _ => 0,
    }
}

/// One QP's progress over an interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub dev_index: u32,
    pub lqpn: u32,
    /// Packets sent for the first time (send PSN advance); `None` for a new QP.
    pub sent: Option<u32>,
    /// Packets received in sequence (receive PSN advance); `None` for a new QP or a type without
    /// a receive PSN.
    pub received: Option<u32>,
}

/// A QP's fate between two reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Fate {
    /// Moved to ERR (or SQE) since the last read: the `IBV_WC_RETRY_EXC_ERR` moment of a
    /// requester, a fatal remote error, or the owner's own modify.
    Error { row: QpRow, from: String },
    /// In the inventory now, not before.
    Appeared { row: QpRow },
    /// In the inventory before, not now (destroyed).
    Gone { row: QpRow },
}

/// The rows of `inv` in key order, by reference: the inventory's own order when it is sorted
/// (as [`crate::read`] leaves it), else sorted here.
pub(crate) fn by_key(inv: &Inventory) -> Vec<&QpRow> {
    let mut v: Vec<&QpRow> = inv.qps.iter().collect();
    if !v.is_sorted_by_key(|r| r.key()) {
        v.sort_by_key(|r| r.key());
    }
    v
}

pub(crate) fn find<'a>(sorted: &[&'a QpRow], key: QpKey) -> Option<&'a QpRow> {
    sorted
        .binary_search_by_key(&key, |r| r.key())
        .ok()
        .map(|i| sorted[i])
}

/// Progress of every QP present in both reads, and the fates. The reads are matched by key in
/// key order (binary search over the sorted rows: no per-read hash tables at 100,000 QPs).
pub fn compare(before: &Inventory, now: &Inventory) -> (Vec<Progress>, Vec<Fate>) {
    let prev = by_key(before);
    let cur = by_key(now);
    let mut progress = Vec::with_capacity(now.qps.len());
    let mut fates = Vec::new();
    for r in &now.qps {
        let Some(p) = find(&prev, r.key()).filter(|p| same_incarnation(p, r)) else {
            fates.push(Fate::Appeared { row: r.clone() });
            if is_error(r.state_code) {
                fates.push(Fate::Error {
                    row: r.clone(),
                    from: "new".into(),
                });
            }
            progress.push(Progress {
                dev_index: r.dev_index,
                lqpn: r.lqpn,
                ..Progress::default()
            });
            continue;
        };
        let d = |a: Option<u32>, b: Option<u32>| Some(psn_advance(a?, b?));
        // A PSN counts from the read after it was set: the receive PSN at the move to RTR, the
        // send PSN at the move to RTS (the application picks the start, often at random: a QP
        // read in INIT with PSN 0, then in RTS at 1,647,981, sent nothing yet).
        let (sq_set, rq_set) = psns_set(p.state_code);
        progress.push(Progress {
            dev_index: r.dev_index,
            lqpn: r.lqpn,
            sent: d(p.sq_psn, r.sq_psn).filter(|_| sq_set),
            received: d(p.rq_psn, r.rq_psn).filter(|_| rq_set),
        });
        if is_error(r.state_code) && !is_error(p.state_code) {
            fates.push(Fate::Error {
                row: r.clone(),
                from: p.state.clone(),
            });
        }
    }
    for p in &before.qps {
        if find(&cur, p.key()).is_none() {
            fates.push(Fate::Gone { row: p.clone() });
        }
    }
    (progress, fates)
}

fn is_error(s: Option<u8>) -> bool {
    matches!(s, Some(qp_state::ERR | qp_state::SQE))
}

/// The same QP, not a new one under a re-used number.
/// Whether a QP in this state has its send PSN and its receive PSN set (an unknown state: both
/// taken as set).
fn psns_set(state: Option<u8>) -> (bool, bool) {
    match state {
        Some(qp_state::RESET | qp_state::INIT) => (false, false),
        Some(qp_state::RTR) => (false, true),
        _ => (true, true),
    }
}

fn same_incarnation(p: &QpRow, r: &QpRow) -> bool {
    let rewound = matches!(r.state_code, Some(qp_state::RESET | qp_state::INIT))
        && !matches!(p.state_code, Some(qp_state::RESET | qp_state::INIT));
    p.pid == r.pid && p.qp_type == r.qp_type && !rewound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(lqpn: u32, pid: u32, sq: u32, rq: u32, state: u8) -> QpRow {
        QpRow {
            dev_index: 1,
            lqpn,
            pid: Some(pid),
            qp_type: "RC".into(),
            state: nic::rdma::resources::qp_state_name(state).into(),
            state_code: Some(state),
            sq_psn: Some(sq),
            rq_psn: Some(rq),
            ..QpRow::default()
        }
    }

    fn inv(qps: Vec<QpRow>) -> Inventory {
        Inventory {
            qps,
            ..Inventory::default()
        }
    }

    #[test]
    fn psn_deltas_wrap_at_24_bits() {
        assert_eq!(psn_delta(10, 25), 15);
        assert_eq!(psn_delta(0x00ff_fff0, 0x0000_0010), 0x20);
        assert_eq!(psn_delta(7, 7), 0);
    }

    #[test]
    fn a_send_psn_rewound_by_go_back_n_counts_nothing() {
        // rxe under netem loss 100 %: the send PSN read 5,867,605, then 5,867,545 (rewound to
        // the first packet not acknowledged), then 5,867,480.
        assert_eq!(psn_advance(5_867_605, 5_867_545), 0);
        assert_eq!(psn_advance(5_867_545, 5_867_480), 0);
        assert_eq!(psn_advance(5_867_480, 5_867_500), 20);
        // Across the wrap, in both directions.
        assert_eq!(psn_advance(0x00ff_fff0, 0x0000_0010), 0x20);
        assert_eq!(psn_advance(0x0000_0010, 0x00ff_fff0), 0);
        // The largest forward move told from a rewind.
        assert_eq!(psn_advance(0, (1 << 23) - 1), (1 << 23) - 1);
        assert_eq!(psn_advance(0, 1 << 23), 0);
        let a = inv(vec![row(17, 1, 5_867_605, 50, qp_state::RTS)]);
        let b = inv(vec![row(17, 1, 5_867_545, 50, qp_state::RTS)]);
        let (p, f) = compare(&a, &b);
        assert_eq!((p[0].sent, p[0].received), (Some(0), Some(0)));
        assert!(f.is_empty());
    }

    #[test]
    fn progress_errors_and_incarnations() {
        let a = inv(vec![
            row(17, 1, 100, 50, qp_state::RTS),
            row(18, 1, 0x00ff_fffe, 0, qp_state::RTS),
            row(19, 1, 5, 5, qp_state::RTS),
            row(20, 1, 5, 5, qp_state::RTS),
            row(21, 1, 5, 5, qp_state::RTS),
        ]);
        let b = inv(vec![
            row(17, 1, 400, 52, qp_state::RTS),
            row(18, 1, 3, 0, qp_state::ERR),
            // QP number 19 re-used by another process
            row(19, 2, 9, 9, qp_state::RTS),
            // QP 20 rewound to INIT by its owner
            row(20, 1, 0, 0, qp_state::INIT),
            row(22, 3, 0, 0, qp_state::ERR),
        ]);
        let (p, f) = compare(&a, &b);
        assert_eq!((p[0].sent, p[0].received), (Some(300), Some(2)));
        assert_eq!((p[1].sent, p[1].received), (Some(5), Some(0)));
        assert_eq!((p[2].sent, p[3].sent), (None, None));
        let errors: Vec<(u32, &str)> = f
            .iter()
            .filter_map(|f| match f {
                Fate::Error { row, from } => Some((row.lqpn, from.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(errors, vec![(18, "RTS"), (22, "new")]);
        // PSNs count from the read after they were set: INIT (0, 0) to RTS at a random start
        // is no packet; RTR to RTS counts received packets only.
        let a = inv(vec![
            row(30, 1, 0, 0, qp_state::INIT),
            row(31, 1, 0, 1_000, qp_state::RTR),
        ]);
        let b = inv(vec![
            row(30, 1, 1_647_981, 16_588_542, qp_state::RTS),
            row(31, 1, 1_647_981, 1_010, qp_state::RTS),
        ]);
        let (p2, _) = compare(&a, &b);
        assert_eq!((p2[0].sent, p2[0].received), (None, None));
        assert_eq!((p2[1].sent, p2[1].received), (None, Some(10)));
        let gone: Vec<u32> = f
            .iter()
            .filter_map(|f| match f {
                Fate::Gone { row } => Some(row.lqpn),
                _ => None,
            })
            .collect();
        assert_eq!(gone, vec![21]);
        let appeared = f
            .iter()
            .filter(|f| matches!(f, Fate::Appeared { .. }))
            .count();
        assert_eq!(appeared, 3, "19 and 20 as new incarnations, and 22");
        // An ERR QP still in ERR is no new error.
        let (_, f) = compare(&b, &b);
        assert!(f.is_empty(), "{f:?}");
    }
}
