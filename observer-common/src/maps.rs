//! Layouts of the eBPF maps, shared with userspace. All `#[repr(C)]` with explicit padding, so
//! every byte is initialised and the layout is the same on both sides.

use crate::parse::reason;

/// Direction a record was seen in.
pub mod dir {
    /// XDP, or tc ingress where XDP could not attach.
    pub const INGRESS: u8 = 0;
    /// tc egress: what this host sends.
    pub const EGRESS: u8 = 1;
    pub const COUNT: usize = 2;
    pub const NAMES: [&str; COUNT] = ["ingress", "egress"];
}

/// Packet classes (metrics.md): `cnp` = 0x81, `ack` = 0x11, 0x12, 0x51, 0x52, `data` = rest.
pub mod class {
    pub const DATA: usize = 0;
    pub const ACK: usize = 1;
    pub const CNP: usize = 2;
    pub const COUNT: usize = 3;
    pub const NAMES: [&str; COUNT] = ["data", "ack", "cnp"];
}

/// Number of buckets of [`QpValue::pcp_hist`]: PCP 0..7 and untagged ([`crate::parse::PCP_NONE`]).
pub const PCP_BUCKETS: usize = 9;
/// Number of buckets of [`QpValue::opcode_hist`] (see [`crate::qp::opcode_bucket`]).
pub const OPCODE_BUCKETS: usize = 64;

/// Per-QP map key: the QP key of metrics.md (source IP, destination IP, BTH destination QP),
/// plus the direction it was seen in. IPv4 addresses are IPv4-mapped IPv6. 8-aligned: the
/// per-QP table hashes and compares it as five 64-bit words.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpKey {
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub dest_qp: u32,
    pub dir: u8,
    pub _pad: [u8; 3],
}

/// Per-QP state. Counters the kernel adds with atomic adds; PSN state moved with
/// compare-and-swap (see [`crate::qp`]). Histograms are `u32` to keep a value near 1.4 KiB:
/// readers take interval deltas with wrapping subtraction, which is exact as long as one key
/// does not see 2^32 packets between two reads (minutes at 400G line rate).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpValue {
    pub pkts: u64,
    /// L2 frame length as on the wire (tags included, no FCS; original length when cut).
    pub bytes_l2: u64,
    /// IPv4 total length or IPv6 payload length + 40.
    pub bytes_ip: u64,
    /// UDP length - 8.
    pub bytes_udp: u64,
    /// Time of the first and last packet, nanoseconds (kernel: CLOCK_MONOTONIC as last written
    /// into the `CLOCK` map by the kernel's clock ticker every 1 ms (a perf event program), so up
    /// to 1 ms old; without a ticker, as under BPF_PROG_TEST_RUN, the coarse clock
    /// `bpf_ktime_get_coarse_ns`, one kernel tick (1-4 ms) old. `observer::live` converts either
    /// to wall-clock time in snapshots; replay: capture time since the epoch). `last_ns` is a plain store: under concurrent updates it is the
    /// time of one of the latest packets.
    pub first_ns: u64,
    pub last_ns: u64,
    /// NAKs: AETH syndrome bits 6:5 = 11.
    pub naks: u64,
    /// AETH syndrome 0x60.
    pub nak_psn_seq_err: u64,
    /// AETH syndrome bits 6:5 = 01.
    pub rnr_naks: u64,
    /// BTH TVer != 0 or opcode outside the defined ranges.
    pub suspect: u64,
    pub psn_gaps: u64,
    pub psn_missing: u64,
    pub psn_retrans: u64,
    pub psn_behind: u64,
    /// New incarnations of the key (a QP number reused after the old QP is gone): the PSN
    /// analysis restarted at this packet ([`crate::qp::new_incarnation`]).
    pub qp_incarnations: u64,
    /// ICRC verdicts (replay only; the kernel does not compute the ICRC).
    pub icrc_ok: u64,
    pub icrc_bad: u64,
    pub icrc_unverifiable: u64,
    /// Highest PSN seen so far plus one (1..=2^24), 0 before the first PSN-analysed packet: an
    /// all-zero value is a fresh key, so the kernel inserts new keys from zeroed memory. After
    /// an RDMA READ request the READ's PSN + n_min - 1 (metrics.md "RDMA READ requests").
    pub psn_max_p1: u32,
    /// The window w of the last RDMA READ request that moved `psn_max_p1` (n_max - n_min), 0
    /// otherwise. With `psn_max_p1` one 8-aligned 64-bit word, the PSN state, which the kernel
    /// moves by one 64-bit compare-and-swap ([`crate::qp`]).
    pub psn_read: u32,
    /// [`crate::qp::ev`] bits already reported for this key (first occurrence only).
    pub event_flags: u32,
    /// UDP source port of the last packet (ECMP entropy, not identity).
    pub last_udp_sport: u16,
    /// The largest UDP payload (UDP length - 8, so at most 65,527): with `last_udp_sport` one
    /// 32-bit word, raised by compare-and-swap on that word.
    pub max_udp_payload: u16,
    pub opcode_hist: [u32; OPCODE_BUCKETS],
    pub dscp_hist: [[u32; 64]; class::COUNT],
    pub ecn_hist: [[u32; 4]; class::COUNT],
    pub pcp_hist: [[u32; PCP_BUCKETS]; class::COUNT],
    pub _pad2: u32,
}

