//! The modify-QP probe's shared types (docs/qp-probe.md): the record of one verbs modify-QP as
//! the kprobe/kretprobe pair on ib_core's `_ib_modify_qp` sees it, the per-QP record merged
//! from successive modifies, the kernel-layout offsets the programs read at (found from BTF at
//! load time: aya-ebpf has no CO-RE) and the counters of everything the probe leaves out.
//!
//! All `#[repr(C)]`, naturally aligned, without implicit padding (the sizes are checked below),
//! so the eBPF programs and userspace share them byte for byte.

/// `enum ib_qp_attr_mask` (include/rdma/ib_verbs.h; the same on 6.1, 6.12 and 7.2).
pub mod mask {
    pub const STATE: u32 = 1 << 0;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const DEST_QPN: u32 = 1 << 20;
    /// The attributes a record carries (the others are not read).
    pub const RECORDED: u32 =
        STATE | AV | PATH_MTU | TIMEOUT | RETRY_CNT | RNR_RETRY | RQ_PSN | SQ_PSN | DEST_QPN;
}

/// `enum ib_qp_state`.
pub mod state {
    pub const RESET: u32 = 0;
    pub const INIT: u32 = 1;
    pub const RTR: u32 = 2;
    pub const RTS: u32 = 3;
    pub const SQD: u32 = 4;
    pub const SQE: u32 = 5;
    pub const ERR: u32 = 6;

    /// The verbs name of a state.
    pub fn name(s: u32) -> &'static str {
        match s {
            RESET => "RESET",
            INIT => "INIT",
            RTR => "RTR",
            RTS => "RTS",
            SQD => "SQD",
            SQE => "SQE",
            ERR => "ERR",
            _ => "?",
        }
    }
}

/// Indices of the probe's per-CPU counter array (`QP_SETUP_COUNTERS`).
pub mod counter {
    /// Successful modifies recorded (sent to the ring buffer or not).
    pub const RECORDED: u32 = 0;
    /// Records lost because the ring buffer was full.
    pub const RING_FULL: u32 = 1;
    /// Modifies not seen on return because the per-thread stash map was full at entry.
    pub const STASH_FULL: u32 = 2;
    /// Returns without a stash entry (entered before the probe was attached, or stash lost).
    pub const NO_STASH: u32 = 3;
    /// A kernel read (`bpf_probe_read_kernel`) failed: the modify is not recorded.
    pub const READ_FAILED: u32 = 4;
    /// Modifies the driver refused (return value not 0): sent without attributes, not merged.
    pub const FAILED_MODIFY: u32 = 5;
    /// The per-QP table (LRU) could not take a new QP.
    pub const TABLE_FULL: u32 = 6;
    /// Number of counters.
    pub const N: u32 = 8;
}

/// Maximum QPs in the kernel's per-QP table (LRU: the least recently modified QP goes first).
pub const TABLE_ENTRIES: u32 = 16384;
/// Maximum modify-QP calls in flight at once (one stash entry per thread between entry and
/// return).
pub const STASH_ENTRIES: u32 = 4096;
/// The ring buffer's size in bytes (a power of two, a multiple of the page size): 2,340 records.
pub const RING_BYTES: u32 = 256 * 1024;

