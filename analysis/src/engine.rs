//! The query engine: Apache DataFusion over the Parquet tables of one or many output trees.
//!
//! [`Engine::open`] finds every final `*.parquet` file of the tables `flows`, `interfaces`,
//! `alerts` and `nic` below each tree (the walker of [`crate::load`]: no symbolic links to
//! directories, bounded depth), leaves out the Hive partitions (`date=D/hour=H`) that the time
//! filters exclude, checks each remaining file's footer and columns (a corrupt or foreign file
//! is an error naming it before any query runs), and registers one table per name over those
//! files (a `FileTable` per tree, their union with the tree's position on the command line as
//! column `tree`). The filters (`--since`, `--until`, `--host`, `--iface`, `--qp`, `--src`,
//! `--dst`) are the tables' views, so every query sees only the selected rows and DataFusion
//! prunes row groups by their statistics. Memory is bounded by a memory pool (`--memory-limit`);
//! sorts and aggregations beyond it spill to a temporary directory; hash joins cannot, so the
//! queries build them on their small side.
//!
//! The report's queries are the `.sql` files under `analysis/sql` (compiled in), run after the
//! engine's views (generated from the schema in DataFusion's dialect, [`crate::sql_views`]): the
//! checks and report queries with their `${name}` parameters substituted ([`render`]).

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use contract::schema;
use datafusion::catalog::Session;
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingTableUrl, PartitionedFile};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::TableProviderFilterPushDown;
use datafusion::object_store::ObjectMeta;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{Expr, SessionConfig, SessionContext, col, lit};

use crate::load::{self, LoadError};

/// The tables registered, by name, with their definitions.
pub fn tables() -> [(&'static str, &'static schema::Table); 5] {
    [
        ("flows", schema::flows()),
        ("interfaces", schema::interfaces()),
        ("alerts", schema::alerts()),
        ("nic", schema::nic()),
        ("qps", schema::qps()),
    ]
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("query failed: {what}")]
    Query {
        what: String,
        #[source]
        err: datafusion::error::DataFusionError,
    },
    #[error("the query engine panicked: {0}")]
    Panicked(String),
    #[error("cannot start the query engine")]
    Runtime(#[source] std::io::Error),
    #[error("invalid {what}: {msg}")]
    Filter { what: &'static str, msg: String },
    #[error("the tables changed while they were read: {0}")]
    Changed(String),
    #[error("SQL template {name}: parameter ${{{param}}} has no value")]
    Template { name: String, param: String },
    /// Filters that leave no row of a tree that has rows: a typo is not a clean fabric.
    #[error(
        "the filters {filters} select no row of the trees ({rows} rows of flows and interfaces without them){hint}"
    )]
    NothingSelected {
        filters: String,
        rows: usize,
        hint: String,
    },
    /// A user's query that would read or write files it is not allowed to ([`FileAccess`]).
    #[error("refused: {0}")]
    Refused(String),
}

/// What a user's query (`roce-analyze sql`) may do with files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileAccess {
    /// Only the given trees' tables, read-only: no `CREATE EXTERNAL TABLE`, no `COPY`, no
    /// `INSERT` / `UPDATE` / `DELETE` (in-memory views and tables are fine).
    #[default]
    TreesOnly,
    /// Other files may be read (`CREATE EXTERNAL TABLE`) and written (`COPY ... TO`,
    /// `INSERT INTO` an external table), never inside a given tree.
    Files,
}

/// Which rows the tables show (every filter optional; several values of one filter: any).
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// Rows whose interval ends after this time (µs since the epoch).
    pub since_us: Option<i64>,
    /// Rows whose interval starts before this time (µs since the epoch).
    pub until_us: Option<i64>,
    pub hosts: Vec<String>,
    pub ifaces: Vec<String>,
    pub qps: Vec<i64>,
    pub srcs: Vec<String>,
    pub dsts: Vec<String>,
}

