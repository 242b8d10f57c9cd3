//! Every alert rule in one place: the [`Rule`] enum (name, severity, what its key is, whether
//! kernel events raise it), and the functions that turn events, per-key interval deltas and
//! per-interface interval deltas into alert candidates. The hold-down that decides which
//! candidates are emitted is [`super::alerts::Dedup`].

use observer_common::maps::{
    ANY, Event, IfaceStats, PCP_IF_TAGGED, Policy, QpKey, QpValue, class, pcp_meets,
};
use observer_common::parse::PCP_NONE;
use observer_common::qp::{ev, opcode_bucket};

use super::alerts::{Alert, AlertKey};
use super::ip_pairs::PairIndex;
pub use contract::alert::Rule;
use contract::policy::Thresholds;

fn exp_u8(v: u8) -> String {
    if v == ANY {
        "any".into()
    } else {
        v.to_string()
    }
}

fn pcp_str(v: u8) -> String {
    if v == PCP_NONE || v as usize >= 8 {
        "untagged".into()
    } else {
        v.to_string()
    }
}

/// The policy's expected PCP `v` in words.
fn pcp_want_str(v: u8) -> String {
    if v != ANY && v & PCP_IF_TAGGED != 0 {
        format!("{} when tagged (untagged not checked)", v & 7)
    } else {
        pcp_str(v)
    }
}

/// Alerts from one kernel (or datapath) event.
pub fn from_event(iface: &str, e: &Event, p: &Policy) -> Option<Alert> {
    let key = AlertKey::qp(iface, &e.key);
    let cand = |r, key, obs: String, exp: String| {
        Some(Alert::candidate(r, key, e.ts_ns, obs, exp, 1, "event"))
    };
    match e.kind {
        k if (ev::DSCP..ev::DSCP + 3).contains(&k) => {
            let c = (k - ev::DSCP) as usize;
            cand(
                Rule::DscpMismatch,
                key.with_class(c),
                format!("dscp {}", e.dscp),
                format!("dscp {}", exp_u8(p.dscp[c])),
            )
        }
        k if (ev::PCP..ev::PCP + 3).contains(&k) => {
            let c = (k - ev::PCP) as usize;
            cand(
                Rule::PcpMismatch,
                key.with_class(c),
                format!("pcp {}", pcp_str(e.pcp)),
                format!("pcp {}", pcp_want_str(p.pcp[c])),
            )
        }
        k if (ev::NOT_ECT..ev::NOT_ECT + 3).contains(&k) => {
            let c = (k - ev::NOT_ECT) as usize;
            cand(
                Rule::NotEct,
                key.with_class(c),
                "ecn 0 (Not-ECT)".into(),
                "ECT(0), ECT(1) or CE".into(),
            )
        }
        ev::PSN_GAP => cand(
            Rule::PsnGap,
            key,
            format!("{} PSNs missing before PSN {}", e.detail, e.psn),
            "consecutive PSNs".into(),
        ),
        ev::RETRANS => cand(
            Rule::GoBackN,
            key,
            format!("PSN {} resent (not ahead of the highest PSN)", e.psn),
            "no retransmission".into(),
        ),
        _ => None,
    }
}

/// Sparse "value:count" list of a histogram's buckets that `ok` does not accept.
fn others<const N: usize>(
    h: &[u32; N],
    ok: impl Fn(usize) -> bool,
    name: impl Fn(usize) -> String,
) -> (u64, String) {
    let mut n = 0u64;
    let mut parts = Vec::new();
    for (i, &c) in h.iter().enumerate() {
        if c != 0 && !ok(i) {
            n += c as u64;
            parts.push(format!("{} x{}", name(i), c));
        }
    }
    (n, parts.join(", "))
}

