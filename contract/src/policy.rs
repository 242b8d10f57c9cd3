//! Expected marking and alert thresholds: vendor profiles and the `--policy` TOML file.
//!
//! A policy file (every key optional; unknown keys are errors):
//!
//! ```toml
//! profile = "nvidia"        # start from a profile (nvidia | broadcom), default nvidia
//! rdma_priority = 3         # the one priority PFC is expected on
//! expected_mtu = 4096       # RoCE path MTU, bytes (256, 512, 1024, 2048, 4096)
//!
//! [data]                    # RoCE data (every opcode but ACKs and CNPs)
//! dscp = 26                 # 0-63 or "any"
//! pcp = 3                   # 0-7, "untagged" or "any" (profiles: the class's priority)
//! tags = "optional"         # "optional": untagged frames pass the PCP check;
//!                           # "required": every frame tagged with that PCP
//! ecn = "ect"               # "ect": Not-ECT is a violation; "any": not checked
//! [ack]                     # opcodes 0x11, 0x12, 0x51, 0x52
//! [cnp]                     # opcode 0x81
//!
//! [thresholds]
//! pfc_storm_xoff_per_s = 1000    # XOFF frames per priority per second
//! ce_without_cnp_min_ce = 10     # CE packets per interval (IP pair) with no CNP back
//! pfc_without_ecn_min_xoff = 1   # XOFF frames per interval with no CE at all
//! hold_down_s = 10               # per (rule, key): one alert, then a summary after this
//! resolve_after_s = 300          # Alertmanager: resolved this long after the last occurrence
//! aggregate_keys = 4             # this many QP keys breaking a rule alike in an interval: one alert (0: never)
//! qp_stall_s = 10                # host QPs: unacknowledged packets and no progress this long
//! qp_incarnation_idle_s = 10     # idle longer, then not the next PSN: a new QP (0: off)
//! ```
//!
//! Errors name the file, the line and the key.

use std::path::Path;

use observer_common::maps::{ANY, PCP_IF_TAGGED, Policy, class, policy_flags};
use observer_common::parse::PCP_NONE;
use serde::Deserialize;
use toml::Spanned;

use crate::vendor::{self, Vendor};

#[derive(Clone, Debug, PartialEq)]
pub struct Thresholds {
    /// PFC storm: XOFF frames per priority per second above this.
    pub pfc_storm_xoff_per_s: u64,
    /// CE without CNP: at least this many CE packets from A to B in one interval, and no CNP
    /// from B to A.
    pub ce_without_cnp_min_ce: u64,
    /// PFC without ECN: at least this many XOFF frames in one interval on an interface that saw
    /// RoCE traffic but no CE mark at all.
    pub pfc_without_ecn_min_xoff: u64,
    /// Hold-down per (rule, key), nanoseconds: after an alert, further occurrences are counted
    /// and reported as one summary alert when the hold-down ends.
    pub hold_down_ns: u64,
    /// Alertmanager: an alert is resolved once this long passed with no new occurrence of its
    /// rule and key, nanoseconds (minutes by default: a page must not vanish during a break).
    pub resolve_after_ns: u64,
    /// Host QPs (mlx5's raw context): an RC QP in RTS with packets sent and not acknowledged,
    /// whose send PSN and acknowledged PSN have not moved for this long, is stalled,
    /// nanoseconds.
    pub qp_stall_ns: u64,
    /// This many QP keys or more of one interface and direction breaking a rule the same way
    /// in one interval (the same rule, class and cause, e.g. DSCP 0) are one alert naming them,
    /// not one alert each; 0: never aggregated.
    pub aggregate_keys: u64,
    /// `latency_high`: a QP's ACK round trip or READ latency whose 99th percentile in an
    /// interval is over this, nanoseconds (0: off) ...
    pub latency_p99_ns: u64,
    /// ... over at least this many samples of the interval.
    pub latency_min_samples: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            pfc_storm_xoff_per_s: 1000,
            ce_without_cnp_min_ce: 10,
            pfc_without_ecn_min_xoff: 1,
            hold_down_ns: 10_000_000_000,
            resolve_after_ns: 300_000_000_000,
            qp_stall_ns: 10_000_000_000,
            aggregate_keys: 4,
            latency_p99_ns: 1_000_000,
            latency_min_samples: 100,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    /// The vendor profile the policy starts from (a file's `profile`, nvidia when absent): what
    /// the policy does not say (the CNPs' priority, DSCPs left "any") is the profile's.
    pub profile: Vendor,
    /// Kernel form (DSCP / PCP / ECN-capable per class, RDMA priority).
    pub expected: Policy,
    /// Expected RoCE MTU (largest UDP payload a QP should reach), bytes.
    pub expected_mtu: u32,
    pub thresholds: Thresholds,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown profile {0:?} (known: {known})", known = vendor::names())]
    UnknownProfile(String),
    #[error("cannot read policy file {path}")]
    Read {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("policy file {path} is larger than {} KiB: not a policy file", MAX_POLICY_BYTES >> 10)]
    TooLarge { path: String },
    #[error("{path}:{line}: {key}: {msg}")]
    Invalid {
        path: String,
        line: usize,
        key: String,
        msg: String,
    },
    #[error("{path}:{line}: {msg}")]
    Syntax {
        path: String,
        line: usize,
        msg: String,
    },
}

