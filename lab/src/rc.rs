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

/// DSCP / ECN marking of what the emulated NICs send (from a vendor profile), and their 802.1Q
/// tag when they send tagged frames.
#[derive(Clone, Copy, Debug)]
pub struct Marking {
    pub data_dscp: u8,
    pub data_ecn: u8,
    pub ack_dscp: u8,
    pub ack_ecn: u8,
    pub cnp_dscp: u8,
    pub cnp_ecn: u8,
    /// `None`: untagged frames (behind DSCP-trust ports).
    pub vlan: Option<Vlan>,
}

/// The tag of tagged frames: the VLAN and the priority (PCP) of each class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vlan {
    pub vid: u16,
    pub data_pcp: u8,
    pub ack_pcp: u8,
    pub cnp_pcp: u8,
}

impl Vlan {
    /// A vendor profile's priorities (data and ACKs on the RDMA priority, CNPs on theirs) in
    /// VLAN `vid`.
    pub const fn of(v: &contract::vendor::Profile, vid: u16) -> Vlan {
        Vlan {
            vid,
            data_pcp: v.rdma_priority,
            ack_pcp: v.rdma_priority,
            cnp_pcp: v.cnp_priority,
        }
    }
}

impl Marking {
    /// What an emulated NIC of a vendor profile ([`contract::vendor`]) sends.
    pub const fn of(v: &contract::vendor::Profile) -> Marking {
        Marking {
            data_dscp: v.data_dscp,
            data_ecn: v.data_ecn,
            ack_dscp: v.ack_dscp,
            ack_ecn: v.ack_ecn,
            cnp_dscp: v.cnp_dscp,
            cnp_ecn: v.cnp_ecn,
            vlan: None,
        }
    }
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
    /// The responder holds every reply (ACK, NAK, CNP) this long before sending it: the delay
    /// scenarios' path delay on the way back (the host kernel has no netem).
    pub reply_delay: Duration,
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

/// One requester QP. Packets are numbered by their index in `pkts` (PSN = start PSN + index).
struct ReqQp {
    plan: QpPlan,
    pkts: Vec<Pkt>,
    /// Oldest unacknowledged packet.
    una: usize,
    /// Next packet to send (below `high` after a go-back: a resend).
    next: usize,
    /// One past the highest packet ever sent.
    high: usize,
    /// Why packets below `high` are being sent again.
    cause: Cause,
    /// When the rate allows the next packet.
    next_tx: Instant,
    /// Sending waits until then after an RNR NAK.
    rnr_until: Option<Instant>,
    /// Start of the local ACK timeout.
    last_progress: Instant,
    /// Current rate (packets per second) and DCQCN alpha.
    rate: f64,
    alpha: f64,
    last_cnp: Option<Instant>,
    /// Last rate cut or recovery step.
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

/// DCQCN-like rate control: the gain of alpha, raised on each CNP and decayed while none comes.
const DCQCN_G: f64 = 1.0 / 16.0;
/// How often the rate recovers (and alpha decays) while no CNP comes.
const ADJUST_PERIOD: Duration = Duration::from_millis(2);
/// At most this many packets of one QP leave in a row before the next QP's turn.
const BURST: usize = 16;

/// The requester on h1 (call on a thread inside h1's namespace): receives, then sends what is
/// due, until every QP's messages are acknowledged.
pub fn run_requester(cfg: &RcConfig, iface: &str) -> Result<Vec<ReqStats>, LabError> {
    let mut r = Requester::new(cfg, iface)?;
    loop {
        if stop_requested() {
            return Err(LabError::Interrupted);
        }
        if Instant::now().duration_since(r.start) > cfg.deadline {
            return Err(r.deadline_error());
        }
        r.receive();
        let Some(next_wake) = r.send_due()? else {
            break;
        };
        let wait = next_wake.saturating_duration_since(Instant::now());
        r.sock.wait((wait.as_micros() as i32 + 999) / 1000);
    }
    Ok(r.qps.into_iter().map(|q| q.st).collect())
}

/// The requester's socket and QPs.
struct Requester<'a> {
    cfg: &'a RcConfig,
    sock: RawSock,
    start: Instant,
    qps: Vec<ReqQp>,
    /// Index in `qps` by requester QP number (the dest QP of ACKs and CNPs).
    by_qpn: HashMap<u32, usize>,
    /// IPv4 identification of the next frame.
    ip_id: u16,
    buf: Vec<u8>,
}

impl<'a> Requester<'a> {
    fn new(cfg: &'a RcConfig, iface: &str) -> Result<Self, LabError> {
        let sock = RawSock::open(iface)?;
        let start = Instant::now();
        let qps: Vec<ReqQp> = cfg.qps.iter().map(|p| ReqQp::new(p, cfg, start)).collect();
        let by_qpn = qps
            .iter()
            .enumerate()
            .map(|(i, q)| (q.plan.req_qpn, i))
            .collect();
        Ok(Requester {
            cfg,
            sock,
            start,
            qps,
            by_qpn,
            ip_id: 0x1000,
            buf: vec![0u8; 16384],
        })
    }

