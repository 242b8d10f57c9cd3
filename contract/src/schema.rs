//! The one definition of every output table: column names, types, nullability, units and
//! meanings. The Parquet writers build their Arrow schemas from it, `roce-analyze` checks every
//! file it reads against it (a missing or mistyped column is an error naming the file and the
//! column), `summary.json` takes its per-QP count names from it, and `docs/schema.md` is
//! generated from it (`cargo xtask schema-doc`; a test fails when the two differ).
//!
//! Counts are `Int64` and times `Timestamp(µs, UTC)` so DuckDB, Spark and Trino read them
//! without unsigned or nanosecond types. Histograms are sparse `list<struct<value: int16,
//! pkts: int64>>`, only non-zero buckets, one list per row.

use std::sync::{Arc, LazyLock};

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use observer_common::maps::{IfaceStats, QpValue, class};
use observer_common::parse::{encap, reason};

/// A column's type, as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColType {
    Utf8,
    Int32,
    Int64,
    Float64,
    Boolean,
    /// `timestamp[us, UTC]`.
    Timestamp,
    /// `list<struct<value: int16, pkts: int64>>`.
    Hist,
    /// `list<struct<name: string, value: int64>>`: named counters.
    Named,
}

impl ColType {
    pub fn arrow(self) -> DataType {
        match self {
            ColType::Utf8 => DataType::Utf8,
            ColType::Int32 => DataType::Int32,
            ColType::Int64 => DataType::Int64,
            ColType::Float64 => DataType::Float64,
            ColType::Boolean => DataType::Boolean,
            ColType::Timestamp => ts_type(),
            ColType::Hist => hist_type(),
            ColType::Named => named_type(),
        }
    }

    /// The name used in the documentation.
    pub fn doc_name(self) -> &'static str {
        match self {
            ColType::Utf8 => "string",
            ColType::Int32 => "int32",
            ColType::Int64 => "int64",
            ColType::Float64 => "double",
            ColType::Boolean => "bool",
            ColType::Timestamp => "timestamp[us, UTC]",
            ColType::Hist => "list<struct<value int16, pkts int64>>",
            ColType::Named => "list<struct<name string, value int64>>",
        }
    }
}

pub fn ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

pub fn hist_fields() -> Fields {
    Fields::from(vec![
        Field::new("value", DataType::Int16, false),
        Field::new("pkts", DataType::Int64, false),
    ])
}

pub fn named_fields() -> Fields {
    Fields::from(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("value", DataType::Int64, true),
    ])
}

pub fn named_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "item",
        DataType::Struct(named_fields()),
        false,
    )))
}

pub fn hist_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "item",
        DataType::Struct(hist_fields()),
        false,
    )))
}

/// One column.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: String,
    pub ty: ColType,
    pub nullable: bool,
    pub unit: &'static str,
    pub doc: String,
    /// Added after files were first written: a file without it is read as if it were all
    /// null (the column must be nullable).
    pub added_later: bool,
}

/// One table of the output tree.
#[derive(Debug)]
pub struct Table {
    /// Directory under the output root, and the file name prefix.
    pub name: &'static str,
    /// What one row is.
    pub rows: &'static str,
    pub columns: Vec<Column>,
    arrow: SchemaRef,
}

/// A file's columns disagree with the definition.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchemaMismatch {
    #[error("column {column:?} of the {table} table is missing")]
    Missing { table: &'static str, column: String },
    #[error("column {column:?} of the {table} table is {found}, expected {expected}")]
    Type {
        table: &'static str,
        column: String,
        found: String,
        expected: String,
    },
}

/// A batch's column read through the table's definition: the column must be defined, present
/// and of the defined type (a renamed or retyped column is this error, never a zero).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ColumnError {
    #[error("{origin}: the {table} table defines no column {column:?}")]
    Undefined {
        origin: String,
        table: &'static str,
        column: String,
    },
    #[error("{origin}: {mismatch}")]
    Mismatch {
        origin: String,
        mismatch: SchemaMismatch,
    },
}