/// What makes per-key alerts of one rule alike, so that many keys are one alert: the marking
/// values seen (`dscp 0`, without their counts), the path MTU found; nothing more for the
/// rules whose finding is the rule itself (PSN gaps, resends, Not-ECT, bad ICRC). `None` for
/// alerts that are not per QP key, summaries and aggregates. The same for a key's kernel
/// event (`dscp 0`) and its interval delta (`dscp 0 x4`).
pub fn cause(a: &Alert) -> Option<String> {
    if a.key.qp.is_none() || a.summary || a.subjects > 1 {
        return None;
    }
    let values = |s: &str| {
        s.split(", ")
            .map(|p| p.rsplit_once(" x").map_or(p, |(v, _)| v))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match a.rule {
        Rule::DscpMismatch | Rule::PcpMismatch => Some(values(&a.observed)),
        Rule::MtuBelowExpected => Some(
            a.observed
                .rsplit_once('(')
                .map_or(a.observed.clone(), |(_, m)| format!("({m}")),
        ),
        Rule::NotEct | Rule::PsnGap | Rule::GoBackN | Rule::IcrcBad => Some(String::new()),
        _ => None,
    }
}

/// The group of a per-key alert for [`Groups`]: interface, direction, rule, class, cause.
type GroupKey = (String, Option<u8>, Rule, Option<u8>, String);

/// One group's state: the keys alerted on their own, the alerts held since the last flush.
#[derive(Default)]
struct Group {
    last_ns: u64,
    alone: std::collections::BTreeSet<AlertKey>,
    held: std::collections::BTreeMap<AlertKey, Alert>,
}

/// Many keys, one alert. Per-key alerts of one interface, direction, rule, class and cause
/// ([`cause`]): the first `min_keys - 1` keys alert as they come (a fault on a QP or two is
/// named at once, with its key); from the `min_keys`-th key on, their alerts (kernel events and
/// interval deltas alike) are held and go out as one alert naming the keys when the interval
/// ends ([`Groups::flush`]). A group quiet for longer than `window_ns` starts afresh.
/// `min_keys` 0: nothing is held.
pub struct Groups {
    min_keys: u64,
    window_ns: u64,
    map: std::collections::BTreeMap<GroupKey, Group>,
}

impl Groups {
    pub fn new(min_keys: u64, window_ns: u64) -> Groups {
        Groups {
            min_keys,
            window_ns,
            map: std::collections::BTreeMap::new(),
        }
    }

    /// `a` to pass on now, or `None` when it is held for the group's alert.
    pub fn admit(&mut self, a: Alert) -> Option<Alert> {
        if self.min_keys == 0 {
            return Some(a);
        }
        let Some(c) = cause(&a) else {
            return Some(a);
        };
        let g = self
            .map
            .entry((a.key.iface.clone(), a.key.dir, a.rule, a.key.class, c))
            .or_default();
        if a.time_ns.saturating_sub(g.last_ns) > self.window_ns && g.held.is_empty() {
            g.alone.clear();
        }
        g.last_ns = g.last_ns.max(a.time_ns);
        if g.alone.contains(&a.key) {
            return Some(a);
        }
        if let Some(h) = g.held.get_mut(&a.key) {
            // a key's event packet is also in its interval delta: the larger count, else sums
            h.count = if h.origin == "event" || a.origin == "event" {
                h.count.max(a.count)
            } else {
                h.count.saturating_add(a.count)
            };
            h.first_ns = h.first_ns.min(a.first_ns);
            h.time_ns = h.time_ns.max(a.time_ns);
            if a.origin == "interval" {
                h.observed = a.observed;
                h.origin = "interval";
            }
            return None;
        }
        if (g.alone.len() as u64) < self.min_keys.saturating_sub(1) {
            g.alone.insert(a.key.clone());
            return Some(a);
        }
        g.held.insert(a.key.clone(), a);
        None
    }

    /// The held alerts of `iface` (every interface: `None`) as one alert per group, at `t_ns`.
    /// `tracked`: the keys of an interface direction, for "of N".
    pub fn flush(
        &mut self,
        iface: Option<&str>,
        t_ns: u64,
        tracked: impl Fn(&str, Option<u8>) -> Option<u64>,
    ) -> Vec<Alert> {
        let mut out = Vec::new();
        for ((gi, dir, rule, class, cause), g) in self.map.iter_mut() {
            if g.held.is_empty() || iface.is_some_and(|i| i != gi) {
                continue;
            }
            let mut held: Vec<Alert> = std::mem::take(&mut g.held).into_values().collect();
            if held.len() == 1 {
                // one key is no group: its own alert, and it alerts on its own from now on
                let a = held.pop().expect("one");
                g.alone.insert(a.key.clone());
                out.push(a);
                continue;
            }
            out.push(merge(
                &held,
                (gi, *dir, *rule, *class, cause),
                g.alone.len(),
                tracked(gi, *dir),
                t_ns,
            ));
        }
        out
    }
}

/// An address set in few words: the one address, the /24 (IPv4) they share, up to three, or
/// how many.
fn addresses(set: &std::collections::BTreeSet<std::net::IpAddr>) -> String {
    use std::net::IpAddr;
    let v: Vec<&IpAddr> = set.iter().collect();
    match v.as_slice() {
        [] => "-".into(),
        [one] => one.to_string(),
        _ => {
            let v4: Vec<[u8; 4]> = v
                .iter()
                .filter_map(|a| match a {
                    IpAddr::V4(x) => Some(x.octets()),
                    IpAddr::V6(x) => x.to_ipv4_mapped().map(|m| m.octets()),
                })
                .collect();
            if v4.len() == v.len() && v4.iter().all(|o| o[..3] == v4[0][..3]) {
                format!("{}.{}.{}.0/24", v4[0][0], v4[0][1], v4[0][2])
            } else if v.len() <= 3 {
                v.iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            } else {
                format!("{} addresses", v.len())
            }
        }
    }
}

/// One alert for the held per-key alerts of a group: `dscp 0 on 409 more QP keys of 20000
/// (3100 in all), from 10.0.4.0/24 to 10.0.5.0/24; 3 more alerted on their own`, its count the
/// sum, `subjects` the keys, the keys listed (at most [`contract::alert::MAX_KEYS_LISTED`],
/// then `and N more`).
fn merge(
    held: &[Alert],
    (iface, dir, rule, class, cause): (&str, Option<u8>, Rule, Option<u8>, &str),
    alone: usize,
    tracked: Option<u64>,
    t_ns: u64,
) -> Alert {
    use std::collections::BTreeSet;
    let (mut srcs, mut dsts) = (BTreeSet::new(), BTreeSet::new());
    let mut count = 0u64;
    let mut keys = Vec::new();
    let mut first_ns = u64::MAX;
    for a in held {
        count = count.saturating_add(a.count);
        first_ns = first_ns.min(a.first_ns);
        let mut k = String::new();
        if let (Some(s), Some(d)) = (a.key.src, a.key.dst) {
            let (s, d) = (contract::addr::ip_of(&s), contract::addr::ip_of(&d));
            srcs.insert(s);
            dsts.insert(d);
            k = format!("{s} -> {d} ");
        }
        if keys.len() < contract::alert::MAX_KEYS_LISTED {
            if let Some(q) = a.key.qp {
                k += &format!("qp 0x{q:06x} ({q})");
            }
            keys.push(k);
        }
    }
    if held.len() > keys.len() {
        keys.push(format!("and {} more", held.len() - keys.len()));
    }
    let what = if cause.is_empty() {
        rule.name().replace('_', " ")
    } else {
        cause.to_string()
    };
    let of = tracked.map_or(String::new(), |n| format!(" of {n}"));
    let besides = match alone {
        0 => String::new(),
        n => format!("; {n} more alerted on their own"),
    };
    let observed = format!(
        "{what} on {} QP keys{of} ({count} in all), from {} to {}{besides}",
        held.len(),
        addresses(&srcs),
        addresses(&dsts)
    );
    let expected = held.first().map_or(String::new(), |a| a.expected.clone());
    let mut a = Alert::candidate(
        rule,
        AlertKey {
            iface: iface.to_string(),
            dir,
            class,
            other: Some("QP keys".into()),
            ..AlertKey::default()
        },
        t_ns,
        observed,
        expected,
        count,
        "interval",
    );
    a.first_ns = first_ns.min(t_ns);
    a.subjects = held.len() as u64;
    a.keys = keys;
    a
}

/// Whether any multi-packet-message FIRST/MIDDLE opcode (payload = path MTU) is in `d`.
fn has_full_mtu_packets(d: &QpValue) -> bool {
    [0x00u8, 0x01, 0x06, 0x07, 0x0d, 0x0e, 0x20, 0x21, 0x26, 0x27]
        .iter()
        .any(|&op| d.opcode_hist[opcode_bucket(op)] != 0)
}

/// Largest standard RoCE MTU that fits a UDP payload of `pl` bytes (BTH 12 + ICRC 4 around it).
pub fn mtu_of_payload(pl: u32) -> u32 {
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| pl >= m + 16)
        .unwrap_or(0)
}

