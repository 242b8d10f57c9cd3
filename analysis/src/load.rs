//! Loading the tables: every `*.parquet` (final names only, never `*.parquet.tmp`) below
//! `<dir>/<table>/`, aggregated over all intervals.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use contract::schema;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// Directory levels below a table's directory that are searched (`date=/hour=/` is 2).
pub const MAX_DEPTH: usize = 16;
/// Largest uncompressed size of one column chunk accepted from a file's metadata.
const MAX_CHUNK_BYTES: i64 = 1 << 30;

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
        err: contract::schema::SchemaMismatch,
    },
    /// A file whose metadata is inconsistent, or whose decoding panicked inside the parquet
    /// or arrow crates.
    #[error("{path}: corrupt Parquet file: {what}")]
    Corrupt { path: PathBuf, what: String },
    #[error("{path}: column {column:?} missing or of an unexpected type")]
    Column { path: PathBuf, column: String },
    #[error("{path}: column {column:?} cannot be read as {to}")]
    Cast {
        path: PathBuf,
        column: String,
        to: String,
        #[source]
        err: arrow::error::ArrowError,
    },
    #[error("{0}: no flow logs (expected {0}/flows/date=.../hour=.../*.parquet)")]
    Empty(PathBuf),
    /// A tree read without flow logs (`roce-analyze hosts`) that has no table at all.
    #[error(
        "{0}: no roce-observe tables (expected {0}/flows, interfaces, alerts, nic or qps with Parquet files)"
    )]
    NoTables(PathBuf),
    #[error("{0} does not exist (expected the --out directory of roce-observe)")]
    NotFound(PathBuf),
    #[error("{0} is not a directory (expected the --out directory of roce-observe)")]
    NotADirectory(PathBuf),
    #[error("{0}: directories nested deeper than {MAX_DEPTH} levels")]
    TooDeep(PathBuf),
}

/// Every `*.parquet` below `root` (absent: none), sorted. Symbolic links to directories are
/// not followed (a link loop would never end), links to regular files are; only regular files
/// are read (a FIFO named `x.parquet` would block); at most [`MAX_DEPTH`] levels.
pub fn parquet_files(root: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let rd = match std::fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && depth == 0 => continue,
            Err(err) => return Err(LoadError::Io { path: d, err }),
        };
        for e in rd {
            let e = e.map_err(|err| LoadError::Io {
                path: d.clone(),
                err,
            })?;
            let p = e.path();
            let io = |err| LoadError::Io {
                path: p.clone(),
                err,
            };
            let mut ty = e.file_type().map_err(io)?;
            if ty.is_symlink() {
                match std::fs::metadata(&p) {
                    Ok(m) if m.is_file() => ty = m.file_type(),
                    // a link to a directory, or a dangling link: not followed
                    _ => continue,
                }
            }
            if ty.is_dir() {
                if depth + 1 > MAX_DEPTH {
                    return Err(LoadError::TooDeep(p));
                }
                stack.push((p, depth + 1));
            } else if ty.is_file() && p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Set while the query engine runs a query: panics of the Parquet decoder in its threads are
/// recorded for the error the engine turns them into, not printed (the engine sets it).
pub static QUERYING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    /// Set while this thread decodes a file under [`guarded`].
    static GUARDED: Cell<bool> = const { Cell::new(false) };
    /// Where the last panic under [`guarded`] happened (recorded by [`quiet_decoder_panics`]'s
    /// hook).
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs a panic hook that keeps the panics caught by [`load`] (a corrupt file's decoding
/// panicking inside the parquet or arrow crates) off stderr, recording where they happened for
/// the error instead; every other panic goes to the previous hook. The command line calls it
/// once at start.
pub fn quiet_decoder_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) || QUERYING.load(std::sync::atomic::Ordering::SeqCst) {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
                PANIC_AT.with(|p| *p.borrow_mut() = at);
            } else {
                prev(info);
            }
        }));
    });
}

/// Runs the decoding of one file, turning a panic into [`LoadError::Corrupt`]. The last line of
/// defence: the parquet and arrow crates panic on some corrupt inputs (out-of-range offsets
/// and lengths in the metadata or pages, inconsistent array lengths) instead of returning an
/// error, and [`check_metadata`] cannot see into every page. A failed file fails the whole
/// [`load`], so the `Dataset` that `f` may have half updated is never returned.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T, LoadError>) -> Result<T, LoadError> {
    let was = GUARDED.with(|g| g.replace(true));
    PANIC_AT.with(|p| p.borrow_mut().take());
    let r = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(was));
    r.unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        let at = PANIC_AT
            .with(|p| p.borrow_mut().take())
            .map(|a| format!(" at {a}"))
            .unwrap_or_default();
        Err(LoadError::Corrupt {
            path: path.into(),
            what: format!("the Parquet decoder panicked: {msg}{at}"),
        })
    })
}

