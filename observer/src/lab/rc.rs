//! Reliable Connection emulated in userspace: a requester on h1 and a responder on h2, several QPs
//! each, speaking RoCEv2 on AF_PACKET sockets (real BTH / RETH / AETH, valid ICRC).
//!
//! Requester: messages (RDMA WRITE and SEND of several sizes) cut into path-MTU packets, a window
//! of unacknowledged packets, pacing at a per-QP rate; cumulative ACKs advance the window; a NAK
//! (PSN sequence error) makes it go back N to the NAKed PSN; an RNR NAK makes it wait the RNR
//! timer and resend from that PSN; a local ACK timeout resends from the oldest unacknowledged
//! PSN; a CNP cuts its rate (DCQCN-like: rate *= 1 - alpha/2), which recovers while no CNP comes.
//!
//! Responder: expected PSN per QP; in-order packets are accepted and ACKed (coalesced: on AckReq
//! or every `ack_every` packets); the first out-of-order packet of an episode gets a NAK 0x60 and
//! later ones are silently dropped until the expected PSN comes; duplicates are re-ACKed; a SEND
//! that finds the emulated receive queue empty gets an RNR NAK; CE-marked packets are answered by
//! a CNP, at most one per QP per CNP interval, as NICs do.
//!
//! Both sides log what they did: the ground truth of the lab's injected-vs-observed table.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::sock::{PACKET_OUTGOING, RawSock};
use super::wire::{self, Addr, BthFields, op, psn_add, psn_diff, syndrome};
use super::{LabError, stop_requested};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgKind {
    Write,
    Send,
}

#[derive(Clone, Copy, Debug)]
pub struct Msg {
    pub kind: MsgKind,
    pub len: u32,
}

/// DSCP / ECN marking of what the emulated NICs send (from a vendor profile).
#[derive(Clone, Copy, Debug)]
pub struct Marking {
    pub data_dscp: u8,
    pub data_ecn: u8,
    pub ack_dscp: u8,
    pub ack_ecn: u8,
    pub cnp_dscp: u8,
    pub cnp_ecn: u8,
}

impl Marking {
    /// NVIDIA ConnectX defaults (roce-domain.md): data and ACKs DSCP 26 ECT(0), CNP DSCP 48.
    pub const NVIDIA: Marking = Marking {
        data_dscp: 26,
        data_ecn: 2,
        ack_dscp: 26,
        ack_ecn: 2,
        cnp_dscp: 48,
        cnp_ecn: 0,
    };
    /// Broadcom Thor2 defaults: the same DSCPs (the CNP priority, 7, matters only when tagged).
    pub const BROADCOM: Marking = Marking::NVIDIA;
}

/// One QP pair: requester QP on h1, responder QP on h2.
#[derive(Clone, Debug)]
pub struct QpPlan {
    pub req_qpn: u32,
    pub resp_qpn: u32,
    pub start_psn: u32,
    /// UDP source port of both directions (ECMP entropy).
    pub udp_sport: u16,
    pub msgs: Vec<Msg>,
    /// Emulated receive queue: `Some((depth, one WQE posted every d))`; `None` = never empty.
    pub rq: Option<(u32, Duration)>,
}

#[derive(Clone, Debug)]
pub struct RcConfig {
    pub qps: Vec<QpPlan>,
    /// Path MTU (payload bytes per packet).
    pub mtu: u32,
    pub window: u32,
    /// Initial (and target) rate per QP, packets per second.
    pub rate_pps: f64,
    pub min_rate_pps: f64,
    pub ack_every: u32,
    pub ack_timeout: Duration,
    pub rnr_timer: Duration,
    pub cnp_interval: Duration,
    pub marking: Marking,
    /// Give up (error) when the transfer takes longer.
    pub deadline: Duration,
    pub h1: Endpoint,
    pub h2: Endpoint,
}

#[derive(Clone, Copy, Debug)]
pub struct Endpoint {
    pub mac: [u8; 6],
    pub ip: [u8; 4],
}

/// One packet of the requester's send queue.
#[derive(Clone, Copy, Debug)]
struct Pkt {
    opcode: u8,
    len: u32,
    ack_req: bool,
    reth: Option<(u64, u32)>,
}

