//! Checkpoints of an open Parquet file: what makes its completed row groups durable without a
//! journal.
//!
//! An open window's Parquet bytes go to its part file as row groups complete
//! ([`super::parquet_files`]), but a part file has no footer, so after a crash its bytes alone
//! cannot be read. When an interval leaves many rows in the row group being encoded, the writer
//! cuts the row group, fsyncs the part file and appends a record to the window's checkpoint log
//! (`.journal/<name>.<pid>.ckpt`) with the footer metadata of the row groups cut since the last
//! record. At recovery the records' row groups, after the part file's first `prefix_len` bytes,
//! make a complete Parquet file: the checkpointed rows come from it, and only the rows after
//! the last checkpoint need the journal.
//!
//! A record, all integers little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `RCK1` |
//! | 8 | `prefix_len`: bytes of the part file the row groups so far end at |
//! | 8 | `rows`: rows in those row groups |
//! | 4 | `meta_len` |
//! | `meta_len` | Thrift `FileMetaData` whose row groups are those cut since the last record (the first record's also carries `ARROW:schema`) |
//! | 4 | CRC-32 of the bytes above |
//!
//! A record is appended and fdatasynced before the journal restarts after it, so a crash
//! while appending leaves a torn last record and a journal that still holds its rows: the log
//! is read up to its first record that is short, has another magic, fails its CRC or does not
//! decode, and reading it says where that was.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::metadata::{
    FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter,
    RowGroupMetaData,
};
use parquet::schema::types::SchemaDescPtr;

const MAGIC: &[u8; 4] = b"RCK1";
/// magic, prefix_len, rows, meta_len
const HEAD: usize = 4 + 8 + 8 + 4;
/// A record's metadata larger than this is taken for garbage (a window's row groups of one
/// checkpoint take a few KiB per row group).
const MAX_META: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot access {path}")]
    Io {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("{path}: Parquet metadata")]
    Parquet {
        path: String,
        #[source]
        err: parquet::errors::ParquetError,
    },
    #[error("{path} has {have} bytes, its checkpoint at offset {offset} of {log} needs {need}")]
    ShortPart {
        path: String,
        have: u64,
        need: u64,
        log: String,
        offset: u64,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |err| CheckpointError::Io {
        path: path.display().to_string(),
        err,
    }
}

/// The checkpoint log of one open window, written by [`super::parquet_files::TableWriter`].
pub struct CheckpointLog {
    path: PathBuf,
    /// Created at the first record.
    file: Option<File>,
    /// Row groups of the writer already in a record.
    groups: usize,
    /// Rows in them.
    rows: u64,
    schema_descr: SchemaDescPtr,
    /// `ARROW:schema`, as the writer puts it in the footer (the rows read back get the
    /// table's Arrow types); in the first record.
    kv: Vec<KeyValue>,
    created_by: Option<String>,
}

