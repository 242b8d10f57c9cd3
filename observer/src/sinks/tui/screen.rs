//! The state of the screen, apart from the data: sort, filter, scroll position, pause; and what
//! each key does to it. No terminal here, so every key is unit-tested.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::model::{AlertLine, MAX_ALERTS, QpRow, ViewData};

/// What the table is sorted by (largest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Pkts,
    Ce,
    Gaps,
    OffDscp,
    Retrans,
}

impl SortKey {
    /// In key order: `1` sorts by packets, ..., `5` by retransmissions.
    pub const ALL: [SortKey; 5] = [
        SortKey::Pkts,
        SortKey::Ce,
        SortKey::Gaps,
        SortKey::OffDscp,
        SortKey::Retrans,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Pkts => "packets",
            SortKey::Ce => "CE",
            SortKey::Gaps => "PSN gaps",
            SortKey::OffDscp => "off-DSCP",
            SortKey::Retrans => "retransmissions",
        }
    }

    fn value(self, r: &QpRow) -> u64 {
        match self {
            SortKey::Pkts => r.pkts,
            SortKey::Ce => r.ce,
            SortKey::Gaps => r.gaps,
            SortKey::OffDscp => r.off_dscp,
            SortKey::Retrans => r.retrans,
        }
    }

    fn next(self) -> SortKey {
        let i = SortKey::ALL.iter().position(|&k| k == self).unwrap_or(0);
        SortKey::ALL[(i + 1) % SortKey::ALL.len()]
    }
}

/// What does not change while the view runs.
#[derive(Clone, Debug, Default)]
pub struct HeaderInfo {
    pub host: String,
    pub out: String,
    pub interval: Duration,
    /// The interfaces given (shown before their first interval).
    pub ifaces: Vec<String>,
    /// What the start-up diagnosis says the view must show from the start (a hardware-RoCE
    /// device on an interface, whose RDMA traffic XDP never sees): a header line each.
    pub notes: Vec<String>,
}

/// The data and alerts on show.
#[derive(Clone, Debug, Default)]
pub struct Shown {
    pub data: Arc<ViewData>,
    /// Oldest first.
    pub alerts: VecDeque<AlertLine>,
    /// Changes with every new data (the sort order is kept until it does).
    seq: u64,
}

/// The pane the scroll keys move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Focus {
    Qps,
    Alerts,
}

/// What a key asks of the view's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Redraw.
    Redraw,
    /// Nothing to do (a key the view does not use).
    Ignore,
    /// Stop observing (as SIGINT does).
    Quit,
}

/// The rows of the table in their order, for one (data, sort, filter).
struct Order {
    seq: u64,
    sort: SortKey,
    filter: String,
    idx: Vec<usize>,
}

pub struct Screen {
    pub info: HeaderInfo,
    live: Shown,
    /// What was on show when the display was paused (counting goes on into `live`).
    frozen: Option<Shown>,
    pub sort: SortKey,
    pub filter: String,
    /// Typing the filter (after `/`).
    pub editing: bool,
    /// Index of the first row shown, in the table's order.
    pub offset: usize,
    /// Rows the table had room for at the last draw.
    pub page: usize,
    /// The stop was set: the last interval is being written.
    pub stopping: bool,
    order: Option<Order>,
    /// The pane the scroll keys move (Tab switches).
    pub focus: Focus,
    /// Index of the first alert shown, in the alerts' order ([`Screen::alert_lines`]).
    pub alert_offset: usize,
    /// Alert lines the pane had room for at the last draw.
    pub alert_page: usize,
    /// The help (`?`) is shown over the panes.
    pub help: bool,
}

impl Screen {
    pub fn new(info: HeaderInfo) -> Screen {
        Screen {
            info,
            live: Shown::default(),
            frozen: None,
            sort: SortKey::Pkts,
            filter: String::new(),
            editing: false,
            offset: 0,
            page: 1,
            stopping: false,
            order: None,
            focus: Focus::Qps,
            alert_offset: 0,
            alert_page: 1,
            help: false,
        }
    }

