//! Passive per-QP latency (docs/latency.md): the requester side of a connection keeps its
//! outstanding acknowledgement requests, READ requests, the NAK it is answering and the CE mark
//! waiting for a CNP in a small fixed state ([`Requester`]); the packets of the reverse key
//! (ACKs, NAKs, READ responses, CNPs) end them. Each ended entry is one [`Outcome`]: a sample,
//! or why there is none. Pairing the two keys of a connection is the caller's (replay keeps an
//! index; docs/latency.md "The two keys of a connection").
//!
//! The samples go into log-bucketed histograms with the bucket edges of Prometheus native
//! histograms of schema 2 ([`UPPER_NS`]): bucket `i` holds (2^((i-1)/4), 2^(i/4)] seconds.
//!
//! `no_std`, allocation-free and bounded, as the rest of this crate.

use crate::parse::{Frame, OPCODE_RC_READ_REQUEST};
use crate::qp::{PsnStep, class_of, psn_diff};

/// The latencies measured, in the order of the outputs' columns.
pub mod kind {
    /// A request with AckReq to the first ACK, NAK or READ response covering its PSN.
    pub const ACK: u8 = 0;
    /// A READ request to its first response.
    pub const READ: u8 = 1;
    /// A NAK (PSN sequence error) to the requester's first packet at the PSN it names.
    pub const NAK: u8 = 2;
    /// The first CE-marked packet while none waits, to the CNP answering it.
    pub const CNP: u8 = 3;
    pub const COUNT: usize = 4;
    /// Column and field names.
    pub const NAMES: [&str; COUNT] = ["ack", "read", "nak_resend", "ce_cnp"];
    /// What each measures, for the outputs' documentation.
    pub const DOCS: [&str; COUNT] = [
        "ACK round trip: a request with AckReq to the first ACK, NAK or READ response covering its PSN",
        "READ request to its first response",
        "NAK (PSN sequence error) to the requester's first packet at the PSN it names",
        "first CE-marked packet while none waits to the CNP answering it",
    ];
}

/// What became of one started measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Ended by its answer: the time between, nanoseconds.
    Sample(u64),
    /// Not answered: timed out, a new incarnation, passed over, or still open at the end.
    Unmatched,
    /// Karn's rule: a PSN up to the entry's was sent again while it was outstanding (or the
    /// request itself was a resend), so its acknowledgement cannot be timed.
    Ambiguous,
    /// The outstanding ring was full: not started.
    RingFull,
    /// Still open when the observation ended (the answer may have come after it): neither a
    /// sample nor unmatched.
    Open,
}

impl Outcome {
    /// A small code for compact records: 0 sample, 1 unmatched, 2 ambiguous, 3 ring full,
    /// 4 open at the end.
    pub const fn code(self) -> u8 {
        match self {
            Outcome::Sample(_) => 0,
            Outcome::Unmatched => 1,
            Outcome::Ambiguous => 2,
            Outcome::RingFull => 3,
            Outcome::Open => 4,
        }
    }
}

/// Outstanding entries kept per key (acknowledgement requests and READ requests).
pub const RING: usize = 16;

/// The RC local ACK timeout NCCL configures (4.096 µs × 2^20): the default time after which an
/// open entry is `Unmatched`.
pub const DEFAULT_TIMEOUT_NS: u64 = 4_294_967_296;
/// The largest timeout accepted: the histograms' top edge (2^3 s).
pub const MAX_TIMEOUT_NS: u64 = 8_000_000_000;

/// Index of the lowest bucket: it holds everything up to 2^-20 s (953.67 ns).
pub const MIN_INDEX: i16 = -80;
/// Index of the highest bucket: (2^2.75, 2^3] s, up to 8 s.
pub const MAX_INDEX: i16 = 12;
/// Buckets per histogram.
pub const BUCKETS: usize = (MAX_INDEX - MIN_INDEX + 1) as usize;

/// 2^(r/4) for r in 0..4.
const ROOTS: [f64; 4] = [
    1.0,
    1.189_207_115_002_721,
    core::f64::consts::SQRT_2,
    1.681_792_830_507_429,
];

