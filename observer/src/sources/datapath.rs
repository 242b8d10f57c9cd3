//! The userspace datapath: the eBPF programs' per-frame logic (classify, per-interface
//! accounting, per-QP update, per-source-MAC PFC, first-occurrence events) run on frames from a
//! capture, with the same shared code from `observer-common`, plus the ICRC check the kernel does
//! not do. Replay and the tests use it; its state has the same layout as the kernel maps, so it
//! produces the same [`Snapshot`]s.

use std::collections::HashMap;

use observer_common::icrc;
use observer_common::maps::{
    Event, IfaceStats, MacKey, PauseEvent, PfcCounters, Policy, QpKey, QpValue, dir,
};
use observer_common::parse::{self, kind};
use observer_common::qp::{self, Plain};

use crate::sources::Snapshot;
use crate::sources::kernel::MAX_MACS;

/// Hasher of the per-QP and per-MAC maps: foldhash (randomly seeded), several times faster than
/// SipHash on the 40-byte key, which dominated replay's per-packet cost.
pub type FastHash = foldhash::fast::RandomState;

/// Per-interface state, as the kernel keeps it for one interface.
pub struct Datapath {
    pub policy: Policy,
    /// Largest number of keys (the kernel map's size); further new keys are not inserted and
    /// their packets are counted `roce_untracked`.
    pub max_qps: usize,
    pub qps: HashMap<QpKey, QpValue, FastHash>,
    pub iface: [IfaceStats; dir::COUNT],
    pub macs: HashMap<MacKey, PfcCounters, FastHash>,
    /// Largest number of source MACs with PFC / PAUSE counters: the kernel's `MACS` map size
    /// ([`MAX_MACS`]); frames of further MACs count `mac_insert_failed`, as in the kernel.
    pub max_macs: usize,
    /// Events produced since the last [`Datapath::take_events`].
    pub events: Vec<Event>,
    /// PFC / PAUSE frames since the last [`Datapath::take_pauses`] (the kernel's `PAUSES`
    /// ring).
    pub pauses: Vec<PauseEvent>,
    /// Whether to check the ICRC (replay does, the kernel cannot).
    pub check_icrc: bool,
}

impl Datapath {
    pub fn new(policy: Policy, max_qps: usize) -> Self {
        Datapath {
            policy,
            max_qps,
            qps: HashMap::default(),
            iface: [IfaceStats::default(); dir::COUNT],
            macs: HashMap::default(),
            max_macs: MAX_MACS as usize,
            events: Vec::new(),
            pauses: Vec::new(),
            check_icrc: true,
        }
    }

    /// Processes one frame: `bytes` as captured, `wire_len` its original length, `ts_ns` its time.
    pub fn process(&mut self, bytes: &[u8], wire_len: u32, ts_ns: u64, direction: u8) {
        let d = (direction as usize).min(dir::COUNT - 1);
        let f = parse::classify(bytes);
        qp::account_iface(&mut self.iface[d], &f, wire_len);
        match f.kind {
            kind::MAC_CONTROL => {
                self.pauses
                    .extend(PauseEvent::of(&f.mac_ctrl, ts_ns, d as u8));
                let key = MacKey {
                    mac: f.mac_ctrl.src_mac,
                    dir: d as u8,
                    _pad: 0,
                };
                let full = self.macs.len() >= self.max_macs;
                match self.macs.get_mut(&key) {
                    Some(c) => qp::account_mac_control(c, &f.mac_ctrl),
                    None if full => self.iface[d].mac_insert_failed += 1,
                    None => {
                        let mut c = PfcCounters::default();
                        qp::account_mac_control(&mut c, &f.mac_ctrl);
                        self.macs.insert(key, c);
                    }
                }
            }
            kind::ROCE => {
                let key = QpKey {
                    src_ip: f.src_ip,
                    dst_ip: f.dst_ip,
                    dest_qp: f.bth.dest_qp,
                    dir: d as u8,
                    _pad: [0; 3],
                };
                let full = self.qps.len() >= self.max_qps;
                let v = match self.qps.get_mut(&key) {
                    Some(v) => v,
                    None if full => {
                        self.iface[d].qp_insert_failed += 1;
                        self.iface[d].roce_untracked += 1;
                        return;
                    }
                    None => self.qps.entry(key).or_insert(QpValue::ZERO),
                };
                // SAFETY: `v` is a live &mut into the map; Plain ops, single thread.
                let out = unsafe { qp::update::<Plain>(v, &f, wire_len, ts_ns, &self.policy) };
                if out.psn == qp::PsnStep::Contended {
                    self.iface[d].psn_contended += 1;
                }
                if self.check_icrc {
                    match icrc::verify(bytes, &f) {
                        icrc::Verdict::Ok => v.icrc_ok += 1,
                        icrc::Verdict::Bad => v.icrc_bad += 1,
                        icrc::Verdict::Unverifiable => v.icrc_unverifiable += 1,
                    }
                }
                let mut bits = out.new_events;
                while bits != 0 {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    self.events.push(Event {
                        ts_ns,
                        key,
                        kind: b,
                        psn: f.bth.psn,
                        detail: match out.psn {
                            qp::PsnStep::Ahead(d) if b == qp::ev::PSN_GAP => (d - 1) as u32,
                            _ if b == qp::ev::NAK || b == qp::ev::RNR_NAK => f.aeth,
                            _ => 0,
                        },
                        opcode: f.bth.opcode,
                        dscp: f.dscp,
                        ecn: f.ecn,
                        pcp: f.pcp,
                    });
                }
            }
            _ => {}
        }
    }

    /// Events produced since the last call.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// PFC / PAUSE frames since the last call.
    pub fn take_pauses(&mut self) -> Vec<PauseEvent> {
        std::mem::take(&mut self.pauses)
    }

    /// Cumulative state now, in the same form the live collector reads from the kernel.
    pub fn snapshot(&self, iface: &str, time_ns: u64, link_speed_bps: Option<u64>) -> Snapshot {
        Snapshot {
            iface: iface.to_string(),
            time_ns,
            link_speed_bps,
            qps: self.qps.iter().map(|(k, v)| (*k, *v)).collect(),
            iface_stats: self.iface,
            macs: self.macs.iter().map(|(k, v)| (*k, *v)).collect(),
        }
    }
}