fn packetize(msgs: &[Msg], mtu: u32) -> Vec<Pkt> {
    let mut v = Vec::new();
    let mut va = 0x1000_0000u64;
    for m in msgs {
        let n = m.len.div_ceil(mtu).max(1);
        for i in 0..n {
            let len = if i + 1 == n {
                m.len - mtu * (n - 1)
            } else {
                mtu
            };
            let opcode = match (m.kind, n == 1, i == 0, i + 1 == n) {
                (MsgKind::Write, true, _, _) => op::WRITE_ONLY,
                (MsgKind::Write, _, true, _) => op::WRITE_FIRST,
                (MsgKind::Write, _, _, true) => op::WRITE_LAST,
                (MsgKind::Write, _, _, _) => op::WRITE_MIDDLE,
                (MsgKind::Send, true, _, _) => op::SEND_ONLY,
                (MsgKind::Send, _, true, _) => op::SEND_FIRST,
                (MsgKind::Send, _, _, true) => op::SEND_LAST,
                (MsgKind::Send, _, _, _) => op::SEND_MIDDLE,
            };
            v.push(Pkt {
                opcode,
                len,
                ack_req: i + 1 == n,
                reth: op::has_reth(opcode).then_some((va, m.len)),
            });
        }
        va += m.len as u64;
    }
    v
}

/// What the requester did, per QP.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReqStats {
    pub req_qpn: u32,
    pub resp_qpn: u32,
    pub msgs: u64,
    pub pkts_planned: u64,
    /// Every data packet put on the wire, first sends and resends.
    pub data_sent: u64,
    pub resent_after_nak: u64,
    pub resent_after_rnr: u64,
    pub resent_after_timeout: u64,
    pub acks_rcvd: u64,
    pub naks_rcvd: u64,
    pub rnr_naks_rcvd: u64,
    pub cnps_rcvd: u64,
    pub rate_cuts: u64,
    pub timeouts: u64,
    pub min_rate_pps: f64,
    pub completed: bool,
}

