//! `cargo xtask bench-analyze [--hosts N --keys N --minutes N --interval S --runs N
//! --path-timeout S --path-limit-gib N --keep --tree DIR]`: `roce-analyze` over a fleet's tree
//! beside DuckDB running the same report queries.
//!
//! Generates a tree with observer's `fleet_tree` example (the collector itself writes it: its
//! schema, encodings, rotation, Hive partitions and policy files; default 100 hosts x 1,000 QP
//! keys x 1 hour of 10 s intervals, 36 million flow rows) in a temporary directory, then times
//! with wait4(2) (wall, CPU, peak RSS; median of `--runs`, default 3):
//! - `roce-analyze report DIR` (release build);
//! - DuckDB (Python, 2 threads) running the report's queries as `report --emit-sql` writes them
//!   (views `flows`, `interfaces`, `alerts` over `read_parquet(.., hive_partitioning = true,
//!   union_by_name = true)`, then `engine.duckdb.sql`, then every query but the timeline, which
//!   the report runs only with `--timeline`), all queries in one process;
//! - `roce-analyze path DIR` under an address-space limit (`--path-limit-gib`, default 8) and a
//!   timeout (`--path-timeout`, default 900 s). Its queries read roce-analyze's `tree` column
//!   (which tree a row came from), so they have no DuckDB form and no DuckDB baseline.
//!
//! Prints a table and the ratio roce-analyze / DuckDB. `--tree DIR` measures an existing tree
//! (not generated, not deleted); `--keep` keeps the generated one. `--rotate S` closes each
//! Parquet file after S seconds (default 300, the observer's); `--debug` measures debug builds
//! (faster to build, slower to run: for ratios, not rates).
//!
//! `--small-files`: what a file costs. Generates the same fleet twice, once with one file per
//! interval (`--rotate` = `--interval`) and once with the observer's rotation, and times
//! `roce-analyze report` on both: the ratio many files / few files, same rows (defaults 2 hosts
//! x 4 keys x 42 min at 1 s: about 5,000 flows files of 4 rows each, and as many interface
//! files).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// One run: wall seconds, CPU seconds, peak RSS KiB, exit code (`None`: killed by a signal).
#[derive(Clone, Copy, Debug)]
struct Run {
    wall: f64,
    cpu: f64,
    rss_kib: u64,
    code: Option<i32>,
}

