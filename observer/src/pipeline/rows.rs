//! Row builders of the three Parquet tables, whose columns are defined once in
//! [`contract::schema`].
//!
//! - `flows`: one row per active QP key per interval (deltas).
//! - `interfaces`: one row per interface and direction per interval (deltas).
//! - `alerts`: one row per alert.
//!
//! Counts are `Int64` and times `Timestamp(µs, UTC)` so DuckDB, Spark and Trino read them
//! without unsigned or nanosecond types. Histograms are sparse `list<struct<value: int16,
//! pkts: int64>>` (only non-zero buckets).

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Int16Array, Int32Array, Int64Array, ListArray, StringArray,
    StructArray, TimestampMicrosecondArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, SchemaRef};
use arrow::record_batch::RecordBatch;
use observer_common::maps::{IfaceStats, QpKey, QpValue, class, dir};
use observer_common::qp::{OPCODE_OTHER, bucket_opcode};

use super::deltas::{HIST_BUCKETS, bucket_col};
use contract::addr::ip_of;
pub use contract::rows::{Cell, rows_batch};
use contract::schema::{self, QP_COUNTS, hist_fields};

/// All [`QP_COUNTS`] of a delta at once, in that order (direct field reads the compiler can
/// inline, where the table's getters are indirect calls; a test keeps the two the same).
#[inline]
fn qp_counts(v: &QpValue) -> [u64; QP_COUNTS.len()] {
    let ecn = |c: usize| v.ecn_hist[c].iter().map(|&n| n as u64).sum::<u64>();
    [
        v.pkts,
        v.bytes_l2,
        v.bytes_ip,
        v.bytes_udp,
        ecn(class::DATA),
        ecn(class::ACK),
        ecn(class::CNP),
        v.ecn_hist.iter().map(|h| h[3] as u64).sum(),
        v.ecn_hist[class::DATA][0] as u64,
        v.acks(),
        v.naks,
        v.nak_psn_seq_err,
        v.rnr_naks,
        v.suspect,
        v.psn_gaps,
        v.psn_missing,
        v.psn_retrans,
        v.psn_behind,
        v.qp_incarnations,
        v.icrc_ok,
        v.icrc_bad,
        v.icrc_unverifiable,
    ]
}

/// The `flows` Arrow schema ([`contract::schema::flows`]).
pub fn flows_schema() -> SchemaRef {
    schema::flows().arrow_schema()
}

/// One histogram column: a list per row of (value, pkts). `offsets` stays empty while every
/// row so far has an empty list (CNP histograms of data QPs, ...), and is filled in when the
/// first bucket arrives (or at the end).
#[derive(Default)]
struct Hist {
    offsets: Vec<i32>,
    values: Vec<i16>,
    pkts: Vec<i64>,
}

impl Hist {
    fn finish(mut self, rows: usize) -> ArrayRef {
        if self.offsets.is_empty() {
            self.offsets = vec![0; rows + 1];
        }
        let st = StructArray::new(
            hist_fields(),
            vec![
                Arc::new(Int16Array::from(self.values)) as ArrayRef,
                Arc::new(Int64Array::from(self.pkts)),
            ],
            None,
        );
        let field = Arc::new(Field::new("item", DataType::Struct(hist_fields()), false));
        Arc::new(ListArray::new(
            field,
            OffsetBuffer::new(self.offsets.into()),
            Arc::new(st),
            None,
        ))
    }
}

/// A count column that stays empty while every row so far is 0 (most of the per-QP counters in
/// most intervals: NAKs, PSN events, ICRC verdicts), filled with zeros up to the current row at
/// its first non-zero value (or at the end).
#[derive(Default)]
struct Count(Vec<i64>);

impl Count {
    /// Appends row `row`'s value; `cap`: the rows expected (sizes the column when it appears).
    #[inline]
    fn push(&mut self, row: usize, x: i64, cap: usize) {
        if x != 0 || !self.0.is_empty() {
            // sized once when it appears (also at row 0: no regrowth copies after)
            if self.0.len() < row || self.0.capacity() == 0 {
                self.0.reserve(cap.max(row + 1));
                self.0.resize(row, 0);
            }
            self.0.push(x);
        }
    }

    fn finish(mut self, rows: usize) -> Int64Array {
        self.0.resize(rows, 0);
        Int64Array::from(self.0)
    }
}

/// A validity column as Arrow's null buffer, `None` when every row is valid (as Arrow's null
/// buffer builder gives). A `bool` per row while building costs less than its bit appends.
fn nulls(valid: Vec<bool>) -> Option<NullBuffer> {
    let n = NullBuffer::from(valid);
    (n.null_count() > 0).then_some(n)
}