    /// The alerts on show that the filter matches, criticals first, then warnings, then the
    /// rest, newest first within each: a critical stays in view whatever follows it.
    pub fn alert_lines(&self) -> Vec<&AlertLine> {
        let f = self.filter.trim().to_ascii_lowercase();
        let mut v: Vec<&AlertLine> = self
            .shown()
            .alerts
            .iter()
            .rev()
            .filter(|a| f.is_empty() || a.text.to_ascii_lowercase().contains(&f))
            .collect();
        // stable: newest first within a severity
        v.sort_by_key(|a| std::cmp::Reverse(a.severity));
        v
    }

    /// The first alert to show for `total` alerts and `page` lines (kept in range).
    pub fn clamp_alerts(&mut self, total: usize, page: usize) -> usize {
        self.alert_page = page.max(1);
        self.alert_offset = self.alert_offset.min(total.saturating_sub(page));
        self.alert_offset
    }

    pub fn set_data(&mut self, d: Arc<ViewData>) {
        self.live.data = d;
        self.live.seq += 1;
    }

    pub fn push_alert(&mut self, a: AlertLine) {
        if self.live.alerts.len() == MAX_ALERTS {
            self.live.alerts.pop_front();
        }
        self.live.alerts.push_back(a);
    }

    pub fn paused(&self) -> bool {
        self.frozen.is_some()
    }

    pub fn shown(&self) -> &Shown {
        self.frozen.as_ref().unwrap_or(&self.live)
    }

    /// The rows on show in table order (filtered, sorted), with the data they index.
    pub fn rows(&mut self) -> (&Shown, &[usize]) {
        let shown = self.frozen.as_ref().unwrap_or(&self.live);
        let fresh = self
            .order
            .as_ref()
            .is_some_and(|o| o.seq == shown.seq && o.sort == self.sort && o.filter == self.filter);
        if !fresh {
            let rows = &shown.data.rows;
            let f = Filter::new(&self.filter);
            let mut idx: Vec<usize> = (0..rows.len()).filter(|&i| f.matches(&rows[i])).collect();
            let sort = self.sort;
            idx.sort_by(|&a, &b| compare(&rows[a], &rows[b], sort));
            self.order = Some(Order {
                seq: shown.seq,
                sort,
                filter: self.filter.clone(),
                idx,
            });
        }
        let idx = self.order.as_ref().map_or(&[][..], |o| &o.idx[..]);
        (shown, idx)
    }

    /// The first row to show for `total` rows and `page` lines (kept in range).
    pub fn clamp(&mut self, total: usize, page: usize) -> usize {
        self.page = page.max(1);
        self.offset = self.offset.min(total.saturating_sub(page));
        self.offset
    }

    /// What key `k` does.
    pub fn key(&mut self, k: KeyEvent) -> Action {
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if self.editing && self.edit(k) {
            return Action::Redraw;
        }
        if self.help {
            // any key closes the help; q still quits
            self.help = false;
            return match k.code {
                KeyCode::Char('q') | KeyCode::Char('Q') => Action::Quit,
                _ => Action::Redraw,
            };
        }
        if self.scroll(k.code) {
            return Action::Redraw;
        }
        match k.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => return Action::Quit,
            KeyCode::Char('?') | KeyCode::F(1) => self.help = true,
            KeyCode::Tab | KeyCode::BackTab => {
                self.focus = match self.focus {
                    Focus::Qps => Focus::Alerts,
                    Focus::Alerts => Focus::Qps,
                };
            }
            KeyCode::Char('/') => self.editing = true,
            KeyCode::Esc => self.set_filter(String::new()),
            KeyCode::Char('s') => self.set_sort(self.sort.next()),
            KeyCode::Char(c @ '1'..='5') => self.set_sort(SortKey::ALL[c as usize - '1' as usize]),
            KeyCode::Char('p') | KeyCode::Char(' ') => {
                self.frozen = match self.frozen {
                    Some(_) => None,
                    None => Some(self.live.clone()),
                };
            }
            _ => return Action::Ignore,
        }
        Action::Redraw
    }

    /// A key while typing the filter; false for keys that are not editing ones.
    fn edit(&mut self, k: KeyEvent) -> bool {
        let mut f = self.filter.clone();
        match k.code {
            KeyCode::Enter => self.editing = false,
            KeyCode::Esc => {
                self.editing = false;
                f.clear();
            }
            KeyCode::Backspace => {
                f.pop();
            }
            KeyCode::Char(c) if !c.is_control() && f.chars().count() < 64 => f.push(c),
            KeyCode::Char(_) => {}
            _ => return false,
        }
        self.set_filter(f);
        true
    }

    fn scroll(&mut self, code: KeyCode) -> bool {
        let (offset, page) = match self.focus {
            Focus::Qps => (&mut self.offset, self.page.max(1)),
            Focus::Alerts => (&mut self.alert_offset, self.alert_page.max(1)),
        };
        *offset = match code {
            KeyCode::Up => offset.saturating_sub(1),
            KeyCode::Down => offset.saturating_add(1),
            KeyCode::PageUp => offset.saturating_sub(page),
            KeyCode::PageDown => offset.saturating_add(page),
            KeyCode::Home => 0,
            KeyCode::End => usize::MAX,
            _ => return false,
        };
        true
    }

    fn set_filter(&mut self, f: String) {
        if f != self.filter {
            self.filter = f;
            self.offset = 0;
            self.alert_offset = 0;
        }
    }

    fn set_sort(&mut self, s: SortKey) {
        self.sort = s;
        self.offset = 0;
    }
}

