//! Per-QP-group hardware counters by counter binding, opt-in (`--qp-counters`): the port's
//! auto mode binds each new QP to a counter of its group (by QP type, by process, or both), and
//! every read gives each group's counter increments (out-of-sequence packets, sequence errors,
//! local ACK timeouts, RNR retries, ...) since the previous read.
//!
//! It changes the device's configuration, so it is never on by default: a port whose auto
//! mode was off is turned on at the start and off again by [`CounterBinding::restore`]; a port
//! already in auto or manual mode is read as it is and left so. Limits (docs/qps.md): QPs set
//! up before the mode was turned on stay on the port's counters; only devices whose driver
//! allocates counters bind anything (mlx5 in 7.2: rxe accepts the mode and binds nothing);
//! setting the mode needs `CAP_NET_ADMIN`; mlx5 has a limited number of counter sets.

use std::collections::{BTreeMap, HashMap};

use nic::rdma::RdmaDevice;
use nic::rdma::qp_counters::{CounterMode, QpCounter, mask_name};
use nic::{Reading, Unavailable, UnavailableReason};
use serde::{Deserialize, Serialize};

use crate::inventory::{Procfs, QpSource};

/// At most this many counter groups are kept per read (the rest are counted).
pub const MAX_GROUPS: usize = 16_384;

/// What the binding did on one port at the start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "detail")]
pub enum PortState {
    /// Auto mode was off and this run turned it on (off again at the end).
    TurnedOn,
    /// Auto mode was already on (with this mask), left as it is.
    AlreadyAuto(String),
    /// Manual binding is in use: its counters are read, the mode left as it is.
    Manual,
    /// The kernel or device has no counter binding, or no permission (the reason).
    Unavailable(String),
    /// Turning it on failed (the error).
    Failed(String),
}

/// One port's binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortBinding {
    pub dev: String,
    pub dev_index: u32,
    pub port: u32,
    pub state: PortState,
}

impl PortBinding {
    fn readable(&self) -> bool {
        matches!(
            self.state,
            PortState::TurnedOn | PortState::AlreadyAuto(_) | PortState::Manual
        )
    }
}

/// One counter group's increments over an interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterGroup {
    pub dev: String,
    pub dev_index: u32,
    pub port: u32,
    pub id: u32,
    /// The group's QP type (`RC`, ...), when grouped by type.
    pub qp_type: Option<String>,
    /// The group's process, when grouped by process.
    pub pid: Option<u32>,
    /// The process's command, or the kernel user's name.
    pub comm: Option<String>,
    /// The QPs bound to it at the read.
    pub lqpns: Vec<u32>,
    /// Increments since the previous read (all of the counter's values for a group first
    /// seen after the first read; nothing at the first read, which is the baseline).
    pub delta: BTreeMap<String, u64>,
}

impl CounterGroup {
    /// The non-zero increments, `name +n` joined: for an alert.
    pub fn describe_delta(&self) -> String {
        let v: Vec<String> = self
            .delta
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| format!("{k} +{v}"))
            .collect();
        if v.is_empty() {
            "no counter moved".into()
        } else {
            v.join(", ")
        }
    }
}

/// One read of the bound counters, with the binding's state and figures so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterRead {
    /// Grouped by `type`, `pid` or `type,pid`.
    pub grouping: String,
    pub ports: Vec<PortBinding>,
    pub groups: Vec<CounterGroup>,
    /// Groups left out over the run (beyond [`MAX_GROUPS`] in a read).
    pub excluded_over_limit: u64,
    /// Port reads that failed over the run.
    pub read_errors: u64,
}

impl CounterRead {
    /// The group a QP is bound to.
    pub fn group_of(&self, dev_index: u32, lqpn: u32) -> Option<&CounterGroup> {
        self.groups
            .iter()
            .find(|g| g.dev_index == dev_index && g.lqpns.contains(&lqpn))
    }
}