/// Interval rules for one key's delta `d` (gauges carried).
pub fn qp_interval(
    iface: &str,
    k: &QpKey,
    d: &QpValue,
    p: &Policy,
    expected_mtu: u32,
    t_ns: u64,
    out: &mut Vec<Alert>,
) {
    let mut nz = Vec::new();
    super::deltas::nonzero_buckets(d, &mut nz);
    qp_interval_nz(iface, k, d, &nz, p, expected_mtu, t_ns, out)
}

/// Whether the delta breaks any per-key rule (cheap screen over the non-zero buckets).
fn any_qp_rule(d: &QpValue, nz: &[u16], p: &Policy, expected_mtu: u32) -> bool {
    if d.psn_gaps > 0 || d.psn_retrans > 0 {
        return true;
    }
    for &b in nz {
        let (col, i) = super::deltas::bucket_col(b);
        match col {
            1..=3 if p.dscp[col - 1] != ANY && p.dscp[col - 1] as usize != i => return true,
            4..=6 if i == 0 && p.ecn_capable[col - 4] != 0 => return true,
            7..=9 if !pcp_meets(p.pcp[col - 7], i as u8) => return true,
            _ => {}
        }
    }
    d.icrc_bad > 0 || path_mtu_below(d, expected_mtu).is_some()
}

/// The key's path MTU when it is below `expected_mtu` (`mtu_below_expected`): only a key with
/// FIRST or MIDDLE packets (whose payload is the path MTU) tells its path MTU, as its largest
/// UDP payload; a payload below the smallest RoCE MTU's (256 + 16) is no path MTU (a malformed
/// or cut sender) and is not reported as MTU 0.
fn path_mtu_below(d: &QpValue, expected_mtu: u32) -> Option<u32> {
    if expected_mtu == 0 || d.pkts == 0 || !has_full_mtu_packets(d) {
        return None;
    }
    let mtu = mtu_of_payload(d.max_udp_payload as u32);
    (mtu > 0 && (d.max_udp_payload as u32) < expected_mtu + 16).then_some(mtu)
}

/// [`qp_interval`] with `d`'s non-zero buckets already listed. Long by design: the per-key
/// rules one after another, each a few lines, behind one cheap screen ([`any_qp_rule`]).
#[allow(clippy::too_many_arguments)]
pub fn qp_interval_nz(
    iface: &str,
    k: &QpKey,
    d: &QpValue,
    nz: &[u16],
    p: &Policy,
    expected_mtu: u32,
    t_ns: u64,
    out: &mut Vec<Alert>,
) {
    if !any_qp_rule(d, nz, p, expected_mtu) {
        return;
    }
    let key = AlertKey::qp(iface, k);
    let mk =
        |r, key: AlertKey, obs, exp, n| Alert::candidate(r, key, t_ns, obs, exp, n, "interval");
    for c in 0..class::COUNT {
        if p.dscp[c] != ANY {
            let (n, s) = others(
                &d.dscp_hist[c],
                |i| i == p.dscp[c] as usize,
                |i| format!("dscp {i}"),
            );
            if n > 0 {
                out.push(mk(
                    Rule::DscpMismatch,
                    key.clone().with_class(c),
                    s,
                    format!("dscp {}", p.dscp[c]),
                    n,
                ));
            }
        }
        if p.pcp[c] != ANY {
            let (n, s) = others(
                &d.pcp_hist[c],
                |i| pcp_meets(p.pcp[c], i as u8),
                |i| format!("pcp {}", pcp_str(i as u8)),
            );
            if n > 0 {
                out.push(mk(
                    Rule::PcpMismatch,
                    key.clone().with_class(c),
                    s,
                    format!("pcp {}", pcp_want_str(p.pcp[c])),
                    n,
                ));
            }
        }
        if p.ecn_capable[c] != 0 && d.ecn_hist[c][0] > 0 {
            let n = d.ecn_hist[c][0] as u64;
            out.push(mk(
                Rule::NotEct,
                key.clone().with_class(c),
                format!("ecn 0 (Not-ECT) x{n}"),
                "ECT(0), ECT(1) or CE".into(),
                n,
            ));
        }
    }
    if d.psn_gaps > 0 {
        out.push(mk(
            Rule::PsnGap,
            key.clone(),
            format!("{} gaps, {} PSNs missing", d.psn_gaps, d.psn_missing),
            "consecutive PSNs".into(),
            d.psn_gaps,
        ));
    }
    if d.psn_retrans > 0 {
        out.push(mk(
            Rule::GoBackN,
            key.clone(),
            format!(
                "{} retransmitted, {} behind the highest PSN",
                d.psn_retrans, d.psn_behind
            ),
            "no retransmission".into(),
            d.psn_retrans,
        ));
    }
    if d.icrc_bad > 0 {
        out.push(mk(
            Rule::IcrcBad,
            key.clone(),
            format!(
                "{} packets with a bad ICRC ({} verified good, {} not verifiable)",
                d.icrc_bad, d.icrc_ok, d.icrc_unverifiable
            ),
            "every ICRC intact (the receiving NIC drops a packet whose ICRC fails)".into(),
            d.icrc_bad,
        ));
    }
    if let Some(mtu) = path_mtu_below(d, expected_mtu) {
        out.push(mk(
            Rule::MtuBelowExpected,
            key,
            format!("largest UDP payload {} (RoCE MTU {mtu})", d.max_udp_payload),
            format!(
                "RoCE MTU {expected_mtu} (UDP payload >= {})",
                expected_mtu + 16
            ),
            1,
        ));
    }
}

