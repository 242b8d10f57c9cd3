//! Passive latency in the lab (docs/latency.md): in the `clean`, `delay` and `delay20`
//! scenarios tcpdump captures the requester's port (h1) with the kernel's time stamps while the
//! traffic runs, the responder holding its replies 0, 2 or 20 ms; the capture is then replayed
//! with latency on, by replay's own code (`observer::sources::capture`, as `replay --latency`),
//! and the ACK round trips are set against the delay: each at least the delay, the median
//! within the delay plus [`MEDIAN_BOUND`].
//!
//! The delay is the responder's, not netem's: the kernels this lab runs on (6.18 here) are
//! built without `sch_netem` (`tc qdisc add ... netem`: "Specified qdisc kind is unknown"); the
//! soft-RoCE rig's VM has it and uses it (testing.md).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netns::Netns;
use observer::sources::capture::{Replay, ReplayOptions};
use observer::sources::{Consumer, ConsumerError};
use observer_common::latency::{Outcome, Record, kind};
use observer_common::maps::Event;

use crate::LabError;
use crate::report::SelfCheck;

/// How far above the delay the median ACK round trip may be: the responder's coalescing (an
/// ACK every 16 packets or at a message's end), its poll of about a millisecond and a loaded
/// machine's scheduling.
pub const MEDIAN_BOUND: Duration = Duration::from_millis(10);

/// At least this many ACK round trips make a measurement.
const MIN_SAMPLES: usize = 100;