    fn deadline_error(&self) -> LabError {
        let left: Vec<String> = self
            .qps
            .iter()
            .filter(|q| q.una < q.pkts.len())
            .map(|q| format!("QP 0x{:06x} at {}/{}", q.plan.req_qpn, q.una, q.pkts.len()))
            .collect();
        LabError::Traffic(format!(
            "requester did not finish within {:?}: {}",
            self.cfg.deadline,
            left.join(", ")
        ))
    }

    /// Every waiting ACK, NAK and CNP, to its QP.
    fn receive(&mut self) {
        while let Some((n, pkttype)) = self.sock.recv(&mut self.buf) {
            if pkttype == PACKET_OUTGOING {
                continue;
            }
            let Some(rx) = wire::parse(&self.buf[..n]) else {
                continue;
            };
            if rx.dst_ip != self.cfg.h1.ip {
                continue;
            }
            let Some(&i) = self.by_qpn.get(&rx.dest_qp) else {
                continue;
            };
            let q = &mut self.qps[i];
            let now = Instant::now();
            match rx.opcode {
                op::CNP => q.on_cnp(self.cfg, now),
                op::ACK => q.on_ack(self.cfg, &rx, now),
                _ => {}
            }
        }
    }

    /// Runs every unfinished QP's timers and sends what is due; returns when to look again, or
    /// `None` once every QP is done.
    fn send_due(&mut self) -> Result<Option<Instant>, LabError> {
        let cfg = self.cfg;
        let now = Instant::now();
        let mut all_done = true;
        let mut next_wake = now + Duration::from_millis(1);
        for q in self.qps.iter_mut() {
            if q.una >= q.pkts.len() {
                q.st.completed = true;
                continue;
            }
            all_done = false;
            q.recover_rate(cfg, now);
            if let Some(t) = q.rnr_wait(now) {
                next_wake = next_wake.min(t);
                continue;
            }
            q.check_ack_timeout(cfg, now);
            q.send_burst(cfg, &self.sock, &mut self.ip_id, now)?;
            if q.window_open(cfg) {
                next_wake = next_wake.min(q.next_tx);
            }
        }
        Ok((!all_done).then_some(next_wake))
    }
}

impl ReqQp {
    fn new(p: &QpPlan, cfg: &RcConfig, start: Instant) -> ReqQp {
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
    }

    /// A CNP: alpha rises and the rate is cut (rate *= 1 - alpha/2, not below the minimum).
    fn on_cnp(&mut self, cfg: &RcConfig, now: Instant) {
        self.st.cnps_rcvd += 1;
        self.alpha = (1.0 - DCQCN_G) * self.alpha + DCQCN_G;
        self.rate = (self.rate * (1.0 - self.alpha / 2.0)).max(cfg.min_rate_pps);
        self.st.rate_cuts += 1;
        self.st.min_rate_pps = self.st.min_rate_pps.min(self.rate);
        self.last_cnp = Some(now);
        self.last_adjust = now;
    }

    /// DCQCN-like recovery: every adjust period without a CNP, alpha decays and the rate climbs
    /// halfway back to the initial rate.
    fn recover_rate(&mut self, cfg: &RcConfig, now: Instant) {
        if now.duration_since(self.last_adjust) >= ADJUST_PERIOD {
            self.last_adjust = now;
            if self
                .last_cnp
                .is_some_and(|t| now.duration_since(t) >= ADJUST_PERIOD)
            {
                self.alpha *= 1.0 - DCQCN_G;
                self.rate = (self.rate + cfg.rate_pps) / 2.0;
            }
        }
    }

