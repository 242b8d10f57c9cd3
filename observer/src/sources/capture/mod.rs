//! `roce-observe replay FILE... | -`: pcap/pcapng files and streams through the userspace
//! datapath (the same per-frame logic as the eBPF programs) and the collector.
//!
//! - [`reader`]: streaming pcap/pcapng reading with byte offsets (damage is reported where it is).
//! - [`link`]: Ethernet, Linux cooked (SLL, SLL2) to the parser's Ethernet view.
//! - [`Replay`]: one [`Datapath`] per capture interface, a [`Snapshot`] every `interval` of
//!   CAPTURE time and at the end of each input, events as they occur, all handed to an
//!   [`Output`] (the collector).
//! - [`table`]: the end-of-run summary on stdout.

pub mod link_layer;
pub mod pcap_reader;

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::time::Instant;

use observer_common::maps::{Policy, dir};

use crate::sources::Snapshot;
use crate::sources::datapath::Datapath;
use crate::sources::{Consumer, ConsumerError, Source, Stop};
use contract::policy::PolicyError;
use link_layer::{LinkType, linktype_name};
use pcap_reader::Item;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{file}: cannot open")]
    Open {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: read error at byte offset {offset}")]
    Io {
        file: String,
        offset: u64,
        source: std::io::Error,
    },
    #[error(
        "{file}: corrupt or truncated at byte offset {offset}: {what} (everything before it was processed)"
    )]
    Corrupt {
        file: String,
        offset: u64,
        what: String,
    },
    #[error(
        "{file}: unsupported link type {linktype} ({}) on capture interface {iface}; supported: 1 (Ethernet), 113 (Linux SLL), 276 (Linux SLL2)",
        linktype_name(*linktype)
    )]
    UnsupportedLinkType {
        file: String,
        linktype: u32,
        iface: usize,
    },
    #[error("the pipeline failed")]
    Consumer(#[source] ConsumerError),
    /// The stop was set (SIGINT, SIGTERM, SIGHUP): reading ended early, everything read so far
    /// was accounted.
    #[error("interrupted")]
    Interrupted,
    #[error("policy")]
    Policy(#[source] PolicyError),
    #[error(transparent)]
    Evidence(#[from] crate::sinks::evidence::EvidenceError),
}

#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Policy for the per-QP events (kernel form).
    pub policy: Policy,
    pub max_qps: usize,
    /// Snapshot interval in capture nanoseconds.
    pub interval_ns: u64,
    pub link_speed_bps: Option<u64>,
    pub check_icrc: bool,
    /// Measure passive per-QP latency (docs/latency.md).
    pub latency: bool,
    /// Draw a progress bar on stderr (files only).
    pub progress: bool,
    /// Stop reading when set (checked every frame, and when a read is interrupted).
    pub stop: Option<Stop>,
    /// Waited for every [`PACE_FRAMES`] frames: a reader ahead of the outputs reads on only
    /// when it may ([`crate::sources::offload::Pace`]).
    pub pace: Option<crate::sources::offload::Pacer>,
}

/// Frames between two calls of [`ReplayOptions::pace`].
const PACE_FRAMES: u64 = 1024;

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            policy: Policy::NONE,
            max_qps: 65536,
            interval_ns: 1_000_000_000,
            link_speed_bps: None,
            check_icrc: true,
            latency: false,
            progress: false,
            stop: None,
            pace: None,
        }
    }
}

/// Latency outcomes handed over at a time (and before each snapshot).
const LATENCY_BATCH: usize = 4096;

struct Dp {
    name: String,
    dp: Datapath,
    last_ns: u64,
    /// The output was told when this interface's first frame arrived.
    begun: bool,
    /// The input (number, see [`Replay::inputs`]) that last fed this datapath.
    fed_by: u64,
    /// Frames since the last snapshot: an interface without is quiet at the next boundary.
    unsnapped: bool,
    /// Time of the last snapshot handed over.
    last_emit_ns: u64,
}