/// `latency_high` (docs/latency.md): the key's ACK round trip or READ latency of the interval,
/// when it has at least `latency_min_samples` samples and the bucket holding its 99th
/// percentile starts above `latency_p99_ns` (the p99 is certainly over it: a bucket spans 19 %).
pub fn latency_high(
    iface: &str,
    k: &QpKey,
    l: &super::latency::KeyLatency,
    th: &contract::policy::Thresholds,
    t_ns: u64,
    out: &mut Vec<Alert>,
) {
    use observer_common::latency::{UPPER_NS, kind};
    if th.latency_p99_ns == 0 {
        return;
    }
    for (k_i, what) in [(kind::ACK, "ACK round trip"), (kind::READ, "READ latency")] {
        let k_i = k_i as usize;
        let n = l.samples(k_i);
        if n < th.latency_min_samples.max(1) {
            continue;
        }
        let Some(p99) = l.quantile_ns(k_i, 99, 100) else {
            continue;
        };
        let b = observer_common::latency::bucket(p99);
        if b < observer_common::latency::first_starting_at(th.latency_p99_ns) {
            continue;
        }
        let lower = if b == 0 { 0 } else { UPPER_NS[b - 1] };
        let p50 = l.quantile_ns(k_i, 1, 2).unwrap_or(0);
        let mut key = AlertKey::qp(iface, k);
        key.other = Some(kind::NAMES[k_i].to_string());
        out.push(Alert::candidate(
            Rule::LatencyHigh,
            key,
            t_ns,
            format!(
                "{what} p99 {:.1}-{:.1} µs over {n} samples (p50 up to {:.1} µs)",
                lower as f64 / 1e3,
                p99 as f64 / 1e3,
                p50 as f64 / 1e3
            ),
            format!("p99 at most {:.1} µs", th.latency_p99_ns as f64 / 1e3),
            n,
            "interval",
        ));
    }
}

/// One interface direction's interval delta, as the interface rules see it.
pub struct IfaceInterval<'a> {
    pub iface: &'a str,
    pub dir: u8,
    pub delta: &'a IfaceStats,
    /// Interval length, seconds.
    pub secs: f64,
    /// Interval end (alert time).
    pub end_ns: u64,
    /// `mac=frames,...` senders of 802.3x PAUSE in the interval (PFC senders left out).
    pub pause_src_macs: Option<&'a str>,
    /// Per priority, the same of the senders of that priority's XOFF and XON frames.
    pub pfc_src_macs: &'a [Option<String>; 8],
    /// Largest XOFF count per priority in a one-second window ending in the interval.
    pub xoff_peak_1s: [u64; 8],
}

/// The per-interface-direction rules. Long by design: the rules one after another, each a few
/// lines: 802.3x PAUSE, PFC on another priority than the RDMA one,
/// PFC storm (XOFF frames in the densest one-second window above the threshold), per-QP map
/// full, events lost. Returns that XOFF count per priority (the storm figure, XOFF/s).
pub fn iface_interval(
    x: &IfaceInterval<'_>,
    p: &Policy,
    th: &Thresholds,
    out: &mut Vec<Alert>,
) -> [f64; 8] {
    let di = x.delta;
    let key = AlertKey {
        iface: x.iface.into(),
        dir: Some(x.dir),
        ..Default::default()
    };
    let mk = |r, key: AlertKey, obs: String, exp: String, n| {
        Alert::candidate(r, key, x.end_ns, obs, exp, n, "interval")
    };
    let prio_key = |p: usize| AlertKey {
        priority: Some(p as u8),
        ..key.clone()
    };
    if di.pfc.pause > 0 {
        let from = x
            .pause_src_macs
            .map(|m| format!(" from {m}"))
            .unwrap_or_default();
        out.push(mk(
            Rule::Pause8023x,
            key.clone(),
            format!(
                "{} PAUSE frames ({} XON){from}",
                di.pfc.pause, di.pfc.pause_xon
            ),
            "no 802.3x PAUSE in a RoCE fabric".into(),
            di.pfc.pause,
        ));
    }
    let mut rates = [0f64; 8];
    for (prio, rate_out) in rates.iter_mut().enumerate() {
        let (xoff, xon) = (di.pfc.xoff[prio], di.pfc.xon[prio]);
        let pfc_from = senders(x.pfc_src_macs[prio].as_deref());
        if prio as u8 != p.rdma_priority && xoff + xon > 0 {
            out.push(mk(
                Rule::PfcWrongPriority,
                prio_key(prio),
                format!("PFC on priority {prio}: {xoff} XOFF, {xon} XON{pfc_from}"),
                format!("PFC only on priority {}", p.rdma_priority),
                xoff + xon,
            ));
        }
        let peak = x.xoff_peak_1s[prio];
        *rate_out = peak as f64;
        if peak > th.pfc_storm_xoff_per_s {
            out.push(mk(
                Rule::PfcStorm,
                prio_key(prio),
                format!(
                    "{peak} XOFF/s on priority {prio} (densest second; {xoff} XOFF in the {:.3} s interval){pfc_from}",
                    x.secs
                ),
                format!("<= {} XOFF/s", th.pfc_storm_xoff_per_s),
                // one interval in storm (a hold-down summary counts the intervals it held)
                1,
            ));
        }
    }
    if di.qp_insert_failed > 0 || di.hist_overflow_lost > 0 {
        let mut obs = Vec::new();
        if di.qp_insert_failed > 0 {
            obs.push(format!(
                "{} RoCE packets of new QP keys that could not be inserted ({} RoCE packets untracked in all)",
                di.qp_insert_failed, di.roce_untracked
            ));
        }
        if di.hist_overflow_lost > 0 {
            obs.push(format!(
                "{} histogram buckets not counted (the per-QP map's overflow map is full: the keys use more opcodes, DSCPs or PCPs than it has room for)",
                di.hist_overflow_lost
            ));
        }
        out.push(mk(
            Rule::QpMapFull,
            key.clone(),
            obs.join("; "),
            "room in the per-QP map (raise --max-qps)".into(),
            di.qp_insert_failed + di.hist_overflow_lost,
        ));
    }
    if di.events_lost > 0 {
        out.push(mk(
            Rule::EventsLost,
            key,
            format!("{} events lost (ring buffer full)", di.events_lost),
            "no lost events (interval counts are still complete)".into(),
            di.events_lost,
        ));
    }
    rates
}

/// ` from MAC=frames, ...` for an alert's text: the [`SENDERS_NAMED`] senders with the most
/// frames, and how many more (the interfaces table lists them all), or nothing when none.
fn senders(macs: Option<&str>) -> String {
    let Some(m) = macs else {
        return String::new();
    };
    let mut v: Vec<(&str, u64)> = m
        .split(',')
        .map(|e| {
            let n = e.rsplit_once('=').and_then(|(_, n)| n.parse().ok());
            (e, n.unwrap_or(0))
        })
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let named: Vec<&str> = v.iter().take(SENDERS_NAMED).map(|e| e.0).collect();
    let more = v.len().saturating_sub(SENDERS_NAMED);
    if more > 0 {
        format!(" from {} and {more} more senders", named.join(", "))
    } else {
        format!(" from {}", named.join(", "))
    }
}

/// Senders of PFC frames an alert names (the largest first).
const SENDERS_NAMED: usize = 4;