    /// An ACK (the window advances), an RNR NAK (resend from its PSN once the RNR timer ends)
    /// or a NAK (go back N to its PSN). Only ACKs inside the window move anything.
    fn on_ack(&mut self, cfg: &RcConfig, rx: &wire::Rx, now: Instant) {
        let idx = psn_diff(rx.psn, self.plan.start_psn);
        let in_window = idx >= self.una as i32 - 1 && (idx as i64) < self.high as i64;
        match syndrome::kind(rx.syndrome) {
            0 => {
                self.st.acks_rcvd += 1;
                if in_window && idx as usize + 1 > self.una {
                    self.una = idx as usize + 1;
                    self.last_progress = now;
                    if self.next < self.una {
                        self.next = self.una;
                    }
                }
            }
            1 => {
                self.st.rnr_naks_rcvd += 1;
                if in_window && idx >= 0 {
                    self.go_back(idx as usize, Cause::Rnr, now);
                    self.rnr_until = Some(now + cfg.rnr_timer);
                }
            }
            3 => {
                self.st.naks_rcvd += 1;
                if in_window && idx >= 0 {
                    self.go_back(idx as usize, Cause::Nak, now);
                }
            }
            _ => {}
        }
    }

    /// Resends from packet `idx` on, counting the resends against `cause`.
    fn go_back(&mut self, idx: usize, cause: Cause, now: Instant) {
        self.una = self.una.max(idx);
        self.next = idx;
        self.cause = cause;
        self.last_progress = now;
    }

    /// While an RNR NAK's timer runs: when it ends (clears it once it has).
    fn rnr_wait(&mut self, now: Instant) -> Option<Instant> {
        match self.rnr_until {
            Some(t) if now < t => Some(t),
            _ => {
                self.rnr_until = None;
                None
            }
        }
    }

    /// The local ACK timeout: nothing acknowledged for `ack_timeout` while packets are
    /// outstanding resends from the oldest.
    fn check_ack_timeout(&mut self, cfg: &RcConfig, now: Instant) {
        if self.next > self.una && now.duration_since(self.last_progress) > cfg.ack_timeout {
            self.st.timeouts += 1;
            self.go_back(self.una, Cause::Timeout, now);
        }
    }

    /// Whether a packet is left to send and the window has room for it.
    fn window_open(&self, cfg: &RcConfig) -> bool {
        self.next < self.pkts.len() && self.next < self.una + cfg.window as usize
    }

    /// Sends up to [`BURST`] packets whose time has come at the QP's rate.
    fn send_burst(
        &mut self,
        cfg: &RcConfig,
        sock: &RawSock,
        ip_id: &mut u16,
        now: Instant,
    ) -> Result<(), LabError> {
        let mut burst = 0;
        while self.window_open(cfg) && self.next_tx <= now && burst < BURST {
            let i = self.next;
            if i == self.una {
                // The ACK timer starts when something becomes outstanding.
                self.last_progress = now;
            }
            let frame = self.data_frame(cfg, i, *ip_id);
            *ip_id = ip_id.wrapping_add(1);
            sock.send(&frame)?;
            self.st.data_sent += 1;
            if i < self.high {
                match self.cause {
                    Cause::Nak => self.st.resent_after_nak += 1,
                    Cause::Rnr => self.st.resent_after_rnr += 1,
                    Cause::Timeout => self.st.resent_after_timeout += 1,
                }
            } else {
                self.high = i + 1;
            }
            self.next += 1;
            burst += 1;
            let step = Duration::from_secs_f64(1.0 / self.rate.max(1.0));
            self.next_tx = if self.next_tx + step < now {
                now
            } else {
                self.next_tx + step
            };
        }
        Ok(())
    }