/// A capture interface the input declared. Its datapath is made at its first packet: a
/// declared interface without packets costs this entry and nothing else (no datapath, no
/// snapshot, no output row).
struct Declared {
    /// The datapath's name (`stem`, `stem:if_name`, ...).
    name: String,
    link: LinkType,
    /// The datapath, once the interface has had a packet.
    dp: Option<usize>,
}

/// The state of one input while it is read.
struct Feed {
    stats: InputStats,
    /// Reader interface index -> its datapath (once it has a packet) and link type.
    ifmap: Vec<Declared>,
    /// Datapaths this input has fed (snapshotted at its interval boundaries).
    used: Vec<usize>,
    /// Link-layer conversion buffer.
    scratch: Vec<u8>,
    interval: u64,
    next_boundary: Option<u64>,
    last_ts: u64,
    progress: Option<Progress>,
}

/// Totals of one input.
#[derive(Clone, Debug, Default)]
pub struct InputStats {
    /// Reading stopped early (the stop was set); everything read was accounted.
    pub interrupted: bool,
    pub frames: u64,
    pub bytes_read: u64,
    pub snapshots: u64,
}

/// The replay engine: inputs in order, one [`Datapath`] per capture interface name.
pub struct Replay<'o> {
    opts: ReplayOptions,
    dps: Vec<Dp>,
    by_name: HashMap<String, usize>,
    out: &'o mut dyn Consumer,
    /// Inputs begun so far (numbers the current one, for [`Dp::fed_by`]).
    inputs: u64,
    /// First-occurrence events by kind name (for the summary when there is no collector).
    pub event_counts: HashMap<&'static str, u64>,
    pub frames: u64,
    /// Where the frames that broke a rule are written (`replay --evidence`), when asked.
    pub evidence: Option<crate::sinks::evidence::Evidence>,
    /// Whether the end of the next input ends the observation: latency measurements still
    /// open then are counted open (a later file of the same capture could still answer them).
    pub close_latency_at_end: bool,
}