/// Largest first by the sort key, then by packets, then by interface, addresses, QP, direction
/// (so the order is the same at every redraw).
fn compare(a: &QpRow, b: &QpRow, sort: SortKey) -> Ordering {
    sort.value(b)
        .cmp(&sort.value(a))
        .then(b.pkts.cmp(&a.pkts))
        .then_with(|| a.iface.cmp(&b.iface))
        .then_with(|| (a.src_ip, &a.src).cmp(&(b.src_ip, &b.src)))
        .then_with(|| (a.dst_ip, &a.dst).cmp(&(b.dst_ip, &b.dst)))
        .then(a.qp.cmp(&b.qp))
        .then(a.dir.cmp(b.dir))
}

/// The filter: a row matches when its source, destination or interface contains the text, or
/// its QP does in hex (`0x000105`) or decimal (`261`), or the text is its QP in hex (`0x105`);
/// case is ignored.
struct Filter {
    text: String,
    qp: Option<u32>,
}

impl Filter {
    fn new(text: &str) -> Filter {
        let text = text.trim().to_ascii_lowercase();
        let qp = text
            .strip_prefix("0x")
            .and_then(|h| u32::from_str_radix(h, 16).ok());
        Filter { text, qp }
    }

    fn matches(&self, r: &QpRow) -> bool {
        let t = &self.text;
        t.is_empty()
            || self.qp == Some(r.qp)
            || r.src.to_ascii_lowercase().contains(t)
            || r.dst.to_ascii_lowercase().contains(t)
            || r.iface.to_ascii_lowercase().contains(t)
            || format!("0x{:06x}", r.qp).contains(t)
            || r.qp.to_string().contains(t)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use contract::alert::Severity;
    use ratatui::crossterm::event::KeyEvent;

    pub fn row(q: u32, pkts: u64, ce: u64) -> QpRow {
        let src: Arc<str> = Arc::from(format!("10.77.0.{q}"));
        QpRow {
            iface: Arc::from("eth0"),
            dir: "ingress",
            src_ip: src.parse().ok(),
            src,
            dst: Arc::from("10.77.200.1"),
            dst_ip: "10.77.200.1".parse().ok(),
            qp: 0x100 + q,
            pkts,
            bytes: pkts * 1000,
            ce,
            cnp: 0,
            cnp_back: 0,
            gaps: 0,
            retrans: 0,
            off_dscp: 0,
            off_values: Vec::new(),
            not_ect: 0,
            first_bad_ns: None,
            naks: 0,
            rnr_naks: 0,
            dscp: Some(26),
            last_pkt_ns: Some(1),
            rate_bps: 0.0,
            active_end_ns: 0,
        }
    }

    fn screen(n: u32) -> Screen {
        let mut s = Screen::new(HeaderInfo::default());
        let rows = (0..n).map(|q| row(q, 10, (q % 3) as u64)).collect();
        s.set_data(Arc::new(ViewData {
            now_ns: 1,
            ifaces: Vec::new(),
            rows,
            host_qps: None,
            nics: Vec::new(),
        }));
        s
    }

    fn press(s: &mut Screen, c: KeyCode) -> Action {
        s.key(KeyEvent::from(c))
    }

    fn first_qp(s: &mut Screen) -> u32 {
        let (sh, idx) = s.rows();
        sh.data.rows[idx[0]].qp
    }

    #[test]
    fn sort_keys_order_largest_first_ties_by_address() {
        let mut s = screen(12);
        // all 10 packets: by source address, numerically (10.77.0.2 before 10.77.0.10)
        let (sh, idx) = s.rows();
        let order: Vec<u32> = idx.iter().map(|&i| sh.data.rows[i].qp - 0x100).collect();
        assert_eq!(order, (0..12).collect::<Vec<_>>());
        press(&mut s, KeyCode::Char('2'));
        assert_eq!((s.sort, first_qp(&mut s)), (SortKey::Ce, 0x102));
        press(&mut s, KeyCode::Char('s'));
        assert_eq!(s.sort, SortKey::Gaps);
        for _ in 0..3 {
            press(&mut s, KeyCode::Char('s'));
        }
        assert_eq!(s.sort, SortKey::Pkts);
    }

    #[test]
    fn scrolling_stays_in_range() {
        let mut s = screen(30);
        assert_eq!(s.clamp(30, 10), 0);
        press(&mut s, KeyCode::End);
        assert_eq!(s.clamp(30, 10), 20);
        press(&mut s, KeyCode::PageUp);
        press(&mut s, KeyCode::Up);
        assert_eq!(s.clamp(30, 10), 9);
        press(&mut s, KeyCode::PageDown);
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Down);
        assert_eq!(s.clamp(30, 10), 20);
        press(&mut s, KeyCode::Home);
        assert_eq!(s.clamp(30, 10), 0);
        assert_eq!(s.clamp(5, 10), 0, "fewer rows than lines");
    }