/// Largest policy file read (a policy is a few hundred bytes; `/dev/zero` must not be read
/// until memory runs out).
pub const MAX_POLICY_BYTES: u64 = 1 << 20;

impl PolicyConfig {
    /// A vendor profile of [`crate::vendor`]: the DSCPs of data, ACKs and CNPs, ECT on data,
    /// PFC on the RDMA priority, the path MTU, and the PCP of tagged frames: data and ACKs on
    /// the RDMA priority, CNPs on the profile's CNP priority. Untagged frames pass the PCP
    /// check (hosts behind DSCP-trust ports send untagged); a file can require tags.
    pub fn profile(name: &str) -> Result<PolicyConfig, PolicyError> {
        let v =
            Vendor::from_name(name).ok_or_else(|| PolicyError::UnknownProfile(name.to_string()))?;
        Ok(PolicyConfig::of(v))
    }

    /// The policy of vendor profile `vendor` (see [`PolicyConfig::profile`]).
    pub fn of(vendor: Vendor) -> PolicyConfig {
        let v = vendor.profile();
        let mut p = Policy::NONE;
        p.dscp = [v.data_dscp, v.ack_dscp, v.cnp_dscp];
        p.pcp = [
            PCP_IF_TAGGED | v.rdma_priority,
            PCP_IF_TAGGED | v.rdma_priority,
            PCP_IF_TAGGED | v.cnp_priority,
        ];
        p.ecn_capable = [(v.data_ecn != 0) as u8, 0, 0];
        p.rdma_priority = v.rdma_priority;
        p.flags = policy_flags::ENABLED;
        PolicyConfig {
            profile: vendor,
            expected: p,
            expected_mtu: v.mtu,
            thresholds: Thresholds::default(),
        }
    }