impl Table {
    /// Column `name` of `batch` (rows of this table from `origin`: a file, a sink's input),
    /// checked against the definition.
    pub fn read<'a>(
        &self,
        batch: &'a arrow::record_batch::RecordBatch,
        name: &str,
        origin: &str,
    ) -> Result<&'a arrow::array::ArrayRef, ColumnError> {
        let c = self.column(name).ok_or_else(|| ColumnError::Undefined {
            origin: origin.to_string(),
            table: self.name,
            column: name.to_string(),
        })?;
        let mismatch = |mismatch| ColumnError::Mismatch {
            origin: origin.to_string(),
            mismatch,
        };
        let Some(a) = batch.column_by_name(name) else {
            return Err(mismatch(SchemaMismatch::Missing {
                table: self.name,
                column: name.to_string(),
            }));
        };
        if !same_type(a.data_type(), &c.ty.arrow()) {
            return Err(mismatch(SchemaMismatch::Type {
                table: self.name,
                column: name.to_string(),
                found: a.data_type().to_string(),
                expected: c.ty.doc_name().to_string(),
            }));
        }
        Ok(a)
    }

    /// An `Int64` column ([`Table::read`]).
    pub fn ints<'a>(
        &self,
        batch: &'a arrow::record_batch::RecordBatch,
        name: &str,
        origin: &str,
    ) -> Result<&'a arrow::array::Int64Array, ColumnError> {
        self.typed(batch, name, origin)
    }

    /// A `Float64` column ([`Table::read`]).
    pub fn floats<'a>(
        &self,
        batch: &'a arrow::record_batch::RecordBatch,
        name: &str,
        origin: &str,
    ) -> Result<&'a arrow::array::Float64Array, ColumnError> {
        self.typed(batch, name, origin)
    }

    /// A `Utf8` column ([`Table::read`]).
    pub fn strings<'a>(
        &self,
        batch: &'a arrow::record_batch::RecordBatch,
        name: &str,
        origin: &str,
    ) -> Result<&'a arrow::array::StringArray, ColumnError> {
        self.typed(batch, name, origin)
    }

    /// A histogram column (`list<struct<value, pkts>>`, [`Table::read`]).
    pub fn lists<'a>(
        &self,
        batch: &'a arrow::record_batch::RecordBatch,
        name: &str,
        origin: &str,
    ) -> Result<&'a arrow::array::ListArray, ColumnError> {
        self.typed(batch, name, origin)
    }

    fn typed<'a, A: arrow::array::Array + 'static>(
        &self,
        batch: &'a arrow::record_batch::RecordBatch,
        name: &str,
        origin: &str,
    ) -> Result<&'a A, ColumnError> {
        let a = self.read(batch, name, origin)?;
        a.as_any()
            .downcast_ref::<A>()
            .ok_or_else(|| ColumnError::Mismatch {
                origin: origin.to_string(),
                mismatch: SchemaMismatch::Type {
                    table: self.name,
                    column: name.to_string(),
                    found: a.data_type().to_string(),
                    expected: std::any::type_name::<A>()
                        .rsplit("::")
                        .next()
                        .unwrap_or("")
                        .into(),
                },
            })
    }

    fn new(name: &'static str, rows: &'static str, columns: Vec<Column>) -> Table {
        let arrow = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(&c.name, c.ty.arrow(), c.nullable))
                .collect::<Vec<_>>(),
        ));
        Table {
            name,
            rows,
            columns,
            arrow,
        }
    }

    /// The Arrow schema the writers use.
    pub fn arrow_schema(&self) -> SchemaRef {
        Arc::clone(&self.arrow)
    }

    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The column `name`, which a reader in this workspace asks for by name. Panics when the
    /// definition has no such column: a renamed or removed column is then a failing test, never
    /// a silent zero.
    pub fn expect_column(&self, name: &str) -> &Column {
        self.column(name).unwrap_or_else(|| {
            panic!(
                "the {} table has no column {name:?} (contract::schema is the definition)",
                self.name
            )
        })
    }

    /// Checks a file's schema: every defined column present with its type (extra columns are
    /// allowed: a newer writer may add some).
    pub fn check(&self, file: &Schema) -> Result<(), SchemaMismatch> {
        for c in &self.columns {
            let Ok(f) = file.field_with_name(&c.name) else {
                if c.added_later {
                    continue;
                }
                return Err(SchemaMismatch::Missing {
                    table: self.name,
                    column: c.name.clone(),
                });
            };
            if !readable_as(f.data_type(), &c.ty.arrow()) {
                return Err(SchemaMismatch::Type {
                    table: self.name,
                    column: c.name.clone(),
                    found: f.data_type().to_string(),
                    expected: c.ty.doc_name().to_string(),
                });
            }
        }
        Ok(())
    }

    /// The table's documentation section (docs/schema.md).
    pub fn markdown(&self) -> String {
        let mut s = format!("## `{}`\n\n{}\n\n", self.name, self.rows);
        s += "| column | type | null | unit | meaning |\n|---|---|---|---|---|\n";
        for c in &self.columns {
            s += &format!(
                "| `{}` | {} | {} | {} | {} |\n",
                c.name,
                c.ty.doc_name(),
                if c.nullable { "yes" } else { "" },
                c.unit,
                c.doc.replace('|', "\\|")
            );
        }
        s
    }
}

/// A file's type `a` read as the table's `b` without loss: the same type ([`same_type`]), or a
/// narrower integer or float (another writer's `INTEGER` for a count) widened, at any depth.
fn readable_as(a: &DataType, b: &DataType) -> bool {
    use DataType::*;
    match (a, b) {
        (List(x) | LargeList(x), List(y)) => readable_as(x.data_type(), y.data_type()),
        (Struct(x), Struct(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|(p, q)| p.name() == q.name() && readable_as(p.data_type(), q.data_type()))
        }
        _ => {
            same_type(a, b)
                || matches!(
                    (a, b),
                    (Int8, Int16 | Int32 | Int64)
                        | (Int16, Int32 | Int64)
                        | (Int32, Int64)
                        | (UInt8, Int16 | Int32 | Int64)
                        | (UInt16, Int32 | Int64)
                        | (UInt32, Int64)
                        | (Float16, Float32 | Float64)
                        | (Float32, Float64)
                )
        }
    }
}

/// Types equal, ignoring list item names and nullability inside lists (other writers name the
/// list item `element`).
fn same_type(a: &DataType, b: &DataType) -> bool {
    match (a, b) {
        (DataType::List(x), DataType::List(y)) | (DataType::LargeList(x), DataType::List(y)) => {
            same_type(x.data_type(), y.data_type())
        }
        (DataType::Struct(x), DataType::Struct(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|(p, q)| p.name() == q.name() && same_type(p.data_type(), q.data_type()))
        }
        (DataType::Timestamp(u, _), DataType::Timestamp(v, _)) => u == v,
        (DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View, DataType::Utf8) => true,
        _ => a == b,
    }
}

fn col(name: impl Into<String>, ty: ColType, unit: &'static str, doc: impl Into<String>) -> Column {
    Column {
        name: name.into(),
        ty,
        nullable: false,
        unit,
        doc: doc.into(),
        added_later: false,
    }
}

fn nullable(mut c: Column) -> Column {
    c.nullable = true;
    c
}

/// A nullable column that files written before it was added lack (read as null).
fn added_later(c: Column) -> Column {
    let mut c = nullable(c);
    c.added_later = true;
    c.doc += " (absent from files written before it was added: read as null)";
    c
}

/// `point`: the observation point's label.
fn point_column() -> Column {
    added_later(col(
        "point",
        ColType::Utf8,
        "",
        "observation point label (`--point-label`; null without one): with host, iface and dir it names the point that `roce-analyze path` compares",
    ))
}

