//! `roce-analyze`: offline checks over roce-observe's Parquet flow logs, on Apache DataFusion.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use analysis::engine::{Engine, Filters, Options};
use analysis::load::quiet_decoder_panics;
use analysis::path::Expect;
use analysis::report::{Figures, Report, Verdict, compare, parse_margin, read_baseline};
use anyhow::{Context, bail};
use clap::{Args, CommandFactory, Parser, Subcommand};
use contract::policy::PolicyConfig;
use contract::vendor::Vendor;

/// Offline checks over roce-observe's Parquet flow logs (the `--out` directories of
/// `roce-observe` or `roce-observe replay`; several directories are read as one).
#[derive(Parser)]
#[command(name = "roce-analyze", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Judge by a vendor profile (nvidia or broadcom) instead of the run's recorded policy.
    #[arg(long, global = true, value_enum)]
    profile: Option<Vendor>,
    /// Judge by this policy file (roce-observe's format, docs/policy.md). Default: the policy
    /// the run recorded (`policy-<host>.toml` in its output directory), else the nvidia profile.
    #[arg(long, global = true, value_name = "FILE")]
    policy: Option<PathBuf>,
    #[command(flatten)]
    filters: FilterArgs,
    /// Memory the query engine may use, MiB: the rows of small files, read once at start (up to
    /// a quarter), and the queries' sorts and aggregations (which spill to disk beyond it).
    #[arg(long, global = true, default_value_t = 512, value_name = "MIB")]
    memory_limit: usize,
}

