//! Faulty inputs: corrupt Parquet files, other writers' codecs, symlink loops. Each is an error
//! naming the file (or a correct read), never a panic or a hang.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use analysis::report::{Report, analyze};
use contract::policy::PolicyConfig;

/// The report of one tree under the nvidia profile (the query engine reads every file).
fn report_of(dir: &Path) -> Result<Report, analysis::engine::EngineError> {
    analyze(
        &[dir.to_path_buf()],
        &PolicyConfig::profile("nvidia").unwrap(),
    )
}
/// The query engine over one tree, decoding every column of every flows row (one query: the
/// flipped-byte loop runs many).
fn read_by_engine(dir: &Path) -> Result<usize, analysis::engine::EngineError> {
    use analysis::engine::{Engine, Filters, Options};
    let e = Engine::open(
        &[dir.to_path_buf()],
        &Filters::default(),
        &Options::default(),
    )?;
    Ok(e.run("SELECT * FROM flows")?
        .iter()
        .map(|b| b.num_rows())
        .sum())
}

use crate::support::{heavy, run, tmp, write_logs};

/// Every `*.parquet` below `dir`.
fn parquet_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Where the parquet crate panicked on one flipped bit, found from the file's metadata:
/// every byte of the first two column chunks written with DELTA_BINARY_PACKED (its decoder
/// subtracts with overflow on a corrupt page header), and in the footer the first byte of the
/// zigzag varint of each column chunk's data page offset, whose low bit is the sign
/// (`ColumnChunkMetaData::byte_range` asserts on a negative offset).
fn panicky_offsets(file: &Path, bytes: &[u8], footer_start: usize) -> Vec<(usize, u8)> {
    let md = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&std::fs::File::open(file).unwrap())
        .unwrap();
    let chunks: Vec<_> = md.row_groups().iter().flat_map(|rg| rg.columns()).collect();
    let mut out: Vec<(usize, u8)> = chunks
        .iter()
        .filter(|c| {
            c.encodings()
                .any(|e| e == parquet::basic::Encoding::DELTA_BINARY_PACKED)
        })
        .take(2)
        .flat_map(|c| {
            let (start, len) = c.byte_range();
            (start as usize..(start + len) as usize).flat_map(|i| [(i, 0x01), (i, 0xff)])
        })
        .collect();
    let footer = &bytes[footer_start..];
    for c in chunks.iter().take(24) {
        let mut v = ((c.data_page_offset() << 1) ^ (c.data_page_offset() >> 63)) as u64;
        let mut varint = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                varint.push(b);
                break;
            }
            varint.push(b | 0x80);
        }
        if varint.len() < 2 {
            continue; // one byte matches too much of the footer
        }
        out.extend(
            footer
                .windows(varint.len())
                .enumerate()
                .filter(|(_, w)| *w == varint.as_slice())
                .map(|(i, _)| (footer_start + i, 0x01)),
        );
    }
    out
}