/// The upper edge of each bucket in nanoseconds, rounded down (for integer nanoseconds
/// `v <= floor(edge)` exactly when `v <= edge`): position `b` is bucket index `MIN_INDEX + b`,
/// edge 10^9 × 2^((MIN_INDEX + b) / 4).
pub const UPPER_NS: [u64; BUCKETS] = {
    let mut t = [0u64; BUCKETS];
    let mut b = 0;
    while b < BUCKETS {
        let i = MIN_INDEX as i32 + b as i32;
        let q = i.div_euclid(4);
        let r = i.rem_euclid(4) as usize;
        let mut x = 1e9 * ROOTS[r];
        let mut k = q;
        while k < 0 {
            x /= 2.0;
            k += 1;
        }
        while k > 0 {
            x *= 2.0;
            k -= 1;
        }
        t[b] = x as u64;
        b += 1;
    }
    t
};

/// Per power of two 2^e (e in 0..64): the first bucket position whose edge is at least 2^e
/// ns (the last position when none is).
const FIRST_AT_POW2: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut e = 0;
    while e < 64 {
        let p = 1u64 << e;
        let mut b = 0;
        while b < BUCKETS - 1 && UPPER_NS[b] < p {
            b += 1;
        }
        t[e] = b as u8;
        e += 1;
    }
    t
};

/// The bucket position (0..[`BUCKETS`]) of a sample of `ns` nanoseconds; above the top edge:
/// the top bucket (timeouts keep samples below it). From the sample's power of two, then at
/// most a few edges (4 buckets per doubling): no search over the table.
#[inline]
pub fn bucket(ns: u64) -> usize {
    if ns <= UPPER_NS[0] {
        return 0;
    }
    let e = (63 - ns.leading_zeros()) as usize;
    // every bucket before `b` ends below 2^e <= ns
    let mut b = FIRST_AT_POW2[e & 63] as usize;
    let mut n = 0;
    while b < BUCKETS - 1 && UPPER_NS[b] < ns && n < 8 {
        b += 1;
        n += 1;
    }
    b
}

/// The first bucket position whose lower edge (the upper edge of the position before it; 0 for
/// the first) is at least `ns`: a quantile in that bucket or above is certainly `ns` or more.
/// [`BUCKETS`] when no bucket starts that high. The `latency_high` rule and its report check
/// both judge with it.
pub fn first_starting_at(ns: u64) -> usize {
    if ns == 0 {
        return 0;
    }
    (1..BUCKETS)
        .find(|&b| UPPER_NS[b - 1] >= ns)
        .unwrap_or(BUCKETS)
}

/// The bucket index (as Prometheus numbers it, and the flows table's `value`) of position `b`.
#[inline]
pub const fn index_of(b: usize) -> i16 {
    MIN_INDEX + b as i16
}

/// The position of bucket index `i`, when in range.
#[inline]
pub fn position_of(i: i16) -> Option<usize> {
    (MIN_INDEX..=MAX_INDEX)
        .contains(&i)
        .then(|| (i - MIN_INDEX) as usize)
}

/// The quantile `num / den` (0 < q <= 1: p99 is 99 / 100) of a histogram given as (position,
/// count) pairs in ascending position: the upper edge, in nanoseconds, of the bucket holding
/// the sample of rank ceil(q × n) (the true value is at most that, and above the bucket's lower
/// edge: within 19 %). `None` without samples.
pub fn quantile_upper_ns(
    buckets: impl IntoIterator<Item = (usize, u64)> + Clone,
    num: u64,
    den: u64,
) -> Option<u64> {
    let n: u64 = buckets.clone().into_iter().map(|(_, c)| c).sum();
    if n == 0 || den == 0 {
        return None;
    }
    // ceil(q n) in integers, at least 1
    let rank = ((num as u128 * n as u128).div_ceil(den as u128) as u64).max(1);
    let mut seen = 0;
    for (b, c) in buckets {
        seen += c;
        if seen >= rank {
            return Some(UPPER_NS[b.min(BUCKETS - 1)]);
        }
    }
    None
}

