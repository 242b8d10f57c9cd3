//! The screen, drawn with ratatui: a header (host, interfaces, keys, PFC), the QP table, the
//! host's QPs from the RDMA subsystem (when the inventory runs) and the alerts, each in its own
//! pane, and a line of keys. Every line is cut to its pane's width with
//! an ellipsis, so nothing wraps into another pane; at 80x24 the table keeps 13 rows.

use std::collections::HashMap;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Wrap};

use super::model::{HostQp, IfaceView, NicView, PfcFigures, QpRow};
use super::screen::Screen;
use contract::alert::Severity;
use contract::time::rfc3339;

/// Smaller than this, the screen only says so.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 12;

pub fn draw(f: &mut Frame<'_>, s: &mut Screen) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "roce-observe: the terminal is too small (at least {MIN_WIDTH}x{MIN_HEIGHT}); q quits"
        );
        // the only pane: this one may wrap
        f.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
        return;
    }
    let header = header_lines(s, area.width as usize, (area.height / 4).max(3) as usize);
    // Panes take the space there is: the alerts at least a fifth of what is below the header
    // (3 to 12 lines), and every line the QP table (with the host QPs) does not need.
    let avail = area.height.saturating_sub(header.len() as u16 + 1);
    let min_alerts = (avail / 5).clamp(3, 12) + 1;
    let table_needs = {
        let rows = s.rows().1.len() as u16;
        let host = s
            .shown()
            .data
            .host_qps
            .as_ref()
            .map_or(0, |q| q.len() as u16 + 2);
        rows.saturating_add(2).saturating_add(host).max(4)
    };
    let alerts_needs = (s.alert_lines().len() as u16).max(1) + 1;
    let alerts_h = alerts_needs
        .min(avail.saturating_sub(table_needs))
        .clamp(min_alerts, avail.saturating_sub(4).max(min_alerts));
    let [head, mid, alerts, keys] = Layout::vertical([
        Constraint::Length(header.len() as u16),
        Constraint::Min(4),
        Constraint::Length(alerts_h),
        Constraint::Length(1),
    ])
    .areas(area);
    // The NIC's own view (its counters and configuration checks): first, up to half the
    // space, when no packet was seen (a hardware-RoCE host: the only data there is); else a
    // few lines below the packet table.
    let no_packets = s.shown().data.rows.is_empty();
    let nic = nic_lines(&s.shown().data.nics, mid.width as usize, !no_packets);
    let (mid, nic_area) = if nic.is_empty() {
        (mid, None)
    } else {
        let h = if no_packets {
            (nic.len() as u16 + 1).min((mid.height / 2).max(3))
        } else {
            (nic.len() as u16 + 1).min((mid.height / 4).max(2))
        };
        if no_packets {
            let [n, m] = Layout::vertical([Constraint::Length(h), Constraint::Min(2)]).areas(mid);
            (m, Some(n))
        } else {
            let [m, n] = Layout::vertical([Constraint::Min(2), Constraint::Length(h)]).areas(mid);
            (m, Some(n))
        }
    };
    // The host's QPs below the packet table: most of the space when no packet was seen (a
    // hardware-RoCE host), else as many lines as they need, up to half.
    let host_n = s.shown().data.host_qps.as_ref().map(Vec::len);
    let (table, host) = match host_n {
        None => (mid, None),
        Some(n) => {
            let h = if s.shown().data.rows.is_empty() {
                mid.height.saturating_sub(2).max(3)
            } else {
                (n as u16 + 2).clamp(3, (mid.height / 2).max(3))
            };
            let [t, hq] = Layout::vertical([Constraint::Min(2), Constraint::Length(h)]).areas(mid);
            (t, Some(hq))
        }
    };
    f.render_widget(Paragraph::new(header), head);
    draw_table(f, table, s);
    if let Some(hq) = host {
        draw_host_qps(f, hq, s);
    }
    if let Some(na) = nic_area {
        draw_nic(f, na, &s.shown().data.nics, nic);
    }
    draw_alerts(f, alerts, s);
    f.render_widget(Paragraph::new(key_line(s, keys.width as usize)), keys);
    if s.help {
        let over = Rect {
            y: head.y,
            height: area.height.saturating_sub(1),
            ..area
        };
        f.render_widget(ratatui::widgets::Clear, over);
        let w = over.width as usize;
        let lines: Vec<Line<'static>> = HELP
            .iter()
            .map(|l| Line::from(fit(l, w.saturating_sub(1))))
            .collect();
        let block = Block::new()
            .borders(Borders::TOP)
            .title(Span::styled(" Help: any key closes it ", bold()));
        f.render_widget(Paragraph::new(lines).block(block), over);
    }
}

/// What `?` shows: the keys, then what the columns mean.
const HELP: [&str; 30] = [
    "Keys",
    "  q, Ctrl-C    stop observing (the last interval is written)",
    "  Tab          move the scroll keys between the QP table and the alerts",
    "  ↑ ↓ PgUp PgDn Home End   scroll the pane in focus",
    "  s, 1-5       sort the QPs: packets, CE, PSN gaps, off-DSCP, retransmissions",
    "  /            filter QPs and alerts by address, interface, QP or text; Esc clears",
    "  p, space     pause the display (counting goes on)",
    "  ?            this help",
    "Alerts: criticals first, then warnings, newest first within each; rule, what was",
    "  observed against what the policy expects, then where",
    "QP columns (counts since the key was first seen)",
    "  src dst qp   the key: addresses and BTH destination QP",
    "  dir rate     ingress/egress; bits/s in the last interval (100 columns and up)",
    "  dscp         data DSCP most packets had in the last interval (100 columns and up)",
    "  pkts         packets",
    "  ce           CE-marked packets (yellow: no CNP came back)",
    "  cnp←         CNPs from dst back to src on the same interface",
    "  gaps         PSN gaps",
    "  dscp≠        packets off the policy's DSCP, as value:packets of the most common",
    "               value (0 bleached, 46 EF), + when there are others",
    "  ect✗         data packets not ECN-capable (Not-ECT)",
    "  since        how long the key has been off the policy (100 columns and up)",
    "  rtx nak rnr  retransmitted PSNs, NAKs, RNR NAKs (rnr: 100 columns and up)",
    "  age          time since the key's last packet",
    "Header: per interface its keys, and PFC per direction and priority, the",
    "  priority with the densest second first: XOFF frames, time paused, peak XOFF/s",
    "NIC pane: per interface the NIC's own view: its configuration checks (✗ failed,",
    "  ? undecided), PFC frames per priority from its counters (last interval, Σ since",
    "  the start), and the counters that moved, faults (drops, storms, NAKs) in red",
    "More: docs/live.md",
];