/// Reads one count of a per-QP delta.
pub type Getter = fn(&QpValue) -> u64;

/// A per-QP count: a `flows` column, a `summary.json` field of every QP.
pub struct QpCount {
    pub name: &'static str,
    pub unit: &'static str,
    pub doc: &'static str,
    pub get: Getter,
}

/// The per-QP counts, in `flows` column order.
pub const QP_COUNTS: [QpCount; 22] = [
    QpCount {
        name: "pkts",
        unit: "packets",
        doc: "RoCE packets of the key",
        get: |v| v.pkts,
    },
    QpCount {
        name: "bytes_l2",
        unit: "bytes",
        doc: "frame length on the wire (tags included, no FCS; the mirrored frame for mirror traffic)",
        get: |v| v.bytes_l2,
    },
    QpCount {
        name: "bytes_ip",
        unit: "bytes",
        doc: "IP length",
        get: |v| v.bytes_ip,
    },
    QpCount {
        name: "bytes_udp",
        unit: "bytes",
        doc: "UDP payload",
        get: |v| v.bytes_udp,
    },
    QpCount {
        name: "data_pkts",
        unit: "packets",
        doc: "data-class packets",
        get: |v| v.class_pkts(class::DATA),
    },
    QpCount {
        name: "ack_pkts",
        unit: "packets",
        doc: "ack-class packets (0x11, 0x12, 0x51, 0x52)",
        get: |v| v.class_pkts(class::ACK),
    },
    QpCount {
        name: "cnp",
        unit: "packets",
        doc: "CNPs (0x81) addressed to (dst, qp)",
        get: |v| v.cnp(),
    },
    QpCount {
        name: "ce",
        unit: "packets",
        doc: "ECN 0b11 (CE), all classes",
        get: |v| v.ce(),
    },
    QpCount {
        name: "not_ect_data",
        unit: "packets",
        doc: "data packets with ECN 0b00 (Not-ECT)",
        get: |v| v.ecn_hist[class::DATA][0] as u64,
    },
    QpCount {
        name: "acks",
        unit: "packets",
        doc: "opcode 0x11 (ACKNOWLEDGE), any syndrome",
        get: |v| v.acks(),
    },
    QpCount {
        name: "naks",
        unit: "packets",
        doc: "AETH syndrome 11x (NAK)",
        get: |v| v.naks,
    },
    QpCount {
        name: "nak_psn_seq_err",
        unit: "packets",
        doc: "AETH 0x60 (NAK PSN sequence error)",
        get: |v| v.nak_psn_seq_err,
    },
    QpCount {
        name: "rnr_naks",
        unit: "packets",
        doc: "AETH syndrome 01x (RNR NAK)",
        get: |v| v.rnr_naks,
    },
    QpCount {
        name: "suspect",
        unit: "packets",
        doc: "TVer != 0 or undefined opcode",
        get: |v| v.suspect,
    },
    QpCount {
        name: "psn_gaps",
        unit: "gaps",
        doc: "new PSN ahead by d > 1: one gap each",
        get: |v| v.psn_gaps,
    },
    QpCount {
        name: "psn_missing",
        unit: "PSNs",
        doc: "PSNs skipped by those gaps (d - 1 each)",
        get: |v| v.psn_missing,
    },
    QpCount {
        name: "psn_retrans",
        unit: "packets",
        doc: "PSN not ahead of the highest (go-back-N resend or duplicate)",
        get: |v| v.psn_retrans,
    },
    QpCount {
        name: "psn_behind",
        unit: "packets",
        doc: "PSN strictly behind the highest",
        get: |v| v.psn_behind,
    },
    QpCount {
        name: "qp_incarnations",
        unit: "keys",
        doc: "new QP reusing the key (idle, then a PSN that is not the next; or a jump of 2^22 or more): PSN analysis restarted",
        get: |v| v.qp_incarnations,
    },
    QpCount {
        name: "icrc_ok",
        unit: "packets",
        doc: "ICRC verified (replay only; 0 live)",
        get: |v| v.icrc_ok,
    },
    QpCount {
        name: "icrc_bad",
        unit: "packets",
        doc: "ICRC wrong (replay only)",
        get: |v| v.icrc_bad,
    },
    QpCount {
        name: "icrc_unverifiable",
        unit: "packets",
        doc: "ICRC not checkable (cut capture; replay only)",
        get: |v| v.icrc_unverifiable,
    },
];

/// A per-interface count: an `interfaces` column, a `summary.json` field of every interface
/// direction.
pub struct IfaceCount {
    pub name: &'static str,
    pub unit: &'static str,
    pub doc: &'static str,
    pub get: fn(&IfaceStats) -> u64,
}

/// The interface's traffic counts, in `interfaces` column order (after the link speed).
pub const IFACE_TRAFFIC: [IfaceCount; 5] = [
    IfaceCount {
        name: "frames",
        unit: "frames",
        doc: "every frame the program ran on",
        get: |s| s.frames,
    },
    IfaceCount {
        name: "bytes",
        unit: "bytes",
        doc: "their wire length",
        get: |s| s.bytes,
    },
    IfaceCount {
        name: "roce",
        unit: "frames",
        doc: "RoCEv2 packets",
        get: |s| s.roce,
    },
    IfaceCount {
        name: "roce_untracked",
        unit: "frames",
        doc: "RoCEv2 packets not tracked per QP (map full, insert gave up)",
        get: |s| s.roce_untracked,
    },
    IfaceCount {
        name: "not_roce",
        unit: "frames",
        doc: "other frames",
        get: |s| s.not_roce,
    },
];

