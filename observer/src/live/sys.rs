//! The two map commands aya 0.16 does not expose: `BPF_MAP_LOOKUP_BATCH` (one syscall per
//! chunk of keys instead of two per key) and `BPF_MAP_LOOKUP_AND_DELETE_ELEM` on a hash map
//! (eviction without losing the increments made between a read and a delete).

use std::io;
use std::mem::{MaybeUninit, size_of};
use std::os::fd::RawFd;

const BPF_MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// `union bpf_attr`, the member used by the element commands.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
    _rest: [u64; 12],
}

/// `union bpf_attr`, the member used by the batch commands.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
    _rest: [u64; 9],
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<()> {
    // SAFETY: `attr` is a zero-padded bpf_attr member of the size passed.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, size_of::<T>() as u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads every (key, value) of a (non-per-CPU) hash map, `chunk` keys per syscall. `expect` is
/// how many keys the caller expects (the last read's count): the output is allocated once at
/// that size (plus room to grow) instead of doubling through ~140 MB of reallocations at 100k
/// keys, and the per-syscall key/value buffers are allocated once and reused.
/// `each` is applied to every value as it is copied out (while it is in the cache).
pub fn lookup_batch<K: Copy, V: Copy>(
    fd: RawFd,
    chunk: u32,
    expect: usize,
    mut each: impl FnMut(&mut V),
) -> io::Result<Vec<(K, V)>> {
    let mut chunk = chunk.max(1);
    let mut out = Vec::with_capacity(expect + expect / 16 + chunk as usize);
    let mut in_tok = 0u64;
    let mut out_tok = 0u64;
    let mut first = true;
    let mut keys: Vec<MaybeUninit<K>> = Vec::new();
    let mut vals: Vec<MaybeUninit<V>> = Vec::new();
    loop {
        keys.resize(chunk as usize, MaybeUninit::uninit());
        vals.resize(chunk as usize, MaybeUninit::uninit());
        let mut a = BatchAttr {
            in_batch: if first {
                0
            } else {
                &mut in_tok as *mut u64 as u64
            },
            out_batch: &mut out_tok as *mut u64 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: vals.as_mut_ptr() as u64,
            count: chunk,
            map_fd: fd as u32,
            ..Default::default()
        };
        let r = bpf(BPF_MAP_LOOKUP_BATCH, &mut a);
        let n = (a.count as usize).min(chunk as usize);
        let done = match r {
            Ok(()) => false,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => true,
            // One bucket holds more keys than `chunk`: retry it with a larger buffer.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && n == 0 => {
                chunk = chunk.saturating_mul(2);
                if chunk > 1 << 20 {
                    return Err(e);
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        for i in 0..n {
            // SAFETY: the kernel wrote `n` keys and values.
            let (k, mut v) = unsafe { (keys[i].assume_init(), vals[i].assume_init()) };
            each(&mut v);
            out.push((k, v));
        }
        if done {
            return Ok(out);
        }
        in_tok = out_tok;
        first = false;
    }
}

/// Removes `key` from a hash map, returning its last value (`None` when absent).
pub fn lookup_and_delete<K: Copy, V: Copy>(fd: RawFd, key: &K) -> io::Result<Option<V>> {
    let mut v = MaybeUninit::<V>::uninit();
    let mut a = ElemAttr {
        map_fd: fd as u32,
        key: key as *const K as u64,
        value: v.as_mut_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_LOOKUP_AND_DELETE_ELEM, &mut a) {
        // SAFETY: the kernel wrote the value.
        Ok(()) => Ok(Some(unsafe { v.assume_init() })),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
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