impl<'o> Replay<'o> {
    pub fn new(opts: ReplayOptions, out: &'o mut dyn Consumer) -> Replay<'o> {
        Replay {
            opts,
            dps: Vec::new(),
            by_name: HashMap::new(),
            out,
            inputs: 0,
            event_counts: HashMap::new(),
            frames: 0,
            evidence: None,
            close_latency_at_end: true,
        }
    }

    fn dp_for(&mut self, name: String) -> usize {
        if let Some(&i) = self.by_name.get(&name) {
            return i;
        }
        let mut dp = Datapath::new(self.opts.policy, self.opts.max_qps);
        dp.check_icrc = self.opts.check_icrc;
        if self.opts.latency {
            dp = dp.with_latency(observer_common::latency::DEFAULT_TIMEOUT_NS);
        }
        dp.offenses = self.evidence.is_some();
        self.dps.push(Dp {
            name: name.clone(),
            dp,
            last_ns: 0,
            begun: false,
            fed_by: 0,
            unsnapped: false,
            last_emit_ns: 0,
        });
        self.by_name.insert(name, self.dps.len() - 1);
        self.dps.len() - 1
    }

    /// A snapshot of each of the input's interfaces `idxs` at `time_ns`, then the interval
    /// is done (the interfaces of one input are compared with each other at its end).
    fn emit(&mut self, idxs: &[usize], time_ns: u64) -> Result<u64, ReplayError> {
        let mut n = 0;
        // The longest pause one frame asks for (65,535 quanta of 512 bit times) at the link
        // speed: a pause running past the last snapshot still accrues paused time.
        let max_pause_ns = self
            .opts
            .link_speed_bps
            .filter(|&b| b > 0)
            .map_or(0, |b| (65_535u128 * 512 * 1_000_000_000 / b as u128) as u64);
        for &i in idxs {
            // the interval's latency outcomes before its snapshot
            self.hand_over_latency(i)?;
            let d = &mut self.dps[i];
            // Cost follows active interfaces: one without a frame since its last snapshot (and
            // no pause running past it) has nothing new; its interval is skipped, not written
            // as a row of zeros (a capture of 1,000 interfaces with one packet each once wrote
            // half a million rows).
            if !d.unsnapped && d.last_ns.saturating_add(max_pause_ns) <= d.last_emit_ns {
                self.out.quiet(&d.name, time_ns);
                continue;
            }
            d.unsnapped = false;
            d.last_emit_ns = time_ns;
            // The values are lent to the consumer, not copied.
            let s =
                d.dp.lend_snapshot(&d.name, time_ns, self.opts.link_speed_bps);
            let r = self.out.snapshot(&s);
            self.dps[i].dp.restore(s);
            r.map_err(ReplayError::Consumer)?;
            n += 1;
        }
        if n > 0 {
            self.out.interval_done(time_ns);
        }
        Ok(n)
    }

    /// Replays one input. `label` names it in errors; `stem` names its interfaces
    /// (`stem`, or `stem:if_name` for named pcapng interfaces). `size` (when known) drives the
    /// progress bar. On damage, everything before it is processed and snapshotted, then the
    /// error is returned.
    pub fn feed<R: Read>(
        &mut self,
        label: &str,
        stem: &str,
        input: R,
        size: Option<u64>,
    ) -> Result<InputStats, ReplayError> {
        self.feed_fd(label, stem, input, None, size)
    }

    /// [`Replay::feed`] with the input's file descriptor, when it has one: a non-blocking
    /// input is then waited for with poll(2) instead of failing with EAGAIN.
    fn feed_fd<R: Read>(
        &mut self,
        label: &str,
        stem: &str,
        input: R,
        fd: Option<RawFd>,
        size: Option<u64>,
    ) -> Result<InputStats, ReplayError> {
        let input = StopAware {
            inner: input,
            stop: self.opts.stop.clone(),
            fd,
        };
        self.feed_with(label, stem, size, |sink| {
            pcap_reader::read_capture(label, input, sink)
        })
    }

    /// Replays a capture held in memory. (Files are streamed, not memory-mapped: a mapping was
    /// measured no faster, and its pages count in the resident set, so memory would appear to
    /// grow with the file.)
    pub fn feed_slice(
        &mut self,
        label: &str,
        stem: &str,
        data: &[u8],
    ) -> Result<InputStats, ReplayError> {
        self.feed_with(label, stem, Some(data.len() as u64), |sink| {
            pcap_reader::read_capture_slice(label, data, sink)
        })
    }

    fn feed_with<G>(
        &mut self,
        label: &str,
        stem: &str,
        size: Option<u64>,
        read: G,
    ) -> Result<InputStats, ReplayError>
    where
        G: FnOnce(&mut dyn FnMut(Item<'_>) -> Result<(), ReplayError>) -> Result<u64, ReplayError>,
    {
        self.inputs += 1;
        let mut f = Feed {
            stats: InputStats::default(),
            ifmap: Vec::new(),
            used: Vec::new(),
            scratch: Vec::with_capacity(9216),
            interval: self.opts.interval_ns.max(1),
            next_boundary: None,
            last_ts: 0,
            progress: (self.opts.progress && size.is_some()).then(|| Progress::new(label, size)),
        };
        let res = read(&mut |item| match item {
            Item::Iface(ifc) => {
                self.declare(&mut f, stem, ifc);
                Ok(())
            }
            Item::Record(r) => self.record(&mut f, &r),
        });
        if let Some(p) = f.progress.as_mut() {
            p.finish();
        }
        let mut stats = f.stats;
        self.frames += stats.frames;
        // The last (partial) interval ends at the last packet.
        if stats.frames > 0 {
            stats.snapshots += self.emit(&f.used, f.last_ts)?;
        }
        // At the end of the observation (the last input) the latency measurements still open
        // are counted as such (summary.json), after the last rows.
        if self.close_latency_at_end {
            for k in 0..f.used.len() {
                let di = f.used[k];
                self.dps[di].dp.close_latency(f.last_ts);
                self.hand_over_latency(di)?;
            }
        }
        tracing::info!(
            input = label,
            frames = stats.frames,
            snapshots = stats.snapshots,
            "input done"
        );
        // A read interrupted by the stop's signal ends the input like the stop itself.
        let stopped = self.opts.stop.as_ref().is_some_and(Stop::is_set);
        match res {
            Ok(n) => stats.bytes_read = n,
            Err(_) if stopped => stats.interrupted = true,
            Err(e) => return Err(e),
        }
        Ok(stats)
    }

    /// A capture interface of the input: its datapath's name (`stem`, `stem:if_name`,
    /// `stem:ifN`, `stem:sSifN`; the reader has made `if_name` printable) and link type. The
    /// datapath itself is made at the interface's first packet ([`Replay::activate`]).
    fn declare(&mut self, f: &mut Feed, stem: &str, ifc: &pcap_reader::Iface) {
        let name = match (&ifc.name, ifc.index, ifc.section) {
            (Some(n), _, _) => format!("{stem}:{n}"),
            (None, 0, 0) => stem.to_string(),
            (None, i, 0) => format!("{stem}:if{i}"),
            (None, i, s) => format!("{stem}:s{s}if{i}"),
        };
        f.ifmap.push(Declared {
            name,
            link: ifc.link,
            dp: None,
        });
    }

    /// The first packet of declared interface `i` of this input: its datapath (an existing one
    /// of the same name continues), snapshotted from now on at this input's boundaries.
    #[cold]
    fn activate(&mut self, f: &mut Feed, i: usize) -> usize {
        let name = std::mem::take(&mut f.ifmap[i].name);
        let di = self.dp_for(name);
        f.ifmap[i].dp = Some(di);
        let d = &mut self.dps[di];
        if d.fed_by != self.inputs {
            d.fed_by = self.inputs;
            f.used.push(di);
        }
        di
    }

    /// One record: a snapshot of every interface at each interval boundary it crosses, then the
    /// frame through its interface's datapath, and its first-occurrence events to the consumer.
    #[inline]
    fn record(&mut self, f: &mut Feed, r: &pcap_reader::Record<'_>) -> Result<(), ReplayError> {
        if self.opts.stop.as_ref().is_some_and(Stop::is_set) {
            return Err(ReplayError::Interrupted);
        }
        if let Some(p) = &self.opts.pace
            && f.stats.frames.is_multiple_of(PACE_FRAMES)
        {
            p.wait();
        }
        let Some(decl) = f.ifmap.get(r.iface) else {
            return Ok(());
        };
        let link = decl.link;
        let declared_dp = decl.dp;
        // A frame a few records ahead (legacy pcap, one interface): its state is prefetched.
        if !r.ahead.is_empty()
            && link == LinkType::Ethernet
            && let Some(di) = declared_dp
        {
            self.dps[di].dp.prefetch(r.ahead, dir::INGRESS);
        }
        let ts = if r.ts_ns == 0 { f.last_ts } else { r.ts_ns };
        match f.next_boundary {
            None => f.next_boundary = Some(boundary_after(ts, f.interval)),
            Some(b) if ts >= b => {
                f.stats.snapshots += self.emit(&f.used, b)?;
                f.next_boundary = Some(boundary_after(ts, f.interval));
            }
            _ => {}
        }
        f.last_ts = f.last_ts.max(ts);
        let di = match declared_dp {
            Some(di) => di,
            None => self.activate(f, r.iface),
        };
        let view = link_layer::to_ethernet(link, r.data, r.orig_len, &mut f.scratch);
        let direction = match r.outbound {
            Some(true) => dir::EGRESS,
            Some(false) => dir::INGRESS,
            None => view.direction,
        };
        let d = &mut self.dps[di];
        if !d.begun {
            d.begun = true;
            self.out.begin(&d.name, ts, self.opts.link_speed_bps);
        }
        d.dp.process(view.bytes, view.wire_len, ts, direction);
        if d.dp.last_offense != 0
            && let Some(e) = self.evidence.as_mut()
        {
            e.offer(
                &d.name,
                d.dp.last_key,
                d.dp.last_offense,
                ts,
                view.bytes,
                view.wire_len,
            )?;
        }
        d.last_ns = d.last_ns.max(ts);
        d.unsnapped = true;
        if !d.dp.events.is_empty() || !d.dp.pauses.is_empty() {
            self.hand_over_events(di)?;
        }
        // latency outcomes in batches (their interval's snapshot takes the rest first)
        if self.dps[di].dp.latency_pending() >= LATENCY_BATCH {
            self.hand_over_latency(di)?;
        }
        f.stats.frames += 1;
        if f.stats.frames & 0xffff == 0
            && let Some(p) = f.progress.as_mut()
        {
            p.update(r.offset, f.stats.frames);
        }
        Ok(())
    }

    /// The events and PFC / PAUSE frames datapath `di` produced, events counted by kind, handed
    /// to the consumer.
    fn hand_over_events(&mut self, di: usize) -> Result<(), ReplayError> {
        let d = &mut self.dps[di];
        let ev = d.dp.take_events();
        for e in &ev {
            let name = observer_common::qp::ev::NAMES
                .get(e.kind as usize)
                .copied()
                .unwrap_or("unknown");
            *self.event_counts.entry(name).or_insert(0) += 1;
        }
        if !ev.is_empty() {
            self.out
                .events(&d.name, &ev)
                .map_err(ReplayError::Consumer)?;
        }
        let pauses = d.dp.take_pauses();
        if pauses.is_empty() {
            return Ok(());
        }
        self.out
            .pauses(&d.name, &pauses)
            .map_err(ReplayError::Consumer)
    }

    /// The latency outcomes datapath `di` decided since the last call, handed to the consumer.
    fn hand_over_latency(&mut self, di: usize) -> Result<(), ReplayError> {
        let d = &mut self.dps[di];
        let Some(recs) = d.dp.latency_records() else {
            return Ok(());
        };
        if recs.is_empty() {
            return Ok(());
        }
        let r = self.out.latency(&d.name, recs);
        recs.clear();
        r.map_err(ReplayError::Consumer)
    }

    /// Replays a file, or standard input for `-`.
    pub fn feed_path(&mut self, path: &Path) -> Result<InputStats, ReplayError> {
        if path.as_os_str() == "-" {
            let stdin = std::io::stdin();
            let fd = stdin.as_raw_fd();
            return self.feed_fd("stdin", "stdin", stdin.lock(), Some(fd), None);
        }
        let label = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|e| ReplayError::Open {
            file: label.clone(),
            source: e,
        })?;
        let size = f.metadata().ok().map(|m| m.len());
        let stem = stem_of(path);
        let fd = f.as_raw_fd();
        self.feed_fd(&label, &stem, f, Some(fd), size)
    }

    /// Current cumulative state of every interface.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.dps
            .iter()
            .map(|d| d.dp.snapshot(&d.name, d.last_ns, self.opts.link_speed_bps))
            .collect()
    }

    /// The final state of every interface, the values moved out (no copy).
    pub fn into_snapshots(self) -> Vec<Snapshot> {
        let speed = self.opts.link_speed_bps;
        self.dps
            .into_iter()
            .map(|d| d.dp.into_snapshot(&d.name, d.last_ns, speed))
            .collect()
    }
}

/// An input whose blocking read ends when the stop is set: a signal interrupts the read
/// (EINTR, the handlers are installed without SA_RESTART), and instead of reading again it
/// reports the interruption, so `tcpdump ... | roce-observe replay -` stops on Ctrl-C even
/// while no packet arrives. A non-blocking input (O_NONBLOCK, e.g. a standard input inherited
/// from a parent that set it) is waited for instead of failing with EAGAIN: with poll(2) on
/// `fd` when known, else by short sleeps; the stop is checked at least every [`WAIT_SLICE_MS`].
struct StopAware<R> {
    inner: R,
    stop: Option<Stop>,
    fd: Option<RawFd>,
}

/// Longest wait for a non-blocking input without checking the stop.
const WAIT_SLICE_MS: i32 = 100;

impl<R> StopAware<R> {
    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(Stop::is_set)
    }