/// `pfc_without_ecn`: PFC paused RoCE traffic in an interval with no CE mark at all (ECN should
/// act before PFC).
pub fn pfc_without_ecn(
    iface: &str,
    end_ns: u64,
    xoff: u64,
    roce: u64,
    ce: u64,
    th: &Thresholds,
    out: &mut Vec<Alert>,
) {
    if xoff >= th.pfc_without_ecn_min_xoff && roce > 0 && ce == 0 {
        out.push(Alert::candidate(
            Rule::PfcWithoutEcn,
            AlertKey {
                iface: iface.into(),
                ..Default::default()
            },
            end_ns,
            format!("{xoff} XOFF frames, 0 CE-marked RoCE packets"),
            "ECN marking (CE) before PFC pauses".into(),
            xoff,
            "interval",
        ));
    }
}

/// `ce_without_cnp`: an IP pair's data packets were CE-marked (summed over its keys, evicted
/// ones included) and the reverse pair sent packets but no CNP in the same interval.
pub fn ce_without_cnp(
    iface: &str,
    end_ns: u64,
    pairs: &PairIndex,
    th: &Thresholds,
    out: &mut Vec<Alert>,
) {
    for (&(a, b), (ce, _, _)) in pairs.touched() {
        if ce < th.ce_without_cnp_min_ce {
            continue;
        }
        let (_, cnp_back, pkts_back) = pairs.sums_of(&(b, a));
        if cnp_back == 0 && pkts_back > 0 {
            out.push(Alert::candidate(
                Rule::CeWithoutCnp,
                AlertKey {
                    iface: iface.into(),
                    src: Some(a),
                    dst: Some(b),
                    ..Default::default()
                },
                end_ns,
                format!("{ce} CE-marked data packets, 0 CNPs back ({pkts_back} packets back)"),
                "CNPs from the receiver for CE-marked data".into(),
                ce,
                "interval",
            ));
        }
    }
}

/// The subject that tells an alert from the NIC's counters from the same rule's alert from
/// packets (both are reported where both views exist).
pub const NIC_SUBJECT: &str = "nic counters";

/// One interval of a NIC's vendor-neutral counters, as the NIC rules see it.
pub struct NicInterval<'a> {
    pub iface: &'a str,
    pub counters: &'a nic::Normalized,
    /// The interval's length, s.
    pub secs: f64,
    /// The window PFC rates are taken over: this interval and the ones before it that make up
    /// the trailing second (at least), so that frames of a short interval (a sub-second
    /// `--interval`, the partial last one at a stop) are not extrapolated; its length, s, and
    /// its PFC frames received and sent per priority. A window shorter than a second (the
    /// first intervals of a run) counts its frames over one second.
    pub window_secs: f64,
    pub window_rx: [u64; 8],
    pub window_tx: [u64; 8],
    pub end_ns: u64,
}

impl NicInterval<'_> {
    fn delta(&self, q: nic::Quantity) -> Option<u64> {
        self.counters.get(q).and_then(|v| v.delta)
    }

    fn candidate(
        &self,
        rule: Rule,
        dir: Option<u8>,
        prio: Option<u8>,
        obs: String,
        exp: String,
        n: u64,
    ) -> Alert {
        let key = AlertKey {
            iface: self.iface.into(),
            dir,
            priority: prio,
            other: Some(NIC_SUBJECT.into()),
            ..Default::default()
        };
        Alert::candidate(rule, key, self.end_ns, obs, exp, n, "nic")
    }
}

/// The rules on a NIC's counters, through the same hold-down as the packet rules (keyed apart:
/// [`NIC_SUBJECT`]): PFC storm (pause frames per second, pause-storm events), PFC on another
/// priority than the RDMA one, 802.3x PAUSE, drops in the RDMA class, CE received with no CNP
/// sent, CNPs ignored, and go-back-N (NAK sequence errors, ACK timeouts, out-of-sequence).
pub fn nic_interval(x: &NicInterval<'_>, p: &Policy, th: &Thresholds, out: &mut Vec<Alert>) {
    nic_pfc(x, p, th, out);
    nic_loss_and_congestion(x, p, th, out);
}

/// PFC frames per priority: on another priority than the RDMA one, or above the storm rate.
fn nic_pfc(x: &NicInterval<'_>, p: &Policy, th: &Thresholds, out: &mut Vec<Alert>) {
    use nic::Quantity as Q;
    use observer_common::maps::dir;
    let rdma = p.rdma_priority;
    for prio in 0..8u8 {
        for (q, d, what, in_window) in [
            (
                Q::PfcRxFrames(prio),
                dir::INGRESS,
                "received",
                x.window_rx[prio as usize],
            ),
            (
                Q::PfcTxFrames(prio),
                dir::EGRESS,
                "sent",
                x.window_tx[prio as usize],
            ),
        ] {
            let n = x.delta(q).unwrap_or(0);
            if n == 0 {
                continue;
            }
            if prio != rdma {
                out.push(x.candidate(
                    Rule::PfcWrongPriority,
                    Some(d),
                    Some(prio),
                    format!("{n} PFC frames {what} on priority {prio} ({q})"),
                    format!("PFC only on priority {rdma}"),
                    n,
                ));
            }
            // over a second at least: less than a second of history (the first intervals of a
            // sub-second --interval) is not extrapolated either
            let rate = in_window as f64 / x.window_secs.max(1.0);
            if rate > th.pfc_storm_xoff_per_s as f64 {
                out.push(x.candidate(
                    Rule::PfcStorm,
                    Some(d),
                    Some(prio),
                    if x.window_secs > x.secs {
                        format!(
                            "{rate:.0} PFC frames/s {what} on priority {prio} ({in_window} in the trailing {:.3} s, {n} of them in this interval of {:.3} s, {q})",
                            x.window_secs, x.secs
                        )
                    } else if x.secs < 1.0 {
                        format!(
                            "{rate:.0} PFC frames/s {what} on priority {prio} ({n} in {:.3} s, the first of the run, counted over 1 s, {q})",
                            x.secs
                        )
                    } else {
                        format!(
                            "{rate:.0} PFC frames/s {what} on priority {prio} ({n} in {:.3} s, {q})",
                            x.secs
                        )
                    },
                    format!("<= {} XOFF/s", th.pfc_storm_xoff_per_s),
                    n,
                ));
            }
        }
    }
}