/// Calls `$m!` with the names of [`QpValue`]'s scalar counters: the `u64` fields a packet adds
/// to (everything but the histograms, the PSN state, times, the largest payload, the last
/// source port and the event flags). The one list for every piece of code that combines two
/// values counter by counter (`qp::add_counts`, the collector's deltas; the kernel's compact
/// value through [`crate::qp_kernel_counters!`]), so a new counter cannot be left out of one of them.
#[macro_export]
macro_rules! qp_scalar_counters {
    ($m:ident) => {
        $crate::qp_kernel_counters!($m, icrc_ok, icrc_bad, icrc_unverifiable)
    };
}

/// Calls `$m!` with the scalar counters the kernel's compact value has too (all of
/// [`qp_scalar_counters!`]'s but the ICRC verdicts, which only replay computes), followed by
/// `$extra`.
#[macro_export]
macro_rules! qp_kernel_counters {
    ($m:ident $(, $extra:ident)*) => {
        $m!(
            pkts,
            bytes_l2,
            bytes_ip,
            bytes_udp,
            naks,
            nak_psn_seq_err,
            rnr_naks,
            suspect,
            psn_gaps,
            psn_missing,
            psn_retrans,
            psn_behind,
            qp_incarnations
            $(, $extra)*
        )
    };
}

impl QpValue {
    /// The state of a key before any packet.
    pub const ZERO: QpValue = QpValue {
        pkts: 0,
        bytes_l2: 0,
        bytes_ip: 0,
        bytes_udp: 0,
        first_ns: 0,
        last_ns: 0,
        naks: 0,
        nak_psn_seq_err: 0,
        rnr_naks: 0,
        suspect: 0,
        psn_gaps: 0,
        psn_missing: 0,
        psn_retrans: 0,
        psn_behind: 0,
        qp_incarnations: 0,
        icrc_ok: 0,
        icrc_bad: 0,
        icrc_unverifiable: 0,
        psn_max_p1: 0,
        psn_read: 0,
        event_flags: 0,
        last_udp_sport: 0,
        max_udp_payload: 0,
        opcode_hist: [0; OPCODE_BUCKETS],
        dscp_hist: [[0; 64]; class::COUNT],
        ecn_hist: [[0; 4]; class::COUNT],
        pcp_hist: [[0; PCP_BUCKETS]; class::COUNT],
        _pad2: 0,
    };