    /// Waits until the input is readable (or has hung up), at most one slice.
    fn wait_readable(&self) {
        match self.fd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; an error (EINTR from a signal) just ends the wait.
                unsafe { libc::poll(&mut p, 1, WAIT_SLICE_MS) };
            }
            None => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

impl<R: Read> Read for StopAware<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.inner.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    if self.stopped() {
                        return Err(std::io::Error::other("stopped by a signal"));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if self.stopped() {
                        return Err(std::io::Error::other("stopped by a signal"));
                    }
                    self.wait_readable();
                }
                r => return r,
            }
        }
    }
}

/// The first multiple of `interval` after `ts` (saturating: a corrupt timestamp near the end
/// of time must not overflow).
fn boundary_after(ts: u64, interval: u64) -> u64 {
    (ts / interval).saturating_add(1).saturating_mul(interval)
}

/// A tiny progress bar on stderr.
struct Progress {
    label: String,
    total: Option<u64>,
    start: Instant,
    drawn: bool,
}

impl Progress {
    fn new(label: &str, total: Option<u64>) -> Progress {
        Progress {
            label: label.to_string(),
            total,
            start: Instant::now(),
            drawn: false,
        }
    }
    fn update(&mut self, offset: u64, frames: u64) {
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let rate = frames as f64 / secs / 1e6;
        let line = match self.total {
            Some(t) if t > 0 => {
                let frac = (offset as f64 / t as f64).min(1.0);
                let w = 30;
                let fill = (frac * w as f64) as usize;
                format!(
                    "\r{} [{}{}] {:5.1}% {:.1} Mframes {:.2} Mfps",
                    self.label,
                    "#".repeat(fill),
                    " ".repeat(w - fill),
                    frac * 100.0,
                    frames as f64 / 1e6,
                    rate
                )
            }
            _ => format!(
                "\r{} {:.1} Mframes {:.2} Mfps",
                self.label,
                frames as f64 / 1e6,
                rate
            ),
        };
        eprint!("{line}");
        self.drawn = true;
    }
    fn finish(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
        }
    }
}