/// Pause storms, 802.3x PAUSE, drops of the RDMA class, CE without CNP, ignored CNPs and
/// go-back-N on the NIC.
fn nic_loss_and_congestion(x: &NicInterval<'_>, p: &Policy, th: &Thresholds, out: &mut Vec<Alert>) {
    use nic::Quantity as Q;
    use observer_common::maps::dir;
    let rdma = p.rdma_priority;
    let storms = x.delta(Q::PauseStormEvents).unwrap_or(0)
        + x.delta(Q::PauseStormTxDisabled).unwrap_or(0)
        + x.delta(Q::PauseStormRoceEvents).unwrap_or(0);
    if storms > 0 {
        out.push(x.candidate(
            Rule::PfcStorm,
            None,
            None,
            format!("{storms} pause-storm events (the NIC's storm protection)"),
            "no pause storm".into(),
            storms,
        ));
    }
    let pause =
        x.delta(Q::GlobalPauseRxFrames).unwrap_or(0) + x.delta(Q::GlobalPauseTxFrames).unwrap_or(0);
    if pause > 0 {
        out.push(x.candidate(
            Rule::Pause8023x,
            None,
            None,
            format!("{pause} 802.3x PAUSE frames sent or received"),
            "no 802.3x PAUSE in a RoCE fabric".into(),
            pause,
        ));
    }
    let drops: u64 = [
        Q::RxPrioDiscards(rdma),
        Q::RxPrioBufDiscards(rdma),
        Q::RxPrioCongDiscards(rdma),
    ]
    .into_iter()
    .filter_map(|q| x.delta(q))
    .sum();
    if drops > 0 {
        out.push(x.candidate(
            Rule::RdmaClassDrops,
            Some(dir::INGRESS),
            Some(rdma),
            format!("{drops} packets of priority {rdma} discarded by the NIC"),
            "no drop in the lossless RDMA class".into(),
            drops,
        ));
    }
    if let (Some(ce), Some(0)) = (x.delta(Q::EcnMarkedRx), x.delta(Q::CnpSent))
        && ce >= th.ce_without_cnp_min_ce
    {
        out.push(x.candidate(
            Rule::CeWithoutCnp,
            None,
            None,
            format!("{ce} CE-marked RoCE packets received, 0 CNPs sent"),
            "CNPs sent for CE-marked packets".into(),
            ce,
        ));
    }
    if let Some(n) = x.delta(Q::CnpIgnored).filter(|&n| n > 0) {
        out.push(x.candidate(
            Rule::CnpIgnored,
            None,
            None,
            format!("{n} CNPs received and ignored"),
            "congestion control enabled on the RDMA priority".into(),
            n,
        ));
    }
    let seq = [Q::NakSeqErrRx, Q::AckTimeouts, Q::OutOfSequence].map(|q| x.delta(q).unwrap_or(0));
    let n: u64 = seq.iter().sum();
    if n > 0 {
        out.push(x.candidate(
            Rule::GoBackN,
            None,
            None,
            format!(
                "{} NAK sequence errors received, {} ACK timeouts, {} out-of-sequence packets",
                seq[0], seq[1], seq[2]
            ),
            "no retransmission".into(),
            n,
        ));
    }
}

