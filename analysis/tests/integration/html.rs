//! `roce-analyze html` over a tree written by the real collector with faults (PFC, 802.3x
//! PAUSE, CE and CNPs, go-back-N, bleached DSCP), against a clean run's baseline, loaded in
//! headless Chromium (driven by Python playwright over the DevTools protocol) inside a network
//! namespace of the test's own with only loopback: no console error, no request but the file
//! itself, an SVG in every chart, a screenshot that is not blank, and the numbers in the page
//! equal to `report --json`'s, `path --json`'s and `compare`'s.
//!
//! Needs root (the namespace), `/usr/bin/chromium` and the Python package playwright
//! (scripts/setup.sh installs both). Without them the test is skipped with a message, except
//! with `CI=true`, where a skip is a failure.

use std::io::Read;
use std::path::Path;
use std::process::Command;

use crate::support::{Netns, heavy, is_root, require, run, tmp, write_logs};
use serde_json::Value;

const CHROMIUM: &str = "/usr/bin/chromium";

/// Loads the page (argv: page, screenshot, profile dir) and prints what it saw as JSON.
const DRIVER: &str = r##"
import json, sys
from playwright.sync_api import sync_playwright

page_path, shot, profile = sys.argv[1], sys.argv[2], sys.argv[3]
url = "file://" + page_path
out = {"console": [], "page_errors": [], "requests": [], "failed": []}
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
with sync_playwright() as p:
    ctx = p.chromium.launch_persistent_context(
        profile, executable_path="/usr/bin/chromium", headless=True, args=FLAGS,
        viewport={"width": 1400, "height": 900})
    ctx.on("request", lambda r: out["requests"].append(r.url))
    ctx.on("requestfailed", lambda r: out["failed"].append(r.url))
    page = ctx.pages[0] if ctx.pages else ctx.new_page()
    page.on("console", lambda m: out["console"].append({"type": m.type, "text": m.text}))
    page.on("pageerror", lambda e: out["page_errors"].append(str(e)))
    page.goto(url, wait_until="load")
    page.wait_for_timeout(500)
    out["url"] = url
    out["charts"] = page.eval_on_selector_all("figure.chart", """els => els.map(e => {
        const svg = e.querySelector('svg');
        const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
        return {id: e.id, kind: e.dataset.chart, svg: e.querySelectorAll('svg').length,
                canvas: e.querySelectorAll('canvas').length,
                marks: e.querySelectorAll('svg polyline, svg circle').length,
                width: r.width, height: r.height};
    })""")
    out["dom"] = page.evaluate("""() => {
        const all = (sel, f) => Array.from(document.querySelectorAll(sel)).map(f);
        const figures = {};
        all('table.figures [data-figure]', e => { figures[e.dataset.figure] = e.textContent; });
        const alerts = {};
        all('[data-alert-rule]', e => { alerts[e.dataset.alertRule] = e.dataset.count; });
        const note = document.querySelector('[data-ifaces-total]');
        const path = document.querySelector('#path-totals');
        return {
          figures, alerts,
          checks: all('table.checks [data-check]', e => [e.dataset.check, e.dataset.verdict]),
          parts: all('table.parts [data-part]', e =>
            [e.dataset.check, e.dataset.part, e.dataset.figure, e.cells[1].textContent]),
          worst: all('table.worst [data-part]', e =>
            [e.dataset.check, e.dataset.part, e.dataset.figure, e.dataset.peak, e.cells[2].textContent]),
          totals: all('section.iface', s => {
            const t = {};
            s.querySelectorAll('[data-k]').forEach(c => { t[c.dataset.k] = c.dataset.v; });
            return {host: s.dataset.host, iface: s.dataset.iface, totals: t};
          }),
          ifaces_total: note ? note.dataset.ifacesTotal : null,
          ifaces_shown: note ? note.dataset.ifacesShown : null,
          path: path ? Object.assign({}, path.dataset) : null,
          path_error: document.querySelector('#path-error') ? document.querySelector('#path-error').textContent : null,
          marking_rows: all('table.marking [data-key]', e => [e.dataset.key, e.dataset.field, e.dataset.pkts]),
          baseline: all('[data-baseline-figure]', e => [e.dataset.baselineFigure, e.dataset.worse]),
        };
    }""")
    page.locator("#iface-0").screenshot(path=shot)
    # Where the answer is: at 1400 px and at a phone's width, each with a screenshot of the
    # first screen.
    layout = """() => {
        const top = sel => { const e = document.querySelector(sel);
                             return e ? e.getBoundingClientRect().top + window.scrollY : null; };
        return {verdict: top('#verdict'), checks: top('#checks'), path: top('#path'),
                worst: top('#worst'), timelines: top('#timelines'), alerts: top('#alerts'),
                figures: top('#figures'), height: document.documentElement.scrollHeight,
                scroll_width: document.documentElement.scrollWidth, inner: window.innerWidth,
                verdict_class: document.querySelector('#verdict').dataset.verdict,
                verdict_text: document.querySelector('#verdict').textContent,
                svg_legends: document.querySelectorAll('figure.chart svg text').length,
                caption_keys: document.querySelectorAll('#iface-0 figcaption .key').length};
    }"""
    page.evaluate("window.scrollTo(0, 0)")
    out["wide"] = page.evaluate(layout)
    page.screenshot(path=shot + ".1400.png")
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(300)
    page.evaluate("window.scrollTo(0, 0)")
    out["phone"] = page.evaluate(layout)
    page.screenshot(path=shot + ".390.png")
    ctx.close()