/// The stem that names a file's interfaces (`cap` for `cap.pcap` and for `cap.pcap10`).
fn stem_of(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The time of a capture file's first packet; `None` when it has none or cannot be read (its
/// error is said when it is read).
fn first_packet_ns(path: &Path) -> Option<u64> {
    let f = std::fs::File::open(path).ok()?;
    let mut first = None;
    let _ = pcap_reader::read_capture(&path.display().to_string(), f, |item| match item {
        Item::Record(r) if r.ts_ns != 0 => {
            first = Some(r.ts_ns);
            // stop reading: only the first packet was wanted
            Err(ReplayError::Interrupted)
        }
        _ => Ok(()),
    });
    first
}

/// The stem an input's interfaces are named by: its file stem, `stdin` for `-`. Inputs of one
/// stem feed the same interfaces, so they are one unit, read one after another.
fn unit_of(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "stdin".to_string()
    } else {
        stem_of(path)
    }
}

/// The order the inputs are read in, as units: the inputs of one stem (one observation point,
/// perhaps split across files, as `tcpdump -C` writes `cap.pcap`, `cap.pcap1`, ...
/// `cap.pcap10`) together at the place of the first of them, the stems in the order given;
/// within a stem, regular files in the order of their first packets (a shell's glob lists
/// `cap.pcap10` before `cap.pcap2`), files without a readable packet after them, and the others
/// as given. Standard input and other streams are not looked into (they cannot be read twice).
pub fn read_units(inputs: &[std::path::PathBuf]) -> Vec<Vec<std::path::PathBuf>> {
    let mut units: Vec<Vec<usize>> = Vec::new();
    let mut by_stem: HashMap<String, usize> = HashMap::new();
    for (i, p) in inputs.iter().enumerate() {
        let u = *by_stem.entry(unit_of(p)).or_insert_with(|| {
            units.push(Vec::new());
            units.len() - 1
        });
        units[u].push(i);
    }
    units
        .into_iter()
        .map(|places| {
            let regular: Vec<usize> = places
                .iter()
                .copied()
                .filter(|&i| {
                    let p = &inputs[i];
                    p.as_os_str() != "-" && std::fs::metadata(p).is_ok_and(|m| m.is_file())
                })
                .collect();
            let mut order: Vec<usize> = places.clone();
            if regular.len() > 1 {
                let mut by_time: Vec<(u64, usize)> = regular
                    .iter()
                    .map(|&i| (first_packet_ns(&inputs[i]).unwrap_or(u64::MAX), i))
                    .collect();
                // stable: files starting at the same time, or without a packet, keep their order
                by_time.sort_by_key(|&(t, _)| t);
                for (&place, &(_, i)) in regular.iter().zip(&by_time) {
                    if place != i {
                        tracing::info!(
                            input = %inputs[i].display(),
                            place = place + 1,
                            "files of one capture read in the order of their first packets"
                        );
                    }
                    let at = places.iter().position(|&q| q == place).unwrap_or(0);
                    order[at] = i;
                }
            }
            order.into_iter().map(|i| inputs[i].clone()).collect()
        })
        .collect()
}