/// A failed configuration check as a `config_*` alert: observed and expected values, the
/// setting to look at and the command that shows it.
pub fn config_check(iface: &str, c: &nic::Check, t_ns: u64) -> Option<Alert> {
    use nic::Verdict;
    let rule = Rule::from_name(&c.name).filter(|r| r.is_config())?;
    if c.verdict != Verdict::Fail {
        return None;
    }
    let key = AlertKey {
        iface: iface.into(),
        other: Some(NIC_SUBJECT.into()),
        ..Default::default()
    };
    let expected = format!(
        "{} (setting: {}; shown by `{}`)",
        c.expected, c.setting, c.command
    );
    Some(Alert::candidate(
        rule,
        key,
        t_ns,
        c.observed.clone(),
        expected,
        1,
        "nic",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::qp::opcode_bucket;

    /// Every `config_*` check the NIC source makes has its rule (an alert, not a silent drop).
    #[test]
    fn every_nic_check_has_a_rule() {
        let sample = nic::NicSample::empty("x", 0);
        let checks = nic::run_checks(&nic::Policy::nvidia(), &sample);
        assert!(!checks.is_empty());
        for c in checks {
            let r = Rule::from_name(&c.name);
            assert!(r.is_some_and(Rule::is_config), "{}", c.name);
        }
    }

    /// Many keys, one alert: of six keys bleached to DSCP 0 (kernel events, then interval
    /// deltas), the first three alert on their own and the other three are one alert naming
    /// them at the interval's end, each key's event packet counted once; two keys remarked to
    /// 46 (another cause) and a PSN gap (another rule) pass; with the threshold 0 nothing is
    /// held; beyond 100 keys the list ends `and N more`.
    #[test]
    fn keys_breaking_a_rule_alike_are_one_alert() {
        let ip = |a: [u8; 4]| std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets();
        let key = |i: u8, q: u32| {
            let mut k = AlertKey::qp(
                "eth0",
                &QpKey {
                    src_ip: ip([10, 0, 4, i]),
                    dst_ip: ip([10, 0, 5, i]),
                    dest_qp: q,
                    ..QpKey::default()
                },
            );
            k.class = Some(class::DATA as u8);
            k
        };
        let mk = |r, k, obs: &str, n, origin| {
            Alert::candidate(r, k, 5_000, obs.into(), "dscp 26".into(), n, origin)
        };
        let mut g = Groups::new(4, 10_000_000_000);
        let mut passed = Vec::new();
        for i in 1..=6u8 {
            passed.extend(g.admit(mk(
                Rule::DscpMismatch,
                key(i, 0x10 + i as u32),
                "dscp 0",
                1,
                "event",
            )));
        }
        for i in 1..=6u8 {
            let n = 10 * i as u64;
            passed.extend(g.admit(mk(
                Rule::DscpMismatch,
                key(i, 0x10 + i as u32),
                &format!("dscp 0 x{n}"),
                n,
                "interval",
            )));
        }
        passed.extend(g.admit(mk(
            Rule::DscpMismatch,
            key(7, 0x17),
            "dscp 46 x3",
            3,
            "interval",
        )));
        passed.extend(g.admit(mk(
            Rule::PsnGap,
            key(1, 0x11),
            "1 gaps, 2 PSNs missing",
            1,
            "interval",
        )));
        // keys 1-3: their event and their interval alert; 7 and the gap
        assert_eq!(passed.len(), 3 * 2 + 2, "{passed:#?}");
        assert!(passed.iter().all(|a| a.subjects == 1));
        let out = g.flush(Some("eth0"), 9_000, |_, _| Some(100));
        assert_eq!(out.len(), 1, "{out:#?}");
        let a = &out[0];
        // keys 4-6: 40 + 50 + 60 packets, the events' packets among them
        assert_eq!((a.rule, a.subjects, a.count), (Rule::DscpMismatch, 3, 150));
        assert_eq!(
            a.observed,
            "dscp 0 on 3 QP keys of 100 (150 in all), from 10.0.4.0/24 to 10.0.5.0/24; 3 more alerted on their own"
        );
        assert_eq!(a.keys[0], "10.0.4.4 -> 10.0.5.4 qp 0x000014 (20)");
        assert_eq!((a.key.qp, a.key.src, a.key.class), (None, None, Some(0)));
        assert_eq!(a.key.other.as_deref(), Some("QP keys"));
        assert_eq!(a.time_ns, 9_000);
        assert!(
            a.message().starts_with("dscp_mismatch on eth0"),
            "{}",
            a.message()
        );
        let j = a.json("h", "live");
        assert_eq!(j["subjects"], 3);
        assert_eq!(j["keys"].as_array().unwrap().len(), 3);
        assert!(passed[0].json("h", "live").get("keys").is_none());
        // nothing held any more; a held key stays held in the next interval (one alert a flush)
        assert!(g.flush(None, 10_000, |_, _| None).is_empty());
        assert!(
            g.admit(mk(
                Rule::DscpMismatch,
                key(5, 0x15),
                "dscp 0 x2",
                2,
                "interval"
            ))
            .is_none()
        );
        assert!(
            g.admit(mk(
                Rule::DscpMismatch,
                key(2, 0x12),
                "dscp 0 x2",
                2,
                "interval"
            ))
            .is_some()
        );
        assert_eq!(g.flush(None, 11_000, |_, _| None)[0].subjects, 1);
        // threshold 0: nothing held
        let mut off = Groups::new(0, 10_000_000_000);
        assert!((1..=9u8).all(|i| {
            off.admit(mk(Rule::PsnGap, key(i, i as u32), "1 gaps", 1, "interval"))
                .is_some()
        }));
        // beyond the listed keys: "and N more"
        let mut g = Groups::new(4, 10_000_000_000);
        let passed = (0..123u32)
            .filter_map(|i| {
                g.admit(mk(
                    Rule::PsnGap,
                    key((i % 200) as u8, i),
                    "1 gaps",
                    1,
                    "interval",
                ))
            })
            .count();
        assert_eq!(passed, 3);
        let out = g.flush(None, 9_000, |_, _| None);
        assert_eq!(out[0].keys.len(), contract::alert::MAX_KEYS_LISTED + 1);
        assert_eq!(out[0].keys.last().unwrap(), "and 20 more");
        assert!(
            out[0]
                .observed
                .starts_with("psn gap on 120 QP keys (120 in all)"),
            "{}",
            out[0].observed
        );
    }

    #[test]
    fn interval_rules_for_a_key() {
        let mut p = Policy::NONE;
        p.dscp = [26, ANY, 48];
        p.pcp = [3, ANY, ANY];
        p.ecn_capable = [1, 0, 0];
        let k = QpKey::default();
        let mut d = QpValue::ZERO;
        d.pkts = 10;
        d.dscp_hist[class::DATA][26] = 6;
        d.dscp_hist[class::DATA][0] = 4;
        d.ecn_hist[class::DATA][2] = 7;
        d.ecn_hist[class::DATA][0] = 3;
        d.pcp_hist[class::DATA][3] = 10;
        d.dscp_hist[class::CNP][48] = 2;
        d.psn_gaps = 1;
        d.psn_missing = 3;
        d.psn_retrans = 5;
        d.psn_behind = 4;
        d.opcode_hist[opcode_bucket(0x07)] = 2;
        d.max_udp_payload = 1024 + 16;
        let mut out = Vec::new();
        qp_interval("e", &k, &d, &p, 4096, 5, &mut out);
        let rules: Vec<(Rule, u64)> = out.iter().map(|a| (a.rule, a.count)).collect();
        assert_eq!(
            rules,
            vec![
                (Rule::DscpMismatch, 4),
                (Rule::NotEct, 3),
                (Rule::PsnGap, 1),
                (Rule::GoBackN, 5),
                (Rule::MtuBelowExpected, 1)
            ]
        );
        assert_eq!(out[0].observed, "dscp 0 x4");
        assert_eq!(out[4].observed, "largest UDP payload 1040 (RoCE MTU 1024)");
        assert_eq!(mtu_of_payload(4112), 4096);
        assert_eq!(mtu_of_payload(4111), 2048);
    }

    /// `mtu_below_expected` reads the path MTU off FIRST / MIDDLE packets only, and a payload
    /// below the smallest RoCE MTU's is no path MTU (never "RoCE MTU 0"); `icrc_bad` counts the
    /// key's packets whose ICRC failed.
    #[test]
    fn latency_high_when_the_p99_bucket_starts_above_the_threshold() {
        use crate::pipeline::latency::KeyLatency;
        use observer_common::latency::{Outcome, Record, kind};
        let k = QpKey::default();
        let th = contract::policy::Thresholds {
            latency_p99_ns: 1_000_000,
            latency_min_samples: 100,
            ..Default::default()
        };
        let run = |slow: u64, n: u64, kind: u8| {
            let mut l = KeyLatency::default();
            for i in 0..n {
                let v = if i < slow { 2_000_000 } else { 10_000 };
                l.add(&Record::new(k, 0, kind, Outcome::Sample(v)));
            }
            let mut out = Vec::new();
            latency_high("e0", &k, &l, &th, 7, &mut out);
            out
        };
        // 2 slow samples of 100: the p99 (rank 99) is fast
        assert!(run(1, 100, kind::ACK).is_empty());
        let a = run(2, 100, kind::ACK);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].rule, Rule::LatencyHigh);
        assert_eq!(a[0].key.other.as_deref(), Some("ack"));
        assert_eq!(a[0].count, 100);
        assert!(
            a[0].observed.starts_with("ACK round trip p99 "),
            "{}",
            a[0].observed
        );
        assert_eq!(
            run(2, 100, kind::READ)[0].key.other.as_deref(),
            Some("read")
        );
        // too few samples; NAK to resend and CE to CNP are not judged; 0 turns it off
        assert!(run(99, 99, kind::ACK).is_empty());
        assert!(run(100, 100, kind::NAK).is_empty());
        let mut l = KeyLatency::default();
        l.add(&Record::new(k, 0, kind::ACK, Outcome::Sample(5_000_000)));
        let mut out = Vec::new();
        let off = contract::policy::Thresholds {
            latency_p99_ns: 0,
            latency_min_samples: 1,
            ..Default::default()
        };
        latency_high("e0", &k, &l, &off, 7, &mut out);
        assert!(out.is_empty());
        // a p99 bucket that only ends above the threshold is not certainly over it
        let edge = observer_common::latency::UPPER_NS[60];
        let near = contract::policy::Thresholds {
            latency_p99_ns: edge - 1,
            latency_min_samples: 1,
            ..Default::default()
        };
        let mut l = KeyLatency::default();
        l.add(&Record::new(k, 0, kind::ACK, Outcome::Sample(edge)));
        latency_high("e0", &k, &l, &near, 7, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn path_mtu_only_from_full_packets_and_bad_icrc_per_key() {
        let p = Policy::NONE;
        let k = QpKey::default();
        let fire = |d: &QpValue| {
            let mut out = Vec::new();
            qp_interval("e", &k, d, &p, 4096, 5, &mut out);
            out.iter()
                .map(|a| (a.rule, a.count, a.observed.clone()))
                .collect::<Vec<_>>()
        };
        let mut d = QpValue::ZERO;
        d.pkts = 4;
        // WRITE ONLY at 1040 bytes: the messages fit one packet, the path MTU is not known
        d.opcode_hist[opcode_bucket(0x0a)] = 4;
        d.max_udp_payload = 1024 + 16;
        assert!(fire(&d).is_empty());
        // WRITE FIRST at 80 bytes: no RoCE MTU is that small
        d.opcode_hist[opcode_bucket(0x06)] = 2;
        d.max_udp_payload = 80;
        assert!(fire(&d).is_empty());
        d.max_udp_payload = 256 + 16;
        assert_eq!(
            fire(&d),
            vec![(
                Rule::MtuBelowExpected,
                1,
                "largest UDP payload 272 (RoCE MTU 256)".to_string()
            )]
        );
        d.opcode_hist[opcode_bucket(0x06)] = 0;
        d.icrc_bad = 20;
        d.icrc_ok = 3;
        assert_eq!(
            fire(&d),
            vec![(
                Rule::IcrcBad,
                20,
                "20 packets with a bad ICRC (3 verified good, 0 not verifiable)".to_string()
            )]
        );
    }

    /// The PFC alerts name the senders of their priority's frames, the largest first, at most
    /// four and how many more.
    #[test]
    fn pfc_alerts_name_their_priority_senders() {
        let mut delta = IfaceStats::default();
        delta.pfc.xoff[5] = 1500;
        delta.pfc.xoff[3] = 40;
        let mut macs: [Option<String>; 8] = Default::default();
        macs[5] = Some("02:00:00:00:00:0a=100,02:00:00:00:00:0b=800".into());
        macs[3] = Some(
            (1..=6)
                .map(|i| format!("02:00:00:00:00:0{i}={}", i * 2))
                .collect::<Vec<_>>()
                .join(","),
        );
        let mut peak = [0; 8];
        peak[5] = 1500;
        let x = IfaceInterval {
            iface: "e",
            dir: 0,
            delta: &delta,
            secs: 1.0,
            end_ns: 5,
            pause_src_macs: None,
            pfc_src_macs: &macs,
            xoff_peak_1s: peak,
        };
        let p = Policy {
            rdma_priority: 3,
            ..Policy::NONE
        };
        let mut out = Vec::new();
        iface_interval(&x, &p, &Thresholds::default(), &mut out);
        let obs: Vec<(Rule, &str)> = out.iter().map(|a| (a.rule, a.observed.as_str())).collect();
        assert_eq!(
            obs,
            vec![
                (
                    Rule::PfcWrongPriority,
                    "PFC on priority 5: 1500 XOFF, 0 XON from 02:00:00:00:00:0b=800, 02:00:00:00:00:0a=100"
                ),
                (
                    Rule::PfcStorm,
                    "1500 XOFF/s on priority 5 (densest second; 1500 XOFF in the 1.000 s interval) from 02:00:00:00:00:0b=800, 02:00:00:00:00:0a=100"
                ),
            ]
        );
        let mut peak3 = [0; 8];
        peak3[3] = 1200;
        let x = IfaceInterval {
            xoff_peak_1s: peak3,
            ..x
        };
        out.clear();
        iface_interval(&x, &p, &Thresholds::default(), &mut out);
        let storm = out.iter().find(|a| a.rule == Rule::PfcStorm).unwrap();
        assert!(
            storm.observed.ends_with(
                " from 02:00:00:00:00:06=12, 02:00:00:00:00:05=10, 02:00:00:00:00:04=8, 02:00:00:00:00:03=6 and 2 more senders"
            ),
            "{}",
            storm.observed
        );
    }

    /// A full per-QP map, for new keys or for the histogram overflow map, is one `qp_map_full`
    /// alert per interval and direction naming what was not counted.
    #[test]
    fn qp_map_full_names_untracked_packets_and_lost_histogram_buckets() {
        let run = |delta: &IfaceStats| {
            let x = IfaceInterval {
                iface: "e",
                dir: 0,
                delta,
                secs: 1.0,
                end_ns: 5,
                pause_src_macs: None,
                pfc_src_macs: &Default::default(),
                xoff_peak_1s: [0; 8],
            };
            let mut out = Vec::new();
            iface_interval(&x, &Policy::NONE, &Thresholds::default(), &mut out);
            out
        };
        assert!(run(&IfaceStats::default()).is_empty());
        let lost = IfaceStats {
            hist_overflow_lost: 3,
            ..IfaceStats::default()
        };
        let out = run(&lost);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].rule, out[0].count), (Rule::QpMapFull, 3));
        assert!(
            out[0]
                .observed
                .starts_with("3 histogram buckets not counted"),
            "{}",
            out[0].observed
        );
        let both = IfaceStats {
            qp_insert_failed: 2,
            roce_untracked: 2,
            ..lost
        };
        let out = run(&both);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].count, 5);
        assert!(
            out[0].observed.contains("; 3 histogram"),
            "{}",
            out[0].observed
        );
    }
}