    /// Highest PSN seen so far, if any packet was PSN-analysed.
    pub fn psn_max(&self) -> Option<u32> {
        self.psn_max_p1.checked_sub(1)
    }
    /// Packets of one class (sum of its ECN histogram).
    pub fn class_pkts(&self, c: usize) -> u64 {
        self.ecn_hist[c].iter().map(|&n| n as u64).sum()
    }
    /// CNPs carrying this key (CNPs addressed to (dst, QP)).
    pub fn cnp(&self) -> u64 {
        self.class_pkts(class::CNP)
    }
    /// Packets with ECN 0b11, all classes.
    pub fn ce(&self) -> u64 {
        self.ecn_hist.iter().map(|h| h[3] as u64).sum()
    }
    /// Opcode 0x11 packets, any syndrome.
    pub fn acks(&self) -> u64 {
        self.opcode_hist[crate::qp::opcode_bucket(0x11)] as u64
    }
}

/// PFC and 802.3x PAUSE counters (metrics.md "PFC and PAUSE"), per interface and per source MAC.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PfcCounters {
    /// PFC frames (opcode 0x0101).
    pub pfc_frames: u64,
    /// Per priority p with its class-enable bit set: enabled += 1, quanta += q,
    /// xoff += 1 if q > 0 else xon += 1.
    pub enabled: [u64; 8],
    pub xoff: [u64; 8],
    pub xon: [u64; 8],
    pub quanta: [u64; 8],
    /// 802.3x PAUSE frames (opcode 0x0001): all, with time 0 (XON), and summed quanta.
    pub pause: u64,
    pub pause_xon: u64,
    pub pause_quanta: u64,
    /// Other MAC control opcodes.
    pub other_opcode: u64,
}

/// Per-interface, per-direction counters (a per-CPU array indexed by [`dir`]; userspace sums
/// the CPUs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IfaceStats {
    /// Every frame the program ran on.
    pub frames: u64,
    /// Sum of their wire lengths.
    pub bytes: u64,
    /// RoCEv2 packets (kind ROCE).
    pub roce: u64,
    /// Of those, packets not accounted to a QP because the per-QP map was full.
    pub roce_untracked: u64,
    /// Frames that are not RoCE (counted, not kept).
    pub not_roce: u64,
    /// Exclusions by [`reason`].
    pub excluded: [u64; reason::COUNT],
    /// Frames that arrived in mirror encapsulation, by [`crate::parse::encap`] (index 0 unused).
    pub encap: [u64; crate::parse::encap::COUNT],
    pub pfc: PfcCounters,
    /// New keys that could not be inserted (map full): their packets are `roce_untracked`.
    pub qp_insert_failed: u64,
    /// Source MACs whose PFC counters could not be inserted (map full).
    pub mac_insert_failed: u64,
    /// Events not delivered because the ring buffer was full.
    pub events_lost: u64,
    /// MAC control frames whose [`PauseEvent`] was not delivered (its ring buffer full): the
    /// pause time and the 1-s XOFF peak of that interval are then lower bounds.
    pub pause_events_lost: u64,
    /// PSN updates that gave up after [`crate::qp::CAS_TRIES`] compare-and-swap attempts under
    /// contention (the packet is still counted everywhere else, as a retransmission-free step).
    pub psn_contended: u64,
    /// Histogram buckets (opcode, DSCP or PCP) of RoCE packets that found neither a free cell
    /// in their key's compact kernel value nor room in the `QPHIST` overflow map
    /// (`qp_table::KValue`): those packets' other counts are exact, that bucket is short.
    pub hist_overflow_lost: u64,
    /// Frames dropped after being observed (only with drop-after-observe).
    pub dropped: u64,
}

/// Per-source-MAC PFC map key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacKey {
    pub mac: [u8; 6],
    pub dir: u8,
    pub _pad: u8,
}

/// Default of [`Policy::incarnation_idle_ms`]: 10 s, above the RC retry timeout of common
/// settings (local ACK timeout 4.096 us x 2^20 = 4.3 s, NCCL's default; 2^14-2^18 elsewhere),
/// so a go-back-N resend after a timeout is never taken for a new QP.
pub const DEFAULT_INCARNATION_IDLE_MS: u32 = 10_000;

