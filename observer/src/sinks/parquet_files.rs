//! Rotating Parquet writers with Hive-style partitions, and the `alerts.jsonl` appender.
//!
//! A table's rows go into a Parquet file (zstd-compressed column chunks) that is written to disk
//! as its row groups are encoded, as `.journal/<name>.<pid>.part` ([`Spool`]): memory holds the
//! row group being encoded, not the window, so it does not grow with the intervals of a window.
//! When the file is complete (rotation by data time, by size, on an hour change, or at the end)
//! it is fsynced and renamed to `<table>/date=D/hour=H/<name>.parquet`. So every file under its
//! final name is complete and readable, and a SIGKILL loses at most the interval being read
//! (the crash [`Journal`] has the open window's rows). Bytes the disk does not take (disk full,
//! unwritable directory) are kept in memory, in order, and written at the next attempt; a
//! completed file that cannot be put in place is kept whole in memory and retried on the next
//! interval (up to [`MAX_PENDING_BYTES`]; beyond that the oldest pending file is dropped and
//! its rows counted as lost).

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
use parquet::basic::{Compression, Encoding, Type as PhysicalType, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// Completed files waiting for a writable disk, bytes, per table.
pub const MAX_PENDING_BYTES: usize = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot write {path}: {err}")]
    Io {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("parquet encoding of table {table}: {err}")]
    Parquet {
        table: String,
        #[source]
        err: parquet::errors::ParquetError,
    },
    #[error("building the {table} rows: {err}")]
    Arrow {
        table: String,
        #[source]
        err: arrow::error::ArrowError,
    },
}

/// UTC civil date (year, month, day) of a day count since 1970-01-01 (H. Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `(date=YYYY-MM-DD, hour=HH, compact YYYYMMDDTHHMMSSZ)` of a UNIX time in ns.
pub fn utc_parts(ns: u64) -> (String, String, String) {
    let s = (ns / 1_000_000_000) as i64;
    let (y, mo, d) = civil_from_days(s.div_euclid(86_400));
    let sod = s.rem_euclid(86_400);
    let (h, mi, se) = (sod / 3600, (sod / 60) % 60, sod % 60);
    (
        format!("{y:04}-{mo:02}-{d:02}"),
        format!("{h:02}"),
        format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{se:02}Z"),
    )
}

/// RFC 3339 UTC with milliseconds.
pub fn rfc3339(ns: u64) -> String {
    let (date, hour, _) = utc_parts(ns);
    let s = ns / 1_000_000_000;
    format!(
        "{date}T{hour}:{:02}:{:02}.{:03}Z",
        (s / 60) % 60,
        s % 60,
        (ns / 1_000_000) % 1000
    )
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Files renamed to their final name.
    pub files: u64,
    /// Rows in those files.
    pub rows: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Failed attempts to write a completed file.
    pub write_errors: u64,
    /// Rows dropped because too much was pending on an unwritable disk.
    pub rows_lost: u64,
}

struct OpenFile {
    writer: ArrowWriter<Spool>,
    start_ns: u64,
    date: String,
    hour: String,
    /// The final file's directory and name, chosen when the window opens (the journal is named
    /// after it, so a recovery can tell whether the file was completed).
    dir: PathBuf,
    name: String,
    rows: u64,
    journal: Option<Journal>,
}

struct Finished {
    dir: PathBuf,
    name: String,
    data: Vec<u8>,
    rows: u64,
    /// Deleted once the file is in place.
    journal: Option<PathBuf>,
}

/// Bytes of an open window's Parquet file are written to disk in pieces of at least this size.
const SPOOL_CHUNK: usize = 1 << 20;

/// Where an open window's Parquet bytes go: the part file `.journal/<name>.<pid>.part`, written
/// whenever [`SPOOL_CHUNK`] bytes are waiting and at every interval's write (the Parquet writer
/// hands over a row group's bytes when the row group is complete, and the footer at the end;
/// the row group being encoded stays in memory). A write the disk refuses keeps
/// the bytes, in order, for the next interval's attempt ([`Spool::retry`]): the Parquet writer never sees
/// an error, and the error is reported once ([`Spool::take_error`]). So the bytes in memory are
/// those the disk has not taken yet, at most the window's (bounded by the size rotation).
struct Spool {
    path: PathBuf,
    /// Created at the first write that has bytes to put in it.
    file: Option<File>,
    /// Bytes in the part file.
    on_disk: u64,
    /// Bytes after them, not written yet.
    held: Vec<u8>,
    /// The last failure, until reported.
    error: Option<std::io::Error>,
    /// A write failed: the next attempt waits for [`Spool::retry`] (the next interval), not
    /// the Parquet writer's next piece.
    failed: bool,
}

