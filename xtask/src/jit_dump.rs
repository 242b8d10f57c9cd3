//! `cargo xtask jit-dump [--out DIR] [--max-qps N]`: loads the eBPF object as the benchmark
//! does and writes each program's JIT image (`<prog>.jit`, raw x86-64/arm64 code) and
//! verifier-rewritten instructions (`<prog>.xlated`) to DIR (default `target/jit-dump`), for
//! profiling: `perf script -F ip,sym,symoff` gives sample offsets into `bpf_prog_<tag>_<prog>`,
//! and `objdump -D -b binary -mi386:x86-64 DIR/roce_xdp.jit` the instructions at those offsets.
//! `--max-qps` must match the benchmark's (65536): the table size is a load-time constant the
//! verifier folds into the code.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use observer::live::ProgTester;
use observer_common::maps::Policy;

const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// `BPF_PROG_TYPE_XDP`, `BPF_PROG_TYPE_SCHED_CLS` as in /proc/<pid>/fdinfo.
const PROG_TYPES: [&str; 2] = ["prog_type:\t6\n", "prog_type:\t3\n"];

/// The leading members of `struct bpf_prog_info` (the kernel fills up to `info_len`).
#[repr(C)]
#[derive(Default)]
struct ProgInfo {
    ty: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
}

/// `union bpf_attr`, the `info` member.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
    _rest: [u64; 8],
}

fn prog_info(fd: u32, info: &mut ProgInfo) -> std::io::Result<()> {
    let mut a = InfoAttr {
        bpf_fd: fd,
        info_len: size_of::<ProgInfo>() as u32,
        info: info as *mut ProgInfo as u64,
        ..Default::default()
    };
    // SAFETY: `a` is a zero-padded bpf_attr member pointing at `info`, whose buffers (when set)
    // have the lengths given in it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &mut a as *mut InfoAttr,
            size_of::<InfoAttr>() as u32,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

pub fn main(args: &[String]) -> Result<()> {
    let mut out = PathBuf::from("target/jit-dump");
    let mut max_qps: u32 = 65536;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = it.next().context("--out DIR")?.into(),
            "--max-qps" => max_qps = it.next().context("--max-qps N")?.parse()?,
            other => bail!("unknown argument {other:?} (--out DIR, --max-qps N)"),
        }
    }
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let _t = ProgTester::load(max_qps, &Policy::NONE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut n = 0;
    for e in std::fs::read_dir("/proc/self/fdinfo")? {
        let e = e?;
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if !PROG_TYPES.iter().any(|t| text.contains(t)) {
            continue;
        }
        let fd: u32 = e.file_name().to_string_lossy().parse()?;
        let mut info = ProgInfo::default();
        prog_info(fd, &mut info).context("BPF_OBJ_GET_INFO_BY_FD")?;
        let mut jit = vec![0u8; info.jited_prog_len as usize];
        let mut xl = vec![0u8; info.xlated_prog_len as usize];
        let mut info2 = ProgInfo {
            jited_prog_len: jit.len() as u32,
            jited_prog_insns: jit.as_mut_ptr() as u64,
            xlated_prog_len: xl.len() as u32,
            xlated_prog_insns: xl.as_mut_ptr() as u64,
            ..Default::default()
        };
        prog_info(fd, &mut info2).context("BPF_OBJ_GET_INFO_BY_FD")?;
        let name_len = info.name.iter().position(|&b| b == 0).unwrap_or(16);
        let name = String::from_utf8_lossy(&info.name[..name_len]).into_owned();
        let tag: String = info.tag.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(out.join(format!("{name}.jit")), &jit)?;
        std::fs::write(out.join(format!("{name}.xlated")), &xl)?;
        println!(
            "{name}: tag {tag}, {} JIT bytes, {} instructions -> {}/{name}.jit",
            jit.len(),
            xl.len() / 8,
            out.display()
        );
        n += 1;
    }
    if n == 0 {
        bail!("no loaded programs found among this process's file descriptors");
    }
    Ok(())
}