impl CheckpointLog {
    pub fn new(
        path: PathBuf,
        schema: &Schema,
        schema_descr: SchemaDescPtr,
        created_by: Option<String>,
    ) -> CheckpointLog {
        let kv = vec![KeyValue::new(
            parquet::arrow::ARROW_SCHEMA_META_KEY.to_string(),
            parquet::arrow::encode_arrow_schema(schema),
        )];
        CheckpointLog {
            path,
            file: None,
            groups: 0,
            rows: 0,
            schema_descr,
            kv,
            created_by,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows in the checkpointed row groups.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Records the row groups of `flushed` (the writer's, all of them so far) not recorded
    /// yet, which end at byte `prefix_len` of the part file (already fsynced), and makes the
    /// record durable. Returns the rows of every checkpointed row group.
    pub fn record(
        &mut self,
        prefix_len: u64,
        flushed: &[RowGroupMetaData],
    ) -> Result<u64, CheckpointError> {
        let new = flushed.get(self.groups..).unwrap_or_default();
        let rows = self.rows + new.iter().map(|g| g.num_rows() as u64).sum::<u64>();
        // the Arrow schema in the first record only: recovery takes it from there
        let first = self.file.is_none();
        let fm = FileMetaData::new(
            1,
            (rows - self.rows) as i64,
            self.created_by.clone(),
            first.then(|| self.kv.clone()),
            Arc::clone(&self.schema_descr),
            None,
        );
        let md = ParquetMetaData::new(fm, new.to_vec());
        let mut footer = Vec::new();
        ParquetMetaDataWriter::new(&mut footer, &md)
            .finish()
            .map_err(|err| CheckpointError::Parquet {
                path: self.path.display().to_string(),
                err,
            })?;
        // the footer ends with its length and `PAR1`: the record keeps the metadata only
        footer.truncate(footer.len().saturating_sub(8));
        let mut rec = Vec::with_capacity(HEAD + footer.len() + 4);
        rec.extend_from_slice(MAGIC);
        rec.extend_from_slice(&prefix_len.to_le_bytes());
        rec.extend_from_slice(&rows.to_le_bytes());
        rec.extend_from_slice(&(footer.len() as u32).to_le_bytes());
        rec.extend_from_slice(&footer);
        let crc = crc32fast::hash(&rec);
        rec.extend_from_slice(&crc.to_le_bytes());
        if self.file.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(io(&self.path))?;
            self.file = Some(f);
        }
        let f = self.file.as_mut().expect("opened above");
        f.write_all(&rec).map_err(io(&self.path))?;
        f.sync_data().map_err(io(&self.path))?;
        self.groups = flushed.len();
        self.rows = rows;
        Ok(rows)
    }
}

/// What a checkpoint log holds, up to its first bad record.
pub struct Checkpointed {
    /// The part file's bytes the row groups take.
    pub prefix_len: u64,
    /// Rows in them.
    pub rows: u64,
    /// Offset in the log of the last good record (for errors).
    pub last_offset: u64,
    /// Where the first bad record starts, and why it is bad (a crash while appending).
    pub torn: Option<(u64, String)>,
    file_metadata: FileMetaData,
    groups: Vec<RowGroupMetaData>,
}

/// Reads the checkpoint log at `path`: `None` when it has no good record.
pub fn read_log(path: &Path) -> Result<Option<Checkpointed>, CheckpointError> {
    let data = std::fs::read(path).map_err(io(path))?;
    let mut off = 0usize;
    let mut out: Option<Checkpointed> = None;
    let torn = loop {
        if off == data.len() {
            break None;
        }
        let rest = &data[off..];
        if rest.len() < HEAD {
            break Some("a short record".to_string());
        }
        if &rest[..4] != MAGIC {
            break Some("no record magic".to_string());
        }
        let word = |at: usize| u64::from_le_bytes(rest[at..at + 8].try_into().expect("8 bytes"));
        let (prefix_len, rows) = (word(4), word(12));
        let meta_len = u32::from_le_bytes(rest[20..24].try_into().expect("4 bytes")) as usize;
        if meta_len > MAX_META || rest.len() < HEAD + meta_len + 4 {
            break Some(format!(
                "a record of {meta_len} bytes of metadata cut short"
            ));
        }
        let end = HEAD + meta_len;
        let crc = u32::from_le_bytes(rest[end..end + 4].try_into().expect("4 bytes"));
        if crc32fast::hash(&rest[..end]) != crc {
            break Some("a record whose CRC does not match".to_string());
        }
        let md = match ParquetMetaDataReader::decode_metadata(&rest[HEAD..end]) {
            Ok(md) => md,
            Err(e) => break Some(format!("metadata that does not decode ({e})")),
        };
        let (fm, groups) = (md.file_metadata().clone(), md.row_groups().to_vec());
        match &mut out {
            Some(c) => {
                c.groups.extend(groups);
                c.prefix_len = prefix_len;
                c.rows = rows;
                c.last_offset = off as u64;
            }
            None => {
                out = Some(Checkpointed {
                    prefix_len,
                    rows,
                    last_offset: off as u64,
                    torn: None,
                    file_metadata: fm,
                    groups,
                })
            }
        }
        off += end + 4;
    };
    match (&mut out, torn) {
        (Some(c), Some(why)) => c.torn = Some((off as u64, why)),
        (None, Some(why)) => {
            tracing::warn!(log = %path.display(), offset = off, reason = %why, "a checkpoint log without a good record");
        }
        _ => {}
    }
    Ok(out)
}

/// The rows of the checkpointed row groups: the part file's first `prefix_len` bytes closed
/// with a footer of every recorded row group, read as Parquet. `log` names the checkpoint log
/// in errors.
pub fn read_rows(
    part: &Path,
    c: &Checkpointed,
    log: &Path,
) -> Result<Vec<RecordBatch>, CheckpointError> {
    let f = File::open(part).map_err(io(part))?;
    let have = f.metadata().map_err(io(part))?.len();
    if have < c.prefix_len {
        return Err(CheckpointError::ShortPart {
            path: part.display().to_string(),
            have,
            need: c.prefix_len,
            log: log.display().to_string(),
            offset: c.last_offset,
        });
    }
    let mut bytes = vec![0u8; c.prefix_len as usize];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut bytes, 0).map_err(io(part))?;
    let fm = &c.file_metadata;
    let whole = FileMetaData::new(
        fm.version(),
        c.groups.iter().map(|g| g.num_rows()).sum(),
        fm.created_by().map(str::to_string),
        fm.key_value_metadata().cloned(),
        fm.schema_descr_ptr(),
        None,
    );
    let md = ParquetMetaData::new(whole, c.groups.clone());
    let perr = |err| CheckpointError::Parquet {
        path: format!("{} closed by {}", part.display(), log.display()),
        err,
    };
    ParquetMetaDataWriter::new(&mut bytes, &md)
        .finish()
        .map_err(perr)?;
    ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
        .and_then(|b| b.build())
        .map_err(perr)?
        .map(|b| b.map_err(|e| perr(e.into())))
        .collect()
}