impl Write for Spool {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.held.extend_from_slice(b);
        if self.held.len() >= SPOOL_CHUNK && !self.failed {
            self.drain();
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Spool {
    fn new(path: PathBuf) -> Spool {
        Spool {
            path,
            file: None,
            on_disk: 0,
            held: Vec::new(),
            error: None,
            failed: false,
        }
    }

    /// [`Spool::drain`] after a failure too.
    fn retry(&mut self) -> bool {
        self.failed = false;
        self.drain()
    }

    /// Writes the held bytes to the part file (creating it first). On a failure the bytes not
    /// written stay held and the error is kept for [`Spool::take_error`]. True when none is held.
    fn drain(&mut self) -> bool {
        if self.held.is_empty() {
            return true;
        }
        if self.file.is_none() {
            let created = self
                .path
                .parent()
                .map_or(Ok(()), fs::create_dir_all)
                .and_then(|()| {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .open(&self.path)
                });
            match created {
                Ok(f) => {
                    self.file = Some(f);
                    self.on_disk = 0;
                }
                Err(e) => {
                    self.error = Some(e);
                    self.failed = true;
                    return false;
                }
            }
        }
        let file = self.file.as_mut().expect("created above");
        let mut done = 0;
        while done < self.held.len() {
            match file.write(&self.held[done..]) {
                Ok(0) => {
                    self.error = Some(std::io::ErrorKind::WriteZero.into());
                    self.failed = true;
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.error = Some(e);
                    self.failed = true;
                    break;
                }
            }
        }
        self.held.drain(..done);
        self.on_disk += done as u64;
        self.held.is_empty()
    }

    /// The failure since the last call, if any.
    fn take_error(&mut self) -> Option<std::io::Error> {
        self.error.take()
    }

    /// Puts the complete file in place as `dir/name` (every byte written, fsync, rename, the
    /// directory fsynced) and returns its size; or, when any step fails, removes the part file
    /// and returns the whole file's bytes (read back from the part file, then those held), for
    /// the caller to keep and retry. `Err(None)`: the bytes on disk could not be read back.
    fn complete(mut self, dir: &Path, name: &str) -> Result<u64, Option<Vec<u8>>> {
        let fin = dir.join(name);
        let placed = (|| -> std::io::Result<()> {
            if !self.retry() {
                return Err(self
                    .error
                    .take()
                    .unwrap_or_else(|| std::io::Error::other("bytes left unwritten")));
            }
            let Some(file) = self.file.as_ref() else {
                return Err(std::io::Error::other("no bytes to write"));
            };
            file.sync_all()?;
            fs::create_dir_all(dir)?;
            fs::rename(&self.path, &fin)?;
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })();
        match placed {
            Ok(()) => Ok(self.on_disk),
            Err(e) => {
                tracing::debug!(part = %self.path.display(), error = %e, "part file not put in place; kept in memory");
                let mut data = vec![0u8; self.on_disk as usize];
                let read = match &self.file {
                    Some(f) => {
                        use std::os::unix::fs::FileExt;
                        f.read_exact_at(&mut data, 0)
                    }
                    None => Ok(()),
                };
                let _ = fs::remove_file(&self.path);
                if let Err(e) = read {
                    tracing::error!(part = %self.path.display(), error = %e, "cannot read back a part file");
                    return Err(None);
                }
                data.extend_from_slice(&self.held);
                Err(Some(data))
            }
        }
    }
}

/// The part file of the window that becomes `name`, written by this process.
fn part_of(journals: &Path, name: &str) -> PathBuf {
    journals.join(format!("{name}.{}.part", std::process::id()))
}

/// The rows of an open window, appended durably (fsync) at every interval as an Arrow IPC
/// stream: after a SIGKILL, an OOM kill or a power loss, the next start writes them into the
/// Parquet file the window would have become, so at most the interval being read is lost.
struct Journal {
    path: PathBuf,
    writer: arrow::ipc::writer::StreamWriter<File>,
}

impl Journal {
    fn create(path: PathBuf, schema: &SchemaRef) -> std::io::Result<Journal> {
        if let Some(d) = path.parent() {
            fs::create_dir_all(d)?;
        }
        let f = File::create(&path)?;
        let writer =
            arrow::ipc::writer::StreamWriter::try_new(f, schema).map_err(std::io::Error::other)?;
        Ok(Journal { path, writer })
    }

    /// Appends a batch and makes it durable.
    fn append(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        self.writer.write(batch).map_err(std::io::Error::other)?;
        self.writer.flush().map_err(std::io::Error::other)?;
        self.writer.get_ref().sync_data()
    }
}

/// Where the journals of an output tree are.
fn journal_dir(root: &Path) -> PathBuf {
    root.join(".journal")
}

/// The journal of the window that becomes `name`, written by this process:
/// `<name>.<pid>.journal` (the pid tells a crashed writer's journal from a running one's).
fn journal_of(journals: &Path, name: &str) -> PathBuf {
    journals.join(format!("{name}.{}.journal", std::process::id()))
}

/// What a journal's name says: the final file's name, date and hour directories, and the pid
/// of the process that wrote it.
fn parse_journal_name(file: &str) -> Option<(String, String, String, u32)> {
    let rest = file.strip_suffix(".journal")?;
    let (name, pid) = rest.rsplit_once('.')?;
    let pid: u32 = pid.parse().ok()?;
    let stem = name.strip_suffix(".parquet")?;
    // ...-YYYYMMDDTHHMMSSZ-SEQ
    let (before_seq, _seq) = stem.rsplit_once('-')?;
    let stamp = before_seq.rsplit_once('-')?.1;
    let b = stamp.as_bytes();
    if b.len() != 16
        || b[8] != b'T'
        || b[15] != b'Z'
        || !stamp[..8].bytes().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let date = format!("{}-{}-{}", &stamp[..4], &stamp[4..6], &stamp[6..8]);
    let hour = stamp[9..11].to_string();
    Some((name.to_string(), date, hour, pid))
}

/// Rows recovered from the journals of crashed runs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub files: u64,
    pub rows: u64,
}

/// Writes the journals a crashed run of `table` left under `root` into the Parquet files they
/// would have become, then removes them, and the crashed run's part files (the same windows'
/// Parquet bytes, without a footer). A journal of a process still running is left alone;
/// one whose file was already completed is only removed; a journal cut short by the crash
/// gives the batches written before the cut. Errors name the journal.
pub fn recover_journals(root: &Path, table: &str) -> Result<Recovered, OutputError> {
    let mut out = Recovered::default();
    let dir = journal_dir(root);
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(out);
    };
    let own = std::process::id();
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        if let Some(part) = file.strip_suffix(".part") {
            // a crashed window's Parquet bytes, without a footer: its journal has the rows
            let pid = part
                .rsplit_once('.')
                .and_then(|(_, p)| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && part.starts_with(&format!("{table}-"))
                && (pid == own || !Path::new(&format!("/proc/{pid}")).exists())
            {
                let path = e.path();
                fs::remove_file(&path).map_err(|err| OutputError::Io {
                    path: path.display().to_string(),
                    err,
                })?;
            }
            continue;
        }
        let Some((name, date, hour, pid)) = parse_journal_name(&file) else {
            continue;
        };
        if !name.starts_with(&format!("{table}-")) {
            continue;
        }
        if pid != own && Path::new(&format!("/proc/{pid}")).exists() {
            continue; // another observer's open window
        }
        let target_dir = root
            .join(table)
            .join(format!("date={date}"))
            .join(format!("hour={hour}"));
        let journal = e.path();
        if !target_dir.join(&name).exists() {
            out.rows += write_recovered(&journal, &target_dir, &name)?;
            out.files += 1;
        }
        fs::remove_file(&journal).map_err(|err| OutputError::Io {
            path: journal.display().to_string(),
            err,
        })?;
    }
    Ok(out)
}

