//! The observed side of the lab: roce-observe on the hosts' interfaces.
//!
//! - [`ObserverMode::Live`] (the product): the real `roce-observe` binary runs inside each host's
//!   namespace (`ip netns exec <ns> roce-observe --iface <if> --out DIR ...`), attached with
//!   XDP/tc, writes Parquet and alerts, and is stopped with SIGINT after the traffic; the lab
//!   reads `DIR/summary.json` and `DIR/alerts.jsonl`.
//! - [`ObserverMode::Userspace`] (fallback, labelled as such everywhere): an AF_PACKET capture on
//!   each host interface fed to `observer::datapath::Datapath` (the same per-frame logic the eBPF
//!   programs run, in userspace) and `collector::Collector`. It checks the lab and the shared
//!   per-QP logic, not the kernel programs; its snapshots and events go through the real
//!   collector, which writes Parquet, alerts and `summary.json` as in live mode.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use observer_common::maps::{Policy, dir};
use serde_json::Value;

use netns::Netns;
use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sinks::summary_json::summary_json;
use observer::sources::datapath::Datapath;
use observer::sources::paced::{first_tick, next_tick};

use super::sock::{PACKET_OUTGOING, RawSock};
use super::{LabError, stop_requested};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ObserverMode {
    /// The real roce-observe binary, live (XDP ingress, tc egress) in each host namespace.
    Live,
    /// Fallback: AF_PACKET capture + the userspace datapath + the collector (not the eBPF path).
    Userspace,
}

impl ObserverMode {
    pub fn label(self) -> &'static str {
        match self {
            ObserverMode::Live => {
                "live roce-observe (XDP ingress + tc egress, in each host namespace)"
            }
            ObserverMode::Userspace => {
                "FALLBACK AF_PACKET capture -> userspace datapath -> collector (not the eBPF programs)"
            }
        }
    }
}

/// What an observer produced.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// `summary.json` documents (one per observed interface).
    pub summaries: Vec<Value>,
    /// Alert counts by rule, summed over observers (`None` until read).
    pub alerts: Option<BTreeMap<String, u64>>,
    /// alerts.jsonl lines.
    pub alert_lines: u64,
    /// Parquet files written.
    pub parquet_files: u64,
    /// Rows in the flow-log Parquet files.
    pub flow_rows: u64,
    /// Frames the fallback capture lost (must be 0).
    pub capture_drops: u64,
    /// The observers' output (live mode), for the report when something fails.
    pub logs: Vec<String>,
    /// The latency scenarios: what the replay of h1's capture measured.
    pub latency: Option<crate::latency::LatencySeen>,
}

/// A running live observer; killed on drop if still running.
pub struct LiveObserver {
    child: Option<Child>,
    pub out_dir: PathBuf,
    pub iface: String,
    log: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for LiveObserver {
    /// On an early exit (error, Ctrl-C): SIGINT so it detaches and flushes, SIGKILL after 3 s.
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child by its PID.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(3) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `exe` in namespace `ns` on `iface`.
pub fn start_live(
    exe: &Path,
    ns: &Netns,
    iface: &str,
    out_dir: &Path,
    duration_s: u64,
    extra: &[String],
    echo: bool,
) -> Result<LiveObserver, LabError> {
    std::fs::create_dir_all(out_dir).map_err(|source| LabError::Sys {
        what: out_dir.display().to_string(),
        source,
    })?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.name])
        .arg(exe)
        .args(["--iface", iface, "--out"])
        .arg(out_dir)
        .args(["--duration", &duration_s.to_string()])
        .args(extra)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    tracing::info!(ns = %ns.name, iface, cmd = ?cmd, "starting roce-observe");
    let mut child = cmd.spawn().map_err(|source| LabError::ObserverIo {
        what: format!("spawning {}", exe.display()),
        source,
    })?;
    // Its output (live alerts, start-up report) is echoed with a prefix and kept for the report
    // and for observer.log.
    let log = Arc::new(Mutex::new(String::new()));
    let mut readers = Vec::new();
    let prefix = format!("[roce-observe {iface}]");
    let streams: Vec<Box<dyn Read + Send>> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .collect();
    for st in streams {
        let (log, prefix) = (log.clone(), prefix.clone());
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(st).lines() {
                let Ok(line) = line else { break };
                if echo {
                    println!("{prefix} {line}");
                }
                if let Ok(mut l) = log.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        }));
    }
    Ok(LiveObserver {
        child: Some(child),
        out_dir: out_dir.to_path_buf(),
        iface: iface.to_string(),
        log,
        readers,
    })
}

