//! A bounds-checked view of packet bytes. One implementation per context: slices here (replay,
//! tests), the XDP and tc contexts in `observer-ebpf`. The parser only ever reads through
//! [`Bytes::load`], so every access is checked once, against the captured length.

/// Bytes of one captured frame.
pub trait Bytes {
    /// Captured length (what can be read), not the original wire length.
    fn len(&self) -> usize;

    /// `N` bytes at `off`, or `None` when `off + N` is past the captured length.
    fn load<const N: usize>(&self, off: usize) -> Option<[u8; N]>;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Bytes for [u8] {
    #[inline(always)]
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    #[inline(always)]
    fn load<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        let end = off.checked_add(N)?;
        let s = self.get(off..end)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Some(out)
    }
}
