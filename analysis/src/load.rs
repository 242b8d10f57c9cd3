//! Loading the tables: every `*.parquet` (final names only, never `*.parquet.tmp`) below
//! `<dir>/<table>/`, aggregated over all intervals.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Int16Type, Int32Type, Int64Type};
use observer::schema;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path}: not a readable Parquet file")]
    Parquet {
        path: PathBuf,
        #[source]
        err: parquet::errors::ParquetError,
    },
    #[error("{path}: not a readable Parquet file")]
    Arrow {
        path: PathBuf,
        #[source]
        err: arrow::error::ArrowError,
    },
    #[error("{path}: not a roce-observe table")]
    Schema {
        path: PathBuf,
        #[source]
        err: observer::schema::SchemaMismatch,
    },
    #[error("{path}: column {column:?} missing or of an unexpected type")]
    Column { path: PathBuf, column: String },
    #[error("{0}: no flow logs (expected {0}/flows/date=.../hour=.../*.parquet)")]
    Empty(PathBuf),
}

/// Identity of a QP key as written in the flow logs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct QpId {
    pub host: String,
    pub iface: String,
    pub dir: String,
    pub src: String,
    pub dst: String,
    pub qp: i32,
}

/// Totals of one QP key over every interval read.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct QpTotals {
    /// Every Int64 count column of the flows table, summed.
    pub counts: BTreeMap<String, i64>,
    /// Every histogram column (`dscp_data`, `ecn_cnp`, `opcodes`, ...), value -> packets.
    pub hists: BTreeMap<String, BTreeMap<i16, i64>>,
    pub max_udp_payload: i32,
    pub rows: usize,
}

impl QpTotals {
    /// The sum of flows column `name` (every file was checked to have it; a name the schema
    /// does not define panics, so a renamed column fails the tests instead of reading as 0).
    pub fn count(&self, name: &str) -> i64 {
        schema::flows().expect_column(name);
        self.counts.get(name).copied().unwrap_or(0)
    }
    pub fn hist(&self, name: &str) -> BTreeMap<i16, i64> {
        schema::flows().expect_column(name);
        self.hists.get(name).cloned().unwrap_or_default()
    }
}

/// Totals of one interface direction.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IfaceTotals {
    /// Every Int64 column summed (frames, roce, excluded_*, pfc_xoff_p3, pause_frames, ...).
    pub counts: BTreeMap<String, i64>,
    /// Largest XOFF rate per priority seen in one interval (`pfc_xoff_per_s_pN`).
    pub max_xoff_per_s: [f64; 8],
    /// Largest link speed reported.
    pub link_speed_bps: Option<i64>,
    pub rows: usize,
}