/// The batches of one journal into `dir/name` (tmp, fsync, rename). Returns the rows.
fn write_recovered(journal: &Path, dir: &Path, name: &str) -> Result<u64, OutputError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |err| OutputError::Io { path, err }
    };
    let f = File::open(journal).map_err(io(journal))?;
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::BufReader::new(f), None)
        .map_err(|err| OutputError::Arrow {
            table: format!("journal {}", journal.display()),
            err,
        })?;
    let schema = reader.schema();
    // A crash while appending leaves a cut last message: the batches before it are whole.
    let batches: Vec<RecordBatch> = reader.map_while(Result::ok).collect();
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    if rows == 0 {
        return Ok(0);
    }
    let perr = |err| OutputError::Parquet {
        table: format!("recovered {name}"),
        err,
    };
    let mut w = ArrowWriter::try_new(
        Vec::new(),
        schema,
        Some(
            WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap_or_default()))
                .build(),
        ),
    )
    .map_err(perr)?;
    for b in &batches {
        w.write(b).map_err(perr)?;
    }
    let data = w.into_inner().map_err(perr)?;
    fs::create_dir_all(dir).map_err(io(dir))?;
    let fin = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = File::create(&tmp).map_err(io(&tmp))?;
    file.write_all(&data).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    fs::rename(&tmp, &fin).map_err(io(&fin))?;
    tracing::warn!(file = %fin.display(), rows, "recovered a window a crashed run had not completed");
    Ok(rows)
}

/// Encoding of a column without a dictionary, by path and physical type (`None`: dictionary).
type EncodingOf<'a> = &'a dyn Fn(&str, PhysicalType) -> Option<Encoding>;

/// zstd level 1, row groups of up to 128k rows, dictionary encoding (parquet's default) except
/// where `encodings` ([`TableWriter::with_encodings`]) says otherwise.
fn writer_props(schema: &SchemaRef, encodings: Option<EncodingOf>) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap_or_default()))
        .set_max_row_group_row_count(Some(128 * 1024))
        .set_created_by(format!("roce-observe {}", env!("CARGO_PKG_VERSION")));
    if let Some(encoding) = encodings {
        // the Parquet columns ArrowWriter derives from the schema (leaves, with list paths)
        match ArrowSchemaConverter::new().convert(schema) {
            Ok(desc) => {
                for c in desc.columns() {
                    if let Some(e) = encoding(&c.path().string(), c.physical_type()) {
                        b = b
                            .set_column_dictionary_enabled(c.path().clone(), false)
                            .set_column_encoding(c.path().clone(), e);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "Parquet schema not derived; default encodings");
            }
        }
    }
    b.build()
}