    pub fn from_file(path: &Path) -> Result<PolicyConfig, PolicyError> {
        use std::io::Read;
        let read_err = |err| PolicyError::Read {
            path: path.display().to_string(),
            err,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_POLICY_BYTES + 1).read_to_string(&mut text))
            .map_err(read_err)?;
        if text.len() as u64 > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                path: path.display().to_string(),
            });
        }
        Self::from_toml(&text, &path.display().to_string())
    }

    /// The policy as a complete policy file (every key written, so that it reads back as the
    /// same policy whatever the defaults become): what a run records in its output tree
    /// (`policy-<host>.toml`) for `roce-analyze`.
    pub fn to_toml(&self) -> String {
        use std::fmt::Write;
        let e = &self.expected;
        let mut s = String::from(
            "# The policy this run observed with (roce-observe policy file, docs/policy.md).\n",
        );
        let _ = writeln!(s, "profile = \"{}\"", self.profile);
        let _ = writeln!(s, "rdma_priority = {}", e.rdma_priority);
        let _ = writeln!(s, "expected_mtu = {}", self.expected_mtu);
        for c in 0..class::COUNT {
            let _ = writeln!(s, "\n[{}]", class::NAMES[c]);
            let _ = match e.dscp[c] {
                ANY => writeln!(s, "dscp = \"any\""),
                v => writeln!(s, "dscp = {v}"),
            };
            let _ = match e.pcp[c] {
                ANY => writeln!(s, "pcp = \"any\""),
                PCP_NONE => writeln!(s, "pcp = \"untagged\""),
                v if v & PCP_IF_TAGGED != 0 => {
                    writeln!(s, "pcp = {}\ntags = \"optional\"", v & 7)
                }
                v => writeln!(s, "pcp = {v}\ntags = \"required\""),
            };
            let ecn = if e.ecn_capable[c] != 0 { "ect" } else { "any" };
            let _ = writeln!(s, "ecn = \"{ecn}\"");
        }
        let t = &self.thresholds;
        let _ = writeln!(s, "\n[thresholds]");
        let _ = writeln!(s, "pfc_storm_xoff_per_s = {}", t.pfc_storm_xoff_per_s);
        let _ = writeln!(s, "ce_without_cnp_min_ce = {}", t.ce_without_cnp_min_ce);
        let _ = writeln!(
            s,
            "pfc_without_ecn_min_xoff = {}",
            t.pfc_without_ecn_min_xoff
        );
        let _ = writeln!(s, "hold_down_s = {}", t.hold_down_ns as f64 / 1e9);
        let _ = writeln!(s, "resolve_after_s = {}", t.resolve_after_ns as f64 / 1e9);
        let _ = writeln!(s, "aggregate_keys = {}", t.aggregate_keys);
        let _ = writeln!(s, "qp_stall_s = {}", t.qp_stall_ns as f64 / 1e9);
        let _ = writeln!(s, "latency_p99_us = {}", t.latency_p99_ns as f64 / 1e3);
        let _ = writeln!(s, "latency_min_samples = {}", t.latency_min_samples);
        let _ = writeln!(
            s,
            "qp_incarnation_idle_s = {}",
            e.incarnation_idle_ms as f64 / 1e3
        );
        s
    }

    /// Parses policy TOML; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<PolicyConfig, PolicyError> {
        let line_of = |off: usize| text[..off.min(text.len())].matches('\n').count() + 1;
        let raw: RawPolicy = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(s.start)).unwrap_or(0);
            PolicyError::Syntax {
                path: origin.to_string(),
                line,
                msg: e.message().trim().to_string(),
            }
        })?;
        let invalid = |key: &str, span: std::ops::Range<usize>, msg: String| PolicyError::Invalid {
            path: origin.to_string(),
            line: line_of(span.start),
            key: key.to_string(),
            msg,
        };
        let mut cfg = base_profile(raw.profile.as_ref(), &invalid)?;
        apply_top_level(&raw, &mut cfg, &invalid)?;
        for (c, sec) in [
            (class::DATA, &raw.data),
            (class::ACK, &raw.ack),
            (class::CNP, &raw.cnp),
        ] {
            if let Some(sec) = sec {
                apply_class(c, sec, &mut cfg.expected, &invalid)?;
            }
        }
        if let Some(t) = &raw.thresholds {
            apply_thresholds(t, &mut cfg.thresholds, &invalid)?;
            if let Some(v) = &t.qp_incarnation_idle_s {
                let key = "thresholds.qp_incarnation_idle_s";
                let ms = seconds(v, key, &invalid)? * 1e3;
                if ms > u32::MAX as f64 {
                    return Err(invalid(
                        key,
                        v.span(),
                        format!("at most {} s", u32::MAX / 1000),
                    ));
                }
                cfg.expected.incarnation_idle_ms = ms.round() as u32;
            }
        }
        Ok(cfg)
    }
}

/// Builds the [`PolicyError::Invalid`] of a key from its span and message (knows the file and
/// its lines).
type Invalid<'a> = dyn Fn(&str, std::ops::Range<usize>, String) -> PolicyError + 'a;

/// The profile the file starts from (`profile`; nvidia when absent).
fn base_profile(
    profile: Option<&Spanned<toml::Value>>,
    invalid: &Invalid,
) -> Result<PolicyConfig, PolicyError> {
    let Some(p) = profile else {
        return PolicyConfig::profile("nvidia");
    };
    match p.get_ref() {
        toml::Value::String(s) => PolicyConfig::profile(s)
            .map_err(|e| invalid("profile", p.span(), crate::error::chain(&e))),
        v => Err(invalid(
            "profile",
            p.span(),
            format!("expected a string, found {}", v.type_str()),
        )),
    }
}

/// The top-level keys past `profile`: `rdma_priority`, `expected_mtu`.
fn apply_top_level(
    raw: &RawPolicy,
    cfg: &mut PolicyConfig,
    invalid: &Invalid,
) -> Result<(), PolicyError> {
    if let Some(v) = &raw.rdma_priority {
        let prio = int_in(v, "rdma_priority", 0, 7, invalid)? as u8;
        cfg.expected.rdma_priority = prio;
        // tagged data and ACKs go on the RDMA priority (unless a class section says otherwise)
        for c in [class::DATA, class::ACK] {
            if cfg.expected.pcp[c] & PCP_IF_TAGGED != 0 && cfg.expected.pcp[c] != ANY {
                cfg.expected.pcp[c] = PCP_IF_TAGGED | prio;
            }
        }
    }
    if let Some(v) = &raw.expected_mtu {
        let m = int_in(v, "expected_mtu", 256, 4096, invalid)?;
        if ![256, 512, 1024, 2048, 4096].contains(&m) {
            return Err(invalid(
                "expected_mtu",
                v.span(),
                format!("{m} is not a RoCE MTU (256, 512, 1024, 2048, 4096)"),
            ));
        }
        cfg.expected_mtu = m as u32;
    }
    Ok(())
}