/// `s` cut to `w` characters, the last one an ellipsis when cut.
pub fn fit(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    if w == 0 {
        return String::new();
    }
    let mut t: String = s.chars().take(w - 1).collect();
    t.push('…');
    t
}

/// `n` in at most `w` characters: as it is, else with k, M, G, T (rounded down).
pub fn compact(n: u64, w: usize) -> String {
    let s = n.to_string();
    if s.len() <= w {
        return s;
    }
    for (div, suffix) in [(1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T"), (1e15, "P")] {
        let v = n as f64 / div;
        let t = if v < 10.0 {
            format!("{:.1}{suffix}", (v * 10.0).floor() / 10.0)
        } else {
            format!("{}{suffix}", v.floor() as u64)
        };
        if t.len() <= w {
            return t;
        }
    }
    "+".repeat(w.min(1))
}

/// Time since `ns` at `now`: `4s`, `12m`, `3h`, `2d`.
pub fn age(now: u64, ns: Option<u64>) -> String {
    let Some(ns) = ns else {
        return "-".into();
    };
    let s = now.saturating_sub(ns) / 1_000_000_000;
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn rate(bps: f64) -> String {
    match bps {
        b if b >= 1e9 => format!("{:.1}G", b / 1e9),
        b if b >= 1e6 => format!("{:.1}M", b / 1e6),
        b if b >= 1e3 => format!("{:.0}k", b / 1e3),
        b => format!("{b:.0}"),
    }
}

/// Seconds in three figures or so: `1.25s`, `12.5ms`, `40µs`.
pub fn seconds(s: f64) -> String {
    if s <= 0.0 {
        "0s".into()
    } else if s >= 1.0 {
        format!("{s:.2}s")
    } else if s >= 1e-3 {
        format!("{:.1}ms", s * 1e3)
    } else {
        format!("{:.0}µs", s * 1e6)
    }
}

fn duration(d: std::time::Duration) -> String {
    let us = d.as_micros();
    match us {
        u if u % 1_000_000 == 0 => format!("{}s", u / 1_000_000),
        u if u % 1000 == 0 => format!("{}ms", u / 1000),
        u => format!("{u}us"),
    }
}

fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

/// The header: a title line, then per interface its keys and its PFC figures; cut to `max`
/// lines (the last then says how many interfaces are left out).
fn header_lines(s: &Screen, w: usize, max: usize) -> Vec<Line<'static>> {
    let sh = s.shown();
    let i = &s.info;
    let status = match (s.stopping, s.paused()) {
        (true, _) => " STOPPING ",
        (false, true) => " PAUSED ",
        _ => "",
    };
    let time = match sh.data.now_ns {
        0 => "waiting for the first interval".to_string(),
        t => rfc3339(t)[..19].replace('T', " ") + "Z",
    };
    let title = format!(
        "roce-observe  {}  interval {}  {time}  out {}",
        i.host,
        duration(i.interval),
        i.out
    );
    let mut lines = vec![Line::from(vec![
        Span::styled(status, Style::default().add_modifier(Modifier::REVERSED)),
        Span::styled(fit(&title, w.saturating_sub(status.len())), bold()),
    ])];
    // the start-up diagnosis the view must not hold back (a hardware-RoCE interface)
    for n in &i.notes {
        lines.push(Line::from(Span::styled(
            fit(&format!("! {n}"), w),
            Style::default().fg(Color::Yellow),
        )));
    }
    let mut ifaces: Vec<IfaceView> = sh.data.ifaces.clone();
    for n in &i.ifaces {
        if !ifaces.iter().any(|v| &v.name == n) {
            ifaces.push(IfaceView {
                name: n.clone(),
                ..Default::default()
            });
        }
    }
    for (k, v) in ifaces.iter().enumerate() {
        if lines.len() + 2 > max && k > 0 {
            let more = format!("… {} more interfaces", ifaces.len() - k);
            lines.pop();
            lines.push(Line::from(fit(&more, w)));
            break;
        }
        let keys = format!(
            "{}  keys: {} tracked, {} active, {} new, {} evicted",
            v.name, v.tracked, v.active, v.new, v.evicted
        );
        lines.push(Line::from(Span::styled(fit(&keys, w), bold())));
        lines.push(Line::from(fit(&pfc_line(v), w)));
    }
    lines.truncate(max.max(1));
    lines
}

/// `  PFC in: p3 XOFF 12, paused 0.012s, peak 7/s | eg: none`, PAUSE frames when any.
fn pfc_line(v: &IfaceView) -> String {
    let mut parts = Vec::new();
    for (d, name) in ["in", "eg"].iter().enumerate() {
        // the densest second first (a storm on p3 is never cut after p0 and p1), then XOFF
        let mut by: Vec<(usize, &PfcFigures)> = v.pfc[d]
            .iter()
            .enumerate()
            .filter(|(_, f)| f.xoff > 0 || f.peak_1s > 0)
            .collect();
        by.sort_by(|a, b| {
            (b.1.peak_1s, b.1.xoff)
                .cmp(&(a.1.peak_1s, a.1.xoff))
                .then(a.0.cmp(&b.0))
        });
        let prios: Vec<String> = by
            .into_iter()
            .map(|(p, f)| {
                let paused = f.paused_s.map_or("-".to_string(), seconds);
                format!(
                    "p{p} XOFF {}, paused {paused}, peak {}/s",
                    compact(f.xoff, 6),
                    compact(f.peak_1s, 6)
                )
            })
            .collect();
        let mut t = if prios.is_empty() {
            "none".to_string()
        } else {
            prios.join("; ")
        };
        if v.pause[d] > 0 {
            t += &format!(", PAUSE {}", compact(v.pause[d], 6));
        }
        parts.push(format!("{name}: {t}"));
    }
    format!("  PFC {}", parts.join(" | "))
}

/// One column of the QP table.
struct Col {
    title: &'static str,
    /// Shown from this width tier on (0: 80 columns, 1: 100, 2: 140).
    from: usize,
    /// Width per tier (0 for the addresses: what is left).
    widths: [usize; 3],
    right: bool,
    /// The cell's text, at most the width given.
    text: fn(&QpRow, &Ctx, usize) -> String,
    /// Shown in colour when true.
    fault: fn(&QpRow) -> bool,
}

/// What cells need besides their row.
struct Ctx {
    now: u64,
    /// Each interface's latest interval end (a row active then has a rate).
    ends: HashMap<String, u64>,
}

fn no_fault(_: &QpRow) -> bool {
    false
}

const fn col(
    title: &'static str,
    from: usize,
    widths: [usize; 3],
    right: bool,
    text: fn(&QpRow, &Ctx, usize) -> String,
    fault: fn(&QpRow) -> bool,
) -> Col {
    Col {
        title,
        from,
        widths,
        right,
        text,
        fault,
    }
}

/// Every column, in order (a table: one line each).
#[rustfmt::skip]
fn all_columns() -> [Col; 18] {
    let (l, r) = (false, true);
    [
        col("iface", 2, [12; 3], l, |r, _, _| r.iface.to_string(), no_fault),
        col("src", 0, [0; 3], l, |r, _, _| r.src.to_string(), no_fault),
        col("dst", 0, [0; 3], l, |r, _, _| r.dst.to_string(), no_fault),
        col("qp", 0, [8; 3], l, |r, _, _| format!("0x{:06x}", r.qp), no_fault),
        col("dir", 1, [3; 3], l, |r, _, _| r.dir[..2].to_string(), no_fault),
        col("pkts", 0, [5, 7, 9], r, |r, _, w| compact(r.pkts, w), no_fault),
        col("rate", 1, [6; 3], r, |r, x, _| rate_of(r, x), no_fault),
        col("dscp", 1, [4; 3], r, |r, _, _| r.dscp.map_or("-".into(), |d| d.to_string()), no_fault),
        col("ce", 0, [5, 7, 9], r, |r, _, w| compact(r.ce, w), |r| r.ce > 0 && r.cnp_back == 0),
        col("cnp←", 0, [5, 7, 9], r, |r, _, w| compact(r.cnp_back, w), no_fault),
        col("gaps", 0, [4, 6, 8], r, |r, _, w| compact(r.gaps, w), |r| r.gaps > 0),
        col("dscp≠", 0, [5, 7, 9], r, |r, _, w| off_values(r, w), |r| r.off_dscp > 0),
        col("ect✗", 0, [4, 6, 8], r, |r, _, w| compact(r.not_ect, w), |r| r.not_ect > 0),
        col("since", 1, [5; 3], r, |r, x, _| age(x.now, r.first_bad_ns), |r| r.first_bad_ns.is_some()),
        col("rtx", 0, [4, 6, 8], r, |r, _, w| compact(r.retrans, w), |r| r.retrans > 0),
        col("nak", 0, [4, 6, 8], r, |r, _, w| compact(r.naks, w), |r| r.naks > 0),
        col("rnr", 1, [4, 6, 8], r, |r, _, w| compact(r.rnr_naks, w), |r| r.rnr_naks > 0),
        col("age", 0, [4; 3], r, |r, x, _| age(x.now, r.last_pkt_ns), no_fault),
    ]
}

/// The packets off the policy's DSCP as `value:packets` of the value with most of them (`+`
/// after it when there are other values), `0` when none: `0:375` is a bleach, `46:12` a remark.
fn off_values(r: &QpRow, w: usize) -> String {
    let Some(&(v, n)) = r.off_values.first() else {
        return compact(r.off_dscp, w);
    };
    let more = if r.off_values.len() > 1 { "+" } else { "" };
    let head = format!("{v}:");
    let room = w.saturating_sub(head.len() + more.len());
    let count = compact(n, room);
    if room == 0 || count.len() > room || !count.starts_with(|c: char| c.is_ascii_digit()) {
        // no room for the count: the value alone
        return format!("{v}{more}");
    }
    format!("{head}{count}{more}")
}

/// The last interval's rate of a row active in it, else `-`.
fn rate_of(r: &QpRow, x: &Ctx) -> String {
    match x.ends.get(&*r.iface) {
        Some(&e) if e == r.active_end_ns => rate(r.rate_bps),
        _ => "-".into(),
    }
}

/// The table's columns for a pane `w` wide, with their widths: 80 columns show the counts,
/// 100 add direction, rate and DSCP, 140 the interface (with several) and wider numbers. The
/// addresses take what is left, up to the longest shown (`src_w`, `dst_w`).
fn columns(w: usize, multi: bool, src_w: usize, dst_w: usize) -> Vec<(Col, usize)> {
    let tier = usize::from(w >= 100) + usize::from(w >= 140);
    let mut c: Vec<(Col, usize)> = all_columns()
        .into_iter()
        .filter(|c| c.from <= tier && (c.title != "iface" || multi))
        .map(|c| {
            let width = c.widths[tier];
            (c, width)
        })
        .collect();
    let fixed: usize = c.iter().map(|(_, w)| w).sum::<usize>() + c.len() - 1;
    let left = w.saturating_sub(fixed);
    // the source gets its share, the destination the rest, neither more than it needs
    let src = src_w.min(left.saturating_sub(dst_w.min(left / 2)));
    let dst = dst_w.min(left - src);
    for (col, width) in c.iter_mut() {
        match col.title {
            "src" => *width = src.max(3),
            "dst" => *width = dst.max(3),
            _ => {}
        }
    }
    c
}

fn draw_table(f: &mut Frame<'_>, area: Rect, s: &mut Screen) {
    let w = area.width as usize;
    let notes = s.info.notes.clone();
    // border line and column titles
    let page = (area.height as usize).saturating_sub(2);
    let (total, first) = {
        let n = s.rows().1.len();
        (n, s.clamp(n, page))
    };
    let (sort, filter) = (s.sort.name(), s.filter.clone());
    let (sh, idx) = s.rows();
    let data = &sh.data;
    let shown: Vec<&QpRow> = idx[first..(first + page).min(total)]
        .iter()
        .map(|&i| &data.rows[i])
        .collect();
    let title = table_title(first, shown.len(), total, sort, &filter);
    let block = Block::new()
        .borders(Borders::TOP)
        .title(Span::styled(fit(&format!(" {title} "), w), bold()));
    if shown.is_empty() {
        let msg = match (data.rows.is_empty(), filter.is_empty()) {
            (true, _) if !notes.is_empty() => {
                // why: the start-up diagnosis, in the pane itself (wrapped inside it)
                let text = format!("no RoCE packets seen yet. {}", notes.join(" "));
                f.render_widget(
                    Paragraph::new(text).wrap(Wrap { trim: true }).block(block),
                    area,
                );
                return;
            }
            (true, _) if data.host_qps.as_ref().is_some_and(|q| !q.is_empty()) => {
                "no RoCE packets seen yet (a hardware-RoCE NIC sends them past XDP: see the host's \
                 QPs below, a mirror port, or docs/live.md)"
                    .to_string()
            }
            (true, _) => "no RoCE packets seen yet".to_string(),
            (false, true) => "no QP to show".to_string(),
            (false, false) => format!("no QP matches \"{filter}\""),
        };
        f.render_widget(Paragraph::new(fit(&msg, w)).block(block), area);
        return;
    }
    let multi = data.ifaces.len() > 1;
    let longest = |g: fn(&QpRow) -> usize| shown.iter().map(|r| g(r)).max().unwrap_or(0);
    let (src_w, dst_w) = (longest(|r| r.src.len()), longest(|r| r.dst.len()));
    let cols = columns(w, multi, src_w.max(3), dst_w.max(3));
    let cx = Ctx {
        now: data.now_ns,
        ends: data
            .ifaces
            .iter()
            .map(|v| (v.name.clone(), v.end_ns))
            .collect(),
    };
    let head = Row::new(cols.iter().map(|(c, w)| cell(c.title, *w, c.right, bold())));
    let rows = shown.iter().map(|r| {
        Row::new(cols.iter().map(|(c, w)| {
            let st = match (c.fault)(r) {
                true => Style::default().fg(Color::Yellow),
                false => Style::default(),
            };
            cell(&(c.text)(r, &cx, *w), *w, c.right, st)
        }))
    });
    let widths: Vec<Constraint> = cols
        .iter()
        .map(|(_, w)| Constraint::Length(*w as u16))
        .collect();
    let t = Table::new(rows, widths)
        .header(head)
        .block(block)
        .column_spacing(1);
    f.render_widget(t, area);
}

/// `QPs 14-26 of 51, 13 above, 25 more | sort packets (s, 1-5) | filter "x" (Esc clears)`.
fn table_title(first: usize, shown: usize, total: usize, sort: &str, filter: &str) -> String {
    let mut title = match total {
        0 => "QPs: none".to_string(),
        _ => format!("QPs {}-{} of {total}", first + 1, first + shown),
    };
    if first > 0 {
        title += &format!(", {first} above");
    }
    let below = total - first - shown;
    if below > 0 {
        title += &format!(", {below} more");
    }
    title += &format!(" | sort {sort} (s, 1-5)");
    if !filter.is_empty() {
        title += &format!(" | filter \"{filter}\" (Esc clears)");
    }
    title
}

fn cell(text: &str, w: usize, right: bool, st: Style) -> Cell<'static> {
    let t = fit(text, w);
    let line = match right {
        true => Line::from(format!("{t:>w$}")),
        false => Line::from(t),
    };
    Cell::from(line).style(st)
}

