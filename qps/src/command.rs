//! `roce-observe qps`: every QP of the host with its process, container, progress and fate.
//!
//! Two reads `--sample` apart (the packets per second come from the PSN deltas between them).
//! Exit status 1 when a QP is in ERR or SQE (or moved there during the sample), 0 otherwise.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use contract::cli::{ExitStatus, parse_duration};
use nic::Reading;
use nic::rdma::RdmaNetlink;
use serde::Serialize;

use crate::inventory::{self, DEFAULT_MAX_QPS, DeviceRead, Excluded, Inventory, Procfs, QpRow};
use crate::progress::{self, Fate};
use crate::raw::RawReader;
use crate::verdict;

#[derive(Debug, clap::Args)]
pub struct QpsArgs {
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Only the QPs of this RDMA device (e.g. `mlx5_0`, `rxe0`).
    #[arg(long, value_name = "DEV")]
    pub device: Option<String>,
    /// Time between the two reads the packet rates are taken over (`1s`, `500ms`; `0` for one
    /// read and no rates).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub sample: Duration,
    /// At most this many QPs per read (the rest are counted, not listed).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_QPS)]
    pub max_qps: usize,
}

/// One QP of the report.
#[derive(Clone, Debug, Serialize)]
pub struct QpLine {
    #[serde(flatten)]
    pub qp: QpRow,
    /// Packets per second sent for the first time (send PSN advance), over the sample.
    pub tx_pps: Option<f64>,
    /// Packets per second received in sequence (receive PSN advance).
    pub rx_pps: Option<f64>,
    /// `error` (ERR or SQE), or the marking verdict (`ok`, `off_policy`, `lossy`, `unknown`).
    pub verdict: String,
    pub reason: String,
}

/// The whole report (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct QpsReport {
    /// `CLOCK_REALTIME` nanoseconds of the last read.
    pub time_ns: u64,
    pub sample_s: f64,
    pub devices: Vec<DeviceRead>,
    pub qps: Vec<QpLine>,
    pub excluded: Excluded,
    /// QPs that moved to ERR or SQE during the sample, or were there at the start.
    pub errors: u64,
    pub marking_unknown: u64,
    /// Notes on what this run could not read (privileges, missing processes).
    pub notes: Vec<String>,
    /// `pass` or `fail` (a QP in error).
    pub result: String,
}

/// Builds the report of two reads (`a` may be `None`: one read, no rates).
pub fn build_report(a: Option<&Inventory>, b: &Inventory, sample_s: f64, root: bool) -> QpsReport {
    let (prog, fates) = match a {
        Some(a) => progress::compare(a, b),
        None => (Vec::new(), Vec::new()),
    };
    let moved: std::collections::HashSet<(u32, u32)> = fates
        .iter()
        .filter_map(|f| match f {
            Fate::Error { row, .. } => Some(row.key()),
            _ => None,
        })
        .collect();
    let rate = |v: Option<u32>| v.filter(|_| sample_s > 0.0).map(|n| n as f64 / sample_s);
    let policy = nic::checks::Policy::nvidia();
    let mut lines = Vec::with_capacity(b.qps.len());
    let (mut errors, mut unknown, mut hidden) = (0u64, 0u64, 0u64);
    for (i, q) in b.qps.iter().enumerate() {
        let p = prog.get(i).filter(|p| (p.dev_index, p.lqpn) == q.key());
        let in_error = matches!(q.state.as_str(), "ERR" | "SQE");
        let (verdict, reason) = if in_error {
            errors += 1;
            let when = if moved.contains(&q.key()) {
                "moved there during the sample"
            } else {
                "already there at the first read"
            };
            (
                "error".to_string(),
                format!(
                    "QP in {} ({when}); last send PSN {}, receive PSN {}",
                    q.state,
                    psn(q.sq_psn),
                    psn(q.rq_psn)
                ),
            )
        } else {
            // The set-up from mlx5's raw QP context where there is one; the port's QoS
            // configuration is not read here (the priority stays unknown: DSCP is checked).
            let c = verdict::check(
                q.setup.map(|s| s.marking()),
                &policy,
                &verdict::PortQos::default(),
            );
            if c.verdict == verdict::Verdict::Unknown {
                unknown += 1;
            }
            (c.verdict.as_str().to_string(), c.reason)
        };
        if q.pid.is_some() && q.comm.is_none() {
            hidden += 1;
        }
        lines.push(QpLine {
            qp: q.clone(),
            tx_pps: rate(p.and_then(|p| p.sent)),
            rx_pps: rate(p.and_then(|p| p.received)),
            verdict,
            reason,
        });
    }
    let mut notes = Vec::new();
    if hidden > 0 {
        notes.push(format!(
            "{hidden} QPs' creating processes could not be read in /proc (gone, or hidden from \
             this user by hidepid{})",
            if root { "" } else { ": run as root" }
        ));
    }
    if unknown > 0 {
        notes.push(
            "marking (traffic class, priority) is not in the kernel's QP listing: mlx5's raw QP \
             context gives it (as root), and the live observer's modify-QP probe records it for \
             QPs set up while it runs"
                .into(),
        );
    }
    if let Some(r) = &b.raw {
        for (dev, why) in &r.unsupported {
            notes.push(format!("device {dev}: no raw QP context ({why})"));
        }
        if r.errors > 0 {
            notes.push(format!(
                "{} raw QP contexts could not be used (malformed, or disagreeing with the QP listing; see --log-level debug)",
                r.errors
            ));
        }
    }
    for d in &b.devices {
        if let Some(e) = &d.error {
            notes.push(format!("device {}: {e}", d.name));
        }
    }
    QpsReport {
        time_ns: b.time_ns,
        sample_s,
        devices: b.devices.clone(),
        qps: lines,
        excluded: b.excluded,
        errors,
        marking_unknown: unknown,
        notes,
        result: if errors > 0 { "fail" } else { "pass" }.into(),
    }
}