/// The footer's sanity, before any data is decoded: magic numbers, every row group's rows and
/// every column chunk's type, byte range (inside the file's data, before the footer), value
/// count and size. Returns the file's metadata.
fn check_metadata(path: &Path, f: &mut File) -> Result<ParquetMetaData, LoadError> {
    let corrupt = |what: String| LoadError::Corrupt {
        path: path.into(),
        what,
    };
    let io = |err| LoadError::Io {
        path: path.into(),
        err,
    };
    let len = f.metadata().map_err(io)?.len();
    if len < 12 {
        return Err(corrupt(format!("{len} bytes, too short for Parquet")));
    }
    let mut head = [0u8; 4];
    let mut tail = [0u8; 8];
    f.read_exact(&mut head).map_err(io)?;
    f.seek(SeekFrom::End(-8)).map_err(io)?;
    f.read_exact(&mut tail).map_err(io)?;
    if &head != b"PAR1" || &tail[4..] != b"PAR1" {
        return Err(corrupt("no PAR1 magic at both ends".into()));
    }
    let footer = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) as u64;
    if footer + 12 > len {
        return Err(corrupt(format!(
            "footer of {footer} bytes in a {len}-byte file"
        )));
    }
    let data_end = len - 8 - footer;
    let md = ParquetMetaDataReader::new()
        .parse_and_finish(&*f)
        .map_err(|err| LoadError::Parquet {
            path: path.into(),
            err,
        })?;
    let descr = md.file_metadata().schema_descr();
    let mut rows = 0i64;
    for (g, rg) in md.row_groups().iter().enumerate() {
        let n = rg.num_rows();
        if n < 0 {
            return Err(corrupt(format!("row group {g}: {n} rows")));
        }
        rows = rows.saturating_add(n);
        if rg.num_columns() != descr.num_columns() {
            return Err(corrupt(format!(
                "row group {g}: {} column chunks, the schema has {} columns",
                rg.num_columns(),
                descr.num_columns()
            )));
        }
        for (i, c) in rg.columns().iter().enumerate() {
            let name = c.column_path().string();
            let bad = |what: String| corrupt(format!("row group {g}, column {name}: {what}"));
            if c.column_type() != descr.column(i).physical_type() {
                return Err(bad(format!(
                    "type {} in the chunk, {} in the schema",
                    c.column_type(),
                    descr.column(i).physical_type()
                )));
            }
            let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset());
            let size = c.compressed_size();
            let end = start.checked_add(size);
            // An empty row group has no page to decode: other writers (pyarrow, for a zero-row
            // file) leave its chunks' offsets at 0, or write no bytes at all.
            if n > 0 && (start < 4 || size < 0 || end.is_none_or(|e| e as u64 > data_end)) {
                return Err(bad(format!(
                    "bytes {start}..+{size} outside the data (4..{data_end})"
                )));
            }
            if n > 0 && (c.data_page_offset() < start || c.data_page_offset() >= start + size) {
                return Err(bad(format!(
                    "data pages at {} outside the chunk {start}..+{size}",
                    c.data_page_offset()
                )));
            }
            // Every row has at least one (definition / repetition level) value.
            if c.num_values() < n {
                return Err(bad(format!("{} values for {n} rows", c.num_values())));
            }
            if !(0..=MAX_CHUNK_BYTES).contains(&c.uncompressed_size()) {
                return Err(bad(format!(
                    "{} bytes uncompressed (at most {MAX_CHUNK_BYTES})",
                    c.uncompressed_size()
                )));
            }
        }
    }
    if rows != md.file_metadata().num_rows() {
        return Err(corrupt(format!(
            "{} rows in the row groups, {} in the footer",
            rows,
            md.file_metadata().num_rows()
        )));
    }
    Ok(md)
}

/// What the footer of one checked file declares.
#[derive(Clone, Copy, Debug, Default)]
pub struct FileInfo {
    pub rows: u64,
    /// About what its rows take decoded: per column chunk its uncompressed size, or its values
    /// at their decoded width when more (a column of nulls is a few bytes in the file and 8
    /// bytes a row in memory).
    pub bytes: u64,
}

