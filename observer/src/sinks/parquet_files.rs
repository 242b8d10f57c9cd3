//! Rotating Parquet writers with Hive-style partitions, and the `alerts.jsonl` appender.
//!
//! A table's rows go into a Parquet file (zstd-compressed column chunks) that is written to disk
//! as its row groups are encoded, as `.journal/<name>.<pid>.part` ([`Spool`]): memory holds the
//! row group being encoded, not the window, so it does not grow with the intervals of a window.
//! When the file is complete (rotation by data time, by size, on an hour change, or at the end)
//! it is fsynced and renamed to `<table>/date=D/hour=H/<name>.parquet`. So every file under its
//! final name is complete and readable, and a SIGKILL loses at most the interval being read
//! (the open window's rows are in its checkpointed row groups, [`super::checkpoints`], and,
//! after the last checkpoint, in its crash [`Journal`]). Bytes the disk does not take (disk full,
//! unwritable directory) are kept in memory, in order, and written at the next attempt; a
//! completed file that cannot be put in place is kept whole in memory and retried on the next
//! interval (up to [`MAX_PENDING_BYTES`]; beyond that the oldest pending file is dropped and
//! its rows counted as lost).

use contract::time::utc_parts;
use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
use parquet::basic::{Compression, Encoding, Type as PhysicalType, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::SchemaDescPtr;

use super::checkpoints::{self, CheckpointError, CheckpointLog};

/// Completed files waiting for a writable disk, bytes, per table.
pub const MAX_PENDING_BYTES: usize = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot write {path}")]
    Io {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("parquet encoding of table {table}")]
    Parquet {
        table: String,
        #[source]
        err: parquet::errors::ParquetError,
    },
    #[error("building the {table} rows")]
    Arrow {
        table: String,
        #[source]
        err: arrow::error::ArrowError,
    },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A sink's input rows disagree with the table's definition (a programming error that a
    /// test must catch; never read as zeros).
    #[error(transparent)]
    Column(Box<contract::schema::ColumnError>),
    /// Lines that could not be kept while their file could not be written (the bound of
    /// [`JSONL_PENDING_MAX`] pending lines): said once after they were dropped.
    #[error("{lines} alert lines were lost: {path} could not be written while more than {max} were waiting", max = JSONL_PENDING_MAX)]
    LinesLost { path: String, lines: u64 },
    /// Alerts a push sink dropped from its bounded queue because its receiver could not keep
    /// up: said once per interval in which some were dropped.
    #[error(
        "{dropped} alerts dropped from the queue to {to} ({dropped_total} in all): it does not keep up"
    )]
    AlertsDropped {
        to: String,
        dropped: u64,
        dropped_total: u64,
    },
}

impl From<contract::schema::ColumnError> for OutputError {
    fn from(e: contract::schema::ColumnError) -> OutputError {
        OutputError::Column(Box::new(e))
    }
}

/// An interval of at least this many rows, or one that leaves at least this many in the row
/// group being encoded, cuts the row group there and checkpoints the file
/// ([`super::checkpoints`]) instead of journaling its rows: at 100,000 rows per interval or more
/// every interval is a row group made durable by a few KiB of footer metadata, not a copy of
/// its rows; at fewer the journal holds fewer than this many rows plus an interval's. Smaller
/// row groups would cost readers and the open file's metadata (about 70 KB of memory per row
/// group until the file closes), and a replay of 20,000 keys 5 MB more peak memory at 64k.
pub const CHECKPOINT_ROWS: usize = 100_000;

/// The writer's own row groups end at this many rows (an interval of more rows is cut here
/// too). Twice [`CHECKPOINT_ROWS`]: rows of intervals smaller than the threshold reach it
/// before the writer cuts a row group of its own, so every such window checkpoints (with the
/// writer cutting at a smaller size, 65,536 rows per interval would never leave 100,000 in
/// progress).
pub const MAX_ROW_GROUP_ROWS: usize = 2 * CHECKPOINT_ROWS;

/// How a `flows` column is written (`path` as in the Parquet schema, e.g. `pkts`,
/// `opcodes.list.item.pkts`).
///
/// Encoding (`None`: dictionary, parquet's default):
/// - the integer columns but those of the next item (volumes, counters, QP numbers, PSNs,
///   packet times, the histograms' `pkts`): DELTA_BINARY_PACKED, a few bits per value
///   bit-packed. A dictionary hashes every value into a table; for the volumes it made files
///   about 12 % smaller on a capture of 20,000 keys but took about a tenth of the collector's
///   interval at 100,000 keys. PLAIN for the event counters that are 0 for nearly every
///   key (NAKs, PSN events) was about 5 % faster still at the same file size, but raised the
///   replay's peak memory (its open pages hold 8 bytes per value until zstd): not taken;
/// - `interval_start`, `interval_end` (one value per batch) and the histograms' `value` (a
///   bucket's DSCP, ECN, PCP or opcode: small numbers that repeat from row to row unordered,
///   where a delta gains nothing): PLAIN, which zstd compresses as well, for a copy per value
///   instead of a delta and bit-packing (about 8 % of the collector's interval at 100,000
///   keys);
/// - `host`, `source`, `iface`, `dir`, `point`: PLAIN (one or two values per batch, which zstd
///   compresses away);
/// - `src`, `dst`: dictionary (a fabric's hosts).
///
/// Min/max statistics only for `interval_start` and `interval_end` (a row group holds whole
/// intervals: they bound it in time) and `host` and `iface` (one or a few values per file):
/// the columns whose statistics let a reader skip row groups (`roce-analyze --since`,
/// `--until`, `--host`, `--iface`). The min and max of a per-key column (addresses, QP
/// numbers, counts, histograms) over a row group of many keys span nearly its whole range
/// and skip nothing, while computing them (a comparison per value) took about a tenth of the
/// collector's interval at 100,000 keys.
pub fn flows_columns(path: &str, physical: parquet::basic::Type) -> ColumnProps {
    use parquet::basic::Type;
    let encoding = match physical {
        Type::INT32 | Type::INT64 if PLAIN_INTEGERS.contains(&path) || path.ends_with(".value") => {
            Some(Encoding::PLAIN)
        }
        Type::INT32 | Type::INT64 => Some(Encoding::DELTA_BINARY_PACKED),
        Type::BYTE_ARRAY if ["host", "source", "iface", "dir", "point"].contains(&path) => {
            Some(Encoding::PLAIN)
        }
        _ => None,
    };
    ColumnProps {
        encoding,
        statistics: FLOWS_STATISTICS.contains(&path),
    }
}

