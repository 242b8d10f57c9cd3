//! Replay's side of passive latency (docs/latency.md): which key's requests a response answers
//! (the pairing of a connection's two keys), and the shared [`Requester`] state of each key with
//! something open. The measurement itself is `observer_common::latency`, as the kernel will
//! use it.

use std::collections::HashMap;

use observer_common::latency::{self, Outcome, Record, Requester};

use observer_common::maps::{QpKey, QpValue};
use observer_common::parse::{Frame, OPCODE_RC_READ_REQUEST};
use observer_common::qp::PsnStep;

use crate::sources::datapath::FastHash;

/// One interface's latency state, indexed by the datapath's key positions.
pub struct LatencyTracker {
    timeout_ns: u64,
    /// Per key position, what the tracker knows of it (one place, so that a packet reads one
    /// cache line of it).
    slots: Vec<Slot>,
    reqs: Vec<Requester>,
    /// Requesters whose entries closed, for reuse (memory follows the keys with something
    /// open, not every key seen).
    free: Vec<u32>,
    /// Keys with a requester, by (source, destination) address: the pairing candidates.
    by_ips: HashMap<([u8; 16], [u8; 16]), Vec<u32>, FastHash>,
    /// Outcomes since they were last handed over (the source clears it).
    pub records: Vec<Record>,
    /// Responses that more than one key of the reverse address pair could have been
    /// answering (no pair made; their entries end as `unmatched` later).
    pub ambiguous_pairs: u64,
}

/// One key position's latency state.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// Its [`Requester`] in `reqs` + 1, 0 when nothing is open.
    req: u32,
    /// The position + 1 of the reverse key it is paired with, 0 none.
    pair: u32,
    /// Listed in `by_ips` (once, whatever its requester does).
    indexed: bool,
}

impl LatencyTracker {
    pub fn new(timeout_ns: u64) -> LatencyTracker {
        LatencyTracker {
            timeout_ns: timeout_ns.min(latency::MAX_TIMEOUT_NS),
            slots: Vec::new(),
            reqs: Vec::new(),
            free: Vec::new(),
            by_ips: HashMap::default(),
            records: Vec::new(),
            ambiguous_pairs: 0,
        }
    }