impl Filters {
    /// The filters given, as on the command line (`--host h1 --qp 0x11`); empty when none.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let t = crate::time::fmt_us;
        if let Some(s) = self.since_us {
            parts.push(format!("--since {}", t(s)));
        }
        if let Some(u) = self.until_us {
            parts.push(format!("--until {}", t(u)));
        }
        for (flag, vs) in [
            ("--host", &self.hosts),
            ("--iface", &self.ifaces),
            ("--src", &self.srcs),
            ("--dst", &self.dsts),
        ] {
            parts.extend(vs.iter().map(|v| format!("{flag} {v}")));
        }
        parts.extend(self.qps.iter().map(|q| format!("--qp 0x{q:06x}")));
        parts.join(" ")
    }
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bytes the queries may hold in memory (sorts, joins and aggregations spill beyond it).
    pub memory_limit: usize,
    /// Threads executing a query.
    pub threads: usize,
    /// Files of at most this many rows are decoded once at open and kept in memory, while they
    /// fit in a quarter of `memory_limit` ([`RESIDENT_MAX_ROWS`]; 0: every file is scanned by
    /// every query).
    pub resident_max_rows: u64,
    /// Bytes those rows may take (`None`: a quarter of `memory_limit`, taken from the queries'
    /// pool).
    pub resident_budget: Option<usize>,
    /// Trees without flow logs are read (a hardware-RoCE host's: its NIC and QP tables only;
    /// `roce-analyze hosts`); a tree must still have one table with files.
    pub flows_optional: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memory_limit: 512 << 20,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get().min(8)),
            resident_max_rows: RESIDENT_MAX_ROWS,
            resident_budget: None,
            flows_optional: false,
        }
    }
}

/// Set while a query runs ([`load::QUERYING`]).
use load::QUERYING;

pub struct Engine {
    ctx: SessionContext,
    rt: tokio::runtime::Runtime,
    /// The files registered per table, with the position of their tree in [`Engine::dirs`].
    pub files: BTreeMap<&'static str, Vec<(usize, PathBuf)>>,
    /// Of [`Engine::files`], those the queries scan (the others are [`Engine::resident`]).
    scanned: BTreeMap<&'static str, Vec<(usize, PathBuf)>>,
    /// The rows of the small files, decoded at open, per table and tree, in the table's
    /// (nullable) schema.
    resident: BTreeMap<(&'static str, usize), Vec<RecordBatch>>,
    /// Bytes the resident rows take (counted against `--memory-limit`).
    pub resident_bytes: usize,
    /// Files left out because their partition lies outside the time filter.
    pub pruned_files: usize,
    pub dirs: Vec<PathBuf>,
}

/// The UTC `[start, end)` of a Hive partition path `.../date=YYYY-MM-DD/hour=HH/...`, µs.
fn partition_range(rel: &Path) -> Option<(i64, i64)> {
    let (mut date, mut hour) = (None, None);
    for c in rel.components() {
        let c = c.as_os_str().to_str()?;
        if let Some(d) = c.strip_prefix("date=") {
            date = Some(d.to_string());
        } else if let Some(h) = c.strip_prefix("hour=") {
            hour = h.parse::<i64>().ok().filter(|h| (0..24).contains(h));
        }
    }
    let day = crate::time::days_from_date(&date?)?;
    let start = (day * 86_400 + hour.unwrap_or(0) * 3600) * 1_000_000;
    let len = if hour.is_some() { 3600 } else { 86_400 } * 1_000_000;
    Some((start, start + len))
}

/// Whether a partition's rows can fall inside the time filter. A row lies in the partition of
/// its interval's start; its end may be later by up to one interval, taken as at most an hour.
fn partition_wanted(rel: &Path, f: &Filters) -> bool {
    let Some((start, end)) = partition_range(rel) else {
        return true;
    };
    let hour = 3_600_000_000;
    f.until_us.is_none_or(|u| start < u) && f.since_us.is_none_or(|s| end + hour > s)
}

/// An equality filter on a string column (any of `vals`).
fn any_of(column: &str, vals: &[String]) -> Option<Expr> {
    vals.iter()
        .map(|v| col(column).eq(lit(v.as_str())))
        .reduce(|a, b| a.or(b))
}

fn ts(us: i64) -> Expr {
    lit(ScalarValue::TimestampMicrosecond(
        Some(us),
        Some("UTC".into()),
    ))
}

/// The filter of one table (`None`: every row).
fn filter_of(table: &str, f: &Filters) -> Option<Expr> {
    let mut parts: Vec<Expr> = Vec::new();
    let (start, end) = match table {
        "alerts" => ("time", "time"),
        "nic" => ("interval_start", "interval_end"),
        _ => ("interval_start", "interval_end"),
    };
    if let Some(s) = f.since_us {
        parts.push(if table == "alerts" {
            col(end).gt_eq(ts(s))
        } else {
            col(end).gt(ts(s))
        });
    }
    if let Some(u) = f.until_us {
        parts.push(col(start).lt(ts(u)));
    }
    parts.extend(any_of("host", &f.hosts));
    // The host's QPs belong to RDMA devices, not to an observed interface: --iface leaves them.
    if table != "qps" {
        parts.extend(any_of("iface", &f.ifaces));
    }
    if matches!(table, "flows" | "alerts") {
        parts.extend(any_of("src", &f.srcs));
        parts.extend(any_of("dst", &f.dsts));
        let qps: Vec<Expr> = f
            .qps
            .iter()
            .map(|q| {
                col("qp").eq(lit(if table == "flows" {
                    ScalarValue::Int32(Some(*q as i32))
                } else {
                    ScalarValue::Int64(Some(*q))
                }))
            })
            .collect();
        parts.extend(qps.into_iter().reduce(|a, b| a.or(b)));
    }
    // Interface, NIC and host-QP rows belong to no key: --qp, --src and --dst leave them as
    // they are.
    parts.into_iter().reduce(|a, b| a.and(b))
}

/// Every field nullable, at every depth: columns added later are absent (null) in older files,
/// and other writers (DuckDB, Spark, pyarrow) write list items and struct fields nullable.
fn nullable(s: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        s.fields()
            .iter()
            .map(|f| nullable_field(f))
            .collect::<Vec<_>>(),
    ))
}

