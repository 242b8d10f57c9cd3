//! Where the pipeline's results go, each output behind one trait, [`Sink`]: the Parquet tables
//! (flows, interfaces, alerts, nic)
//! ([`TableSink`], rows built by the pipeline's `rows`, files by [`parquet_files`]), `alerts.jsonl`
//! ([`JsonlSink`]), alert lines on stderr ([`StderrSink`]) and the terminal view
//! ([`tui::ViewSink`], drawn by [`tui::Tui`]). The end-of-run files are [`summary_json`] and its
//! text form [`summary_text`].

pub mod alertmanager;
pub mod checkpoints;
pub mod evidence;
pub mod parquet_files;
pub mod prometheus;
pub mod summary_json;
pub mod summary_text;
pub mod tui;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use serde_json::{Value, json};

use contract::alert::Alert;
use contract::alert::Rule;
use contract::rows::{Cell, rows_batch};
use contract::time::rfc3339;
use parquet_files::{JsonlWriter, OutputError, TableWriter};

/// Who wrote the rows: every alert line and row carries it.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub host: String,
    /// `live` or `replay`.
    pub source: &'static str,
}

/// One interval of one interface, as the sinks receive it.
pub struct IntervalRows<'a> {
    pub start_ns: u64,
    pub end_ns: u64,
    pub flows: &'a RecordBatch,
    pub interfaces: &'a RecordBatch,
}

/// An output of the pipeline. Every method has a default that does nothing, so a sink
/// implements what it takes. A failing write is returned as an error; the pipeline then raises
/// `output_write_failed` (naming [`Sink::name`]) and counting goes on.
pub trait Sink: Send {
    /// The output's name in logs and alerts (a table name, `alerts.jsonl`, ...).
    fn name(&self) -> &'static str;
    /// One alert as it is emitted.
    fn alert(&mut self, _a: &Alert, _run: &RunInfo) {}
    /// One interval's rows of one interface.
    fn interval(&mut self, _rows: &IntervalRows<'_>) -> Result<(), OutputError> {
        Ok(())
    }
    /// One interval of one interface's NIC counters (`nic` table rows), starting at `t_ns`.
    fn nic(&mut self, _rows: &RecordBatch, _t_ns: u64) -> Result<(), OutputError> {
        Ok(())
    }
    /// The NIC configuration checks of interface `iface` (at start-up and whenever the
    /// configuration changed).
    fn nic_checks(&mut self, _iface: &str, _checks: &[nic::Check]) {}
    /// One read of the host's QPs (`qps` table rows), the interval starting at `t_ns`.
    fn qps(&mut self, _rows: &RecordBatch, _t_ns: u64) -> Result<(), OutputError> {
        Ok(())
    }
    /// One read's per-QP-group counter increments (`--qp-counters`), read at `t_ns`.
    fn qp_counters(
        &mut self,
        _groups: &[qps::counters::CounterGroup],
        _t_ns: u64,
    ) -> Result<(), OutputError> {
        Ok(())
    }
    /// After a batch of events, at time `t_ns`: write what should not wait for the interval.
    fn flush(&mut self, _t_ns: u64) -> Result<(), OutputError> {
        Ok(())
    }
    /// At the end of an interval (after its alerts), at time `t_ns`.
    fn end_interval(&mut self, t_ns: u64) -> Result<(), OutputError> {
        self.flush(t_ns)
    }
    /// At stop: write everything.
    fn finish(&mut self, t_ns: u64) -> Result<(), OutputError> {
        self.end_interval(t_ns)
    }
    /// Output statistics for `summary.json`, under [`Sink::name`].
    fn stats(&self) -> Option<Value> {
        None
    }
    /// Final-named files written so far (the most recent 64).
    fn written_files(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// Which table a [`TableSink`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    Flows,
    Interfaces,
    Alerts,
    Nic,
    Qps,
}

/// One Parquet table of the output tree.
pub struct TableSink {
    kind: TableKind,
    writer: TableWriter,
    schema: SchemaRef,
    /// Alert rows not yet written (alerts table only).
    rows: Vec<Vec<Cell>>,
}

impl TableSink {
    pub fn new(
        kind: TableKind,
        out: &Path,
        host: &str,
        rotate_s: u64,
        rotate_b: u64,
        journal: bool,
    ) -> Self {
        let table = match kind {
            TableKind::Flows => contract::schema::flows(),
            TableKind::Interfaces => contract::schema::interfaces(),
            TableKind::Alerts => contract::schema::alerts(),
            TableKind::Nic => contract::schema::nic(),
            TableKind::Qps => contract::schema::qps(),
        };
        let schema = table.arrow_schema();
        // A crashed run's open windows first (SIGKILL, OOM kill, power loss), written as this
        // table's writer writes its files.
        let columns: Option<parquet_files::ColumnsOf> = match kind {
            TableKind::Flows => Some(&parquet_files::flows_columns),
            _ => None,
        };
        match parquet_files::recover_journals(out, table.name, columns) {
            Ok(r) if r.files > 0 || r.rows_lost > 0 => tracing::warn!(
                table = table.name,
                files = r.files,
                rows = r.rows,
                rows_lost = r.rows_lost,
                "recovered the rows of a run that did not stop cleanly"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(table = table.name, error = %contract::error::chain(&e), "could not recover a journal")
            }
        }
        let mut writer =
            TableWriter::new(out, table.name, host, schema.clone(), rotate_s, rotate_b);
        if kind == TableKind::Flows {
            writer = writer.with_columns(parquet_files::flows_columns);
        }
        if !journal {
            writer = writer.without_journal();
        }
        TableSink {
            kind,
            writer,
            schema,
            rows: Vec::new(),
        }
    }