/// Policy value meaning "any value is fine".
pub const ANY: u8 = 0xff;

/// Bit of an expected PCP ([`Policy::pcp`]): tagged frames must carry the PCP in the low three
/// bits, untagged frames are not checked (a host behind a DSCP-trust port sends untagged).
pub const PCP_IF_TAGGED: u8 = 0x10;

/// Whether a frame whose outermost PCP is `pcp` (0..7, or [`crate::parse::PCP_NONE`] untagged)
/// meets the expected PCP `want`: [`ANY`]; a PCP 0..7 (tagged with it); `PCP_NONE` (untagged);
/// [`PCP_IF_TAGGED`] | p (p when tagged, untagged fine).
#[inline(always)]
pub const fn pcp_meets(want: u8, pcp: u8) -> bool {
    if want == ANY {
        true
    } else if want & PCP_IF_TAGGED != 0 {
        pcp == crate::parse::PCP_NONE || pcp == want & 7
    } else {
        pcp == want
    }
}

/// Expected marking, written by userspace into a one-element array map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Expected DSCP per [`class`], or [`ANY`].
    pub dscp: [u8; class::COUNT],
    /// Expected PCP per class (0..7: tagged with it; [`crate::parse::PCP_NONE`]: untagged;
    /// [`PCP_IF_TAGGED`] | p: p when tagged), or [`ANY`] ([`pcp_meets`]).
    pub pcp: [u8; class::COUNT],
    /// Per class: 1 when Not-ECT (ECN 0b00) is a violation.
    pub ecn_capable: [u8; class::COUNT],
    /// The priority PFC is expected on.
    pub rdma_priority: u8,
    /// [`policy_flags`] bits.
    pub flags: u8,
    pub _pad: u8,
    /// A data packet after the key was idle longer than this (milliseconds) whose PSN is not
    /// the next one starts a new incarnation of the key ([`crate::qp::new_incarnation`]);
    /// 0: only the PSN jump criterion applies.
    pub incarnation_idle_ms: u32,
}

pub mod policy_flags {
    /// Return XDP_DROP / TC_ACT_SHOT after observing (dedicated capture ports only).
    pub const DROP_AFTER_OBSERVE: u8 = 1;
    /// The map holds a policy written by userspace (until then nothing is checked).
    pub const ENABLED: u8 = 2;
}

impl Policy {
    /// Checks nothing.
    pub const NONE: Policy = Policy {
        dscp: [ANY; 3],
        pcp: [ANY; 3],
        ecn_capable: [0; 3],
        rdma_priority: 3,
        flags: 0,
        _pad: 0,
        incarnation_idle_ms: DEFAULT_INCARNATION_IDLE_MS,
    };
}

/// An event for the collector's live alerts: the first occurrence per key of one [`crate::qp::ev`]
/// bit. Compact, fixed size, carried by a ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub ts_ns: u64,
    pub key: QpKey,
    /// One [`crate::qp::ev`] bit number.
    pub kind: u32,
    pub psn: u32,
    /// PSN gap: packets missing; NAK: the AETH; otherwise 0.
    pub detail: u32,
    pub opcode: u8,
    pub dscp: u8,
    pub ecn: u8,
    pub pcp: u8,
}

/// One MAC control frame (PFC or 802.3x PAUSE) with its time, for what counters cannot give:
/// the time each priority was actually paused (the union of pause windows: a new XOFF replaces
/// the running pause, an XON ends it) and the densest one-second window of XOFF frames. Carried
/// by its own ring buffer; MAC control frames are rare beside RoCE packets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PauseEvent {
    /// Frame time, nanoseconds (kernel: `bpf_ktime_get_ns`, converted to wall-clock time by the
    /// reader; replay: capture time).
    pub ts_ns: u64,
    /// Pause time per priority in quanta (PFC), or `times[0]` for 802.3x PAUSE.
    pub times: [u16; 8],
    /// MAC control opcode (0x0101 PFC, 0x0001 PAUSE; others are not sent).
    pub opcode: u16,
    /// PFC class-enable vector (bit p: `times[p]` applies).
    pub class_enable: u16,
    pub src_mac: [u8; 6],
    /// [`dir`].
    pub dir: u8,
    pub _pad: [u8; 5],
}

