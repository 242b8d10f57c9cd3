//! The terminal view of the real binary, in a tmux pane of a fixed size (80x24 and 200x60),
//! typed at with `send-keys` and read with `capture-pane`: the panes, scrolling to the last QP,
//! sort, filter, pause, rows that stay when traffic stops, and `q` (or SIGTERM) ending the run
//! cleanly with the terminal restored. The synthetic source (`--synthetic-qps`, hidden
//! `--synthetic-mix` and `--synthetic-stop-after`) needs no BPF, no network and no root.
//!
//! Each test runs its own tmux server (`tmux -L ro-tui-<pid>-<name>`), killed by a guard's
//! `Drop` on every path. Without tmux the tests skip outside CI and fail under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use test_support::{TempDir, require};

/// A tmux server with one session running roce-observe.
struct Pane {
    socket: String,
    out: PathBuf,
    // Dropped after the tmux server was killed: removes the output and its `.exit` / `.pid`.
    _dir: TempDir,
}

fn tmux_present(test: &str) -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    require(ok, test, "tmux (scripts/setup.sh installs it)")
}

impl Pane {
    /// roce-observe with `args` in a `w` x `h` pane; its exit status goes to `<out>.exit` and
    /// its pid to `<out>.pid`.
    fn start(name: &str, w: u16, h: u16, args: &[&str]) -> Pane {
        Pane::start_with(name, w, h, args, "")
    }