/// Decimal text of 0..=255 (up to 3 digits, and the digit count).
const DEC: [([u8; 3], u8); 256] = {
    let mut t = [([0u8; 3], 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let (h, d, o) = ((i / 100) as u8, ((i / 10) % 10) as u8, (i % 10) as u8);
        t[i] = if i >= 100 {
            ([b'0' + h, b'0' + d, b'0' + o], 3)
        } else if i >= 10 {
            ([b'0' + d, b'0' + o, 0], 2)
        } else {
            ([b'0' + o, 0, 0], 1)
        };
        i += 1;
    }
    t
};

/// A Utf8 column of key addresses, assembled as offsets and bytes.
struct IpColumn {
    offsets: Vec<i32>,
    bytes: Vec<u8>,
}

impl IpColumn {
    fn with_capacity(rows: usize) -> IpColumn {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        IpColumn {
            offsets,
            bytes: Vec::with_capacity(rows * 16),
        }
    }

    /// Appends a key address as printed everywhere ([`ip_of`]: IPv4-mapped as a dotted quad).
    fn push(&mut self, a: &[u8; 16]) {
        let word = |i: usize| u32::from_be_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
        if word(0) == 0 && word(4) == 0 && word(8) == 0xffff {
            // into a stack buffer, then one copy: each octet writes its 3-byte table entry
            // and advances by its digit count (at most 15 bytes; the last write ends by 16)
            let mut buf = [0u8; 16];
            let mut n = 0;
            for (i, &o) in a[12..].iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                let (digits, len) = DEC[o as usize];
                buf[n..n + 3].copy_from_slice(&digits);
                n += len as usize;
            }
            self.bytes.extend_from_slice(&buf[..n]);
        } else {
            use std::io::Write;
            let _ = write!(self.bytes, "{}", ip_of(a));
        }
        self.offsets.push(self.bytes.len() as i32);
    }

    fn finish(self) -> Result<StringArray, arrow::error::ArrowError> {
        StringArray::try_new(
            OffsetBuffer::new(self.offsets.into()),
            self.bytes.into(),
            None,
        )
    }
}

/// PCP bucket -> value (-1 = untagged).
fn pcp_value(i: usize) -> i16 {
    if i >= 8 { -1 } else { i as i16 }
}

/// Flat histogram bucket ([`super::deltas::HIST_BUCKETS`] numbering) -> (histogram
/// column, the `value` written for it: opcode, DSCP, ECN, PCP, -1 for "other" / untagged).
fn bucket_table() -> Vec<(u8, i16)> {
    (0..HIST_BUCKETS as u16)
        .map(|b| {
            let (c, i) = bucket_col(b);
            let value = match c {
                0 if i == OPCODE_OTHER => -1,
                0 => bucket_opcode(i).map(|o| o as i16).unwrap_or(-1),
                1..=6 => i as i16,
                _ => pcp_value(i),
            };
            (c as u8, value)
        })
        .collect()
}

/// Columnar builder of `flows` rows (fast path: 100k rows per interval).
pub struct FlowsBuilder {
    host: String,
    source: String,
    iface: String,
    /// The observation point's label (`--point-label`).
    point: Option<String>,
    start_us: i64,
    end_us: i64,
    rows: usize,
    /// Rows expected (capacity of columns that appear mid-batch).
    cap: usize,
    dir: Vec<u8>,
    src: IpColumn,
    dst: IpColumn,
    qp: Vec<i32>,
    new_qp: Vec<bool>,
    evicted: Vec<bool>,
    counts: Vec<Count>,
    max_pl: Vec<i32>,
    psn_max: Vec<i32>,
    psn_valid: Vec<bool>,
    sport: Vec<i32>,
    first: Vec<i64>,
    first_valid: Vec<bool>,
    last: Vec<i64>,
    last_valid: Vec<bool>,
    hists: Vec<Hist>,
    buckets: Vec<(u8, i16)>,
    /// Each row's latency outcomes ([`FlowsBuilder::push_latency`]), when any row has some.
    latency: Vec<Option<super::latency::KeyLatency>>,
}

impl FlowsBuilder {
    pub fn new(host: &str, source: &str, iface: &str, start_ns: u64, end_ns: u64) -> FlowsBuilder {
        Self::with_capacity(host, source, iface, start_ns, end_ns, 0)
    }

    /// Sized for `rows` rows up front (no regrowth copies on the hot path).
    pub fn with_capacity(
        host: &str,
        source: &str,
        iface: &str,
        start_ns: u64,
        end_ns: u64,
        rows: usize,
    ) -> FlowsBuilder {
        fn v<T>(rows: usize) -> Vec<T> {
            Vec::with_capacity(rows)
        }
        FlowsBuilder {
            host: host.into(),
            source: source.into(),
            iface: iface.into(),
            point: None,
            start_us: (start_ns / 1000) as i64,
            end_us: (end_ns / 1000) as i64,
            rows: 0,
            cap: rows,
            dir: v(rows),
            src: IpColumn::with_capacity(rows),
            dst: IpColumn::with_capacity(rows),
            qp: v(rows),
            new_qp: v(rows),
            evicted: v(rows),
            counts: (0..QP_COUNTS.len()).map(|_| Count::default()).collect(),
            max_pl: v(rows),
            psn_max: v(rows),
            psn_valid: v(rows),
            sport: v(rows),
            first: v(rows),
            first_valid: v(rows),
            last: v(rows),
            last_valid: v(rows),
            hists: (0..10).map(|_| Hist::default()).collect(),
            buckets: bucket_table(),
            latency: Vec::new(),
        }
    }