impl PauseEvent {
    /// The event of a classified MAC control frame, `None` for opcodes other than PFC and PAUSE.
    #[inline(always)]
    pub fn of(m: &crate::parse::MacControl, ts_ns: u64, dir: u8) -> Option<PauseEvent> {
        if m.opcode != crate::parse::MAC_CONTROL_PFC && m.opcode != crate::parse::MAC_CONTROL_PAUSE
        {
            return None;
        }
        Some(PauseEvent {
            ts_ns,
            times: m.times,
            opcode: m.opcode,
            class_enable: m.class_enable,
            src_mac: m.src_mac,
            dir,
            _pad: [0; 5],
        })
    }
}

/// Bytes of an offending frame a live sample carries (`live --evidence`): the headers of every
/// RoCE packet (Ethernet, two VLAN tags, IPv6, UDP, BTH, RETH, AETH: 118 bytes at most) and the
/// start of its payload.
pub const SAMPLE_SNAP: usize = 128;

/// A sampled offending frame, written by the eBPF programs to the `SAMPLES` ring when live
/// evidence is on: the frame's first [`SAMPLE_SNAP`] bytes as the hook saw them, with the
/// rules it broke. The tc hooks see a frame whose outermost VLAN tag the driver took out
/// (VLAN offload): `vlan_present`, `vlan_proto` and `vlan_tci` carry it, and
/// [`Sample::frame_into`] puts it back where it was on the wire.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// `bpf_ktime_get_ns` (converted to wall-clock time by the reader).
    pub ts_ns: u64,
    pub key: QpKey,
    /// [`crate::qp::offense`] bits of the frame.
    pub offenses: u32,
    /// The frame's length on the wire (tags included).
    pub wire_len: u32,
    /// Bytes of `bytes` that hold the frame (at most [`SAMPLE_SNAP`]).
    pub cap_len: u16,
    /// The offloaded outermost tag (tc hooks), network order in `vlan_proto`.
    pub vlan_tci: u16,
    pub vlan_proto: u16,
    pub vlan_present: u8,
    pub _pad: [u8; 1],
    pub bytes: [u8; SAMPLE_SNAP],
}

impl Default for Sample {
    fn default() -> Sample {
        Sample {
            ts_ns: 0,
            key: QpKey::default(),
            offenses: 0,
            wire_len: 0,
            cap_len: 0,
            vlan_tci: 0,
            vlan_proto: 0,
            vlan_present: 0,
            _pad: [0],
            bytes: [0; SAMPLE_SNAP],
        }
    }
}

impl Sample {
    /// The frame as it was on the wire (its offloaded tag put back after the MAC addresses)
    /// into `out`; its length.
    pub fn frame_into(&self, out: &mut [u8; SAMPLE_SNAP + 4]) -> usize {
        let n = (self.cap_len as usize).min(SAMPLE_SNAP);
        if self.vlan_present == 0 || n < 12 {
            out[..n].copy_from_slice(&self.bytes[..n]);
            return n;
        }
        out[..12].copy_from_slice(&self.bytes[..12]);
        let proto = match u16::from_be(self.vlan_proto) {
            0 => 0x8100,
            p => p,
        };
        out[12..14].copy_from_slice(&proto.to_be_bytes());
        out[14..16].copy_from_slice(&self.vlan_tci.to_be_bytes());
        out[16..n + 4].copy_from_slice(&self.bytes[12..n]);
        n + 4
    }
}