fn nullable_field(f: &Field) -> Field {
    let ty = match f.data_type() {
        DataType::List(i) => DataType::List(Arc::new(nullable_field(i))),
        DataType::LargeList(i) => DataType::LargeList(Arc::new(nullable_field(i))),
        DataType::Struct(fs) => {
            DataType::Struct(fs.iter().map(|f| Arc::new(nullable_field(f))).collect())
        }
        t => t.clone(),
    };
    Field::new(f.name(), ty, true)
}

/// Files of at most this many rows are decoded once when the engine opens and kept in memory
/// (the default of [`Options::resident_max_rows`]): scanning a file costs its footer, its schema and a reader per query
/// however few rows it has, and a fleet's tree has tens of thousands of small files.
pub const RESIDENT_MAX_ROWS: u64 = 16_384;
/// Rows per batch of the tables kept in memory.
const RESIDENT_BATCH_ROWS: usize = 8_192;

impl Engine {
    /// Registers the tables of `dirs` (each the `--out` directory of a run) with `filters`.
    pub fn open(
        dirs: &[PathBuf],
        filters: &Filters,
        opts: &Options,
    ) -> Result<Engine, EngineError> {
        let mut seen = std::collections::HashSet::new();
        let mut uniq = Vec::new();
        for d in dirs {
            load::check_dir(d)?;
            let canon = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
            if seen.insert(canon) {
                uniq.push(d.clone());
            }
        }
        let mut files: BTreeMap<&'static str, Vec<(usize, PathBuf)>> = BTreeMap::new();
        let mut scanned: BTreeMap<&'static str, Vec<(usize, PathBuf)>> = BTreeMap::new();
        let mut resident: BTreeMap<(&'static str, usize), Vec<RecordBatch>> = BTreeMap::new();
        // Small files are decoded once here, up to a quarter of the memory limit (taken from the
        // queries' pool); the rest are scanned by each query.
        let budget = opts
            .resident_budget
            .unwrap_or(opts.memory_limit / 4)
            .min(opts.memory_limit);
        let schemas: BTreeMap<&str, SchemaRef> = tables()
            .into_iter()
            .map(|(n, t)| (n, nullable(&t.arrow_schema())))
            .collect();
        let mut used = 0usize;
        let mut pruned = 0;
        // per tree: whether any table has files (flows optional: one must)
        let mut has_tables = vec![false; uniq.len()];
        for (name, table) in tables() {
            let schema = &schemas[name];
            let list = files.entry(name).or_default();
            let scan = scanned.entry(name).or_default();
            for (ti, d) in uniq.iter().enumerate() {
                let root = d.join(name);
                let all = load::parquet_files(&root)?;
                has_tables[ti] |= !all.is_empty();
                if name == "flows" && all.is_empty() && !opts.flows_optional {
                    // every tree must have flow logs: a wrong directory is an error, not nothing
                    return Err(LoadError::Empty(d.clone()).into());
                }
                let wanted: Vec<PathBuf> = all
                    .into_iter()
                    .filter(|p| {
                        let keep = partition_wanted(p.strip_prefix(&root).unwrap_or(p), filters);
                        pruned += usize::from(!keep);
                        keep
                    })
                    .collect();
                let o = open_files(&wanted, table, schema, opts, budget.saturating_sub(used))?;
                for (p, read) in o.files {
                    if !read {
                        scan.push((ti, p.clone()));
                    }
                    list.push((ti, p));
                }
                if !o.batches.is_empty() {
                    used += o.bytes;
                    resident.insert((name, ti), o.batches);
                }
            }
        }
        if let Some(ti) = has_tables.iter().position(|h| !h) {
            return Err(LoadError::NoTables(uniq[ti].clone()).into());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(opts.threads.max(1))
            .thread_name("roce-analyze-query")
            .enable_all()
            .build()
            .map_err(EngineError::Runtime)?;
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(opts.memory_limit.saturating_sub(used).max(16 << 20), 1.0)
            .build_arc()
            .map_err(|err| EngineError::Query {
                what: "memory pool".into(),
                err,
            })?;
        // The trees' tables are `FileTable`s, which never compute per-file statistics; tables
        // made in `roce-analyze sql` (CREATE EXTERNAL TABLE) do not either: DataFusion would
        // compute them for every scan and hold them in its plan (about 15 KiB per file).
        let config = SessionConfig::new()
            .with_collect_statistics(false)
            .with_target_partitions(opts.threads.max(1))
            .with_information_schema(true);
        let ctx = SessionContext::new_with_config_rt(config, runtime);
        let engine = Engine {
            ctx,
            rt,
            files,
            scanned,
            resident,
            resident_bytes: used,
            pruned_files: pruned,
            dirs: uniq,
        };
        engine.register(filters)?;
        Ok(engine)
    }

    fn register(&self, filters: &Filters) -> Result<(), EngineError> {
        let q = |what: &str| {
            let what = what.to_string();
            move |err| EngineError::Query { what, err }
        };
        for (name, table) in tables() {
            let schema = nullable(&table.arrow_schema());
            // one table per tree, then their union with the tree's position as column `tree`
            let mut union: Option<datafusion::dataframe::DataFrame> = None;
            for ti in 0..self.dirs.len().max(1) {
                let paths: Vec<&PathBuf> = self.scanned[name]
                    .iter()
                    .filter(|(t, _)| *t == ti)
                    .map(|(_, p)| p)
                    .collect();
                let part = format!("{name}_tree{ti}");
                let mem = self.resident.get(&(name, ti));
                // the small files' rows, in as many partitions as the query has threads
                let parts = |b: &[RecordBatch]| {
                    let n = self.ctx.copied_config().target_partitions().max(1);
                    let mut p: Vec<Vec<RecordBatch>> = vec![Vec::new(); n.min(b.len()).max(1)];
                    let k = p.len();
                    for (i, b) in b.iter().enumerate() {
                        p[i % k].push(b.clone());
                    }
                    p
                };
                let provider: Arc<dyn TableProvider> = match (paths.is_empty(), mem) {
                    (true, None) => {
                        Arc::new(MemTable::try_new(schema.clone(), vec![vec![]]).map_err(q(name))?)
                    }
                    (true, Some(b)) => {
                        Arc::new(MemTable::try_new(schema.clone(), parts(b)).map_err(q(name))?)
                    }
                    (false, None) => {
                        Arc::new(FileTable::new(schema.clone(), &paths).map_err(q(name))?)
                    }
                    (false, Some(b)) => {
                        // both: the files' table and the resident rows' table, as one
                        let files = format!("{part}_files");
                        let rows = format!("{part}_rows");
                        self.ctx
                            .register_table(
                                &files,
                                Arc::new(FileTable::new(schema.clone(), &paths).map_err(q(name))?),
                            )
                            .map_err(q(name))?;
                        self.ctx
                            .register_table(
                                &rows,
                                Arc::new(
                                    MemTable::try_new(schema.clone(), parts(b)).map_err(q(name))?,
                                ),
                            )
                            .map_err(q(name))?;
                        let a = self
                            .block(self.ctx.table(files.as_str()))
                            .map_err(q(name))?;
                        let b = self.block(self.ctx.table(rows.as_str())).map_err(q(name))?;
                        a.union(b).map_err(q(name))?.into_view()
                    }
                };
                self.ctx.register_table(&part, provider).map_err(q(name))?;
                let mut cols: Vec<Expr> = schema.fields().iter().map(|f| col(f.name())).collect();
                cols.push(lit(ti as i32).alias("tree"));
                let df = self
                    .block(self.ctx.table(part.as_str()))
                    .and_then(|d| d.select(cols))
                    .map_err(q(name))?;
                union = Some(match union {
                    None => df,
                    Some(u) => u.union(df).map_err(q(name))?,
                });
            }
            let mut df = union.expect("at least one tree");
            if let Some(f) = filter_of(name, filters) {
                df = df.filter(f).map_err(q(name))?;
            }
            self.ctx
                .register_table(name, df.into_view())
                .map_err(q(name))?;
        }
        for stmt in statements(crate::sql_views::datafusion()) {
            self.run(&stmt)?;
        }
        Ok(())
    }

    fn block<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Runs one SQL statement and collects its result. A panic inside the engine (the Parquet
    /// decoder on a corrupt page) or a read error is turned into an error naming the file,
    /// found by reading every registered file again on its own.
    pub fn run(&self, sql: &str) -> Result<Vec<RecordBatch>, EngineError> {
        let was = QUERYING.swap(true, Ordering::SeqCst);
        let r = catch_unwind(AssertUnwindSafe(|| {
            self.block(async {
                let df = self.ctx.sql(sql).await?;
                df.collect().await
            })
        }));
        QUERYING.store(was, Ordering::SeqCst);
        match r {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(err)) => {
                if is_data_error(&err) {
                    self.culprit()?;
                }
                Err(EngineError::Query {
                    what: first_line(sql),
                    err,
                })
            }
            Err(payload) => {
                self.culprit()?;
                Err(EngineError::Panicked(panic_message(&payload)))
            }
        }
    }

    /// With filters given (`f`), that they select some row of `flows` or `interfaces` when the
    /// trees have rows there: a misspelt `--host` must not read as a clean fabric.
    pub fn require_rows(&self, f: &Filters) -> Result<(), EngineError> {
        let filters = f.describe();
        if filters.is_empty() {
            return Ok(());
        }
        let b = self
            .run("SELECT (SELECT COUNT(*) FROM flows) + (SELECT COUNT(*) FROM interfaces) AS n")?;
        let selected = b
            .first()
            .and_then(|b| {
                arrow::array::AsArray::as_primitive_opt::<arrow::datatypes::Int64Type>(b.column(0))
            })
            .map_or(0, |c| c.value(0));
        if selected > 0 {
            return Ok(());
        }
        let mut rows = 0u64;
        for dir in &self.dirs {
            for t in ["flows", "interfaces"] {
                for p in load::parquet_files(&dir.join(t))? {
                    rows += load::row_count(&p)?;
                }
            }
        }
        if rows == 0 {
            return Ok(());
        }
        Err(EngineError::NothingSelected {
            filters,
            rows: rows as usize,
            hint: ": check the spelling (`roce-analyze sql -d DIR \"SELECT DISTINCT host, iface \
                   FROM interfaces\"` lists hosts and interfaces)"
                .into(),
        })
    }

    /// Runs one statement of a user's query, after checking what it does with files against
    /// `access`: with [`FileAccess::TreesOnly`] it only reads the given trees; with
    /// [`FileAccess::Files`] it may read and write other files, but never a path inside a
    /// given tree (nothing ever writes a tree).
    pub fn run_user(&self, sql: &str, access: FileAccess) -> Result<Vec<RecordBatch>, EngineError> {
        let plan = self
            .block(self.ctx.state().create_logical_plan(sql))
            .map_err(|err| EngineError::Query {
                what: first_line(sql),
                err,
            })?;
        self.check_access(&plan, access)?;
        self.run(sql)
    }

    fn check_access(
        &self,
        plan: &datafusion::logical_expr::LogicalPlan,
        access: FileAccess,
    ) -> Result<(), EngineError> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        use datafusion::logical_expr::{DdlStatement, LogicalPlan, WriteOp};
        let hint = "pass --allow-files to let a query read or write files other than the trees";
        let mut refused = None;
        plan.apply_with_subqueries(|n| {
            let why = match (n, access) {
                (LogicalPlan::Ddl(DdlStatement::CreateExternalTable(c)), FileAccess::TreesOnly) => {
                    Some(format!(
                        "CREATE EXTERNAL TABLE reads {}: {hint}",
                        c.locations.join(", ")
                    ))
                }
                (LogicalPlan::Ddl(DdlStatement::CreateExternalTable(c)), FileAccess::Files) => {
                    c.locations.iter().find_map(|l| {
                        self.inside_tree(l).map(|d| {
                            format!(
                                "CREATE EXTERNAL TABLE over {l} inside the tree {} (its tables \
                                 are registered already; a table over it could be written)",
                                d.display()
                            )
                        })
                    })
                }
                (LogicalPlan::Copy(c), FileAccess::TreesOnly) => {
                    Some(format!("COPY writes {}: {hint}", c.output_url))
                }
                (LogicalPlan::Copy(c), FileAccess::Files) => {
                    self.inside_tree(&c.output_url).map(|d| {
                        format!(
                            "COPY would write {} inside the tree {}: roce-analyze never writes a tree",
                            c.output_url,
                            d.display()
                        )
                    })
                }
                (LogicalPlan::Dml(d), FileAccess::TreesOnly)
                    if !matches!(d.op, WriteOp::Ctas) =>
                {
                    Some(format!("{} INTO {} writes a table: {hint}", d.op, d.table_name))
                }
                _ => None,
            };
            match why {
                Some(w) => {
                    refused = Some(w);
                    Ok(TreeNodeRecursion::Stop)
                }
                None => Ok(TreeNodeRecursion::Continue),
            }
        })
        .map_err(|err| EngineError::Query {
            what: "checking the query's file access".into(),
            err,
        })?;
        refused.map_or(Ok(()), |w| Err(EngineError::Refused(w)))
    }

    /// The given tree that `location` (a path or `file://` URL) lies in, if any: compared after
    /// resolving symbolic links and `..` as far as the path exists.
    fn inside_tree(&self, location: &str) -> Option<&PathBuf> {
        let p = Path::new(location.strip_prefix("file://").unwrap_or(location));
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir().ok()?.join(p)
        };
        let resolved = resolve(&p);
        self.dirs.iter().find(|d| {
            let d = std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf());
            resolved.starts_with(&d)
        })
    }

    /// Reads every registered file completely, each on its own: the first that fails is the
    /// error ([`LoadError`] names it).
    fn culprit(&self) -> Result<(), EngineError> {
        for (name, table) in tables() {
            for (_, p) in &self.files[name] {
                load::read_all(p, table)?;
            }
        }
        Ok(())
    }

    /// Files registered, all tables.
    pub fn file_count(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }

    /// Of the files registered, those each query scans (the others were read at open).
    pub fn scanned_count(&self) -> usize {
        self.scanned.values().map(Vec::len).sum()
    }
}