/// Counter binding over a run.
#[derive(Debug, Default)]
pub struct CounterBinding {
    pub mask: u32,
    pub ports: Vec<PortBinding>,
    /// Each group's last values: (device, port, counter id) -> values.
    prev: HashMap<(u32, u32, u32), Vec<(String, u64)>>,
    reads: u64,
    /// Groups beyond [`MAX_GROUPS`] in a read.
    pub excluded_over_limit: u64,
    /// Port reads that failed (logged).
    pub read_errors: u64,
}

fn unavailable_text(u: &Unavailable) -> String {
    u.to_string()
}

impl CounterBinding {
    /// Turns auto mode on with `mask` where it is off, on every port of `devices`.
    pub fn enable(src: &mut dyn QpSource, devices: &[RdmaDevice], mask: u32) -> CounterBinding {
        let mut b = CounterBinding {
            mask,
            ..CounterBinding::default()
        };
        for d in devices {
            for port in 1..=d.ports.unwrap_or(1).max(1) {
                let state = match src.counter_mode(d.index, port) {
                    Ok(Reading::Read(CounterMode::None)) => {
                        match src.set_counter_auto(d.index, port, mask) {
                            Ok(Reading::Read(())) => PortState::TurnedOn,
                            Ok(Reading::Unavailable(u)) => {
                                PortState::Unavailable(unavailable_text(&u))
                            }
                            Err(e) => PortState::Failed(contract::error::chain(&e)),
                        }
                    }
                    Ok(Reading::Read(CounterMode::Auto { mask: m })) => {
                        PortState::AlreadyAuto(mask_name(m))
                    }
                    Ok(Reading::Read(CounterMode::Manual)) => PortState::Manual,
                    Ok(Reading::Read(CounterMode::Other(x))) => {
                        PortState::Unavailable(format!("unknown counter mode {x}"))
                    }
                    Ok(Reading::Unavailable(u)) => PortState::Unavailable(unavailable_text(&u)),
                    Err(e) => PortState::Failed(contract::error::chain(&e)),
                };
                tracing::info!(device = %d.name, port, state = ?state, mask = %mask_name(mask), "QP counter binding");
                b.ports.push(PortBinding {
                    dev: d.name.clone(),
                    dev_index: d.index,
                    port,
                    state,
                });
            }
        }
        b
    }