/// Byte offsets of the kernel fields the programs read, from the running kernel's BTF.
/// Offsets starting with `av_` are from the `struct ib_qp_attr *` to fields nested in
/// `ah_attr` (`struct rdma_ah_attr`) and its `grh` (`struct ib_global_route`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpSetupOffsets {
    /// 1 when set from BTF; the programs do nothing while 0.
    pub enabled: u32,
    /// `ib_qp.device` (pointer).
    pub qp_device: u32,
    /// `ib_qp.qp_num` (u32).
    pub qp_num: u32,
    /// `ib_qp.qp_type` (enum, 4 bytes).
    pub qp_type: u32,
    /// `ib_device.index` (u32).
    pub device_index: u32,
    /// `ib_qp_attr` members.
    pub attr_qp_state: u32,
    pub attr_path_mtu: u32,
    pub attr_rq_psn: u32,
    pub attr_sq_psn: u32,
    pub attr_dest_qp_num: u32,
    pub attr_timeout: u32,
    pub attr_retry_cnt: u32,
    pub attr_rnr_retry: u32,
    /// `ah_attr.grh.dgid` (16 bytes).
    pub av_dgid: u32,
    /// `ah_attr.grh.flow_label` (u32).
    pub av_flow_label: u32,
    /// `ah_attr.grh.sgid_index` (u8).
    pub av_sgid_index: u32,
    /// `ah_attr.grh.hop_limit` (u8).
    pub av_hop_limit: u32,
    /// `ah_attr.grh.traffic_class` (u8).
    pub av_traffic_class: u32,
    /// `ah_attr.sl` (u8).
    pub av_sl: u32,
    /// `ah_attr.type` (enum rdma_ah_attr_type, 4 bytes).
    pub av_type: u32,
}

/// Key of the per-QP table: the RDMA device's index (`ib_device.index`, as in `rdma res show`
/// `ifindex`) and the QP number.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpSetupKey {
    pub dev_index: u32,
    pub qp_num: u32,
}

/// What the probe read at one stashed entry: the arguments of `_ib_modify_qp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct QpSetupStash {
    pub qp: u64,
    pub attr: u64,
    pub attr_mask: u32,
    pub _pad: u32,
}

/// One modify-QP (ring buffer) or one QP's merged state (per-QP table).
///
/// `fields` says which attribute groups hold values (bits of [`mask`]; the others are zero):
/// a record from the ring buffer has `fields = attr_mask & mask::RECORDED`; a merged one the
/// union over the QP's modifies since its last reset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpSetupRecord {
    /// CLOCK_MONOTONIC of the return (`bpf_ktime_get_ns`).
    pub ktime_ns: u64,
    /// The caller's cgroup v2 id (`bpf_get_current_cgroup_id`).
    pub cgroup_id: u64,
    /// `bpf_get_current_pid_tgid`: tgid (process id) in the high 32 bits, thread id low.
    pub pid_tgid: u64,
    pub dev_index: u32,
    pub qp_num: u32,
    /// `enum ib_qp_type` (2 RC, 3 UC, 4 UD, ...).
    pub qp_type: u32,
    /// The attribute mask of this (or the last merged) modify.
    pub attr_mask: u32,
    /// The return value of the modify (0: done; negative errno: refused).
    pub ret: i32,
    /// `enum ib_qp_state` after the modify ([`state`]), when `fields` has `STATE`.
    pub qp_state: u32,
    pub dest_qp_num: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub flow_label: u32,
    /// `enum ib_mtu` (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    /// `enum rdma_ah_attr_type` (1 IB, 2 RoCE, 3 OPA) when `fields` has `AV`.
    pub ah_type: u8,
    pub _pad: [u8; 3],
    pub dgid: [u8; 16],
    /// The caller's `comm` (NUL-padded).
    pub comm: [u8; 16],
    /// Which attribute groups hold values (bits of [`mask`]).
    pub fields: u32,
}

const _: () = assert!(core::mem::size_of::<QpSetupRecord>() == 112);
const _: () = assert!(core::mem::size_of::<QpSetupOffsets>() == 80);
const _: () = assert!(core::mem::size_of::<QpSetupStash>() == 24);

impl QpSetupRecord {
    pub fn key(&self) -> QpSetupKey {
        QpSetupKey {
            dev_index: self.dev_index,
            qp_num: self.qp_num,
        }
    }

    /// The calling process (tgid).
    pub fn tgid(&self) -> u32 {
        (self.pid_tgid >> 32) as u32
    }