/// What [`open_files`] found: every file in order with whether its rows were read, and those
/// rows in batches of about [`RESIDENT_BATCH_ROWS`].
#[derive(Default)]
struct Opened {
    files: Vec<(PathBuf, bool)>,
    batches: Vec<RecordBatch>,
    /// Bytes the batches take.
    bytes: usize,
}

/// Small batches concatenated as they come (a one-row file's batch takes kilobytes of buffers
/// of its own; concatenated, its row takes its bytes).
struct Merger<'a> {
    schema: &'a SchemaRef,
    done: Opened,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pending_bytes: usize,
}

impl<'a> Merger<'a> {
    fn new(schema: &'a SchemaRef) -> Self {
        Merger {
            schema,
            done: Opened::default(),
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
        }
    }

    /// Bytes held, concatenated and pending.
    fn used(&self) -> usize {
        self.done.bytes + self.pending_bytes
    }

    fn push(&mut self, b: RecordBatch) -> Result<(), arrow::error::ArrowError> {
        if b.num_rows() == 0 {
            return Ok(());
        }
        self.pending_rows += b.num_rows();
        self.pending_bytes += b.get_array_memory_size();
        self.pending.push(b);
        if self.pending_rows >= RESIDENT_BATCH_ROWS || self.pending.len() >= 256 {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), arrow::error::ArrowError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let m = arrow::compute::concat_batches(self.schema, &self.pending)?;
        self.done.bytes += m.get_array_memory_size();
        self.done.batches.push(m);
        self.pending.clear();
        self.pending_rows = 0;
        self.pending_bytes = 0;
        Ok(())
    }
}

