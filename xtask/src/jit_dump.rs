//! `cargo xtask jit-dump [--out DIR] [--max-qps N]`: loads the eBPF object as the benchmark
//! does and writes each program's JIT image (`<prog>.jit`, raw x86-64/arm64 code) and
//! verifier-rewritten instructions (`<prog>.xlated`) to DIR (default `target/jit-dump`), for
//! profiling: `perf script -F ip,sym,symoff` gives sample offsets into `bpf_prog_<tag>_<prog>`,
//! and `objdump -D -b binary -mi386:x86-64 DIR/roce_xdp.jit` the instructions at those offsets.
//! `--max-qps` must match the benchmark's (65536): the table size is a load-time constant the
//! verifier folds into the code.
//!
//! `<prog>.lines` maps JIT offsets to source lines (the kernel's `jited_line_info` with the
//! program's line info and BTF strings): one `offset file:line:col` per record, ascending; a
//! sample at offset o belongs to the last record at or before o.
//!
//! `cargo xtask jit-lines PERF_SCRIPT [--prog NAME] [--dir DIR] [--top N]` does that: it reads
//! `perf script -F ip,sym,symoff` output, keeps the samples in `bpf_prog_<tag>_<NAME>` (default
//! roce_xdp), and prints the share of samples per source line, largest first.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use observer::sources::kernel::ProgTester;
use observer_common::maps::Policy;

const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_BTF_GET_FD_BY_ID: libc::c_long = 19;
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
    ifindex: u32,
    gpl_compatible: u32,
    netns_dev: u64,
    netns_ino: u64,
    nr_jited_ksyms: u32,
    nr_jited_func_lens: u32,
    jited_ksyms: u64,
    jited_func_lens: u64,
    btf_id: u32,
    func_info_rec_size: u32,
    func_info: u64,
    nr_func_info: u32,
    nr_line_info: u32,
    line_info: u64,
    jited_line_info: u64,
    nr_jited_line_info: u32,
    line_info_rec_size: u32,
    jited_line_info_rec_size: u32,
    nr_prog_tags: u32,
    prog_tags: u64,
}

/// `struct bpf_line_info`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct LineInfo {
    insn_off: u32,
    file_name_off: u32,
    line_off: u32,
    line_col: u32,
}

/// `struct bpf_btf_info` (leading members).
#[repr(C)]
#[derive(Default)]
struct BtfInfo {
    btf: u64,
    btf_size: u32,
    id: u32,
    name: u64,
    name_len: u32,
    kernel_btf: u32,
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
    obj_info(fd, info)
}

/// The bpf(2) command `cmd` on `a`; its non-negative result.
fn bpf(cmd: libc::c_long, a: &mut InfoAttr) -> std::io::Result<i64> {
    // SAFETY: `a` is a zero-padded bpf_attr prefix; the pointers in it (when set) point at
    // buffers of the lengths given beside them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            a as *mut InfoAttr,
            size_of::<InfoAttr>() as u32,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}

fn obj_info<T>(fd: u32, info: &mut T) -> std::io::Result<()> {
    let mut a = InfoAttr {
        bpf_fd: fd,
        info_len: size_of::<T>() as u32,
        info: info as *mut T as u64,
        ..Default::default()
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a).map(|_| ())
}

/// The program's BTF (its string section names the source files and lines).
fn prog_btf(btf_id: u32) -> Result<observer::sources::kernel::kfunc::Btf> {
    // The attribute's first member is the BTF id.
    let mut a = InfoAttr {
        bpf_fd: btf_id,
        ..Default::default()
    };
    let fd = bpf(BPF_BTF_GET_FD_BY_ID, &mut a).context("BPF_BTF_GET_FD_BY_ID")?;
    // SAFETY: a descriptor this call owns.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    let mut info = BtfInfo::default();
    obj_info(fd as u32, &mut info).context("BTF info")?;
    let mut data = vec![0u8; info.btf_size as usize];
    let mut info2 = BtfInfo {
        btf: data.as_mut_ptr() as u64,
        btf_size: data.len() as u32,
        ..Default::default()
    };
    obj_info(fd as u32, &mut info2).context("BTF data")?;
    drop(owned);
    data.truncate(info2.btf_size as usize);
    Ok(observer::sources::kernel::kfunc::Btf::parse(
        data,
        std::path::Path::new("program BTF"),
    )?)
}