/// Per-CPU state of the live sampler (`SAMPLER`, one entry): the budget of the current second,
/// the frame chosen by the packet's accounting for the hook to copy, and what was left out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerState {
    /// Start of the current one-second budget window (`bpf_ktime_get_ns`).
    pub window_ns: u64,
    /// Time of the pending frame.
    pub ts_ns: u64,
    /// Samples sent to the ring (cumulative).
    pub sampled: u64,
    /// Offending frames not sampled: the second's budget was spent (cumulative).
    pub over_rate: u64,
    /// Offending frames not sampled: the ring was full (cumulative).
    pub lost: u64,
    pub key: QpKey,
    /// Samples taken in the current window.
    pub taken: u32,
    /// [`crate::qp::offense`] bits of the pending frame (0: none pending).
    pub pending: u32,
    pub wire_len: u32,
    pub _pad: u32,
}

/// Where the kernel keeps a multi-buffer XDP frame's fragment length, read from the running
/// kernel's BTF at load time (`XDP_LEN` global of the XDP program). With it the program reads
/// the length the way `bpf_xdp_get_buff_len` computes it (`data_end - data`, plus
/// `skb_shared_info.xdp_frags_size` when `xdp_buff.flags` has `XDP_FLAGS_HAS_FRAGS`) through
/// two kfuncs the verifier replaces by a register move, instead of a helper call (8-10 ns here).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpLenLayout {
    /// 1: read the length through the kfuncs; 0: call `bpf_xdp_get_buff_len`.
    pub enabled: u32,
    /// Byte offsets in `struct xdp_buff`.
    pub flags_off: u32,
    pub hard_start_off: u32,
    pub frame_sz_off: u32,
    /// `XDP_FLAGS_HAS_FRAGS`.
    pub has_frags: u32,
    /// `SKB_DATA_ALIGN(sizeof(struct skb_shared_info))`: the shared info ends the frame.
    pub shinfo_size: u32,
    /// Byte offset of `xdp_frags_size` in `struct skb_shared_info`.
    pub frags_size_off: u32,
    /// BTF id of `struct skb_shared_info` in the kernel's BTF (`bpf_rdonly_cast`'s type).
    pub shinfo_btf_id: u32,
}

/// Call numbers the XDP program uses in place of kfunc calls: the loader rewrites each such
/// `call` into a kfunc call by the kernel's BTF id (or, where the kfunc path is off, into
/// `r0 = 0` on a path the verifier never takes). Far above every helper number.
pub mod kfunc_call {
    /// `bpf_cast_to_kern_ctx(ctx)`: the `struct xdp_buff` behind the XDP context.
    pub const CAST_TO_KERN_CTX: u32 = 0x7eb0_0001;
    /// `bpf_rdonly_cast(obj, btf_id)`: a read-only typed view of kernel memory.
    pub const RDONLY_CAST: u32 = 0x7eb0_0002;
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: #[repr(C)], only integer fields and arrays of them, explicit padding fields so no
    // implicit padding bytes; every bit pattern is a valid value.
    unsafe impl aya::Pod for QpKey {}
    // SAFETY: as above; size is a multiple of 8 with `_pad2`, checked by a test.
    unsafe impl aya::Pod for QpValue {}
    // SAFETY: #[repr(C)], u64 fields and arrays only.
    unsafe impl aya::Pod for PfcCounters {}
    // SAFETY: #[repr(C)], u64 fields and arrays only.
    unsafe impl aya::Pod for IfaceStats {}
    // SAFETY: #[repr(C)], u8 fields only.
    unsafe impl aya::Pod for MacKey {}
    // SAFETY: #[repr(C)], u8 fields only.
    unsafe impl aya::Pod for Policy {}
    // SAFETY: #[repr(C)], integer fields; sizes add up to a multiple of 8 (checked by a test).
    unsafe impl aya::Pod for Event {}
    // SAFETY: #[repr(C)], u32 fields only; every bit pattern is a valid value.
    unsafe impl aya::Pod for XdpLenLayout {}
    // SAFETY: #[repr(C)], integer fields and arrays, explicit padding to 40 bytes (a test).
    unsafe impl aya::Pod for PauseEvent {}
    // SAFETY: #[repr(C)], integer fields and arrays, explicit padding (sizes checked by a test).
    unsafe impl aya::Pod for Sample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SamplerState {}
}