/// Flag bits kept beside an entry's PSN (the PSN is 24 bits).
const F_READ: u32 = 1 << 24;
const F_AMBIGUOUS: u32 = 1 << 25;
const PSN_MASK: u32 = 0xff_ffff;

/// The measurements a key's requests have open. Entries are in the order sent, with PSNs
/// increasing (a resend adds none): an acknowledgement ends a prefix.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requester {
    /// PSN (bits 23:0) and `F_*` flags of each entry, oldest at `head`.
    psn: [u32; RING],
    t: [u64; RING],
    head: u32,
    len: u32,
    /// The PSN a NAK asked for, and when (with `nak_open`).
    nak_psn: u32,
    nak_open: u32,
    nak_t: u64,
    /// When the CE mark waiting for its CNP was seen (with `ce_open`).
    ce_t: u64,
    ce_open: u32,
    _pad: u32,
}

impl Default for Requester {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl Requester {
    pub const EMPTY: Requester = Requester {
        psn: [0; RING],
        t: [0; RING],
        head: 0,
        len: 0,
        nak_psn: 0,
        nak_open: 0,
        nak_t: 0,
        ce_t: 0,
        ce_open: 0,
        _pad: 0,
    };

    /// Entries outstanding.
    pub fn outstanding(&self) -> usize {
        self.len as usize
    }

    #[inline]
    fn slot(&self, n: u32) -> usize {
        ((self.head + n) as usize) % RING
    }

    /// Whether an acknowledgement of PSN `a` on the reverse key can be this key's: an entry is
    /// outstanding, `a` is at or after the oldest and not after `psn_max`, the highest PSN the
    /// key sent (the pairing test, docs/latency.md).
    pub fn covers(&self, a: u32, psn_max: u32) -> bool {
        self.len > 0
            && psn_diff(a, self.psn[self.head as usize % RING] & PSN_MASK) >= 0
            && psn_diff(a, psn_max) <= 0
    }

    /// Whether a CE mark waits for its CNP (the pairing test of a CNP).
    pub fn ce_waiting(&self) -> bool {
        self.ce_open != 0
    }

    /// Whether anything is open (entries, a NAK, a CE).
    pub fn is_idle(&self) -> bool {
        self.len == 0 && self.nak_open == 0 && self.ce_open == 0
    }

    fn end_oldest(&mut self, t: u64, timeout: u64, out: &mut impl FnMut(u8, Outcome)) {
        let s = self.head as usize % RING;
        let (p, t0) = (self.psn[s], self.t[s]);
        self.head = ((self.head + 1) as usize % RING) as u32;
        self.len -= 1;
        let k = if p & F_READ != 0 {
            kind::READ
        } else {
            kind::ACK
        };
        out(k, timed(p, t0, t, timeout));
    }

    /// Everything open ends as `how`: `Unmatched` (a new incarnation), `Open` (the end of the
    /// observation).
    pub fn close(&mut self, how: Outcome, out: &mut impl FnMut(u8, Outcome)) {
        while self.len > 0 {
            let s = self.head as usize % RING;
            let k = if self.psn[s] & F_READ != 0 {
                kind::READ
            } else {
                kind::ACK
            };
            self.head = ((self.head + 1) as usize % RING) as u32;
            self.len -= 1;
            out(k, how);
        }
        self.head = 0;
        if self.nak_open != 0 {
            self.nak_open = 0;
            out(kind::NAK, how);
        }
        if self.ce_open != 0 {
            self.ce_open = 0;
            out(kind::CNP, how);
        }
    }

    /// Open entries older than `timeout` at `t` are `Unmatched`.
    pub fn expire(&mut self, t: u64, timeout: u64, out: &mut impl FnMut(u8, Outcome)) {
        let mut n = 0;
        while self.len > 0 && n < RING {
            let s = self.head as usize % RING;
            if t.saturating_sub(self.t[s]) <= timeout {
                break;
            }
            self.end_oldest(t, timeout, out);
            n += 1;
        }
        if self.nak_open != 0 && t.saturating_sub(self.nak_t) > timeout {
            self.nak_open = 0;
            out(kind::NAK, Outcome::Unmatched);
        }
        if self.ce_open != 0 && t.saturating_sub(self.ce_t) > timeout {
            self.ce_open = 0;
            out(kind::CNP, Outcome::Unmatched);
        }
    }