/// The integer `flows` columns written PLAIN besides the histograms' `value` ([`flows_columns`]).
const PLAIN_INTEGERS: [&str; 2] = ["interval_start", "interval_end"];

/// The `flows` columns with min/max statistics ([`flows_columns`]).
pub const FLOWS_STATISTICS: [&str; 4] = ["host", "iface", "interval_start", "interval_end"];

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

/// The end of the rotation window holding `t_ns`: windows are aligned to multiples of the
/// rotation period since the epoch (300 s: 10:00-10:05, 10:05-10:10, ...), so every file of a
/// run but its first and last spans one period whatever the intervals, and a period that
/// divides an hour puts a window boundary on every hour's.
fn window_end(t_ns: u64, rotate_ns: u64) -> u64 {
    let r = rotate_ns.max(1);
    (t_ns / r).saturating_add(1).saturating_mul(r)
}

struct OpenFile {
    writer: ArrowWriter<Spool>,
    /// The end of its rotation window ([`window_end`]).
    end_ns: u64,
    date: String,
    hour: String,
    /// The final file's directory and name, chosen when the window opens (the journal is named
    /// after it, so a recovery can tell whether the file was completed).
    dir: PathBuf,
    name: String,
    rows: u64,
    journal: Option<Journal>,
    /// Checkpoints of the row groups cut so far (with a journal only).
    ckpt: Option<CheckpointLog>,
}

struct Finished {
    dir: PathBuf,
    name: String,
    data: Vec<u8>,
    rows: u64,
    /// The crash files that hold its rows (journal, checkpoint log, part file): deleted once
    /// the file is in place.
    crash_files: Vec<PathBuf>,
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
    /// directory fsynced) and returns its size; or, when any step fails, returns the whole
    /// file's bytes (read back from the part file, then those held), for the caller to keep and
    /// retry, and removes the part file unless `keep` (checkpoints need it until the file is
    /// in place). `Err(None)`: the bytes on disk could not be read back.
    fn complete(mut self, dir: &Path, name: &str, keep: bool) -> Result<u64, Option<Vec<u8>>> {
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
                if !keep {
                    let _ = fs::remove_file(&self.path);
                }
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

/// Schema metadata of a journal: the rows of its window before its first row (those in the
/// checkpoint it was started after; absent: 0).
const JOURNAL_AFTER_ROWS: &str = "roce_observe.journal_after_rows";

impl Journal {
    /// A journal of the rows after the first `after_rows` of its window.
    fn create(path: PathBuf, schema: &SchemaRef, after_rows: u64) -> std::io::Result<Journal> {
        if let Some(d) = path.parent() {
            fs::create_dir_all(d)?;
        }
        let f = File::create(&path)?;
        let mut meta = schema.metadata().clone();
        meta.insert(JOURNAL_AFTER_ROWS.to_string(), after_rows.to_string());
        let schema = schema.as_ref().clone().with_metadata(meta);
        let writer =
            arrow::ipc::writer::StreamWriter::try_new(f, &schema).map_err(std::io::Error::other)?;
        Ok(Journal { path, writer })
    }

    /// Replaces the journal by an empty one after `after_rows` rows (the window's rows up to
    /// its last checkpoint): written beside it, fsynced and renamed over it, so that a crash
    /// leaves either journal whole. On an error the old journal stays.
    fn restart(&mut self, schema: &SchemaRef, after_rows: u64) -> std::io::Result<()> {
        let tmp = self.path.with_extension("journal.tmp");
        let mut fresh = Journal::create(tmp.clone(), schema, after_rows)?;
        let done = fresh
            .writer
            .flush()
            .map_err(std::io::Error::other)
            .and_then(|()| fresh.writer.get_ref().sync_data())
            .and_then(|()| fs::rename(&tmp, &self.path));
        if let Err(e) = done {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        fresh.path = self.path.clone();
        *self = fresh;
        Ok(())
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

/// Cuts the row group being encoded, writes the part file's bytes and fsyncs them, records
/// the checkpoint ([`super::checkpoints`]) and restarts the journal after it. A failed record
/// ends the window's checkpoints (a torn record hides the ones after it); the journal then
/// keeps every row after the last good one.
fn checkpoint(o: &mut OpenFile, schema: &SchemaRef) -> Result<(), OutputError> {
    o.writer.flush().map_err(|err| OutputError::Parquet {
        table: o.name.clone(),
        err,
    })?;
    let io = |path: &Path, err| OutputError::Io {
        path: path.display().to_string(),
        err,
    };
    // the Parquet writer buffers its last bytes: into the spool with them
    if let Err(err) = o.writer.sync() {
        return Err(io(&o.writer.inner().path, err));
    }
    let prefix_len = o.writer.bytes_written() as u64;
    let spool = o.writer.inner_mut();
    if !spool.retry() {
        // the spool keeps the error for the caller's report
        let err = std::io::Error::other("the part file did not take the row group");
        return Err(io(&spool.path, err));
    }
    if spool.on_disk != prefix_len {
        let err = std::io::Error::other(format!(
            "{} bytes in the part file, the row groups end at {prefix_len}",
            spool.on_disk
        ));
        return Err(io(&spool.path, err));
    }
    if let Some(f) = &spool.file {
        f.sync_data().map_err(|err| io(&spool.path, err))?;
    }
    let Some(ck) = o.ckpt.as_mut() else {
        return Ok(());
    };
    if let Err(e) = ck.record(prefix_len, o.writer.flushed_row_groups()) {
        o.ckpt = None;
        return Err(e.into());
    }
    let rows = ck.rows();
    if let Some(j) = o.journal.as_mut() {
        j.restart(schema, rows).map_err(|err| io(&j.path, err))?;
    }
    Ok(())
}

/// The checkpoint log ([`super::checkpoints`]) of the window that becomes `name`, written by
/// this process.
fn ckpt_of(journals: &Path, name: &str) -> PathBuf {
    journals.join(format!("{name}.{}.ckpt", std::process::id()))
}

/// The crash files of an open window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CrashKind {
    Journal,
    Checkpoints,
    Part,
    JournalTmp,
}

/// What the name of a crash file under `.journal/` says: the final file's name, date and hour
/// directories, the pid of the process that wrote it, and which crash file it is.
fn parse_crash_file_name(file: &str) -> Option<(String, String, String, u32, CrashKind)> {
    let (rest, kind) = [
        (".journal.tmp", CrashKind::JournalTmp),
        (".journal", CrashKind::Journal),
        (".ckpt", CrashKind::Checkpoints),
        (".part", CrashKind::Part),
    ]
    .into_iter()
    .find_map(|(suffix, k)| Some((file.strip_suffix(suffix)?, k)))?;
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
    Some((name.to_string(), date, hour, pid, kind))
}

/// Rows recovered from the crash files of crashed runs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub files: u64,
    pub rows: u64,
    /// Rows known to be lost: checkpointed rows whose part file is shorter than its
    /// checkpoint, or rows between a checkpoint and a journal started after a later one.
    pub rows_lost: u64,
}

/// The crash files of one window of a crashed run (`.journal`, `.ckpt`, `.part` under
/// `.journal/`), by the window's final name and the pid that wrote them.
#[derive(Default)]
struct CrashFiles {
    date: String,
    hour: String,
    journal: Option<PathBuf>,
    ckpt: Option<PathBuf>,
    part: Option<PathBuf>,
    /// A journal being restarted when the run died (never the one that counts).
    tmp: Option<PathBuf>,
}

impl CrashFiles {
    fn all(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.journal, &self.ckpt, &self.part, &self.tmp]
            .into_iter()
            .flatten()
    }
}

/// Writes the windows a crashed run of `table` left under `root` into the Parquet files they
/// would have become, then removes their crash files. A window's rows are those of its
/// checkpointed row groups (the part file's bytes up to the last good checkpoint, closed with
/// their footer, [`super::checkpoints`]) followed by its journal's rows after that checkpoint,
/// so no row is counted twice whichever step the crash interrupted. A window of a process still
/// running is left alone; one whose file was already completed is only removed; a journal or
/// checkpoint log cut short by the crash gives what was written before the cut. Errors name the
/// file. The files are written as the table's writer writes them: `columns` are its per-column
/// encodings and statistics ([`TableWriter::with_columns`]; `None`: parquet's defaults).
pub fn recover_journals(
    root: &Path,
    table: &str,
    columns: Option<ColumnsOf>,
) -> Result<Recovered, OutputError> {
    let mut out = Recovered::default();
    let dir = journal_dir(root);
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(out);
    };
    let own = std::process::id();
    let mut windows: std::collections::BTreeMap<(String, u32), CrashFiles> = Default::default();
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some((name, date, hour, pid, kind)) = parse_crash_file_name(&file) else {
            continue;
        };
        if !name.starts_with(&format!("{table}-"))
            || (pid != own && Path::new(&format!("/proc/{pid}")).exists())
        {
            continue; // another table's, or another observer's open window
        }
        let w = windows.entry((name, pid)).or_default();
        (w.date, w.hour) = (date, hour);
        let slot = match kind {
            CrashKind::Journal => &mut w.journal,
            CrashKind::Checkpoints => &mut w.ckpt,
            CrashKind::Part => &mut w.part,
            CrashKind::JournalTmp => &mut w.tmp,
        };
        *slot = Some(e.path());
    }
    for ((name, _pid), w) in windows {
        let target_dir = root
            .join(table)
            .join(format!("date={}", w.date))
            .join(format!("hour={}", w.hour));
        if (w.journal.is_some() || w.ckpt.is_some()) && !target_dir.join(&name).exists() {
            let (batches, lost) = recover_window(&w)?;
            out.rows_lost += lost;
            let rows = write_recovered(batches, &target_dir, &name, columns)?;
            if rows > 0 {
                out.rows += rows;
                out.files += 1;
            }
        }
        for f in w.all() {
            fs::remove_file(f).map_err(|err| OutputError::Io {
                path: f.display().to_string(),
                err,
            })?;
        }
    }
    Ok(out)
}