/// `offset file:line:col` lines for the program on `fd` (see the module documentation).
fn line_map(fd: u32, info: &ProgInfo) -> Result<String> {
    let n = info.nr_jited_line_info as usize;
    if n == 0 || info.nr_line_info as usize != n || info.nr_jited_ksyms == 0 {
        bail!("the kernel gave no JIT line info");
    }
    let mut lines = vec![LineInfo::default(); n];
    let mut jited = vec![0u64; n];
    let mut ksyms = vec![0u64; info.nr_jited_ksyms as usize];
    let mut q = ProgInfo {
        nr_line_info: n as u32,
        line_info_rec_size: size_of::<LineInfo>() as u32,
        line_info: lines.as_mut_ptr() as u64,
        nr_jited_line_info: n as u32,
        jited_line_info_rec_size: 8,
        jited_line_info: jited.as_mut_ptr() as u64,
        nr_jited_ksyms: ksyms.len() as u32,
        jited_ksyms: ksyms.as_mut_ptr() as u64,
        ..Default::default()
    };
    prog_info(fd, &mut q).context("line info")?;
    let btf = prog_btf(info.btf_id)?;
    let start = ksyms[0];
    let mut out = String::new();
    for (l, &addr) in lines.iter().zip(&jited) {
        let file = String::from_utf8_lossy(btf.name(l.file_name_off));
        // Only the main program's lines (subprograms have their own images).
        if addr < start || addr - start > info.jited_prog_len as u64 {
            continue;
        }
        out.push_str(&format!(
            "{:#x} {}:{}:{}\n",
            addr - start,
            file.rsplit("/src/").next().unwrap_or(&file),
            l.line_col >> 10,
            l.line_col & 0x3ff
        ));
    }
    Ok(out)
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
    let _t = ProgTester::load(max_qps, &Policy::NONE)?;
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
        match line_map(fd, &info) {
            Ok(m) => std::fs::write(out.join(format!("{name}.lines")), m)?,
            Err(e) => eprintln!("{name}: no line map: {e:#}"),
        }
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

/// `cargo xtask jit-lines`: samples per source line (see the module documentation).
pub fn lines(args: &[String]) -> Result<()> {
    let mut prog = "roce_xdp".to_string();
    let mut dir = PathBuf::from("target/jit-dump");
    let mut top = 40usize;
    let mut input = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--prog" => prog = it.next().context("--prog NAME")?.clone(),
            "--dir" => dir = it.next().context("--dir DIR")?.into(),
            "--top" => top = it.next().context("--top N")?.parse()?,
            f if input.is_none() => input = Some(PathBuf::from(f)),
            other => bail!("unknown argument {other:?}"),
        }
    }
    let input =
        input.context("usage: jit-lines PERF_SCRIPT [--prog NAME] [--dir DIR] [--top N]")?;
    let map_path = dir.join(format!("{prog}.lines"));
    let map_text = std::fs::read_to_string(&map_path)
        .with_context(|| format!("{} (run cargo xtask jit-dump first)", map_path.display()))?;
    let mut map: Vec<(u64, String)> = Vec::new();
    for (i, l) in map_text.lines().enumerate() {
        let (off, loc) = l
            .split_once(' ')
            .with_context(|| format!("{}:{}: no offset", map_path.display(), i + 1))?;
        let off = u64::from_str_radix(off.trim_start_matches("0x"), 16)
            .with_context(|| format!("{}:{}: bad offset", map_path.display(), i + 1))?;
        // file:line, without the column.
        let loc = loc.rsplit_once(':').map_or(loc, |(fl, _)| fl);
        map.push((off, loc.to_string()));
    }
    map.sort();
    let samples =
        std::fs::read_to_string(&input).with_context(|| format!("reading {}", input.display()))?;
    let marker = format!("_{prog}+0x");
    let mut counts: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    let mut total = 0u64;
    for l in samples.lines() {
        let Some(p) = l.find(&marker) else { continue };
        let hex = &l[p + marker.len()..];
        let hex = hex
            .split(|c: char| !c.is_ascii_hexdigit())
            .next()
            .unwrap_or("");
        let Ok(off) = u64::from_str_radix(hex, 16) else {
            continue;
        };
        let i = map.partition_point(|(o, _)| *o <= off);
        let loc = if i == 0 {
            "(before the first line)"
        } else {
            map[i - 1].1.as_str()
        };
        *counts.entry(loc).or_default() += 1;
        total += 1;
    }
    if total == 0 {
        bail!(
            "no samples of {prog} in {} (was the program loaded with the same code?)",
            input.display()
        );
    }
    let mut v: Vec<(&str, u64)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    println!("{total} samples in {prog}");
    for (loc, n) in v.into_iter().take(top) {
        println!("{:5.1}% {n:7} {loc}", n as f64 * 100.0 / total as f64);
    }
    Ok(())
}