    /// A packet this key sent (a request-direction packet: not an ACK, READ response or CNP)
    /// at `t`, after the PSN analysis gave `step` for it.
    pub fn on_request(
        &mut self,
        f: &Frame,
        step: PsnStep,
        t: u64,
        timeout: u64,
        out: &mut impl FnMut(u8, Outcome),
    ) {
        if step == PsnStep::Reborn {
            self.close(Outcome::Unmatched, out);
        }
        self.expire(t, timeout, out);
        let psn = f.bth.psn & PSN_MASK;
        if self.nak_open != 0 && psn == self.nak_psn {
            self.nak_open = 0;
            out(kind::NAK, Outcome::Sample(t.saturating_sub(self.nak_t)));
        }
        if f.ecn == 3 && self.ce_open == 0 {
            self.ce_open = 1;
            self.ce_t = t;
        }
        match step {
            PsnStep::NotAhead(_) => {
                // Karn: every open entry at or after the resent PSN is ambiguous
                let mut n = 0;
                while n < self.len && (n as usize) < RING {
                    let s = self.slot(n);
                    if psn_diff(self.psn[s] & PSN_MASK, psn) >= 0 {
                        self.psn[s] |= F_AMBIGUOUS;
                    }
                    n += 1;
                }
            }
            // only RC requests are acknowledged (UC and UD, QP 1's MADs among them, never)
            PsnStep::First | PsnStep::Ahead(_) | PsnStep::Reborn if f.bth.opcode < 0x20 => {
                let read = f.bth.opcode == OPCODE_RC_READ_REQUEST;
                if read || f.bth.ack_req != 0 {
                    let k = if read { kind::READ } else { kind::ACK };
                    if self.len as usize >= RING {
                        out(k, Outcome::RingFull);
                    } else {
                        let s = self.slot(self.len);
                        self.psn[s] = psn | if read { F_READ } else { 0 };
                        self.t[s] = t;
                        self.len += 1;
                    }
                }
            }
            _ => {}
        }
    }

    /// A packet of the reverse key (the responder's ACK, NAK, READ response or CNP) at `t`.
    /// Packets that answer nothing are ignored.
    pub fn on_response(
        &mut self,
        f: &Frame,
        t: u64,
        timeout: u64,
        out: &mut impl FnMut(u8, Outcome),
    ) {
        let op = f.bth.opcode;
        let psn = f.bth.psn & PSN_MASK;
        if op == 0x81 {
            if self.ce_open != 0 {
                self.ce_open = 0;
                out(kind::CNP, timed(0, self.ce_t, t, timeout));
            }
            return;
        }
        // the PSNs this packet acknowledges: those up to `last` (`last_incl`) or before it
        let (upto, inclusive, read_first) = match op {
            // READ RESPONSE first, only: acknowledge the PSNs before them, answer the READ at
            // their PSN; middle and last: the PSNs before them
            0x0d | 0x10 => (psn, false, true),
            0x0e | 0x0f => (psn, false, false),
            0x11 | 0x12 if f.has_aeth != 0 => {
                let syn = f.aeth_syndrome();
                match syn & 0x60 {
                    0x00 => (psn, true, false),
                    0x60 => {
                        // NAK: the PSN named was not accepted. A PSN sequence error asks for it.
                        if syn & 0x1f == 0 && self.nak_open == 0 {
                            self.nak_open = 1;
                            self.nak_psn = psn;
                            self.nak_t = t;
                        }
                        (psn, false, false)
                    }
                    0x20 => (psn, false, false),
                    _ => return,
                }
            }
            _ => return,
        };
        let mut n = 0;
        while self.len > 0 && n < RING {
            let s = self.head as usize % RING;
            let p = self.psn[s];
            let d = psn_diff(p & PSN_MASK, upto);
            if d > 0 || (d == 0 && !inclusive && !(read_first && p & F_READ != 0)) {
                break;
            }
            if p & F_READ != 0 && d < 0 {
                // a READ passed over without its first response seen
                self.head = ((self.head + 1) as usize % RING) as u32;
                self.len -= 1;
                out(kind::READ, Outcome::Unmatched);
            } else {
                self.end_oldest(t, timeout, out);
            }
            n += 1;
        }
    }
}

/// The outcome of an entry with PSN word `p` (flags) started at `t0`, ended at `t`.
#[inline]
fn timed(p: u32, t0: u64, t: u64, timeout: u64) -> Outcome {
    if p & F_AMBIGUOUS != 0 {
        return Outcome::Ambiguous;
    }
    let dt = t.saturating_sub(t0);
    if dt > timeout {
        Outcome::Unmatched
    } else {
        Outcome::Sample(dt)
    }
}

/// One outcome of one key's measurement, as the sources hand them to the outputs: `key` is
/// the requester's key (the direction of the requests), `t_ns` when it was decided.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub key: crate::maps::QpKey,
    pub t_ns: u64,
    /// The sample (nanoseconds) when `outcome` is 0.
    pub value_ns: u64,
    /// One of [`kind`].
    pub kind: u8,
    /// [`Outcome::code`].
    pub outcome: u8,
    pub _pad: [u8; 6],
}

