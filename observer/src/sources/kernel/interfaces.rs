//! The live source: every attached interface, its events drained when polled, a snapshot of
//! its maps each interval, and idle keys evicted when its per-QP table is nearly full (their
//! final values go to the consumer, so nothing is lost).

use std::time::Duration;

use observer_common::maps::{Event, PauseEvent, Sample};

use super::{LiveIface, LiveOptions, SamplerCounts, current_ifindex};
use crate::sinks::evidence::LiveEvidence;
use crate::sources::host_qps::QpFeed;
use crate::sources::paced::{ConsumerFailed, Polled};
use crate::sources::{Consumer, ConsumerError};
use nic::{NicReader, NicSample, interval_between};

/// One attached interface.
pub struct Observed {
    pub name: String,
    /// How it was attached: the same again when an interface of this name comes back.
    pub opts: LiveOptions,
    /// Its index when attached; `None` while it is gone.
    pub ifindex: Option<u32>,
    /// Link speed for PFC pause seconds (the interface's, or `--link-speed`).
    pub link_speed_bps: Option<u64>,
    pub iface: LiveIface,
    /// The NIC's own counters and configuration (`None` with `--no-nic`).
    pub nic: Option<NicFeed>,
    /// The live sampler's counts at the last read (`--evidence`).
    pub sampler_seen: SamplerCounts,
}

impl Observed {
    /// Whether the interface is there to be read: a deleted interface is said gone (once), and
    /// one of the same name that comes back (a new index) is attached afresh and said restarted.
    fn present(&mut self, out: &mut dyn Consumer, t_ns: u64) -> bool {
        let now = current_ifindex(&self.name);
        if now.is_some() && now == self.ifindex {
            return true;
        }
        if now.is_none() {
            if self.ifindex.take().is_some() {
                tracing::error!(iface = %self.name, "the observed interface is gone; waiting for it to come back");
                out.iface_gone(&self.name, t_ns);
            }
            return false;
        }
        // Back (or re-created while we were not looking): the old programs went with the old
        // device; attach the same way again.
        if self.ifindex.is_some() {
            out.iface_gone(&self.name, t_ns);
        }
        match LiveIface::attach(&self.opts) {
            Ok(l) => {
                tracing::warn!(iface = %self.name, ingress = %l.attached().ingress, "the interface is back; attached again");
                self.ifindex = Some(l.attached().ifindex);
                self.iface = l;
                // a fresh object: its sampler counts start again
                self.sampler_seen = SamplerCounts::default();
                out.iface_restarted(&self.name, t_ns);
                true
            }
            Err(e) => {
                self.ifindex = None;
                tracing::warn!(iface = %self.name, error = %contract::error::chain(&e), "the interface is back but attaching failed; retrying next interval");
                false
            }
        }
    }
}

/// A NIC read every interval, with its previous sample for the interval's deltas.
pub struct NicFeed {
    pub reader: Box<dyn NicReader>,
    prev: Option<NicSample>,
}

impl NicFeed {
    pub fn new(reader: Box<dyn NicReader>) -> NicFeed {
        NicFeed { reader, prev: None }
    }

    /// Reads a sample and hands it, with the interval since the previous one, to `out`. A read
    /// that fails is logged and skipped (the next interval then spans both).
    pub fn read_into(&mut self, iface: &str, out: &mut dyn Consumer) -> Result<(), ConsumerError> {
        let s = match self.reader.read() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(iface, error = %contract::error::chain(&e), "reading the NIC's counters failed; retrying next interval");
                return Ok(());
            }
        };
        let counters = self.prev.as_ref().map(|p| interval_between(p, &s));
        out.nic(iface, &s, counters.as_ref())?;
        self.prev = Some(s);
        Ok(())
    }
}

/// Every attached interface of the live command.
pub struct KernelSource {
    pub ifaces: Vec<Observed>,
    /// The per-QP table's size: eviction starts at 90% of it.
    pub max_qps: u32,
    /// Keys idle longer than this may be evicted from a nearly full table.
    pub idle_evict: Duration,
    /// The host's QPs from the RDMA subsystem, read once per interval (`None` with
    /// `--no-host-qps` or without an RDMA subsystem).
    pub host_qps: Option<QpFeed>,
    evbuf: Vec<Event>,
    pausebuf: Vec<PauseEvent>,
    /// The evidence capture (`--evidence`), fed by every interface's samples.
    pub evidence: Option<LiveEvidence>,
    samplebuf: Vec<Sample>,
}

impl KernelSource {
    pub fn new(ifaces: Vec<Observed>, max_qps: u32, idle_evict: Duration) -> KernelSource {
        KernelSource {
            ifaces,
            max_qps,
            idle_evict,
            host_qps: None,
            evbuf: Vec::new(),
            pausebuf: Vec::new(),
            evidence: None,
            samplebuf: Vec::new(),
        }
    }

    /// Reads the host's QPs every interval too.
    pub fn with_host_qps(mut self, feed: QpFeed) -> KernelSource {
        self.host_qps = Some(feed);
        self
    }

    fn drain(&mut self, i: usize, out: &mut dyn Consumer) -> Result<(), ConsumerError> {
        self.evbuf.clear();
        let o = &mut self.ifaces[i];
        if o.iface.drain_events(&mut self.evbuf) > 0 {
            out.events(&o.name, &self.evbuf)?;
        }
        self.pausebuf.clear();
        if o.iface.drain_pauses(&mut self.pausebuf) > 0 {
            out.pauses(&o.name, &self.pausebuf)?;
        }
        if let Some(ev) = self.evidence.as_mut() {
            self.samplebuf.clear();
            if o.iface.drain_samples(&mut self.samplebuf) > 0 {
                ev.offer(&o.name, &self.samplebuf);
            }
        }
        Ok(())
    }