/// The host's QPs from the RDMA subsystem: a title with the counts, then one line per QP,
/// errors and marking faults first.
fn draw_host_qps(f: &mut Frame<'_>, area: Rect, s: &Screen) {
    let w = area.width as usize;
    let qps: &[HostQp] = s.shown().data.host_qps.as_deref().unwrap_or(&[]);
    let count = |p: fn(&HostQp) -> bool| qps.iter().filter(|q| p(q)).count();
    let errors = count(|q| q.error);
    let off = count(|q| matches!(q.marking.as_str(), "off_policy" | "lossy"));
    let unknown = count(|q| q.marking == "unknown");
    let title = format!(
        " Host QPs: {} ({errors} in error, {off} off the policy or lossy, {unknown} marking unknown) ",
        qps.len()
    );
    let block = Block::new()
        .borders(Borders::TOP)
        .title(Span::styled(fit(&title, w), bold()));
    if qps.is_empty() {
        let msg = "no QP on this host's RDMA devices";
        f.render_widget(Paragraph::new(fit(msg, w)).block(block), area);
        return;
    }
    // device, QPN, state, owner (what is left), tx, rx, DSCP, priority, verdict
    let fixed = [8usize, 7, 5, 6, 6, 4, 4, 10];
    let owner_w = w
        .saturating_sub(fixed.iter().sum::<usize>() + fixed.len())
        .max(5);
    let widths = [8, 7, 5, owner_w, 6, 6, 4, 4, 10];
    let right = [false, true, false, false, true, true, true, true, false];
    let titles = [
        "device", "qpn", "state", "owner", "tx", "rx", "dscp", "prio", "marking",
    ];
    let head = Row::new((0..9).map(|i| cell(titles[i], widths[i], right[i], bold())));
    let n = (area.height as usize).saturating_sub(2);
    let num = |v: Option<u64>, w: usize| v.map_or("-".to_string(), |v| compact(v, w));
    let rows = qps.iter().take(n).map(|q| {
        let texts = [
            q.device.clone(),
            q.lqpn.to_string(),
            q.state.clone(),
            q.owner.clone(),
            num(q.tx, 6),
            num(q.rx, 6),
            num(q.dscp.map(u64::from), 4),
            num(q.priority.map(u64::from), 4),
            q.marking.clone(),
        ];
        let st = match q.rank().0 {
            0 => Style::default().fg(Color::Red),
            1 => Style::default().fg(Color::Yellow),
            _ => Style::default(),
        };
        Row::new((0..9).map(|i| cell(&texts[i], widths[i], right[i], st)))
    });
    let t = Table::new(rows, widths.map(|w| Constraint::Length(w as u16)))
        .header(head)
        .block(block)
        .column_spacing(1);
    f.render_widget(t, area);
}