impl Record {
    /// The outcome this record holds.
    pub fn outcome(&self) -> Outcome {
        match self.outcome {
            0 => Outcome::Sample(self.value_ns),
            1 => Outcome::Unmatched,
            2 => Outcome::Ambiguous,
            3 => Outcome::RingFull,
            _ => Outcome::Open,
        }
    }

    pub fn new(key: crate::maps::QpKey, t_ns: u64, kind: u8, o: Outcome) -> Record {
        Record {
            key,
            t_ns,
            value_ns: match o {
                Outcome::Sample(v) => v,
                _ => 0,
            },
            kind,
            outcome: o.code(),
            _pad: [0; 6],
        }
    }
}

/// Whether a packet with `opcode` answers the reverse key's requests (ACK class, READ
/// responses, CNP) rather than being a request of its own key.
#[inline]
pub const fn is_response(opcode: u8) -> bool {
    matches!(opcode, 0x0d..=0x12 | 0x81) || class_of(opcode) != crate::maps::class::DATA
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Bth;

    fn frame(op: u8, psn: u32, ack_req: bool) -> Frame {
        Frame {
            bth: Bth {
                opcode: op,
                ack_req: ack_req as u8,
                psn,
                ..Bth::default()
            },
            ..Frame::default()
        }
    }

    fn ack(psn: u32, syndrome: u8) -> Frame {
        let mut f = frame(0x11, psn, false);
        f.has_aeth = 1;
        f.aeth = (syndrome as u32) << 24;
        f
    }

    /// Runs a sequence of (time, request?, frame, step) and collects the outcomes.
    fn run(seq: &[(u64, bool, Frame, PsnStep)]) -> Vec<(u8, Outcome)> {
        let mut r = Requester::EMPTY;
        let mut v = Vec::new();
        for (t, req, f, step) in seq {
            let mut out = |k, o| v.push((k, o));
            if *req {
                r.on_request(f, *step, *t, DEFAULT_TIMEOUT_NS, &mut out);
            } else {
                r.on_response(f, *t, DEFAULT_TIMEOUT_NS, &mut out);
            }
        }
        v
    }

    #[test]
    fn the_first_bucket_starting_at_a_threshold() {
        assert_eq!(first_starting_at(0), 0);
        assert_eq!(first_starting_at(1), 1);
        assert_eq!(first_starting_at(953), 1);
        assert_eq!(first_starting_at(954), 2);
        // 1 ms: 2^-10 s = 976.56 µs ends position 40, 2^-9.75 s = 1161.3 µs position 41
        assert_eq!(UPPER_NS[40], 976_562);
        assert_eq!(first_starting_at(1_000_000), 42);
        assert_eq!(first_starting_at(UPPER_NS[41]), 42);
        assert_eq!(first_starting_at(UPPER_NS[41] + 1), 43);
        assert_eq!(first_starting_at(UPPER_NS[BUCKETS - 2]), BUCKETS - 1);
        assert_eq!(first_starting_at(UPPER_NS[BUCKETS - 2] + 1), BUCKETS);
        // every sample in the bucket found is at least the threshold, one below may not be
        for th in [5_000u64, 1_000_000, 123_456_789] {
            let b = first_starting_at(th);
            assert!(UPPER_NS[b - 1] >= th && UPPER_NS[b - 2] < th, "{th}");
        }
    }

    #[test]
    fn bucket_edges_are_the_native_histogram_schema_2() {
        // 2^-20 s, 1 s, 8 s
        assert_eq!(UPPER_NS[0], 953);
        assert_eq!(UPPER_NS[80], 1_000_000_000);
        assert_eq!(UPPER_NS[BUCKETS - 1], 8_000_000_000);
        assert_eq!(UPPER_NS[79], 840_896_415);
        for b in 1..BUCKETS {
            let ratio = UPPER_NS[b] as f64 / UPPER_NS[b - 1] as f64;
            assert!((ratio - 2f64.powf(0.25)).abs() < 2e-3, "{b}: {ratio}");
        }
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(953), 0);
        assert_eq!(bucket(954), 1);
        assert_eq!(bucket(1_000_000_000), 80);
        assert_eq!(bucket(1_000_000_001), 81);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        for (b, &edge) in UPPER_NS.iter().enumerate() {
            assert_eq!(bucket(edge), b);
            if b + 1 < BUCKETS {
                assert_eq!(bucket(edge + 1), b + 1);
            }
        }
        // against a plain search, over every edge's neighbourhood and powers of two
        let plain = |ns: u64| {
            UPPER_NS
                .iter()
                .position(|&e| e >= ns)
                .unwrap_or(BUCKETS - 1)
        };
        for &e in UPPER_NS.iter() {
            for v in [e - 1, e, e + 1] {
                assert_eq!(bucket(v), plain(v), "{v}");
            }
        }
        for p in 0..64 {
            for v in [(1u64 << p) - 1, 1 << p, (1u64 << p) + 1] {
                assert_eq!(bucket(v), plain(v), "{v}");
            }
        }
        assert_eq!(index_of(80), 0);
        assert_eq!(position_of(-80), Some(0));
        assert_eq!(position_of(13), None);
    }

    #[test]
    fn quantiles_are_upper_edges_of_the_ranked_bucket() {
        let h = [(10usize, 98u64), (20, 1), (30, 1)];
        assert_eq!(quantile_upper_ns(h, 1, 2), Some(UPPER_NS[10]));
        assert_eq!(quantile_upper_ns(h, 98, 100), Some(UPPER_NS[10]));
        assert_eq!(quantile_upper_ns(h, 99, 100), Some(UPPER_NS[20]));
        assert_eq!(quantile_upper_ns(h, 999, 1000), Some(UPPER_NS[30]));
        assert_eq!(quantile_upper_ns([(5usize, 0u64)], 1, 2), None);
    }

    #[test]
    fn a_coalesced_ack_ends_every_entry_up_to_its_psn() {
        let v = run(&[
            (1_000, true, frame(0x0a, 10, true), PsnStep::First),
            (2_000, true, frame(0x0a, 11, true), PsnStep::Ahead(1)),
            (3_000, true, frame(0x0a, 12, true), PsnStep::Ahead(1)),
            (10_000, false, ack(11, 0), PsnStep::None),
            (20_000, false, ack(12, 0), PsnStep::None),
        ]);
        assert_eq!(
            v,
            vec![
                (kind::ACK, Outcome::Sample(9_000)),
                (kind::ACK, Outcome::Sample(8_000)),
                (kind::ACK, Outcome::Sample(17_000)),
            ]
        );
    }

    #[test]
    fn unreliable_requests_start_nothing() {
        // UD SEND ONLY (a MAD) and UC SEND ONLY with AckReq: nothing acknowledges them
        let v = run(&[
            (1_000, true, frame(0x64, 10, true), PsnStep::First),
            (2_000, true, frame(0x24, 11, true), PsnStep::Ahead(1)),
            (3_000, false, ack(11, 0), PsnStep::None),
        ]);
        assert!(v.is_empty());
    }

    #[test]
    fn requests_without_ackreq_start_nothing() {
        let v = run(&[
            (1_000, true, frame(0x06, 10, false), PsnStep::First),
            (2_000, false, ack(10, 0), PsnStep::None),
        ]);
        assert!(v.is_empty());
    }

    #[test]
    fn karn_no_sample_after_a_resend_up_to_the_psn() {
        let v = run(&[
            (1_000, true, frame(0x0a, 10, true), PsnStep::First),
            (2_000, true, frame(0x0a, 11, true), PsnStep::Ahead(1)),
            // 11 again: 11 is ambiguous, 10 is not
            (3_000, true, frame(0x0a, 11, true), PsnStep::NotAhead(0)),
            // a fresh PSN after the resend can be timed: its ACK can only follow it
            (4_000, true, frame(0x0a, 12, true), PsnStep::Ahead(1)),
            (9_000, false, ack(12, 0), PsnStep::None),
        ]);
        assert_eq!(
            v,
            vec![
                (kind::ACK, Outcome::Sample(8_000)),
                (kind::ACK, Outcome::Ambiguous),
                (kind::ACK, Outcome::Sample(5_000)),
            ]
        );
    }

    #[test]
    fn psn_wrap_is_an_ordinary_step() {
        let v = run(&[
            (1_000, true, frame(0x0a, 0xff_fffe, true), PsnStep::First),
            (2_000, true, frame(0x0a, 0xff_ffff, true), PsnStep::Ahead(1)),
            (3_000, true, frame(0x0a, 0, true), PsnStep::Ahead(1)),
            (4_000, false, ack(0xff_ffff, 0), PsnStep::None),
            (5_000, false, ack(0, 0), PsnStep::None),
        ]);
        assert_eq!(
            v,
            vec![
                (kind::ACK, Outcome::Sample(3_000)),
                (kind::ACK, Outcome::Sample(2_000)),
                (kind::ACK, Outcome::Sample(2_000)),
            ]
        );
    }

    #[test]
    fn read_latency_to_the_first_response_and_earlier_acks_implied() {
        let mut rd = frame(OPCODE_RC_READ_REQUEST, 21, false);
        rd.has_reth = 1;
        rd.dma_len = 3 * 1024;
        let v = run(&[
            (1_000, true, frame(0x0a, 20, true), PsnStep::First),
            (2_000, true, rd, PsnStep::Ahead(1)),
            // READ RESPONSE FIRST at 21: ends the WRITE at 20 (implied ACK) and the READ
            (7_000, false, frame(0x0d, 21, false), PsnStep::None),
            (8_000, false, frame(0x0e, 22, false), PsnStep::None),
            (9_000, false, frame(0x0f, 23, false), PsnStep::None),
        ]);
        assert_eq!(
            v,
            vec![
                (kind::ACK, Outcome::Sample(6_000)),
                (kind::READ, Outcome::Sample(5_000)),
            ]
        );
    }

    #[test]
    fn a_read_passed_over_is_unmatched() {
        let v = run(&[
            (
                1_000,
                true,
                frame(OPCODE_RC_READ_REQUEST, 5, false),
                PsnStep::First,
            ),
            (
                2_000,
                true,
                frame(OPCODE_RC_READ_REQUEST, 9, false),
                PsnStep::Ahead(4),
            ),
            (3_000, false, frame(0x10, 9, false), PsnStep::None),
        ]);
        assert_eq!(
            v,
            vec![
                (kind::READ, Outcome::Unmatched),
                (kind::READ, Outcome::Sample(1_000)),
            ]
        );
    }

    #[test]
    fn nak_to_resend_and_the_nak_acknowledges_what_precedes_it() {
        let v = run(&[
            (1_000, true, frame(0x0a, 30, true), PsnStep::First),
            (2_000, true, frame(0x0a, 32, true), PsnStep::Ahead(2)),
            // PSN sequence error naming 31: acknowledges 30, not 32
            (5_000, false, ack(31, 0x60), PsnStep::None),
            (6_500, true, frame(0x0a, 31, true), PsnStep::NotAhead(-1)),
            (7_000, true, frame(0x0a, 32, true), PsnStep::NotAhead(0)),
            (9_000, false, ack(32, 0), PsnStep::None),
        ]);
        assert_eq!(
            v,
            vec![
                (kind::ACK, Outcome::Sample(4_000)),
                (kind::NAK, Outcome::Sample(1_500)),
                // 32 was resent while outstanding
                (kind::ACK, Outcome::Ambiguous),
            ]
        );
    }

    #[test]
    fn ce_to_cnp_one_sample_per_waiting_mark() {
        let mut ce = frame(0x0a, 40, false);
        ce.ecn = 3;
        let mut ce2 = frame(0x0a, 41, false);
        ce2.ecn = 3;
        let mut ce3 = frame(0x0a, 42, false);
        ce3.ecn = 3;
        let v = run(&[
            (1_000, true, ce, PsnStep::First),
            (1_500, true, ce2, PsnStep::Ahead(1)),
            (4_000, false, frame(0x81, 0, false), PsnStep::None),
            (4_500, false, frame(0x81, 0, false), PsnStep::None),
            (5_000, true, ce3, PsnStep::Ahead(1)),
            (5_100, false, frame(0x81, 0, false), PsnStep::None),
        ]);
        assert_eq!(
            v,
            vec![
                (kind::CNP, Outcome::Sample(3_000)),
                (kind::CNP, Outcome::Sample(100)),
            ]
        );
    }

    #[test]
    fn a_new_incarnation_and_timeouts_leave_entries_unmatched() {
        let v = run(&[
            (1_000, true, frame(0x0a, 10, true), PsnStep::First),
            (2_000, true, frame(0x0a, 0x80_0000, true), PsnStep::Reborn),
            (
                2_000 + DEFAULT_TIMEOUT_NS + 1,
                true,
                frame(0x0a, 0x80_0001, true),
                PsnStep::Ahead(1),
            ),
            (
                2_000 + DEFAULT_TIMEOUT_NS + 5,
                false,
                ack(0x80_0001, 0),
                PsnStep::None,
            ),
        ]);
        assert_eq!(
            v,
            vec![
                (kind::ACK, Outcome::Unmatched),
                (kind::ACK, Outcome::Unmatched),
                (kind::ACK, Outcome::Sample(4)),
            ]
        );
    }

    #[test]
    fn a_full_ring_counts_what_it_cannot_keep() {
        let mut seq = vec![(0, true, frame(0x0a, 0, true), PsnStep::First)];
        for p in 1..=RING as u32 {
            seq.push((p as u64, true, frame(0x0a, p, true), PsnStep::Ahead(1)));
        }
        seq.push((100, false, ack(RING as u32, 0), PsnStep::None));
        let v = run(&seq);
        assert_eq!(v[0], (kind::ACK, Outcome::RingFull));
        assert_eq!(v.len(), RING + 1);
        assert!(
            v[1..]
                .iter()
                .all(|(k, o)| *k == kind::ACK && matches!(o, Outcome::Sample(_)))
        );
        let mut r = Requester::EMPTY;
        let mut n = 0;
        r.on_request(
            &frame(0x0a, 7, true),
            PsnStep::First,
            0,
            DEFAULT_TIMEOUT_NS,
            &mut |_, _| n += 1,
        );
        assert!(r.covers(7, 9) && !r.covers(6, 9) && !r.covers(10, 9));
        r.close(Outcome::Open, &mut |k, o| {
            assert_eq!((k, o), (kind::ACK, Outcome::Open));
            n += 1
        });
        assert_eq!(n, 1);
        assert!(r.is_idle());
    }
}