/// Row filters, applied to every table before any query (repeat a filter or separate values
/// by commas for several: any of them).
#[derive(Args, Default)]
struct FilterArgs {
    /// Rows whose interval ends after this time (RFC 3339, `YYYY-MM-DD[ HH:MM[:SS]]` UTC, or
    /// `@UNIX_SECONDS`).
    #[arg(long, global = true, value_parser = parse_when)]
    since: Option<i64>,
    /// Rows whose interval starts before this time.
    #[arg(long, global = true, value_parser = parse_when)]
    until: Option<i64>,
    #[arg(long, global = true, value_delimiter = ',')]
    host: Vec<String>,
    #[arg(long, global = true, value_delimiter = ',')]
    iface: Vec<String>,
    /// Destination QP number (decimal or 0x hex); interface rows are not filtered by it.
    #[arg(long, global = true, value_delimiter = ',', value_parser = parse_qp)]
    qp: Vec<i64>,
    /// Source address of the QP key.
    #[arg(long, global = true, value_delimiter = ',')]
    src: Vec<String>,
    /// Destination address of the QP key.
    #[arg(long, global = true, value_delimiter = ',')]
    dst: Vec<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bring-up checks (marking, ECN/CNP, go-back-N, PFC, PAUSE, MTU), judged per interval as
    /// the alert rules are, with the worst QPs / interfaces / intervals; exit 1 when one fails.
    Report {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Subjects and intervals named per check.
        #[arg(long, default_value_t = 5)]
        top: usize,
        /// Print the selected keys' rows interval by interval (on by default with --qp).
        #[arg(long)]
        timeline: bool,
        /// Most timeline rows printed.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Write the report's SQL queries (parameters substituted) into this directory, to run
        /// them on DuckDB, Spark or Trino (docs/analysis.md#sql).
        #[arg(long, value_name = "DIR")]
        emit_sql: Option<PathBuf>,
    },
    /// Record the figures of a good run as a golden baseline (JSON).
    Baseline {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Compare a run against a baseline; exit 1 when a figure got worse.
    Compare {
        /// The baseline file (`roce-analyze baseline -o FILE`).
        baseline: PathBuf,
        /// The run's output directories.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Relative tolerance (0.1 = 10% worse is still fine); finite, 0 or more.
        #[arg(long, default_value_t = 0.1, value_parser = parse_margin, allow_hyphen_values = true)]
        tolerance: f64,
        /// Absolute slack added to the tolerance (in the figure's unit); finite, 0 or more.
        #[arg(long, default_value_t = 0.0, value_parser = parse_margin, allow_hyphen_values = true)]
        slack: f64,
    },
    /// Did the marking (DSCP, PCP, ECN) survive every point between sender and receiver? The
    /// trees of several hosts, mirror ports or captures, compared QP key by QP key, and with the
    /// host QPs of live trees (`qps`) what each key's sending QP asked for; exit 1 when a marking
    /// changed against the policy, 2 on errors.
    Path {
        /// Output directories (`--out` of roce-observe or roce-observe replay), in the order
        /// that breaks ties between points.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The report as one self-contained HTML page (no script, nothing fetched: it opens
    /// offline): timelines per interface, checks with their worst QPs and intervals, the marking
    /// along the path, the baseline comparison, the alerts (docs/analysis.md#html).
    Html {
        /// Output directories.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// The page to write.
        #[arg(long, short)]
        out: PathBuf,
        /// Compare with this baseline (`roce-analyze baseline -o FILE`).
        #[arg(long, value_name = "FILE")]
        baseline: Option<PathBuf>,
        /// The baseline comparison's relative tolerance (as compare's).
        #[arg(long, default_value_t = 0.1, value_parser = parse_margin, allow_hyphen_values = true)]
        tolerance: f64,
        /// The baseline comparison's absolute slack (as compare's).
        #[arg(long, default_value_t = 0.0, value_parser = parse_margin, allow_hyphen_values = true)]
        slack: f64,
        /// Subjects and intervals named per check.
        #[arg(long, default_value_t = 5)]
        top: usize,
        /// Interfaces with timelines, the most troubled first.
        #[arg(long, default_value_t = 16)]
        max_ifaces: usize,
        /// Points per chart (intervals summed into equal buckets beyond it).
        #[arg(long, default_value_t = 500)]
        max_points: usize,
        /// Alert records listed.
        #[arg(long, default_value_t = 200)]
        max_alerts: usize,
    },
    /// The fleet answer: one row per host of the trees, judged by its NIC's own counters (drops
    /// and PFC on the RDMA priority, PFC on others, storms, 802.3x PAUSE, sequence errors,
    /// timeouts), its NIC configuration checks and its QPs: FAIL first, then UNKNOWN (nothing
    /// to judge by), then PASS. Reads trees without flow logs (hardware-RoCE hosts). Exit 1
    /// when a host fails (with --strict, also when one is unknown).
    Hosts {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Print the hosts as JSON.
        #[arg(long)]
        json: bool,
        /// A host that cannot be judged (unknown) fails too.
        #[arg(long)]
        strict: bool,
        /// Write the query (its parameters substituted) into this file, to run it on DuckDB,
        /// Spark or Trino.
        #[arg(long, value_name = "FILE")]
        emit_sql: Option<PathBuf>,
    },
    /// Run SQL on the tables flows, interfaces, alerts, nic and qps (filtered) and the report's
    /// views v_flows, v_hist, v_latency, v_ifaces, v_pfc, v_alerts.
    Sql {
        /// The query (or `--file`).
        #[arg(required_unless_present = "file")]
        query: Option<String>,
        /// Output directories.
        #[arg(long = "dir", short = 'd', required = true)]
        dirs: Vec<PathBuf>,
        /// Read the query from a file.
        #[arg(long, conflicts_with = "query")]
        file: Option<PathBuf>,
        /// Output: table, json (one object per row) or csv.
        #[arg(long, default_value = "table", value_parser = ["table", "json", "csv"])]
        format: String,
        /// Let the query read files other than the trees (CREATE EXTERNAL TABLE) and write
        /// files (COPY ... TO, INSERT INTO an external table). A path inside a given tree is
        /// refused even then: roce-analyze never writes a tree.
        #[arg(long)]
        allow_files: bool,
    },
}

fn parse_when(s: &str) -> Result<i64, String> {
    analysis::time::parse_time(s).ok_or_else(|| {
        format!("{s:?} is not a time (RFC 3339, YYYY-MM-DD[ HH:MM[:SS]] UTC, or @UNIX_SECONDS)")
    })
}

fn parse_qp(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16),
        None => t.parse(),
    }
    .map_err(|e| format!("{s:?}: {e}"))?;
    if !(0..1 << 24).contains(&v) {
        return Err(format!("{s:?}: a QP number is 24 bits (0 to 0xffffff)"));
    }
    Ok(v)
}