/// The interface's other MAC control frames and the observer's own health counts, in
/// `interfaces` column order (after 802.3x PAUSE).
pub const IFACE_HEALTH: [IfaceCount; 8] = [
    IfaceCount {
        name: "mac_control_other",
        unit: "frames",
        doc: "other MAC control opcodes",
        get: |s| s.pfc.other_opcode,
    },
    IfaceCount {
        name: "qp_insert_failed",
        unit: "packets",
        doc: "RoCE packets whose new key could not be inserted (map full, or the insert gave up)",
        get: |s| s.qp_insert_failed,
    },
    IfaceCount {
        name: "mac_insert_failed",
        unit: "frames",
        doc: "PFC / PAUSE frames whose new source MAC could not be inserted",
        get: |s| s.mac_insert_failed,
    },
    IfaceCount {
        name: "events_lost",
        unit: "events",
        doc: "first-occurrence events lost (ring buffer full; interval counts are complete)",
        get: |s| s.events_lost,
    },
    IfaceCount {
        name: "pause_events_lost",
        unit: "frames",
        doc: "MAC control frames whose event was lost (ring buffer full): pause time and XOFF peak are lower bounds then",
        get: |s| s.pause_events_lost,
    },
    IfaceCount {
        name: "psn_contended",
        unit: "packets",
        doc: "PSN updates that gave up under compare-and-swap contention",
        get: |s| s.psn_contended,
    },
    IfaceCount {
        name: "hist_overflow_lost",
        unit: "packets",
        doc: "histogram buckets not counted: the key's compact kernel value and the overflow map were full",
        get: |s| s.hist_overflow_lost,
    },
    IfaceCount {
        name: "dropped",
        unit: "frames",
        doc: "dropped after observing (`--capture-port`)",
        get: |s| s.dropped,
    },
];

/// Histogram columns of `flows`: opcodes, then dscp / ecn / pcp per class.
pub fn hist_names() -> Vec<String> {
    let mut v = vec!["opcodes".to_string()];
    for h in ["dscp", "ecn", "pcp"] {
        for c in class::NAMES {
            v.push(format!("{h}_{c}"));
        }
    }
    v
}

fn key_columns(c: &mut Vec<Column>) {
    use ColType::*;
    c.push(col(
        "host",
        Utf8,
        "",
        "host name (`--host`, else this machine's)",
    ));
    c.push(col("source", Utf8, "", "`live` or `replay`"));
    c.push(col(
        "iface",
        Utf8,
        "",
        "interface (replay: the capture file's stem, `stem:ifname` for named pcapng interfaces)",
    ));
    c.push(col(
        "dir",
        Utf8,
        "",
        "`ingress` (XDP / tc ingress) or `egress` (tc egress)",
    ));
    c.push(point_column());
}

fn interval_columns(c: &mut Vec<Column>) {
    use ColType::*;
    c.push(col(
        "interval_start",
        Timestamp,
        "µs",
        "interval start (the first starts at attach, or at the first packet in replay)",
    ));
    c.push(col("interval_end", Timestamp, "µs", "interval end"));
}

/// Long by design: one line per column, in file order (a declaration, not logic).
fn flows_table() -> Table {
    use ColType::*;
    let mut c = Vec::new();
    key_columns(&mut c);
    c.push(col(
        "src",
        Utf8,
        "",
        "key source address (IPv4 dotted, IPv6 RFC 5952)",
    ));
    c.push(col("dst", Utf8, "", "key destination address"));
    c.push(col(
        "qp",
        Int32,
        "",
        "BTH destination QP (the key is src, dst, qp, dir)",
    ));
    interval_columns(&mut c);
    c.push(col(
        "new_qp",
        Boolean,
        "",
        "key first seen in this interval",
    ));
    c.push(col(
        "evicted",
        Boolean,
        "",
        "key removed from the kernel map after this interval (its final counts are in this row; an idle key's last row has zero counts)",
    ));
    for q in &QP_COUNTS {
        c.push(col(q.name, Int64, q.unit, q.doc));
    }
    c.push(col(
        "max_udp_payload",
        Int32,
        "bytes",
        "largest UDP payload since the key appeared (cumulative)",
    ));
    c.push(nullable(col(
        "psn_max",
        Int32,
        "PSN",
        "highest PSN so far (null before any data packet)",
    )));
    c.push(col(
        "last_udp_sport",
        Int32,
        "",
        "UDP source port of the last packet (ECMP entropy)",
    ));
    c.push(nullable(col(
        "first_pkt",
        Timestamp,
        "µs",
        "first packet of the key (cumulative)",
    )));
    c.push(nullable(col(
        "last_pkt",
        Timestamp,
        "µs",
        "last packet of the key (cumulative)",
    )));
    for h in hist_names() {
        let doc = match h.split('_').next() {
            Some("opcodes") => "value = BTH opcode, -1 = undefined opcodes".to_string(),
            Some("dscp") => format!("value = DSCP 0-63, {} class", &h[5..]),
            Some("ecn") => format!("value = ECN 0-3, {} class", &h[4..]),
            _ => format!(
                "value = outermost PCP 0-7, -1 = untagged, {} class",
                &h[4..]
            ),
        };
        c.push(col(h, Hist, "packets", doc));
    }
    latency_columns(&mut c);
    Table::new(
        "flows",
        "One row per QP key with packets in the interval (keys with no new packet are not written, except a key's last row when it is evicted). Counts are interval deltas. A row group holds whole intervals; min/max statistics are written for `host`, `iface`, `interval_start` and `interval_end` only (the columns whose statistics skip row groups; a per-key column's range over a row group of many keys would skip nothing).",
        c,
    )
}