    /// Rows labelled with the observation point `point` (`--point-label`; `None`: null).
    pub fn with_point(mut self, point: Option<&str>) -> FlowsBuilder {
        self.point = point.map(Into::into);
        self
    }

    /// Sizes each histogram column for about as many buckets as the last interval's
    /// ([`FlowsBuilder::hist_sizes`]), so that a busy interval's columns grow without copies.
    pub fn with_hist_sizes(mut self, last: &[usize]) -> FlowsBuilder {
        for (h, &n) in self.hists.iter_mut().zip(last) {
            let n = n.saturating_add(n / 8);
            h.values.reserve(n);
            h.pkts.reserve(n);
        }
        self
    }

    /// The buckets written so far per histogram column (for the next interval's
    /// [`FlowsBuilder::with_hist_sizes`]).
    pub fn hist_sizes(&self) -> Vec<usize> {
        self.hists.iter().map(|h| h.values.len()).collect()
    }

    pub fn len(&self) -> usize {
        self.rows
    }
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// One row: `d` is the interval delta (gauges carried), packet times converted to UNIX ns
    /// by `clock_offset_ns`.
    pub fn push(
        &mut self,
        k: &QpKey,
        d: &QpValue,
        new_qp: bool,
        evicted: bool,
        clock_offset_ns: i64,
    ) {
        let mut nz = Vec::new();
        super::deltas::nonzero_buckets(d, &mut nz);
        self.push_nz(k, d, &nz, new_qp, evicted, clock_offset_ns);
    }

    /// [`FlowsBuilder::push`] with `d`'s non-zero histogram buckets already listed
    /// ([`super::deltas::nonzero_buckets`]).
    pub fn push_nz(
        &mut self,
        k: &QpKey,
        d: &QpValue,
        nz: &[u16],
        new_qp: bool,
        evicted: bool,
        clock_offset_ns: i64,
    ) {
        let row = self.rows;
        self.rows += 1;
        self.dir.push((k.dir as usize).min(dir::COUNT - 1) as u8);
        self.src.push(&k.src_ip);
        self.dst.push(&k.dst_ip);
        self.qp.push(k.dest_qp as i32);
        self.new_qp.push(new_qp);
        self.evicted.push(evicted);
        for (c, x) in self.counts.iter_mut().zip(qp_counts(d)) {
            c.push(row, x as i64, self.cap);
        }
        self.max_pl.push(d.max_udp_payload as i32);
        self.psn_max.push(d.psn_max().unwrap_or(0) as i32);
        self.psn_valid.push(d.psn_max_p1 != 0);
        self.sport.push(d.last_udp_sport as i32);
        // A time after 2262 (2^63 ns) must not wrap to a negative one, nor a negative offset
        // before 1970 give a negative time.
        let t = |ns: u64| match ns.checked_add_signed(clock_offset_ns) {
            // in u64 (no 128-bit division per value)
            Some(x) if x <= i64::MAX as u64 => (x / 1000) as i64,
            _ => ((ns as i128 + clock_offset_ns as i128).max(0) / 1000) as i64,
        };
        self.first
            .push(if d.first_ns != 0 { t(d.first_ns) } else { 0 });
        self.first_valid.push(d.first_ns != 0);
        self.last
            .push(if d.last_ns != 0 { t(d.last_ns) } else { 0 });
        self.last_valid.push(d.last_ns != 0);
        let counts = super::deltas::hist(d);
        for &b in nz {
            let (c, value) = self.buckets[b as usize];
            let h = &mut self.hists[c as usize];
            if h.offsets.is_empty() {
                // first bucket of this column: every earlier row has an empty list
                let cap = self.cap.max(row + 1);
                h.offsets.reserve(cap + 1);
                h.values.reserve(cap * 2);
                h.pkts.reserve(cap * 2);
                h.offsets.resize(row + 1, 0);
            }
            h.values.push(value);
            h.pkts.push(counts[b as usize] as i64);
        }
        for h in &mut self.hists {
            if !h.offsets.is_empty() {
                h.offsets.push(h.values.len() as i32);
            }
        }
    }

    /// The latency outcomes of the row just pushed (`None`: none in the interval; rows without
    /// a call have none).
    pub fn push_latency(&mut self, l: Option<super::latency::KeyLatency>) {
        if l.is_none() && self.latency.is_empty() {
            return;
        }
        let row = self.rows.saturating_sub(1);
        if self.latency.len() < row {
            self.latency.resize(row, None);
        }
        self.latency.truncate(row);
        self.latency.push(l);
    }

