//! A NIC dump a customer sends (`roce-observe nic --from DIR`), read like a live host: two
//! reads of the same NIC, each the text of the usual commands, checked by the same report.
//!
//! ```text
//! DIR/iface                      the interface's name (optional; default `dump`)
//! DIR/1/time, DIR/2/time         when each read was taken, `date +%s.%N` (else the files'
//!                                modification times)
//! DIR/N/ethtool-i.txt            `ethtool -i IF`: the driver (its family maps the names)
//! DIR/N/ethtool-S.txt            `ethtool -S IF`
//! DIR/N/rdma-statistic.txt       `rdma statistic show link DEV/PORT`, or
//! DIR/N/hw_counters/             a copy of /sys/class/infiniband/DEV/ports/PORT/hw_counters
//! ```
//!
//! Counters come from the dump; the QoS configuration (DCB, congestion control, ToS, GIDs) is
//! not in it, so its checks are unknown (`roce-observe nic --save` writes everything). A line
//! that is not what the command prints is an error naming the file and the line.

use std::path::{Path, PathBuf};

use crate::ethtool::DrvInfo;
use crate::{
    NicSample, RdmaPort, Reading, SourceKind, SourceReport, SourceStatus, UnavailableReason,
};

/// Most counters one file may hold (a real NIC has a few thousand).
const MAX_COUNTERS: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("{path}: cannot read")]
    Read {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("{path}:{line}: {what}")]
    Format {
        path: PathBuf,
        line: usize,
        what: String,
    },
    #[error("{0}: no counters (expected ethtool-S.txt, rdma-statistic.txt or hw_counters/)")]
    NoCounters(PathBuf),
    #[error(
        "{0}: cannot tell the time between the two reads (write `date +%s.%N` into DIR/1/time and DIR/2/time)"
    )]
    NoTime(PathBuf),
}

fn read(path: &Path) -> Result<Option<String>, DumpError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(DumpError::Read {
            path: path.to_path_buf(),
            err,
        }),
    }
}

fn bad(path: &Path, line: usize, what: impl Into<String>) -> DumpError {
    DumpError::Format {
        path: path.to_path_buf(),
        line,
        what: what.into(),
    }
}

/// `ethtool -i` text: `key: value` lines.
pub fn parse_ethtool_i(path: &Path, text: &str) -> Result<DrvInfo, DumpError> {
    let mut d = DrvInfo {
        driver: String::new(),
        version: String::new(),
        fw_version: String::new(),
        bus_info: String::new(),
        n_stats: 0,
    };
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = l.split_once(':') else {
            return Err(bad(path, i + 1, format!("not `key: value`: {l:?}")));
        };
        let v = v.trim().to_string();
        match k.trim() {
            "driver" => d.driver = v,
            "version" => d.version = v,
            "firmware-version" => d.fw_version = v,
            "bus-info" => d.bus_info = v,
            _ => {}
        }
    }
    if d.driver.is_empty() {
        return Err(bad(
            path,
            1,
            "no `driver:` line (the output of `ethtool -i IF`)",
        ));
    }
    Ok(d)
}

/// `ethtool -S` text: a `NIC statistics:` header, then `     name: value` lines (a name may
/// end in spaces: old mlx5 kernels spelled `tx_pause_storm_warning_events `).
pub fn parse_ethtool_s(path: &Path, text: &str) -> Result<Vec<(String, u64)>, DumpError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.is_empty() || (i == 0 && t.ends_with("statistics:")) {
            continue;
        }
        let Some((name, v)) = l.rsplit_once(':') else {
            return Err(bad(path, i + 1, format!("not `name: value`: {l:?}")));
        };
        let v: u64 = v
            .trim()
            .parse()
            .map_err(|_| bad(path, i + 1, format!("not a count: {:?}", v.trim())))?;
        let name = name.trim_start().to_string();
        if name.trim().is_empty() {
            return Err(bad(path, i + 1, "a value without a name"));
        }
        if out.len() == MAX_COUNTERS {
            return Err(bad(
                path,
                i + 1,
                format!("more than {MAX_COUNTERS} counters"),
            ));
        }
        out.push((name, v));
    }
    Ok(out)
}