/// One table (`flows`, `interfaces`, `alerts`): `<root>/<table>/date=D/hour=H/<table>-<host>-<start>-<seq>.parquet`.
pub struct TableWriter {
    root: PathBuf,
    table: &'static str,
    host: String,
    schema: SchemaRef,
    props: WriterProperties,
    rotate_ns: u64,
    rotate_bytes: u64,
    open: Option<OpenFile>,
    pending: VecDeque<Finished>,
    seq: u64,
    pub stats: WriterStats,
    /// Final paths written, oldest first (the last 64, for tests and the end-of-run log).
    pub recent: VecDeque<PathBuf>,
    /// Journal each window's rows (off for tests of the writer alone).
    journaling: bool,
}

impl TableWriter {
    pub fn new(
        root: &Path,
        table: &'static str,
        host: &str,
        schema: SchemaRef,
        rotate_secs: u64,
        rotate_bytes: u64,
    ) -> TableWriter {
        let props = writer_props(&schema, None);
        TableWriter {
            root: root.to_path_buf(),
            table,
            host: host.to_string(),
            schema,
            props,
            rotate_ns: rotate_secs.max(1).saturating_mul(1_000_000_000),
            rotate_bytes: rotate_bytes.max(4096),
            open: None,
            pending: VecDeque::new(),
            seq: 0,
            stats: WriterStats::default(),
            recent: VecDeque::new(),
            journaling: true,
        }
    }

    /// No journal (a writer whose loss on a crash does not matter, or a test of the writer).
    pub fn without_journal(mut self) -> TableWriter {
        self.journaling = false;
        self
    }

    /// Per-column encodings: `encoding(path, physical type)` (the Parquet column path, e.g.
    /// `pkts`, `opcodes.list.item.pkts`) gives the encoding of a column written without a
    /// dictionary, `None` keeps dictionary encoding (parquet's default).
    pub fn with_encodings(
        mut self,
        encoding: impl Fn(&str, PhysicalType) -> Option<Encoding>,
    ) -> TableWriter {
        self.props = writer_props(&self.schema, Some(&encoding));
        self
    }

    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// Rows in the open (not yet complete) file.
    pub fn open_rows(&self) -> u64 {
        self.open.as_ref().map(|o| o.rows).unwrap_or(0)
    }

    /// Appends `batch`, whose rows belong to the interval starting at `t_ns`, then writes any
    /// completed file. An error means completed files are still pending (kept, retried).
    pub fn write(&mut self, batch: &RecordBatch, t_ns: u64) -> Result<(), OutputError> {
        self.rotate_if_due(t_ns)?;
        let mut spool_error = None;
        if batch.num_rows() > 0 {
            if self.open.is_none() {
                self.open = Some(self.open_window(t_ns)?);
            }
            let o = self.open.as_mut().expect("opened above");
            o.writer.write(batch).map_err(|err| OutputError::Parquet {
                table: self.table.into(),
                err,
            })?;
            // bytes the disk refused before: the next attempt
            let spool = o.writer.inner_mut();
            spool.retry();
            if let Some(err) = spool.take_error() {
                self.stats.write_errors += 1;
                spool_error = Some(OutputError::Io {
                    path: spool.path.display().to_string(),
                    err,
                });
            }
            if let Some(j) = &mut o.journal
                && let Err(e) = j.append(batch)
            {
                // The rows are still written at rotation; only crash safety is lost.
                tracing::error!(table = self.table, journal = %j.path.display(), error = %e, "journal write failed: a crash now would lose this window");
                o.journal = None;
            }
            o.rows += batch.num_rows() as u64;
            let size = o.writer.bytes_written() + o.writer.in_progress_size();
            if size as u64 >= self.rotate_bytes {
                self.close_open()?;
            }
        }
        self.flush_pending()?;
        spool_error.map_or(Ok(()), Err)
    }

    /// Closes the open file when its window has passed or `t_ns` is in another hour.
    pub fn rotate_if_due(&mut self, t_ns: u64) -> Result<(), OutputError> {
        if let Some(o) = &self.open {
            let (date, hour, _) = utc_parts(t_ns);
            if t_ns.saturating_sub(o.start_ns) >= self.rotate_ns || date != o.date || hour != o.hour
            {
                self.close_open()?;
            }
        }
        Ok(())
    }

    fn perr(&self, err: parquet::errors::ParquetError) -> OutputError {
        OutputError::Parquet {
            table: self.table.into(),
            err,
        }
    }