    /// The latency columns (contract::schema's `latency_*`): a histogram and the unmatched
    /// count per kind, then the ambiguous and ring-full counts; null where a row has none.
    fn latency_columns(&self, n: usize) -> Vec<ArrayRef> {
        use observer_common::latency::{index_of, kind};
        if self.latency.iter().all(Option::is_none) {
            let schema = contract::schema::flows().arrow_schema();
            return (0..kind::COUNT * 2 + 2)
                .map(|i| {
                    let f = schema.field(schema.fields().len() - (kind::COUNT * 2 + 2) + i);
                    arrow::array::new_null_array(f.data_type(), n)
                })
                .collect();
        }
        let at = |r: usize| self.latency.get(r).and_then(|l| l.as_ref());
        let valid: Vec<bool> = (0..n).map(|r| at(r).is_some()).collect();
        let count = |f: &dyn Fn(&super::latency::KeyLatency) -> u64| -> ArrayRef {
            Arc::new(Int64Array::new(
                (0..n)
                    .map(|r| at(r).map_or(0, |l| f(l) as i64))
                    .collect::<Vec<_>>()
                    .into(),
                nulls(valid.clone()),
            ))
        };
        let mut cols = Vec::new();
        for k in 0..kind::COUNT {
            let mut offsets = Vec::with_capacity(n + 1);
            offsets.push(0i32);
            let (mut values, mut samples) = (Vec::new(), Vec::new());
            for r in 0..n {
                if let Some(l) = at(r) {
                    for (b, c) in l.buckets(k) {
                        values.push(index_of(b));
                        samples.push(c as i64);
                    }
                }
                offsets.push(values.len() as i32);
            }
            let st = StructArray::new(
                hist_fields(),
                vec![
                    Arc::new(Int16Array::from(values)) as ArrayRef,
                    Arc::new(Int64Array::from(samples)),
                ],
                None,
            );
            let field = Arc::new(Field::new("item", DataType::Struct(hist_fields()), false));
            cols.push(Arc::new(ListArray::new(
                field,
                OffsetBuffer::new(offsets.into()),
                Arc::new(st),
                nulls(valid.clone()),
            )) as ArrayRef);
            cols.push(count(&|l| l.unmatched[k].into()));
        }
        cols.push(count(&|l| l.ambiguous.into()));
        cols.push(count(&|l| l.ring_full.into()));
        cols
    }

    pub fn finish(self, schema: &SchemaRef) -> Result<RecordBatch, arrow::error::ArrowError> {
        let n = self.rows;
        let latency = self.latency_columns(n);
        let ts = |v: Vec<i64>, nulls: Option<NullBuffer>| {
            Arc::new(TimestampMicrosecondArray::new(v.into(), nulls).with_timezone("UTC"))
                as ArrayRef
        };
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::new_repeated(&self.host, n)),
            Arc::new(StringArray::new_repeated(&self.source, n)),
            Arc::new(StringArray::new_repeated(&self.iface, n)),
            Arc::new(match self.dir.first() {
                // one direction in the batch (the usual case): no string per row to build
                Some(&d0) if self.dir.iter().all(|&d| d == d0) => {
                    StringArray::new_repeated(dir::NAMES[d0 as usize], n)
                }
                _ => {
                    StringArray::from_iter_values(self.dir.iter().map(|&d| dir::NAMES[d as usize]))
                }
            }),
            Arc::new(match &self.point {
                Some(p) => StringArray::new_repeated(p, n),
                None => StringArray::new_null(n),
            }),
            Arc::new(self.src.finish()?),
            Arc::new(self.dst.finish()?),
            Arc::new(Int32Array::from(self.qp)),
            ts(vec![self.start_us; n], None),
            ts(vec![self.end_us; n], None),
            Arc::new(BooleanArray::from(self.new_qp)),
            Arc::new(BooleanArray::from(self.evicted)),
        ];
        for c in self.counts {
            cols.push(Arc::new(c.finish(n)));
        }
        cols.push(Arc::new(Int32Array::from(self.max_pl)));
        cols.push(Arc::new(Int32Array::new(
            self.psn_max.into(),
            nulls(self.psn_valid),
        )));
        cols.push(Arc::new(Int32Array::from(self.sport)));
        cols.push(ts(self.first, nulls(self.first_valid)));
        cols.push(ts(self.last, nulls(self.last_valid)));
        for h in self.hists {
            cols.push(h.finish(n));
        }
        cols.extend(latency);
        RecordBatch::try_new(Arc::clone(schema), cols)
    }
}

/// Per-interface-direction facts of one interval that are not in [`IfaceStats`].
pub struct IfaceExtra {
    pub tracked_qps: u64,
    pub active_qps: u64,
    pub new_qps: u64,
    pub evictions: u64,
    /// Source MACs that sent PFC or PAUSE in the interval, "mac:frames" comma-separated.
    pub pfc_src_macs: Option<String>,
    /// Paused time and XOFF peak from the frames.
    pub pause: super::pause::PauseFigures,
}

