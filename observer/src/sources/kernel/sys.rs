//! The one BPF command used outside aya: `BPF_PROG_TEST_RUN` on a bare program fd, so several
//! threads can run one loaded program at once (the multi-CPU tests).

use std::io;
use std::mem::size_of;
use std::os::fd::RawFd;

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<()> {
    // SAFETY: `attr` is a zero-padded bpf_attr member of the size passed.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, size_of::<T>() as u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// `union bpf_attr`, the member used by BPF_PROG_TEST_RUN.
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