/// One traffic class's section (`[data]`, `[ack]`, `[cnp]`): `dscp`, `pcp`, `tags`, `ecn`.
fn apply_class(
    c: usize,
    sec: &RawClass,
    expected: &mut Policy,
    invalid: &Invalid,
) -> Result<(), PolicyError> {
    let name = class::NAMES[c];
    if let Some(v) = &sec.dscp {
        let key = format!("{name}.dscp");
        expected.dscp[c] = match v.get_ref() {
            toml::Value::String(s) if s == "any" => ANY,
            _ => int_in(v, &key, 0, 63, invalid)? as u8,
        };
    }
    if let Some(v) = &sec.pcp {
        let key = format!("{name}.pcp");
        expected.pcp[c] = match v.get_ref() {
            toml::Value::String(s) if s == "any" => ANY,
            toml::Value::String(s) if s == "untagged" => PCP_NONE,
            _ => PCP_IF_TAGGED | int_in(v, &key, 0, 7, invalid)? as u8,
        };
    }
    if let Some(v) = &sec.tags {
        let key = format!("{name}.tags");
        let want = expected.pcp[c];
        let pcp = want & 7;
        expected.pcp[c] = match v.get_ref() {
            toml::Value::String(s) if s == "optional" && (want == ANY || want == PCP_NONE) => want,
            toml::Value::String(s) if s == "optional" => PCP_IF_TAGGED | pcp,
            toml::Value::String(s) if s == "required" && (want == ANY || want == PCP_NONE) => {
                return Err(invalid(
                    &key,
                    v.span(),
                    "\"required\" needs a pcp of 0-7 in the section (the PCP tagged frames carry)"
                        .into(),
                ));
            }
            toml::Value::String(s) if s == "required" => pcp,
            v2 => {
                return Err(invalid(
                    &key,
                    v.span(),
                    format!("expected \"optional\" or \"required\", found {}", show(v2)),
                ));
            }
        };
    }
    if let Some(v) = &sec.ecn {
        let key = format!("{name}.ecn");
        expected.ecn_capable[c] = match v.get_ref() {
            toml::Value::String(s) if s == "ect" => 1,
            toml::Value::String(s) if s == "any" => 0,
            v2 => {
                return Err(invalid(
                    &key,
                    v.span(),
                    format!("expected \"ect\" or \"any\", found {}", show(v2)),
                ));
            }
        };
    }
    Ok(())
}

/// The `[thresholds]` section.
fn apply_thresholds(
    t: &RawThresholds,
    th: &mut Thresholds,
    invalid: &Invalid,
) -> Result<(), PolicyError> {
    let at_least_one = |v, key| int_in(v, key, 1, i64::MAX, invalid).map(|n| n as u64);
    if let Some(v) = &t.pfc_storm_xoff_per_s {
        th.pfc_storm_xoff_per_s = at_least_one(v, "thresholds.pfc_storm_xoff_per_s")?;
    }
    if let Some(v) = &t.ce_without_cnp_min_ce {
        th.ce_without_cnp_min_ce = at_least_one(v, "thresholds.ce_without_cnp_min_ce")?;
    }
    if let Some(v) = &t.pfc_without_ecn_min_xoff {
        th.pfc_without_ecn_min_xoff = at_least_one(v, "thresholds.pfc_without_ecn_min_xoff")?;
    }
    if let Some(v) = &t.hold_down_s {
        th.hold_down_ns = (seconds(v, "thresholds.hold_down_s", invalid)? * 1e9) as u64;
    }
    if let Some(v) = &t.resolve_after_s {
        th.resolve_after_ns =
            (seconds(v, "thresholds.resolve_after_s", invalid)?.min(1e9) * 1e9) as u64;
    }
    if let Some(v) = &t.qp_stall_s {
        th.qp_stall_ns = (seconds(v, "thresholds.qp_stall_s", invalid)?.min(1e9) * 1e9) as u64;
    }
    if let Some(v) = &t.aggregate_keys {
        th.aggregate_keys = int_in(v, "thresholds.aggregate_keys", 0, 1_000_000, invalid)? as u64;
    }
    if let Some(v) = &t.latency_p99_us {
        // at most the histograms' top edge (8 s)
        th.latency_p99_ns = (amount(v, "thresholds.latency_p99_us", "microseconds", invalid)?
            .min(8e6)
            * 1e3) as u64;
    }
    if let Some(v) = &t.latency_min_samples {
        th.latency_min_samples = at_least_one(v, "thresholds.latency_min_samples")?;
    }
    Ok(())
}