    /// A new window starting at `t_ns`: its Parquet writer, its final name, its journal.
    fn open_window(&mut self, t_ns: u64) -> Result<OpenFile, OutputError> {
        let (date, hour, stamp) = utc_parts(t_ns);
        let dir = self
            .root
            .join(self.table)
            .join(format!("date={date}"))
            .join(format!("hour={hour}"));
        let journals = journal_dir(&self.root);
        let name = loop {
            let n = format!(
                "{}-{}-{}-{:04}.parquet",
                self.table, self.host, stamp, self.seq
            );
            self.seq += 1;
            let taken = dir.join(&n).exists()
                || journal_of(&journals, &n).exists()
                || part_of(&journals, &n).exists()
                || self.pending.iter().any(|p| p.dir == dir && p.name == n);
            if !taken {
                break n;
            }
        };
        let writer = ArrowWriter::try_new(
            Spool::new(part_of(&journals, &name)),
            self.schema(),
            Some(self.props.clone()),
        )
        .map_err(|err| self.perr(err))?;
        let journal = if self.journaling {
            let path = journal_of(&journals, &name);
            Journal::create(path.clone(), &self.schema)
                .inspect_err(|e| {
                    tracing::error!(table = self.table, journal = %path.display(), error = %e, "cannot create the journal: a crash would lose this window");
                })
                .ok()
        } else {
            None
        };
        Ok(OpenFile {
            writer,
            start_ns: t_ns,
            date,
            hour,
            dir,
            name,
            rows: 0,
            journal,
        })
    }

    fn close_open(&mut self) -> Result<(), OutputError> {
        let Some(o) = self.open.take() else {
            return Ok(());
        };
        let journal = o.journal.map(|j| j.path);
        let spool = o.writer.into_inner().map_err(|err| self.perr(err))?;
        let data = match spool.complete(&o.dir, &o.name) {
            Ok(bytes) => {
                self.placed(o.dir.join(&o.name), o.rows, bytes, journal.as_deref());
                return Ok(());
            }
            Err(Some(data)) => data,
            Err(None) => {
                // the journal keeps the rows: the next start writes them
                self.stats.rows_lost += o.rows;
                tracing::error!(table = self.table, file = %o.name, rows = o.rows, "a completed file was lost (its rows stay in the journal for the next start)");
                return Ok(());
            }
        };
        self.pending.push_back(Finished {
            dir: o.dir,
            name: o.name,
            data,
            rows: o.rows,
            journal,
        });
        let mut total: usize = self.pending.iter().map(|p| p.data.len()).sum();
        while total > MAX_PENDING_BYTES && self.pending.len() > 1 {
            let f = self.pending.pop_front().expect("len > 1");
            total -= f.data.len();
            self.stats.rows_lost += f.rows;
            tracing::error!(table = self.table, file = %f.name, rows = f.rows, "output unwritable for too long: dropped a completed file");
        }
        Ok(())
    }

    /// Writes pending completed files (tmp, fsync, rename). Stops at the first failure.
    pub fn flush_pending(&mut self) -> Result<(), OutputError> {
        while let Some(f) = self.pending.front() {
            let fin = f.dir.join(&f.name);
            let tmp = f.dir.join(format!("{}.tmp", f.name));
            let res = (|| -> std::io::Result<()> {
                fs::create_dir_all(&f.dir)?;
                let mut file = File::create(&tmp)?;
                file.write_all(&f.data)?;
                file.sync_all()?;
                fs::rename(&tmp, &fin)?;
                if let Ok(d) = File::open(&f.dir) {
                    let _ = d.sync_all();
                }
                Ok(())
            })();
            if let Err(err) = res {
                let _ = fs::remove_file(&tmp);
                self.stats.write_errors += 1;
                return Err(OutputError::Io {
                    path: fin.display().to_string(),
                    err,
                });
            }
            let f = self.pending.pop_front().expect("front exists");
            self.placed(fin, f.rows, f.data.len() as u64, f.journal.as_deref());
        }
        Ok(())
    }

    /// A file is in place under its final name `fin`: its journal goes, the stats count it.
    fn placed(&mut self, fin: PathBuf, rows: u64, bytes: u64, journal: Option<&Path>) {
        if let Some(j) = journal
            && let Err(e) = fs::remove_file(j)
        {
            tracing::warn!(journal = %j.display(), error = %e, "could not remove a journal whose file is written");
        }
        self.stats.files += 1;
        self.stats.rows += rows;
        self.stats.bytes += bytes;
        if self.recent.len() == 64 {
            self.recent.pop_front();
        }
        self.recent.push_back(fin);
    }

    /// Completes the open file and writes everything pending.
    pub fn finish(&mut self) -> Result<(), OutputError> {
        self.close_open()?;
        self.flush_pending()
    }

    /// Completed files not yet on disk.
    pub fn pending_files(&self) -> usize {
        self.pending.len()
    }
}

/// Appends lines to `alerts.jsonl`; lines that cannot be written are kept (bounded) and retried.
pub struct JsonlWriter {
    path: PathBuf,
    file: Option<File>,
    pending: VecDeque<String>,
    pub lines_lost: u64,
}

impl JsonlWriter {
    pub fn new(path: PathBuf) -> JsonlWriter {
        JsonlWriter {
            path,
            file: None,
            pending: VecDeque::new(),
            lines_lost: 0,
        }
    }