/// The files `paths` of `table` checked ([`load::open_file`]) on `opts.threads` threads, each
/// with a contiguous share of the files and of `budget`; each small file's rows decoded,
/// conformed to `schema` and concatenated while its thread's share of `budget` lasts. Files in
/// the order of `paths`; the first file (in that order) that fails is the error.
fn open_files(
    paths: &[PathBuf],
    table: &'static schema::Table,
    schema: &SchemaRef,
    opts: &Options,
    budget: usize,
) -> Result<Opened, EngineError> {
    if paths.is_empty() {
        return Ok(Opened::default());
    }
    let workers = opts.threads.clamp(1, paths.len());
    let per = paths.len().div_ceil(workers);
    let share = budget / paths.len().div_ceil(per);
    let chunk = |files: &[PathBuf]| -> Result<Opened, LoadError> {
        let mut m = Merger::new(schema);
        for p in files {
            let used = m.used();
            let (_, batches) = load::open_file(p, table, |i| {
                i.rows <= opts.resident_max_rows && used.saturating_add(i.bytes as usize) <= share
            })?;
            let read = batches.is_some();
            for b in batches.into_iter().flatten() {
                let b = load::conform(&b, schema, p)?;
                m.push(b).map_err(|err| LoadError::Arrow {
                    path: p.clone(),
                    err,
                })?;
            }
            m.done.files.push((p.clone(), read));
        }
        m.flush().map_err(|err| LoadError::Arrow {
            path: files.last().cloned().unwrap_or_default(),
            err,
        })?;
        Ok(m.done)
    };
    let parts: Vec<std::thread::Result<Result<Opened, LoadError>>> = std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .chunks(per)
            .map(|c| {
                // a thread that cannot be started: its files on this one
                std::thread::Builder::new()
                    .name("roce-analyze-open".into())
                    .spawn_scoped(s, move || chunk(c))
                    .map_err(|_| chunk(c))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join(),
                Err(done) => Ok(done),
            })
            .collect()
    });
    let mut out = Opened::default();
    for p in parts {
        match p {
            Ok(Ok(o)) => {
                out.files.extend(o.files);
                out.batches.extend(o.batches);
                out.bytes += o.bytes;
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(payload) => return Err(EngineError::Panicked(panic_message(&payload))),
        }
    }
    Ok(out)
}