/// The NIC pane's lines, each cut to `w`: per interface its checks and PFC per priority from
/// the NIC's own counters, the failed and undecided checks, and what moved in the last
/// interval, faults first (red). `compact` (packets are seen too): the failed checks and the
/// faults only, besides the first line.
fn nic_lines(nics: &[NicView], w: usize, compact: bool) -> Vec<Line<'static>> {
    let red = Style::default().fg(Color::Red);
    let yellow = Style::default().fg(Color::Yellow);
    let mut out = Vec::new();
    for v in nics {
        let (fail, unknown, pass) = v.check_counts();
        let mut head = format!("{} ({}", v.iface, v.driver);
        if let Some(d) = &v.rdma_device {
            head.push_str(&format!(", {d}"));
        }
        head.push_str(&format!(
            "): checks {fail} failed, {unknown} unknown, {pass} passed"
        ));
        let pfc = |frames: &[Option<u64>; 8], us: &[Option<u64>; 8], total: &[u64; 8]| {
            let mut parts = Vec::new();
            for p in 0..8 {
                if total[p] == 0 {
                    continue;
                }
                let mut t = format!("p{p} {}", compact_n(frames[p].unwrap_or(0)));
                if let Some(u) = us[p].filter(|&u| u > 0) {
                    t.push_str(&format!(" {}", seconds(u as f64 / 1e6)));
                }
                t.push_str(&format!(" (Σ{})", compact_n(total[p])));
                parts.push(t);
            }
            parts.join(" ")
        };
        let rx = pfc(&v.pfc_rx, &v.pfc_rx_us, &v.pfc_rx_total);
        let tx = pfc(&v.pfc_tx, &v.pfc_tx_us, &v.pfc_tx_total);
        if !rx.is_empty() || !tx.is_empty() {
            head.push_str(&format!(" | PFC rx {} tx {}", or_dash(&rx), or_dash(&tx)));
        } else if v.pfc_rx.iter().all(Option::is_none) && v.end_ns > 0 {
            head.push_str(" | no PFC counters");
        } else if v.end_ns > 0 {
            head.push_str(" | no PFC frames");
        }
        let st = if fail > 0 { red } else { Style::default() };
        out.push(Line::from(Span::styled(fit(&head, w), st)));
        for c in &v.checks {
            let (mark, st) = match c.verdict {
                "fail" => ("✗", red),
                "unknown" if !compact => ("?", yellow),
                _ => continue,
            };
            let t = format!("  {mark} {}: {}", c.name, c.text);
            out.push(Line::from(Span::styled(fit(&t, w), st)));
        }
        let faults: Vec<&(String, i64, bool)> = v.moved.iter().filter(|m| m.2).collect();
        let shown: Vec<&(String, i64, bool)> = if compact {
            faults
        } else {
            v.moved.iter().collect()
        };
        if !shown.is_empty() || (!compact && (v.raw_moved > 0 || v.counter_resets > 0)) {
            let mut spans = vec![Span::raw("  moved: ")];
            let mut used = 9;
            for (i, (name, d, fault)) in shown.iter().enumerate() {
                let t = format!("{}{name} {d}", if i > 0 { ", " } else { "" });
                used += t.chars().count();
                if used > w {
                    spans.push(Span::raw("…"));
                    break;
                }
                spans.push(Span::styled(t, if *fault { red } else { Style::default() }));
            }
            if !compact && v.raw_moved > 0 && used + 16 <= w {
                spans.push(Span::raw(format!(" +{} driver counters", v.raw_moved)));
            }
            if v.counter_resets > 0 && used + 20 <= w {
                spans.push(Span::styled(
                    format!(" {} counters reset", v.counter_resets),
                    yellow,
                ));
            }
            out.push(Line::from(spans));
        }
    }
    out
}