impl ReqStats {
    pub fn resent(&self) -> u64 {
        self.resent_after_nak + self.resent_after_rnr + self.resent_after_timeout
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cause {
    Nak,
    Rnr,
    Timeout,
}

struct ReqQp {
    plan: QpPlan,
    pkts: Vec<Pkt>,
    una: usize,
    next: usize,
    high: usize,
    cause: Cause,
    next_tx: Instant,
    rnr_until: Option<Instant>,
    last_progress: Instant,
    rate: f64,
    alpha: f64,
    last_cnp: Option<Instant>,
    last_adjust: Instant,
    st: ReqStats,
}

/// The metrics.md PSN analysis of one key's arrival stream, written independently of
/// `observer_common::qp` so the lab checks the observer against its own reading of the contract.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PsnStream {
    max: Option<u32>,
    pub gaps: u64,
    pub missing: u64,
    pub retrans: u64,
    pub behind: u64,
}

impl PsnStream {
    pub fn push(&mut self, psn: u32) {
        match self.max {
            None => self.max = Some(psn),
            Some(m) => {
                let d = psn_diff(psn, m);
                if d >= 1 {
                    self.max = Some(psn);
                    if d > 1 {
                        self.gaps += 1;
                        self.missing += (d - 1) as u64;
                    }
                } else {
                    self.retrans += 1;
                    if d < 0 {
                        self.behind += 1;
                    }
                }
            }
        }
    }
}

/// The requester on h1 (call on a thread inside h1's namespace).
pub fn run_requester(cfg: &RcConfig, iface: &str) -> Result<Vec<ReqStats>, LabError> {
    let sock = RawSock::open(iface)?;
    let start = Instant::now();
    let mut qps: Vec<ReqQp> = cfg
        .qps
        .iter()
        .map(|p| {
            let pkts = packetize(&p.msgs, cfg.mtu);
            ReqQp {
                st: ReqStats {
                    req_qpn: p.req_qpn,
                    resp_qpn: p.resp_qpn,
                    msgs: p.msgs.len() as u64,
                    pkts_planned: pkts.len() as u64,
                    min_rate_pps: cfg.rate_pps,
                    ..Default::default()
                },
                plan: p.clone(),
                pkts,
                una: 0,
                next: 0,
                high: 0,
                cause: Cause::Nak,
                next_tx: start,
                rnr_until: None,
                last_progress: start,
                rate: cfg.rate_pps,
                alpha: 1.0,
                last_cnp: None,
                last_adjust: start,
            }
        })
        .collect();
    let by_qpn: HashMap<u32, usize> = qps
        .iter()
        .enumerate()
        .map(|(i, q)| (q.plan.req_qpn, i))
        .collect();
    let mut ip_id: u16 = 0x1000;
    let mut buf = vec![0u8; 16384];
    const G: f64 = 1.0 / 16.0;
    let adjust_period = Duration::from_millis(2);
    loop {
        if stop_requested() {
            return Err(LabError::Interrupted);
        }
        let now = Instant::now();
        if now.duration_since(start) > cfg.deadline {
            let left: Vec<String> = qps
                .iter()
                .filter(|q| q.una < q.pkts.len())
                .map(|q| format!("QP 0x{:06x} at {}/{}", q.plan.req_qpn, q.una, q.pkts.len()))
                .collect();
            return Err(LabError::Traffic(format!(
                "requester did not finish within {:?}: {}",
                cfg.deadline,
                left.join(", ")
            )));
        }
        // Receive everything waiting.
        while let Some((n, pkttype)) = sock.recv(&mut buf) {
            if pkttype == PACKET_OUTGOING {
                continue;
            }
            let Some(rx) = wire::parse(&buf[..n]) else {
                continue;
            };
            if rx.dst_ip != cfg.h1.ip {
                continue;
            }
            let Some(&i) = by_qpn.get(&rx.dest_qp) else {
                continue;
            };
            let q = &mut qps[i];
            let now = Instant::now();
            let idx = psn_diff(rx.psn, q.plan.start_psn);
            match rx.opcode {
                op::CNP => {
                    q.st.cnps_rcvd += 1;
                    q.alpha = (1.0 - G) * q.alpha + G;
                    q.rate = (q.rate * (1.0 - q.alpha / 2.0)).max(cfg.min_rate_pps);
                    q.st.rate_cuts += 1;
                    q.st.min_rate_pps = q.st.min_rate_pps.min(q.rate);
                    q.last_cnp = Some(now);
                    q.last_adjust = now;
                }
                op::ACK => {
                    let in_window = idx >= q.una as i32 - 1 && (idx as i64) < q.high as i64;
                    match syndrome::kind(rx.syndrome) {
                        0 => {
                            q.st.acks_rcvd += 1;
                            if in_window && idx as usize + 1 > q.una {
                                q.una = idx as usize + 1;
                                q.last_progress = now;
                                if q.next < q.una {
                                    q.next = q.una;
                                }
                            }
                        }
                        1 => {
                            q.st.rnr_naks_rcvd += 1;
                            if in_window && idx >= 0 {
                                let idx = idx as usize;
                                q.una = q.una.max(idx);
                                q.next = idx;
                                q.cause = Cause::Rnr;
                                q.rnr_until = Some(now + cfg.rnr_timer);
                                q.last_progress = now;
                            }
                        }
                        3 => {
                            q.st.naks_rcvd += 1;
                            if in_window && idx >= 0 {
                                let idx = idx as usize;
                                q.una = q.una.max(idx);
                                q.next = idx;
                                q.cause = Cause::Nak;
                                q.last_progress = now;
                            }
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        // Timers and sending.
        let now = Instant::now();
        let mut all_done = true;
        let mut next_wake = now + Duration::from_millis(1);
        for q in qps.iter_mut() {
            if q.una >= q.pkts.len() {
                q.st.completed = true;
                continue;
            }
            all_done = false;
            // DCQCN-like recovery: alpha decays and the rate climbs back while no CNP comes.
            if now.duration_since(q.last_adjust) >= adjust_period {
                q.last_adjust = now;
                if q.last_cnp
                    .is_some_and(|t| now.duration_since(t) >= adjust_period)
                {
                    q.alpha *= 1.0 - G;
                    q.rate = (q.rate + cfg.rate_pps) / 2.0;
                }
            }
            if let Some(t) = q.rnr_until {
                if now < t {
                    next_wake = next_wake.min(t);
                    continue;
                }
                q.rnr_until = None;
            }
            if q.next > q.una && now.duration_since(q.last_progress) > cfg.ack_timeout {
                q.st.timeouts += 1;
                q.next = q.una;
                q.cause = Cause::Timeout;
                q.last_progress = now;
            }
            let mut burst = 0;
            while q.next < q.pkts.len()
                && q.next < q.una + cfg.window as usize
                && q.next_tx <= now
                && burst < 16
            {
                let i = q.next;
                let p = q.pkts[i];
                if q.next == q.una {
                    // The ACK timer starts when something becomes outstanding.
                    q.last_progress = now;
                }
                let psn = psn_add(q.plan.start_psn, i as u32);
                let a = Addr {
                    src_mac: cfg.h1.mac,
                    dst_mac: cfg.h2.mac,
                    src_ip: cfg.h1.ip,
                    dst_ip: cfg.h2.ip,
                    udp_sport: q.plan.udp_sport,
                    dscp: cfg.marking.data_dscp,
                    ecn: cfg.marking.data_ecn,
                    ip_id,
                };
                ip_id = ip_id.wrapping_add(1);
                let b = BthFields {
                    opcode: p.opcode,
                    solicited: false,
                    pad: 0,
                    pkey: 0xffff,
                    becn: false,
                    dest_qp: q.plan.resp_qpn,
                    ack_req: p.ack_req,
                    psn,
                };
                let ext = match p.reth {
                    Some((va, len)) => wire::reth(va, 0x1234, len).to_vec(),
                    None => Vec::new(),
                };
                sock.send(&wire::frame(&a, &b, &ext, p.len as usize))?;
                q.st.data_sent += 1;
                if i < q.high {
                    match q.cause {
                        Cause::Nak => q.st.resent_after_nak += 1,
                        Cause::Rnr => q.st.resent_after_rnr += 1,
                        Cause::Timeout => q.st.resent_after_timeout += 1,
                    }
                } else {
                    q.high = i + 1;
                }
                q.next += 1;
                burst += 1;
                let step = Duration::from_secs_f64(1.0 / q.rate.max(1.0));
                q.next_tx = if q.next_tx + step < now {
                    now
                } else {
                    q.next_tx + step
                };
            }
            if q.next < q.pkts.len() && q.next < q.una + cfg.window as usize {
                next_wake = next_wake.min(q.next_tx);
            }
        }
        if all_done {
            break;
        }
        let wait = next_wake.saturating_duration_since(Instant::now());
        sock.wait((wait.as_micros() as i32 + 999) / 1000);
    }
    Ok(qps.into_iter().map(|q| q.st).collect())
}

/// What the responder did and saw, per QP.
#[derive(Clone, Debug, PartialEq)]
pub struct RespStats {
    pub resp_qpn: u32,
    pub req_qpn: u32,
    /// Every data packet received, in any order.
    pub data_rcvd: u64,
    pub accepted: u64,
    pub out_of_order_dropped: u64,
    pub duplicates: u64,
    pub acks_sent: u64,
    pub naks_sent: u64,
    pub rnr_naks_sent: u64,
    pub ce_rcvd: u64,
    pub cnps_sent: u64,
    pub cnps_suppressed: u64,
    /// Smallest time between two CNPs of this QP (None with fewer than two).
    pub min_cnp_spacing: Option<Duration>,
    pub dscp_rcvd: [u64; 64],
    pub icrc_bad: u64,
    pub msgs_completed: u64,
    /// metrics.md PSN analysis of the arrival stream.
    pub stream: PsnStream,
}

impl Default for RespStats {
    fn default() -> Self {
        RespStats {
            resp_qpn: 0,
            req_qpn: 0,
            data_rcvd: 0,
            accepted: 0,
            out_of_order_dropped: 0,
            duplicates: 0,
            acks_sent: 0,
            naks_sent: 0,
            rnr_naks_sent: 0,
            ce_rcvd: 0,
            cnps_sent: 0,
            cnps_suppressed: 0,
            min_cnp_spacing: None,
            dscp_rcvd: [0; 64],
            icrc_bad: 0,
            msgs_completed: 0,
            stream: PsnStream::default(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NakState {
    None,
    Seq,
    Rnr,
}

struct RespQp {
    plan: QpPlan,
    epsn: u32,
    msn: u32,
    nak: NakState,
    since_ack: u32,
    rq: Option<(u32, Duration, Instant, u32)>,
    last_cnp: Option<Instant>,
    st: RespStats,
}

/// Responder totals, plus frames its socket lost (must be 0 for the ground truth to hold).
#[derive(Clone, Debug, Default)]
pub struct Responder {
    pub qps: Vec<RespStats>,
    pub socket_drops: u64,
}

/// The responder on h2 (call on a thread inside h2's namespace); runs until `done` is set and
/// then 100 ms more for stragglers.
pub fn run_responder(
    cfg: &RcConfig,
    iface: &str,
    done: &AtomicBool,
    ready: &AtomicBool,
) -> Result<Responder, LabError> {
    let sock = RawSock::open(iface)?;
    ready.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let mut qps: HashMap<u32, RespQp> = cfg
        .qps
        .iter()
        .map(|p| {
            (
                p.resp_qpn,
                RespQp {
                    plan: p.clone(),
                    epsn: p.start_psn,
                    msn: 0,
                    nak: NakState::None,
                    since_ack: 0,
                    rq: p.rq.map(|(n, d)| (n, d, start, n)),
                    last_cnp: None,
                    st: RespStats {
                        resp_qpn: p.resp_qpn,
                        req_qpn: p.req_qpn,
                        ..Default::default()
                    },
                },
            )
        })
        .collect();
    let mut ip_id: u16 = 0x2000;
    let mut buf = vec![0u8; 16384];
    let mut drops = 0u64;
    let mut done_at: Option<Instant> = None;
    loop {
        if stop_requested() {
            return Err(LabError::Interrupted);
        }
        let now = Instant::now();
        if done.load(Ordering::SeqCst) {
            let t = *done_at.get_or_insert(now);
            if now.duration_since(t) > Duration::from_millis(100) {
                break;
            }
        }
        if now.duration_since(start) > cfg.deadline + Duration::from_secs(5) {
            return Err(LabError::Traffic("responder ran past its deadline".into()));
        }
        sock.wait(1);
        while let Some((n, pkttype)) = sock.recv(&mut buf) {
            if pkttype == PACKET_OUTGOING {
                continue;
            }
            let Some(rx) = wire::parse(&buf[..n]) else {
                continue;
            };
            if rx.dst_ip != cfg.h2.ip || rx.opcode > 0x17 || rx.opcode == op::ACK {
                continue;
            }
            let Some(q) = qps.get_mut(&rx.dest_qp) else {
                continue;
            };
            let now = Instant::now();
            q.st.data_rcvd += 1;
            q.st.dscp_rcvd[rx.dscp as usize & 63] += 1;
            q.st.stream.push(rx.psn);
            if !rx.icrc_ok {
                q.st.icrc_bad += 1;
                continue;
            }
            let mut out: Vec<(BthFields, Vec<u8>, Marking2)> = Vec::new();
            if rx.ecn == 3 {
                q.st.ce_rcvd += 1;
                if q.last_cnp
                    .is_none_or(|t| now.duration_since(t) >= cfg.cnp_interval)
                {
                    if let Some(t) = q.last_cnp {
                        let d = now.duration_since(t);
                        q.st.min_cnp_spacing = Some(q.st.min_cnp_spacing.map_or(d, |m| m.min(d)));
                    }
                    q.last_cnp = Some(now);
                    q.st.cnps_sent += 1;
                    out.push((
                        BthFields {
                            opcode: op::CNP,
                            pkey: 0xffff,
                            becn: true,
                            dest_qp: q.plan.req_qpn,
                            ..Default::default()
                        },
                        vec![0u8; 16],
                        Marking2::Cnp,
                    ));
                } else {
                    q.st.cnps_suppressed += 1;
                }
            }
            let d = psn_diff(rx.psn, q.epsn);
            let ack = |q: &RespQp, syn: u8, psn: u32| {
                (
                    BthFields {
                        opcode: op::ACK,
                        pkey: 0xffff,
                        dest_qp: q.plan.req_qpn,
                        psn,
                        ..Default::default()
                    },
                    wire::aeth(syn, q.msn).to_vec(),
                    Marking2::Ack,
                )
            };
            if d == 0 {
                // Receive queue: replenish, then a SEND's first packet needs a WQE.
                let mut rnr = false;
                if let Some((credits, every, last, depth)) = q.rq.as_mut() {
                    while now.duration_since(*last) >= *every {
                        *credits = (*credits + 1).min(*depth);
                        *last += *every;
                    }
                    if op::starts_send(rx.opcode) {
                        if *credits == 0 {
                            rnr = true;
                        } else {
                            *credits -= 1;
                        }
                    }
                }
                if rnr {
                    q.nak = NakState::Rnr;
                    q.st.rnr_naks_sent += 1;
                    out.push(ack(q, syndrome::RNR_NAK, rx.psn));
                } else {
                    q.nak = NakState::None;
                    q.epsn = psn_add(q.epsn, 1);
                    q.st.accepted += 1;
                    if op::ends_message(rx.opcode) {
                        q.msn = (q.msn + 1) & 0xff_ffff;
                        q.st.msgs_completed += 1;
                    }
                    q.since_ack += 1;
                    if rx.ack_req || q.since_ack >= cfg.ack_every {
                        q.since_ack = 0;
                        q.st.acks_sent += 1;
                        out.push(ack(q, syndrome::ACK, rx.psn));
                    }
                }
            } else if d > 0 {
                if q.nak == NakState::None {
                    q.nak = NakState::Seq;
                    q.st.naks_sent += 1;
                    out.push(ack(q, syndrome::NAK_PSN_SEQ_ERR, q.epsn));
                } else {
                    q.st.out_of_order_dropped += 1;
                }
            } else {
                q.st.duplicates += 1;
                q.st.acks_sent += 1;
                out.push(ack(q, syndrome::ACK, psn_add(q.epsn, wire::PSN_MASK)));
            }
            for (b, ext, m) in out {
                let (dscp, ecn) = match m {
                    Marking2::Ack => (cfg.marking.ack_dscp, cfg.marking.ack_ecn),
                    Marking2::Cnp => (cfg.marking.cnp_dscp, cfg.marking.cnp_ecn),
                };
                let a = Addr {
                    src_mac: cfg.h2.mac,
                    dst_mac: cfg.h1.mac,
                    src_ip: cfg.h2.ip,
                    dst_ip: cfg.h1.ip,
                    udp_sport: q.plan.udp_sport,
                    dscp,
                    ecn,
                    ip_id,
                };
                ip_id = ip_id.wrapping_add(1);
                sock.send(&wire::frame(&a, &b, &ext, 0))?;
            }
        }
        drops += sock.drops() as u64;
    }
    let mut v: Vec<RespStats> = qps.into_values().map(|q| q.st).collect();
    v.sort_by_key(|s| s.resp_qpn);
    Ok(Responder {
        qps: v,
        socket_drops: drops,
    })
}

#[derive(Clone, Copy)]
enum Marking2 {
    Ack,
    Cnp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packetize_cuts_messages_at_the_mtu_with_the_right_opcodes() {
        let p = packetize(
            &[
                Msg {
                    kind: MsgKind::Write,
                    len: 64,
                },
                Msg {
                    kind: MsgKind::Write,
                    len: 9000,
                },
                Msg {
                    kind: MsgKind::Send,
                    len: 4096,
                },
                Msg {
                    kind: MsgKind::Send,
                    len: 8193,
                },
            ],
            4096,
        );
        let ops: Vec<u8> = p.iter().map(|x| x.opcode).collect();
        assert_eq!(ops, vec![0x0a, 0x06, 0x07, 0x08, 0x04, 0x00, 0x01, 0x02]);
        assert_eq!(p[3].len, 9000 - 8192);
        assert_eq!(p[7].len, 1);
        assert!(p[1].reth.is_some() && p[2].reth.is_none());
        assert_eq!(p.iter().filter(|x| x.ack_req).count(), 4);
    }

    #[test]
    fn psn_stream_follows_metrics_md() {
        // Go-back-N: 5 lost, 6 7 8 in flight, resend 5..8, then 9.
        let mut s = PsnStream::default();
        for p in [3, 4, 6, 7, 8, 5, 6, 7, 8, 9] {
            s.push(p);
        }
        assert_eq!((s.gaps, s.missing, s.retrans, s.behind), (1, 1, 4, 3));
        // A wrap is a step of one.
        let mut w = PsnStream::default();
        for p in [0xfffffe, 0xffffff, 0, 1] {
            w.push(p);
        }
        assert_eq!(
            w,
            PsnStream {
                max: Some(1),
                ..Default::default()
            }
        );
    }
}