/// Control characters (a process may name itself with terminal escapes) shown as `?`.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn psn(v: Option<u32>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// The table.
pub fn render_text(r: &QpsReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "QPs: {} on {} RDMA device(s){}",
        r.qps.len(),
        r.devices.len(),
        if r.sample_s > 0.0 {
            format!(", packet rates over {:.1} s", r.sample_s)
        } else {
            String::new()
        }
    );
    let head = [
        "DEV",
        "PORT",
        "LQPN",
        "RQPN",
        "TYPE",
        "STATE",
        "TX PKT/S",
        "RX PKT/S",
        "PID",
        "COMMAND",
        "CONTAINER",
        "PEER",
        "VERDICT",
    ];
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
    for l in &r.qps {
        let q = &l.qp;
        rows.push(vec![
            sanitize(&q.dev),
            opt(q.port),
            q.lqpn.to_string(),
            opt(q.rqpn),
            q.qp_type.clone(),
            q.state.clone(),
            l.tx_pps.map_or("-".into(), |v| format!("{v:.0}")),
            l.rx_pps.map_or("-".into(), |v| format!("{v:.0}")),
            opt(q.pid),
            q.comm.as_deref().map_or("-".into(), sanitize),
            q.workload
                .as_ref()
                .and_then(|w| w.short())
                .unwrap_or_else(|| "-".into()),
            opt(q.dst),
            l.verdict.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect();
        let _ = writeln!(s, "{}", line.join("  ").trim_end());
    }
    for l in r.qps.iter().filter(|l| l.verdict == "error") {
        let _ = writeln!(
            s,
            "error: {} QP {} (pid {}, {}): {}",
            sanitize(&l.qp.dev),
            l.qp.lqpn,
            opt(l.qp.pid),
            l.qp.comm.as_deref().map_or("-".into(), sanitize),
            l.reason
        );
    }
    let x = &r.excluded;
    if x.duplicates + x.over_limit + x.cm_ids_unmatched > 0 {
        let _ = writeln!(
            s,
            "excluded: {} duplicate(s) of a non-atomic dump, {} over the --max-qps bound, {} rdma_cm id(s) without their QP",
            x.duplicates, x.over_limit, x.cm_ids_unmatched
        );
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(
        s,
        "Result: {}: {} QP(s) in error, {} with marking unknown",
        r.result.to_uppercase(),
        r.errors,
        r.marking_unknown
    );
    s
}

fn keep_device(inv: &mut Inventory, dev: &str) {
    inv.qps.retain(|q| q.dev == dev);
    inv.devices.retain(|d| d.name == dev);
}

fn read(args: &QpsArgs, proc: &Procfs) -> anyhow::Result<Inventory> {
    let err = |e: nic::rdma::RdmaError| {
        anyhow::anyhow!(
            "reading the RDMA subsystem's QPs: {}",
            contract::error::chain(&e)
        )
    };
    let mut inv = match RdmaNetlink::open().map_err(err)? {
        Reading::Read(mut nl) => {
            let mut inv = inventory::read(&mut nl, proc, args.max_qps).map_err(err)?;
            // Set-ups from mlx5's raw QP context (no previous read: no stall is judged).
            RawReader::default().apply(&mut nl, &mut inv, &Inventory::default());
            inv
        }
        Reading::Unavailable(u) => {
            return Err(ExitStatus {
                code: 2,
                message: Some(format!(
                    "no RDMA subsystem on this host ({}): modprobe ib_core, or run on a host with an RDMA device",
                    u.detail
                )),
            }
            .into());
        }
    };
    if let Some(d) = &args.device {
        if !inv.devices.iter().any(|x| &x.name == d) {
            let names: Vec<&str> = inv.devices.iter().map(|x| x.name.as_str()).collect();
            return Err(ExitStatus {
                code: 2,
                message: Some(format!(
                    "no RDMA device {d:?} (devices: {})",
                    if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    }
                )),
            }
            .into());
        }
        keep_device(&mut inv, d);
    }
    Ok(inv)
}

pub fn run(args: QpsArgs) -> anyhow::Result<()> {
    let proc = Procfs::default();
    let root = unsafe { libc::geteuid() } == 0;
    let (a, b, sample_s) = if args.sample.is_zero() {
        (None, read(&args, &proc)?, 0.0)
    } else {
        let a = read(&args, &proc)?;
        let t0 = Instant::now();
        std::thread::sleep(args.sample);
        let b = read(&args, &proc)?;
        (Some(a), b, t0.elapsed().as_secs_f64())
    };
    let report = build_report(a.as_ref(), &b, sample_s, root);
    let text = if args.json {
        let mut j = serde_json::to_string_pretty(&report)?;
        j.push('\n');
        j
    } else {
        render_text(&report)
    };
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e.into());
    }
    if report.result == "fail" {
        return Err(ExitStatus {
            code: 1,
            message: None,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::tests::{Script, dev, qp};
    use nic::rdma::resources::qp_state;

    #[test]
    fn the_report_gives_rates_errors_and_unknown_marking() {
        let mut s = Script {
            devices: vec![dev(1)],
            ..Script::default()
        };
        s.qps.insert(
            1,
            vec![
                qp(1, 17, Some(1), 100, 10, qp_state::RTS),
                qp(1, 18, Some(1), 0, 0, qp_state::RTS),
            ],
        );
        let proc = Procfs {
            root: "/nonexistent".into(),
        };
        let a = inventory::read(&mut s, &proc, 100).unwrap();
        s.qps.insert(
            1,
            vec![
                qp(1, 17, Some(1), 300, 20, qp_state::RTS),
                qp(1, 18, Some(1), 0, 0, qp_state::ERR),
            ],
        );
        let b = inventory::read(&mut s, &proc, 100).unwrap();
        let r = build_report(Some(&a), &b, 2.0, false);
        assert_eq!(r.qps[0].tx_pps, Some(100.0));
        assert_eq!(r.qps[0].rx_pps, Some(5.0));
        assert_eq!(r.qps[0].verdict, "unknown");
        assert_eq!(r.qps[1].verdict, "error");
        assert!(
            r.qps[1].reason.contains("moved there during the sample"),
            "{}",
            r.qps[1].reason
        );
        assert_eq!(
            (r.errors, r.marking_unknown, r.result.as_str()),
            (1, 1, "fail")
        );
        assert!(
            r.notes.iter().any(|n| n.contains("hidepid: run as root")),
            "{:?}",
            r.notes
        );
        let t = render_text(&r);
        assert!(t.contains("error: rxe1 QP 18 (pid 1, -)"), "{t}");
        assert!(
            t.contains("Result: FAIL: 1 QP(s) in error, 1 with marking unknown"),
            "{t}"
        );
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["qps"][0]["lqpn"], 17);
        assert_eq!(j["qps"][0]["tx_pps"], 100.0);
        // One read: no rates, and a QP already in ERR is still an error.
        let r = build_report(None, &b, 0.0, true);
        assert_eq!(r.qps[0].tx_pps, None);
        assert!(
            r.qps[1].reason.contains("already there"),
            "{}",
            r.qps[1].reason
        );
    }

    /// On mlx5 the raw QP context gives each QP's set-up: traffic class 106 is `ok` on DSCP,
    /// 0 is `off_policy`; a device without one is named in a note and its QPs stay unknown.
    #[test]
    fn the_report_checks_set_ups_from_the_raw_context() {
        use crate::mlx5::{lay_out, tests::rts_rc};
        let mut s = Script {
            devices: vec![dev(1), dev(2)],
            ..Script::default()
        };
        s.qps.insert(
            1,
            vec![
                qp(1, 17, Some(1), 100, 10, qp_state::RTS),
                qp(1, 18, Some(1), 5, 5, qp_state::RTS),
            ],
        );
        s.qps
            .insert(2, vec![qp(2, 19, Some(1), 5, 5, qp_state::RTS)]);
        s.raw.insert((1, 17), lay_out(&rts_rc(17, 18), true));
        let mut zero = rts_rc(18, 19);
        zero.tclass = 0;
        s.raw.insert((1, 18), lay_out(&zero, true));
        let proc = Procfs {
            root: "/nonexistent".into(),
        };
        let mut b = inventory::read(&mut s, &proc, 100).unwrap();
        RawReader::default().apply(&mut s, &mut b, &Inventory::default());
        let r = build_report(None, &b, 0.0, true);
        let v: Vec<&str> = r.qps.iter().map(|q| q.verdict.as_str()).collect();
        assert_eq!(v, ["ok", "off_policy", "unknown"]);
        assert_eq!(r.marking_unknown, 1);
        assert!(
            r.notes
                .iter()
                .any(|n| n.starts_with("device rxe2: no raw QP context")),
            "{:?}",
            r.notes
        );
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["qps"][1]["setup"]["traffic_class"], 0);
        assert_eq!(j["qps"][1]["setup"]["source"], "mlx5_qpc");
    }
}