    fn write_alert_rows(&mut self, t_ns: u64) -> Result<(), OutputError> {
        let rows = std::mem::take(&mut self.rows);
        let b = rows_batch(&self.schema, &rows).map_err(|err| OutputError::Arrow {
            table: "alerts".into(),
            err,
        })?;
        self.writer.write(&b, t_ns)
    }
}

impl Sink for TableSink {
    fn name(&self) -> &'static str {
        match self.kind {
            TableKind::Flows => "flows",
            TableKind::Interfaces => "interfaces",
            TableKind::Alerts => "alerts",
            TableKind::Nic => "nic",
            TableKind::Qps => "qps",
        }
    }
    fn alert(&mut self, a: &Alert, run: &RunInfo) {
        if self.kind == TableKind::Alerts {
            self.rows.push(a.row(&run.host, run.source));
        }
    }
    fn interval(&mut self, r: &IntervalRows<'_>) -> Result<(), OutputError> {
        match self.kind {
            TableKind::Flows => self.writer.write(r.flows, r.start_ns),
            TableKind::Interfaces => self.writer.write(r.interfaces, r.start_ns),
            TableKind::Alerts | TableKind::Nic | TableKind::Qps => Ok(()),
        }
    }
    fn nic(&mut self, rows: &RecordBatch, t_ns: u64) -> Result<(), OutputError> {
        match self.kind {
            TableKind::Nic => self.writer.write(rows, t_ns),
            _ => Ok(()),
        }
    }
    fn qps(&mut self, rows: &RecordBatch, t_ns: u64) -> Result<(), OutputError> {
        match self.kind {
            TableKind::Qps => self.writer.write(rows, t_ns),
            _ => Ok(()),
        }
    }
    fn end_interval(&mut self, t_ns: u64) -> Result<(), OutputError> {
        match self.kind {
            TableKind::Alerts => self.write_alert_rows(t_ns),
            _ => Ok(()),
        }
    }
    fn finish(&mut self, t_ns: u64) -> Result<(), OutputError> {
        if self.kind == TableKind::Alerts {
            self.write_alert_rows(t_ns)?;
        }
        self.writer.finish().inspect_err(|e| {
            tracing::error!(table = self.name(), error = %contract::error::chain(e), pending_files = self.writer.pending_files(), "could not write the last files");
        })
    }
    fn stats(&self) -> Option<Value> {
        let t = &self.writer;
        Some(
            json!({"files": t.stats.files, "rows": t.stats.rows, "bytes": t.stats.bytes,
               "write_errors": t.stats.write_errors, "rows_lost": t.stats.rows_lost,
               "pending_files": t.pending_files(), "journal": t.journaling()}),
        )
    }
    fn written_files(&self) -> Vec<PathBuf> {
        self.writer.recent.iter().cloned().collect()
    }
}

