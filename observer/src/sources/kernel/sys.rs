//! The BPF commands used outside aya: `BPF_PROG_TEST_RUN` on a bare program fd, so several
//! threads can run one loaded program at once (the multi-CPU tests), and the load of a probe
//! program aya has no probe for (the atomic instructions).

use std::io;
use std::mem::size_of;
#[cfg(any(test, feature = "test-support"))]
use std::os::fd::RawFd;

#[cfg(any(test, feature = "test-support"))]
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<()> {
    // SAFETY: `attr` is a zero-padded bpf_attr member of the size passed.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, size_of::<T>() as u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(any(test, feature = "test-support"))]
const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// `union bpf_attr`, the member used by BPF_PROG_TEST_RUN.
#[cfg(any(test, feature = "test-support"))]
#[repr(C)]
#[derive(Default)]
struct TestAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
    _rest: [u64; 4],
}

/// BPF_PROG_TEST_RUN on a program fd: (return value, average ns per run). Runs on the calling
/// thread's CPU.
#[cfg(any(test, feature = "test-support"))]
pub fn prog_test_run(fd: RawFd, data: &[u8], repeat: u32) -> io::Result<(u32, u32)> {
    let mut a = TestAttr {
        prog_fd: fd as u32,
        data_size_in: data.len() as u32,
        data_in: data.as_ptr() as u64,
        repeat,
        ..Default::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut a)?;
    Ok((a.retval, a.duration))
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// `union bpf_attr`, the member used by BPF_PROG_LOAD (the fields up to `prog_flags`).
#[repr(C)]
#[derive(Default)]
struct LoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
}

/// One BPF instruction: opcode, destination and source registers, offset, immediate.
const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    (code as u64)
        | (((dst & 0xf) | ((src & 0xf) << 4)) as u64) << 8
        | ((off as u16) as u64) << 16
        | ((imm as u32) as u64) << 32
}

/// Whether the kernel has the BPF atomic instructions with a fetched result (compare-and-
/// exchange, exchange, fetch-and-add; Linux 5.12), which the per-QP table's insert lock and
/// PSN state are built on: a 64-bit compare-and-exchange on the stack, in a socket filter.
/// Before 5.12 the same encoding is the old `BPF_XADD` with a reserved field set: EINVAL.
pub fn has_atomic_fetch() -> io::Result<bool> {
    const MOV64_IMM: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const STX_DW: u8 = 0x7b; // BPF_STX | BPF_MEM | BPF_DW
    const ATOMIC_DW: u8 = 0xdb; // BPF_STX | BPF_ATOMIC | BPF_DW
    const CMPXCHG: i32 = 0xf1; // BPF_CMPXCHG (with BPF_FETCH)
    const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
    let prog = [
        insn(MOV64_IMM, 1, 0, 0, 0),
        insn(STX_DW, 10, 1, -8, 0),
        insn(MOV64_IMM, 0, 0, 0, 0),
        insn(MOV64_IMM, 1, 0, 0, 1),
        insn(ATOMIC_DW, 10, 1, -8, CMPXCHG),
        insn(MOV64_IMM, 0, 0, 0, 0),
        insn(EXIT, 0, 0, 0, 0),
    ];
    let license = c"GPL";
    let mut a = LoadAttr {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        insn_cnt: prog.len() as u32,
        insns: prog.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: `a` is a zero-padded bpf_attr member of the size passed; `prog` and `license`
    // outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &mut a as *mut LoadAttr,
            size_of::<LoadAttr>() as u32,
        )
    };
    if r >= 0 {
        // SAFETY: a program fd the kernel just gave us, closed once.
        unsafe { libc::close(r as libc::c_int) };
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL) => Ok(false),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_are_encoded_as_the_kernel_reads_them() {
        // r0 = cmpxchg_64(r10 - 8, r0, r1): code, dst 10 / src 1, off -8, imm 0xf1
        assert_eq!(insn(0xdb, 10, 1, -8, 0xf1), 0x0000_00f1_fff8_1adb);
        assert_eq!(insn(0xb7, 1, 0, 0, 1), 0x0000_0001_0000_01b7);
    }
}
