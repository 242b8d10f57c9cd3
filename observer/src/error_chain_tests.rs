//! Each error's cause is printed once: its message says what failed, the cause is only its
//! `source()`, so the chain as the commands print it (anyhow's `{:#}` and `{:?}`) and as the
//! logs, reports and alerts print it (`contract::error::chain`) has the cause's text once.

use std::error::Error;

use contract::error::chain;

use crate::pipeline::CollectorError;
use crate::sinks::checkpoints::CheckpointError;
use crate::sinks::parquet_files::OutputError;
use crate::sinks::tui::TuiError;
use crate::sources::capture::ReplayError;
use crate::sources::kernel::LiveError;
use crate::sources::kernel::kfunc::KfuncError;

/// The text of the innermost cause of every error below.
const CAUSE: &str = "the-innermost-cause";

fn io() -> std::io::Error {
    std::io::Error::other(CAUSE)
}

fn parquet() -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::General(CAUSE.into())
}

/// Errors of every type whose message used to repeat its `#[source]`, some wrapped in the
/// errors that carry them up.
fn errors() -> Vec<(&'static str, Box<dyn Error + Send + Sync + 'static>)> {
    let out_io = || OutputError::Io {
        path: "/out/flows/x.parquet".into(),
        err: io(),
    };
    vec![
        ("OutputError::Io", Box::new(out_io())),
        (
            "OutputError::Parquet",
            Box::new(OutputError::Parquet {
                table: "flows".into(),
                err: parquet(),
            }),
        ),
        (
            "OutputError::Arrow",
            Box::new(OutputError::Arrow {
                table: "alerts".into(),
                err: arrow::error::ArrowError::ComputeError(CAUSE.into()),
            }),
        ),
        (
            "CheckpointError::Io",
            Box::new(CheckpointError::Io {
                path: "x.ckpt".into(),
                err: io(),
            }),
        ),
        (
            "CheckpointError::Parquet",
            Box::new(CheckpointError::Parquet {
                path: "x.part".into(),
                err: parquet(),
            }),
        ),
        (
            "OutputError::Checkpoint",
            Box::new(OutputError::Checkpoint(CheckpointError::Io {
                path: "x.ckpt".into(),
                err: io(),
            })),
        ),
        ("TuiError::Terminal", Box::new(TuiError::Terminal(io()))),
        (
            "CollectorError::OutDir",
            Box::new(CollectorError::OutDir {
                path: "/out".into(),
                err: io(),
            }),
        ),
        (
            "CollectorError::Output",
            Box::new(CollectorError::Output(out_io())),
        ),
        (
            "KfuncError::Io",
            Box::new(KfuncError::Io {
                path: "/sys/kernel/btf/vmlinux".into(),
                source: io(),
            }),
        ),
        ("LiveError::Op", Box::new(LiveError::op("map QPS", io()))),
        (
            "LiveError::Op of a LiveError::Op",
            Box::new(LiveError::op(
                "attaching XDP to eth0",
                LiveError::op("map QPS", io()),
            )),
        ),
        (
            "ReplayError::Open",
            Box::new(ReplayError::Open {
                file: "a.pcap".into(),
                source: io(),
            }),
        ),
        (
            "ReplayError::Io",
            Box::new(ReplayError::Io {
                file: "a.pcap".into(),
                offset: 24,
                source: io(),
            }),
        ),
    ]
}

#[test]
fn every_cause_is_printed_once() {
    for (name, e) in errors() {
        test_support::errors::assert_cause_printed_once(name, e, CAUSE);
    }
}

/// The messages still say what failed, and with what.
#[test]
fn messages_name_what_failed() {
    for (name, e) in errors() {
        let text = chain(&*e);
        let what = [
            "/out/flows/x.parquet",
            "flows",
            "alerts",
            "x.ckpt",
            "x.part",
            "terminal",
            "/out",
            "/sys/kernel/btf/vmlinux",
            "map QPS",
            "a.pcap",
        ];
        assert!(what.iter().any(|w| text.contains(w)), "{name}: {text}");
        assert!(text.ends_with(CAUSE), "{name}: {text}");
    }
}