/// tcpdump on one interface of a namespace, writing a pcap file with nanosecond time stamps;
/// killed on drop if still running.
pub struct Tcpdump {
    child: Option<Child>,
    path: PathBuf,
    log: PathBuf,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> LabError {
    move |source| LabError::ObserverIo { what, source }
}

impl Tcpdump {
    /// Starts it and returns once it listens (at most 15 s).
    pub fn start(ns: &Netns, iface: &str, path: &Path) -> Result<Tcpdump, LabError> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(io(d.display().to_string()))?;
        }
        let log = path.with_extension("tcpdump.log");
        let err = std::fs::File::create(&log).map_err(io(log.display().to_string()))?;
        let child = Command::new("ip")
            .args([
                "netns", "exec", &ns.name, "tcpdump", "-i", iface, "-n", "-s", "128",
            ])
            .args(["-B", "65536", "-U", "--time-stamp-precision", "nano", "-w"])
            .arg(path)
            .args(["udp", "port", "4791"])
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(io("starting tcpdump (Debian package tcpdump)".into()))?;
        let mut t = Tcpdump {
            child: Some(child),
            path: path.to_path_buf(),
            log,
        };
        let t0 = Instant::now();
        loop {
            let text = std::fs::read_to_string(&t.log).unwrap_or_default();
            if text.contains("listening on") {
                return Ok(t);
            }
            let exited = t.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || t0.elapsed() > Duration::from_secs(15) {
                return Err(LabError::Observer(format!(
                    "tcpdump on {iface} did not start: {}",
                    text.trim()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops it (SIGINT: it writes what it holds) and returns the file; an error when it lost
    /// frames (a sample could then be missing its request or its ACK).
    pub fn stop(mut self) -> Result<PathBuf, LabError> {
        let mut c = self.child.take().expect("a running tcpdump");
        // the last frames through its buffer first (it stops reading at the signal)
        std::thread::sleep(Duration::from_millis(300));
        if let Ok(Some(st)) = c.try_wait() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            return Err(LabError::Observer(format!(
                "tcpdump exited during the traffic ({st}): {}",
                text.trim()
            )));
        }
        // SAFETY: kill(2) on the child's pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        let t0 = Instant::now();
        while c.try_wait().ok().flatten().is_none() {
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = c.kill();
                let _ = c.wait();
                return Err(LabError::Observer("tcpdump did not stop in 10 s".into()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let dropped = text
            .lines()
            .filter(|l| l.contains("dropped by kernel") || l.contains("dropped by interface"))
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .sum::<u64>();
        if dropped > 0 {
            return Err(LabError::Observer(format!(
                "tcpdump lost {dropped} frames: {}",
                text.trim()
            )));
        }
        Ok(self.path.clone())
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What the replay of the capture measured.
#[derive(Clone, Debug, Default)]
pub struct LatencySeen {
    /// The ACK round trips, ns, ascending.
    pub ack: Vec<u64>,
    /// ACK measurements unanswered, excluded by Karn's rule, not started (ring full), open at
    /// the end.
    pub unmatched: u64,
    pub ambiguous: u64,
    pub ring_full: u64,
    pub open: u64,
}

/// The outcomes as replay hands them over.
#[derive(Default)]
struct Gather(LatencySeen);

impl Consumer for Gather {
    fn events(&mut self, _: &str, _: &[Event]) -> Result<(), ConsumerError> {
        Ok(())
    }
    fn snapshot(&mut self, _: &observer::sources::snapshot::Snapshot) -> Result<(), ConsumerError> {
        Ok(())
    }
    fn latency(&mut self, _: &str, records: &[Record]) -> Result<(), ConsumerError> {
        let s = &mut self.0;
        for r in records.iter().filter(|r| r.kind == kind::ACK) {
            match r.outcome() {
                Outcome::Sample(ns) => s.ack.push(ns),
                Outcome::Unmatched => s.unmatched += 1,
                Outcome::Ambiguous => s.ambiguous += 1,
                Outcome::RingFull => s.ring_full += 1,
                Outcome::Open => s.open += 1,
            }
        }
        Ok(())
    }
}

/// Replays `pcap` with latency on; its ACK round trips.
pub fn measure(pcap: &Path) -> Result<LatencySeen, LabError> {
    let mut g = Gather::default();
    let opts = ReplayOptions {
        latency: true,
        ..ReplayOptions::default()
    };
    Replay::new(opts, &mut g).feed_path(pcap).map_err(|e| {
        LabError::Observer(format!(
            "replaying {}: {}",
            pcap.display(),
            contract::error::chain(&e)
        ))
    })?;
    g.0.ack.sort_unstable();
    Ok(g.0)
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// The checks of a measurement with replies held `delay`: enough samples, every one at least
/// the delay, the median within the delay plus [`MEDIAN_BOUND`].
pub fn checks(delay: Duration, s: &LatencySeen) -> Vec<SelfCheck> {
    let d = delay.as_nanos() as u64;
    let n = s.ack.len();
    let q = |num: usize, den: usize| s.ack.get((num * n).div_ceil(den).max(1) - 1).copied();
    let (min, med, p99, max) = (
        s.ack.first().copied(),
        q(1, 2),
        q(99, 100),
        s.ack.last().copied(),
    );
    let show = |v: Option<u64>| v.map_or("-".into(), ms);
    let detail = format!(
        "{n} ACK round trips: min {}, median {}, p99 {}, max {}; {} unmatched, {} excluded by Karn's rule, {} ring full, {} open at the end",
        show(min),
        show(med),
        show(p99),
        show(max),
        s.unmatched,
        s.ambiguous,
        s.ring_full,
        s.open
    );
    let bound = d + MEDIAN_BOUND.as_nanos() as u64;
    vec![
        SelfCheck {
            what: format!("at least {MIN_SAMPLES} ACK round trips measured"),
            ok: n >= MIN_SAMPLES,
            detail: detail.clone(),
        },
        SelfCheck {
            what: format!("every ACK round trip at least the delay ({})", ms(d)),
            ok: min.is_some_and(|m| m >= d),
            detail: format!("min {}", show(min)),
        },
        SelfCheck {
            what: format!(
                "median ACK round trip within the delay + {} ms",
                MEDIAN_BOUND.as_millis()
            ),
            ok: med.is_some_and(|m| m <= bound),
            detail: format!("median {} (bound {})", show(med), ms(bound)),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(v: &[u64]) -> LatencySeen {
        LatencySeen {
            ack: v.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn checks_hold_for_samples_at_the_delay_and_fail_below_it_or_far_above() {
        let d = Duration::from_millis(2);
        let ok: Vec<u64> = (0..200).map(|i| 2_000_000 + i * 1000).collect();
        assert!(checks(d, &seen(&ok)).iter().all(|c| c.ok));
        // one sample below the delay
        let mut low = ok.clone();
        low[0] = 1_999_999;
        let c = checks(d, &seen(&low));
        assert!(!c[1].ok && c[0].ok && c[2].ok, "{c:?}");
        // the median beyond the bound
        let far: Vec<u64> = (0..200).map(|i| 12_000_001 + i).collect();
        let c = checks(d, &seen(&far));
        assert!(!c[2].ok && c[1].ok, "{c:?}");
        // too few samples, and none
        assert!(!checks(d, &seen(&ok[..99]))[0].ok);
        let c = checks(d, &seen(&[]));
        assert!(c.iter().all(|c| !c.ok), "{c:?}");
    }
}