print(json.dumps(out))
"##;

/// What the browser test needs and does not have here, if anything.
fn missing_prerequisite() -> Option<String> {
    if !is_root() {
        return Some("root (the test makes a network namespace)".into());
    }
    if !Path::new(CHROMIUM).exists() {
        return Some(format!("{CHROMIUM} (Debian package chromium)"));
    }
    let py = Command::new("python3")
        .args(["-c", "import playwright.sync_api"])
        .output();
    if !py.is_ok_and(|o| o.status.success()) {
        return Some("the Python package playwright".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("ip (iproute2)".into());
    }
    None
}

/// Decodes an 8-bit RGB or RGBA PNG (non-interlaced, as Chromium writes them) into RGB pixels.
fn decode_png(bytes: &[u8]) -> (usize, usize, Vec<[u8; 3]>) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut w, mut h, mut channels) = (0usize, 0usize, 0usize);
    let mut idat = Vec::new();
    let mut i = 8;
    while i + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
        let kind = &bytes[i + 4..i + 8];
        let data = &bytes[i + 8..i + 8 + len];
        match kind {
            b"IHDR" => {
                w = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
                h = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                assert_eq!(data[8], 8, "bit depth");
                channels = match data[9] {
                    2 => 3,
                    6 => 4,
                    t => panic!("PNG colour type {t}"),
                };
                assert_eq!(data[12], 0, "interlaced PNG");
            }
            b"IDAT" => idat.extend_from_slice(data),
            b"IEND" => break,
            _ => {}
        }
        i += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .unwrap();
    let stride = w * channels;
    assert_eq!(raw.len(), h * (stride + 1), "PNG data size");
    let mut prev = vec![0u8; stride];
    let mut px = Vec::with_capacity(w * h);
    for y in 0..h {
        let f = raw[y * (stride + 1)];
        let mut cur = raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)].to_vec();
        for x in 0..stride {
            let a = if x >= channels { cur[x - channels] } else { 0 } as i16;
            let b = prev[x] as i16;
            let c = if x >= channels { prev[x - channels] } else { 0 } as i16;
            let pred = match f {
                0 => 0,
                1 => a,
                2 => b,
                3 => (a + b) / 2,
                4 => {
                    let p = a + b - c;
                    let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                _ => panic!("PNG filter {f}"),
            };
            cur[x] = cur[x].wrapping_add(pred as u8);
        }
        for p in cur.chunks(channels) {
            px.push([p[0], p[1], p[2]]);
        }
        prev = cur;
    }
    (w, h, px)
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