#[cfg(test)]
mod tests {
    /// The PCP policy's forms: strict, untagged, when tagged, any.
    #[test]
    fn pcp_meets_each_form() {
        use crate::parse::PCP_NONE;
        assert!(pcp_meets(3, 3) && !pcp_meets(3, 0) && !pcp_meets(3, PCP_NONE));
        assert!(pcp_meets(PCP_NONE, PCP_NONE) && !pcp_meets(PCP_NONE, 3));
        let t = PCP_IF_TAGGED | 3;
        assert!(pcp_meets(t, 3) && pcp_meets(t, PCP_NONE) && !pcp_meets(t, 0));
        assert!(!pcp_meets(PCP_IF_TAGGED, 3) && pcp_meets(PCP_IF_TAGGED, 0));
        assert!((0..=PCP_NONE).all(|p| pcp_meets(ANY, p)));
    }

    use super::*;
    use core::mem::size_of;

    #[test]
    fn layouts_have_no_implicit_padding() {
        assert_eq!(size_of::<QpKey>(), 16 + 16 + 4 + 1 + 3);
        let qv = 18 * 8 + 4 * 3 + 2 + 2 + (64 + 3 * 64 + 3 * 4 + 3 * 9) * 4 + 4;
        assert_eq!(size_of::<QpValue>(), qv);
        assert_eq!(size_of::<QpValue>() % 8, 0);
        assert_eq!(size_of::<PfcCounters>(), (1 + 32 + 4) * 8);
        assert_eq!(size_of::<Policy>(), 16);
        assert_eq!(size_of::<Event>(), 8 + size_of::<QpKey>() + 12 + 4);
        assert_eq!(size_of::<Event>() % 8, 0);
        assert_eq!(size_of::<MacKey>(), 8);
        assert_eq!(size_of::<XdpLenLayout>(), 8 * 4);
        assert_eq!(size_of::<PauseEvent>(), 8 + 16 + 2 + 2 + 6 + 1 + 5);
        assert_eq!(
            size_of::<Sample>(),
            8 + size_of::<QpKey>() + 4 + 4 + 2 + 2 + 2 + 1 + 1 + SAMPLE_SNAP
        );
        assert_eq!(core::mem::offset_of!(Sample, bytes) % 8, 0);
        assert_eq!(
            size_of::<SamplerState>(),
            5 * 8 + size_of::<QpKey>() + 4 * 4
        );
    }

    /// A tc hook's sample gets its offloaded tag back after the MAC addresses; an XDP sample
    /// (the tag in the bytes) is the bytes.
    #[test]
    fn a_sample_is_the_frame_on_the_wire() {
        let mut s = Sample::default();
        for (i, b) in s.bytes.iter_mut().enumerate() {
            *b = i as u8;
        }
        s.cap_len = 60;
        let mut out = [0u8; SAMPLE_SNAP + 4];
        assert_eq!(s.frame_into(&mut out), 60);
        assert_eq!(&out[..60], &s.bytes[..60]);
        s.vlan_present = 1;
        s.vlan_proto = 0x8100u16.to_be();
        s.vlan_tci = (3 << 13) | 100;
        assert_eq!(s.frame_into(&mut out), 64);
        assert_eq!(&out[..12], &s.bytes[..12]);
        assert_eq!(&out[12..16], &[0x81, 0x00, 0x60, 100]);
        assert_eq!(&out[16..64], &s.bytes[12..60]);
        s.cap_len = SAMPLE_SNAP as u16;
        assert_eq!(s.frame_into(&mut out), SAMPLE_SNAP + 4);
        assert_eq!(out[SAMPLE_SNAP + 3], (SAMPLE_SNAP - 1) as u8);
    }
}