fn compact_n(n: u64) -> String {
    compact(n, 6)
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

fn draw_nic(f: &mut Frame<'_>, area: Rect, nics: &[NicView], lines: Vec<Line<'static>>) {
    let w = area.width as usize;
    let failed: usize = nics.iter().map(|v| v.check_counts().0).sum();
    let faults: usize = nics
        .iter()
        .map(|v| v.moved.iter().filter(|m| m.2).count())
        .sum();
    let title = format!(
        " NIC (its own counters and configuration): {failed} checks failed, {faults} fault counters moved "
    );
    let block = Block::new()
        .borders(Borders::TOP)
        .title(Span::styled(fit(&title, w), bold()));
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_alerts(f: &mut Frame<'_>, area: Rect, s: &mut Screen) {
    let w = area.width as usize;
    let page = area.height.saturating_sub(1) as usize;
    let total = s.alert_lines().len();
    let first = s.clamp_alerts(total, page);
    let focus = s.focus == super::screen::Focus::Alerts;
    let all = s.shown().alerts.len();
    let crit = s
        .shown()
        .alerts
        .iter()
        .filter(|a| a.severity == Severity::Critical)
        .count();
    let mut title = match (all, total) {
        (0, _) => " Alerts: none".to_string(),
        (n, t) if t == n => format!(" Alerts ({n}, {crit} crit; criticals first)"),
        (n, t) => format!(" Alerts ({t} of {n} match \"{}\")", s.filter),
    };
    if total > page {
        title += &format!(
            " {}-{}{}",
            first + 1,
            (first + page).min(total),
            if focus { ", Tab: QPs" } else { ", Tab scrolls" }
        );
    }
    title.push(' ');
    let style = if focus {
        bold().add_modifier(Modifier::REVERSED)
    } else {
        bold()
    };
    let block = Block::new()
        .borders(Borders::TOP)
        .title(Span::styled(fit(&title, w), style));
    let lines: Vec<Line<'static>> = s
        .alert_lines()
        .into_iter()
        .skip(first)
        .take(page)
        .map(|a| {
            let (tag, color) = match a.severity {
                Severity::Critical => ("crit", Color::Red),
                Severity::Warning => ("warn", Color::Yellow),
                Severity::Info => ("info", Color::Reset),
            };
            let time = rfc3339(a.time_ns)[11..19].to_string();
            let text = fit(&format!("{time} {tag} {}", a.text), w);
            Line::from(Span::styled(text, Style::default().fg(color)))
        })
        .collect();
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn key_line(s: &Screen, w: usize) -> Line<'static> {
    if s.editing {
        let t = format!("filter: {}▏  Enter keeps it, Esc clears it", s.filter);
        return Line::from(Span::styled(
            fit(&t, w),
            Style::default().add_modifier(Modifier::REVERSED),
        ));
    }
    let pause = if s.paused() { "p resume" } else { "p pause" };
    let t = format!(
        "q quit  ? help  ↑↓ PgUp PgDn Home End scroll  Tab alerts  s 1-5 sort  / filter  {pause}"
    );
    Line::from(Span::styled(
        fit(&t, w),
        Style::default().add_modifier(Modifier::DIM),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::tui::model::{AlertLine, PfcFigures, ViewData};
    use crate::sinks::tui::screen::{Action, HeaderInfo, tests::row};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::{KeyCode, KeyEvent};
    use std::sync::Arc;

    fn screen(rows: u32, alerts: usize) -> Screen {
        let mut s = Screen::new(HeaderInfo {
            host: "h1".into(),
            out: "./roce-flows".into(),
            interval: std::time::Duration::from_secs(1),
            ifaces: vec!["eth0".into()],
            notes: Vec::new(),
        });
        let mut v = IfaceView {
            name: "eth0".into(),
            tracked: rows as u64,
            ..Default::default()
        };
        v.pfc[0][3] = PfcFigures {
            xoff: 1234,
            paused_s: Some(0.0125),
            peak_1s: 900,
        };
        s.set_data(Arc::new(ViewData {
            now_ns: 1_800_000_000_000_000_000,
            ifaces: vec![v],
            rows: (0..rows).map(|q| row(q, 1000 - q as u64, 0)).collect(),
            host_qps: None,
            nics: Vec::new(),
        }));
        for i in 0..alerts {
            s.push_alert(AlertLine {
                time_ns: 1_800_000_000_000_000_000,
                severity: Severity::Warning,
                text: format!("alert {i} {}", "x".repeat(200)),
            });
        }
        s
    }

    fn lines(s: &mut Screen, w: u16, h: u16) -> Vec<String> {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(f, s)).unwrap();
        let b = t.backend().buffer();
        (0..h)
            .map(|y| (0..w).map(|x| b[(x, y)].symbol()).collect::<String>())
            .collect()
    }

    #[test]
    fn numbers_ages_and_ellipsis() {
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
        let c: Vec<String> = [999, 12_345, 999_999, 1_250_000, 42_000_000_000]
            .iter()
            .map(|&n| compact(n, 4))
            .collect();
        assert_eq!(c, ["999", "12k", "999k", "1.2M", "42G"]);
        assert_eq!(compact(12_345, 5), "12345");
        let now = 100 * 86_400_000_000_000;
        let ago = |s: u64| age(now, Some(now - s * 1_000_000_000));
        assert_eq!(
            [ago(0), ago(59), ago(60), ago(7200), ago(90_000)],
            ["0s", "59s", "1m", "2h", "1d"]
        );
        assert_eq!(age(now, None), "-");
        assert_eq!(
            [seconds(0.0125), seconds(4e-5), seconds(2.0)],
            ["12.5ms", "40µs", "2.00s"]
        );
    }

    /// 80x24: header, table (13 rows, "27 more") and alerts each in place, every line cut
    /// with an ellipsis.
    #[test]
    fn at_80x24_every_pane_shows_and_nothing_wraps() {
        let mut s = screen(40, 6);
        let l = lines(&mut s, 80, 24);
        assert!(l[0].starts_with("roce-observe  h1  interval 1s"), "{l:#?}");
        assert!(l[1].starts_with("eth0  keys: 40 tracked"), "{l:#?}");
        assert!(
            l[2].contains("p3 XOFF 1234, paused 12.5ms, peak 900/s"),
            "{l:#?}"
        );
        assert!(
            l[3].contains("QPs 1-13 of 40, 27 more | sort packets"),
            "{l:#?}"
        );
        assert!(l[4].starts_with("src "), "{l:#?}");
        assert!(
            l[5].starts_with("10.77.0.0 ") && l[17].starts_with("10.77.0.12 "),
            "{l:#?}"
        );
        assert!(
            l[18].contains("Alerts (6, 0 crit; criticals first) 1-4, Tab scrolls"),
            "{l:#?}"
        );
        assert!(
            l[19].contains("alert 5 xxx") && l[19].ends_with('…'),
            "{l:#?}"
        );
        assert!(l[23].starts_with("q quit"), "{l:#?}");
        s.key(ratatui::crossterm::event::KeyEvent::from(
            ratatui::crossterm::event::KeyCode::End,
        ));
        let l = lines(&mut s, 80, 24);
        assert!(l[3].contains("QPs 28-40 of 40, 27 above"), "{l:#?}");
        assert!(l[17].starts_with("10.77.0.39 "), "{l:#?}");
    }

    /// 80x24: a critical alert stays in view when ten warnings come after it; a p3 storm is in
    /// the header before the priorities with fewer XOFF per second; Tab then End scrolls the
    /// alerts, and the filter narrows them.
    #[test]
    fn criticals_and_storms_stay_in_view_and_alerts_scroll() {
        let mut s = screen(40, 0);
        let t = 1_800_000_000_000_000_000u64;
        s.push_alert(AlertLine {
            time_ns: t,
            severity: Severity::Critical,
            text: "not_ect: observed 12 Not-ECT data packets | eth0 in 10.0.0.9".into(),
        });
        for i in 0..10 {
            s.push_alert(AlertLine {
                time_ns: t + (i + 1) * 1_000_000_000,
                severity: Severity::Warning,
                text: format!("psn_gap: observed {i} | eth0"),
            });
        }
        let f = |xoff: u64, peak: u64| PfcFigures {
            xoff,
            paused_s: Some(0.5),
            peak_1s: peak,
        };
        let mut v = s.shown().data.ifaces[0].clone();
        v.pfc[0][0] = f(90_000, 10);
        v.pfc[0][1] = f(80_000, 20);
        v.pfc[0][3] = f(5_000, 5_000);
        s.set_data(Arc::new(ViewData {
            now_ns: t,
            ifaces: vec![v],
            rows: (0..40).map(|q| row(q, 1000 - q as u64, 0)).collect(),
            host_qps: None,
            nics: Vec::new(),
        }));
        let l = lines(&mut s, 80, 24);
        assert!(l[2].starts_with("  PFC in: p3 XOFF 5000"), "{l:#?}");
        let title = l
            .iter()
            .position(|x| x.contains("Alerts (11, 1 crit"))
            .unwrap();
        assert!(l[title + 1].contains("crit not_ect: observed 12"), "{l:#?}");
        assert!(l[title + 2].contains("warn psn_gap: observed 9"), "{l:#?}");
        // Tab, End: the oldest warnings
        s.key(KeyEvent::from(KeyCode::Tab));
        s.key(KeyEvent::from(KeyCode::End));
        let l = lines(&mut s, 80, 24);
        let title = l.iter().position(|x| x.contains("Alerts (11")).unwrap();
        assert!(l[title].contains("Tab: QPs"), "{l:#?}");
        assert!(
            l.last().unwrap().contains("psn_gap: observed 0")
                || l[title + 1..]
                    .iter()
                    .any(|x| x.contains("psn_gap: observed 0")),
            "{l:#?}"
        );
        assert!(
            !l[title + 1..].iter().any(|x| x.contains("not_ect")),
            "{l:#?}"
        );
        // the QP table did not move
        assert!(l[5].starts_with("10.77.0.0 "), "{l:#?}");
        // the filter narrows the alerts too
        s.filter = "not_ect".into();
        let l = lines(&mut s, 80, 24);
        assert!(
            l.iter()
                .any(|x| x.contains("Alerts (1 of 11 match \"not_ect\")")),
            "{l:#?}"
        );
    }

    /// At 200x50 with few QPs the alerts take the lines the table does not need; `?` shows the
    /// keys and the columns over the panes, any key closes it.
    #[test]
    fn panes_take_the_space_there_is_and_help_explains() {
        let mut s = screen(4, 40);
        let l = lines(&mut s, 200, 50);
        let title = l.iter().position(|x| x.contains("Alerts (40")).unwrap();
        let alert_lines = l[title + 1..l.len() - 1]
            .iter()
            .filter(|x| x.contains("warn alert"))
            .count();
        assert!(alert_lines > 20, "{alert_lines}: {l:#?}");
        assert!(title < 20, "{title}: {l:#?}");
        assert_eq!(s.key(KeyEvent::from(KeyCode::Char('?'))), Action::Redraw);
        let l = lines(&mut s, 200, 50);
        assert!(
            l.iter().any(|x| x.contains("Help: any key closes it")),
            "{l:#?}"
        );
        assert!(
            l.iter().any(|x| x.contains("dscp≠")) && l.iter().any(|x| x.contains("0 bleached")),
            "{l:#?}"
        );
        assert!(
            l.iter().any(|x| x.contains("Tab") && x.contains("alerts")),
            "{l:#?}"
        );
        s.key(KeyEvent::from(KeyCode::Char('x')));
        let l = lines(&mut s, 200, 50);
        assert!(!l.iter().any(|x| x.contains("Help:")), "{l:#?}");
    }

    /// A hardware-RoCE interface: the start-up diagnosis is in the header from the start and
    /// says in the QP pane why no packet shows (before, it was held until the view closed).
    #[test]
    fn a_hardware_roce_interface_says_why_from_the_start() {
        let mut s = Screen::new(HeaderInfo {
            host: "h1".into(),
            out: "./roce-flows".into(),
            interval: std::time::Duration::from_secs(1),
            ifaces: vec!["ens1f0".into()],
            notes: vec!["ens1f0: hardware RoCE (mlx5_0 port 1): its RDMA traffic never reaches XDP, so no QP packets show here; see the host's QPs and NIC alerts, mirror the port to a capture NIC, or replay the verbs sniffer (docs/live.md)".into()],
        });
        let l = lines(&mut s, 80, 24);
        assert!(
            l[1].starts_with("! ens1f0: hardware RoCE (mlx5_0 port 1)"),
            "{l:#?}"
        );
        let body = l.join("\n");
        assert!(
            body.contains("no RoCE packets seen yet. ens1f0: hardware RoCE"),
            "{body}"
        );
        assert!(body.contains("mirror the port"), "{body}");
        assert!(l.iter().all(|x| x.chars().count() == 80));
    }

    /// A NIC view: a failed check, an undecided one, PFC from the NIC's counters on p3, a
    /// receive-buffer discard and CNPs moving.
    fn nic_view() -> crate::sinks::tui::model::NicView {
        use crate::sinks::tui::model::{NicCheckLine, NicView};
        let mut v = NicView {
            iface: "ens1f0np0".into(),
            driver: "mlx5".into(),
            rdma_device: Some("mlx5_0".into()),
            end_ns: 1_800_000_000_000_000_000,
            ..NicView::default()
        };
        v.pfc_rx = [Some(0); 8];
        v.pfc_tx = [Some(0); 8];
        v.pfc_rx[3] = Some(1200);
        v.pfc_rx_us[3] = Some(4500);
        v.pfc_rx_total[3] = 4800;
        v.moved = vec![
            ("rx_buf_discards_p3".into(), 12, true),
            ("cnp_sent".into(), 340, false),
        ];
        v.raw_moved = 5;
        v.checks = vec![
            NicCheckLine {
                name: "config_pfc_rdma_priority".into(),
                verdict: "fail",
                text: "PFC enabled on none (expected priority 3)".into(),
            },
            NicCheckLine {
                name: "config_cnp_dscp".into(),
                verdict: "unknown",
                text: "not readable without root".into(),
            },
            NicCheckLine {
                name: "config_trust_dscp".into(),
                verdict: "pass",
                text: "dscp".into(),
            },
        ];
        v
    }

    /// A hardware-RoCE host at 80x24: no packet, so the NIC pane leads (above the QP pane and
    /// the host's QPs) with its checks, PFC per priority from the NIC and what moved, the
    /// failed check and the discard in red; with packets it shrinks below the table to the
    /// failures and faults.
    #[test]
    fn the_nic_pane_leads_when_no_packet_is_seen() {
        let mut s = screen(0, 1);
        s.set_data(Arc::new(ViewData {
            now_ns: 1_800_000_000_000_000_000,
            ifaces: Vec::new(),
            rows: Vec::new(),
            host_qps: Some(Vec::new()),
            nics: vec![nic_view()],
        }));
        let l = lines(&mut s, 80, 24);
        let at = |l: &[String], needle: &str| l.iter().position(|x| x.contains(needle));
        let title = at(
            &l,
            " NIC (its own counters and configuration): 1 checks failed, 1",
        )
        .unwrap_or_else(|| panic!("{l:#?}"));
        let first = &l[title + 1];
        assert!(
            first.starts_with("ens1f0np0 (mlx5, mlx5_0): checks 1 failed, 1 unknown, 1 passed"),
            "{l:#?}"
        );
        assert!(first.contains("| PFC rx p3 1200"), "{l:#?}");
        assert!(l[title + 2].contains("✗ config_pfc_rdma_priority: PFC enabled on none"));
        assert!(l[title + 3].contains("? config_cnp_dscp: not readable"));
        assert!(
            l[title + 4].contains("moved: rx_buf_discards_p3 12, cnp_sent 340"),
            "{l:#?}"
        );
        assert!(
            !l.iter().any(|x| x.contains("config_trust_dscp")),
            "passes are counted only"
        );
        let qp_pane = at(&l, "no RoCE packets seen yet").unwrap();
        let host = at(&l, "Host QPs: 0").unwrap();
        assert!(title < qp_pane && qp_pane < host, "{l:#?}");
        assert!(l.iter().all(|x| x.chars().count() == 80));
        // colours: the failed check and the discard in red
        let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
        t.draw(|f| draw(f, &mut s)).unwrap();
        let b = t.backend().buffer();
        let red_at = |y: usize, needle: &str| {
            let x = l[y].find(needle).map(|i| l[y][..i].chars().count());
            x.is_some_and(|x| b[(x as u16 + 1, y as u16)].fg == Color::Red)
        };
        assert!(red_at(title + 2, "config_pfc"), "{l:#?}");
        assert!(red_at(title + 4, "rx_buf_discards_p3"), "{l:#?}");

        // packets seen: the NIC pane goes below the table, the unknown check and the counters
        // that are no fault left out
        s.set_data(Arc::new(ViewData {
            now_ns: 1_800_000_000_000_000_000,
            ifaces: Vec::new(),
            rows: (0..5).map(|q| row(q, 100, 0)).collect(),
            host_qps: None,
            nics: vec![nic_view()],
        }));
        let l = lines(&mut s, 80, 24);
        let title = at(&l, " NIC (its own").unwrap();
        assert!(at(&l, "QPs 1-5 of 5").unwrap() < title, "{l:#?}");
        assert!(!l.iter().any(|x| x.contains("config_cnp_dscp")), "{l:#?}");
        assert!(!l.iter().any(|x| x.contains("cnp_sent")), "{l:#?}");
        assert!(at(&l, "✗ config_pfc_rdma_priority").is_some(), "{l:#?}");
    }

    /// The off-DSCP cell names the value with most packets (`+` when there are others): a
    /// bleach (0) and a remark (46) read apart.
    #[test]
    fn the_off_dscp_cell_names_the_value() {
        let mut r = crate::sinks::tui::screen::tests::row(1, 750, 0);
        assert_eq!(off_values(&r, 5), "0");
        r.off_dscp = 375;
        r.off_values = vec![(0, 375)];
        assert_eq!(off_values(&r, 5), "0:375");
        r.off_dscp = 1400;
        r.off_values = vec![(46, 1200), (0, 200)];
        assert_eq!(off_values(&r, 8), "46:1200+");
        assert_eq!(off_values(&r, 9), "46:1200+");
        r.off_values[0].1 = 12_000;
        assert_eq!(off_values(&r, 7), "46:12k+");
        assert_eq!(off_values(&r, 4), "46+");
    }

    #[test]
    fn wide_screens_add_columns_small_ones_say_so() {
        let mut s = screen(40, 0);
        let l = lines(&mut s, 200, 60);
        for c in [
            "dir", "rate", "dscp", "cnp←", "dscp≠", "ect✗", "since", "rnr", "age",
        ] {
            assert!(l[4].contains(c), "{c}: {}", l[4]);
        }
        assert!(l[3].contains("QPs 1-40 of 40 |"), "{}", l[3]);
        let l = lines(&mut s, 30, 8);
        assert!(l[0].starts_with("roce-observe: the terminal is"), "{l:#?}");
        assert!(l[1].starts_with("too small"), "{l:#?}");
    }

    /// A hardware-RoCE host at 80x24: no packet, the host's QPs take the space, the error
    /// first in its own line, the counts in the title, the packet pane says where to look.
    #[test]
    fn host_qps_pane_when_no_packet_is_seen() {
        use crate::sinks::tui::model::HostQp;
        let mut s = screen(0, 1);
        let q = |lqpn: u32, state: &str, marking: &str, error: bool| HostQp {
            device: "mlx5_0".into(),
            lqpn,
            state: state.into(),
            owner: "python3[4242] pod 0f1e2d3c".into(),
            tx: Some(1_500_000),
            rx: None,
            dscp: Some(26),
            priority: Some(3),
            marking: marking.into(),
            error,
        };
        s.set_data(Arc::new(ViewData {
            now_ns: 1_800_000_000_000_000_000,
            ifaces: Vec::new(),
            rows: Vec::new(),
            host_qps: Some(vec![
                q(0x13, "ERR", "ok", true),
                q(0x12, "RTS", "lossy", false),
                q(0x10, "RTS", "ok", false),
            ]),
            nics: Vec::new(),
        }));
        let l = lines(&mut s, 80, 24);
        let at = |needle: &str| l.iter().position(|x| x.contains(needle));
        let table = at("no RoCE packets seen yet (a hardware-RoCE NIC").expect("hint");
        let title = at("Host QPs: 3 (1 in error, 1 off the policy or lossy, 0 marking").unwrap();
        assert!(table < title, "{l:#?}");
        assert!(l[title + 1].starts_with("device "), "{l:#?}");
        let first = &l[title + 2];
        assert!(
            first.starts_with("mlx5_0 ") && first.contains(" 19 ERR") && first.contains("1500k"),
            "{l:#?}"
        );
        assert!(l[title + 3].contains("lossy"), "{l:#?}");
        assert!(l.iter().all(|x| x.chars().count() == 80));
        assert!(
            at("Alerts (1, 0 crit; criticals first)").unwrap() > title + 4,
            "{l:#?}"
        );
    }
}