impl LiveObserver {
    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Waits until the observer says it is attached (a log line naming the interface with
    /// "attach"), or fails if it exits first.
    pub fn wait_attached(&mut self, timeout: Duration) -> Result<(), LabError> {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if stop_requested() {
                return Err(LabError::Interrupted);
            }
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                return Err(LabError::Observer(format!(
                    "roce-observe on {} exited at start ({st}):\n{}",
                    self.iface,
                    tail(&self.log(), 20)
                )));
            }
            let log = self.log().to_lowercase();
            if log
                .lines()
                .any(|l| l.contains("attach") && l.contains(&self.iface.to_lowercase()))
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(LabError::Observer(format!(
            "roce-observe on {} did not report being attached within {timeout:?}:\n{}",
            self.iface,
            tail(&self.log(), 20)
        )))
    }

    /// Stops it with SIGINT, waits for it to write its files, and reads them.
    pub fn finish(mut self, timeout: Duration) -> Result<LiveOutput, LabError> {
        let mut c = self
            .child
            .take()
            .ok_or_else(|| LabError::Observer("observer already finished".into()))?;
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        let t0 = Instant::now();
        let status = loop {
            if let Ok(Some(st)) = c.try_wait() {
                break st;
            }
            if t0.elapsed() > timeout {
                let _ = c.kill();
                let _ = c.wait();
                return Err(LabError::Observer(format!(
                    "roce-observe on {} did not exit within {timeout:?} of SIGINT:\n{}",
                    self.iface,
                    tail(&self.log(), 20)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let log = self.log();
        let _ = std::fs::write(self.out_dir.join("observer.log"), &log);
        let sp = self.out_dir.join("summary.json");
        let text = std::fs::read_to_string(&sp).map_err(|source| LabError::ObserverIo {
            what: format!(
                "{}; roce-observe on {} exited with {status}:\n{}",
                sp.display(),
                self.iface,
                tail(&log, 20)
            ),
            source,
        })?;
        let summary: Value =
            serde_json::from_str(&text).map_err(|source| LabError::ObserverOutput {
                what: sp.display().to_string(),
                source,
            })?;
        Ok(LiveOutput {
            alerts: summary.get("alerts").cloned(),
            summary,
            alert_lines: jsonl_lines(&self.out_dir.join("alerts.jsonl")),
            parquet_files: count_ext(&self.out_dir, "parquet"),
            flow_rows: parquet_rows(&self.out_dir.join("flows"))?,
            log,
        })
    }
}

/// What a live observer left behind, read after it stopped.
pub struct LiveOutput {
    /// Its summary.json.
    pub summary: Value,
    /// The summary's alert counts by rule.
    pub alerts: Option<Value>,
    /// Lines of alerts.jsonl.
    pub alert_lines: u64,
    pub parquet_files: u64,
    /// Rows in the flow-log Parquet files.
    pub flow_rows: u64,
    /// Its stdout and stderr.
    pub log: String,
}

/// Stops the live observers (after a short pause, so their last event polls, every 100 ms, have
/// run) and adds up what they wrote.
pub fn collect_live(live: Vec<LiveObserver>) -> Result<Observed, LabError> {
    std::thread::sleep(Duration::from_millis(300));
    let mut observed = Observed::default();
    let mut alerts = BTreeMap::new();
    for o in live {
        let out = o.finish(Duration::from_secs(20))?;
        observed.flow_rows += out.flow_rows;
        add_alerts(&mut alerts, out.alerts.as_ref());
        observed.summaries.push(out.summary);
        observed.alert_lines += out.alert_lines;
        observed.parquet_files += out.parquet_files;
        observed.logs.push(out.log);
    }
    observed.alerts = Some(alerts);
    Ok(observed)
}

/// Adds up what the fallback observers returned (summary, frames lost) and wrote under
/// `dir/h2` and `dir/h1`.
pub fn collect_userspace(captured: Vec<(Value, u64)>, dir: &Path) -> Result<Observed, LabError> {
    let mut observed = Observed::default();
    let mut alerts = BTreeMap::new();
    for (v, drops) in captured {
        add_alerts(&mut alerts, v.get("alerts"));
        observed.summaries.push(v);
        observed.capture_drops += drops;
    }
    for host in ["h2", "h1"] {
        let d = dir.join(host);
        observed.parquet_files += count_ext(&d, "parquet");
        observed.flow_rows += parquet_rows(&d.join("flows"))?;
        observed.alert_lines += jsonl_lines(&d.join("alerts.jsonl"));
    }
    observed.alerts = Some(alerts);
    Ok(observed)
}

/// Adds a summary's alert counts (`{"rule": n, ...}`) to `to`.
fn add_alerts(to: &mut BTreeMap<String, u64>, a: Option<&Value>) {
    if let Some(obj) = a.and_then(|a| a.as_object()) {
        for (k, n) in obj {
            *to.entry(k.clone()).or_insert(0) += n.as_u64().unwrap_or(0);
        }
    }
}

fn tail(s: &str, n: usize) -> String {
    let l: Vec<&str> = s.lines().collect();
    l[l.len().saturating_sub(n)..].join("\n")
}

/// Rows in the Parquet files under `d` (from their footers).
pub fn parquet_rows(d: &Path) -> Result<u64, LabError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let Ok(rd) = std::fs::read_dir(d) else {
        return Ok(0);
    };
    let mut n = 0;
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            n += parquet_rows(&p)?;
        } else if p.extension().is_some_and(|x| x == "parquet") {
            let f = std::fs::File::open(&p).map_err(|source| LabError::ObserverIo {
                what: p.display().to_string(),
                source,
            })?;
            let r = SerializedFileReader::new(f).map_err(|source| LabError::ObserverParquet {
                what: p.display().to_string(),
                source,
            })?;
            n += r.metadata().file_metadata().num_rows().max(0) as u64;
        }
    }
    Ok(n)
}

/// Non-empty lines of a JSON-lines file (0 when absent).
pub fn jsonl_lines(p: &Path) -> u64 {
    std::fs::read_to_string(p)
        .map(|s| s.lines().filter(|l| !l.trim().is_empty()).count() as u64)
        .unwrap_or(0)
}

pub fn count_ext(d: &Path, ext: &str) -> u64 {
    let Ok(rd) = std::fs::read_dir(d) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            n += count_ext(&p, ext);
        } else if p.extension().is_some_and(|x| x == ext) {
            n += 1;
        }
    }
    n
}