/// The rows of one crashed window, in the order they were written, and the rows known lost.
fn recover_window(w: &CrashFiles) -> Result<(Vec<RecordBatch>, u64), OutputError> {
    let mut batches = Vec::new();
    let mut lost = 0;
    // rows before the journal's first: those of the last good checkpoint
    let mut before = 0u64;
    if let Some(log) = &w.ckpt
        && let Some(c) = checkpoints::read_log(log)?
    {
        if let Some((off, why)) = &c.torn {
            tracing::warn!(log = %log.display(), offset = off, reason = %why, "checkpoint log cut short by the crash: read up to there");
        }
        let read = match &w.part {
            Some(part) => checkpoints::read_rows(part, &c, log),
            None => Err(CheckpointError::Io {
                path: format!("the part file of {}", log.display()),
                err: std::io::ErrorKind::NotFound.into(),
            }),
        };
        match read {
            Ok(b) => batches = b,
            Err(e) => {
                // every row up to the checkpoint was in the part file only
                tracing::error!(error = %contract::error::chain(&e), rows = c.rows, "checkpointed rows lost");
                lost += c.rows;
            }
        }
        before = c.rows;
    }
    if let Some(j) = &w.journal {
        let (after, rows) = read_journal(j)?;
        if after > before {
            tracing::error!(journal = %j.display(), journal_after = after, checkpointed = before, "rows between the last good checkpoint and the journal lost");
            lost += after - before;
        }
        // a journal started before the last checkpoint (the crash came between the two):
        // its first rows are already in the checkpointed row groups
        let mut skip = before.saturating_sub(after) as usize;
        for b in rows {
            if skip >= b.num_rows() {
                skip -= b.num_rows();
                continue;
            }
            batches.push(b.slice(skip, b.num_rows() - skip));
            skip = 0;
        }
    }
    Ok((batches, lost))
}

/// A journal's first-row offset in its window and its batches, without the journal's schema
/// metadata. A crash while appending leaves a cut last message: the batches before it are
/// whole. A journal cut before its schema (a crash right after it was created) has no rows.
fn read_journal(journal: &Path) -> Result<(u64, Vec<RecordBatch>), OutputError> {
    let f = File::open(journal).map_err(|err| OutputError::Io {
        path: journal.display().to_string(),
        err,
    })?;
    if f.metadata().map(|m| m.len() == 0).unwrap_or(false) {
        return Ok((0, Vec::new()));
    }
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::BufReader::new(f), None)
        .map_err(|err| OutputError::Arrow {
            table: format!("journal {}", journal.display()),
            err,
        })?;
    let schema = reader.schema();
    let after = schema
        .metadata()
        .get(JOURNAL_AFTER_ROWS)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut meta = schema.metadata().clone();
    meta.remove(JOURNAL_AFTER_ROWS);
    let plain = Arc::new(schema.as_ref().clone().with_metadata(meta));
    let mut out = Vec::new();
    for b in reader.map_while(Result::ok) {
        let b = RecordBatch::try_new(Arc::clone(&plain), b.columns().to_vec()).map_err(|err| {
            OutputError::Arrow {
                table: format!("journal {}", journal.display()),
                err,
            }
        })?;
        out.push(b);
    }
    Ok((after, out))
}