    /// Outcomes since the last call.
    pub fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.records)
    }

    #[inline]
    fn grow(&mut self, i: usize) {
        if i >= self.slots.len() {
            self.grow_to(i);
        }
    }

    #[cold]
    #[inline(never)]
    fn grow_to(&mut self, i: usize) {
        let n = (i + 1).max(self.slots.len() * 2).max(64);
        self.slots.resize(n, Slot::default());
    }

    /// One RoCE packet of the key at position `i` (`entries` the datapath's keys, its value
    /// already updated), with the PSN analysis's `step`, seen at `t`.
    #[inline]
    pub fn on_packet(
        &mut self,
        entries: &[(QpKey, QpValue)],
        i: usize,
        f: &Frame,
        step: PsnStep,
        t: u64,
    ) {
        let op = f.bth.opcode;
        self.grow(i);
        if latency::is_response(op) {
            let j = match self.slots[i].pair {
                0 => match self.find_pair(entries, i, f) {
                    Some(j) => j,
                    None => return,
                },
                p => p as usize - 1,
            };
            let r = match self.slots[j].req {
                // a NAK opens a measurement of its own: nothing else need be open
                0 if f.has_aeth != 0 && f.aeth_syndrome() == 0x60 => self.acquire(entries, j),
                0 => return,
                r => r,
            };
            let timeout = self.timeout_ns;
            let mut sink = self.sink(entries, j, t);
            let rq = &mut sink.reqs[r as usize - 1];
            rq.on_response(f, t, timeout, &mut |k, o| sink.out.add(k, o));
            if rq.is_idle() {
                self.release(j);
            }
            return;
        }
        if step == PsnStep::Reborn {
            self.unpair(i);
        }
        let r = match self.slots[i].req {
            0 if op == OPCODE_RC_READ_REQUEST || f.bth.ack_req != 0 || f.ecn == 3 => {
                self.acquire(entries, i)
            }
            0 => return,
            r => r,
        };
        let timeout = self.timeout_ns;
        let mut sink = self.sink(entries, i, t);
        let rq = &mut sink.reqs[r as usize - 1];
        rq.on_request(f, step, t, timeout, &mut |k, o| sink.out.add(k, o));
        if rq.is_idle() {
            self.release(i);
        }
    }

    /// The requesters and where the outcomes of the key at position `i`, decided at `t`, go.
    fn sink<'a>(&'a mut self, entries: &'a [(QpKey, QpValue)], i: usize, t: u64) -> Split<'a> {
        Split {
            reqs: &mut self.reqs,
            out: Outcomes {
                records: &mut self.records,
                key: &entries[i].0,
                t,
            },
        }
    }

    fn acquire(&mut self, entries: &[(QpKey, QpValue)], i: usize) -> u32 {
        let r = match self.free.pop() {
            // released only when idle: nothing open, nothing to reset
            Some(r) => r,
            None => {
                self.reqs.push(Requester::EMPTY);
                self.reqs.len() as u32
            }
        };
        self.slots[i].req = r;
        if !self.slots[i].indexed {
            self.slots[i].indexed = true;
            let k = &entries[i].0;
            self.by_ips
                .entry((k.src_ip, k.dst_ip))
                .or_default()
                .push(i as u32);
        }
        r
    }

    fn release(&mut self, i: usize) {
        let r = std::mem::take(&mut self.slots[i].req);
        if r != 0 {
            self.free.push(r);
        }
    }

    fn unpair(&mut self, i: usize) {
        let p = std::mem::take(&mut self.slots[i].pair);
        if p != 0 && self.slots.get(p as usize - 1).map(|s| s.pair) == Some(i as u32 + 1) {
            self.slots[p as usize - 1].pair = 0;
        }
    }

    /// The key of the reverse address pair whose open entries the response `f` (on the key at
    /// `i`) can acknowledge, when exactly one can; the two are then paired both ways.
    fn find_pair(&mut self, entries: &[(QpKey, QpValue)], i: usize, f: &Frame) -> Option<usize> {
        // a CNP names no PSN: its key is the one with a CE mark waiting
        let cnp = f.bth.opcode == 0x81;
        let k = &entries[i].0;
        let cands = self.by_ips.get(&(k.dst_ip, k.src_ip))?;
        let a = f.bth.psn & 0xff_ffff;
        let mut found = None;
        let mut n = 0;
        // a key stays listed once it had a requester; those with nothing open are skipped
        for &j in cands.iter() {
            let j = j as usize;
            if j == i || self.slots[j].req == 0 {
                continue;
            }
            let rq = &self.reqs[self.slots[j].req as usize - 1];
            let max = entries[j].1.psn_max().unwrap_or(0);
            if (cnp && rq.ce_waiting()) || (!cnp && rq.covers(a, max)) {
                found = Some(j);
                n += 1;
            }
        }
        if n > 1 {
            self.ambiguous_pairs += 1;
            return None;
        }
        let j = found?;
        self.unpair(j);
        self.unpair(i);
        self.slots[i].pair = j as u32 + 1;
        self.slots[j].pair = i as u32 + 1;
        Some(j)
    }

    /// Every open measurement ends as `how` at `t` (`Open`: the end of the observation;
    /// `Unmatched`: the positions moving).
    pub fn close_all(&mut self, entries: &[(QpKey, QpValue)], t: u64, how: Outcome) {
        for i in 0..self.slots.len().min(entries.len()) {
            let r = self.slots[i].req;
            if r == 0 {
                continue;
            }
            let mut sink = self.sink(entries, i, t);
            sink.reqs[r as usize - 1].close(how, &mut |k, o| sink.out.add(k, o));
            self.release(i);
        }
    }

    /// Forgets every position (the datapath's keys moved); open measurements were closed.
    pub fn reset(&mut self) {
        self.slots.clear();
        self.by_ips.clear();
        self.reqs.clear();
        self.free.clear();
    }
}

/// The tracker's parts one packet's measurement writes: the requesters, and its outcomes.
struct Split<'a> {
    reqs: &'a mut Vec<Requester>,
    out: Outcomes<'a>,
}

/// Where the outcomes of one key go: records for the outputs.
struct Outcomes<'a> {
    records: &'a mut Vec<Record>,
    /// Borrowed: most packets decide nothing, and a key is 40 bytes.
    key: &'a QpKey,
    t: u64,
}