    /// As [`Pane::start`], with `redirect` after roce-observe's arguments (`2>FILE`).
    fn start_with(name: &str, w: u16, h: u16, args: &[&str], redirect: &str) -> Pane {
        let dir = TempDir::new(&format!("tui-{name}"));
        let out = dir.join("out");
        let bin = env!("CARGO_BIN_EXE_roce-observe");
        let cmd = format!(
            "echo $$ > {pid}; {bin} --out {out} {args} {redirect}; echo $? > {exit}; sleep 120",
            pid = out.with_extension("pid").display(),
            out = out.display(),
            args = args.join(" "),
            exit = out.with_extension("exit").display(),
        );
        let p = Pane {
            socket: format!("ro-tui-{}-{name}", std::process::id()),
            out,
            _dir: dir,
        };
        let (w, h) = (w.to_string(), h.to_string());
        p.tmux(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &w,
            "-y",
            &h,
            "-e",
            "LANG=C.UTF-8",
            "-e",
            "RUST_BACKTRACE=0",
            "sh",
            "-c",
            &cmd,
        ]);
        p
    }

    fn tmux(&self, args: &[&str]) -> String {
        let o = Command::new("tmux")
            .args(["-u", "-L", &self.socket])
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            o.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The pane's lines as shown.
    fn screen(&self) -> Vec<String> {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect()
    }

    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "t"];
        a.extend_from_slice(keys);
        self.tmux(&a);
    }

    /// Waits (at most `limit`) until the screen satisfies `ok`; the screen.
    fn wait(&self, what: &str, limit: Duration, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
        let t = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if t.elapsed() > limit {
                panic!("{what}: not on screen within {limit:?}:\n{}", s.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for a line containing `text`.
    fn wait_text(&self, text: &str) -> Vec<String> {
        self.wait(text, Duration::from_secs(15), |s| {
            s.iter().any(|l| l.contains(text))
        })
    }

    /// roce-observe's exit status, waited for at most `limit`.
    fn exit_status(&self, limit: Duration) -> i32 {
        let f = self.out.with_extension("exit");
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Ok(s) = std::fs::read_to_string(&f)
                && !s.trim().is_empty()
            {
                return s.trim().parse().unwrap();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "roce-observe did not exit within {limit:?}:\n{}",
            self.screen().join("\n")
        );
    }

    fn summary(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.out.join("summary.json")).expect("summary.json");
        serde_json::from_str(&text).unwrap()
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// The line of the table's title (` QPs ...`).
fn title(s: &[String]) -> &str {
    s.iter().find(|l| l.starts_with(" QPs")).map_or("", |l| l)
}

/// The age of a table row, in seconds (its last column: `4s`, `2m`, ...).
fn age_s(row: &str) -> u64 {
    let a = row.split_whitespace().last().unwrap_or("");
    let (n, unit) = a.split_at(a.len().saturating_sub(1));
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => 0,
    };
    n.parse::<u64>().unwrap_or(0) * mult
}

/// An alert line (`HH:MM:SS sev ...`).
fn is_alert(l: &str) -> bool {
    let b = l.as_bytes();
    b.len() > 9 && b[2] == b':' && b[5] == b':'
}

/// The table's data rows (lines starting with an address).
fn rows(s: &[String]) -> Vec<&str> {
    s.iter()
        .filter(|l| l.starts_with("10.77."))
        .map(|l| l.as_str())
        .collect()
}

/// Lines 0-2 the header, 3 the table's title, 4 its columns, 5-17 rows, 18 the alerts' title,
/// 19-22 alerts, 23 the keys; every line within 80 columns and where it belongs, so nothing
/// wrapped into the next pane.
fn assert_80x24_layout(s: &[String]) {
    let all = s.join("\n");
    assert_eq!(s.len(), 24, "{all}");
    assert!(s.iter().all(|l| l.chars().count() <= 80), "{all}");
    assert!(
        s[0].starts_with("roce-observe  ") && s[0].contains("interval 300ms"),
        "{all}"
    );
    assert!(
        s[1].starts_with("synthetic0  keys: ") && s[1].contains(" tracked, "),
        "{all}"
    );
    assert!(s[2].starts_with("  PFC in: "), "{all}");
    assert!(s[3].starts_with(" QPs 1-13 of "), "{all}");
    assert!(s[4].starts_with("src ") && s[4].ends_with(" age"), "{all}");
    for l in &s[5..18] {
        assert!(
            l.starts_with("10.77.") && l.contains(" 0x000"),
            "row: {l}\n{all}"
        );
    }
    assert!(s[18].starts_with(" Alerts"), "{all}");
    for l in &s[19..23] {
        assert!(is_alert(l), "alert: {l}\n{all}");
    }
    assert!(s[23].starts_with("q quit"), "{all}");
}

#[test]
fn at_80x24_every_qp_is_reachable_by_scrolling() {
    if !tmux_present("at_80x24_every_qp_is_reachable_by_scrolling") {
        return;
    }
    let p = Pane::start(
        "scroll",
        80,
        24,
        &["--synthetic-qps", "40", "--interval", "300ms"],
    );
    let s = p.wait_text("QPs 1-13 of 40, 27 more");
    assert_eq!(
        rows(&s)[0].split_whitespace().nth(2),
        Some("0x000100"),
        "{s:#?}"
    );
    p.keys(&["PageDown"]);
    p.wait_text("QPs 14-26 of 40, 13 above, 14 more");
    p.keys(&["End"]);
    let s = p.wait_text("QPs 28-40 of 40, 27 above");
    let last = rows(&s)[12];
    assert!(
        last.starts_with("10.77.0.39 ") && last.contains("0x000127"),
        "{s:#?}"
    );
    p.keys(&["Up"]);
    p.wait_text("QPs 27-39 of 40, 26 above, 1 more");
    p.keys(&["Home"]);
    p.wait_text("QPs 1-13 of 40, 27 more");
    p.keys(&["q"]);
    assert_eq!(p.exit_status(Duration::from_secs(15)), 0);
}

/// Sort, filter and pause on varied traffic that stops after 2 s: the panes in place, rows that
/// stay with their last values and age, then `q`: exit 0, summary.json, the terminal back.
#[test]
fn at_80x24_panes_sort_filter_pause_and_q() {
    if !tmux_present("at_80x24_panes_sort_filter_pause_and_q") {
        return;
    }
    let p = Pane::start(
        "keys",
        80,
        24,
        &[
            "--synthetic-qps",
            "40",
            "--synthetic-mix",
            "--synthetic-stop-after",
            "2s",
            "--interval",
            "300ms",
        ],
    );
    let s = p.wait("rows and four alerts", Duration::from_secs(15), |s| {
        s.len() == 24 && is_alert(&s[22]) && title(s).starts_with(" QPs 1-13 of")
    });
    assert_80x24_layout(&s);
    assert!(title(&s).contains(" more"), "{s:#?}");
    assert!(s[2].contains("p3 XOFF"), "{s:#?}");
    // the busiest QP by packets is 10.77.0.31; by CE 10.77.0.11
    let first = |s: &[String]| {
        rows(s)[0]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(first(&s), "10.77.0.31", "{s:#?}");
    p.keys(&["2"]);
    let s = p.wait_text("sort CE");
    assert_eq!(first(&s), "10.77.0.11", "{s:#?}");
    p.keys(&["s"]);
    p.wait_text("sort PSN gaps");
    p.keys(&["/", "0", "x", "0", "0", "0", "1", "0", "5", "Enter"]);
    let s = p.wait_text("QPs 1-1 of 1 ");
    assert_eq!(rows(&s).len(), 1, "{s:#?}");
    assert!(rows(&s)[0].contains("0x000105"), "{s:#?}");
    p.keys(&["Escape"]);
    p.wait("all QPs again", Duration::from_secs(5), |s| {
        title(s).contains("QPs 1-13 of")
    });
    // traffic stopped at 2 s: the rows stay, their ages grow
    let s = p.wait("rows idle for 2 s", Duration::from_secs(15), |s| {
        rows(s).len() == 13 && rows(s).iter().all(|r| age_s(r) >= 2)
    });
    assert_80x24_layout(&s);
    // paused: the same screen a second later (the header's time and the ages included)
    p.keys(&["p"]);
    let a = p.wait_text("PAUSED");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(p.screen(), a, "the display changed while paused");
    p.keys(&["p"]);
    p.wait("resumed", Duration::from_secs(5), |s| {
        !s[0].contains("PAUSED") && s[0].trim() != a[0].replace("PAUSED", "").trim()
    });
    p.keys(&["q"]);
    assert_eq!(p.exit_status(Duration::from_secs(15)), 0);
    let sum = p.summary();
    assert!(sum["alerts"]["dscp_mismatch"].as_u64() > Some(0), "{sum}");
    // the terminal restored: the normal screen with the stop line
    p.wait_text("roce-observe: stopped (requested)");
}

/// 200x60: every QP on one page (30 QPs and 8 responder keys), the wider columns, the alerts
/// pane with ten lines, CE beside the CNPs that answer it, NAKs and RNR NAKs.
#[test]
fn at_200x60_all_rows_and_wide_columns() {
    if !tmux_present("at_200x60_all_rows_and_wide_columns") {
        return;
    }
    let p = Pane::start(
        "wide",
        200,
        60,
        &[
            "--synthetic-qps",
            "30",
            "--synthetic-mix",
            "--interval",
            "300ms",
        ],
    );
    // the alerts take the lines the 38 rows leave: more than the 10 of a fifth of the screen
    let s = p.wait("38 keys, over ten alerts", Duration::from_secs(15), |s| {
        title(s).starts_with(" QPs 1-38 of 38 |") && s.iter().filter(|l| is_alert(l)).count() > 10
    });
    let all = s.join("\n");
    assert!(
        s.len() == 60 && s.iter().all(|l| l.chars().count() <= 200),
        "{all}"
    );
    let head = s.iter().find(|l| l.starts_with("src ")).unwrap();
    for c in [
        "dir", "rate", "dscp", "cnp←", "dscp≠", "ect✗", "since", "rtx", "nak", "rnr", "age",
    ] {
        assert!(head.split_whitespace().any(|w| w == c), "{c}: {head}");
    }
    assert_eq!(rows(&s).len(), 38, "{all}");
    assert!(!title(&s).contains("more"), "{all}");
    // the reverse rows carry the NAKs and RNR NAKs; 10.77.0.11's CE beside the CNPs answering it
    let r = rows(&s);
    let line = |src: &str, dst: &str| {
        r.iter()
            .find(|l| l.split_whitespace().take(2).eq([src, dst]))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("{src} -> {dst}:\n{all}"))
    };
    // a column's index by its title (every cell is one word)
    let at = |c: &str| head.split_whitespace().position(|w| w == c).unwrap();
    let ce = line("10.77.0.11", "10.77.200.1");
    assert!(
        ce[at("ce")] != "0" && ce[at("ce")] == ce[at("cnp←")],
        "ce {} cnp← {}",
        ce[at("ce")],
        ce[at("cnp←")]
    );
    assert_ne!(
        line("10.77.200.1", "10.77.0.5")[at("nak")],
        "0",
        "NAKs to 10.77.0.5"
    );
    assert_ne!(
        line("10.77.200.1", "10.77.0.8")[at("rnr")],
        "0",
        "RNR NAKs to 10.77.0.8"
    );
    p.keys(&["q"]);
    assert_eq!(p.exit_status(Duration::from_secs(15)), 0);
}

/// SIGTERM while the view runs: the run ends as by `q`, the terminal restored.
#[test]
fn sigterm_restores_the_terminal_and_exits_cleanly() {
    if !tmux_present("sigterm_restores_the_terminal_and_exits_cleanly") {
        return;
    }
    let p = Pane::start(
        "sigterm",
        80,
        24,
        &["--synthetic-qps", "20", "--interval", "300ms"],
    );
    p.wait_text("QPs 1-13 of 20");
    let pid = child_pid(&p.out.with_extension("pid"));
    // SAFETY: signalling the observer this test started (the shell's only child).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(p.exit_status(Duration::from_secs(15)), 0);
    p.wait_text("roce-observe: stopped (SIGTERM)");
    assert!(p.summary()["alerts"].is_object());
}

/// The terminal closed under the view (the tmux server killed: a hang-up, SIGHUP): the run
/// stops as on SIGHUP, every file written, and the process ends (crossterm's reader would spin
/// on the dead terminal: the view waits for keys itself).
#[test]
fn a_closed_terminal_stops_like_sighup() {
    if !tmux_present("a_closed_terminal_stops_like_sighup") {
        return;
    }
    let name = "hangup";
    let err_dir = TempDir::new(&format!("tui-{name}-err"));
    let err = err_dir.join("stderr");
    let redirect = format!("2>{}", err.display());
    let args = ["--synthetic-qps", "20", "--interval", "300ms"];
    let p = Pane::start_with(name, 80, 24, &args, &redirect);
    p.wait_text("QPs 1-13 of 20");
    let pid = child_pid(&p.out.with_extension("pid"));
    p.tmux(&["kill-server"]);
    let t = Instant::now();
    while running(pid) {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "roce-observe still running after its terminal closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&err).unwrap();
    assert!(text.contains("roce-observe: stopped (SIGHUP)"), "{text}");
    assert!(p.summary()["alerts"].is_object());
}

/// The process exists and is not a zombie.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// The pid of the only child of the shell whose pid is in `f`.
fn child_pid(f: &Path) -> i32 {
    let sh = std::fs::read_to_string(f).unwrap();
    let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", sh.trim())).unwrap();
    kids.split_whitespace().next().unwrap().parse().unwrap()
}