/// `rdma statistic show link DEV/PORT` text: `link DEV/PORT name value name value ...` (the
/// first link of the file).
pub fn parse_rdma_statistic(path: &Path, text: &str) -> Result<RdmaPort, DumpError> {
    for (i, l) in text.lines().enumerate() {
        let mut w = l.split_whitespace();
        match w.next() {
            None => continue,
            Some("link") => {}
            Some(x) => {
                return Err(bad(
                    path,
                    i + 1,
                    format!("expected `link DEV/PORT ...`, found {x:?}"),
                ));
            }
        }
        let Some((dev, port)) = w.next().and_then(|d| d.rsplit_once('/')) else {
            return Err(bad(path, i + 1, "expected DEV/PORT after `link`"));
        };
        let port: u32 = port
            .parse()
            .map_err(|_| bad(path, i + 1, format!("not a port number: {port:?}")))?;
        let rest: Vec<&str> = w.collect();
        if !rest.len().is_multiple_of(2) {
            return Err(bad(path, i + 1, "a counter name without its value"));
        }
        let mut counters = Vec::new();
        for p in rest.chunks(2).take(MAX_COUNTERS) {
            let v: u64 = p[1]
                .parse()
                .map_err(|_| bad(path, i + 1, format!("{}: not a count: {:?}", p[0], p[1])))?;
            counters.push((p[0].to_string(), v));
        }
        return Ok(RdmaPort {
            dev: dev.to_string(),
            port,
            counters,
            via: "dump".into(),
        });
    }
    Err(bad(path, 1, "no `link DEV/PORT` line"))
}

/// A copy of a port's `hw_counters` directory: one file per counter, its value.
fn read_hw_counters(dir: &Path) -> Result<Vec<(String, u64)>, DumpError> {
    let rd = std::fs::read_dir(dir).map_err(|err| DumpError::Read {
        path: dir.to_path_buf(),
        err,
    })?;
    let mut out = Vec::new();
    for e in rd.take(MAX_COUNTERS) {
        let e = e.map_err(|err| DumpError::Read {
            path: dir.to_path_buf(),
            err,
        })?;
        let p = e.path();
        if !p.is_file() {
            continue;
        }
        let text = read(&p)?.unwrap_or_default();
        let v: u64 = text
            .trim()
            .parse()
            .map_err(|_| bad(&p, 1, format!("not a count: {:?}", text.trim())))?;
        out.push((e.file_name().to_string_lossy().into_owned(), v));
    }
    out.sort();
    Ok(out)
}

fn answered(source: SourceKind, via: &Path) -> SourceReport {
    SourceReport {
        source,
        status: SourceStatus::Answered {
            via: format!("dump {}", via.display()),
        },
    }
}

/// Why a source is not there: its own words, so that a setting it would have given points to
/// it (the report refers a setting to the source with the same reason).
fn not_in_dump_detail(source: SourceKind) -> &'static str {
    match source {
        SourceKind::EthtoolDrvinfo => "not in the dump (ethtool -i)",
        SourceKind::EthtoolStats => "not in the dump (ethtool -S)",
        SourceKind::EthtoolPause => "not in the dump (ethtool -a)",
        SourceKind::RdmaCounters => "not in the dump (rdma statistic)",
        SourceKind::Dcb => "not in the dump (DCB: use roce-observe nic --save)",
        SourceKind::Config => "not in the dump (configuration files)",
    }
}

fn not_in_dump(source: SourceKind) -> SourceReport {
    SourceReport {
        source,
        status: SourceStatus::Unavailable(crate::Unavailable::new(
            UnavailableReason::Absent,
            not_in_dump_detail(source),
        )),
    }
}

/// The time of read `n` (ns since the epoch): its `time` file, else the newest modification
/// time of its files.
fn read_time(n: &Path) -> Result<Option<u64>, DumpError> {
    let tp = n.join("time");
    if let Some(t) = read(&tp)? {
        let s: f64 = t.trim().parse().map_err(|_| {
            bad(
                &tp,
                1,
                format!("not seconds since the epoch: {:?}", t.trim()),
            )
        })?;
        if !(s.is_finite() && s > 0.0) {
            return Err(bad(&tp, 1, "not seconds since the epoch"));
        }
        return Ok(Some((s * 1e9) as u64));
    }
    let mut newest = None;
    for f in ["ethtool-S.txt", "rdma-statistic.txt", "ethtool-i.txt"] {
        if let Ok(m) = std::fs::metadata(n.join(f)).and_then(|m| m.modified())
            && let Ok(d) = m.duration_since(std::time::UNIX_EPOCH)
        {
            newest = newest.max(Some(d.as_nanos() as u64));
        }
    }
    Ok(newest)
}