/// One `interfaces` row, in [`contract::schema::interfaces`] column order.
#[allow(clippy::too_many_arguments)]
pub fn iface_row(
    host: &str,
    source: &str,
    point: Option<&str>,
    iface: &str,
    d: usize,
    start_ns: u64,
    end_ns: u64,
    link_bps: Option<u64>,
    s: &IfaceStats,
    x: &IfaceExtra,
) -> Vec<Cell> {
    let secs = end_ns.saturating_sub(start_ns) as f64 / 1e9;
    let i = |v: u64| Cell::I(v as i64);
    let mut r = vec![
        Cell::S(host.into()),
        Cell::S(source.into()),
        Cell::S(iface.into()),
        Cell::S(dir::NAMES[d].into()),
        Cell::OS(point.map(Into::into)),
        Cell::T(start_ns),
        Cell::T(end_ns),
        Cell::OI(link_bps.map(|b| b as i64)),
    ];
    r.extend(schema::IFACE_TRAFFIC.iter().map(|c| i((c.get)(s))));
    r.extend(s.excluded.iter().map(|&v| i(v)));
    r.extend(s.encap.iter().skip(1).map(|&v| i(v)));
    r.push(i(s.pfc.pfc_frames));
    for arr in [&s.pfc.enabled, &s.pfc.xoff, &s.pfc.xon, &s.pfc.quanta] {
        r.extend(arr.iter().map(|&v| i(v)));
    }
    let pause_s = |q: u64| {
        link_bps
            .filter(|&b| b > 0)
            .map(|b| q as f64 * 512.0 / b as f64)
    };
    r.extend(s.pfc.quanta.iter().map(|&q| Cell::F(pause_s(q))));
    r.extend(
        s.pfc
            .xoff
            .iter()
            .map(|&x| Cell::F((secs > 0.0).then(|| x as f64 / secs))),
    );
    let paused = |c: usize| Cell::F(x.pause.paused_ns.map(|p| p[c] as f64 / 1e9));
    r.extend((0..8).map(paused));
    r.extend(x.pause.xoff_peak_1s.iter().map(|&v| i(v)));
    r.push(i(s.pfc.pause));
    r.push(i(s.pfc.pause_xon));
    r.push(i(s.pfc.pause_quanta));
    r.push(Cell::F(pause_s(s.pfc.pause_quanta)));
    r.push(paused(super::pause::PAUSE_8023X));
    r.extend(schema::IFACE_HEALTH.iter().map(|c| i((c.get)(s))));
    for v in [x.tracked_qps, x.active_qps, x.new_qps, x.evictions] {
        r.push(i(v));
    }
    r.push(Cell::OS(x.pfc_src_macs.clone()));
    r
}

/// One row of the `nic` table ([`contract::schema::nic`]).
#[derive(Clone, Debug, Default)]
pub struct NicRow {
    pub iface: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub driver: String,
    pub rdma_device: Option<String>,
    /// One per [`nic::Quantity::all`], in that order (`None`: not reported).
    pub quantities: Vec<Option<i64>>,
    pub counter_resets: i64,
    pub raw: Vec<(String, Option<i64>)>,
    pub gauges: Vec<(String, Option<i64>)>,
    pub config: Option<String>,
}

/// A `list<struct<name, value>>` column.
fn named_lists<'a>(rows: impl Iterator<Item = &'a [(String, Option<i64>)]>) -> ArrayRef {
    let mut offsets = vec![0i32];
    let (mut names, mut values) = (Vec::new(), Vec::new());
    for r in rows {
        for (n, v) in r {
            names.push(n.as_str());
            values.push(*v);
        }
        offsets.push(names.len() as i32);
    }
    let st = StructArray::new(
        schema::named_fields(),
        vec![
            Arc::new(StringArray::from(names)) as ArrayRef,
            Arc::new(Int64Array::from(values)),
        ],
        None,
    );
    let item = Arc::new(Field::new(
        "item",
        DataType::Struct(schema::named_fields()),
        false,
    ));
    Arc::new(ListArray::new(
        item,
        OffsetBuffer::new(offsets.into()),
        Arc::new(st),
        None,
    ))
}