impl IfaceTotals {
    /// The sum of interfaces column `name` (as [`QpTotals::count`]).
    pub fn count(&self, name: &str) -> i64 {
        schema::interfaces().expect_column(name);
        self.counts.get(name).copied().unwrap_or(0)
    }
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Dataset {
    pub qps: BTreeMap<QpId, QpTotals>,
    pub ifaces: BTreeMap<(String, String, String), IfaceTotals>,
    /// Alert rows per rule.
    pub alerts: BTreeMap<String, i64>,
    pub files: usize,
}

fn parquet_files(root: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = match std::fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(LoadError::Io { path: d, err }),
        };
        for e in rd {
            let e = e.map_err(|err| LoadError::Io {
                path: d.clone(),
                err,
            })?;
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Every batch of one file, after checking its columns against `table`'s definition.
fn batches(path: &Path, table: &schema::Table) -> Result<Vec<RecordBatch>, LoadError> {
    let f = File::open(path).map_err(|err| LoadError::Io {
        path: path.into(),
        err,
    })?;
    let perr = |err| LoadError::Parquet {
        path: path.into(),
        err,
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(f).map_err(perr)?;
    table
        .check(builder.schema())
        .map_err(|err| LoadError::Schema {
            path: path.into(),
            err,
        })?;
    let r = builder.build().map_err(perr)?;
    r.map(|b| {
        b.map_err(|err| LoadError::Arrow {
            path: path.into(),
            err,
        })
    })
    .collect()
}

fn col_str<'a>(
    b: &'a RecordBatch,
    name: &str,
    path: &Path,
) -> Result<&'a arrow::array::StringArray, LoadError> {
    b.column_by_name(name)
        .and_then(|c| c.as_string_opt::<i32>())
        .ok_or_else(|| LoadError::Column {
            path: path.into(),
            column: name.into(),
        })
}

/// Reads `<dir>/flows`, `<dir>/interfaces` and `<dir>/alerts`.
pub fn load(dir: &Path) -> Result<Dataset, LoadError> {
    let mut ds = Dataset::default();
    let flows = parquet_files(&dir.join("flows"))?;
    if flows.is_empty() {
        return Err(LoadError::Empty(dir.to_path_buf()));
    }
    for path in &flows {
        load_flows(&mut ds, path)?;
    }
    for path in parquet_files(&dir.join("interfaces"))? {
        load_interfaces(&mut ds, &path)?;
    }
    for path in parquet_files(&dir.join("alerts"))? {
        load_alerts(&mut ds, &path)?;
    }
    Ok(ds)
}

/// One flows file: every row added to its QP key's totals.
fn load_flows(ds: &mut Dataset, path: &Path) -> Result<(), LoadError> {
    ds.files += 1;
    for b in batches(path, schema::flows())? {
        let (host, iface, dirc) = (
            col_str(&b, "host", path)?,
            col_str(&b, "iface", path)?,
            col_str(&b, "dir", path)?,
        );
        let (src, dst) = (col_str(&b, "src", path)?, col_str(&b, "dst", path)?);
        let qp = b
            .column_by_name("qp")
            .and_then(|c| c.as_primitive_opt::<Int32Type>())
            .ok_or_else(|| LoadError::Column {
                path: path.to_path_buf(),
                column: "qp".into(),
            })?;
        for row in 0..b.num_rows() {
            let id = QpId {
                host: host.value(row).into(),
                iface: iface.value(row).into(),
                dir: dirc.value(row).into(),
                src: src.value(row).into(),
                dst: dst.value(row).into(),
                qp: qp.value(row),
            };
            let t = ds.qps.entry(id).or_default();
            t.rows += 1;
            for (i, field) in b.schema().fields().iter().enumerate() {
                let c = b.column(i);
                if let Some(a) = c.as_primitive_opt::<Int64Type>() {
                    *t.counts.entry(field.name().clone()).or_default() += a.value(row);
                } else if field.name() == "max_udp_payload" {
                    if let Some(a) = c.as_primitive_opt::<Int32Type>() {
                        t.max_udp_payload = t.max_udp_payload.max(a.value(row));
                    }
                } else if let Some(l) = c.as_list_opt::<i32>() {
                    let items = l.value(row);
                    let Some(st) = items.as_struct_opt() else {
                        continue;
                    };
                    let (Some(v), Some(n)) = (
                        st.column_by_name("value")
                            .and_then(|x| x.as_primitive_opt::<Int16Type>()),
                        st.column_by_name("pkts")
                            .and_then(|x| x.as_primitive_opt::<Int64Type>()),
                    ) else {
                        continue;
                    };
                    let h = t.hists.entry(field.name().clone()).or_default();
                    for j in 0..st.len() {
                        *h.entry(v.value(j)).or_default() += n.value(j);
                    }
                }
            }
        }
    }
    Ok(())
}

/// One interfaces file: every row added to its interface direction's totals.
fn load_interfaces(ds: &mut Dataset, path: &Path) -> Result<(), LoadError> {
    ds.files += 1;
    for b in batches(path, schema::interfaces())? {
        let (host, iface, dirc) = (
            col_str(&b, "host", path)?,
            col_str(&b, "iface", path)?,
            col_str(&b, "dir", path)?,
        );
        for row in 0..b.num_rows() {
            let key = (
                host.value(row).to_string(),
                iface.value(row).to_string(),
                dirc.value(row).to_string(),
            );
            let t = ds.ifaces.entry(key).or_default();
            t.rows += 1;
            for (i, field) in b.schema().fields().iter().enumerate() {
                let c = b.column(i);
                let name = field.name();
                if let Some(a) = c.as_primitive_opt::<Int64Type>() {
                    if a.is_null(row) {
                        continue;
                    }
                    if name == "link_speed_bps" {
                        t.link_speed_bps = t.link_speed_bps.max(Some(a.value(row)));
                    } else {
                        *t.counts.entry(name.clone()).or_default() += a.value(row);
                    }
                } else if let Some(p) = name.strip_prefix("pfc_xoff_per_s_p") {
                    let (Ok(p), Some(a)) = (
                        p.parse::<usize>(),
                        c.as_primitive_opt::<arrow::datatypes::Float64Type>(),
                    ) else {
                        continue;
                    };
                    if p < 8 && !a.is_null(row) {
                        t.max_xoff_per_s[p] = t.max_xoff_per_s[p].max(a.value(row));
                    }
                }
            }
        }
    }
    Ok(())
}

/// One alerts file: alert rows per rule.
fn load_alerts(ds: &mut Dataset, path: &Path) -> Result<(), LoadError> {
    ds.files += 1;
    for b in batches(path, schema::alerts())? {
        let rule = col_str(&b, "rule", path)?;
        for row in 0..b.num_rows() {
            *ds.alerts.entry(rule.value(row).to_string()).or_default() += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    /// A flows file without one of the defined columns is an error naming the file and the
    /// column, not a column of zeros.
    #[test]
    fn a_missing_column_names_file_and_column() {
        let root = std::env::temp_dir().join(format!("ro-load-missing-{}", std::process::id()));
        let dir = root.join("flows/date=2026-11-23/hour=00");
        std::fs::create_dir_all(&dir).unwrap();
        let full = schema::flows().arrow_schema();
        let fields: Vec<Field> = full
            .fields()
            .iter()
            .filter(|f| f.name() != "ce")
            .map(|f| (**f).clone())
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let path = dir.join("flows-h-x-0000.parquet");
        let f = File::create(&path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(f, schema.clone(), None).unwrap();
        w.write(&RecordBatch::new_empty(schema)).unwrap();
        w.close().unwrap();
        let err = load(&root).unwrap_err();
        let text = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(text.contains("flows-h-x-0000.parquet"), "{text}");
        assert!(text.contains("\"ce\""), "{text}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
