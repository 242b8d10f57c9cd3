//! Helpers that keep the eBPF verifier able to follow a value from its check to its use, on the
//! oldest kernels supported too (docs/datapath.md, "The verifier").
//!
//! Verifiers before about Linux 6.4 do not link a register with a 32-bit copy of it: where LLVM
//! bounds-checks a copy (`w3 = w1; if r3 > 4 goto ...`) and indexes with the original, the index
//! still reads as unbounded there and the program is rejected (`invalid access to map value`), as
//! Debian 12's 6.1 did. [`index`] makes the checked value and the used value one register.

/// `Some(i)` when `i < len`. In the eBPF programs `i` first passes through an empty assembly
/// statement, so LLVM cannot split the comparison and the use over two registers (nor narrow the
/// comparison to a 32-bit copy): the verifier sees the bound on the register that indexes.
#[inline(always)]
pub fn index(i: usize, len: usize) -> Option<usize> {
    let i = opaque(i as u64);
    if i < len as u64 {
        Some(i as usize)
    } else {
        None
    }
}

/// `v`, unknown to the compiler (an empty assembly statement in the eBPF programs; the value
/// itself elsewhere).
#[inline(always)]
pub fn opaque(v: u64) -> u64 {
    #[cfg(target_arch = "bpf")]
    {
        let mut v = v;
        // SAFETY: an empty assembly template: no instruction, the register keeps its value.
        unsafe {
            core::arch::asm!("{0} = {0}", inout(reg) v, options(pure, nomem, nostack, preserves_flags));
        }
        v
    }
    #[cfg(not(target_arch = "bpf"))]
    {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_some_only_below_len() {
        assert_eq!(index(0, 5), Some(0));
        assert_eq!(index(4, 5), Some(4));
        assert_eq!(index(5, 5), None);
        assert_eq!(index(255, 5), None);
        assert_eq!(index(0, 0), None);
    }
}