/// Passive latency of the key's requests (docs/latency.md), null in a row whose key had no
/// latency outcome in the interval.
fn latency_columns(c: &mut Vec<Column>) {
    use ColType::*;
    use observer_common::latency::kind;
    for (k, name) in kind::NAMES.iter().enumerate() {
        c.push(added_later(col(
            format!("latency_{name}"),
            Hist,
            "samples",
            format!(
                "{}: value = bucket index i of the native-histogram schema 2, samples in (2^((i-1)/4), 2^(i/4)] s, i from -80 (everything up to 2^-20 s = 0.95 µs) to 12 (8 s); pkts = samples ended in the interval",
                kind::DOCS[k]
            ),
        )));
        c.push(added_later(col(
            format!("latency_{name}_unmatched"),
            Int64,
            "measurements",
            format!("{name} measurements started and never answered (timed out, a new incarnation, passed over), decided in the interval (those still open at the end are in summary.json)"),
        )));
    }
    c.push(added_later(col(
        "latency_ambiguous",
        Int64,
        "measurements",
        "ACK and READ measurements excluded by Karn's rule (a PSN up to theirs was sent again while they were open)",
    )));
    c.push(added_later(col(
        "latency_ring_full",
        Int64,
        "measurements",
        "ACK and READ measurements not started: the key's outstanding ring (16 entries) was full",
    )));
}

fn per_priority(c: &mut Vec<Column>, what: &str, ty: ColType, unit: &'static str, doc: &str) {
    for p in 0..8 {
        let mut x = col(
            format!("pfc_{what}_p{p}"),
            ty,
            unit,
            format!("{doc}, priority {p}"),
        );
        x.nullable = ty == ColType::Float64;
        c.push(x);
    }
}

/// Long by design: one line per column, in file order (a declaration, not logic).
fn interfaces_table() -> Table {
    use ColType::*;
    let mut c = Vec::new();
    key_columns(&mut c);
    interval_columns(&mut c);
    c.push(nullable(col(
        "link_speed_bps",
        Int64,
        "bit/s",
        "link speed (null when unknown)",
    )));
    for q in &IFACE_TRAFFIC {
        c.push(col(q.name, Int64, q.unit, q.doc));
    }
    for r in reason::NAMES {
        c.push(col(
            format!("excluded_{r}"),
            Int64,
            "frames",
            format!("excluded: {r} (docs/metrics.md)"),
        ));
    }
    for e in encap::NAMES.iter().skip(1) {
        c.push(col(
            format!("encap_{e}"),
            Int64,
            "frames",
            format!("arrived in a {e} mirror encapsulation"),
        ));
    }
    c.push(col(
        "pfc_frames",
        Int64,
        "frames",
        "PFC frames (MAC control opcode 0x0101)",
    ));
    per_priority(
        &mut c,
        "enabled",
        Int64,
        "frames",
        "PFC frames with the enable bit set",
    );
    per_priority(&mut c, "xoff", Int64, "frames", "of those, pause time > 0");
    per_priority(&mut c, "xon", Int64, "frames", "of those, pause time 0");
    per_priority(
        &mut c,
        "quanta",
        Int64,
        "quanta",
        "summed pause times (1 quantum = 512 bit times)",
    );
    per_priority(
        &mut c,
        "pause_s",
        Float64,
        "s",
        "requested: quanta x 512 / link speed, overlapping pauses summed (null without a speed)",
    );
    per_priority(
        &mut c,
        "xoff_per_s",
        Float64,
        "frames/s",
        "XOFF over the interval length (the interval average)",
    );
    per_priority(
        &mut c,
        "paused_s",
        Float64,
        "s",
        "time actually paused: union of pause windows (a new XOFF replaces the running pause, an XON ends it) within the interval (null without a speed)",
    );
    per_priority(
        &mut c,
        "xoff_peak_1s",
        Int64,
        "frames",
        "largest XOFF count in a one-second window ending at one of the interval's XOFF frames, 1 ms resolution (the storm figure)",
    );
    c.push(col("pause_frames", Int64, "frames", "802.3x PAUSE frames"));
    c.push(col(
        "pause_xon",
        Int64,
        "frames",
        "802.3x PAUSE frames with pause time 0",
    ));
    c.push(col(
        "pause_quanta",
        Int64,
        "quanta",
        "802.3x summed pause times",
    ));
    c.push(nullable(col(
        "pause_s",
        Float64,
        "s",
        "802.3x requested pause seconds (null without a speed)",
    )));
    c.push(nullable(col(
        "pause_paused_s",
        Float64,
        "s",
        "802.3x time actually paused (union of pause windows within the interval; null without a speed)",
    )));
    for q in &IFACE_HEALTH {
        c.push(col(q.name, Int64, q.unit, q.doc));
    }
    c.push(col(
        "tracked_qps",
        Int64,
        "keys",
        "keys in the map at the interval's end",
    ));
    c.push(col(
        "active_qps",
        Int64,
        "keys",
        "keys with packets in the interval (rows in flows)",
    ));
    c.push(col("new_qps", Int64, "keys", "keys first seen"));
    c.push(col(
        "evictions",
        Int64,
        "keys",
        "keys removed (idle eviction, or vanished)",
    ));
    c.push(nullable(col(
        "pfc_src_macs",
        Utf8,
        "",
        "`mac=frames,...`: senders of PFC / PAUSE in the interval, most frames first (null if none)",
    )));
    Table::new(
        "interfaces",
        "One row per interface and direction per interval (ingress always, egress when it saw frames; replay writes no row for an interface without a frame in the interval). Counts are interval deltas.",
        c,
    )
}