/// Where the fallback sends its snapshots: the real collector (Parquet, alerts, summary.json).
pub struct FallbackCollector {
    pub out_dir: PathBuf,
    pub host: String,
    pub policy: PolicyConfig,
}

/// The fallback observer: captures on `iface` in `ns` until `done`, through the userspace
/// datapath (with the policy's expected marking, so it raises the same first-occurrence events
/// the kernel would) and, with `collector`, the real collector: one snapshot on every whole
/// second, events as they come, `summary.json` with alert counts at the end. Returns the summary
/// and the frames the socket lost. With `pcap`, every frame is also written there (pcap,
/// nanosecond timestamps, Ethernet), for `roce-observe replay` or tshark.
pub fn userspace_capture(
    ns: &Netns,
    iface: &str,
    done: &AtomicBool,
    ready: &AtomicBool,
    pcap: Option<&Path>,
    collector: Option<FallbackCollector>,
) -> Result<(Value, u64), LabError> {
    let _in = ns.enter().map_err(|source| LabError::Topology {
        what: "entering the observed host",
        source,
    })?;
    let cap = FallbackCapture::open(iface, pcap, collector)?;
    ready.store(true, Ordering::SeqCst);
    cap.run(done)
}

/// The fallback observer's interval, ns.
const SECOND_NS: u64 = 1_000_000_000;

/// Wall-clock time in nanoseconds since the Unix epoch (0 if the clock is before it).
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn collector_err(iface: &str) -> impl Fn(observer::pipeline::CollectorError) -> LabError + '_ {
    move |source| LabError::Collector {
        what: format!("fallback collector on {iface}"),
        source,
    }
}

impl FallbackCollector {
    /// The collector, begun on `iface`.
    fn start(self, iface: &str) -> Result<Collector, LabError> {
        let cfg = CollectorConfig::new(self.out_dir, &self.host, "lab-fallback", self.policy);
        let mut col = Collector::new(cfg).map_err(collector_err(iface))?;
        col.begin(iface, wall_ns(), None);
        Ok(col)
    }
}

/// One fallback observer's capture socket, its datapath and what the frames go on to.
struct FallbackCapture<'a> {
    iface: &'a str,
    sock: RawSock,
    pcap: Option<PcapWriter>,
    dp: Datapath,
    col: Option<Collector>,
    buf: Vec<u8>,
    /// Frames the socket lost so far.
    drops: u64,
}

