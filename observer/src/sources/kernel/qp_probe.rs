//! The modify-QP probe (docs/qp-probe.md): every verbs modify-QP on this host (user verbs
//! through ib_uverbs and kernel ULPs) as ib_core's static `_ib_modify_qp` sees it, with the
//! QP's address vector, destination QP, PSNs and state, and the caller.
//!
//! - [`offsets`] reads the kernel's layout of `struct ib_qp`, `ib_device`, `ib_qp_attr`,
//!   `rdma_ah_attr` and `ib_global_route` from BTF (vmlinux's, with ib_core's module BTF split
//!   on top of it): aya-ebpf has no CO-RE, so the programs read at offsets passed in as a
//!   read-only global.
//! - [`QpProbe::attach`] loads the probe's own object (`observer-ebpf` bin `qp-probe`) and
//!   attaches a kprobe and a kretprobe to `_ib_modify_qp`, or, when that is not in kallsyms, to
//!   the exported `ib_modify_qp_with_udata` and `ib_modify_qp` (together the same calls).
//! - [`QpProbe::drain`] takes the ring buffer's records and merges them into a table keyed by
//!   (device index, QP number) holding each QP's latest address vector and state;
//!   [`QpProbe::kernel_table`] reads the kernel's own merged table (an LRU map), which holds
//!   what the ring buffer may have dropped; [`QpProbe::counters`] says what was left out.
//!
//! QPs set up before the probe was attached are not seen until their next modify; mlx5 DEVX
//! modifies (`mlx5dv_devx_qp_modify`) do not pass `_ib_modify_qp` and are never seen.

use std::collections::HashMap;
use std::path::Path;

