// The modify-QP probe's programs and maps, included by `qp_probe.rs` for the BPF target only.

use aya_ebpf::helpers::{
    bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns,
    bpf_probe_read_kernel,
};
use aya_ebpf::macros::{kprobe, kretprobe, map};
use aya_ebpf::maps::{HashMap, LruHashMap, PerCpuArray, RingBuf};
use aya_ebpf::programs::{ProbeContext, RetProbeContext};
use observer_common::qp_setup::{
    QpSetupKey, QpSetupOffsets, QpSetupRecord, QpSetupStash, RING_BYTES, STASH_ENTRIES,
    TABLE_ENTRIES, counter, mask,
};

/// Kernel field offsets, set at load from BTF (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static QP_OFFSETS: QpSetupOffsets = QpSetupOffsets {
    enabled: 0,
    qp_device: 0,
    qp_num: 0,
    qp_type: 0,
    device_index: 0,
    attr_qp_state: 0,
    attr_path_mtu: 0,
    attr_rq_psn: 0,
    attr_sq_psn: 0,
    attr_dest_qp_num: 0,
    attr_timeout: 0,
    attr_retry_cnt: 0,
    attr_rnr_retry: 0,
    av_dgid: 0,
    av_flow_label: 0,
    av_sgid_index: 0,
    av_hop_limit: 0,
    av_traffic_class: 0,
    av_sl: 0,
    av_type: 0,
};

/// (qp, attr, mask) of the modify in flight on each thread, keyed by pid_tgid.
#[map]
static QP_SETUP_STASH: HashMap<u64, QpSetupStash> = HashMap::with_max_entries(STASH_ENTRIES, 0);

/// Every modify-QP, as it returns.
#[map]
static QP_SETUP_EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// Each QP's state merged over its modifies.
#[map]
static QP_SETUP_TABLE: LruHashMap<QpSetupKey, QpSetupRecord> =
    LruHashMap::with_max_entries(TABLE_ENTRIES, 0);

/// `observer_common::qp_setup::counter`.
#[map]
static QP_SETUP_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::N, 0);

#[inline(always)]
fn count(i: u32) {
    if let Some(p) = QP_SETUP_COUNTERS.get_ptr_mut(i) {
        // SAFETY: this CPU's slot of a per-CPU array; programs do not nest on one CPU here.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
fn off(f: &u32) -> u64 {
    // SAFETY: a field of the read-only global; volatile so the load-time value is used.
    unsafe { core::ptr::read_volatile(f) as u64 }
}

#[inline(always)]
fn read<T>(base: u64, at: &u32) -> Result<T, i32> {
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one is an error, not a fault.
    unsafe { bpf_probe_read_kernel((base + off(at)) as *const T) }
}

#[kprobe]
pub fn qp_modify_entry(ctx: ProbeContext) -> u32 {
    if off(&QP_OFFSETS.enabled) == 0 {
        return 0;
    }
    let (Some(qp), Some(attr), Some(m)) = (ctx.arg::<u64>(0), ctx.arg::<u64>(1), ctx.arg::<u64>(2))
    else {
        return 0;
    };
    let stash = QpSetupStash {
        qp,
        attr,
        attr_mask: m as u32,
        _pad: 0,
    };
    let tid = bpf_get_current_pid_tgid();
    if QP_SETUP_STASH.insert(&tid, &stash, 0).is_err() {
        count(counter::STASH_FULL);
    }
    0
}

#[kretprobe]
pub fn qp_modify_return(ctx: RetProbeContext) -> u32 {
    if off(&QP_OFFSETS.enabled) == 0 {
        return 0;
    }
    let tid = bpf_get_current_pid_tgid();
    let Some(s) = (unsafe { QP_SETUP_STASH.get(&tid) }).copied() else {
        count(counter::NO_STASH);
        return 0;
    };
    let _ = QP_SETUP_STASH.remove(&tid);
    let ret: i32 = ctx.ret::<i64>() as i32;
    if record(&s, ret, tid).is_err() {
        count(counter::READ_FAILED);
    }
    0
}

#[inline(always)]
fn record(s: &QpSetupStash, ret: i32, tid: u64) -> Result<(), i32> {
    let o = &QP_OFFSETS;
    let dev: u64 = read(s.qp, &o.qp_device)?;
    let mut r = QpSetupRecord {
        ktime_ns: unsafe { bpf_ktime_get_ns() },
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        pid_tgid: tid,
        dev_index: read(dev, &o.device_index)?,
        qp_num: read(s.qp, &o.qp_num)?,
        qp_type: read(s.qp, &o.qp_type)?,
        attr_mask: s.attr_mask,
        ret,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
        ..Default::default()
    };
    if ret != 0 {
        count(counter::FAILED_MODIFY);
        emit(&r);
        return Ok(());
    }
    let m = s.attr_mask;
    let a = s.attr;
    r.fields = m & mask::RECORDED;
    if m & mask::STATE != 0 {
        r.qp_state = read(a, &o.attr_qp_state)?;
    }
    if m & mask::PATH_MTU != 0 {
        r.path_mtu = read::<u32>(a, &o.attr_path_mtu)? as u8;
    }
    if m & mask::TIMEOUT != 0 {
        r.timeout = read(a, &o.attr_timeout)?;
    }
    if m & mask::RETRY_CNT != 0 {
        r.retry_cnt = read(a, &o.attr_retry_cnt)?;
    }
    if m & mask::RNR_RETRY != 0 {
        r.rnr_retry = read(a, &o.attr_rnr_retry)?;
    }
    if m & mask::RQ_PSN != 0 {
        r.rq_psn = read(a, &o.attr_rq_psn)?;
    }
    if m & mask::SQ_PSN != 0 {
        r.sq_psn = read(a, &o.attr_sq_psn)?;
    }
    if m & mask::DEST_QPN != 0 {
        r.dest_qp_num = read(a, &o.attr_dest_qp_num)?;
    }
    if m & mask::AV != 0 {
        r.dgid = read(a, &o.av_dgid)?;
        r.flow_label = read(a, &o.av_flow_label)?;
        r.sgid_index = read(a, &o.av_sgid_index)?;
        r.hop_limit = read(a, &o.av_hop_limit)?;
        r.traffic_class = read(a, &o.av_traffic_class)?;
        r.sl = read(a, &o.av_sl)?;
        r.ah_type = read::<u32>(a, &o.av_type)? as u8;
    }
    count(counter::RECORDED);
    emit(&r);
    let key = r.key();
    match QP_SETUP_TABLE.get_ptr_mut(&key) {
        // SAFETY: the map's value; a concurrent modify of the same QP may interleave fields
        // (the driver serialises modifies of one QP, so it does not in practice).
        Some(p) => unsafe { (*p).merge(&r) },
        None => {
            if QP_SETUP_TABLE.insert(&key, &r, 0).is_err() {
                count(counter::TABLE_FULL);
            }
        }
    }
    Ok(())
}

#[inline(always)]
fn emit(r: &QpSetupRecord) {
    if QP_SETUP_EVENTS.output(r, 0).is_err() {
        count(counter::RING_FULL);
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