/// A duration in seconds: an integer or a finite float, 0 or more.
fn seconds(v: &Spanned<toml::Value>, key: &str, invalid: &Invalid) -> Result<f64, PolicyError> {
    amount(v, key, "seconds", invalid)
}

/// An amount of `unit`: an integer or a finite float, 0 or more.
fn amount(
    v: &Spanned<toml::Value>,
    key: &str,
    unit: &str,
    invalid: &Invalid,
) -> Result<f64, PolicyError> {
    match v.get_ref() {
        toml::Value::Integer(i) if *i >= 0 => Ok(*i as f64),
        toml::Value::Float(f) if *f >= 0.0 && f.is_finite() => Ok(*f),
        v2 => Err(invalid(
            key,
            v.span(),
            format!("expected {unit} (a number >= 0), found {}", show(v2)),
        )),
    }
}

fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => other.type_str().to_string(),
    }
}

fn int_in(
    v: &Spanned<toml::Value>,
    key: &str,
    lo: i64,
    hi: i64,
    invalid: &Invalid,
) -> Result<i64, PolicyError> {
    match v.get_ref() {
        toml::Value::Integer(i) if (lo..=hi).contains(i) => Ok(*i),
        toml::Value::Integer(i) => Err(invalid(
            key,
            v.span(),
            format!("{i} is out of range {lo}..={hi}"),
        )),
        other => Err(invalid(
            key,
            v.span(),
            format!("expected an integer, found {}", show(other)),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    profile: Option<Spanned<toml::Value>>,
    rdma_priority: Option<Spanned<toml::Value>>,
    expected_mtu: Option<Spanned<toml::Value>>,
    data: Option<RawClass>,
    ack: Option<RawClass>,
    cnp: Option<RawClass>,
    thresholds: Option<RawThresholds>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClass {
    dscp: Option<Spanned<toml::Value>>,
    pcp: Option<Spanned<toml::Value>>,
    tags: Option<Spanned<toml::Value>>,
    ecn: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThresholds {
    pfc_storm_xoff_per_s: Option<Spanned<toml::Value>>,
    ce_without_cnp_min_ce: Option<Spanned<toml::Value>>,
    pfc_without_ecn_min_xoff: Option<Spanned<toml::Value>>,
    hold_down_s: Option<Spanned<toml::Value>>,
    resolve_after_s: Option<Spanned<toml::Value>>,
    qp_stall_s: Option<Spanned<toml::Value>>,
    qp_incarnation_idle_s: Option<Spanned<toml::Value>>,
    aggregate_keys: Option<Spanned<toml::Value>>,
    latency_p99_us: Option<Spanned<toml::Value>>,
    latency_min_samples: Option<Spanned<toml::Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy written by `to_toml` reads back as itself, for the profiles and a file that
    /// sets every key away from its default.
    #[test]
    fn to_toml_round_trips() {
        let mut all = vec![
            PolicyConfig::profile("nvidia").unwrap(),
            PolicyConfig::profile("broadcom").unwrap(),
        ];
        all.push(
            PolicyConfig::from_toml(
                "rdma_priority = 5\nexpected_mtu = 1024\n[data]\ndscp = \"any\"\npcp = \"untagged\"\necn = \"any\"\n[ack]\npcp = 7\necn = \"ect\"\n[cnp]\ndscp = 0\n[thresholds]\npfc_storm_xoff_per_s = 7\nce_without_cnp_min_ce = 3\npfc_without_ecn_min_xoff = 9\nhold_down_s = 2.5\nqp_incarnation_idle_s = 0.25\n",
                "p.toml",
            )
            .unwrap(),
        );
        for p in all {
            let text = p.to_toml();
            assert_eq!(
                PolicyConfig::from_toml(&text, "written").unwrap(),
                p,
                "{text}"
            );
        }
    }

    /// `--policy /dev/zero` is an error after 1 MiB, not a read until memory runs out.
    #[test]
    fn an_endless_policy_file_is_refused() {
        let e = PolicyConfig::from_file(Path::new("/dev/zero")).unwrap_err();
        assert!(
            matches!(&e, PolicyError::TooLarge { .. } | PolicyError::Read { .. }),
            "{e}"
        );
        assert!(e.to_string().contains("/dev/zero"), "{e}");
    }

    fn err(text: &str) -> String {
        PolicyConfig::from_toml(text, "p.toml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn profiles() {
        let n = PolicyConfig::profile("nvidia").unwrap();
        assert_eq!(n.expected.dscp, [26, 26, 48]);
        assert_eq!(n.expected.ecn_capable, [1, 0, 0]);
        assert_eq!(n.expected.rdma_priority, 3);
        assert_ne!(n.expected.flags & policy_flags::ENABLED, 0);
        assert!(PolicyConfig::profile("broadcom").is_ok());
        assert!(matches!(
            PolicyConfig::profile("x"),
            Err(PolicyError::UnknownProfile(_))
        ));
    }

    /// Profiles check the PCP of tagged frames only (data and ACKs on the RDMA priority, CNPs
    /// on the CNP priority); `tags = "required"` makes untagged frames violations too; the
    /// recorded policy reads back the same.
    #[test]
    fn pcp_of_tagged_frames_and_required_tags() {
        let nv = PolicyConfig::profile("nvidia").unwrap();
        assert_eq!(
            nv.expected.pcp,
            [PCP_IF_TAGGED | 3, PCP_IF_TAGGED | 3, PCP_IF_TAGGED | 6]
        );
        let p = PolicyConfig::from_toml(
            "rdma_priority = 5
",
            "p.toml",
        )
        .unwrap();
        assert_eq!(
            p.expected.pcp,
            [PCP_IF_TAGGED | 5, PCP_IF_TAGGED | 5, PCP_IF_TAGGED | 6]
        );
        let p = PolicyConfig::from_toml(
            "[data]
tags = \"required\"
[ack]
pcp = 2
tags = \"required\"
[cnp]
pcp = \"any\"
",
            "p.toml",
        )
        .unwrap();
        assert_eq!(p.expected.pcp, [3, 2, ANY]);
        assert_eq!(PolicyConfig::from_toml(&p.to_toml(), "r").unwrap(), p);
        assert_eq!(PolicyConfig::from_toml(&nv.to_toml(), "r").unwrap(), nv);
        let e = PolicyConfig::from_toml(
            "[cnp]
pcp = \"untagged\"
tags = \"required\"
",
            "p.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("p.toml:3: cnp.tags: \"required\" needs a pcp of 0-7"),
            "{e}"
        );
        let e = PolicyConfig::from_toml(
            "[data]
tags = true
",
            "p.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("data.tags: expected \"optional\" or \"required\""),
            "{e}"
        );
    }

    #[test]
    fn full_file() {
        let p = PolicyConfig::from_toml(
            "profile = \"broadcom\"\nrdma_priority = 4\nexpected_mtu = 1024\n[data]\ndscp = 24\npcp = 4\necn = \"ect\"\n[cnp]\ndscp = \"any\"\npcp = \"untagged\"\n[thresholds]\nhold_down_s = 2.5\npfc_storm_xoff_per_s = 50\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(p.expected.rdma_priority, 4);
        assert_eq!(p.expected_mtu, 1024);
        assert_eq!(p.expected.dscp, [24, 26, ANY]);
        // [data] pcp = 4: tagged data on 4; ACKs follow rdma_priority 4; CNPs untagged
        assert_eq!(
            p.expected.pcp,
            [PCP_IF_TAGGED | 4, PCP_IF_TAGGED | 4, PCP_NONE]
        );
        assert_eq!(p.thresholds.hold_down_ns, 2_500_000_000);
        assert_eq!(p.thresholds.pfc_storm_xoff_per_s, 50);
    }

    #[test]
    fn errors_name_key_and_line() {
        assert_eq!(
            err("rdma_priority = 3\n\n[data]\ndscp = 64\n"),
            "p.toml:4: data.dscp: 64 is out of range 0..=63"
        );
        assert_eq!(
            err("[cnp]\npcp = \"high\"\n"),
            "p.toml:2: cnp.pcp: expected an integer, found \"high\""
        );
        assert_eq!(
            err("expected_mtu = 1500\n"),
            "p.toml:1: expected_mtu: 1500 is not a RoCE MTU (256, 512, 1024, 2048, 4096)"
        );
        assert_eq!(
            err("[data]\necn = 2\n"),
            "p.toml:2: data.ecn: expected \"ect\" or \"any\", found 2"
        );
        let e = err("[data]\ndscp = 26\ndcsp = 3\n");
        assert!(e.starts_with("p.toml:3: ") && e.contains("dcsp"), "{e}");
        let e = err("[thresholds]\nhold_down = 3\n");
        assert!(
            e.starts_with("p.toml:2: ") && e.contains("hold_down"),
            "{e}"
        );
        let e = err("rdma_priority = \n");
        assert!(e.starts_with("p.toml:1: "), "{e}");
        assert_eq!(
            err("profile = \"cisco\"\n"),
            "p.toml:1: profile: unknown profile \"cisco\" (known: nvidia, broadcom)"
        );
    }

    /// Every value branch of the parser: what each accepts, and each error message exactly.
    #[test]
    fn every_key_accepts_and_refuses_exactly() {
        assert_eq!(
            PolicyConfig::from_toml("", "p.toml").unwrap(),
            PolicyConfig::profile("nvidia").unwrap()
        );
        let p = PolicyConfig::from_toml(
            "profile = \"nvidia\"\nrdma_priority = 0\nexpected_mtu = 4096\n[data]\ndscp = 0\npcp = \"any\"\necn = \"any\"\n[ack]\ndscp = 63\npcp = 7\necn = \"ect\"\n[cnp]\ndscp = 48\npcp = 0\n[thresholds]\npfc_storm_xoff_per_s = 1\nce_without_cnp_min_ce = 2\npfc_without_ecn_min_xoff = 3\nhold_down_s = 0\naggregate_keys = 0\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(p.expected.rdma_priority, 0);
        assert_eq!(p.expected_mtu, 4096);
        assert_eq!(p.expected.dscp, [0, 63, 48]);
        assert_eq!(p.expected.pcp, [ANY, PCP_IF_TAGGED | 7, PCP_IF_TAGGED]);
        assert_eq!(p.expected.ecn_capable, [0, 1, 0]);
        assert_eq!(
            p.thresholds,
            Thresholds {
                pfc_storm_xoff_per_s: 1,
                ce_without_cnp_min_ce: 2,
                pfc_without_ecn_min_xoff: 3,
                hold_down_ns: 0,
                resolve_after_ns: 300_000_000_000,
                qp_stall_ns: 10_000_000_000,
                aggregate_keys: 0,
                latency_p99_ns: 1_000_000,
                latency_min_samples: 100,
            }
        );
        let cases = [
            "profile = 3\n",
            "profile = [\"nvidia\"]\n",
            "rdma_priority = 8\n",
            "rdma_priority = -1\n",
            "rdma_priority = \"3\"\n",
            "rdma_priority = 3.0\n",
            "expected_mtu = 9000\n",
            "expected_mtu = 128\n",
            "expected_mtu = 3000\n",
            "expected_mtu = true\n",
            "[ack]\ndscp = \"all\"\n",
            "[ack]\ndscp = -1\n",
            "[cnp]\npcp = 8\n",
            "[cnp]\necn = \"ECT\"\n",
            "[cnp]\necn = 1.5\n",
            "[cnp]\necn = true\n",
            "[cnp]\necn = [1]\n",
            "[data]\necn = { a = 1 }\n",
            "[data]\nflow = 1\n",
            "[thresholds]\npfc_storm_xoff_per_s = 0\n",
            "[thresholds]\nce_without_cnp_min_ce = \"ten\"\n",
            "[thresholds]\npfc_without_ecn_min_xoff = 0\n",
            "[thresholds]\nhold_down_s = -1\n",
            "[thresholds]\nhold_down_s = -0.5\n",
            "[thresholds]\nhold_down_s = nan\n",
            "[thresholds]\nhold_down_s = inf\n",
            "[thresholds]\nhold_down_s = \"10s\"\n",
            "[thresholds]\nqp_incarnation_idle_s = -2\n",
            "[thresholds]\nqp_incarnation_idle_s = 5000000\n",
            "mtu = 4096\n",
            "[data\n",
            "x\n",
            "rdma_priority = 3\nrdma_priority = 4\n",
        ];
        let got: String = cases
            .iter()
            .map(|c| format!("{c:?} => {}\n", err(c)))
            .collect();
        assert_eq!(got, GOLDEN_ERRORS);
        let p = PolicyConfig::from_toml("[thresholds]\nhold_down_s = 1\n", "p.toml").unwrap();
        assert_eq!(p.thresholds.hold_down_ns, 1_000_000_000);
        assert_eq!(
            p.thresholds.resolve_after_ns, 300_000_000_000,
            "the default"
        );
        let p = PolicyConfig::from_toml("[thresholds]\nresolve_after_s = 90\n", "p.toml").unwrap();
        assert_eq!(p.thresholds.resolve_after_ns, 90_000_000_000);
        let p = PolicyConfig::from_toml("[thresholds]\nqp_stall_s = 2.5\n", "p.toml").unwrap();
        assert_eq!(p.thresholds.qp_stall_ns, 2_500_000_000);
        assert!(PolicyConfig::from_toml("[thresholds]\nqp_stall_s = \"x\"\n", "p.toml").is_err());
        assert_eq!(
            PolicyConfig::from_toml(&p.to_toml(), "again")
                .unwrap()
                .thresholds,
            p.thresholds,
            "recorded and read back"
        );
        assert!(PolicyConfig::from_toml("[thresholds]\nresolve_after_s = -1\n", "p.toml").is_err());
        assert_eq!(p.expected.incarnation_idle_ms, 10_000, "the default");
        let p = PolicyConfig::from_toml("[thresholds]\nqp_incarnation_idle_s = 2.5\n", "p.toml");
        assert_eq!(p.unwrap().expected.incarnation_idle_ms, 2_500);
        let p = PolicyConfig::from_toml("[thresholds]\nqp_incarnation_idle_s = 0\n", "p.toml");
        assert_eq!(p.unwrap().expected.incarnation_idle_ms, 0, "off");
    }

    const GOLDEN_ERRORS: &str = r#""profile = 3\n" => p.toml:1: profile: expected a string, found integer
"profile = [\"nvidia\"]\n" => p.toml:1: profile: expected a string, found array
"rdma_priority = 8\n" => p.toml:1: rdma_priority: 8 is out of range 0..=7
"rdma_priority = -1\n" => p.toml:1: rdma_priority: -1 is out of range 0..=7
"rdma_priority = \"3\"\n" => p.toml:1: rdma_priority: expected an integer, found "3"
"rdma_priority = 3.0\n" => p.toml:1: rdma_priority: expected an integer, found 3
"expected_mtu = 9000\n" => p.toml:1: expected_mtu: 9000 is out of range 256..=4096
"expected_mtu = 128\n" => p.toml:1: expected_mtu: 128 is out of range 256..=4096
"expected_mtu = 3000\n" => p.toml:1: expected_mtu: 3000 is not a RoCE MTU (256, 512, 1024, 2048, 4096)
"expected_mtu = true\n" => p.toml:1: expected_mtu: expected an integer, found true
"[ack]\ndscp = \"all\"\n" => p.toml:2: ack.dscp: expected an integer, found "all"
"[ack]\ndscp = -1\n" => p.toml:2: ack.dscp: -1 is out of range 0..=63
"[cnp]\npcp = 8\n" => p.toml:2: cnp.pcp: 8 is out of range 0..=7
"[cnp]\necn = \"ECT\"\n" => p.toml:2: cnp.ecn: expected "ect" or "any", found "ECT"
"[cnp]\necn = 1.5\n" => p.toml:2: cnp.ecn: expected "ect" or "any", found 1.5
"[cnp]\necn = true\n" => p.toml:2: cnp.ecn: expected "ect" or "any", found true
"[cnp]\necn = [1]\n" => p.toml:2: cnp.ecn: expected "ect" or "any", found array
"[data]\necn = { a = 1 }\n" => p.toml:2: data.ecn: expected "ect" or "any", found table
"[data]\nflow = 1\n" => p.toml:2: unknown field `flow`, expected one of `dscp`, `pcp`, `tags`, `ecn`
"[thresholds]\npfc_storm_xoff_per_s = 0\n" => p.toml:2: thresholds.pfc_storm_xoff_per_s: 0 is out of range 1..=9223372036854775807
"[thresholds]\nce_without_cnp_min_ce = \"ten\"\n" => p.toml:2: thresholds.ce_without_cnp_min_ce: expected an integer, found "ten"
"[thresholds]\npfc_without_ecn_min_xoff = 0\n" => p.toml:2: thresholds.pfc_without_ecn_min_xoff: 0 is out of range 1..=9223372036854775807
"[thresholds]\nhold_down_s = -1\n" => p.toml:2: thresholds.hold_down_s: expected seconds (a number >= 0), found -1
"[thresholds]\nhold_down_s = -0.5\n" => p.toml:2: thresholds.hold_down_s: expected seconds (a number >= 0), found -0.5
"[thresholds]\nhold_down_s = nan\n" => p.toml:2: thresholds.hold_down_s: expected seconds (a number >= 0), found NaN
"[thresholds]\nhold_down_s = inf\n" => p.toml:2: thresholds.hold_down_s: expected seconds (a number >= 0), found inf
"[thresholds]\nhold_down_s = \"10s\"\n" => p.toml:2: thresholds.hold_down_s: expected seconds (a number >= 0), found "10s"
"[thresholds]\nqp_incarnation_idle_s = -2\n" => p.toml:2: thresholds.qp_incarnation_idle_s: expected seconds (a number >= 0), found -2
"[thresholds]\nqp_incarnation_idle_s = 5000000\n" => p.toml:2: thresholds.qp_incarnation_idle_s: at most 4294967 s
"mtu = 4096\n" => p.toml:1: unknown field `mtu`, expected one of `profile`, `rdma_priority`, `expected_mtu`, `data`, `ack`, `cnp`, `thresholds`
"[data\n" => p.toml:1: unclosed table, expected `]`
"x\n" => p.toml:1: key with no value, expected `=`
"rdma_priority = 3\nrdma_priority = 4\n" => p.toml:2: duplicate key
"#;
}