/// What reading one unit gave ([`CaptureSource::run_units`]).
#[derive(Default)]
struct UnitResult {
    errors: Vec<ReplayError>,
    frames: u64,
    event_counts: HashMap<&'static str, u64>,
    snapshots: Vec<Snapshot>,
}

/// Every input of `files` (one observation point's) through `rp`, in order; an input that
/// fails is recorded in `errors` and the next one is read. The last of them ends the
/// observation of its interfaces: their latency measurements still open are counted open (no
/// later input names them).
fn feed_inputs(
    rp: &mut Replay<'_>,
    files: &[std::path::PathBuf],
    stop: &Stop,
    errors: &mut Vec<ReplayError>,
) {
    for (n, f) in files.iter().enumerate() {
        if stop.is_set() {
            break;
        }
        rp.close_latency_at_end = n + 1 == files.len();
        match rp.feed_path(f) {
            Ok(st) if st.interrupted => {
                tracing::warn!(input = %f.display(), frames = st.frames, "stopped early: everything read so far is accounted");
            }
            Ok(_) => {}
            Err(e) => {
                // said once, by the command, after the summary (which lists it too)
                tracing::debug!(error = %contract::error::chain(&e), "replay input failed");
                errors.push(e);
            }
        }
    }
}

/// The capture source: every input in order (a file, or `-` for standard input), through one
/// [`Replay`]. An input that fails is recorded and the next one is read; the stop ends reading
/// between frames.
pub struct CaptureSource {
    pub opts: ReplayOptions,
    /// The inputs; after [`Source::run`], in the order they were read ([`read_units`]).
    pub inputs: Vec<std::path::PathBuf>,
    /// After [`Source::run`]: the inputs that failed, ...
    pub errors: Vec<ReplayError>,
    /// ... frames read, first-occurrence events by kind, and the final totals of every
    /// interface.
    pub frames: u64,
    pub event_counts: HashMap<&'static str, u64>,
    pub snapshots: Vec<Snapshot>,
    /// The evidence capture (`--evidence`): handed to the replay, back after it.
    pub evidence: Option<crate::sinks::evidence::Evidence>,
}