/// One flipped byte in a flows file written by the observer's writer: the report returns Ok or an
/// error naming the file, never panics. The flips where the parquet crate panicked
/// ([`panicky_offsets`]) and every Nth byte of the whole file flipped two ways, within a few
/// seconds.
#[test]
fn a_flipped_byte_is_an_error_naming_the_file_never_a_panic() {
    // CPU-bound for a fixed time: alone, so that as many flips run as when it had its own process.
    let _heavy = heavy();
    let (_dir, dir) = tmp("faults-flip");
    write_logs(&dir, &["clean"]);
    // Only the flows table, so the tree is one file.
    for t in ["interfaces", "alerts"] {
        let _ = std::fs::remove_dir_all(dir.join(t));
    }
    let files = parquet_below(&dir.join("flows"));
    assert_eq!(files.len(), 1, "{files:?}");
    let path = &files[0];
    let good = std::fs::read(path).unwrap();
    assert!(read_by_engine(&dir).expect("the unmodified file loads") > 0);
    let len = good.len();
    let footer_len = u32::from_le_bytes(good[len - 8..len - 4].try_into().unwrap()) as usize;
    let footer_start = len - 8 - footer_len;

    // Panics (message and location) are recorded by this hook, so a regression prints the
    // flipped byte and where the crate panicked. The hook is the whole process's: a panic on
    // another test's thread (libtest names each after its test, `module::name`) goes to the
    // previous hook as it would without this one.
    let seen: Arc<Mutex<Option<String>>> = Arc::default();
    let hook_seen = Arc::clone(&seen);
    let prev: Arc<dyn Fn(&std::panic::PanicHookInfo) + Send + Sync> =
        Arc::from(std::panic::take_hook());
    let hook_prev = Arc::clone(&prev);
    let this_test = std::thread::current().name().map(str::to_owned);
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name();
        if name.is_some_and(|n| n.contains("::")) && name != this_test.as_deref() {
            return hook_prev(info);
        }
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let loc = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        *hook_seen.lock().unwrap() = Some(format!("{msg} at {loc}"));
    }));

    // ROCE_FLIP_STRIDE=1 ROCE_FLIP_SECS=900: every byte (how the upstream panics were found).
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (stride, secs) = (
        env("ROCE_FLIP_STRIDE", 0) as usize,
        env("ROCE_FLIP_SECS", 6),
    );
    let stride = if stride == 0 {
        (len / 100).max(1)
    } else {
        stride
    };
    let mut flips = panicky_offsets(path, &good, footer_start);
    assert!(flips.len() > 24, "{flips:?}");
    // the known panics first, so the time bound never skips them
    flips.extend(
        (0..len)
            .step_by(stride)
            .flat_map(|i| [(i, 0x01), (i, 0xff)]),
    );
    let mut once = std::collections::HashSet::new();
    flips.retain(|f| once.insert(*f));
    let started = Instant::now();
    let mut panics = Vec::new();
    let (mut oks, mut errs) = (0, 0);
    let mut bad = good.clone();
    for &(i, flip) in &flips {
        if started.elapsed() > Duration::from_secs(secs) {
            break;
        }
        bad[i] = good[i] ^ flip;
        std::fs::write(path, &bad).unwrap();
        *seen.lock().unwrap() = None;
        match std::panic::catch_unwind(|| read_by_engine(&dir)) {
            Ok(Ok(_)) => oks += 1,
            Ok(Err(e)) => {
                errs += 1;
                let text = e.to_string();
                assert!(
                    text.contains(&path.display().to_string()),
                    "byte {i} ^ {flip:#04x}: the error does not name the file: {text}"
                );
            }
            Err(_) => panics.push(format!(
                "byte {i} of {len} ({:#04x} -> {:#04x}, {}): {}",
                good[i],
                bad[i],
                if i >= footer_start { "footer" } else { "data" },
                seen.lock().unwrap().clone().unwrap_or_default()
            )),
        }
        // A decoder panic that the engine caught reaches the hook too: print it (for upstream).
        if let Some(p) = seen.lock().unwrap().take() {
            eprintln!("upstream panic caught: byte {i} ^ {flip:#04x}: {p}");
        }
        bad[i] = good[i];
    }
    std::panic::set_hook(Box::new(move |info| prev(info)));
    eprintln!(
        "{} of {} flips of a {len}-byte file (footer from {footer_start}): {oks} ok, {errs} errors, {} panics, {:?}",
        oks + errs + panics.len(),
        flips.len(),
        panics.len(),
        started.elapsed()
    );
    assert!(
        panics.is_empty(),
        "{} panics:\n{}",
        panics.len(),
        panics.join("\n")
    );
    assert!(errs > 0);
}

/// Flows files rewritten by another writer (parquet's ArrowWriter) with Snappy, LZ4 (both
/// framings), gzip or no compression: each reads to the same figures as the observer's zstd.
#[test]
fn other_writers_codecs_read_like_zstd() {
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::basic::{Compression, GzipLevel};
    use parquet::file::properties::WriterProperties;

    let (_dir, dir) = tmp("faults-codecs");
    write_logs(&dir, &["clean", "go_back_n"]);
    let want = report_of(&dir).unwrap().figures;
    assert!(want.data_pkts > 0);
    let files = parquet_below(&dir.join("flows"));
    let batches: Vec<Vec<_>> = files
        .iter()
        .map(|p| {
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(p).unwrap())
                .unwrap()
                .build()
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
        })
        .collect();
    for codec in [
        Compression::SNAPPY,
        Compression::LZ4,
        Compression::LZ4_RAW,
        Compression::GZIP(GzipLevel::default()),
        Compression::UNCOMPRESSED,
    ] {
        for (p, bs) in files.iter().zip(&batches) {
            let props = WriterProperties::builder().set_compression(codec).build();
            let f = std::fs::File::create(p).unwrap();
            let mut w = ArrowWriter::try_new(f, bs[0].schema(), Some(props)).unwrap();
            for b in bs {
                w.write(b).unwrap();
            }
            w.close().unwrap();
        }
        let got = report_of(&dir)
            .unwrap_or_else(|e| panic!("{codec}: {e}: {:?}", std::error::Error::source(&e)));
        assert_eq!(got.figures, want, "{codec}");
    }
}