/// Writes `batches` as the final file `dir/name` (through `name.tmp`, fsynced, renamed), with
/// the writer properties of the table's own files ([`writer_props`]). Returns the rows.
fn write_recovered(
    batches: Vec<RecordBatch>,
    dir: &Path,
    name: &str,
    columns: Option<ColumnsOf>,
) -> Result<u64, OutputError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |err| OutputError::Io { path, err }
    };
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    if rows == 0 {
        return Ok(0);
    }
    let perr = |err| OutputError::Parquet {
        table: format!("recovered {name}"),
        err,
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    let fin = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let schema = batches[0].schema();
    // straight to the file (a window can be large), through a buffer; an error leaves no tmp
    let written = (|| {
        let file = File::create(&tmp).map_err(io(&tmp))?;
        let props = writer_props(&schema, columns);
        let mut w = ArrowWriter::try_new(
            std::io::BufWriter::with_capacity(1 << 20, file),
            schema,
            Some(props),
        )
        .map_err(perr)?;
        for b in &batches {
            w.write(b).map_err(perr)?;
        }
        let file = w
            .into_inner()
            .map_err(perr)?
            .into_inner()
            .map_err(|e| io(&tmp)(e.into_error()))?;
        file.sync_all().map_err(io(&tmp))
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, &fin).map_err(io(&fin))?;
    tracing::warn!(file = %fin.display(), rows, "recovered a window a crashed run had not completed");
    Ok(rows)
}

/// How [`TableWriter::with_columns`] writes one Parquet column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnProps {
    /// Encoding of a column written without a dictionary; `None`: dictionary encoding
    /// (parquet's default).
    pub encoding: Option<Encoding>,
    /// Min/max statistics (in the row group's metadata and the page index); `false`: none.
    pub statistics: bool,
}

/// The [`ColumnProps`] of a column, by path and physical type.
pub type ColumnsOf<'a> = &'a dyn Fn(&str, PhysicalType) -> ColumnProps;