impl CaptureSource {
    pub fn new(opts: ReplayOptions, inputs: Vec<std::path::PathBuf>) -> CaptureSource {
        CaptureSource {
            opts,
            inputs,
            errors: Vec::new(),
            frames: 0,
            event_counts: HashMap::new(),
            snapshots: Vec::new(),
            evidence: None,
        }
    }

    /// The inputs as units ([`read_units`]: the inputs of each stem), `inputs` set to the
    /// order they are read in.
    pub fn units(&mut self) -> Vec<Vec<std::path::PathBuf>> {
        let units = read_units(&self.inputs);
        self.inputs = units.iter().flatten().cloned().collect();
        units
    }

    /// Reads `units` ([`CaptureSource::units`]) on `readers` threads at once, unit `i` through
    /// its own consumer `outs[i]` (dropped when the unit is done): units name different
    /// interfaces, so nothing of one reaches another. The readers take the units in order
    /// (each the next one not yet begun), so the lowest unit not yet done is always being read:
    /// consumers that do their units' calls in unit order ([`super::offload::Offload::start_lanes`])
    /// see them as one reader would. The errors, frames, events and final values are then those
    /// of [`Source::run`] on the same inputs (they are put together in unit order). Refused
    /// with an evidence capture (its frames would be written in another order): read them with
    /// [`Source::run`].
    pub fn run_units<P: Consumer + Send>(
        &mut self,
        units: Vec<Vec<std::path::PathBuf>>,
        outs: Vec<(P, Option<crate::sources::offload::Pacer>)>,
        readers: usize,
        stop: &Stop,
    ) {
        assert!(
            self.evidence.is_none(),
            "an evidence capture is written by one reader"
        );
        assert_eq!(units.len(), outs.len(), "one consumer per unit");
        let n = units.len();
        type Slot<P> = std::sync::Mutex<Option<(P, Option<crate::sources::offload::Pacer>)>>;
        let outs: Vec<Slot<P>> = outs
            .into_iter()
            .map(|o| std::sync::Mutex::new(Some(o)))
            .collect();
        let results: Vec<std::sync::Mutex<UnitResult>> =
            (0..n).map(|_| Default::default()).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        // A reader: the next unit not yet begun, until none is left.
        let work = |progress: bool| {
            let mut opts = self.opts.clone();
            opts.stop = Some(stop.clone());
            opts.progress &= progress;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n || stop.is_set() {
                    break;
                }
                let Some((mut out, pace)) =
                    outs[i].lock().unwrap_or_else(|p| p.into_inner()).take()
                else {
                    continue;
                };
                let mut res = UnitResult::default();
                let mut unit_opts = opts.clone();
                unit_opts.pace = pace;
                let mut rp = Replay::new(unit_opts, &mut out);
                feed_inputs(&mut rp, &units[i], stop, &mut res.errors);
                res.frames = rp.frames;
                res.event_counts = std::mem::take(&mut rp.event_counts);
                res.snapshots = rp.into_snapshots();
                // the unit's consumer is done: its calls end here
                drop(out);
                *results[i].lock().unwrap_or_else(|p| p.into_inner()) = res;
            }
        };
        std::thread::scope(|sc| {
            let mut started = 0;
            for r in 0..readers.clamp(1, n.max(1)) {
                let work = &work;
                // one progress bar: the first reader's (two would draw over each other)
                match std::thread::Builder::new()
                    .name(format!("reader-{r}"))
                    .spawn_scoped(sc, move || work(r == 0))
                {
                    Ok(_) => started += 1,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not start a reader thread: fewer inputs are read at once")
                    }
                }
            }
            if started == 0 {
                work(true);
            }
        });
        // units no reader began (the stop was set): their consumers end now, in order
        for o in outs {
            drop(o.into_inner().unwrap_or_else(|p| p.into_inner()));
        }
        for r in results {
            let r = r.into_inner().unwrap_or_else(|p| p.into_inner());
            self.errors.extend(r.errors);
            self.frames += r.frames;
            for (k, v) in r.event_counts {
                *self.event_counts.entry(k).or_default() += v;
            }
            self.snapshots.extend(r.snapshots);
        }
    }
}

impl Source for CaptureSource {
    type Error = std::convert::Infallible;

    /// Never fails as a whole: each input's error is in [`CaptureSource::errors`].
    fn run(&mut self, out: &mut dyn Consumer, stop: &Stop) -> Result<(), Self::Error> {
        let mut opts = self.opts.clone();
        opts.stop = Some(stop.clone());
        let mut rp = Replay::new(opts, out);
        rp.evidence = self.evidence.take();
        // one observation point (one stem) after another; each ends with its last input
        let units = self.units();
        for u in &units {
            feed_inputs(&mut rp, u, stop, &mut self.errors);
        }
        self.frames = rp.frames;
        self.evidence = rp.evidence.take();
        self.event_counts = std::mem::take(&mut rp.event_counts);
        self.snapshots = rp.into_snapshots();
        Ok(())
    }
}