    /// One line per port for the start-up report.
    pub fn describe(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| {
                let s = match &p.state {
                    PortState::TurnedOn => format!(
                        "auto mode by {} turned on (off again at exit); QPs set up from now on are counted per group",
                        mask_name(self.mask)
                    ),
                    PortState::AlreadyAuto(m) => {
                        format!("auto mode by {m} already on, read as it is")
                    }
                    PortState::Manual => "manual binding in use, its counters read as they are".into(),
                    PortState::Unavailable(r) => format!("reduced: no per-QP counters ({r})"),
                    PortState::Failed(e) => format!("reduced: no per-QP counters ({e})"),
                };
                format!("{}/{}: {s}", p.dev, p.port)
            })
            .collect()
    }

    /// Reads every bound counter: each group's increments since the last read, with the
    /// binding's state.
    pub fn read_all(&mut self, src: &mut dyn QpSource, proc: &Procfs) -> CounterRead {
        let groups = self.read(src, proc);
        CounterRead {
            grouping: mask_name(self.mask),
            ports: self.ports.clone(),
            groups,
            excluded_over_limit: self.excluded_over_limit,
            read_errors: self.read_errors,
        }
    }

    /// Reads every bound counter and returns each group's increments since the last read.
    pub fn read(&mut self, src: &mut dyn QpSource, proc: &Procfs) -> Vec<CounterGroup> {
        let mut out = Vec::new();
        let mut now: HashMap<(u32, u32, u32), Vec<(String, u64)>> = HashMap::new();
        let mut comms: HashMap<u32, Option<String>> = HashMap::new();
        let first = self.reads == 0;
        self.reads += 1;
        for p in self.ports.iter().filter(|p| p.readable()) {
            let counters = match src.counters(p.dev_index, p.port) {
                Ok(Reading::Read(c)) => c,
                Ok(Reading::Unavailable(u)) => {
                    self.read_errors += 1;
                    tracing::warn!(device = %p.dev, port = p.port, reason = %u, "QP counters unreadable");
                    continue;
                }
                Err(e) => {
                    self.read_errors += 1;
                    tracing::warn!(device = %p.dev, port = p.port, error = %contract::error::chain(&e), "QP counters unreadable");
                    continue;
                }
            };
            for c in counters {
                if out.len() >= MAX_GROUPS {
                    self.excluded_over_limit += 1;
                    continue;
                }
                let key = (c.dev_index, c.port, c.id);
                let delta = match self.prev.get(&key) {
                    _ if first => BTreeMap::new(),
                    Some(before) => deltas(before, &c.hw),
                    None => c.hw.iter().cloned().collect(),
                };
                let comm = match (c.pid, &c.kern_name) {
                    (Some(pid), _) => comms
                        .entry(pid)
                        .or_insert_with(|| proc.process(pid).comm)
                        .clone(),
                    (None, Some(k)) => Some(k.clone()),
                    _ => None,
                };
                out.push(group(p, &c, comm, delta));
                now.insert(key, c.hw);
            }
        }
        self.prev = now;
        out
    }

    /// Turns auto mode off again on the ports this run turned it on.
    pub fn restore(&mut self, src: &mut dyn QpSource) {
        for p in self.ports.iter_mut() {
            if p.state != PortState::TurnedOn {
                continue;
            }
            match src.set_counter_auto(p.dev_index, p.port, 0) {
                Ok(Reading::Read(())) => {
                    tracing::info!(device = %p.dev, port = p.port, "QP counter auto mode turned off again");
                    p.state = PortState::Unavailable("turned off at exit".into());
                }
                Ok(Reading::Unavailable(u)) => {
                    tracing::warn!(device = %p.dev, port = p.port, reason = %u, "QP counter auto mode left on: turning it off was refused")
                }
                Err(e) => {
                    tracing::warn!(device = %p.dev, port = p.port, error = %contract::error::chain(&e), "QP counter auto mode left on: turning it off failed")
                }
            }
        }
    }
}

fn group(
    p: &PortBinding,
    c: &QpCounter,
    comm: Option<String>,
    delta: BTreeMap<String, u64>,
) -> CounterGroup {
    CounterGroup {
        dev: p.dev.clone(),
        dev_index: c.dev_index,
        port: c.port,
        id: c.id,
        qp_type: c
            .qp_type
            .map(|t| nic::rdma::resources::qp_type_name(t).to_string()),
        pid: c.pid,
        comm,
        lqpns: c.lqpns.clone(),
        delta,
    }
}

/// Increments from `before` to `now` by name; a value that went down (the counter id re-used
/// by a new group, or a reset) counts from zero.
fn deltas(before: &[(String, u64)], now: &[(String, u64)]) -> BTreeMap<String, u64> {
    let b: HashMap<&str, u64> = before.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    now.iter()
        .map(|(k, v)| {
            let d = match b.get(k.as_str()) {
                Some(&p) if *v >= p => v - p,
                _ => *v,
            };
            (k.clone(), d)
        })
        .collect()
}

/// The unavailable answer of a source without counter binding.
pub fn not_supported(what: &str) -> Unavailable {
    Unavailable::new(UnavailableReason::NotSupported, what.to_string())
}