fn main() -> ExitCode {
    match run() {
        Ok(c) => c,
        Err(e) => {
            // its causes once each, never a backtrace (as roce-observe)
            eprintln!("{}", contract::error::cli_text(e.as_ref()));
            ExitCode::from(1)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    quiet_decoder_panics();
    let f = &cli.filters;
    let filters = Filters {
        since_us: f.since,
        until_us: f.until,
        hosts: f.host.clone(),
        ifaces: f.iface.clone(),
        qps: f.qp.clone(),
        srcs: f.src.clone(),
        dsts: f.dst.clone(),
    };
    if let (Some(s), Some(u)) = (f.since, f.until)
        && s >= u
    {
        Cli::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                "--since must be before --until",
            )
            .exit()
    }
    let opts = Options {
        memory_limit: cli.memory_limit.max(16) << 20,
        ..Options::default()
    };
    let policy_of = |dirs: &[PathBuf]| policy(&cli, dirs);
    match &cli.cmd {
        Cmd::Report {
            dirs,
            json,
            top,
            timeline,
            limit,
            emit_sql,
        } => {
            let (p, source) = policy_of(dirs)?;
            if let Some(out) = emit_sql {
                emit(out, &p, *top, *limit)?;
            }
            let eng = Engine::open(dirs, &filters, &opts)?;
            eng.require_rows(&filters)?;
            let tl = (*timeline || !filters.qps.is_empty()).then_some(*limit);
            let r = analysis::report::report(&eng, &p, &source, *top, tl)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", analysis::report::render_text(&r, *top));
            }
            Ok(exit_of(&r))
        }
        Cmd::Baseline { dirs, out } => {
            let (p, source) = policy_of(dirs)?;
            let eng = Engine::open(dirs, &filters, &opts)?;
            eng.require_rows(&filters)?;
            let r = analysis::report::report(&eng, &p, &source, 1, None)?;
            let fig = &r.figures;
            std::fs::write(out, serde_json::to_string_pretty(fig)?)
                .with_context(|| format!("writing {}", out.display()))?;
            println!(
                "baseline of {} QP keys, {} data packets written to {}",
                fig.qps,
                fig.data_pkts,
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Compare {
            baseline,
            dirs,
            tolerance,
            slack,
        } => {
            swapped_hint(baseline, dirs);
            let base: Figures = read_baseline(baseline)?;
            let (p, source) = policy_of(dirs)?;
            let eng = Engine::open(dirs, &filters, &opts)?;
            eng.require_rows(&filters)?;
            let now = analysis::report::report(&eng, &p, &source, 1, None)?.figures;
            compare_run(&base, &now, *tolerance, *slack)
        }
        Cmd::Hosts {
            dirs,
            json,
            strict,
            emit_sql,
        } => {
            let (p, source) = policy_of(dirs)?;
            if let Some(f) = emit_sql {
                std::fs::write(f, analysis::hosts::sql(&p)?)
                    .with_context(|| format!("writing {}", f.display()))?;
            }
            let o = Options {
                flows_optional: true,
                ..opts.clone()
            };
            let eng = Engine::open(dirs, &filters, &o)?;
            let hs = analysis::hosts::hosts(&eng, &p)?;
            let prio = p.expected.rdma_priority & 7;
            if *json {
                let v = serde_json::json!({
                    "policy_source": source,
                    "rdma_priority": prio,
                    "hosts": hs,
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", analysis::hosts::render_text(&hs, &source, prio));
            }
            Ok(if analysis::hosts::failed(&hs, *strict) {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Cmd::Path { dirs, json } => {
            let (p, _) = policy_of(dirs)?;
            Ok(path(dirs, &filters, &opts, *json, &Expect::of(&p)))
        }
        Cmd::Html {
            dirs,
            out,
            baseline,
            tolerance,
            slack,
            top,
            max_ifaces,
            max_points,
            max_alerts,
        } => {
            let base = match baseline {
                Some(b) => Some(analysis::html::Baseline {
                    file: b.display().to_string(),
                    figures: read_baseline(b)?,
                    tolerance: *tolerance,
                    slack: *slack,
                }),
                None => None,
            };
            let (p, source) = policy_of(dirs)?;
            let eng = Engine::open(dirs, &filters, &opts)?;
            eng.require_rows(&filters)?;
            let limits = analysis::html::Limits {
                max_ifaces: (*max_ifaces).max(1),
                max_points: (*max_points).max(2),
                max_alerts: (*max_alerts).max(1),
            };
            let page = analysis::html::html(&eng, dirs, &p, &source, *top, base.as_ref(), limits)?;
            std::fs::write(out, page).with_context(|| format!("writing {}", out.display()))?;
            println!("{} written", out.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Sql {
            query,
            dirs,
            file,
            format,
            allow_files,
        } => {
            let q = match (query, file) {
                (Some(q), _) => q.clone(),
                (None, Some(f)) => std::fs::read_to_string(f)
                    .with_context(|| format!("reading the query from {}", f.display()))?,
                (None, None) => bail!("no query"),
            };
            let eng = Engine::open(dirs, &filters, &opts)?;
            eng.require_rows(&filters)?;
            let stmts = analysis::engine::statements(&q);
            let Some((last, before)) = stmts.split_last() else {
                bail!("the query is empty")
            };
            let access = if *allow_files {
                analysis::engine::FileAccess::Files
            } else {
                analysis::engine::FileAccess::TreesOnly
            };
            for s in before {
                eng.run_user(s, access)?;
            }
            let batches = eng.run_user(last, access)?;
            print_rows(&batches, format)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The policy to judge by, and where it came from: `--policy`, `--profile`, the trees' recorded
/// `policy-<host>.toml` (all the same), or the nvidia profile.
fn policy(cli: &Cli, dirs: &[PathBuf]) -> anyhow::Result<(PolicyConfig, String)> {
    if let Some(f) = &cli.policy {
        return Ok((
            PolicyConfig::from_file(f)?,
            format!("{} (--policy)", f.display()),
        ));
    }
    if let Some(p) = &cli.profile {
        return Ok((PolicyConfig::of(*p), format!("profile {p} (--profile)")));
    }
    let mut found: Vec<(PathBuf, PolicyConfig)> = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue; // a missing directory is reported by the engine
        };
        let mut names: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("policy-") && n.ends_with(".toml"))
            })
            .collect();
        names.sort();
        for n in names {
            let p = PolicyConfig::from_file(&n)
                .with_context(|| format!("the run's recorded policy {}", n.display()))?;
            found.push((n, p));
        }
    }
    let Some((first, p)) = found.first() else {
        return Ok((
            PolicyConfig::of(Vendor::Nvidia),
            "profile nvidia (no policy recorded in the output directories)".into(),
        ));
    };
    if let Some((other, _)) = found.iter().find(|(_, q)| q != p) {
        bail!(
            "the runs recorded different policies ({} and {}): choose one with --policy FILE or --profile NAME",
            first.display(),
            other.display()
        );
    }
    let src = if found.len() == 1 {
        format!("{} (recorded by the run)", first.display())
    } else {
        format!(
            "{} and {} more, all the same (recorded by the runs)",
            first.display(),
            found.len() - 1
        )
    };
    Ok((p.clone(), src))
}

/// Exit 1 when a check failed.
fn exit_of(r: &Report) -> ExitCode {
    if r.checks.iter().any(|x| x.verdict == Verdict::Fail) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `report --emit-sql DIR`: the engine views of DataFusion, DuckDB and Spark, and every report
/// query with its parameters.
fn emit(out: &Path, p: &PolicyConfig, top: usize, limit: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let w = |name: &str, text: &str| {
        std::fs::write(out.join(name), text)
            .with_context(|| format!("writing {}", out.join(name).display()))
    };
    for (e, text) in analysis::sql_views::all() {
        w(&format!("engine.{e}.sql"), &text)?;
    }
    for (name, q) in analysis::report::queries(p, top, limit)? {
        w(&name, &q)?;
    }
    Ok(())
}

fn print_rows(batches: &[arrow::array::RecordBatch], format: &str) -> anyhow::Result<()> {
    match format {
        "json" => {
            for r in analysis::report::rows(batches) {
                println!("{}", serde_json::to_string(&r)?);
            }
        }
        "csv" => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(std::io::stdout());
            for b in batches {
                w.write(b)?;
            }
        }
        _ => println!("{}", arrow::util::pretty::pretty_format_batches(batches)?),
    }
    Ok(())
}

/// `path`: exit 1 when a marking changed against the policy (along a path, or between a host
/// QP's request and the key's first point), 2 when a tree cannot be read (so that 1 means only
/// that).
fn path(
    dirs: &[PathBuf],
    filters: &Filters,
    opts: &Options,
    json: bool,
    expect: &Expect,
) -> ExitCode {
    let r = match Engine::open(dirs, filters, opts)
        .map_err(analysis::path::PathError::from)
        .and_then(|eng| analysis::path::path_on(&eng, expect))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("Error: {:?}", anyhow::Error::new(e));
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&r) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("Error: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", analysis::path::render(&r));
    }
    if r.fails() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A usage error (exit 2) when `compare`'s arguments are the wrong way round: a directory
/// where the baseline file is expected, or a file where the run's directory is expected.
fn swapped_hint(baseline: &Path, dirs: &[PathBuf]) {
    let which = if baseline.is_dir() {
        format!("{} is a directory", baseline.display())
    } else if let Some(d) = dirs.iter().find(|d| d.exists() && !d.is_dir()) {
        format!("{} is not a directory", d.display())
    } else {
        return;
    };
    Cli::command()
        .error(
            clap::error::ErrorKind::InvalidValue,
            format!(
                "{which}: compare takes the baseline file first, then the run's directory \
                 (roce-analyze compare BASELINE.json DIR)"
            ),
        )
        .exit()
}

/// `compare`: exit 1 when a figure got worse than the baseline's.
fn compare_run(
    base: &Figures,
    now: &Figures,
    tolerance: f64,
    slack: f64,
) -> anyhow::Result<ExitCode> {
    let r = compare(base, now, tolerance, slack);
    for x in &r {
        println!(
            "WORSE {:<28} baseline {:.3} now {:.3}",
            x.figure, x.baseline, x.now
        );
    }
    if r.is_empty() {
        println!("no figure worse than the baseline (tolerance {tolerance}, slack {slack})");
    }
    Ok(if r.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