    pub fn push(&mut self, line: String) {
        if self.pending.len() >= 100_000 {
            self.pending.pop_front();
            self.lines_lost += 1;
        }
        self.pending.push_back(line);
    }

    pub fn flush(&mut self) -> Result<(), OutputError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let io = |err| OutputError::Io {
            path: self.path.display().to_string(),
            err,
        };
        // A file deleted since it was opened (or its directory): writing on would put every
        // later alert into an unlinked file. Open the path again.
        if self
            .file
            .as_ref()
            .is_some_and(|f| !same_file(f, &self.path))
        {
            tracing::warn!(path = %self.path.display(), "alerts.jsonl was removed; creating it again");
            self.file = None;
        }
        if self.file.is_none() {
            if let Some(d) = self.path.parent() {
                fs::create_dir_all(d).map_err(io)?;
            }
            self.file = Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .map_err(io)?,
            );
        }
        let mut buf = String::new();
        for l in &self.pending {
            buf.push_str(l);
            buf.push('\n');
        }
        let f = self.file.as_mut().expect("opened above");
        // Each line whole or not at all, and once: a write cut short (disk full) is undone by
        // cutting the file back to where this batch began, and the batch is retried whole.
        let start = f.metadata().map(|m| m.len()).map_err(io)?;
        match f.write_all(buf.as_bytes()).and_then(|_| f.flush()) {
            Ok(()) => {
                self.pending.clear();
                Ok(())
            }
            Err(err) => {
                if let Err(e) = f.set_len(start) {
                    tracing::error!(path = %self.path.display(), error = %e, "could not cut a partly written batch back");
                }
                self.file = None;
                Err(OutputError::Io {
                    path: self.path.display().to_string(),
                    err,
                })
            }
        }
    }
}