impl Outcomes<'_> {
    #[inline]
    fn add(&mut self, k: u8, o: Outcome) {
        self.records.push(Record::new(*self.key, self.t, k, o));
    }
}

#[cfg(test)]
mod tests {
    use observer_common::frames::Roce;
    use observer_common::latency::{Record, kind};
    use observer_common::maps::Policy;

    use crate::sources::datapath::Datapath;

    const A: [u8; 4] = [10, 9, 0, 1];
    const B: [u8; 4] = [10, 9, 0, 2];

    fn write(qp: u32, psn: u32) -> Vec<u8> {
        Roce::v4(A, B)
            .opcode(0x0a)
            .qp(qp)
            .psn(psn)
            .ack_req(true)
            .build()
    }

    fn ack(qp: u32, psn: u32, syndrome: u8) -> Vec<u8> {
        Roce::v4(B, A)
            .opcode(0x11)
            .qp(qp)
            .psn(psn)
            .aeth(syndrome, 1)
            .build()
    }

    fn run(frames: &[(u64, Vec<u8>)]) -> (Vec<Record>, u64) {
        let mut dp = Datapath::new(Policy::NONE, 1024)
            .with_latency(observer_common::latency::DEFAULT_TIMEOUT_NS);
        for (t, f) in frames {
            dp.process(f, f.len() as u32, *t, 0);
        }
        dp.close_latency(1_000_000);
        let amb = dp.latency.as_ref().unwrap().ambiguous_pairs;
        let recs = dp.take_latency();
        (recs, amb)
    }

    /// Two connections of one address pair: each ACK is paired with the requests whose open
    /// PSNs it covers; the samples land on the right requester key.
    #[test]
    fn two_connections_of_one_address_pair_are_told_apart_by_psn() {
        let (r, amb) = run(&[
            (1_000, write(0x201, 100)),
            (2_000, write(0x202, 5_000)),
            (5_000, ack(0x102, 5_000, 0x1f)),
            (9_000, ack(0x101, 100, 0x1f)),
        ]);
        assert_eq!(amb, 0);
        let got: Vec<(u32, u8, u8, u64)> = r
            .iter()
            .map(|x| (x.key.dest_qp, x.kind, x.outcome, x.value_ns))
            .collect();
        assert_eq!(
            got,
            vec![(0x202, kind::ACK, 0, 3_000), (0x201, kind::ACK, 0, 8_000)]
        );
    }

    /// Two requesters whose open ranges both hold the acknowledged PSN: no pair is made, the
    /// case is counted, and their entries end unmatched at the end.
    #[test]
    fn an_ack_two_requesters_could_answer_pairs_with_neither() {
        let (r, amb) = run(&[
            (1_000, write(0x201, 100)),
            (1_500, write(0x201, 101)),
            (2_000, write(0x202, 101)),
            (5_000, ack(0x102, 101, 0x1f)),
        ]);
        assert_eq!(amb, 1);
        assert_eq!(r.len(), 3);
        assert!(
            r.iter().all(|x| x.outcome == 4 && x.t_ns == 1_000_000),
            "{r:?}"
        );
    }

    /// A NAK after every entry was acknowledged (the requester state released) still opens
    /// its NAK-to-resend measurement.
    #[test]
    fn a_nak_with_nothing_open_is_timed_to_its_resend() {
        let mut frames = vec![(1_000, write(0x201, 100)), (2_000, ack(0x101, 100, 0x1f))];
        // 101 lost, 102 without AckReq, the responder asks for 101
        frames.push((
            3_000,
            Roce::v4(A, B).opcode(0x0a).qp(0x201).psn(102).build(),
        ));
        frames.push((4_000, ack(0x101, 101, 0x60)));
        frames.push((7_000, write(0x201, 101)));
        let (r, _) = run(&frames);
        let got: Vec<(u8, u8, u64)> = r.iter().map(|x| (x.kind, x.outcome, x.value_ns)).collect();
        assert_eq!(got[0], (kind::ACK, 0, 1_000));
        assert_eq!(got[1], (kind::NAK, 0, 3_000));
        // the resend itself starts nothing (Karn); nothing else is open
        assert_eq!(got.len(), 2, "{got:?}");
    }
}