fn alerts_table() -> Table {
    use ColType::*;
    let c = vec![
        col("host", Utf8, "", "host name"),
        col("source", Utf8, "", "`live` or `replay`"),
        col(
            "time",
            Timestamp,
            "µs",
            "when raised (event time, or the interval's end)",
        ),
        col("first_time", Timestamp, "µs", "first occurrence it covers"),
        col("rule", Utf8, "", "alert rule (docs/alerts.md)"),
        col("severity", Utf8, "", "`info`, `warning` or `critical`"),
        col("iface", Utf8, "", "interface (`-` for output failures)"),
        nullable(col("dir", Utf8, "", "direction, where the rule has one")),
        point_column(),
        added_later(col(
            "to_iface",
            Utf8,
            "",
            "`marking_changed`: the interface of the later point (`iface` and `dir` are the earlier one)",
        )),
        added_later(col(
            "to_dir",
            Utf8,
            "",
            "`marking_changed`: the direction of the later point",
        )),
        nullable(col(
            "class",
            Utf8,
            "",
            "`data`, `ack` or `cnp`, where the rule has one",
        )),
        nullable(col(
            "src",
            Utf8,
            "",
            "source address, where the rule has one",
        )),
        nullable(col("dst", Utf8, "", "destination address")),
        nullable(col("qp", Int64, "", "destination QP")),
        nullable(col(
            "qp_hex",
            Utf8,
            "",
            "the same QP in hex, as the text lines show it (`0x000012`)",
        )),
        nullable(col("priority", Int64, "", "PFC priority")),
        col("observed", Utf8, "", "what was seen, e.g. `dscp 0 x4`"),
        col(
            "expected",
            Utf8,
            "",
            "what the policy expects, e.g. `dscp 26`",
        ),
        col(
            "count",
            Int64,
            "",
            "occurrences covered (packets, frames, gaps: per rule)",
        ),
        col(
            "summary",
            Utf8,
            "",
            "`true` for a hold-down summary of occurrences after the first alert",
        ),
        col(
            "origin",
            Utf8,
            "",
            "`event` (kernel first-occurrence event) or `interval` (interval deltas)",
        ),
        col("message", Utf8, "", "the human line"),
        added_later(col(
            "subjects",
            Int64,
            "",
            "QP keys the alert stands for: 1, or N for one alert over N keys that broke the rule alike in an interval (`thresholds.aggregate_keys`)",
        )),
        added_later(col(
            "keys",
            Utf8,
            "",
            "an aggregated alert's keys, `; `-separated (at most 100, then `and N more`); null otherwise",
        )),
    ];
    Table::new(
        "alerts",
        "One row per alert (the same content as `alerts.jsonl`).",
        c,
    )
}

/// What a vendor-neutral NIC quantity counts (`docs/nic.md`).
fn quantity_doc(name: &str) -> String {
    const EXACT: [(&str, &str); 12] = [
        (
            "rdma_rx_out_of_buffer",
            "RoCE packets that found no receive WQE posted (RQ/SRQ empty): dropped (UD) or answered with an RNR NAK (RC)",
        ),
        (
            "implied_nak_seq_err",
            "READ responses beyond the expected PSN (an implied NAK sequence error)",
        ),
        ("adaptive_retrans", "the NIC's adaptive retransmissions"),
        (
            "adaptive_retrans_timeouts",
            "adaptive retransmissions on a timeout",
        ),
        ("slow_restarts", "slow-restart events of the retransmission"),
        ("slow_restart_cnps", "CNPs generated by slow restart"),
        ("slow_restart_transitions", "transitions into slow restart"),
        (
            "pause_ctrl_rx_frames",
            "MAC-control PAUSE frames received at the port (802.3 counters; whether PFC frames are in them depends on the NIC)",
        ),
        (
            "pause_ctrl_tx_frames",
            "MAC-control PAUSE frames sent at the port (802.3 counters; whether PFC frames are in them depends on the NIC)",
        ),
        (
            "pfc_rx_frames_all_prio",
            "PFC frames received, every priority",
        ),
        ("pfc_tx_frames_all_prio", "PFC frames sent, every priority"),
        (
            "pause_storm_roce_events",
            "the RoCE class kept paused past the NIC's storm threshold",
        ),
    ];
    if let Some((_, d)) = EXACT.iter().find(|(n, _)| *n == name) {
        return format!("{d}; delta over the interval, null when this NIC does not report it");
    }
    const DOCS: [(&str, &str); 15] = [
        ("pfc_tx_frames_p", "PFC frames sent for priority"),
        ("pfc_rx_frames_p", "PFC frames received for priority"),
        (
            "pfc_tx_pause_us_p",
            "time this host paused the peer on priority",
        ),
        (
            "pfc_rx_pause_us_p",
            "time the peer paused this host on priority",
        ),
        ("pfc_tx_transitions_p", "pause transitions sent on priority"),
        (
            "pfc_rx_transitions_p",
            "XOFF to XON transitions received on priority",
        ),
        (
            "rx_discards_p",
            "packets of the priority discarded at the port, priority",
        ),
        (
            "rx_buf_discards_p",
            "packets dropped for lack of receive buffer, priority",
        ),
        (
            "rx_cong_discards_p",
            "packets dropped by congestion (WRED), priority",
        ),
        (
            "rx_ecn_marked_p",
            "packets the NIC ECN-marked itself for per-host congestion, priority",
        ),
        ("global_pause_", "802.3x PAUSE (not PFC)"),
        ("pause_storm_", "the NIC's pause-storm protection"),
        ("cnp_", "CNPs (congestion notification packets)"),
        ("rdma_", "RDMA traffic the NIC carried"),
        ("port_", "port-level discards"),
    ];
    let what = DOCS
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(
            |(p, d)| match name.strip_prefix(p).filter(|r| r.len() == 1) {
                Some(prio) => format!("{d} {prio}"),
                None => format!("{}: {d}", name.replace('_', " ")),
            },
        )
        .unwrap_or_else(|| name.replace('_', " "));
    format!("{what}; delta over the interval, null when this NIC does not report it")
}

