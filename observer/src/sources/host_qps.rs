//! The host's QPs every interval, from the kernel's RDMA subsystem (the `qps` crate): read
//! once per interval for the whole host (not per interface), joined with what the modify-QP
//! probe saw of each QP's set-up (its address vector: traffic class, service level,
//! destination GID), completed from the driver's raw QP context where it has one (mlx5: the
//! set-up of QPs the probe did not see, the acknowledged PSN of QPs whose send PSN stood
//! still), compared with the previous read, and handed to the consumer with each QP's progress
//! and fate.

use qps::counters::CounterBinding;
use qps::inventory::{self, Inventory, Procfs, QpSource, SetUp};
use qps::raw::RawReader;

use super::kernel::qp_probe::QpProbe;
use super::{Consumer, ConsumerError};
use observer_common::qp_setup::{QpSetupRecord, mask};

/// The inventory read every interval, with the previous read for the interval's deltas.
pub struct QpFeed {
    source: Box<dyn QpSource + Send>,
    proc: Procfs,
    max_qps: usize,
    prev: Inventory,
    /// The previous read's time (the start of observation before the first read): the next
    /// rows' interval start.
    prev_time: Option<u64>,
    /// The modify-QP probe, when attached: each QP's set-up.
    probe: Option<QpProbe>,
    records: Vec<QpSetupRecord>,
    /// Counter binding (`--qp-counters`), when asked for: turned off again on drop where
    /// this run turned it on.
    counters: Option<CounterBinding>,
    /// The drivers' raw QP contexts (mlx5): set-ups the probe did not see, acknowledgement
    /// waits for `qp_stalled`.
    raw: RawReader,
    /// Reads that failed (logged, the next one spans both intervals).
    pub failed_reads: u64,
}

impl Drop for QpFeed {
    fn drop(&mut self) {
        if let Some(b) = &mut self.counters {
            b.restore(&mut *self.source);
        }
    }
}

impl QpFeed {
    pub fn new(source: Box<dyn QpSource + Send>, proc: Procfs, max_qps: usize) -> QpFeed {
        QpFeed {
            source,
            proc,
            max_qps,
            prev: Inventory::default(),
            prev_time: None,
            probe: None,
            records: Vec::new(),
            counters: None,
            raw: RawReader::default(),
            failed_reads: 0,
        }
    }

    /// Turns on counter binding grouped by `mask` (`qps::counters::mask`) on every port of
    /// the host's RDMA devices where it is off; returns one start-up line per port.
    pub fn enable_counters(&mut self, mask: u32) -> Vec<String> {
        let devices = match self.source.devices() {
            Ok(d) => d,
            Err(e) => {
                return vec![format!(
                    "reduced: no per-QP counters (listing the RDMA devices failed: {})",
                    contract::error::chain(&e)
                )];
            }
        };
        let b = CounterBinding::enable(&mut *self.source, &devices, mask);
        let lines = b.describe();
        self.counters = Some(b);
        lines
    }

    /// Joins each QP with what `probe` saw of its set-up.
    pub fn with_probe(mut self, probe: QpProbe) -> QpFeed {
        self.probe = Some(probe);
        self
    }

    /// Observation starts at `t_ns`: the first interval's start.
    pub fn begin(&mut self, t_ns: u64) {
        self.prev_time.get_or_insert(t_ns);
    }

    /// Reads the inventory and hands it, with every QP's progress since the previous read and
    /// the fates (a QP already in ERR at the first read is a fate too), to `out`.
    pub fn read_into(&mut self, out: &mut dyn Consumer) -> Result<(), ConsumerError> {
        let mut inv = match inventory::read(&mut *self.source, &self.proc, self.max_qps) {
            Ok(i) => i,
            Err(e) => {
                self.failed_reads += 1;
                tracing::warn!(error = %contract::error::chain(&e), "reading the host's QPs failed; retrying next interval");
                return Ok(());
            }
        };
        if let Some(p) = &mut self.probe {
            self.records.clear();
            p.drain(&mut self.records);
            for r in &mut inv.qps {
                r.setup = p.get(r.dev_index, r.lqpn).and_then(|s| set_up(s, r.pid));
            }
            // QPs destroyed since the last read: their number may be re-used by a new QP.
            for gone in self
                .prev
                .qps
                .iter()
                .filter(|q| inv.qps.binary_search_by_key(&q.key(), |r| r.key()).is_err())
            {
                p.forget(gone.dev_index, gone.lqpn);
            }
        }
        self.raw.apply(&mut *self.source, &mut inv, &self.prev);
        inv.read_tc_overrides(&mut *self.source);
        if let Some(b) = &mut self.counters {
            inv.counters = Some(b.read_all(&mut *self.source, &self.proc));
        }
        let (progress, fates) = qps::compare(&self.prev, &inv);
        let start = self.prev_time.replace(inv.time_ns).unwrap_or(inv.time_ns);
        out.qps(start, &inv, &progress, &fates)?;
        self.prev = inv;
        Ok(())
    }
}

/// The set-up of a QP from the probe's merged record, when it holds an address vector and
/// belongs to the QP's creator (a QP number re-used by another process is not this QP's).
fn set_up(s: &QpSetupRecord, pid: Option<u32>) -> Option<SetUp> {
    if s.fields & mask::AV == 0 {
        return None;
    }
    if let Some(pid) = pid
        && (s.pid_tgid >> 32) as u32 != pid
    {
        return None;
    }
    Some(SetUp {
        traffic_class: s.traffic_class,
        sl: s.sl,
        dgid: s.dgid,
        path_mtu: if s.fields & mask::PATH_MTU != 0 {
            s.path_mtu
        } else {
            0
        },
        timeout: s.timeout,
        retry_cnt: s.retry_cnt,
        rnr_retry: s.rnr_retry,
        source: qps::SetUpSource::Probe,
    })
}
