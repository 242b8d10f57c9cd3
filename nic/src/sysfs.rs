//! Bounded reads of small pseudo-files (sysfs, debugfs, configfs) under a root directory, so tests
//! can point the readers at a fake tree.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::{Reading, Unavailable, UnavailableReason};

/// Largest pseudo-file read (counter and parameter files are a few bytes).
pub const MAX_FILE: u64 = 4096;
/// Largest directory listing accepted (files per hw_counters dir, GID slots per port).
pub const MAX_ENTRIES: usize = 4096;

/// Reads at most [`MAX_FILE`] bytes of a file as text.
pub fn read_small(path: &Path) -> io::Result<String> {
    let f = fs::File::open(path)?;
    let mut s = String::new();
    f.take(MAX_FILE).read_to_string(&mut s)?;
    Ok(s)
}

/// A path component taken from the kernel or the user (device or interface name): refuses
/// anything that could leave the directory.
pub fn component(name: &str) -> Option<&str> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0');
    ok.then_some(name)
}

/// Joins `root` and an absolute-looking path such as `sys/class/net`.
pub fn under(root: &Path, rel: &str) -> PathBuf {
    root.join(rel.trim_start_matches('/'))
}

/// Parses a decimal integer file (`"%u\n"`, `"%d\n"`, `"%llu\n"`).
pub fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok()
}

/// Reads an integer setting: absent or unreadable -> unavailable with the reason, never 0.
pub fn read_u64_setting(path: &Path) -> Reading<u64> {
    match read_small(path) {
        Ok(t) => match parse_u64(&t) {
            Some(v) => Reading::Read(v),
            None => Reading::unavailable(
                UnavailableReason::NotSupported,
                format!(
                    "{}: not an unsigned integer: {:?}",
                    path.display(),
                    t.trim()
                ),
            ),
        },
        Err(e) => Reading::Unavailable(io_unavailable(&e, path)),
    }
}

/// Reads a one-line text setting.
pub fn read_text_setting(path: &Path) -> Reading<String> {
    match read_small(path) {
        Ok(t) => Reading::Read(t.trim_end_matches(['\n', '\0']).to_string()),
        Err(e) => Reading::Unavailable(io_unavailable(&e, path)),
    }
}

/// Any read error of a setting file as "unavailable": absent, permission, or (for EINVAL /
/// EIO / EOPNOTSUPP from a driver callback) not supported with the error text.
pub fn io_unavailable(e: &io::Error, path: &Path) -> Unavailable {
    let what = path.display().to_string();
    Unavailable::from_io(e, &what).unwrap_or_else(|| {
        Unavailable::new(UnavailableReason::NotSupported, format!("{what}: {e}"))
    })
}

/// Sorted file names of a directory, bounded.
pub fn list_dir(dir: &Path) -> io::Result<Vec<String>> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        if v.len() >= MAX_ENTRIES {
            return Err(io::Error::other(format!(
                "{} has more than {MAX_ENTRIES} entries",
                dir.display()
            )));
        }
        v.push(e.file_name().to_string_lossy().into_owned());
    }
    v.sort();
    Ok(v)
}