/// Whether a DataFusion error comes from reading data (not from the query's text or plan).
fn is_data_error(e: &datafusion::error::DataFusionError) -> bool {
    use datafusion::error::DataFusionError as E;
    match e {
        E::ParquetError(_)
        | E::ArrowError(..)
        | E::IoError(_)
        | E::External(_)
        | E::ObjectStore(_) => true,
        E::Context(_, inner) | E::Diagnostic(_, inner) => is_data_error(inner),
        E::Shared(inner) => is_data_error(inner),
        _ => false,
    }
}

fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

fn first_line(sql: &str) -> String {
    let l = sql
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("--"))
        .unwrap_or("");
    if l.len() > 80 {
        format!("{}...", &l[..l.floor_char_boundary(80)])
    } else {
        l.to_string()
    }
}

/// The statements of a SQL file: comment lines dropped, split at `;` (the files have no `;`
/// inside strings).
pub fn statements(text: &str) -> Vec<String> {
    let body: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    body.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Substitutes every `${name}` of a query template, its comment lines dropped (a parameter in a
/// comment would otherwise put a query into the comment's line); a parameter without a value is
/// an error.
pub fn render(
    name: &str,
    template: &str,
    params: &BTreeMap<&str, String>,
) -> Result<String, EngineError> {
    let template: String = template
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut out = String::with_capacity(template.len());
    let mut rest = template.as_str();
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(j) = after.find('}') else {
            return Err(EngineError::Template {
                name: name.into(),
                param: after.chars().take(20).collect(),
            });
        };
        let p = &after[..j];
        let v = params.get(p).ok_or_else(|| EngineError::Template {
            name: name.into(),
            param: p.into(),
        })?;
        out.push_str(v);
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A string literal in SQL (quotes doubled).
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// One tree's files of one table, as DataFusion reads them: the files the walker found and
/// checked (no listing of directories at query time) split into `target_partitions` groups, each
/// scanned by DataFusion's Parquet reader (row groups pruned by the filters pushed down to it,
/// columns missing from older files read as null).
///
/// Not a `ListingTable`: that keeps a statistics value for every column of every file in each
/// scan's plan (about 14 KiB per file, even when statistics are not collected), and the queries
/// scan the flows many times (once per histogram): at 3,700 files that was 0.2-0.4 GiB of
/// plans. Here a file costs its path and size.
#[derive(Debug)]
struct FileTable {
    schema: SchemaRef,
    /// The files (object store location and size), in the walker's order.
    files: Vec<ObjectMeta>,
}

impl FileTable {
    fn new(schema: SchemaRef, paths: &[&PathBuf]) -> datafusion::error::Result<Self> {
        let mut files = Vec::with_capacity(paths.len());
        for p in paths {
            let url = ListingTableUrl::parse(p.to_string_lossy())?;
            let size = std::fs::metadata(p)
                .map_err(datafusion::error::DataFusionError::IoError)?
                .len();
            files.push(ObjectMeta {
                location: url.prefix().clone(),
                last_modified: chrono::DateTime::<chrono::Utc>::default(),
                size,
                e_tag: None,
                version: None,
            });
        }
        Ok(Self { schema, files })
    }
}

#[async_trait::async_trait]
impl TableProvider for FileTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::error::Result<Vec<TableProviderFilterPushDown>> {
        // Inexact: the filter stays above the scan; the Parquet reader gets it too and skips
        // the row groups whose statistics rule it out.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let format = ParquetFormat::default().with_options(state.table_options().parquet.clone());
        let source = format.file_source(TableSchema::from(Arc::clone(&self.schema)));
        // contiguous chunks, as many as the session's target partitions
        let n = state
            .config()
            .target_partitions()
            .clamp(1, self.files.len().max(1));
        let per = self.files.len().div_ceil(n).max(1);
        let groups: Vec<FileGroup> = self
            .files
            .chunks(per)
            .map(|c| FileGroup::new(c.iter().map(|m| PartitionedFile::from(m.clone())).collect()))
            .collect();
        let conf = FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), source)
            .with_file_groups(groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .build();
        format.create_physical_plan(state, conf).await
    }
}

/// `p` with its longest existing ancestor canonicalized (symbolic links, `..`) and the rest
/// appended with `.` and `..` applied.
fn resolve(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = p.to_path_buf();
    let base = loop {
        if let Ok(c) = std::fs::canonicalize(&cur) {
            break c;
        }
        match (cur.file_name().map(|n| n.to_os_string()), cur.parent()) {
            (Some(n), Some(parent)) => {
                rest.push(n);
                cur = parent.to_path_buf();
            }
            _ => break cur,
        }
    };
    let mut out = base;
    for n in rest.into_iter().rev() {
        match n.to_str() {
            Some("..") => {
                out.pop();
            }
            Some(".") => {}
            _ => out.push(n),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_substitute_every_parameter_or_fail() {
        let mut p = BTreeMap::new();
        p.insert("top", "5".to_string());
        assert_eq!(
            render("t", "-- ${top} rows\nLIMIT ${top}", &p).unwrap(),
            "LIMIT 5\n"
        );
        let e = render("t.sql", "x ${nope} y", &p).unwrap_err().to_string();
        assert!(e.contains("t.sql") && e.contains("${nope}"), "{e}");
        assert!(render("t", "x ${unclosed", &p).is_err());
    }

    #[test]
    fn statements_split_and_drop_comments() {
        let s = statements("-- a; b\nCREATE VIEW a AS SELECT 1;\n\n-- c\nSELECT 2;\n");
        assert_eq!(s, vec!["CREATE VIEW a AS SELECT 1", "SELECT 2"]);
    }

    #[test]
    fn partitions_outside_the_time_filter_are_left_out() {
        let f = Filters {
            since_us: Some(crate::time::parse_time("2026-11-21T05:30:00Z").unwrap()),
            until_us: Some(crate::time::parse_time("2026-11-21T07:00:00Z").unwrap()),
            ..Filters::default()
        };
        let w = |p: &str| partition_wanted(Path::new(p), &f);
        assert!(w("date=2026-11-21/hour=05/f.parquet"));
        assert!(w("date=2026-11-21/hour=06/f.parquet"));
        assert!(!w("date=2026-11-21/hour=07/f.parquet"));
        // an hour before since: its last intervals may end inside the range
        assert!(w("date=2026-11-21/hour=04/f.parquet"));
        assert!(!w("date=2026-11-21/hour=03/f.parquet"));
        assert!(!w("date=2026-11-20/hour=23/f.parquet"));
        // not a partition path: kept
        assert!(w("f.parquet"));
        assert!(w("date=garbage/hour=05/f.parquet"));
    }
}