/// One read (`DIR/1` or `DIR/2`) as a sample of interface `iface` at `time_ns`.
fn read_one(n: &Path, iface: &str, time_ns: u64) -> Result<NicSample, DumpError> {
    let mut s = NicSample::empty(iface, time_ns);
    let pi = n.join("ethtool-i.txt");
    match read(&pi)? {
        Some(t) => {
            s.drvinfo = Some(parse_ethtool_i(&pi, &t)?);
            s.sources.push(answered(SourceKind::EthtoolDrvinfo, &pi));
        }
        None => s.sources.push(not_in_dump(SourceKind::EthtoolDrvinfo)),
    }
    let ps = n.join("ethtool-S.txt");
    match read(&ps)? {
        Some(t) => {
            let c = parse_ethtool_s(&ps, &t)?;
            if let Some(d) = s.drvinfo.as_mut() {
                d.n_stats = c.len() as u32;
            }
            s.ethtool = Some(c);
            s.sources.push(answered(SourceKind::EthtoolStats, &ps));
        }
        None => s.sources.push(not_in_dump(SourceKind::EthtoolStats)),
    }
    let pr = n.join("rdma-statistic.txt");
    let hw = n.join("hw_counters");
    if let Some(t) = read(&pr)? {
        s.rdma = Some(parse_rdma_statistic(&pr, &t)?);
        s.sources.push(answered(SourceKind::RdmaCounters, &pr));
    } else if hw.is_dir() {
        s.rdma = Some(RdmaPort {
            dev: "rdma".into(),
            port: 1,
            counters: read_hw_counters(&hw)?,
            via: "dump".into(),
        });
        s.sources.push(answered(SourceKind::RdmaCounters, &hw));
    } else {
        s.sources.push(not_in_dump(SourceKind::RdmaCounters));
    }
    if s.ethtool.is_none() && s.rdma.is_none() {
        return Err(DumpError::NoCounters(n.to_path_buf()));
    }
    for k in [
        SourceKind::EthtoolPause,
        SourceKind::Dcb,
        SourceKind::Config,
    ] {
        s.sources.push(not_in_dump(k));
    }
    s.dcb = Reading::unavailable(
        UnavailableReason::Absent,
        not_in_dump_detail(SourceKind::Dcb),
    );
    Ok(s)
}

/// The dump in `dir`: its two reads and the seconds between them.
pub fn read_dump(dir: &Path) -> Result<(NicSample, NicSample, f64), DumpError> {
    let iface = read(&dir.join("iface"))?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "dump".into());
    let (d1, d2) = (dir.join("1"), dir.join("2"));
    for d in [&d1, &d2] {
        if !d.is_dir() {
            return Err(DumpError::Read {
                path: d.clone(),
                err: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "a dump has two reads, DIR/1 and DIR/2",
                ),
            });
        }
    }
    let (t1, t2) = (read_time(&d1)?, read_time(&d2)?);
    let (Some(t1), Some(t2)) = (t1, t2) else {
        return Err(DumpError::NoTime(dir.to_path_buf()));
    };
    if t2 <= t1 {
        return Err(DumpError::NoTime(dir.to_path_buf()));
    }
    let a = read_one(&d1, &iface, t1)?;
    let b = read_one(&d2, &iface, t2)?;
    Ok((a, b, (t2 - t1) as f64 / 1e9))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETHTOOL_S: &str = "NIC statistics:\n     rx_packets: 1200\n     rx_prio3_pause: 40\n     tx_pause_storm_warning_events : 0\n     rx_prio3_discards: 7\n";

    #[test]
    fn the_commands_text_is_read() {
        let p = Path::new("d/1/ethtool-S.txt");
        let c = parse_ethtool_s(p, ETHTOOL_S).unwrap();
        assert_eq!(c.len(), 4);
        assert_eq!(c[1], ("rx_prio3_pause".into(), 40));
        assert_eq!(
            c[2].0, "tx_pause_storm_warning_events ",
            "the old trailing space kept"
        );
        let i = parse_ethtool_i(
            p,
            "driver: mlx5_core\nversion: 6.1.0-18-amd64\nfirmware-version: 28.39.1002 (MT_0000000838)\nexpansion-rom-version: \nbus-info: 0000:3b:00.0\nsupports-statistics: yes\n",
        )
        .unwrap();
        assert_eq!(
            (i.driver.as_str(), i.bus_info.as_str()),
            ("mlx5_core", "0000:3b:00.0")
        );
        let r = parse_rdma_statistic(
            p,
            "link mlx5_0/1 rx_write_requests 0 out_of_buffer 3 out_of_sequence 12 np_cnp_sent 40\n",
        )
        .unwrap();
        assert_eq!((r.dev.as_str(), r.port), ("mlx5_0", 1));
        assert_eq!(r.counters[1], ("out_of_buffer".into(), 3));
    }

    #[test]
    fn a_line_that_is_not_the_commands_is_named() {
        let p = Path::new("d/2/ethtool-S.txt");
        let e = parse_ethtool_s(
            p,
            "NIC statistics:\n     rx_packets: 12\n     rx_bytes: lots\n",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "d/2/ethtool-S.txt:3: not a count: \"lots\"");
        let e = parse_rdma_statistic(p, "link mlx5_0/1 out_of_buffer\n").unwrap_err();
        assert!(
            e.to_string()
                .contains(":1: a counter name without its value"),
            "{e}"
        );
        let e = parse_ethtool_i(p, "version: 1\n").unwrap_err();
        assert!(e.to_string().contains("no `driver:` line"), "{e}");
    }
}