    #[test]
    fn filter_matches_addresses_interfaces_and_qp_numbers() {
        let mut s = screen(20);
        assert_eq!(press(&mut s, KeyCode::Char('/')), Action::Redraw);
        for c in "0x105".chars() {
            press(&mut s, KeyCode::Char(c));
        }
        // typing `q` edits the filter, it does not quit
        assert_eq!(s.rows().1.len(), 1);
        press(&mut s, KeyCode::Enter);
        assert!(!s.editing);
        let n = |s: &mut Screen, f: &str| {
            s.filter = f.into();
            s.rows().1.len()
        };
        assert_eq!(n(&mut s, "0x000105"), 1);
        assert_eq!(n(&mut s, "261"), 1, "0x105 in decimal");
        assert_eq!(n(&mut s, "10.77.0.1"), 11, "10.77.0.1 and 10.77.0.10-19");
        assert_eq!(n(&mut s, "ETH0"), 20);
        assert_eq!(n(&mut s, "200.1"), 20);
        assert_eq!(n(&mut s, "nothing"), 0);
        press(&mut s, KeyCode::Esc);
        assert_eq!(s.rows().1.len(), 20);
        press(&mut s, KeyCode::Char('/'));
        assert_eq!(press(&mut s, KeyCode::Char('q')), Action::Redraw);
        press(&mut s, KeyCode::Esc);
        assert_eq!((s.filter.as_str(), s.editing), ("", false));
        assert_eq!(press(&mut s, KeyCode::Char('q')), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(s.key(ctrl_c), Action::Quit);
    }

    #[test]
    fn pause_freezes_data_and_alerts_until_resumed() {
        let mut s = screen(3);
        press(&mut s, KeyCode::Char('p'));
        assert!(s.paused());
        s.set_data(Arc::new(ViewData::default()));
        s.push_alert(AlertLine {
            time_ns: 1,
            severity: Severity::Warning,
            text: "x".into(),
        });
        assert_eq!((s.rows().1.len(), s.shown().alerts.len()), (3, 0));
        press(&mut s, KeyCode::Char('p'));
        assert_eq!((s.rows().1.len(), s.shown().alerts.len()), (0, 1));
    }
}