#[test]
fn the_page_loads_offline_draws_its_charts_and_shows_the_reports_numbers() {
    if let Some(missing) = missing_prerequisite() {
        require(
            false,
            "the_page_loads_offline… (scripts/setup.sh installs chromium and playwright; run as root)",
            &missing,
        );
        return;
    }
    let (root_guard, root) = tmp("html-page");
    let (run_dir, base_dir) = (root.join("run"), root.join("base"));
    write_logs(
        &run_dir,
        &[
            "clean",
            "go_back_n",
            "ecn_ce_cnp",
            "bleached",
            "pfc",
            "pause_8023x",
        ],
    );
    write_logs(&base_dir, &["clean"]);
    let bl = root.join("baseline.json");
    let o = run(&[
        "baseline".as_ref(),
        "-o".as_ref(),
        bl.as_os_str(),
        base_dir.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let page = root.join("report.html");
    let o = run(&[
        "html".as_ref(),
        run_dir.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
        "--baseline".as_ref(),
        bl.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(!text.contains("<script"), "the page has no script");

    let o = run(&["report".as_ref(), "--json".as_ref(), run_dir.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let o = run(&["path".as_ref(), "--json".as_ref(), run_dir.as_os_str()]);
    let path: Value = serde_json::from_slice(&o.stdout).unwrap();
    let o = run(&["compare".as_ref(), bl.as_os_str(), run_dir.as_os_str()]);
    let worse: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("WORSE "))
        .map(|l| l.split(" baseline ").next().unwrap().trim().to_string())
        .collect();
    assert!(
        !worse.is_empty(),
        "the faulty run is worse than the clean baseline"
    );

    // The browser, in a namespace with loopback only, bounded in time.
    let driver = root.join("driver.py");
    std::fs::write(&driver, DRIVER).unwrap();
    let shot = root.join("shot.png");
    let profile = root.join("profile");
    let heavy = heavy();
    let ns = Netns::new(&format!("roce-html-{}", std::process::id()));
    let t = std::time::Instant::now();
    let o = Command::new("ip")
        .args(["netns", "exec", &ns.0, "timeout", "180", "python3"])
        .arg(&driver)
        .arg(&page)
        .arg(&shot)
        .arg(&profile)
        .output()
        .unwrap();
    drop(ns);
    drop(heavy);
    assert!(
        o.status.success(),
        "the browser run failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("browser: {:.1} s", t.elapsed().as_secs_f64());
    let seen: Value = serde_json::from_slice(&o.stdout).unwrap();

    // No console error, no script error, no request but the page itself.
    let errors: Vec<&Value> = seen["console"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] == "error" || m["type"] == "warning")
        .collect();
    assert!(errors.is_empty(), "console: {errors:?}");
    assert_eq!(seen["page_errors"], serde_json::json!([]));
    let url = seen["url"].as_str().unwrap();
    let others: Vec<&Value> = seen["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r.as_str() != Some(url))
        .collect();
    assert!(
        others.is_empty(),
        "requests other than the page: {others:?}"
    );
    assert_eq!(seen["failed"], serde_json::json!([]));

    // Every interface has its five charts, each an SVG with marks in it, drawn at its size.
    let dom = &seen["dom"];
    let shown: usize = s(&dom["ifaces_shown"]).parse().unwrap();
    assert_eq!(
        s(&dom["ifaces_total"]),
        shown.to_string(),
        "every interface drawn"
    );
    assert!(shown >= 6, "an interface per case: {shown}");
    let charts = seen["charts"].as_array().unwrap();
    assert_eq!(charts.len(), shown * 6, "{charts:?}");
    for n in 0..shown {
        for kind in ["xoff", "paused", "ce_share", "cnp_rate", "psn", "marking"] {
            let id = format!("chart-{n}-{kind}");
            let c = charts.iter().find(|c| c["id"] == id.as_str()).expect(&id);
            assert_eq!(c["svg"], 1, "{id}: {c}");
            assert_eq!(c["canvas"], 0, "{id}: {c}");
            assert!(c["width"].as_f64().unwrap() >= 400.0, "{id}: {c}");
            assert!(c["height"].as_f64().unwrap() >= 200.0, "{id}: {c}");
            if kind != "paused" {
                assert!(c["marks"].as_i64().unwrap() > 0, "{id}: no line: {c}");
            }
        }
    }

    // The screenshot of the first interface's charts is not blank: coloured lines on white.
    let (w, h, px) = decode_png(&std::fs::read(&shot).unwrap());
    assert!(w > 400 && h > 200, "{w}x{h}");
    let non_white = px.iter().filter(|p| p.iter().any(|&c| c < 240)).count();
    let coloured = px
        .iter()
        .filter(|p| p.iter().max().unwrap() - p.iter().min().unwrap() > 60)
        .count();
    let mut colours: Vec<[u8; 3]> = px.clone();
    colours.sort();
    colours.dedup();
    let frac = non_white as f64 / px.len() as f64;
    assert!(frac > 0.01, "non-white fraction {frac}");
    assert!(coloured > 50, "coloured pixels {coloured}");
    assert!(colours.len() > 8, "{} colours", colours.len());

    // Verdict first, then the checks, the path, the drill-down; the raw figures last. At a
    // phone's width nothing makes the page scroll sideways (wide tables scroll in place) and
    // the verdict is on the first screen. Each layout's first screen is a screenshot with the
    // FAIL banner's colour in it.
    for (width, name) in [(1400, "wide"), (390, "phone")] {
        let l = &seen[name];
        let y = |k: &str| l[k].as_f64().unwrap_or_else(|| panic!("{name} {k}: {l}"));
        assert_eq!(l["verdict_class"], "Fail", "{l}");
        assert!(
            s(&l["verdict_text"]).contains("data marking"),
            "{name}: {l}"
        );
        assert!(y("verdict") < 150.0, "{name}: {l}");
        assert!(
            y("verdict") < y("checks")
                && y("checks") < y("path")
                && y("path") < y("worst")
                && y("worst") < y("timelines")
                && y("timelines") < y("figures"),
            "{name}: {l}"
        );
        assert!(
            y("scroll_width") <= y("inner"),
            "{name}: the page scrolls sideways: {l}"
        );
        let (w, _, px) =
            decode_png(&std::fs::read(format!("{}.{width}.png", shot.display())).unwrap());
        assert_eq!(w, width, "{name}");
        // the FAIL banner's background (#f8d0d0)
        let banner = px
            .iter()
            .filter(|p| p[0] > 240 && (200..=215).contains(&p[1]) && (200..=215).contains(&p[2]))
            .count();
        assert!(banner > 1000, "{name}: banner pixels {banner}");
    }
    let wide = &seen["wide"];
    // the path (the answer) on the first screens, not thousands of pixels down
    assert!(
        wide["path"].as_f64().unwrap() < 2500.0,
        "path at {}",
        wide["path"]
    );
    // the legend is in the caption, never drawn over the lines
    assert!(wide["caption_keys"].as_i64().unwrap() >= 6, "{wide}");

    // The numbers shown are the report's.
    let f = &report["figures"];
    let figs = dom["figures"].as_object().unwrap();
    for (k, v) in figs {
        let want = if let Some(p) = k.strip_prefix("pfc_xoff_p") {
            f["pfc_xoff"][p.parse::<usize>().unwrap()].clone()
        } else {
            f[k.as_str()].clone()
        };
        assert!(!want.is_null(), "figure {k} not in the JSON");
        let got: f64 = s(v).parse().unwrap();
        assert_eq!(got, want.as_f64().unwrap(), "figure {k}");
    }
    assert!(figs.len() >= 20, "{figs:?}");
    let checks: Vec<(String, String)> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (s(&c["name"]), s(&c["verdict"])))
        .collect();
    let shown_checks: Vec<(String, String)> = dom["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (s(&c[0]), s(&c[1])))
        .collect();
    assert_eq!(shown_checks, checks);
    assert!(checks.iter().any(|(_, v)| v == "Fail"));
    // Parts and worst subjects of every check that did not pass, in order.
    let mut parts = Vec::new();
    let mut worst = Vec::new();
    for c in report["checks"].as_array().unwrap() {
        let pass = c["verdict"] == "Pass";
        let empty = c["worst"].as_array().unwrap().is_empty()
            && c["intervals"].as_array().unwrap().is_empty();
        if pass || empty {
            continue;
        }
        for p in c["parts"].as_array().unwrap() {
            let fig = s(&p["figure"]);
            parts.push(vec![s(&c["name"]), s(&p["part"]), fig.clone(), fig]);
        }
        for w in c["worst"].as_array().unwrap() {
            let fig = s(&w["figure"]);
            worst.push(vec![
                s(&c["name"]),
                s(&w["part"]),
                fig.clone(),
                s(&w["peak"]),
                fig,
            ]);
        }
    }
    let strs = |v: &Value| -> Vec<Vec<String>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(s).collect())
            .collect()
    };
    assert_eq!(strs(&dom["parts"]), parts);
    assert_eq!(strs(&dom["worst"]), worst);
    assert!(
        worst.iter().any(|w| w[1] == "go_back_n"),
        "the go-back-N QP is among the worst: {worst:?}"
    );
    // The timelines add up to the report's figures (every interface is drawn).
    let total = |k: &str| -> f64 {
        dom["totals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                i["totals"][k]
                    .as_str()
                    .map_or(0.0, |v| v.parse::<f64>().unwrap())
            })
            .sum()
    };
    for p in 0..8 {
        assert_eq!(
            total(&format!("xoff_p{p}")),
            f["pfc_xoff"][p].as_f64().unwrap(),
            "XOFF p{p}"
        );
    }
    for (k, j) in [
        ("data_pkts", "data_pkts"),
        ("ce", "ce"),
        ("cnp", "cnp_pkts"),
        ("psn_gaps", "psn_gaps"),
        ("psn_retrans", "psn_retrans"),
        ("pause_frames", "pause_frames"),
    ] {
        assert_eq!(total(k), f[j].as_f64().unwrap(), "{k}");
    }
    assert!(total("ce") > 0.0 && total("psn_retrans") > 0.0);
    assert!(
        f["pfc_xoff"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x.as_i64() > Some(0))
    );
    // Alerts per rule.
    let alerts = dom["alerts"].as_object().unwrap();
    let want_alerts = f["alerts"].as_object().unwrap();
    assert_eq!(
        alerts.len(),
        want_alerts.len(),
        "{alerts:?} {want_alerts:?}"
    );
    for (rule, n) in want_alerts {
        assert_eq!(s(&alerts[rule]), s(n), "alerts {rule}");
    }
    // The path's totals and its marking changes.
    let pt = &dom["path"];
    assert!(dom["path_error"].is_null(), "{}", dom["path_error"]);
    let t = &path["totals"];
    for (k, j) in [
        ("keys", "keys"),
        ("changes", "changes"),
        ("violations", "violations"),
        ("lostData", "lost_data"),
    ] {
        assert_eq!(s(&pt[k]), s(&t[j]), "path {k}");
    }
    let changes: usize = path["keys"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|k| k["hops"].as_array().unwrap())
        .map(|h| h["changes"].as_array().unwrap().len())
        .sum();
    assert_eq!(dom["marking_rows"].as_array().unwrap().len(), changes);
    // The baseline comparison: the figures compare calls worse.
    let base = strs(&dom["baseline"]);
    // every figure compare judges (the latency p99s among them, not worse without samples)
    let figures = analysis::report::rates(&Default::default()).len();
    assert_eq!(figures, 12);
    assert_eq!(base.len(), figures, "{base:?}");
    let dom_worse: Vec<String> = base
        .iter()
        .filter(|r| r[1] == "true")
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(dom_worse, worse);

    // ROCE_HTML_KEEP=1 keeps the page and the screenshot for a look.
    if std::env::var_os("ROCE_HTML_KEEP").is_some() {
        std::mem::forget(root_guard);
        eprintln!("kept {} and {}", page.display(), shot.display());
    }
}

/// Clear errors: a missing directory, a file that is not a baseline.
#[test]
fn missing_directory_and_bad_baseline_are_clear_errors() {
    let (_root, root) = tmp("html-errors");
    let o = run(&[
        "html".as_ref(),
        root.join("nope").as_os_str(),
        "-o".as_ref(),
        root.join("x.html").as_os_str(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("does not exist"), "{err}");
    assert!(!root.join("x.html").exists());
    let dir = root.join("run");
    write_logs(&dir, &["clean"]);
    let bad = root.join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let o = run(&[
        "html".as_ref(),
        dir.as_os_str(),
        "-o".as_ref(),
        root.join("x.html").as_os_str(),
        "--baseline".as_ref(),
        bad.as_os_str(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is not a baseline"), "{err}");
    // A clean run: a page with every section but no fault.
    let o = run(&[
        "html".as_ref(),
        dir.as_os_str(),
        "-o".as_ref(),
        root.join("x.html").as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(root.join("x.html")).unwrap();
    assert!(page.contains("id=\"chart-0-xoff\""));
    assert!(!page.contains("id=\"baseline\""));
}

/// `--max-ifaces` and `--max-points` bound the page: the most troubled interfaces only, and
/// intervals summed into buckets (no browser needed).
#[test]
fn limits_bound_the_interfaces_and_the_points() {
    let (_root, root) = tmp("html-limits");
    let dir = root.join("run");
    write_logs(&dir, &["clean", "go_back_n", "ecn_ce_cnp", "pfc"]);
    let page = root.join("p.html");
    let o = run(&[
        "html".as_ref(),
        dir.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
        "--max-ifaces".as_ref(),
        "2".as_ref(),
        "--max-points".as_ref(),
        "2".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(
        text.contains("data-ifaces-total=\"4\" data-ifaces-shown=\"2\""),
        "two of four interfaces drawn"
    );
    assert_eq!(text.matches("<section class=\"iface\"").count(), 2);
    assert_eq!(text.matches("<figure class=\"chart\"").count(), 12);
    // The clean interface has no fault: it is not among the two drawn.
    assert!(!text.contains("data-iface=\"clean\""));
    for (i, _) in text.match_indices("data-points=\"") {
        let n: usize = text[i + 13..].split('"').next().unwrap().parse().unwrap();
        assert!(n <= 3, "{n} points with --max-points 2");
    }
    // The global filters apply: --iface leaves one interface.
    let o = run(&[
        "html".as_ref(),
        dir.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
        "--iface".as_ref(),
        "go_back_n".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(text.contains("data-ifaces-total=\"1\" data-ifaces-shown=\"1\""));
    assert!(text.contains("data-iface=\"go_back_n\""));
    assert!(text.contains("data-figure=\"psn_gaps\">1<"));
    assert!(
        text.contains("data-figure=\"ce\">0<"),
        "the report is filtered too"
    );
}
