//! The host's QPs every interval, from the kernel's RDMA subsystem (the `qps` crate): read
//! once per interval for the whole host (not per interface), compared with the previous read,
//! and handed to the consumer with each QP's progress and fate.

use qps::inventory::{self, Inventory, Procfs, QpSource};

use super::{Consumer, ConsumerError};

/// The inventory read every interval, with the previous read for the interval's deltas.
pub struct QpFeed {
    source: Box<dyn QpSource + Send>,
    proc: Procfs,
    max_qps: usize,
    prev: Inventory,
    /// The previous read's time (the start of observation before the first read): the next
    /// rows' interval start.
    prev_time: Option<u64>,
    /// Reads that failed (logged, the next one spans both intervals).
    pub failed_reads: u64,
}

impl QpFeed {
    pub fn new(source: Box<dyn QpSource + Send>, proc: Procfs, max_qps: usize) -> QpFeed {
        QpFeed {
            source,
            proc,
            max_qps,
            prev: Inventory::default(),
            prev_time: None,
            failed_reads: 0,
        }
    }

    /// Observation starts at `t_ns`: the first interval's start.
    pub fn begin(&mut self, t_ns: u64) {
        self.prev_time.get_or_insert(t_ns);
    }

    /// Reads the inventory and hands it, with every QP's progress since the previous read and
    /// the fates (a QP already in ERR at the first read is a fate too), to `out`.
    pub fn read_into(&mut self, out: &mut dyn Consumer) -> Result<(), ConsumerError> {
        let inv = match inventory::read(&mut *self.source, &self.proc, self.max_qps) {
            Ok(i) => i,
            Err(e) => {
                self.failed_reads += 1;
                tracing::warn!(error = %contract::error::chain(&e), "reading the host's QPs failed; retrying next interval");
                return Ok(());
            }
        };
        let (progress, fates) = qps::compare(&self.prev, &inv);
        let start = self.prev_time.replace(inv.time_ns).unwrap_or(inv.time_ns);
        out.qps(start, &inv, &progress, &fates)?;
        self.prev = inv;
        Ok(())
    }
}