/// zstd level 1, row groups of up to [`MAX_ROW_GROUP_ROWS`]; dictionary encoding and page
/// statistics (parquet's defaults) except where `columns` ([`TableWriter::with_columns`]) says
/// otherwise.
fn writer_props(schema: &SchemaRef, columns: Option<ColumnsOf>) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap_or_default()))
        .set_max_row_group_row_count(Some(MAX_ROW_GROUP_ROWS))
        .set_created_by(format!("roce-observe {}", env!("CARGO_PKG_VERSION")));
    if let Some(props) = columns {
        // the Parquet columns ArrowWriter derives from the schema (leaves, with list paths)
        match ArrowSchemaConverter::new().convert(schema) {
            Ok(desc) => {
                for c in desc.columns() {
                    let p = props(&c.path().string(), c.physical_type());
                    if let Some(e) = p.encoding {
                        b = b
                            .set_column_dictionary_enabled(c.path().clone(), false)
                            .set_column_encoding(c.path().clone(), e);
                    }
                    if !p.statistics {
                        b = b.set_column_statistics_enabled(
                            c.path().clone(),
                            EnabledStatistics::None,
                        );
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
    /// The Parquet schema the writer derives (for checkpoints; `None`: not derived, the
    /// journal alone keeps an open window's rows).
    parquet_schema: Option<SchemaDescPtr>,
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
        let parquet_schema = ArrowSchemaConverter::new()
            .convert(&schema)
            .inspect_err(|e| tracing::warn!(table, error = %e, "Parquet schema not derived: no checkpoints, every row journaled"))
            .ok()
            .map(Arc::new);
        TableWriter {
            root: root.to_path_buf(),
            table,
            host: host.to_string(),
            schema,
            parquet_schema,
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

    /// Whether the open window's rows are made durable (journal and checkpoints) as written.
    pub fn journaling(&self) -> bool {
        self.journaling
    }

    /// Per-column encodings and statistics: `columns(path, physical type)` (the Parquet column
    /// path, e.g. `pkts`, `opcodes.list.item.pkts`) gives the column's [`ColumnProps`].
    pub fn with_columns(
        mut self,
        columns: impl Fn(&str, PhysicalType) -> ColumnProps,
    ) -> TableWriter {
        self.props = writer_props(&self.schema, Some(&columns));
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
            // Many rows in the row group being encoded: cut it and checkpoint the file, which
            // makes the batch durable; otherwise (or when that fails) the journal does.
            let durable = (o.writer.in_progress_rows() >= CHECKPOINT_ROWS
                || batch.num_rows() >= CHECKPOINT_ROWS)
                && o.journal.is_some()
                && o.ckpt.is_some()
                && match checkpoint(o, &self.schema) {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(table = self.table, file = %o.name, error = %contract::error::chain(&e), "checkpoint failed: the journal keeps the rows");
                        false
                    }
                };
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
            if !durable
                && let Some(j) = &mut o.journal
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
            if t_ns >= o.end_ns || date != o.date || hour != o.hour {
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
                || ckpt_of(&journals, &n).exists()
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
            Journal::create(path.clone(), &self.schema, 0)
                .inspect_err(|e| {
                    tracing::error!(table = self.table, journal = %path.display(), error = %e, "cannot create the journal: a crash would lose this window");
                })
                .ok()
        } else {
            None
        };
        let ckpt = match (&journal, &self.parquet_schema) {
            (Some(_), Some(descr)) => Some(CheckpointLog::new(
                ckpt_of(&journals, &name),
                &self.schema,
                Arc::clone(descr),
                self.props.created_by().to_string().into(),
            )),
            _ => None,
        };
        Ok(OpenFile {
            writer,
            end_ns: window_end(t_ns, self.rotate_ns),
            date,
            hour,
            dir,
            name,
            rows: 0,
            journal,
            ckpt,
        })
    }

    fn close_open(&mut self) -> Result<(), OutputError> {
        let Some(o) = self.open.take() else {
            return Ok(());
        };
        // the files a crash would recover the rows from until the file is in place
        let checkpointed = o.ckpt.as_ref().is_some_and(|c| c.rows() > 0);
        let mut crash_files: Vec<PathBuf> = o.journal.map(|j| j.path).into_iter().collect();
        crash_files.extend(o.ckpt.map(|c| c.path().to_path_buf()));
        let spool = o.writer.into_inner().map_err(|err| self.perr(err))?;
        if checkpointed {
            crash_files.push(spool.path.clone());
        }
        let data = match spool.complete(&o.dir, &o.name, checkpointed) {
            Ok(bytes) => {
                self.placed(o.dir.join(&o.name), o.rows, bytes, &crash_files);
                return Ok(());
            }
            Err(Some(data)) => data,
            Err(None) => {
                // the journal (and the checkpoints) keep the rows: the next start writes them
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
            crash_files,
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
            self.placed(fin, f.rows, f.data.len() as u64, &f.crash_files);
        }
        Ok(())
    }

    /// A file is in place under its final name `fin`: its crash files (journal, checkpoint
    /// log, a kept part file) go, the stats count it.
    fn placed(&mut self, fin: PathBuf, rows: u64, bytes: u64, crash_files: &[PathBuf]) {
        for j in crash_files {
            if let Err(e) = fs::remove_file(j)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(file = %j.display(), error = %e, "could not remove a crash file whose window's file is written");
            }
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

/// Lines `alerts.jsonl` keeps while its file cannot be written; beyond, the oldest are dropped
/// (counted, logged, and reported by the next [`JsonlWriter::flush`]).
pub const JSONL_PENDING_MAX: usize = 100_000;

/// Pending lines at which [`JsonlWriter::push`] writes them out without waiting for the next
/// flush: an alert flood within one interval is written as it comes, never dropped for want
/// of a flush.
pub const JSONL_WRITE_BATCH: usize = 4096;

/// Appends lines to `alerts.jsonl`; lines that cannot be written are kept (bounded) and retried.
pub struct JsonlWriter {
    path: PathBuf,
    file: Option<File>,
    pending: VecDeque<String>,
    /// Lines dropped in all (`output.alerts_jsonl_lines_lost`).
    pub lines_lost: u64,
    /// Lines dropped and not yet reported by `flush`.
    unreported_lost: u64,
    /// A write from `push` failed: `push` waits for the next `flush` to try again.
    push_failed: bool,
    /// The last write or open failed: until one succeeds, a flush with nothing pending opens the
    /// file again instead of reporting success (else a failing output would read "working
    /// again" at every flush in between).
    failed: bool,
}

impl JsonlWriter {
    pub fn new(path: PathBuf) -> JsonlWriter {
        JsonlWriter {
            path,
            file: None,
            pending: VecDeque::new(),
            lines_lost: 0,
            unreported_lost: 0,
            push_failed: false,
            failed: false,
        }
    }

    /// Queues one line; at [`JSONL_WRITE_BATCH`] pending lines writes them out at once. Only
    /// while the file cannot be written do lines wait beyond that, up to
    /// [`JSONL_PENDING_MAX`]: then the oldest is dropped, counted and logged (once per episode),
    /// and the next [`JsonlWriter::flush`] returns [`OutputError::LinesLost`].
    pub fn push(&mut self, line: String) {
        if self.pending.len() >= JSONL_WRITE_BATCH && !self.push_failed {
            // A failure is retried and returned by the next `flush` (the interval's), which
            // raises `output_write_failed`.
            self.push_failed = self.write_pending().is_err();
        }
        if self.pending.len() >= JSONL_PENDING_MAX {
            self.pending.pop_front();
            if self.unreported_lost == 0 {
                tracing::error!(path = %self.path.display(), pending = JSONL_PENDING_MAX, "alert lines are being dropped: the file cannot be written and the pending lines are at their bound");
            }
            self.lines_lost += 1;
            self.unreported_lost += 1;
        }
        self.pending.push_back(line);
    }

    /// Writes the pending lines; then reports lines dropped since the last report as
    /// [`OutputError::LinesLost`] (once).
    pub fn flush(&mut self) -> Result<(), OutputError> {
        self.push_failed = false;
        self.write_pending()?;
        if self.unreported_lost > 0 {
            let lines = std::mem::take(&mut self.unreported_lost);
            return Err(OutputError::LinesLost {
                path: self.path.display().to_string(),
                lines,
            });
        }
        Ok(())
    }

    fn write_pending(&mut self) -> Result<(), OutputError> {
        let r = self.write_pending_once();
        self.failed = r.is_err();
        r
    }

    fn write_pending_once(&mut self) -> Result<(), OutputError> {
        if self.pending.is_empty() && !self.failed {
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
        if self.pending.is_empty() {
            return Ok(()); // the file opens again: the output works
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
        let rg = MAX_ROW_GROUP_ROWS as i64; // the writer's row group
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
        let rg = MAX_ROW_GROUP_ROWS as i64;
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
            recover_journals(&root, "flows", None).unwrap(),
            Recovered::default()
        );
        assert!(!dead.exists());
        assert!(alive.exists(), "pid 1 runs");
        assert!(other.exists(), "another table's");
        let _ = fs::remove_dir_all(&root);
    }

    /// `n` rows of a noise column, a constant one and a string one: the constant column's
    /// chunk is small, so a row group's last bytes stay in the Parquet writer's buffer unless
    /// a checkpoint writes them out.
    fn wide(n: i64, from: i64) -> RecordBatch {
        let x = noise(n, from).column(0).clone();
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int64, false),
            Field::new("y", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let y = Arc::new(Int64Array::from(vec![7; n as usize]));
        let s = Arc::new(arrow::array::StringArray::from(vec![Some("h"); n as usize]));
        RecordBatch::try_new(schema, vec![x, y, s]).unwrap()
    }

    /// A writer of [`wide`] rows under `root`.
    fn ckpt_writer(root: &Path) -> TableWriter {
        TableWriter::new(root, "flows", "h", wide(1, 0).schema(), 3600, 1 << 30)
    }

    fn concat(b: &[RecordBatch]) -> RecordBatch {
        arrow::compute::concat_batches(&b[0].schema(), b).unwrap()
    }

    /// The one Parquet file under `root` (the crash files all gone) and its rows.
    fn only_file(root: &Path) -> RecordBatch {
        let all = files(root);
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(
            all[0].extension().is_some_and(|e| e == "parquet"),
            "{all:?}"
        );
        concat(&read_back(&all[0]))
    }

    const T0: u64 = 1_795_238_400_000_000_000;

    /// Intervals of many rows cut a row group and checkpoint it instead of journaling their
    /// rows: the journal holds the rows after the last checkpoint only. After a crash, the
    /// checkpointed row groups and the journal's rows make the window's file, each row once.
    #[test]
    fn large_intervals_are_checkpointed_not_journaled_and_recovered_after_a_crash() {
        let root = tmpdir("ckpt");
        let mut w = ckpt_writer(&root);
        let sizes = [1000, 110_000, 500, 120_000, 2000];
        let mut sent = Vec::new();
        let mut from = 0;
        for (i, n) in sizes.into_iter().enumerate() {
            let b = wide(n, from);
            from += n;
            w.write(&b, T0 + i as u64 * 1_000_000_000).unwrap();
            sent.push(b);
        }
        let o = w.open.as_ref().unwrap();
        assert_eq!(
            o.writer.flushed_row_groups().len(),
            2,
            "one row group per checkpoint"
        );
        assert_eq!(o.ckpt.as_ref().unwrap().rows(), 231_500);
        let journal = fs::metadata(&o.journal.as_ref().unwrap().path)
            .unwrap()
            .len();
        assert!(
            journal < 2000 * 20 + 4096,
            "the journal holds the last interval's 2000 rows only: {journal} bytes"
        );
        drop(w); // a crash: nothing closed
        let r = recover_journals(&root, "flows", None).unwrap();
        assert_eq!(
            r,
            Recovered {
                files: 1,
                rows: 233_500,
                rows_lost: 0
            }
        );
        assert_eq!(only_file(&root), concat(&sent));
        let _ = fs::remove_dir_all(&root);
    }

    /// Whatever the rows per interval, the journal never holds more than the threshold plus an
    /// interval's: 65,536 per interval checkpoints every second interval (with the writer
    /// cutting its own row groups at 131,072 rows it never would), 30,000 every fourth, an
    /// interval of more than the writer's row group is cut by the writer and checkpointed
    /// whole. Recovery gives every row once.
    #[test]
    fn every_interval_size_reaches_a_checkpoint() {
        for (size, intervals) in [(65_536i64, 4i64), (30_000, 4), (250_000, 2)] {
            let root = tmpdir(&format!("ckpt-sizes-{size}"));
            let mut w = ckpt_writer(&root);
            let mut sent = Vec::new();
            for i in 0..intervals {
                let b = wide(size, i * size);
                w.write(&b, T0 + i as u64 * 1_000_000_000).unwrap();
                sent.push(b);
                let o = w.open.as_ref().unwrap();
                let journaled = (i + 1) as u64 * size as u64 - o.ckpt.as_ref().unwrap().rows();
                assert!(
                    journaled < (CHECKPOINT_ROWS as u64).max(size as u64),
                    "{size} x {}: {journaled} rows after the last checkpoint",
                    i + 1
                );
            }
            let o = w.open.as_ref().unwrap();
            assert!(o.ckpt.as_ref().unwrap().rows() > 0, "{size}: checkpointed");
            drop(w);
            let r = recover_journals(&root, "flows", None).unwrap();
            assert_eq!(
                (r.rows, r.rows_lost),
                ((size * intervals) as u64, 0),
                "{size}"
            );
            assert_eq!(only_file(&root), concat(&sent), "{size}");
            let _ = fs::remove_dir_all(&root);
        }
    }

    /// The crash came after a checkpoint was recorded and before the journal restarted: the
    /// old journal's rows that the checkpoint holds are skipped, none is written twice.
    #[test]
    fn a_crash_between_checkpoint_and_journal_restart_counts_no_row_twice() {
        let root = tmpdir("ckpt-restart");
        let mut w = ckpt_writer(&root);
        let a = wide(1000, 0);
        w.write(&a, T0).unwrap();
        let jpath = w
            .open
            .as_ref()
            .unwrap()
            .journal
            .as_ref()
            .unwrap()
            .path
            .clone();
        let old = fs::read(&jpath).unwrap();
        let b = wide(100_000, 1000);
        w.write(&b, T0 + 1_000_000_000).unwrap();
        assert_eq!(
            w.open.as_ref().unwrap().ckpt.as_ref().unwrap().rows(),
            101_000
        );
        drop(w);
        fs::write(&jpath, &old).unwrap(); // the journal before its restart
        let r = recover_journals(&root, "flows", None).unwrap();
        assert_eq!((r.rows, r.rows_lost), (101_000, 0));
        assert_eq!(only_file(&root), concat(&[a, b]));
        let _ = fs::remove_dir_all(&root);
    }

    /// The crash cut the last checkpoint record (short, or its bytes not as written): the
    /// records before it and the journal, which had not restarted after it, give every row up
    /// to the interval being written.
    #[test]
    fn a_torn_checkpoint_record_gives_the_one_before_and_the_journal() {
        for how in ["short", "crc"] {
            let root = tmpdir(&format!("ckpt-torn-{how}"));
            let mut w = ckpt_writer(&root);
            let sent = [wide(1000, 0), wide(100_000, 1000), wide(500, 101_000)];
            for (i, b) in sent.iter().enumerate() {
                w.write(b, T0 + i as u64 * 1_000_000_000).unwrap();
            }
            let o = w.open.as_ref().unwrap();
            let jpath = o.journal.as_ref().unwrap().path.clone();
            let cpath = o.ckpt.as_ref().unwrap().path().to_path_buf();
            let old_journal = fs::read(&jpath).unwrap();
            let good = fs::metadata(&cpath).unwrap().len();
            w.write(&wide(100_000, 101_500), T0 + 3_000_000_000)
                .unwrap();
            drop(w);
            let mut log = fs::read(&cpath).unwrap();
            assert!(log.len() as u64 > good + 100, "a second record");
            match how {
                "short" => log.truncate(good as usize + 30),
                _ => log[good as usize + 40] ^= 0x55,
            }
            fs::write(&cpath, &log).unwrap();
            fs::write(&jpath, &old_journal).unwrap();
            let r = recover_journals(&root, "flows", None).unwrap();
            assert_eq!((r.rows, r.rows_lost), (101_500, 0), "{how}");
            assert_eq!(only_file(&root), concat(&sent), "{how}");
            let _ = fs::remove_dir_all(&root);
        }
    }

    /// A part file shorter than its checkpoint (the disk lost what it had synced): the
    /// checkpointed rows are counted lost, named in the log, and the journal's rows after the
    /// checkpoint are still written.
    #[test]
    fn a_part_file_shorter_than_its_checkpoint_counts_the_rows_lost() {
        let root = tmpdir("ckpt-short-part");
        let mut w = ckpt_writer(&root);
        w.write(&wide(100_000, 0), T0).unwrap();
        let c = wide(500, 100_000);
        w.write(&c, T0 + 1_000_000_000).unwrap();
        let part = w.open.as_ref().unwrap().writer.inner().path.clone();
        drop(w);
        let f = OpenOptions::new().write(true).open(&part).unwrap();
        f.set_len(100).unwrap();
        drop(f);
        let r = recover_journals(&root, "flows", None).unwrap();
        assert_eq!(
            r,
            Recovered {
                files: 1,
                rows: 500,
                rows_lost: 100_000
            }
        );
        assert_eq!(only_file(&root), c);
        let _ = fs::remove_dir_all(&root);
    }

    /// The checkpoint log's error for a part file shorter than it names both files and the
    /// record's offset.
    #[test]
    fn a_short_part_file_error_names_the_files_and_offset() {
        let root = tmpdir("ckpt-short-msg");
        let mut w = ckpt_writer(&root);
        w.write(&wide(100_000, 0), T0).unwrap();
        let o = w.open.as_ref().unwrap();
        let part = o.writer.inner().path.clone();
        let log = o.ckpt.as_ref().unwrap().path().to_path_buf();
        drop(w);
        fs::write(&part, b"PAR1").unwrap();
        let c = checkpoints::read_log(&log).unwrap().unwrap();
        let e = checkpoints::read_rows(&part, &c, &log)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(&part.display().to_string()), "{e}");
        assert!(e.contains(&log.display().to_string()), "{e}");
        assert!(e.contains("offset 0"), "{e}");
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

    /// An alert flood within one interval (no flush between) is written whole: 250,000 lines
    /// pushed, 250,000 in the file, none lost (it once kept 100,000 and dropped the rest).
    #[test]
    fn an_alert_flood_between_flushes_is_written_whole() {
        let root = tmpdir("jsonl-flood");
        let mut w = JsonlWriter::new(root.join("alerts.jsonl"));
        for i in 0..250_000 {
            w.push(format!("{{\"a\":{i}}}"));
        }
        w.flush().unwrap();
        let text = fs::read_to_string(root.join("alerts.jsonl")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 250_000);
        assert_eq!((lines[0], lines[249_999]), ("{\"a\":0}", "{\"a\":249999}"));
        assert_eq!(w.lines_lost, 0);
        let _ = fs::remove_dir_all(&root);
    }

    /// While the file cannot be written, lines wait up to the bound; beyond it the oldest are
    /// dropped and counted, and once writing works again the next flush writes what was kept
    /// and reports the loss once (the pipeline raises `output_write_failed` on it).
    #[test]
    fn lines_dropped_while_unwritable_are_counted_and_reported_once() {
        let root = tmpdir("jsonl-lost");
        fs::create_dir_all(&root).unwrap();
        // a file where the directory of alerts.jsonl should be: unwritable
        let blocker = root.join("out");
        fs::write(&blocker, b"").unwrap();
        let mut w = JsonlWriter::new(blocker.join("alerts.jsonl"));
        for i in 0..JSONL_PENDING_MAX + 5 {
            w.push(format!("{i}"));
        }
        assert!(matches!(w.flush(), Err(OutputError::Io { .. })));
        assert_eq!(w.lines_lost, 5);
        fs::remove_file(&blocker).unwrap();
        match w.flush() {
            Err(OutputError::LinesLost { lines: 5, .. }) => {}
            other => panic!("expected 5 lines lost, got {other:?}"),
        }
        w.flush().unwrap();
        let text = fs::read_to_string(blocker.join("alerts.jsonl")).unwrap();
        assert_eq!(text.lines().count(), JSONL_PENDING_MAX);
        assert_eq!(text.lines().next(), Some("5"));
        let _ = fs::remove_dir_all(&root);
    }

    /// A failing alerts.jsonl stays failing at a flush with nothing pending (it once read as
    /// working again at every such flush, and the pipeline logged "working again" between its
    /// errors); it works again when the file can be opened.
    #[test]
    fn an_unwritable_jsonl_is_not_working_again_until_it_opens() {
        let root = tmpdir("jsonl-flap");
        fs::create_dir_all(&root).unwrap();
        let blocker = root.join("out");
        fs::write(&blocker, b"").unwrap();
        let mut w = JsonlWriter::new(blocker.join("alerts.jsonl"));
        assert!(w.flush().is_ok(), "nothing pending, nothing failed yet");
        w.push("a".into());
        assert!(w.flush().is_err());
        w.push("b".into());
        assert!(w.flush().is_err());
        fs::remove_file(&blocker).unwrap();
        w.flush().unwrap();
        assert!(w.flush().is_ok());
        let text = fs::read_to_string(blocker.join("alerts.jsonl")).unwrap();
        assert_eq!(text, "a\nb\n");
        // nothing pending after a failure: the open is tried again, and fails
        let blocker2 = root.join("out2");
        fs::write(&blocker2, b"").unwrap();
        let mut w = JsonlWriter::new(blocker2.join("alerts.jsonl"));
        w.push("c".into());
        assert!(w.flush().is_err());
        let mut lost = w;
        lost.pending.clear();
        assert!(lost.flush().is_err(), "still unwritable: not working again");
        let _ = fs::remove_dir_all(&root);
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
        // windows on the minute: 05:34:59 in the first file; 05:35:19, :39 and :59 in the
        // second; 05:36:19 opens the third
        assert_eq!(w.stats.files, 2);
        assert_eq!(w.open_rows(), 10);
        // hour change closes the third file
        w.write(&b, 1_795_240_800_000_000_000).unwrap(); // 06:00:00
        assert_eq!(w.stats.files, 3);
        w.finish().unwrap();
        assert_eq!(w.stats.files, 4);
        assert_eq!(w.stats.rows, 60);
        let fs = files(&root);
        assert_eq!(fs.len(), 4, "{fs:?}");
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
            s[3],
            "flows/date=2026-11-21/hour=06/flows-h1-20261121T060000Z-0003.parquet"
        );
        // readable by the parquet reader
        let f = File::open(&fs[0]).unwrap();
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .build()
            .unwrap();
        let rows: usize = r.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 10);
        let _ = fs::remove_dir_all(&root);
    }

    /// Around the hour, every file spans one rotation period: windows are aligned to the
    /// period, not to the first row after the previous file. Before, an interval starting
    /// 100 ms late after the hour (06:00:05.1) and one 100 ms early five minutes later
    /// (06:05:04.9) put 31 intervals into the second file: spans varied by one interval.
    #[test]
    fn rotation_windows_are_aligned_to_the_period() {
        let root = tmpdir("rot-aligned");
        let b = batch(1);
        let mut w = TableWriter::new(&root, "flows", "h1", b.schema(), 300, 1 << 30);
        let t0 = 1_795_240_655_000_000_000u64; // 05:57:35
        let mut closed = Vec::new();
        for i in 0..(16 * 6) {
            let before = w.stats.rows;
            // every 10 s to 06:13:25, two of them off by 100 ms
            let jitter = match i {
                15 => 100_000_000,
                45 => -100_000_000,
                _ => 0i64,
            };
            let t = (t0 + i * 10_000_000_000).saturating_add_signed(jitter);
            w.write(&b, t).unwrap();
            if w.stats.rows > before {
                closed.push(w.stats.rows - before);
            }
        }
        w.finish().unwrap();
        // 05:57:35-05:59:55 (15 rows), then 06:00:05.1-06:04:55, 06:05:04.9-06:09:55 (30 each)
        assert_eq!(closed, vec![15, 30, 30], "rows per closed file");
        let fs = files(&root);
        let names: Vec<String> = fs
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names[1].contains("T060005Z"), "{names:?}");
        assert!(names[2].contains("T060504Z"), "{names:?}");
        assert!(names[3].contains("T061005Z"), "{names:?}");
        let _ = fs::remove_dir_all(&root);
    }

    /// The flows table's per-column encodings and statistics, in a file closed cleanly and in
    /// one recovered after a crash; the rows read back.
    #[test]
    fn flows_encodings_and_statistics_per_column_and_rows_read_back() {
        use crate::pipeline::rows::{FlowsBuilder, flows_schema};
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
            v.opcode_hist[(i % 3) as usize] = 1;
            v.naks = (i % 1000 == 0) as u64;
            b.push(&k, &v, i == 0, false, 0);
        }
        let batch = b.finish(&schema).unwrap();
        let mut w = TableWriter::new(&root, "flows", "h", schema, 3600, 1 << 30)
            .with_columns(flows_columns);
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
        for d in ["src", "dst"] {
            assert!(has(d, Encoding::RLE_DICTIONARY), "{d}: {:?}", enc(d));
        }
        for d in [
            "pkts",
            "bytes_udp",
            "ack_pkts",
            "opcodes.list.item.pkts",
            "qp",
            "psn_max",
            "last_pkt",
            "ce",
            "naks",
            "psn_retrans",
        ] {
            assert!(has(d, Encoding::DELTA_BINARY_PACKED), "{d}: {:?}", enc(d));
            assert!(!has(d, Encoding::RLE_DICTIONARY), "{d}: {:?}", enc(d));
        }
        for d in [
            "host",
            "source",
            "iface",
            "dir",
            "interval_start",
            "interval_end",
            "ecn_data.list.item.value",
            "opcodes.list.item.value",
        ] {
            assert!(!has(d, Encoding::DELTA_BINARY_PACKED), "{d}: {:?}", enc(d));
            assert!(has(d, Encoding::PLAIN), "{d}: {:?}", enc(d));
            assert!(!has(d, Encoding::RLE_DICTIONARY), "{d}: {:?}", enc(d));
        }
        // min/max of FLOWS_STATISTICS only (host, iface, the interval bounds)
        let mut with_stats = Vec::new();
        for i in 0..rg.num_columns() {
            let c = rg.column(i);
            if c.statistics().is_some_and(|s| s.min_bytes_opt().is_some()) {
                with_stats.push(c.column_path().string());
            }
        }
        assert_eq!(with_stats, FLOWS_STATISTICS, "columns with statistics");
        let st = |name: &str| {
            (0..rg.num_columns())
                .map(|i| rg.column(i))
                .find(|c| c.column_path().string() == name)
                .and_then(|c| c.statistics().cloned())
        };
        match st("interval_start") {
            Some(parquet::file::statistics::Statistics::Int64(s)) => {
                assert_eq!(s.min_opt(), Some(&((t / 1000) as i64)));
                assert_eq!(s.max_opt(), Some(&((t / 1000) as i64)));
            }
            other => panic!("interval_start statistics: {other:?}"),
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
        // A window recovered after a crash is written the same way: per column the same
        // encodings, statistics and compression, and the same writer name.
        let layout = |f: &Path| {
            let rd = SerializedFileReader::new(File::open(f).unwrap()).unwrap();
            let m = rd.metadata();
            let rg = m.row_group(0);
            let cols: Vec<_> = (0..rg.num_columns())
                .map(|i| {
                    let c = rg.column(i);
                    let mut e: Vec<Encoding> = c.encodings().collect();
                    e.sort_by_key(|e| format!("{e:?}"));
                    let stats = c.statistics().is_some_and(|s| s.min_bytes_opt().is_some());
                    (c.column_path().string(), e, stats, c.compression())
                })
                .collect();
            (m.file_metadata().created_by().map(str::to_string), cols)
        };
        let crashed = tmpdir("enc-crash");
        let mut w2 = TableWriter::new(&crashed, "flows", "h", flows_schema(), 3600, 1 << 30)
            .with_columns(flows_columns);
        w2.write(&batch, t).unwrap();
        drop(w2); // a crash: the window is in the journal only
        let columns: ColumnsOf = &flows_columns;
        let r = recover_journals(&crashed, "flows", Some(columns)).unwrap();
        assert_eq!(r.rows, 5000);
        let recovered = files(&crashed);
        assert_eq!(recovered.len(), 1, "{recovered:?}");
        assert_eq!(layout(&recovered[0]), layout(&path));
        assert_eq!(concat(&read_back(&recovered[0])), batch);
        let _ = fs::remove_dir_all(&root);
        let _ = fs::remove_dir_all(&crashed);
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