fn tv(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// Runs `cmd` measured with wait4(2): killed after `timeout`, its address space limited to
/// `limit` bytes (setrlimit RLIMIT_AS) when given. stdout goes to `out`.
fn timed(
    cmd: &mut Command,
    out: &Path,
    timeout: Option<Duration>,
    limit: Option<u64>,
) -> anyhow::Result<Run> {
    use std::os::unix::process::CommandExt;
    if let Some(bytes) = limit {
        // SAFETY: setrlimit is async-signal-safe; runs in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                let l = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let start = Instant::now();
    let child = cmd
        .stdout(std::fs::File::create(out)?)
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawn {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = timeout.map(|t| {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let end = Instant::now() + t;
            while Instant::now() < end {
                if done.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            if !done.load(Ordering::SeqCst) {
                // SAFETY: our own child, not yet waited for (done is false).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        })
    });
    let mut status = 0i32;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    done.store(true, Ordering::SeqCst);
    let secs = start.elapsed().as_secs_f64();
    if let Some(w) = watchdog {
        let _ = w.join();
    }
    if rc != pid {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    Ok(Run {
        wall: secs,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        rss_kib: ru.ru_maxrss as u64,
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
    })
}

/// Median wall and CPU (each on its own), largest RSS, the first run's exit code.
fn median(v: &[Run]) -> Run {
    let mid = |mut x: Vec<f64>| {
        x.sort_by(|a, b| a.partial_cmp(b).unwrap());
        x[x.len() / 2]
    };
    Run {
        wall: mid(v.iter().map(|r| r.wall).collect()),
        cpu: mid(v.iter().map(|r| r.cpu).collect()),
        rss_kib: v.iter().map(|r| r.rss_kib).max().unwrap_or(0),
        code: v[0].code,
    }
}

struct Opts {
    hosts: u64,
    keys: u64,
    minutes: u64,
    interval: u64,
    runs: usize,
    path_timeout: u64,
    path_limit_gib: u64,
    keep: bool,
    tree: Option<PathBuf>,
    rotate: u64,
    debug: bool,
    small_files: bool,
}

fn opts(args: &[String]) -> anyhow::Result<Opts> {
    let mut o = Opts {
        hosts: 100,
        keys: 1000,
        minutes: 60,
        interval: 10,
        runs: 3,
        path_timeout: 900,
        path_limit_gib: 8,
        keep: false,
        tree: None,
        rotate: 300,
        debug: false,
        small_files: false,
    };
    let mut given = std::collections::HashSet::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        given.insert(a.clone());
        let mut num = |what: &str| -> anyhow::Result<u64> {
            it.next()
                .with_context(|| format!("{what} N"))?
                .parse()
                .with_context(|| format!("{what} N"))
        };
        match a.as_str() {
            "--hosts" => o.hosts = num("--hosts")?,
            "--keys" => o.keys = num("--keys")?,
            "--minutes" => o.minutes = num("--minutes")?,
            "--interval" => o.interval = num("--interval")?,
            "--runs" => o.runs = num("--runs")?.max(1) as usize,
            "--path-timeout" => o.path_timeout = num("--path-timeout")?,
            "--path-limit-gib" => o.path_limit_gib = num("--path-limit-gib")?,
            "--rotate" => o.rotate = num("--rotate")?.max(1),
            "--debug" => o.debug = true,
            "--small-files" => o.small_files = true,
            "--keep" => o.keep = true,
            "--tree" => o.tree = Some(PathBuf::from(it.next().context("--tree DIR")?)),
            other => bail!(
                "unknown option {other} (options: --hosts N, --keys N, --minutes N, --interval S, \
                 --runs N, --path-timeout S, --path-limit-gib N, --keep, --tree DIR, --rotate S, \
                 --debug, --small-files)"
            ),
        }
    }
    if o.small_files {
        for (flag, v, d) in [
            ("--hosts", &mut o.hosts, 2),
            ("--keys", &mut o.keys, 4),
            ("--minutes", &mut o.minutes, 42),
            ("--interval", &mut o.interval, 1),
        ] {
            if !given.contains(flag) {
                *v = d;
            }
        }
    }
    Ok(o)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Release (or with `debug`, debug) builds of `roce-analyze` and the `fleet_tree` example,
/// copied into `dir` (the target directory may be shared with other builds).
fn build(dir: &Path, debug: bool) -> anyhow::Result<(PathBuf, PathBuf)> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let profile = if debug { "debug" } else { "release" };
    eprintln!("building roce-analyze and the fleet_tree example ({profile})...");
    for args in [
        &[
            "build",
            "--profile",
            if debug { "dev" } else { "release" },
            "-p",
            "analysis",
            "--bin",
            "roce-analyze",
        ][..],
        &[
            "build",
            "--profile",
            if debug { "dev" } else { "release" },
            "-p",
            "observer",
            "--example",
            "fleet_tree",
        ][..],
    ] {
        let st = Command::new(&cargo)
            .current_dir(root())
            .args(args)
            .status()?;
        if !st.success() {
            bail!("cargo {} failed", args.join(" "));
        }
    }
    let (a, g) = (dir.join("roce-analyze"), dir.join("fleet_tree"));
    std::fs::copy(target.join(profile).join("roce-analyze"), &a)?;
    std::fs::copy(target.join(profile).join("examples/fleet_tree"), &g)?;
    Ok((a, g))
}

/// Free bytes of the file system holding `p`.
fn free_bytes(p: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap_or_default();
    // SAFETY: statvfs fills the struct we own.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return 0;
    }
    s.f_bavail as u64 * s.f_frsize as u64
}

fn du(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => du(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The DuckDB side: views over the tree's tables, the engine's views, then every report query
/// (the timeline only with `--timeline`, so not here), each result fetched. Prints the
/// queries' time.
const DUCKDB_PY: &str = r#"
import glob, os, sys, time
import duckdb
tree, sql = sys.argv[1], sys.argv[2]
t = time.monotonic()
con = duckdb.connect()
con.execute("SET threads = 2")
for name in ("flows", "interfaces", "alerts", "nic"):
    if glob.glob(f"{tree}/{name}/**/*.parquet", recursive=True):
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{tree}/{name}/**/*.parquet', hive_partitioning = true, union_by_name = true)")
def statements(text):
    body = "".join(l + "\n" for l in text.splitlines() if not l.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]
for s in statements(open(os.path.join(sql, "engine.duckdb.sql")).read()):
    con.execute(s)
rows = 0
names = sorted(f for f in os.listdir(sql) if f.endswith(".sql") and not f.startswith("engine.") and f != "timeline.sql")
for f in names:
    rows += len(con.execute(open(os.path.join(sql, f)).read()).fetchall())
print(f"duckdb {duckdb.__version__}: {len(names)} queries, {rows} result rows, {time.monotonic() - t:.3f} s")
"#;

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let o = opts(args)?;
    let dir = std::env::temp_dir().join(format!("roce-bench-analyze-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let r = measure(&o, &dir);
    if o.keep {
        println!("kept {}", dir.display());
    } else {
        std::fs::remove_dir_all(&dir)?;
    }
    r
}

/// Runs the `fleet_tree` generator into `tree` with `o`'s fleet and `rotate` seconds per file;
/// its wall seconds.
fn generate(gen_bin: &Path, o: &Opts, tree: &Path, rotate: u64) -> anyhow::Result<f64> {
    let w = Instant::now();
    let st = Command::new(gen_bin)
        .arg("--out")
        .arg(tree)
        .args(["--hosts", &o.hosts.to_string()])
        .args(["--keys", &o.keys.to_string()])
        .args(["--minutes", &o.minutes.to_string()])
        .args(["--interval", &o.interval.to_string()])
        .args(["--rotate", &rotate.to_string()])
        .status()?;
    if !st.success() {
        bail!("fleet_tree failed");
    }
    Ok(w.elapsed().as_secs_f64())
}

/// Files below `p`.
fn file_count(p: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => file_count(&e.path()),
            Ok(_) => 1,
            Err(_) => 0,
        })
        .sum()
}

/// `roce-analyze report TREE`, `runs` times: the median (exit 0 or 1: pass or checks failed).
fn time_report(bin: &Path, tree: &Path, out: &Path, runs: usize) -> anyhow::Result<Run> {
    let mut v = Vec::new();
    for i in 0..runs {
        eprintln!("roce-analyze report {}, run {}...", tree.display(), i + 1);
        let r = timed(Command::new(bin).arg("report").arg(tree), out, None, None)?;
        if !matches!(r.code, Some(0 | 1)) {
            bail!("roce-analyze report failed ({:?})", r.code);
        }
        v.push(r);
    }
    Ok(median(&v))
}

/// `--small-files`: the report over one file per interval against the same rows in the
/// observer's rotation.
fn measure_small_files(o: &Opts, dir: &Path) -> anyhow::Result<()> {
    let (bin, gen_bin) = build(dir, o.debug)?;
    let (many, few) = (dir.join("many"), dir.join("few"));
    eprintln!(
        "generating {} hosts x {} keys x {} min at {} s, twice...",
        o.hosts, o.keys, o.minutes, o.interval
    );
    generate(&gen_bin, o, &many, o.interval)?;
    generate(&gen_bin, o, &few, o.rotate)?;
    let out = dir.join("stdout.txt");
    // warm the page cache, then alternate nothing: each tree's runs in a row
    let _ = time_report(&bin, &many, &out, 1)?;
    let m = time_report(&bin, &many, &out, o.runs)?;
    let many_line = std::fs::read_to_string(&out)?
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let _ = time_report(&bin, &few, &out, 1)?;
    let f = time_report(&bin, &few, &out, o.runs)?;
    let few_line = std::fs::read_to_string(&out)?
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    println!();
    println!(
        "small-files benchmark ({} build): {} hosts x {} QP keys x {} min at {} s; median of {} runs, largest RSS; {} cores",
        if o.debug { "debug" } else { "release" },
        o.hosts,
        o.keys,
        o.minutes,
        o.interval,
        o.runs,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    );
    println!(
        "| tree | files | report | wall s | cpu s | peak RSS MiB |\n|---|---:|---|---:|---:|---:|"
    );
    for (name, tree, line, r) in [
        ("one file per interval", &many, &many_line, &m),
        (&*format!("{} s per file", o.rotate), &few, &few_line, &f),
    ] {
        println!(
            "| {name} | {} | {} | {:.2} | {:.2} | {:.0} |",
            file_count(tree),
            line.trim(),
            r.wall,
            r.cpu,
            r.rss_kib as f64 / 1024.0
        );
    }
    println!(
        "many files / few files: {:.2}x wall, {:.2}x peak RSS",
        m.wall / f.wall.max(1e-9),
        m.rss_kib as f64 / f.rss_kib.max(1) as f64
    );
    Ok(())
}

fn measure(o: &Opts, dir: &Path) -> anyhow::Result<()> {
    if o.small_files {
        return measure_small_files(o, dir);
    }
    let (bin, gen_bin) = build(dir, o.debug)?;
    let rows = o.hosts * o.keys * (o.minutes * 60 / o.interval.max(1));
    let (tree, gen_secs) = match &o.tree {
        Some(t) => (t.clone(), None),
        None => {
            let tree = dir.join("tree");
            // about 30 B per flow row on disk (the collector benchmark's 18-26 B/row, plus
            // the varying volumes); keep 2 GB free beside it
            let need = rows * 30;
            let free = free_bytes(dir);
            if need + (2 << 30) > free {
                bail!(
                    "{rows} flow rows need about {:.1} GB, {:.1} GB free in {}",
                    need as f64 / 1e9,
                    free as f64 / 1e9,
                    dir.display()
                );
            }
            eprintln!(
                "generating {} hosts x {} keys x {} min at {} s ({rows} flow rows, about {:.1} GB)...",
                o.hosts,
                o.keys,
                o.minutes,
                o.interval,
                need as f64 / 1e9
            );
            let secs = generate(&gen_bin, o, &tree, o.rotate)?;
            (tree, Some(secs))
        }
    };
    let tree_bytes = du(&tree);
    let sql = dir.join("sql");
    let out = dir.join("stdout.txt");
    // The report's queries as text (once, not timed; also a warm-up of the page cache).
    eprintln!("roce-analyze report --emit-sql (warm-up)...");
    let warm = timed(
        Command::new(&bin)
            .arg("report")
            .arg("--emit-sql")
            .arg(&sql)
            .arg(&tree),
        &out,
        None,
        None,
    )?;
    if !matches!(warm.code, Some(0 | 1)) {
        bail!("roce-analyze report failed ({:?})", warm.code);
    }
    let summary = std::fs::read_to_string(&out).unwrap_or_default();
    let flow_rows_line = summary
        .lines()
        .find(|l| l.contains(" flow rows in "))
        .unwrap_or("")
        .to_string();

    let mut report = Vec::new();
    for i in 0..o.runs {
        eprintln!("roce-analyze report, run {}...", i + 1);
        let mut c = Command::new(&bin);
        c.arg("report").arg(&tree);
        let r = timed(&mut c, &out, None, None)?;
        if !matches!(r.code, Some(0 | 1)) {
            bail!("roce-analyze report failed ({:?})", r.code);
        }
        report.push(r);
    }
    let report = median(&report);
    let script = dir.join("duckdb_report.py");
    std::fs::write(&script, DUCKDB_PY)?;
    let mut duck = Vec::new();
    let mut duck_line = String::new();
    for i in 0..o.runs {
        eprintln!("duckdb, run {}...", i + 1);
        let mut c = Command::new("python3");
        c.arg(&script).arg(&tree).arg(&sql);
        let r = timed(&mut c, &out, None, None)?;
        if r.code != Some(0) {
            bail!(
                "duckdb failed ({:?}); is duckdb installed (scripts/setup.sh)?",
                r.code
            );
        }
        duck_line = std::fs::read_to_string(&out)?.trim().to_string();
        duck.push(r);
    }
    let duck = median(&duck);
    // path: bounded; more runs only when one is affordable (under 5 minutes)
    let limit = o.path_limit_gib << 30;
    let mut path = Vec::new();
    let mut path_note = String::new();
    for i in 0..o.runs {
        eprintln!("roce-analyze path, run {}...", i + 1);
        let mut c = Command::new(&bin);
        c.arg("path").arg(&tree);
        let r = timed(
            &mut c,
            &out,
            Some(Duration::from_secs(o.path_timeout)),
            Some(limit),
        )?;
        let ok = matches!(r.code, Some(0 | 1));
        if !ok {
            path_note = match r.code {
                None if r.wall >= o.path_timeout as f64 => {
                    format!("killed at the {} s timeout", o.path_timeout)
                }
                None => "killed by a signal".into(),
                Some(c) => format!(
                    "exit {c} (address space limited to {} GiB)",
                    o.path_limit_gib
                ),
            };
        }
        path.push(r);
        if !ok || r.wall > 300.0 {
            break;
        }
    }
    let path_runs = path.len();
    let path = median(&path);

    let load = {
        let mut l = [0f64; 3];
        // SAFETY: plain libc query.
        unsafe { libc::getloadavg(l.as_mut_ptr(), 3) };
        l[0]
    };
    println!();
    println!(
        "analysis benchmark: {} hosts x {} QP keys x {} min at {} s = {rows} flow rows; tree {:.0} MiB{}",
        o.hosts,
        o.keys,
        o.minutes,
        o.interval,
        tree_bytes as f64 / (1u64 << 20) as f64,
        gen_secs.map_or(String::new(), |s| format!(", generated in {s:.0} s"))
    );
    if !flow_rows_line.is_empty() {
        println!("report: {}", flow_rows_line.trim());
    }
    println!("{duck_line}");
    println!(
        "{} cores, load average {load:.1} at the end; median of {} runs (path: {path_runs}), largest RSS",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        o.runs
    );
    println!("| command | wall s | cpu s | peak RSS MiB |\n|---|---:|---:|---:|");
    let row = |name: &str, r: &Run| {
        println!(
            "| {name} | {:.2} | {:.2} | {:.0} |",
            r.wall,
            r.cpu,
            r.rss_kib as f64 / 1024.0
        );
    };
    row("roce-analyze report", &report);
    row("DuckDB, the report's queries (2 threads)", &duck);
    row(
        &format!(
            "roce-analyze path{}",
            if path_note.is_empty() {
                String::new()
            } else {
                format!(" ({path_note})")
            }
        ),
        &path,
    );
    println!(
        "report / DuckDB: {:.2}x wall, {:.2}x peak RSS (goal: within 2x, RSS under 1 GiB: {})",
        report.wall / duck.wall,
        report.rss_kib as f64 / duck.rss_kib.max(1) as f64,
        if report.wall <= 2.0 * duck.wall && report.rss_kib < 1 << 20 {
            "met"
        } else {
            "not met"
        }
    );
    println!(
        "path: peak RSS {} 1 GiB; its queries read the tree column of roce-analyze's tables: no DuckDB baseline",
        if path.rss_kib < 1 << 20 {
            "under"
        } else {
            "over"
        }
    );
    Ok(())
}