/// Parses `--qp-counters`: `type`, `pid` or `type,pid`.
pub fn parse_mask(s: &str) -> Result<u32, String> {
    let mut m = 0;
    for part in s.split(',') {
        m |= match part.trim() {
            "type" => nic::rdma::qp_counters::mask::QP_TYPE,
            "pid" => nic::rdma::qp_counters::mask::PID,
            other => {
                return Err(format!(
                    "unknown QP counter grouping {other:?}: use type, pid or type,pid"
                ));
            }
        };
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::tests::{Script, dev};

    fn counter(id: u32, pid: u32, qps: &[u32], ooo: u64, timeouts: u64) -> QpCounter {
        QpCounter {
            dev_index: 1,
            port: 1,
            id,
            qp_type: Some(2),
            pid: Some(pid),
            kern_name: None,
            lqpns: qps.to_vec(),
            hw: vec![
                ("out_of_sequence".into(), ooo),
                ("local_ack_timeout_err".into(), timeouts),
            ],
        }
    }

    #[test]
    fn binds_reads_increments_and_restores_only_what_it_changed() {
        let mut s = Script::default();
        let mut d1 = dev(1);
        d1.ports = Some(2);
        s.devices = vec![d1, dev(2)];
        // Port 1/1 off (turned on), 1/2 already auto by pid, device 2 without binding.
        s.modes.insert((1, 1), CounterMode::None);
        s.modes.insert((1, 2), CounterMode::Auto { mask: 2 });
        let devices = s.devices.clone();
        let mut b = CounterBinding::enable(&mut s, &devices, 3);
        assert_eq!(
            b.ports.iter().map(|p| p.state.clone()).collect::<Vec<_>>(),
            vec![
                PortState::TurnedOn,
                PortState::AlreadyAuto("pid".into()),
                PortState::Unavailable("not_supported: scripted: no counter binding".into())
            ]
        );
        assert_eq!(s.set_calls, vec![(1, 1, 3)]);
        let lines = b.describe();
        assert!(
            lines[0].starts_with("rxe1/1: auto mode by type,pid turned on"),
            "{lines:?}"
        );
        assert!(lines[2].contains("reduced"), "{lines:?}");

        let proc = Procfs {
            root: "/nonexistent".into(),
        };
        s.counters
            .insert((1, 1), vec![counter(5, 100, &[17], 2, 0)]);
        let g = b.read(&mut s, &proc);
        assert_eq!(g.len(), 1);
        assert!(g[0].delta.is_empty(), "the first read is the baseline");
        // Next interval: +3 out of sequence, +1 timeout on group 5; a new group 6 counts all
        // its values; a counter that went down (id re-used) counts from zero.
        s.counters.insert(
            (1, 1),
            vec![
                counter(5, 100, &[17, 18], 5, 1),
                counter(6, 200, &[19], 4, 0),
            ],
        );
        let g = b.read(&mut s, &proc);
        assert_eq!(g[0].delta["out_of_sequence"], 3);
        assert_eq!(g[0].delta["local_ack_timeout_err"], 1);
        assert_eq!(g[0].lqpns, vec![17, 18]);
        assert_eq!(g[0].qp_type.as_deref(), Some("RC"));
        assert_eq!(g[1].delta["out_of_sequence"], 4);
        assert_eq!(
            g[0].describe_delta(),
            "local_ack_timeout_err +1, out_of_sequence +3"
        );
        s.counters
            .insert((1, 1), vec![counter(5, 300, &[20], 1, 0)]);
        let g = b.read(&mut s, &proc);
        assert_eq!(g[0].delta["out_of_sequence"], 1);
        assert_eq!(g[0].describe_delta(), "out_of_sequence +1");
        // A failing port read is counted, the others still read.
        s.counter_fail = Some((1, 1));
        let g = b.read(&mut s, &proc);
        assert!(g.is_empty());
        assert_eq!(b.read_errors, 1);

        b.restore(&mut s);
        assert_eq!(
            s.set_calls,
            vec![(1, 1, 3), (1, 1, 0)],
            "only 1/1 is turned off"
        );
    }

    #[test]
    fn parses_the_grouping() {
        assert_eq!(parse_mask("type"), Ok(1));
        assert_eq!(parse_mask("pid"), Ok(2));
        assert_eq!(parse_mask("type,pid"), Ok(3));
        assert!(parse_mask("qp").unwrap_err().contains("type, pid"));
    }
}