/// A symbolic link loop under the tree (and a link to a directory outside it) is not followed:
/// the report ends and reads the real files once.
#[test]
fn a_symlink_loop_is_not_followed() {
    let (_dir, dir) = tmp("faults-symlink");
    write_logs(&dir, &["clean"]);
    let want = report_of(&dir).unwrap().files;
    let hour = parquet_below(&dir.join("flows"))[0]
        .parent()
        .unwrap()
        .to_path_buf();
    std::os::unix::fs::symlink(&hour, hour.join("loop")).unwrap();
    std::os::unix::fs::symlink(dir.join("flows"), hour.join("up")).unwrap();
    std::os::unix::fs::symlink("/", dir.join("flows/root")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.clone();
    std::thread::spawn(move || tx.send(report_of(&d).map(|r| r.files).map_err(|e| e.to_string())));
    let got = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the report ends under a symlink loop");
    assert_eq!(got, Ok(want));
    // A tree nested deeper than the bound is an error naming where.
    let mut deep = dir.join("alerts");
    for i in 0..=analysis::load::MAX_DEPTH {
        deep = deep.join(format!("d{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    let err = report_of(&dir).err().unwrap().to_string();
    assert!(err.contains("deeper than") && err.contains("/d0/"), "{err}");
}

/// The command line's errors: NaN / infinite / negative margins are usage errors, a missing
/// directory says so, swapped `compare` arguments get a hint, `/dev/zero` as a baseline is
/// refused after a bounded read, a corrupt file is an error naming it (exit 1, not 101).
#[test]
fn command_line_errors() {
    let (_dir, dir) = tmp("faults-cli-errors");
    write_logs(&dir, &["clean"]);
    let bl = dir.join("baseline.json");
    let out = run(&[
        "baseline".as_ref(),
        "-o".as_ref(),
        bl.as_os_str(),
        dir.as_os_str(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();

    for (flag, v) in [
        ("--tolerance", "NaN"),
        ("--tolerance", "inf"),
        ("--tolerance", "-0.5"),
        ("--slack", "nan"),
        ("--slack", "-inf"),
        ("--slack", "-1"),
    ] {
        let o = run(&[
            "compare".as_ref(),
            flag.as_ref(),
            v.as_ref(),
            bl.as_os_str(),
            dir.as_os_str(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{flag} {v}: {o:?}");
        let e = stderr(&o);
        assert!(e.contains(flag) && e.contains("finite"), "{flag} {v}: {e}");
    }
    let o = run(&[
        "compare".as_ref(),
        "--tolerance=0".as_ref(),
        bl.as_os_str(),
        dir.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    let missing = dir.join("missing");
    let o = run(&["report".as_ref(), missing.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("does not exist") && e.contains(&*missing.to_string_lossy()),
        "{e}"
    );
    let o = run(&["report".as_ref(), bl.as_os_str()]);
    assert!(stderr(&o).contains("is not a directory"), "{}", stderr(&o));

    // swapped: the directory first, the baseline second
    let o = run(&["compare".as_ref(), dir.as_os_str(), bl.as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains("is a directory") && e.contains("baseline file first"),
        "{e}"
    );
    let o = run(&["compare".as_ref(), bl.as_os_str(), bl.as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("is not a directory"), "{}", stderr(&o));

    let o = run(&["compare".as_ref(), "/dev/zero".as_ref(), dir.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains("/dev/zero") && e.contains("larger than 16 MiB"),
        "{e}"
    );

    // A corrupt file: exit 1 and the file named, not a panic's 101.
    let f = parquet_below(&dir.join("flows"))[0].clone();
    let mut bytes = std::fs::read(&f).unwrap();
    let n = bytes.len();
    bytes[n - 9] ^= 0xff; // the footer's last byte
    std::fs::write(&f, &bytes).unwrap();
    let o = run(&["report".as_ref(), dir.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains(&*f.to_string_lossy()), "{}", stderr(&o));
}

/// A valid zero-row flows file from another writer (pyarrow: an empty row group whose chunks'
/// offsets are 0) is read as no rows, not refused as corrupt (which stopped the whole report);
/// an error is printed as its causes, without a backtrace even with RUST_BACKTRACE=1.
#[test]
fn a_zero_row_file_of_another_writer_reads_as_no_rows_and_errors_have_no_backtrace() {
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let (_t, dir) = tmp("zero-row-pyarrow");
    write_logs(&dir, &["clean"]);
    let before = run(&["report".as_ref(), "--json".as_ref(), dir.as_os_str()]);
    assert!(before.status.success(), "{}", stderr(&before));
    let f = parquet_below(&dir.join("flows"))[0].clone();
    let script = r#"
import sys, os, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1])
pq.write_table(t.slice(0, 0), os.path.join(os.path.dirname(sys.argv[1]), 'flows-pyarrow-zero.parquet'))
"#;
    let o = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&f)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let after = run(&["report".as_ref(), "--json".as_ref(), dir.as_os_str()]);
    assert!(after.status.success(), "{}", stderr(&after));
    let j = |o: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let (b, a) = (j(&before), j(&after));
    assert_eq!(a["files"], b["files"].as_u64().unwrap() + 1);
    assert_eq!(a["flow_rows"], b["flow_rows"]);
    // errors: the causes once, never a backtrace
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_roce-analyze"))
        .env("RUST_BACKTRACE", "1")
        .args(["report".as_ref(), dir.join("missing").as_os_str()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.starts_with("Error: ") && e.contains("does not exist"),
        "{e}"
    );
    assert!(!e.contains("backtrace") && !e.contains("Stack"), "{e}");
}