use aya::maps::{HashMap as AyaHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{KProbe, ProgramError};
use aya::{Ebpf, EbpfLoader};
use observer_common::qp_setup::{QpSetupKey, QpSetupOffsets, QpSetupRecord, counter};

use super::kfunc::{Btf, KfuncError};

/// The probe's eBPF object, built by `observer/build.rs` (aya-build, bin `qp-probe`).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/qp-probe"));

/// The static function every modify-QP passes.
pub const INTERNAL_FN: &str = "_ib_modify_qp";
/// The exported entry points that call it (user verbs; kernel ULPs), the fallback.
pub const EXPORTED_FNS: [&str; 2] = ["ib_modify_qp_with_udata", "ib_modify_qp"];

/// Most records taken from the ring buffer by one [`QpProbe::drain`].
const MAX_DRAIN: usize = 65536;

#[derive(Debug, thiserror::Error)]
pub enum QpProbeError {
    /// The RDMA core module is not loaded: there is nothing to probe (and no BTF for it).
    #[error(
        "the ib_core module is not loaded (/sys/module/ib_core missing): no RDMA verbs to probe"
    )]
    IbCoreNotLoaded,
    /// A struct or member the probe reads is missing from the kernel's BTF (or has another
    /// size than the probe reads).
    #[error("the kernel's BTF has no {0} (the modify-QP probe cannot read that field)")]
    Missing(String),
    #[error("reading the kernel's BTF")]
    Btf(#[source] KfuncError),
    #[error("the modify-QP probe's eBPF object is empty (built with AYA_BUILD_SKIP=1)")]
    NoObject,
    #[error("neither {INTERNAL_FN} nor {} and {} are in /proc/kallsyms", EXPORTED_FNS[0], EXPORTED_FNS[1])]
    NoAttachPoint,
    #[error("reading /proc/kallsyms")]
    Kallsyms(#[source] std::io::Error),
    #[error("{what}")]
    Op {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl QpProbeError {
    fn op(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> QpProbeError {
        QpProbeError::Op {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// Where the probe is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachPoint {
    /// kprobe + kretprobe on `_ib_modify_qp`.
    Internal,
    /// kprobe + kretprobe on each of `ib_modify_qp_with_udata` and `ib_modify_qp`.
    Exported,
}

impl std::fmt::Display for AttachPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachPoint::Internal => write!(f, "{INTERNAL_FN}"),
            AttachPoint::Exported => write!(f, "{}+{}", EXPORTED_FNS[0], EXPORTED_FNS[1]),
        }
    }
}

/// The running kernel's offsets: vmlinux's BTF and, when it is there, ib_core's module BTF
/// over it. [`QpProbeError::IbCoreNotLoaded`] when ib_core is not loaded.
pub fn offsets() -> Result<QpSetupOffsets, QpProbeError> {
    if !Path::new("/sys/module/ib_core").exists() {
        return Err(QpProbeError::IbCoreNotLoaded);
    }
    let base = Btf::vmlinux().map_err(QpProbeError::Btf)?;
    let btf = if Path::new("/sys/kernel/btf/ib_core").exists() {
        Btf::module("ib_core", base).map_err(QpProbeError::Btf)?
    } else {
        // Kernels without module BTF (before 5.11) may still have the types in vmlinux's.
        base
    };
    offsets_from(&btf)
}

/// The offsets the programs read at, from `btf` (vmlinux's with ib_core's split on top).
pub fn offsets_from(btf: &Btf) -> Result<QpSetupOffsets, QpProbeError> {
    let strukt = |name: &str| {
        btf.struct_id(name)
            .ok_or_else(|| QpProbeError::Missing(format!("struct {name}")))
    };
    let (qp, dev, attr) = (
        strukt("ib_qp")?,
        strukt("ib_device")?,
        strukt("ib_qp_attr")?,
    );
    // Offset of `s.path` (nested members), which must be `size` bytes.
    let field = |id: u32, s: &str, path: &[&str], size: u32| {
        let name = format!("{s}.{}", path.join("."));
        match btf.member_path(id, path) {
            Some((off, sz)) if sz == size => Ok(off),
            Some((_, sz)) => Err(QpProbeError::Missing(format!(
                "{name} of {size} bytes (it has {sz})"
            ))),
            None => Err(QpProbeError::Missing(name)),
        }
    };
    let av = |path: &[&str], size: u32| {
        let mut p = vec!["ah_attr"];
        p.extend_from_slice(path);
        field(attr, "ib_qp_attr", &p, size)
    };
    Ok(QpSetupOffsets {
        enabled: 1,
        qp_device: field(qp, "ib_qp", &["device"], 8)?,
        qp_num: field(qp, "ib_qp", &["qp_num"], 4)?,
        qp_type: field(qp, "ib_qp", &["qp_type"], 4)?,
        device_index: field(dev, "ib_device", &["index"], 4)?,
        attr_qp_state: field(attr, "ib_qp_attr", &["qp_state"], 4)?,
        attr_path_mtu: field(attr, "ib_qp_attr", &["path_mtu"], 4)?,
        attr_rq_psn: field(attr, "ib_qp_attr", &["rq_psn"], 4)?,
        attr_sq_psn: field(attr, "ib_qp_attr", &["sq_psn"], 4)?,
        attr_dest_qp_num: field(attr, "ib_qp_attr", &["dest_qp_num"], 4)?,
        attr_timeout: field(attr, "ib_qp_attr", &["timeout"], 1)?,
        attr_retry_cnt: field(attr, "ib_qp_attr", &["retry_cnt"], 1)?,
        attr_rnr_retry: field(attr, "ib_qp_attr", &["rnr_retry"], 1)?,
        av_dgid: av(&["grh", "dgid"], 16)?,
        av_flow_label: av(&["grh", "flow_label"], 4)?,
        av_sgid_index: av(&["grh", "sgid_index"], 1)?,
        av_hop_limit: av(&["grh", "hop_limit"], 1)?,
        av_traffic_class: av(&["grh", "traffic_class"], 1)?,
        av_sl: av(&["sl"], 1)?,
        av_type: av(&["type"], 4)?,
    })
}

/// Where to attach on this kernel: `_ib_modify_qp` when kallsyms has it under that exact
/// name, else the exported pair when both are there.
pub fn attach_point() -> Result<AttachPoint, QpProbeError> {
    let syms = std::fs::read_to_string("/proc/kallsyms").map_err(QpProbeError::Kallsyms)?;
    attach_point_in(&syms)
}

fn attach_point_in(kallsyms: &str) -> Result<AttachPoint, QpProbeError> {
    let has = |name: &str| {
        kallsyms
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some(name))
    };
    if has(INTERNAL_FN) {
        Ok(AttachPoint::Internal)
    } else if EXPORTED_FNS.iter().all(|f| has(f)) {
        Ok(AttachPoint::Exported)
    } else {
        Err(QpProbeError::NoAttachPoint)
    }
}

/// What the probe left out, summed over CPUs (`observer_common::qp_setup::counter`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpProbeCounters {
    /// Successful modifies recorded.
    pub recorded: u64,
    /// Records the ring buffer had no room for (the kernel table still has them).
    pub ring_full: u64,
    /// Modifies not followed because the per-thread stash was full.
    pub stash_full: u64,
    /// Returns without a stash entry (in flight at attach, or stash lost).
    pub no_stash: u64,
    /// Modifies whose fields could not be read.
    pub read_failed: u64,
    /// Modifies the driver refused (sent with `ret`, not merged).
    pub failed_modify: u64,
    /// New QPs the kernel table could not take.
    pub table_full: u64,
}

/// The modify-QP probe, attached: its object, ring buffer and the table of QPs drained so far.
pub struct QpProbe {
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    point: AttachPoint,
    offsets: QpSetupOffsets,
    table: HashMap<QpSetupKey, QpSetupRecord, crate::sources::datapath::FastHash>,
    failed: u64,
}

impl QpProbe {
    /// Finds the offsets ([`offsets`]) and the attach point, loads the probe and attaches it.
    pub fn attach() -> Result<QpProbe, QpProbeError> {
        let offsets = offsets()?;
        let point = attach_point()?;
        QpProbe::attach_with(offsets, point)
    }

    /// Loads the probe with `offsets` and attaches it at `point`.
    pub fn attach_with(
        offsets: QpSetupOffsets,
        point: AttachPoint,
    ) -> Result<QpProbe, QpProbeError> {
        if OBJECT.is_empty() {
            return Err(QpProbeError::NoObject);
        }
        let mut ebpf = EbpfLoader::new()
            .override_global("QP_OFFSETS", &offsets, true)
            .load(OBJECT)
            .map_err(|e| QpProbeError::op("loading the modify-QP probe's object", e))?;
        let fns: &[&str] = match point {
            AttachPoint::Internal => &[INTERNAL_FN],
            AttachPoint::Exported => &EXPORTED_FNS,
        };
        for name in ["qp_modify_entry", "qp_modify_return"] {
            let prog: &mut KProbe = ebpf
                .program_mut(name)
                .ok_or_else(|| QpProbeError::op(format!("program {name}"), "not in the object"))?
                .try_into()
                .map_err(|e: ProgramError| QpProbeError::op(format!("program {name}"), e))?;
            prog.load()
                .map_err(|e| QpProbeError::op(format!("loading {name}"), e))?;
            for f in fns {
                prog.attach(f, 0)
                    .map_err(|e| QpProbeError::op(format!("attaching {name} to {f}"), e))?;
            }
        }
        let ring = RingBuf::try_from(
            ebpf.take_map("QP_SETUP_EVENTS")
                .ok_or_else(|| QpProbeError::op("map QP_SETUP_EVENTS", "not in the object"))?,
        )
        .map_err(|e| QpProbeError::op("map QP_SETUP_EVENTS", e))?;
        tracing::info!(attach = %point, device_index_off = offsets.device_index,
            qp_num_off = offsets.qp_num, "modify-QP probe attached");
        Ok(QpProbe {
            ebpf,
            ring,
            point,
            offsets,
            table: HashMap::default(),
            failed: 0,
        })
    }

    pub fn attach_point(&self) -> AttachPoint {
        self.point
    }

    /// The offsets the programs read at.
    pub fn offsets(&self) -> &QpSetupOffsets {
        &self.offsets
    }

    /// Takes the records waiting in the ring buffer (bounded per call), appends each to `out`
    /// and merges the successful ones into [`QpProbe::table`]. Returns how many were taken.
    pub fn drain(&mut self, out: &mut Vec<QpSetupRecord>) -> usize {
        let mut n = 0;
        for _ in 0..MAX_DRAIN {
            let Some(item) = self.ring.next() else {
                break;
            };
            if item.len() < size_of::<QpSetupRecord>() {
                tracing::warn!(
                    len = item.len(),
                    "short record in the modify-QP ring buffer"
                );
                continue;
            }
            // SAFETY: the record holds a `QpSetupRecord` written by the program (same
            // #[repr(C)] layout, every bit pattern valid); read_unaligned copes with alignment.
            let r = unsafe { std::ptr::read_unaligned(item.as_ptr() as *const QpSetupRecord) };
            n += 1;
            out.push(r);
            if r.ret != 0 {
                self.failed += 1;
                continue;
            }
            self.table
                .entry(r.key())
                .and_modify(|s| s.merge(&r))
                .or_insert(r);
        }
        n
    }

    /// Every QP seen through the ring buffer, with its merged state.
    pub fn table(&self) -> &HashMap<QpSetupKey, QpSetupRecord, crate::sources::datapath::FastHash> {
        &self.table
    }

    /// The merged state of one QP (device index as `ib_device.index`, `rdma res` `ifindex`).
    pub fn get(&self, dev_index: u32, qp_num: u32) -> Option<&QpSetupRecord> {
        self.table.get(&QpSetupKey { dev_index, qp_num })
    }

    /// Forgets a QP (destroyed, as the caller's inventory learnt).
    pub fn forget(&mut self, dev_index: u32, qp_num: u32) -> Option<QpSetupRecord> {
        self.table.remove(&QpSetupKey { dev_index, qp_num })
    }

    /// Refused modifies drained so far.
    pub fn failed_modifies(&self) -> u64 {
        self.failed
    }

    /// The kernel's own merged per-QP table (LRU, `qp_setup::TABLE_ENTRIES`): complete even
    /// when the ring buffer dropped records.
    pub fn kernel_table(&self) -> Result<Vec<(QpSetupKey, QpSetupRecord)>, QpProbeError> {
        let map = self
            .ebpf
            .map("QP_SETUP_TABLE")
            .ok_or_else(|| QpProbeError::op("map QP_SETUP_TABLE", "not in the object"))?;
        let t: AyaHashMap<&MapData, QpSetupKey, QpSetupRecord> =
            AyaHashMap::try_from(map).map_err(|e| QpProbeError::op("map QP_SETUP_TABLE", e))?;
        t.iter()
            .map(|r| r.map_err(|e| QpProbeError::op("reading QP_SETUP_TABLE", e)))
            .collect()
    }

    /// The counters of what was left out, summed over CPUs.
    pub fn counters(&self) -> Result<QpProbeCounters, QpProbeError> {
        let map = self
            .ebpf
            .map("QP_SETUP_COUNTERS")
            .ok_or_else(|| QpProbeError::op("map QP_SETUP_COUNTERS", "not in the object"))?;
        let a: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(map).map_err(|e| QpProbeError::op("map QP_SETUP_COUNTERS", e))?;
        let get = |i: u32| -> Result<u64, QpProbeError> {
            Ok(a.get(&i, 0)
                .map_err(|e| QpProbeError::op("reading QP_SETUP_COUNTERS", e))?
                .iter()
                .sum())
        };
        Ok(QpProbeCounters {
            recorded: get(counter::RECORDED)?,
            ring_full: get(counter::RING_FULL)?,
            stash_full: get(counter::STASH_FULL)?,
            no_stash: get(counter::NO_STASH)?,
            read_failed: get(counter::READ_FAILED)?,
            failed_modify: get(counter::FAILED_MODIFY)?,
            table_full: get(counter::TABLE_FULL)?,
        })
    }

    /// The ring buffer's fd, readable when records wait (for epoll / tokio `AsyncFd`).
    pub fn ring_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.ring.as_raw_fd()
    }

    /// The two programs' run counts and total run time in ns (kernel BPF statistics: zero
    /// unless `kernel.bpf_stats_enabled` is 1 or an `aya::sys::enable_stats` fd is held).
    pub fn run_stats(&self) -> Result<[(u64, u64); 2], QpProbeError> {
        let mut out = [(0, 0); 2];
        for (i, name) in ["qp_modify_entry", "qp_modify_return"].iter().enumerate() {
            let prog = self
                .ebpf
                .program(name)
                .ok_or_else(|| QpProbeError::op(format!("program {name}"), "not in the object"))?;
            let info = prog
                .info()
                .map_err(|e| QpProbeError::op(format!("program info of {name}"), e))?;
            out[i] = (info.run_count(), info.run_time().as_nanos() as u64);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attach_point_follows_kallsyms() {
        let internal = "ffffffffc0a01230 t _ib_modify_qp\t[ib_core]\n\
                        ffffffffc0a01990 T ib_modify_qp\t[ib_core]\n";
        assert_eq!(attach_point_in(internal).unwrap(), AttachPoint::Internal);
        let exported = "ffffffffc0a01230 t _ib_modify_qp.isra.0\t[ib_core]\n\
                        ffffffffc0a01990 T ib_modify_qp\t[ib_core]\n\
                        ffffffffc0a01a10 T ib_modify_qp_with_udata\t[ib_core]\n";
        assert_eq!(attach_point_in(exported).unwrap(), AttachPoint::Exported);
        let none = "ffffffffc0a01990 T ib_modify_qp\t[ib_core]\n";
        let e = attach_point_in(none).unwrap_err();
        assert!(e.to_string().contains("ib_modify_qp_with_udata"), "{e}");
    }

    #[test]
    fn offsets_name_what_is_missing() {
        // vmlinux's BTF of this host: no ib_core types unless the module is loaded.
        let Ok(btf) = Btf::vmlinux() else {
            eprintln!("SKIP: no vmlinux BTF");
            return;
        };
        match offsets_from(&btf) {
            Ok(o) => {
                // Layout independent of the kernel version (6.1, 6.12, 7.2).
                assert_eq!((o.av_dgid, o.av_traffic_class, o.av_sl), (72, 94, 96));
                assert_eq!((o.attr_dest_qp_num, o.attr_timeout), (28, 192));
            }
            Err(e) => assert!(
                e.to_string().contains("struct ib_qp") || e.to_string().contains("ib_device"),
                "{e}"
            ),
        }
        if !Path::new("/sys/module/ib_core").exists() {
            assert!(matches!(offsets(), Err(QpProbeError::IbCoreNotLoaded)));
        }
    }
}