    /// Packet `i` of the send queue as a frame from h1 to h2.
    fn data_frame(&self, cfg: &RcConfig, i: usize, ip_id: u16) -> Vec<u8> {
        let p = self.pkts[i];
        let a = Addr {
            src_mac: cfg.h1.mac,
            dst_mac: cfg.h2.mac,
            src_ip: cfg.h1.ip,
            dst_ip: cfg.h2.ip,
            udp_sport: self.plan.udp_sport,
            dscp: cfg.marking.data_dscp,
            ecn: cfg.marking.data_ecn,
            ip_id,
            tag: cfg.marking.vlan.map(|v| (v.data_pcp, v.vid)),
        };
        let b = BthFields {
            opcode: p.opcode,
            solicited: false,
            pad: 0,
            pkey: 0xffff,
            becn: false,
            dest_qp: self.plan.resp_qpn,
            ack_req: p.ack_req,
            psn: psn_add(self.plan.start_psn, i as u32),
        };
        let ext = match p.reth {
            Some((va, len)) => wire::reth(va, 0x1234, len).to_vec(),
            None => Vec::new(),
        };
        wire::frame(&a, &b, &ext, p.len as usize)
    }
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
    /// Data packets received per tag priority (index 8: untagged).
    pub pcp_rcvd: [u64; 9],
    /// Data packets received per ECN codepoint.
    pub ecn_rcvd: [u64; 4],
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
            pcp_rcvd: [0; 9],
            ecn_rcvd: [0; 4],
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
        .map(|p| (p.resp_qpn, RespQp::new(p, start)))
        .collect();
    let mut tx = ReplyTx {
        cfg,
        sock: &sock,
        ip_id: 0x2000,
    };
    let mut buf = vec![0u8; 16384];
    let mut drops = 0u64;
    let mut done_at: Option<Instant> = None;
    // Replies held for `reply_delay`, in the order made (one delay for all: due in order).
    let mut held: std::collections::VecDeque<(Instant, u16, Reply)> =
        std::collections::VecDeque::new();
    loop {
        if stop_requested() {
            return Err(LabError::Interrupted);
        }
        let now = Instant::now();
        if done.load(Ordering::SeqCst) {
            let t = *done_at.get_or_insert(now);
            if now.duration_since(t) > Duration::from_millis(100) {
                // what is still held leaves now: every reply counted is sent
                while let Some((_, sport, reply)) = held.pop_front() {
                    tx.send(sport, reply)?;
                }
                break;
            }
        }
        if now.duration_since(start) > cfg.deadline + Duration::from_secs(5) {
            return Err(LabError::Traffic("responder ran past its deadline".into()));
        }
        while held.front().is_some_and(|h| h.0 <= now) {
            let (_, sport, reply) = held.pop_front().expect("a held reply");
            tx.send(sport, reply)?;
        }
        // (a held reply leaves at most about a millisecond after it is due: poll's resolution)
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
            let at = Instant::now();
            for reply in q.on_data(cfg, &rx, at) {
                if cfg.reply_delay.is_zero() {
                    tx.send(q.plan.udp_sport, reply)?;
                } else {
                    held.push_back((at + cfg.reply_delay, q.plan.udp_sport, reply));
                }
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

/// What the responder sends back: an ACK / NAK (AETH) or a CNP, marked as the profile says.
struct Reply {
    bth: BthFields,
    ext: Vec<u8>,
    kind: ReplyKind,
}

#[derive(Clone, Copy)]
enum ReplyKind {
    Ack,
    Cnp,
}

/// The responder's sending side: frames from h2 to h1.
struct ReplyTx<'a> {
    cfg: &'a RcConfig,
    sock: &'a RawSock,
    /// IPv4 identification of the next frame.
    ip_id: u16,
}

impl ReplyTx<'_> {
    fn send(&mut self, udp_sport: u16, r: Reply) -> Result<(), LabError> {
        let m = &self.cfg.marking;
        let (dscp, ecn) = match r.kind {
            ReplyKind::Ack => (m.ack_dscp, m.ack_ecn),
            ReplyKind::Cnp => (m.cnp_dscp, m.cnp_ecn),
        };
        let tag = m.vlan.map(|v| match r.kind {
            ReplyKind::Ack => (v.ack_pcp, v.vid),
            ReplyKind::Cnp => (v.cnp_pcp, v.vid),
        });
        let (h1, h2) = (&self.cfg.h1, &self.cfg.h2);
        let a = Addr {
            src_mac: h2.mac,
            dst_mac: h1.mac,
            src_ip: h2.ip,
            dst_ip: h1.ip,
            udp_sport,
            dscp,
            ecn,
            ip_id: self.ip_id,
            tag,
        };
        self.ip_id = self.ip_id.wrapping_add(1);
        self.sock.send(&wire::frame(&a, &r.bth, &r.ext, 0))
    }
}

impl RespQp {
    fn new(p: &QpPlan, start: Instant) -> RespQp {
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
        }
    }