impl<'a> FallbackCapture<'a> {
    fn open(
        iface: &'a str,
        pcap: Option<&Path>,
        collector: Option<FallbackCollector>,
    ) -> Result<Self, LabError> {
        let sock = RawSock::open(iface)?;
        let pcap = pcap.map(PcapWriter::create).transpose()?;
        let policy = collector
            .as_ref()
            .map_or(Policy::NONE, |c| c.policy.expected);
        let dp = Datapath::new(policy, 65536);
        let col = collector.map(|c| c.start(iface)).transpose()?;
        Ok(FallbackCapture {
            iface,
            sock,
            pcap,
            dp,
            col,
            buf: vec![0u8; 65536],
            drops: 0,
        })
    }

    /// Captures until `done` (one last round after it), then finishes.
    fn run(mut self, done: &AtomicBool) -> Result<(Value, u64), LabError> {
        let mut next_interval = first_tick(wall_ns(), SECOND_NS);
        loop {
            let finishing = done.load(Ordering::SeqCst);
            if stop_requested() {
                return Err(LabError::Interrupted);
            }
            self.sock.wait(5);
            self.drain_socket()?;
            self.feed_collector(finishing, &mut next_interval)?;
            if finishing {
                break;
            }
        }
        self.finish()
    }

    /// Every waiting frame through the pcap file and the datapath.
    fn drain_socket(&mut self) -> Result<(), LabError> {
        while let Some((n, pkttype)) = self.sock.recv(&mut self.buf) {
            let d = if pkttype == PACKET_OUTGOING {
                dir::EGRESS
            } else {
                dir::INGRESS
            };
            let ts = wall_ns();
            if let Some(w) = self.pcap.as_mut() {
                w.write(ts, &self.buf[..n])?;
            }
            self.dp.process(&self.buf[..n], n as u32, ts, d);
        }
        self.drops += self.sock.drops() as u64;
        Ok(())
    }

    /// New events to the collector at once; a snapshot on every whole second of the wall clock
    /// (as the live command's, so that the trees of the two hosts' observers cover the same
    /// seconds) and at the end.
    fn feed_collector(&mut self, finishing: bool, next_interval: &mut u64) -> Result<(), LabError> {
        let Some(c) = self.col.as_mut() else {
            return Ok(());
        };
        let ev = self.dp.take_events();
        if !ev.is_empty() {
            c.on_events(self.iface, &ev);
        }
        let pauses = self.dp.take_pauses();
        if !pauses.is_empty() {
            c.on_pauses(self.iface, &pauses);
        }
        let now = wall_ns();
        if finishing || now >= *next_interval {
            *next_interval = next_tick(now, SECOND_NS);
            c.on_snapshot(&self.dp.snapshot(self.iface, now, None))
                .map_err(collector_err(self.iface))?;
        }
        Ok(())
    }

    /// Closes the pcap file and returns the summary (the collector's, or one made from the
    /// datapath's last snapshot) and the frames lost.
    fn finish(mut self) -> Result<(Value, u64), LabError> {
        if let Some(w) = self.pcap.take() {
            w.finish()?;
        }
        let summary = match self.col {
            Some(c) => c.finish().map_err(collector_err(self.iface))?,
            None => summary_json(&[self.dp.snapshot(self.iface, wall_ns(), None)]),
        };
        Ok((summary, self.drops))
    }
}

/// A minimal pcap writer (nanosecond-resolution magic, LINKTYPE_ETHERNET).
struct PcapWriter {
    w: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
}

impl PcapWriter {
    fn create(path: &Path) -> Result<PcapWriter, LabError> {
        let e = |source| LabError::Sys {
            what: path.display().to_string(),
            source,
        };
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(e)?;
        }
        let f = std::fs::File::create(path).map_err(e)?;
        let mut w = std::io::BufWriter::new(f);
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&65535u32.to_le_bytes());
        h.extend_from_slice(&1u32.to_le_bytes());
        w.write_all(&h).map_err(e)?;
        Ok(PcapWriter {
            w,
            path: path.to_path_buf(),
        })
    }

    fn write(&mut self, ts_ns: u64, frame: &[u8]) -> Result<(), LabError> {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.w
            .write_all(&h)
            .and_then(|_| self.w.write_all(frame))
            .map_err(|source| self.error(source))
    }

    fn error(&self, source: std::io::Error) -> LabError {
        LabError::Sys {
            what: self.path.display().to_string(),
            source,
        }
    }

    fn finish(mut self) -> Result<(), LabError> {
        self.w.flush().map_err(|source| self.error(source))
    }
}
