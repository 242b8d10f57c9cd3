//! The bring-up checks over a [`Dataset`], and golden-baseline comparison.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::load::Dataset;

/// What the fabric is expected to do (defaults: the NVIDIA profile of roce-domain.md).
#[derive(Clone, Debug, Serialize)]
pub struct Expect {
    pub data_dscp: i16,
    pub cnp_dscp: i16,
    pub rdma_priority: usize,
    /// XOFF frames per second on one priority above which PFC is storming.
    pub storm_xoff_per_s: f64,
    /// The expected marking of every packet class, as the observer's policy of the profile.
    pub marking: Marking,
}

/// What one marking field of one packet class must be, and the expected marking of a policy:
/// defined once in the observer (docs/analysis.md#path), where the live `marking_changed` rule
/// uses them too.
pub use observer::pipeline::marking::{Marking, Want};

impl Expect {
    /// A vendor profile of `observer::vendor`, with the observer's default storm threshold.
    pub fn profile(name: &str) -> Option<Expect> {
        let v = observer::vendor::profile(name)?;
        let policy = observer::pipeline::PolicyConfig::profile(name).ok()?;
        Some(Expect {
            marking: Marking::of(&policy.expected),
            data_dscp: v.data_dscp as i16,
            cnp_dscp: v.cnp_dscp as i16,
            rdma_priority: v.rdma_priority as usize,
            storm_xoff_per_s: observer::pipeline::policy::Thresholds::default().pfc_storm_xoff_per_s
                as f64,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    Pass,
    Info,
    Warn,
    Fail,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
    pub detail: String,
}

/// Fabric-level figures: what a baseline records and a comparison checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub qps: u64,
    pub data_pkts: i64,
    pub cnp_pkts: i64,
    pub ce: i64,
    pub not_ect_data: i64,
    pub data_off_dscp: i64,
    pub cnp_off_dscp: i64,
    pub psn_gaps: i64,
    pub psn_missing: i64,
    pub psn_retrans: i64,
    pub naks: i64,
    pub rnr_naks: i64,
    /// XOFF frames per priority, all interfaces.
    pub pfc_xoff: [i64; 8],
    pub pause_frames: i64,
    pub max_xoff_per_s: f64,
    pub excluded: BTreeMap<String, i64>,
    /// Largest UDP payload per QP -> number of QPs.
    pub max_payloads: BTreeMap<i32, u64>,
    pub alerts: BTreeMap<String, i64>,
}

impl Figures {
    /// The figures of a dataset. Sums saturate: the per-key sums are checked when loading, and
    /// a corrupt file's huge values must not overflow (a panic) across keys.
    pub fn of(ds: &Dataset, e: &Expect) -> Figures {
        let mut f = Figures {
            alerts: ds.alerts.clone(),
            ..Figures::default()
        };
        for t in ds.qps.values() {
            f.qps += 1;
            f.data_pkts = f.data_pkts.saturating_add(t.count("data_pkts"));
            f.cnp_pkts = f.cnp_pkts.saturating_add(t.count("cnp"));
            f.ce = f.ce.saturating_add(t.count("ce"));
            f.not_ect_data = f.not_ect_data.saturating_add(t.count("not_ect_data"));
            f.psn_gaps = f.psn_gaps.saturating_add(t.count("psn_gaps"));
            f.psn_missing = f.psn_missing.saturating_add(t.count("psn_missing"));
            f.psn_retrans = f.psn_retrans.saturating_add(t.count("psn_retrans"));
            f.naks = f.naks.saturating_add(t.count("naks"));
            f.rnr_naks = f.rnr_naks.saturating_add(t.count("rnr_naks"));
            f.data_off_dscp = f.data_off_dscp.saturating_add(
                t.hist("dscp_data")
                    .iter()
                    .filter(|(v, _)| **v != e.data_dscp)
                    .map(|(_, n)| n)
                    .fold(0, |a, n| a.saturating_add(*n)),
            );
            f.cnp_off_dscp = f.cnp_off_dscp.saturating_add(
                t.hist("dscp_cnp")
                    .iter()
                    .filter(|(v, _)| **v != e.cnp_dscp)
                    .map(|(_, n)| n)
                    .fold(0, |a, n| a.saturating_add(*n)),
            );
            if t.count("data_pkts") > 0 {
                *f.max_payloads.entry(t.max_udp_payload).or_default() += 1;
            }
        }
        for t in ds.ifaces.values() {
            for (p, x) in f.pfc_xoff.iter_mut().enumerate() {
                *x = x.saturating_add(t.count(&format!("pfc_xoff_p{p}")));
            }
            f.pause_frames = f.pause_frames.saturating_add(t.count("pause_frames"));
            f.max_xoff_per_s = t
                .max_xoff_per_s
                .iter()
                .fold(f.max_xoff_per_s, |a, b| a.max(*b));
            for (k, v) in &t.counts {
                if let Some(r) = k.strip_prefix("excluded_") {
                    let x = f.excluded.entry(r.to_string()).or_default();
                    *x = x.saturating_add(*v);
                }
            }
        }
        f
    }
}

fn pct(n: i64, of: i64) -> String {
    if of == 0 {
        "-".into()
    } else {
        format!("{:.3}%", 100.0 * n as f64 / of as f64)
    }
}

/// The bring-up checks, worst first within their order of importance.
fn check(name: &'static str, verdict: Verdict, detail: String) -> Check {
    Check {
        name,
        verdict,
        detail,
    }
}

/// The bring-up checks, in report order.
const CHECKS: [fn(&Figures, &Expect) -> Check; 11] = [
    data_marking,
    cnp_marking,
    ecn_capable_data,
    ce_answered_by_cnps,
    no_go_back_n,
    pfc_only_on_the_rdma_priority,
    no_pfc_storm,
    no_802_3x_pause,
    pfc_with_ecn,
    one_mtu,
    exclusions,
];

pub fn checks(f: &Figures, e: &Expect) -> Vec<Check> {
    CHECKS.iter().map(|c| c(f, e)).collect()
}

/// The "data marking" check.
fn data_marking(f: &Figures, e: &Expect) -> Check {
    check(
        "data marking",
        if f.data_off_dscp > 0 {
            Verdict::Fail
        } else {
            Verdict::Pass
        },
        format!(
            "{} of {} data packets not at DSCP {} ({})",
            f.data_off_dscp,
            f.data_pkts,
            e.data_dscp,
            pct(f.data_off_dscp, f.data_pkts)
        ),
    )
}

/// The "CNP marking" check.
fn cnp_marking(f: &Figures, e: &Expect) -> Check {
    check(
        "CNP marking",
        if f.cnp_off_dscp > 0 {
            Verdict::Fail
        } else {
            Verdict::Pass
        },
        format!(
            "{} of {} CNPs not at DSCP {}",
            f.cnp_off_dscp, f.cnp_pkts, e.cnp_dscp
        ),
    )
}

/// The "ECN-capable data" check.
fn ecn_capable_data(f: &Figures, _e: &Expect) -> Check {
    check(
        "ECN-capable data",
        if f.not_ect_data > 0 {
            Verdict::Fail
        } else {
            Verdict::Pass
        },
        format!(
            "{} Not-ECT data packets: DCQCN cannot react to them",
            f.not_ect_data
        ),
    )
}

/// The "CE answered by CNPs" check.
fn ce_answered_by_cnps(f: &Figures, _e: &Expect) -> Check {
    check(
        "CE answered by CNPs",
        if f.ce > 0 && f.cnp_pkts == 0 {
            Verdict::Fail
        } else if f.ce == 0 {
            Verdict::Info
        } else {
            Verdict::Pass
        },
        format!("{} CE-marked packets, {} CNPs", f.ce, f.cnp_pkts),
    )
}

/// The "no go-back-N" check.
fn no_go_back_n(f: &Figures, _e: &Expect) -> Check {
    check(
        "no go-back-N",
        if f.psn_gaps > 0 || f.psn_retrans > 0 {
            Verdict::Fail
        } else {
            Verdict::Pass
        },
        format!(
            "{} PSN gaps ({} missing), {} retransmitted, {} NAKs, {} RNR NAKs",
            f.psn_gaps, f.psn_missing, f.psn_retrans, f.naks, f.rnr_naks
        ),
    )
}

/// The "PFC only on the RDMA priority" check.
fn pfc_only_on_the_rdma_priority(f: &Figures, e: &Expect) -> Check {
    let other: i64 = f
        .pfc_xoff
        .iter()
        .enumerate()
        .filter(|(p, _)| *p != e.rdma_priority)
        .map(|(_, n)| n)
        .sum();
    check(
        "PFC only on the RDMA priority",
        if other > 0 {
            Verdict::Fail
        } else {
            Verdict::Pass
        },
        format!(
            "XOFF per priority {:?} (RDMA priority {})",
            f.pfc_xoff, e.rdma_priority
        ),
    )
}

/// The "no PFC storm" check.
fn no_pfc_storm(f: &Figures, e: &Expect) -> Check {
    check(
        "no PFC storm",
        if f.max_xoff_per_s > e.storm_xoff_per_s {
            Verdict::Fail
        } else {
            Verdict::Pass
        },
        format!(
            "largest XOFF rate {:.0}/s on one priority (threshold {:.0}/s)",
            f.max_xoff_per_s, e.storm_xoff_per_s
        ),
    )
}

/// The "no 802.3x PAUSE" check.
fn no_802_3x_pause(f: &Figures, _e: &Expect) -> Check {
    check(
        "no 802.3x PAUSE",
        if f.pause_frames > 0 {
            Verdict::Fail
        } else {
            Verdict::Pass
        },
        format!("{} PAUSE frames", f.pause_frames),
    )
}

/// The "PFC with ECN" check.
fn pfc_with_ecn(f: &Figures, _e: &Expect) -> Check {
    check(
        "PFC with ECN",
        if f.pfc_xoff.iter().sum::<i64>() > 0 && f.ce == 0 {
            Verdict::Warn
        } else {
            Verdict::Pass
        },
        "congestion handled by pauses alone when XOFF > 0 and CE = 0".into(),
    )
}

/// The "one MTU" check.
fn one_mtu(f: &Figures, _e: &Expect) -> Check {
    check(
        "one MTU",
        if f.max_payloads.len() > 1 {
            Verdict::Warn
        } else {
            Verdict::Info
        },
        format!("largest UDP payload per QP -> QPs: {:?}", f.max_payloads),
    )
}

/// The "exclusions" check.
fn exclusions(f: &Figures, _e: &Expect) -> Check {
    check(
        "exclusions",
        Verdict::Info,
        format!(
            "{:?}",
            f.excluded
                .iter()
                .filter(|(_, n)| **n > 0)
                .collect::<BTreeMap<_, _>>()
        ),
    )
}

/// One difference between a baseline and a run.
#[derive(Clone, Debug, Serialize)]
pub struct Regression {
    pub figure: &'static str,
    pub baseline: f64,
    pub now: f64,
}

/// Figures that must not get worse, as rates per million data packets (or absolute for PFC).
fn rates(f: &Figures) -> Vec<(&'static str, f64)> {
    let per_m = |n: i64| {
        if f.data_pkts == 0 {
            0.0
        } else {
            n as f64 * 1e6 / f.data_pkts as f64
        }
    };
    vec![
        ("data off-DSCP per M", per_m(f.data_off_dscp)),
        ("CNP off-DSCP", f.cnp_off_dscp as f64),
        ("Not-ECT data per M", per_m(f.not_ect_data)),
        ("PSN gaps per M", per_m(f.psn_gaps)),
        ("retransmits per M", per_m(f.psn_retrans)),
        ("NAKs per M", per_m(f.naks)),
        ("RNR NAKs per M", per_m(f.rnr_naks)),
        ("PAUSE frames", f.pause_frames as f64),
        ("max XOFF/s", f.max_xoff_per_s),
        (
            "XOFF off the RDMA priority",
            f.pfc_xoff.iter().sum::<i64>() as f64 - f.pfc_xoff[3] as f64,
        ),
    ]
}

/// Figures of `now` worse than `base` by more than `tolerance` (relative) and `slack` (absolute).
/// Largest baseline file read: a baseline is a few kilobytes, and a path such as `/dev/zero`
/// must not be read until memory runs out.
pub const MAX_BASELINE_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("{path}: {err}")]
    Io {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("{0}: larger than {max} MiB, not a baseline", max = MAX_BASELINE_BYTES >> 20)]
    TooLarge(PathBuf),
    #[error("{path} is not a baseline (a JSON file written by `roce-analyze baseline`)")]
    Json {
        path: PathBuf,
        #[source]
        err: serde_json::Error,
    },
}

/// Reads a baseline written by `roce-analyze baseline`, at most [`MAX_BASELINE_BYTES`].
pub fn read_baseline(path: &Path) -> Result<Figures, BaselineError> {
    let io = |err| BaselineError::Io {
        path: path.into(),
        err,
    };
    let mut text = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_BASELINE_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_BASELINE_BYTES {
        return Err(BaselineError::TooLarge(path.into()));
    }
    serde_json::from_slice(&text).map_err(|err| BaselineError::Json {
        path: path.into(),
        err,
    })
}

/// A `--tolerance` or `--slack`: finite and not negative (NaN would make every comparison
/// false, so a worse run would pass; infinity would accept anything).
pub fn parse_margin(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{s:?}: must be a finite number, 0 or more"));
    }
    Ok(v)
}

pub fn compare(base: &Figures, now: &Figures, tolerance: f64, slack: f64) -> Vec<Regression> {
    rates(base)
        .into_iter()
        .zip(rates(now))
        .filter(|((_, b), (_, n))| *n > b * (1.0 + tolerance) + slack)
        .map(|((figure, b), (_, n))| Regression {
            figure,
            baseline: b,
            now: n,
        })
        .collect()
}