    /// One data packet: counted and analysed, then answered (a CNP for CE first, then by its
    /// PSN against the expected one: accepted and maybe ACKed, NAKed, or re-ACKed).
    fn on_data(&mut self, cfg: &RcConfig, rx: &wire::Rx, now: Instant) -> Vec<Reply> {
        self.st.data_rcvd += 1;
        self.st.dscp_rcvd[rx.dscp as usize & 63] += 1;
        self.st.pcp_rcvd[rx.pcp.map_or(8, |p| p as usize & 7)] += 1;
        self.st.ecn_rcvd[rx.ecn as usize & 3] += 1;
        self.st.stream.push(rx.psn);
        if !rx.icrc_ok {
            self.st.icrc_bad += 1;
            return Vec::new();
        }
        let mut out = Vec::new();
        if rx.ecn == 3 {
            out.extend(self.on_ce(cfg, now));
        }
        let d = psn_diff(rx.psn, self.epsn);
        let answer = if d == 0 {
            self.on_expected(cfg, rx, now)
        } else if d > 0 {
            self.on_ahead()
        } else {
            self.st.duplicates += 1;
            self.st.acks_sent += 1;
            Some(self.ack(syndrome::ACK, psn_add(self.epsn, wire::PSN_MASK)))
        };
        out.extend(answer);
        out
    }

    /// A CE mark: a CNP, unless one went out less than the CNP interval ago.
    fn on_ce(&mut self, cfg: &RcConfig, now: Instant) -> Option<Reply> {
        self.st.ce_rcvd += 1;
        if self
            .last_cnp
            .is_some_and(|t| now.duration_since(t) < cfg.cnp_interval)
        {
            self.st.cnps_suppressed += 1;
            return None;
        }
        if let Some(t) = self.last_cnp {
            let d = now.duration_since(t);
            self.st.min_cnp_spacing = Some(self.st.min_cnp_spacing.map_or(d, |m| m.min(d)));
        }
        self.last_cnp = Some(now);
        self.st.cnps_sent += 1;
        Some(Reply {
            bth: BthFields {
                opcode: op::CNP,
                pkey: 0xffff,
                becn: true,
                dest_qp: self.plan.req_qpn,
                ..Default::default()
            },
            ext: vec![0u8; 16],
            kind: ReplyKind::Cnp,
        })
    }

    /// The expected PSN: an RNR NAK when a SEND finds no receive WQE, else accepted (ACKed on
    /// AckReq or every `ack_every` packets).
    fn on_expected(&mut self, cfg: &RcConfig, rx: &wire::Rx, now: Instant) -> Option<Reply> {
        if !self.take_wqe(rx.opcode, now) {
            self.nak = NakState::Rnr;
            self.st.rnr_naks_sent += 1;
            return Some(self.ack(syndrome::RNR_NAK, rx.psn));
        }
        self.nak = NakState::None;
        self.epsn = psn_add(self.epsn, 1);
        self.st.accepted += 1;
        if op::ends_message(rx.opcode) {
            self.msn = (self.msn + 1) & 0xff_ffff;
            self.st.msgs_completed += 1;
        }
        self.since_ack += 1;
        if !(rx.ack_req || self.since_ack >= cfg.ack_every) {
            return None;
        }
        self.since_ack = 0;
        self.st.acks_sent += 1;
        Some(self.ack(syndrome::ACK, rx.psn))
    }

    /// The emulated receive queue: replenished (one WQE per period, up to its depth), then a
    /// SEND's first packet takes a WQE. False when it needs one and there is none.
    fn take_wqe(&mut self, opcode: u8, now: Instant) -> bool {
        let Some((credits, every, last, depth)) = self.rq.as_mut() else {
            return true;
        };
        while now.duration_since(*last) >= *every {
            *credits = (*credits + 1).min(*depth);
            *last += *every;
        }
        if !op::starts_send(opcode) {
            return true;
        }
        if *credits == 0 {
            return false;
        }
        *credits -= 1;
        true
    }

    /// A PSN ahead of the expected one: the first of an episode gets a NAK (PSN sequence
    /// error), the rest are dropped silently until the expected PSN comes.
    fn on_ahead(&mut self) -> Option<Reply> {
        if self.nak != NakState::None {
            self.st.out_of_order_dropped += 1;
            return None;
        }
        self.nak = NakState::Seq;
        self.st.naks_sent += 1;
        Some(self.ack(syndrome::NAK_PSN_SEQ_ERR, self.epsn))
    }

    /// An ACK / NAK with syndrome `syn` for `psn`, carrying the current MSN.
    fn ack(&self, syn: u8, psn: u32) -> Reply {
        Reply {
            bth: BthFields {
                opcode: op::ACK,
                pkey: 0xffff,
                dest_qp: self.plan.req_qpn,
                psn,
                ..Default::default()
            },
            ext: wire::aeth(syn, self.msn).to_vec(),
            kind: ReplyKind::Ack,
        }
    }
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