/// Long by design: one line per column, in file order (a declaration, not logic).
fn nic_table() -> Table {
    use crate::nic::Quantity;
    use ColType::*;
    let mut c = Vec::new();
    c.push(col("host", Utf8, "", "host name"));
    c.push(col("source", Utf8, "", "`live`"));
    c.push(col("iface", Utf8, "", "the observed interface (netdev)"));
    interval_columns(&mut c);
    c.push(col(
        "driver",
        Utf8,
        "",
        "driver family the names were mapped by: `mlx5`, `bnxt`, `ice`, `rxe` or `other`",
    ));
    c.push(nullable(col(
        "rdma_device",
        Utf8,
        "",
        "RDMA device bound to the interface (null: none)",
    )));
    for q in Quantity::all() {
        let name = q.name();
        let doc = quantity_doc(&name);
        let column = nullable(col(name, Int64, q.unit(), doc));
        c.push(if q.added_later() {
            added_later(column)
        } else {
            column
        });
    }
    c.push(col("counter_resets", Int64, "counters", "counters that went backwards in the interval (driver reload, firmware reset): their delta is their new value"));
    c.push(col("raw", Named, "", "every other counter the NIC reports that changed in the interval, `ethtool:NAME` or `rdma:NAME` with its delta (null: absent in one of the two samples)"));
    c.push(col(
        "gauges",
        Named,
        "",
        "levels the NIC reports (not counts), with their current value",
    ));
    c.push(nullable(col("config", Utf8, "", "the QoS configuration (DCB PFC / ETS / APP, congestion control, RoCE ToS, GID types) as JSON, in the first row and whenever it changed; null otherwise")));
    Table::new(
        "nic",
        "One row per interface per interval from the NIC's own counters (ethtool statistics, RDMA port counters): the view on hosts whose NIC runs RoCE itself. Quantities are vendor-neutral (docs/nic.md).",
        c,
    )
}

/// Long by design: one line per column, in file order (a declaration, not logic).
fn qps_table() -> Table {
    use ColType::*;
    let mut c = Vec::new();
    c.push(col("host", Utf8, "", "host name"));
    c.push(col("source", Utf8, "", "`live`"));
    interval_columns(&mut c);
    c.push(col("device", Utf8, "", "RDMA device (`mlx5_0`, `rxe0`)"));
    c.push(nullable(col(
        "port",
        Int64,
        "",
        "port of the device (null: the QP has none yet, in RESET)",
    )));
    c.push(col("lqpn", Int64, "", "local QP number"));
    c.push(nullable(col(
        "rqpn",
        Int64,
        "",
        "remote QP number (RC and UC only)",
    )));
    c.push(col("qp_type", Utf8, "", "`RC`, `UC`, `UD`, `GSI`, `SMI`, `XRC_INI`, `XRC_TGT`, `RAW_PACKET`, `DRIVER` (`enum ib_qp_type`)"));
    c.push(col("state", Utf8, "", "`RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR` at the interval's end (`enum ib_qp_state`)"));
    c.push(nullable(col(
        "sq_psn",
        Int64,
        "",
        "next PSN to send, at the interval's end",
    )));
    c.push(nullable(col(
        "rq_psn",
        Int64,
        "",
        "next PSN expected (RC and UC), at the interval's end",
    )));
    c.push(nullable(col("tx_pkts", Int64, "packets", "packets sent in the interval: the send PSN's advance as a 24-bit serial number, 0 when it moved backward (a go-back-N rewind; docs/qps.md) (null: the QP is new, or a new QP under a re-used number)")));
    c.push(nullable(col("rx_pkts", Int64, "packets", "packets received in sequence in the interval: the receive PSN's advance as a 24-bit serial number, 0 when it moved backward (null as for tx_pkts, and for types without a receive PSN)")));
    c.push(nullable(col(
        "pid",
        Int64,
        "",
        "the creating process (user QPs; null: a kernel QP, or the creator is not visible)",
    )));
    c.push(nullable(col(
        "comm",
        Utf8,
        "",
        "the creator's command (`/proc/PID/comm`), or the kernel user of a kernel QP",
    )));
    c.push(col(
        "kernel",
        Boolean,
        "",
        "a QP of the kernel (a ULP, the GSI QP)",
    ));
    c.push(nullable(col(
        "cgroup",
        Utf8,
        "",
        "the creator's cgroup path",
    )));
    c.push(nullable(col(
        "container_id",
        Utf8,
        "",
        "container id (64 hex) from the cgroup path",
    )));
    c.push(nullable(col(
        "pod_uid",
        Utf8,
        "",
        "Kubernetes pod UID from the cgroup path",
    )));
    c.push(nullable(col(
        "src",
        Utf8,
        "",
        "rdma_cm source address `ip:port` (QPs created through rdma_cm)",
    )));
    c.push(nullable(col(
        "dst",
        Utf8,
        "",
        "rdma_cm destination address `ip:port`",
    )));
    c.push(nullable(col("traffic_class", Int64, "", "the GRH traffic class the QP was set up with (its modify to RTR as the modify-QP probe saw it, or its address path in mlx5's raw QP context; null: neither was seen)")));
    c.push(nullable(col(
        "dscp",
        Int64,
        "",
        "traffic_class >> 2: the DSCP its packets carry",
    )));
    c.push(nullable(col(
        "ecn",
        Int64,
        "",
        "traffic_class & 3: the ECN field its packets carry",
    )));
    c.push(nullable(col(
        "sl",
        Int64,
        "",
        "the service level it was set up with (the priority under PCP trust)",
    )));
    c.push(nullable(col(
        "dgid",
        Utf8,
        "",
        "the destination GID it was set up with (IPv4 when v4-mapped)",
    )));
    c.push(nullable(col(
        "setup_source",
        Utf8,
        "",
        "where the set-up columns come from: `probe` (the modify-QP probe) or `mlx5_qpc` (mlx5's raw QP context, for a QP set up before the probe); null when neither saw it",
    )));
    c.push(nullable(col(
        "priority",
        Int64,
        "",
        "the priority its packets land in by the port's QoS configuration (null: not known)",
    )));
    c.push(col(
        "error",
        Boolean,
        "",
        "the QP is in ERR or SQE at the interval's end",
    ));
    c.push(col(
        "marking",
        Utf8,
        "",
        "the marking verdict: `ok`, `off_policy`, `lossy` or `unknown` (docs/qps.md)",
    ));
    Table::new(
        "qps",
        "One row per QP of the host per interval, from the kernel's RDMA subsystem (RDMA netlink): every QP of every RDMA device, hardware RoCE included (docs/qps.md). Live only.",
        c,
    )
}