/// One file's footer ([`check_metadata`]) and columns against `table`'s definition; then, when
/// `decode` says so given what the footer declares, every batch of it (`None` otherwise).
/// Panics of the decoder are caught ([`guarded`]).
pub fn open_file(
    path: &Path,
    table: &schema::Table,
    decode: impl FnOnce(&FileInfo) -> bool,
) -> Result<(FileInfo, Option<Vec<RecordBatch>>), LoadError> {
    guarded(path, || {
        let mut f = File::open(path).map_err(|err| LoadError::Io {
            path: path.into(),
            err,
        })?;
        let perr = |err| LoadError::Parquet {
            path: path.into(),
            err,
        };
        let md = check_metadata(path, &mut f)?;
        let info = FileInfo {
            rows: md.file_metadata().num_rows().max(0) as u64,
            bytes: md
                .row_groups()
                .iter()
                .flat_map(|g| g.columns())
                .map(|c| {
                    use parquet::basic::Type as T;
                    let width = match c.column_type() {
                        T::BOOLEAN => 1,
                        T::INT32 | T::FLOAT | T::BYTE_ARRAY => 4,
                        T::INT96 => 12,
                        _ => 8,
                    };
                    (c.uncompressed_size().max(0) as u64).max(c.num_values().max(0) as u64 * width)
                })
                .sum(),
        };
        let md =
            ArrowReaderMetadata::try_new(Arc::new(md), ArrowReaderOptions::new()).map_err(perr)?;
        table.check(md.schema()).map_err(|err| LoadError::Schema {
            path: path.into(),
            err,
        })?;
        if !decode(&info) {
            return Ok((info, None));
        }
        let r = ParquetRecordBatchReaderBuilder::new_with_metadata(f, md)
            .build()
            .map_err(perr)?;
        let batches = r
            .map(|b| {
                b.map_err(|err| LoadError::Arrow {
                    path: path.into(),
                    err,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((info, Some(batches)))
    })
}

/// `batch` (decoded from `path`) with the columns of `schema`, by name: a column of another
/// writer's equivalent type (list items named `element`, nullable items, a timestamp without a
/// time zone) cast to the table's, a column the file does not have (added later) null.
pub fn conform(
    batch: &RecordBatch,
    schema: &arrow::datatypes::SchemaRef,
    path: &Path,
) -> Result<RecordBatch, LoadError> {
    let n = batch.num_rows();
    let cols = schema
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
            Some(c) => arrow::compute::cast(c, f.data_type()).map_err(|err| LoadError::Cast {
                path: path.into(),
                column: f.name().clone(),
                to: f.data_type().to_string(),
                err,
            }),
            None => Ok(arrow::array::new_null_array(f.data_type(), n)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(Arc::clone(schema), cols).map_err(|err| LoadError::Arrow {
        path: path.into(),
        err,
    })
}

/// The flows files of the output tree `dir`, sorted: an error when `dir` is missing, not a
/// directory, or has none.
pub fn flows_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    check_dir(dir)?;
    let flows = parquet_files(&dir.join("flows"))?;
    if flows.is_empty() {
        return Err(LoadError::Empty(dir.to_path_buf()));
    }
    Ok(flows)
}

/// `dir` exists and is a directory (else an error saying which).
pub fn check_dir(dir: &Path) -> Result<(), LoadError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(LoadError::NotADirectory(dir.into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LoadError::NotFound(dir.into()));
        }
        Err(err) => {
            return Err(LoadError::Io {
                path: dir.into(),
                err,
            });
        }
    }
    Ok(())
}

/// One file's footer ([`check_metadata`]) and columns against `table`'s definition, before the
/// query engine reads it.
pub fn check_file(path: &Path, table: &schema::Table) -> Result<FileInfo, LoadError> {
    open_file(path, table, |_| false).map(|(info, _)| info)
}

/// The rows one file's footer declares (after checking its metadata; panics caught).
pub fn row_count(path: &Path) -> Result<u64, LoadError> {
    guarded(path, || {
        let mut f = File::open(path).map_err(|err| LoadError::Io {
            path: path.to_path_buf(),
            err,
        })?;
        let md = check_metadata(path, &mut f)?;
        Ok(md.file_metadata().num_rows().max(0) as u64)
    })
}

/// Decodes every row of one file (panics caught): how the engine finds the file a failed query
/// could not read.
pub fn read_all(path: &Path, table: &schema::Table) -> Result<(), LoadError> {
    open_file(path, table, |_| true).map(drop)
}

/// Every file of every table below `dir` checked and decoded completely, each on its own (what
/// the query engine relies on: a corrupt file is an error naming it, never a panic). Returns the
/// files read.
pub fn read_tree(dir: &Path) -> Result<usize, LoadError> {
    check_dir(dir)?;
    let mut n = 0;
    for table in schema::tables() {
        for p in parquet_files(&dir.join(table.name))? {
            read_all(&p, table)?;
            n += 1;
        }
    }
    Ok(n)
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
        let err = read_tree(&root).unwrap_err();
        let text = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(text.contains("flows-h-x-0000.parquet"), "{text}");
        assert!(text.contains("\"ce\""), "{text}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