/// `alerts.jsonl`: one JSON line per alert, appended as alerts happen.
pub struct JsonlSink {
    writer: JsonlWriter,
}

impl JsonlSink {
    pub fn new(path: PathBuf) -> JsonlSink {
        JsonlSink {
            writer: JsonlWriter::new(path),
        }
    }
}

impl Sink for JsonlSink {
    fn name(&self) -> &'static str {
        "alerts.jsonl"
    }
    fn alert(&mut self, a: &Alert, run: &RunInfo) {
        // straight from the typed view (no `Value` tree per alert)
        match serde_json::to_string(&a.json_view(&run.host, run.source)) {
            Ok(line) => self.writer.push(line),
            Err(e) => tracing::error!(error = %e, "an alert could not be written as JSON"),
        }
    }
    fn flush(&mut self, _t_ns: u64) -> Result<(), OutputError> {
        self.writer.flush()
    }
    fn stats(&self) -> Option<Value> {
        Some(json!({"lines_lost": self.writer.lines_lost}))
    }
}

/// Human (stderr) alert lines per rule per interval; the rest are summarised in one line.
pub const HUMAN_LINES_PER_RULE: u64 = 20;

/// Alert lines on stderr for a person: at most [`HUMAN_LINES_PER_RULE`] per rule per
/// interval, then one line saying how many more are in `alerts.jsonl`.
/// With `json`, each alert is a structured log event instead (`--log-format json`: stderr then
/// carries JSON lines only).
#[derive(Default)]
pub struct StderrSink {
    shown: BTreeMap<Rule, u64>,
    held: BTreeMap<Rule, u64>,
    json: bool,
}

impl StderrSink {
    /// Alerts as structured log events.
    pub fn json() -> StderrSink {
        StderrSink {
            json: true,
            ..Default::default()
        }
    }
}

/// One alert as a structured `tracing` event (target `roce_observe::alert`), every key field
/// its own field.
fn log_alert(a: &Alert, run: &RunInfo) {
    let j = a.json(&run.host, run.source);
    let s = |k: &str| j.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let n = |k: &str| j.get(k).and_then(Value::as_u64);
    let msg = a.message();
    macro_rules! ev {
        ($lvl:ident) => {
            tracing::$lvl!(target: "roce_observe::alert", rule = a.rule.name(),
                severity = a.severity.as_str(), iface = %s("iface"), dir = %s("dir"),
                point = %s("point"), class = %s("class"), src = %s("src"), dst = %s("dst"),
                qp = n("qp"), qp_hex = %s("qp_hex"), priority = n("priority"),
                subject = %s("subject"), observed = %a.observed, expected = %a.expected,
                count = a.count, summary = a.summary, origin = a.origin,
                first_time = %s("first_time"), "{msg}")
        };
    }
    match a.severity {
        contract::alert::Severity::Critical => ev!(error),
        contract::alert::Severity::Warning => ev!(warn),
        contract::alert::Severity::Info => ev!(info),
    }
}

impl Sink for StderrSink {
    fn name(&self) -> &'static str {
        "stderr"
    }
    fn alert(&mut self, a: &Alert, run: &RunInfo) {
        if self.json {
            log_alert(a, run);
            return;
        }
        let shown = self.shown.entry(a.rule).or_default();
        *shown += 1;
        if *shown > HUMAN_LINES_PER_RULE {
            *self.held.entry(a.rule).or_default() += 1;
        } else {
            let line = format!(
                "{} {:<8} {}",
                rfc3339(a.time_ns),
                a.severity.as_str().to_uppercase(),
                a.message()
            );
            // an alert names an interface: its control characters as text
            eprintln!("{}", contract::error::visible(&line));
        }
    }
    fn end_interval(&mut self, t_ns: u64) -> Result<(), OutputError> {
        for (rule, n) in std::mem::take(&mut self.held) {
            if self.json {
                continue;
            }
            eprintln!(
                "{} {:<8} {rule}: {n} more alerts on other keys not shown here (see alerts.jsonl)",
                rfc3339(t_ns),
                rule.severity().as_str().to_uppercase()
            );
        }
        self.shown.clear();
        Ok(())
    }
}