static FLOWS: LazyLock<Table> = LazyLock::new(flows_table);
static QPS: LazyLock<Table> = LazyLock::new(qps_table);
static NIC: LazyLock<Table> = LazyLock::new(nic_table);
static INTERFACES: LazyLock<Table> = LazyLock::new(interfaces_table);
static ALERTS: LazyLock<Table> = LazyLock::new(alerts_table);

pub fn flows() -> &'static Table {
    &FLOWS
}
pub fn interfaces() -> &'static Table {
    &INTERFACES
}
pub fn alerts() -> &'static Table {
    &ALERTS
}

pub fn nic() -> &'static Table {
    &NIC
}

pub fn qps() -> &'static Table {
    &QPS
}

/// Every table of the output tree, in documentation order.
pub fn tables() -> [&'static Table; 5] {
    [flows(), interfaces(), alerts(), nic(), qps()]
}

/// The generated part of docs/schema.md.
pub fn markdown() -> String {
    let mut s = String::from(
        "<!-- Generated from contract/src/schema.rs by `cargo xtask schema-doc`; a test fails when this file and the code differ. -->\n\
         # Output schema\n\n\
         The tables of the output tree (`<out>/<table>/date=YYYY-MM-DD/hour=HH/<table>-<host>-<start>-<seq>.parquet`). \
         Counts are `int64`, times `timestamp[us, UTC]`; histograms are sparse lists of (value, pkts), only non-zero buckets. \
         Readers (`roce-analyze`) check every file against these columns: a missing or mistyped column is an error naming the file and the column.\n\n",
    );
    for t in tables() {
        s += &t.markdown();
        s += "\n";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/schema.md is the generated text, so the documentation and the code cannot differ.
    #[test]
    fn docs_schema_matches_the_code() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schema.md");
        let doc = std::fs::read_to_string(path).expect("docs/schema.md");
        assert!(
            doc == markdown(),
            "docs/schema.md differs from observer/src/schema.rs: run `cargo xtask schema-doc`"
        );
    }

    #[test]
    fn names_are_unique_and_checks_name_the_column() {
        for t in tables() {
            let mut n: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
            n.sort();
            n.dedup();
            assert_eq!(n.len(), t.columns.len(), "{}", t.name);
            assert!(t.check(&t.arrow_schema()).is_ok());
        }
        let f = flows();
        let mut fields: Vec<Field> = f
            .arrow_schema()
            .fields()
            .iter()
            .map(|x| (**x).clone())
            .collect();
        fields.retain(|x| x.name() != "ce");
        assert_eq!(
            f.check(&Schema::new(fields.clone())),
            Err(SchemaMismatch::Missing {
                table: "flows",
                column: "ce".into()
            })
        );
        let i = fields.iter().position(|x| x.name() == "pkts").unwrap();
        fields[i] = Field::new("pkts", DataType::Utf8, false);
        assert!(matches!(
            f.check(&Schema::new(fields.clone())),
            Err(SchemaMismatch::Type { column, .. }) if column == "pkts"
        ));
        // a narrower integer (another writer's INTEGER for a count) widens without loss; a
        // wider one does not narrow
        fields.push(Field::new("ce", DataType::Int64, false));
        fields[i] = Field::new("pkts", DataType::Int32, false);
        assert_eq!(f.check(&Schema::new(fields.clone())), Ok(()));
        let q = fields.iter().position(|x| x.name() == "qp").unwrap();
        fields[q] = Field::new("qp", DataType::Int64, false);
        assert!(matches!(
            f.check(&Schema::new(fields)),
            Err(SchemaMismatch::Type { column, .. }) if column == "qp"
        ));
    }

    /// A column added later (`point`) may be missing from a file (written before it was
    /// added): read as null, not an error; every other column must be there.
    #[test]
    fn files_written_before_a_column_was_added_are_read() {
        for t in [flows(), interfaces(), alerts()] {
            let c = t.expect_column("point");
            assert!(c.added_later && c.nullable, "{}", t.name);
            let fields: Vec<Field> = t
                .arrow_schema()
                .fields()
                .iter()
                .filter(|x| x.name() != "point")
                .map(|x| (**x).clone())
                .collect();
            assert_eq!(t.check(&Schema::new(fields)), Ok(()), "{}", t.name);
        }
        assert!(
            flows()
                .columns
                .iter()
                .filter(|c| c.name != "point" && !c.name.starts_with("latency_"))
                .all(|c| !c.added_later)
        );
    }

    #[test]
    #[should_panic(expected = "no column \"cee\"")]
    fn a_misspelt_column_is_a_failure_not_a_zero() {
        flows().expect_column("cee");
    }

    /// A batch's column is read through the definition: an undefined, missing or retyped
    /// column is an error naming where the rows came from and the column, never a zero.
    #[test]
    fn columns_are_read_through_the_definition() {
        use arrow::array::{ArrayRef, Int32Array, Int64Array};
        use arrow::record_batch::RecordBatch;
        let t = interfaces();
        let b = |name: &str, a: ArrayRef| RecordBatch::try_from_iter([(name, a)]).unwrap();
        let ok = b("frames", Arc::new(Int64Array::from(vec![7])));
        assert_eq!(t.ints(&ok, "frames", "rows").unwrap().value(0), 7);
        let e = t.ints(&ok, "frame", "rows").unwrap_err();
        assert_eq!(
            e.to_string(),
            "rows: the interfaces table defines no column \"frame\""
        );
        let e = t.ints(&ok, "bytes", "f.parquet").unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.parquet: column \"bytes\" of the interfaces table is missing"
        );
        let retyped = b("frames", Arc::new(Int32Array::from(vec![7])));
        let e = t.ints(&retyped, "frames", "f.parquet").unwrap_err();
        assert!(e.to_string().contains("is Int32, expected"), "{e}");
        assert!(t.floats(&ok, "frames", "x").is_err());
    }
}