    /// Merges a later successful modify of the same QP into this state: the caller, time and
    /// mask become the new one's; each attribute group the new one carries replaces the old
    /// (INIT→RTR brings the address vector, destination QP and RQ PSN; RTR→RTS the SQ PSN and
    /// retry settings; a move to ERR only the state). A move to RESET forgets everything
    /// else: the QP's next connection is a new one.
    #[inline(always)]
    pub fn merge(&mut self, new: &QpSetupRecord) {
        let f = new.fields;
        self.ktime_ns = new.ktime_ns;
        self.cgroup_id = new.cgroup_id;
        self.pid_tgid = new.pid_tgid;
        self.qp_type = new.qp_type;
        self.attr_mask = new.attr_mask;
        self.ret = new.ret;
        self.comm = new.comm;
        if f & mask::STATE != 0 && new.qp_state == state::RESET {
            let keep = (self.dev_index, self.qp_num);
            *self = *new;
            (self.dev_index, self.qp_num) = keep;
            return;
        }
        if f & mask::STATE != 0 {
            self.qp_state = new.qp_state;
        }
        if f & mask::AV != 0 {
            self.dgid = new.dgid;
            self.flow_label = new.flow_label;
            self.sgid_index = new.sgid_index;
            self.hop_limit = new.hop_limit;
            self.traffic_class = new.traffic_class;
            self.sl = new.sl;
            self.ah_type = new.ah_type;
        }
        if f & mask::PATH_MTU != 0 {
            self.path_mtu = new.path_mtu;
        }
        if f & mask::TIMEOUT != 0 {
            self.timeout = new.timeout;
        }
        if f & mask::RETRY_CNT != 0 {
            self.retry_cnt = new.retry_cnt;
        }
        if f & mask::RNR_RETRY != 0 {
            self.rnr_retry = new.rnr_retry;
        }
        if f & mask::RQ_PSN != 0 {
            self.rq_psn = new.rq_psn;
        }
        if f & mask::SQ_PSN != 0 {
            self.sq_psn = new.sq_psn;
        }
        if f & mask::DEST_QPN != 0 {
            self.dest_qp_num = new.dest_qp_num;
        }
        self.fields |= f;
    }
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: repr(C), plain integers, no padding (sizes asserted above).
    unsafe impl aya::Pod for QpSetupOffsets {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpSetupKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpSetupRecord {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpSetupStash {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(f: u32, st: u32) -> QpSetupRecord {
        QpSetupRecord {
            dev_index: 1,
            qp_num: 17,
            fields: f,
            attr_mask: f,
            qp_state: st,
            ..Default::default()
        }
    }

    #[test]
    fn merge_keeps_the_av_of_rtr_through_rts_and_err() {
        let mut s = rec(mask::STATE, state::INIT);
        let mut rtr = rec(
            mask::STATE | mask::AV | mask::DEST_QPN | mask::RQ_PSN,
            state::RTR,
        );
        rtr.traffic_class = 106;
        rtr.dest_qp_num = 18;
        rtr.rq_psn = 5;
        rtr.dgid[15] = 2;
        s.merge(&rtr);
        let mut rts = rec(mask::STATE | mask::SQ_PSN | mask::TIMEOUT, state::RTS);
        rts.sq_psn = 7;
        rts.timeout = 14;
        s.merge(&rts);
        assert_eq!(
            (s.qp_state, s.traffic_class, s.dest_qp_num),
            (state::RTS, 106, 18)
        );
        assert_eq!((s.rq_psn, s.sq_psn, s.timeout, s.dgid[15]), (5, 7, 14, 2));
        assert_eq!(s.attr_mask, rts.attr_mask);
        s.merge(&rec(mask::STATE, state::ERR));
        assert_eq!((s.qp_state, s.traffic_class), (state::ERR, 106));
        assert_ne!(s.fields & mask::AV, 0);
        s.merge(&rec(mask::STATE, state::RESET));
        assert_eq!(
            (s.qp_state, s.traffic_class, s.fields),
            (state::RESET, 0, mask::STATE)
        );
        assert_eq!(
            s.key(),
            QpSetupKey {
                dev_index: 1,
                qp_num: 17
            }
        );
    }
}