/// The `nic` rows of one interval as a batch.
pub fn nic_batch(
    host: &str,
    source: &str,
    rows: &[NicRow],
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let table = schema::nic();
    let n = rows.len();
    let strs = |f: &dyn Fn(&NicRow) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let ts = |f: &dyn Fn(&NicRow) -> u64| -> ArrayRef {
        Arc::new(
            TimestampMicrosecondArray::from(
                rows.iter()
                    .map(|r| (f(r) / 1000) as i64)
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        )
    };
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![host; n])),
        Arc::new(StringArray::from(vec![source; n])),
        strs(&|r| Some(r.iface.clone())),
        ts(&|r| r.start_ns),
        ts(&|r| r.end_ns),
        strs(&|r| Some(r.driver.clone())),
        strs(&|r| r.rdma_device.clone()),
    ];
    let quantities = rows.first().map_or(0, |r| r.quantities.len());
    for i in 0..quantities {
        cols.push(Arc::new(Int64Array::from(
            rows.iter().map(|r| r.quantities[i]).collect::<Vec<_>>(),
        )));
    }
    cols.push(Arc::new(Int64Array::from(
        rows.iter().map(|r| r.counter_resets).collect::<Vec<_>>(),
    )));
    cols.push(named_lists(rows.iter().map(|r| r.raw.as_slice())));
    cols.push(named_lists(rows.iter().map(|r| r.gauges.as_slice())));
    cols.push(strs(&|r| r.config.clone()));
    RecordBatch::try_new(table.arrow_schema(), cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Float64Array;
    use contract::schema::hist_names;

    #[test]
    fn flows_batch_matches_schema_and_is_sparse() {
        let schema = flows_schema();
        let mut b = FlowsBuilder::new("h", "replay", "eth0", 1_000_000_000, 2_000_000_000)
            .with_point(Some("leaf1"));
        let mut v = QpValue::ZERO;
        v.pkts = 3;
        v.dscp_hist[class::DATA][26] = 2;
        v.dscp_hist[class::DATA][0] = 1;
        v.ecn_hist[class::DATA][2] = 3;
        v.pcp_hist[class::DATA][8] = 3;
        v.opcode_hist[observer_common::qp::opcode_bucket(0x0a)] = 3;
        let k = QpKey {
            src_ip: [0; 16],
            dst_ip: [0; 16],
            dest_qp: 0x12,
            dir: 0,
            _pad: [0; 3],
        };
        b.push(&k, &v, true, false, 0);
        b.push(&k, &QpValue::ZERO, false, false, 0);
        let batch = b.finish(&schema).unwrap();
        assert_eq!(batch.num_rows(), 2);
        let dscp = batch
            .column_by_name("dscp_data")
            .unwrap()
            .as_any()
            .downcast_ref::<ListArray>()
            .unwrap();
        assert_eq!(dscp.value_length(0), 2);
        assert_eq!(dscp.value_length(1), 0);
        let pcp = batch
            .column_by_name("pcp_data")
            .unwrap()
            .as_any()
            .downcast_ref::<ListArray>()
            .unwrap();
        let st = pcp.value(0);
        let st = st.as_any().downcast_ref::<StructArray>().unwrap();
        let val = st.column(0).as_any().downcast_ref::<Int16Array>().unwrap();
        assert_eq!(val.value(0), -1, "untagged");
        let point = batch.column_by_name("point").unwrap();
        let point = point.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!((point.value(0), point.value(1)), ("leaf1", "leaf1"));
        // without a label: null
        use arrow::array::Array;
        let mut b = FlowsBuilder::new("h", "replay", "eth0", 0, 1);
        b.push(&k, &v, true, false, 0);
        let none = b.finish(&schema).unwrap();
        assert!(none.column_by_name("point").unwrap().is_null(0));
    }

    /// Every column of every row against the delta it came from (random keys and sparse
    /// values: IPv4 and IPv6, missing PSN and times, counters that turn non-zero mid-batch).
    #[test]
    fn flows_rows_match_their_deltas() {
        use arrow::array::{Array, AsArray};
        use arrow::datatypes::{Int16Type, Int32Type, Int64Type, TimestampMicrosecondType};
        let mut next = crate::testutil::xorshift(0x9e37_79b9_7f4a_7c15);
        let (start, end, off) = (1_000_000_000u64, 2_000_123_456u64, -7_000i64);
        let mut b = FlowsBuilder::new("h", "live", "eth0", start, end);
        let mut rows = Vec::new();
        for r in 0..3000u64 {
            let mut k = QpKey {
                dest_qp: next() as u32 & 0xff_ffff,
                dir: (next() % 3) as u8,
                ..Default::default()
            };
            for a in [&mut k.src_ip, &mut k.dst_ip] {
                let x = next();
                if x.is_multiple_of(4) {
                    a.copy_from_slice(&(next() as u128 | ((x as u128) << 64)).to_be_bytes());
                } else {
                    a[10] = 0xff;
                    a[11] = 0xff;
                    a[12..].copy_from_slice(&(next() as u32).to_be_bytes());
                }
            }
            let mut v = QpValue::ZERO;
            let w = crate::pipeline::deltas::hist_mut_for_tests(&mut v);
            for _ in 0..(next() % 12) {
                w[(next() % HIST_BUCKETS as u64) as usize] = (next() % 5000) as u32;
            }
            v.pkts = next() % 1000;
            v.bytes_l2 = next();
            // counters that stay zero for a while, then appear
            if r > 1500 && next().is_multiple_of(7) {
                v.naks = next() % 9;
                v.icrc_bad = 1;
            }
            v.psn_retrans = if r == 2999 { 5 } else { 0 };
            v.psn_max_p1 = if next().is_multiple_of(3) {
                0
            } else {
                next() as u32 & 0xff_ffff
            };
            v.first_ns = if next().is_multiple_of(5) {
                0
            } else {
                next() >> 4
            };
            v.last_ns = if next().is_multiple_of(5) {
                0
            } else {
                next() >> 4
            };
            v.max_udp_payload = (next() % 5000) as u16;
            v.last_udp_sport = next() as u16;
            let (new_qp, evicted) = (next().is_multiple_of(2), next().is_multiple_of(9));
            b.push(&k, &v, new_qp, evicted, off);
            rows.push((k, v, new_qp, evicted));
        }
        let batch = b.finish(&flows_schema()).unwrap();
        assert_eq!(batch.num_rows(), rows.len());
        let col = |n: &str| batch.column_by_name(n).unwrap().clone();
        let s = |n: &str, i: usize| col(n).as_string::<i32>().value(i).to_string();
        let i64s = |n: &str| col(n).as_primitive::<Int64Type>().clone();
        let ts = |n: &str| col(n).as_primitive::<TimestampMicrosecondType>().clone();
        let (psn, first, last) = (
            col("psn_max").as_primitive::<Int32Type>().clone(),
            ts("first_pkt"),
            ts("last_pkt"),
        );
        let opt = |a: &dyn Array, i: usize| a.is_valid(i);
        for (i, (k, v, new_qp, evicted)) in rows.iter().enumerate() {
            assert_eq!(
                (s("host", i), s("source", i), s("iface", i)),
                ("h".into(), "live".into(), "eth0".into())
            );
            assert_eq!(s("dir", i), dir::NAMES[(k.dir as usize).min(1)]);
            assert_eq!(s("src", i), ip_of(&k.src_ip).to_string());
            assert_eq!(s("dst", i), ip_of(&k.dst_ip).to_string());
            assert_eq!(
                col("qp").as_primitive::<Int32Type>().value(i),
                k.dest_qp as i32
            );
            assert_eq!(ts("interval_start").value(i), 1_000_000);
            assert_eq!(ts("interval_end").value(i), 2_000_123);
            assert_eq!(col("new_qp").as_boolean().value(i), *new_qp);
            assert_eq!(col("evicted").as_boolean().value(i), *evicted);
            let direct = qp_counts(v);
            for (j, q) in QP_COUNTS.iter().enumerate() {
                let (n, f) = (q.name, q.get);
                assert_eq!(direct[j], f(v), "qp_counts {n}");
                assert_eq!(i64s(n).value(i), f(v) as i64, "{n} row {i}");
                assert!(i64s(n).is_valid(i));
            }
            let i32v = |n: &str| col(n).as_primitive::<Int32Type>().value(i);
            assert_eq!(i32v("max_udp_payload"), v.max_udp_payload as i32);
            assert_eq!(i32v("last_udp_sport"), v.last_udp_sport as i32);
            assert_eq!(
                opt(&psn, i).then(|| psn.value(i)),
                v.psn_max().map(|p| p as i32)
            );
            let t = |ns: u64| (ns != 0).then(|| (ns as i64 + off) / 1000);
            assert_eq!(opt(&first, i).then(|| first.value(i)), t(v.first_ns));
            assert_eq!(opt(&last, i).then(|| last.value(i)), t(v.last_ns));
            // histograms: (value, pkts) of the non-zero buckets, in bucket order
            let mut want: Vec<Vec<(i16, i64)>> = vec![Vec::new(); 10];
            for (j, &n) in v.opcode_hist.iter().enumerate() {
                if n != 0 {
                    let op = bucket_opcode(j).filter(|_| j != OPCODE_OTHER);
                    want[0].push((op.map(|o| o as i16).unwrap_or(-1), n as i64));
                }
            }
            for c in 0..3 {
                for (j, &n) in v.dscp_hist[c].iter().enumerate() {
                    if n != 0 {
                        want[1 + c].push((j as i16, n as i64));
                    }
                }
                for (j, &n) in v.ecn_hist[c].iter().enumerate() {
                    if n != 0 {
                        want[4 + c].push((j as i16, n as i64));
                    }
                }
                for (j, &n) in v.pcp_hist[c].iter().enumerate() {
                    if n != 0 {
                        want[7 + c].push((if j == 8 { -1 } else { j as i16 }, n as i64));
                    }
                }
            }
            for (h, name) in hist_names().iter().enumerate() {
                let l = col(name);
                let l = l.as_list::<i32>();
                assert!(l.is_valid(i));
                let st = l.value(i);
                let st = st.as_struct();
                let vals = st.column(0).as_primitive::<Int16Type>();
                let pk = st.column(1).as_primitive::<Int64Type>();
                let got: Vec<(i16, i64)> = (0..st.len())
                    .map(|x| (vals.value(x), pk.value(x)))
                    .collect();
                assert_eq!(got, want[h], "{name} row {i}");
            }
        }
    }

    #[test]
    fn qp_counts_match_the_table() {
        // every counter and bucket distinct, so any mix-up of fields shows
        let mut v = QpValue::ZERO;
        let w = crate::pipeline::deltas::hist_mut_for_tests(&mut v);
        for (i, x) in w.iter_mut().enumerate() {
            *x = 7 * i as u32 + 1;
        }
        for (i, f) in [
            &mut v.pkts,
            &mut v.bytes_l2,
            &mut v.bytes_ip,
            &mut v.bytes_udp,
            &mut v.naks,
            &mut v.nak_psn_seq_err,
            &mut v.rnr_naks,
            &mut v.suspect,
            &mut v.psn_gaps,
            &mut v.psn_missing,
            &mut v.psn_retrans,
            &mut v.psn_behind,
            &mut v.icrc_ok,
            &mut v.icrc_bad,
            &mut v.icrc_unverifiable,
        ]
        .into_iter()
        .enumerate()
        {
            *f = 1_000_000 * (i as u64 + 1);
        }
        let direct = qp_counts(&v);
        for (j, q) in QP_COUNTS.iter().enumerate() {
            assert_eq!(direct[j], (q.get)(&v), "{}", q.name);
        }
    }

    #[test]
    fn times_at_the_edges_one_direction_and_no_point() {
        use arrow::array::{Array, AsArray};
        use arrow::datatypes::TimestampMicrosecondType;
        let mut b = FlowsBuilder::new("h", "live", "eth0", 0, 1).with_hist_sizes(&[4; 10]);
        let k = QpKey::default();
        // (first_ns, last_ns, clock offset) -> (first_pkt, last_pkt) in µs
        let cases: [(u64, u64, i64, i64, i64); 4] = [
            (5_000, 9_999, 0, 5, 9),
            (1_500, 3_000, -2_000, 0, 1), // before 1970 after the offset: 0
            (
                u64::MAX,
                u64::MAX - 999,
                0,
                (u64::MAX / 1000) as i64,
                (u64::MAX / 1000) as i64 - 1,
            ),
            (
                u64::MAX,
                2_000_000,
                -1_000_000,
                ((u64::MAX - 1_000_000) / 1000) as i64,
                1_000,
            ),
        ];
        for &(f, l, off, ..) in &cases {
            let mut v = QpValue::ZERO;
            v.pkts = 1;
            (v.first_ns, v.last_ns) = (f, l);
            b.push(&k, &v, false, false, off);
        }
        assert_eq!(b.hist_sizes(), vec![0; 10]);
        let batch = b.finish(&flows_schema()).unwrap();
        let ts = |n: &str| {
            batch
                .column_by_name(n)
                .unwrap()
                .as_primitive::<TimestampMicrosecondType>()
                .clone()
        };
        for (i, &(.., f, l)) in cases.iter().enumerate() {
            assert_eq!(
                (ts("first_pkt").value(i), ts("last_pkt").value(i)),
                (f, l),
                "{i}"
            );
        }
        let dirs = batch
            .column_by_name("dir")
            .unwrap()
            .as_string::<i32>()
            .clone();
        assert!(dirs.iter().all(|d| d == Some(dir::NAMES[0])));
        assert_eq!(batch.column_by_name("point").unwrap().null_count(), 4);
    }

    #[test]
    fn ip_formatting_matches_std() {
        for a in [
            [0u8; 16],
            {
                let mut x = [0u8; 16];
                x[10] = 0xff;
                x[11] = 0xff;
                x[12..].copy_from_slice(&[10, 0, 255, 7]);
                x
            },
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        ] {
            let mut c = IpColumn::with_capacity(1);
            c.push(&a);
            assert_eq!(c.finish().unwrap().value(0), ip_of(&a).to_string());
        }
        // every octet value in every position, one and three digits next to each other, and
        // addresses one bit off the IPv4-mapped prefix, all in one column
        let mut addrs = Vec::new();
        for o in 0..=255u8 {
            for pos in 12..16 {
                let mut x = [0u8; 16];
                x[10] = 0xff;
                x[11] = 0xff;
                x[12..].copy_from_slice(&[200, 9, 10, 255]);
                x[pos] = o;
                addrs.push(x);
            }
        }
        for bit in 0..96 {
            let mut x = [0u8; 16];
            x[10] = 0xff;
            x[11] = 0xff;
            x[12..].copy_from_slice(&[10, 0, 0, 1]);
            x[bit / 8] ^= 0x80 >> (bit % 8);
            addrs.push(x);
        }
        let mut c = IpColumn::with_capacity(1);
        for a in &addrs {
            c.push(a);
        }
        let col = c.finish().unwrap();
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(col.value(i), ip_of(a).to_string(), "{a:?}");
        }
    }

    #[test]
    fn iface_row_matches_columns() {
        let schema = schema::interfaces().arrow_schema();
        let mut s = IfaceStats::default();
        s.pfc.quanta[3] = 1000;
        s.pfc.xoff[3] = 10;
        let x = IfaceExtra {
            tracked_qps: 1,
            active_qps: 1,
            new_qps: 0,
            evictions: 0,
            pfc_src_macs: None,
            pause: crate::pipeline::pause::PauseFigures {
                paused_ns: Some([0, 0, 0, 250_000_000, 0, 0, 0, 0, 7]),
                xoff_peak_1s: [0, 0, 0, 9, 0, 0, 0, 0],
            },
        };
        let r = iface_row(
            "h",
            "live",
            Some("tor1-mirror"),
            "e",
            0,
            0,
            2_000_000_000,
            Some(100_000_000_000),
            &s,
            &x,
        );
        assert_eq!(r.len(), schema.fields().len());
        let b = rows_batch(&schema, &[r]).unwrap();
        let ps = b
            .column_by_name("pfc_pause_s_p3")
            .unwrap()
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        assert!((ps.value(0) - 1000.0 * 512.0 / 1e11).abs() < 1e-15);
        let xr = b
            .column_by_name("pfc_xoff_per_s_p3")
            .unwrap()
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        assert_eq!(xr.value(0), 5.0);
        let f = |n: &str| {
            b.column_by_name(n)
                .unwrap()
                .as_any()
                .downcast_ref::<Float64Array>()
                .unwrap()
                .value(0)
        };
        assert_eq!((f("pfc_paused_s_p3"), f("pause_paused_s")), (0.25, 7e-9));
        let peak = b.column_by_name("pfc_xoff_peak_1s_p3").unwrap();
        assert_eq!(
            peak.as_any().downcast_ref::<Int64Array>().unwrap().value(0),
            9
        );
        let point = b.column_by_name("point").unwrap();
        let point = point.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(point.value(0), "tor1-mirror");
    }
}