    /// Adds what interface `i`'s sampler left out since the last call to the evidence counts.
    fn sampler_counts(&mut self, i: usize) {
        let Some(ev) = self.evidence.as_mut() else {
            return;
        };
        let o = &mut self.ifaces[i];
        match o.iface.sampler_counts() {
            Ok(c) => {
                let prev = o.sampler_seen;
                ev.left_out_in_kernel(
                    c.over_rate.saturating_sub(prev.over_rate),
                    c.lost.saturating_sub(prev.lost),
                );
                o.sampler_seen = c;
            }
            Err(e) => {
                tracing::warn!(iface = %o.name, error = %contract::error::chain(&e), "reading the sampler's counts failed; retrying next interval")
            }
        }
    }

    /// The evidence capture, its last samples taken and closed (the end of the run): its path
    /// and statistics, or the first error writing it.
    pub fn finish_evidence(
        &mut self,
    ) -> Option<(
        std::path::PathBuf,
        Result<crate::sinks::evidence::EvidenceStats, crate::sinks::evidence::EvidenceError>,
    )> {
        self.evidence.as_ref()?;
        for i in 0..self.ifaces.len() {
            if self.ifaces[i].ifindex.is_none() {
                continue;
            }
            self.samplebuf.clear();
            let o = &mut self.ifaces[i];
            if o.iface.drain_samples(&mut self.samplebuf) > 0
                && let Some(ev) = self.evidence.as_mut()
            {
                ev.offer(&o.name, &self.samplebuf);
            }
            self.sampler_counts(i);
        }
        self.evidence.take().map(LiveEvidence::finish)
    }

    /// A nearly full table: evict idle keys, their final values to the consumer.
    fn evict_idle(&mut self, i: usize, out: &mut dyn Consumer, t_ns: u64, keys: usize) {
        if (keys as u64) * 10 < self.max_qps as u64 * 9 {
            return;
        }
        let o = &mut self.ifaces[i];
        let idle_ns = self.idle_evict.as_nanos() as u64;
        let idle = out.idle_keys(&o.name, t_ns, idle_ns, self.max_qps as usize / 10);
        if idle.is_empty() {
            return;
        }
        match o.iface.evict(&idle) {
            Ok(finals) => {
                tracing::info!(iface = %o.name, keys = finals.len(), "evicted idle QP keys from a nearly full map");
                out.evicted(&o.name, &finals);
            }
            Err(e) => {
                tracing::warn!(iface = %o.name, error = %contract::error::chain(&e), "eviction failed")
            }
        }
    }
}

impl Polled for KernelSource {
    type Error = ConsumerFailed;

    fn begin(&mut self, out: &mut dyn Consumer, t0_ns: u64) {
        // The live source already converts packet times to UNIX ns (clock offset 0).
        for o in &mut self.ifaces {
            out.begin(&o.name, t0_ns, o.link_speed_bps);
            // The NIC's first sample: its configuration is checked at once.
            if let Some(n) = &mut o.nic
                && let Err(e) = n.read_into(&o.name, out)
            {
                tracing::error!(iface = %o.name, error = %contract::error::chain(&*e), "the pipeline failed on the NIC's first sample");
            }
        }
        if let Some(q) = &mut self.host_qps {
            q.begin(t0_ns);
        }
    }

    fn poll_events(&mut self, out: &mut dyn Consumer) -> Result<(), ConsumerFailed> {
        for i in 0..self.ifaces.len() {
            self.drain(i, out).map_err(ConsumerFailed)?;
        }
        Ok(())
    }

    fn interval(&mut self, out: &mut dyn Consumer, t_ns: u64) -> Result<(), ConsumerFailed> {
        for i in 0..self.ifaces.len() {
            if !self.ifaces[i].present(out, t_ns) {
                continue;
            }
            let o = &mut self.ifaces[i];
            let mut snap = match o.iface.snapshot(t_ns) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(iface = %o.name, error = %contract::error::chain(&e), "reading the maps failed; retrying next interval");
                    continue;
                }
            };
            snap.iface = o.name.clone();
            if snap.link_speed_bps.is_none() {
                snap.link_speed_bps = o.link_speed_bps;
            }
            // Events first: a first occurrence counted in this snapshot was put in the ring
            // buffer by the same program run, so it is there by now and alerts as an event
            // (the interval delta then leaves it out; the hold-down counts it once in either
            // order).
            self.drain(i, out).map_err(ConsumerFailed)?;
            let o = &mut self.ifaces[i];
            if let Some(n) = &mut o.nic {
                n.read_into(&o.name, out).map_err(ConsumerFailed)?;
            }
            out.snapshot(&snap).map_err(ConsumerFailed)?;
            let keys = snap.qps.len();
            // the next read updates these entries in place
            self.ifaces[i].iface.recycle(snap);
            self.evict_idle(i, out, t_ns, keys);
            self.sampler_counts(i);
        }
        if let Some(ev) = self.evidence.as_mut() {
            ev.flush();
        }
        if let Some(q) = &mut self.host_qps {
            q.read_into(out).map_err(ConsumerFailed)?;
        }
        Ok(())
    }
}