/// Whether the open file `f` is still the file at `path` (same device and inode).
fn same_file(f: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from((0..n).collect::<Vec<_>>()))],
        )
        .unwrap()
    }

    /// `n` rows of values that do not compress: 8 bytes a row in the file.
    fn noise(n: i64, from: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let v: Vec<i64> = (from..from + n)
            .map(|i| {
                (i as u64)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .rotate_left(17) as i64
            })
            .collect();
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(v))]).unwrap()
    }

    fn read_back(path: &Path) -> Vec<RecordBatch> {
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            File::open(path).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap()
        .map(|b| b.unwrap())
        .collect()
    }

    /// An open window's Parquet bytes reach its part file as its row groups complete: memory
    /// holds less than a row group and a chunk whatever the window's rows (before, the whole
    /// window's file was assembled in memory until it closed), and the file completes whole.
    #[test]
    fn an_open_window_goes_to_disk_as_its_row_groups_complete() {
        let root = tmpdir("spool");
        let rg = 128 * 1024; // the writer's row group
        let mut w = TableWriter::new(&root, "flows", "h", noise(1, 0).schema(), 3600, 1 << 30);
        let t = 1_795_238_400_000_000_000u64;
        let mut sent = Vec::new();
        for i in 0..6 {
            let b = noise(rg, i * rg);
            w.write(&b, t + i as u64 * 1_000_000_000).unwrap();
            sent.push(b);
            let o = w.open.as_ref().unwrap();
            let spool = o.writer.inner();
            assert!(
                spool.held.len() < SPOOL_CHUNK + 8 * rg as usize,
                "after {} row groups {} bytes held",
                i + 1,
                spool.held.len()
            );
        }
        let o = w.open.as_ref().unwrap();
        let spool = o.writer.inner();
        assert!(spool.on_disk >= 3 << 20, "{} bytes on disk", spool.on_disk);
        assert_eq!(fs::metadata(&spool.path).unwrap().len(), spool.on_disk);
        assert_eq!(w.stats.files, 0, "the window is open");
        let part = spool.path.clone();
        w.finish().unwrap();
        assert_eq!(w.stats.files, 1);
        assert!(!part.exists(), "the part file became the final file");
        let fin = w.recent.back().unwrap().clone();
        assert_eq!(w.stats.bytes, fs::metadata(&fin).unwrap().len());
        let back = read_back(&fin);
        let back = arrow::compute::concat_batches(&back[0].schema(), &back).unwrap();
        let sent = arrow::compute::concat_batches(&sent[0].schema(), &sent).unwrap();
        assert_eq!(back, sent);
        assert_eq!(files(&root), vec![fin], "nothing else left");
        let _ = fs::remove_dir_all(&root);
    }

    /// The part file cannot be created (`.journal` is a file): the bytes are held and the
    /// failure reported; once the disk takes them, the next write writes them, in order. When
    /// the part file stays impossible until the end, the whole file is kept and written in
    /// place from memory. Every row arrives.
    #[test]
    fn refused_part_file_bytes_are_kept_and_written_later() {
        let rg = 128 * 1024;
        let t = 1_795_238_400_000_000_000u64;
        for recovers in [true, false] {
            let root = tmpdir(&format!("spool-refused-{recovers}"));
            fs::create_dir_all(&root).unwrap();
            fs::write(root.join(".journal"), b"not a directory").unwrap();
            let mut w = TableWriter::new(&root, "flows", "h", noise(1, 0).schema(), 3600, 1 << 30);
            let mut sent = Vec::new();
            let mut errors = 0;
            for i in 0..4 {
                let b = noise(rg, i * rg);
                if let Err(e) = w.write(&b, t + i as u64 * 1_000_000_000) {
                    assert!(matches!(e, OutputError::Io { .. }), "{e:?}");
                    errors += 1;
                }
                sent.push(b);
            }
            assert!(errors >= 1, "the refused writes are reported");
            assert_eq!(w.stats.write_errors, errors);
            let held = w.open.as_ref().unwrap().writer.inner().held.len();
            assert!(held >= 3 * 8 * rg as usize, "{held} bytes held");
            if recovers {
                fs::remove_file(root.join(".journal")).unwrap();
                let b = noise(10, 4 * rg);
                w.write(&b, t + 4_000_000_000).unwrap();
                sent.push(b);
                let spool = w.open.as_ref().unwrap().writer.inner();
                assert!(spool.held.len() < SPOOL_CHUNK, "written once possible");
                assert_eq!(fs::metadata(&spool.path).unwrap().len(), spool.on_disk);
            }
            w.finish().unwrap();
            assert_eq!(w.stats.files, 1);
            assert_eq!(w.stats.rows_lost, 0);
            let fin = w.recent.back().unwrap().clone();
            let back = read_back(&fin);
            let back = arrow::compute::concat_batches(&back[0].schema(), &back).unwrap();
            let sent = arrow::compute::concat_batches(&sent[0].schema(), &sent).unwrap();
            assert_eq!(back, sent, "recovers: {recovers}");
            let _ = fs::remove_dir_all(&root);
        }
    }

    /// A crashed run's part files (Parquet bytes without a footer) are removed at the next
    /// start; a running process's and another table's stay.
    #[test]
    fn a_crashed_runs_part_files_are_removed_at_recovery() {
        let root = tmpdir("parts");
        let j = journal_dir(&root);
        fs::create_dir_all(&j).unwrap();
        let name = "flows-h-20261121T053459Z-0000.parquet";
        let dead = j.join(format!("{name}.4999999.part")); // above any pid_max
        let alive = j.join(format!("{name}.1.part"));
        let other = j.join("alerts-h-20261121T053459Z-0000.parquet.4999999.part");
        for p in [&dead, &alive, &other] {
            fs::write(p, b"PAR1 no footer").unwrap();
        }
        assert_eq!(
            recover_journals(&root, "flows").unwrap(),
            Recovered::default()
        );
        assert!(!dead.exists());
        assert!(alive.exists(), "pid 1 runs");
        assert!(other.exists(), "another table's");
        let _ = fs::remove_dir_all(&root);
    }

    fn files(root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p)
                } else {
                    out.push(p)
                }
            }
        }
        out.sort();
        out
    }

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ro-out-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    /// Alerts written after the output directory was deleted reach a new alerts.jsonl instead
    /// of an unlinked file.
    #[test]
    fn alerts_jsonl_is_created_again_when_deleted() {
        let root = tmpdir("jsonl-del");
        let mut w = JsonlWriter::new(root.join("alerts.jsonl"));
        w.push("{\"a\":1}".into());
        w.flush().unwrap();
        fs::remove_dir_all(&root).unwrap();
        w.push("{\"a\":2}".into());
        w.flush().unwrap();
        assert_eq!(
            fs::read_to_string(root.join("alerts.jsonl")).unwrap(),
            "{\"a\":2}\n"
        );
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        // 2026-11-21T05:34:59Z = 1795239299
        assert_eq!(
            utc_parts(1_795_239_299_000_000_000),
            ("2026-11-21".into(), "05".into(), "20261121T053459Z".into())
        );
        assert_eq!(
            rfc3339(1_795_239_299_123_000_000),
            "2026-11-21T05:34:59.123Z"
        );
    }

    #[test]
    fn rotation_by_time_and_hour_with_final_names_only() {
        let root = tmpdir("rot");
        let b = batch(10);
        let mut w = TableWriter::new(&root, "flows", "h1", b.schema(), 60, 1 << 30);
        let t0 = 1_795_239_299_000_000_000u64; // 05:34:59
        for i in 0..5u64 {
            w.write(&b, t0 + i * 20_000_000_000).unwrap(); // every 20 s
        }
        // 0, 20, 40 in the first file; 60 rotates; 80 (05:36:19) in the second
        assert_eq!(w.stats.files, 1);
        assert_eq!(w.open_rows(), 20);
        // hour change closes the second file
        w.write(&b, 1_795_240_800_000_000_000).unwrap(); // 06:00:00
        assert_eq!(w.stats.files, 2);
        w.finish().unwrap();
        assert_eq!(w.stats.files, 3);
        assert_eq!(w.stats.rows, 60);
        let fs = files(&root);
        assert_eq!(fs.len(), 3, "{fs:?}");
        assert!(
            fs.iter().all(|p| p.extension().unwrap() == "parquet"),
            "no tmp left: {fs:?}"
        );
        let s: Vec<String> = fs
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(
            s[0],
            "flows/date=2026-11-21/hour=05/flows-h1-20261121T053459Z-0000.parquet"
        );
        assert_eq!(
            s[2],
            "flows/date=2026-11-21/hour=06/flows-h1-20261121T060000Z-0002.parquet"
        );
        // readable by the parquet reader
        let f = File::open(&fs[0]).unwrap();
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .build()
            .unwrap();
        let rows: usize = r.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 30);
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn flows_encodings_per_column_and_rows_read_back() {
        use crate::sinks::row_builders::{FlowsBuilder, flows_encoding, flows_schema};
        use observer_common::maps::{QpKey, QpValue};
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let root = tmpdir("enc");
        let schema = flows_schema();
        let t = 1_795_238_400_000_000_000u64;
        let mut b = FlowsBuilder::new("h", "live", "e0", t, t + 1_000_000_000);
        for i in 0..5000u32 {
            let k = QpKey {
                dest_qp: i * 7919,
                ..Default::default()
            };
            let mut v = QpValue::ZERO;
            v.pkts = (i % 64) as u64 + 1;
            v.bytes_l2 = v.pkts * 4158;
            v.psn_max_p1 = i * 13 + 1;
            v.last_ns = t + i as u64;
            v.ecn_hist[0][2] = v.pkts as u32;
            v.naks = (i % 1000 == 0) as u64;
            b.push(&k, &v, i == 0, false, 0);
        }
        let batch = b.finish(&schema).unwrap();
        let mut w = TableWriter::new(&root, "flows", "h", schema, 3600, 1 << 30)
            .with_encodings(flows_encoding);
        w.write(&batch, t).unwrap();
        w.finish().unwrap();
        let path = w.recent[0].clone();
        let rd = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        let rg = rd.metadata().row_group(0);
        let enc = |name: &str| {
            let c = (0..rg.num_columns())
                .map(|i| rg.column(i))
                .find(|c| c.column_path().string() == name)
                .unwrap_or_else(|| panic!("no column {name}"));
            c.encodings().collect::<Vec<_>>()
        };
        let has = |d: &str, e: Encoding| enc(d).contains(&e);
        for d in ["pkts", "bytes_udp", "ack_pkts", "opcodes.list.item.pkts"] {
            assert!(has(d, Encoding::RLE_DICTIONARY), "{d}: {:?}", enc(d));
        }
        for d in ["src", "dst"] {
            assert!(has(d, Encoding::RLE_DICTIONARY), "{d}: {:?}", enc(d));
        }
        for d in [
            "qp",
            "psn_max",
            "last_pkt",
            "naks",
            "ecn_data.list.item.value",
        ] {
            assert!(has(d, Encoding::DELTA_BINARY_PACKED), "{d}: {:?}", enc(d));
            assert!(!has(d, Encoding::RLE_DICTIONARY), "{d}: {:?}", enc(d));
        }
        for d in ["host", "source", "iface", "dir"] {
            assert!(has(d, Encoding::PLAIN), "{d}: {:?}", enc(d));
            assert!(!has(d, Encoding::RLE_DICTIONARY), "{d}: {:?}", enc(d));
        }
        // the same rows and the same Arrow schema come back
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            File::open(&path).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        let back: Vec<RecordBatch> = r.map(|b| b.unwrap()).collect();
        let back = arrow::compute::concat_batches(&back[0].schema(), &back).unwrap();
        assert_eq!(back, batch);
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn rotation_by_size() {
        let root = tmpdir("size");
        let b = batch(5000);
        let mut w = TableWriter::new(&root, "flows", "h", b.schema(), 3600, 4096);
        for i in 0..4u64 {
            w.write(&b, 1_795_238_400_000_000_000 + i * 1_000_000_000)
                .unwrap();
        }
        assert!(w.stats.files >= 2, "{:?}", w.stats);
        w.finish().unwrap();
        assert_eq!(w.stats.rows, 20_000);
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn unwritable_directory_keeps_and_retries() {
        let root = tmpdir("unwr");
        fs::create_dir_all(&root).unwrap();
        // a file where the table directory should be: create_dir_all fails, for root too
        fs::write(root.join("flows"), b"x").unwrap();
        let b = batch(3);
        let mut w = TableWriter::new(&root, "flows", "h", b.schema(), 1, 1 << 30);
        let t = 1_795_238_400_000_000_000u64;
        w.write(&b, t).unwrap();
        let e = w.write(&b, t + 2_000_000_000);
        assert!(matches!(e, Err(OutputError::Io { .. })), "{e:?}");
        assert_eq!(w.pending_files(), 1);
        assert_eq!(w.stats.write_errors, 1);
        fs::remove_file(root.join("flows")).unwrap();
        w.finish().unwrap();
        assert_eq!(w.stats.files, 2);
        assert_eq!(w.stats.rows, 6);
        assert_eq!(w.stats.rows_lost, 0);
        let _ = fs::remove_dir_all(&root);
    }
}
