//! The XDP program's multi-buffer frame length without a helper call.
//!
//! A frame larger than a page (4096-byte RoCE MTU) reaches XDP as a multi-buffer frame, and its
//! wire length is `bpf_xdp_get_buff_len`: the linear part plus `skb_shared_info.xdp_frags_size`
//! when `xdp_buff.flags` has `XDP_FLAGS_HAS_FRAGS`. The helper call costs 8-10 ns per packet on
//! the benchmark machine (returns go through the Safe RET mitigation), as much as the whole
//! per-QP table lookup. The program can read the same two fields itself through two kfuncs that
//! the verifier replaces by a register move (`bpf_cast_to_kern_ctx`, `bpf_rdonly_cast`), given
//! the kernel's layout of `struct xdp_buff` and `struct skb_shared_info`.
//!
//! This module reads that layout from the running kernel's BTF (`/sys/kernel/btf/vmlinux`, a
//! small reader of the BTF format: aya keeps its own BTF types private) and rewrites the
//! program's placeholder calls (`observer_common::maps::kfunc_call`) into kfunc calls (aya
//! 0.16 does not resolve kfunc calls). The loader then checks the result against the helper on
//! this kernel (`xdp_len_probe`) before using it, and falls back to the helper when anything is
//! missing or differs.

use std::path::Path;

use object::{Object, ObjectSection, SectionKind};
use observer_common::maps::{XdpLenLayout, kfunc_call};

/// Where the kernel's BTF is.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// `SMP_CACHE_BYTES` (the shared info is `SKB_DATA_ALIGN`ed to it): 64 on x86-64 and arm64
/// builds. Not in BTF; a kernel built otherwise fails the load-time check and uses the helper.
const SMP_CACHE_BYTES: u32 = 64;

#[derive(Debug, thiserror::Error)]
pub enum KfuncError {
    #[error("reading {path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: malformed BTF at byte offset {offset}: {what}")]
    BadBtf {
        path: String,
        offset: usize,
        what: &'static str,
    },
    #[error("the kernel's BTF has no {0}")]
    Missing(String),
    #[error("the eBPF object: {0}")]
    Object(String),
}

// BTF kinds (include/uapi/linux/btf.h).
const KIND_INT: u8 = 1;
const KIND_ARRAY: u8 = 3;
const KIND_STRUCT: u8 = 4;
const KIND_UNION: u8 = 5;
const KIND_ENUM: u8 = 6;
const KIND_TYPEDEF: u8 = 8;
const KIND_VOLATILE: u8 = 9;
const KIND_CONST: u8 = 10;
const KIND_RESTRICT: u8 = 11;
const KIND_FUNC: u8 = 12;
const KIND_FUNC_PROTO: u8 = 13;
const KIND_VAR: u8 = 14;
const KIND_DATASEC: u8 = 15;
const KIND_DECL_TAG: u8 = 17;
const KIND_TYPE_TAG: u8 = 18;
const KIND_ENUM64: u8 = 19;

/// One BTF type: its common header and where its kind-specific records start.
#[derive(Clone, Copy, Debug)]
struct Ty {
    name_off: u32,
    info: u32,
    size_or_type: u32,
    /// Byte offset of the records after the header, in the file.
    rec: usize,
}

impl Ty {
    fn kind(&self) -> u8 {
        ((self.info >> 24) & 0x1f) as u8
    }
    fn vlen(&self) -> usize {
        (self.info & 0xffff) as usize
    }
    fn kind_flag(&self) -> bool {
        self.info >> 31 != 0
    }
}

/// A parsed BTF blob (little- or big-endian as its magic says); types indexed by id (0: void).
pub struct Btf {
    data: Vec<u8>,
    big: bool,
    types: Vec<Option<Ty>>,
    str_start: usize,
    str_end: usize,
    /// A split BTF's own strings (a kernel module's, on top of vmlinux's): their start and end
    /// in `data`, and the base's string-section length (the split's string offsets start
    /// after it).
    split_str: Option<(usize, usize, u32)>,
}

impl Btf {
    /// Reads and parses the running kernel's BTF.
    pub fn vmlinux() -> Result<Btf, KfuncError> {
        let data = std::fs::read(VMLINUX_BTF).map_err(|source| KfuncError::Io {
            path: VMLINUX_BTF.into(),
            source,
        })?;
        Btf::parse(data, Path::new(VMLINUX_BTF))
    }

    /// Parses a BTF blob; errors name `path` and the byte offset.
    pub fn parse(data: Vec<u8>, path: &Path) -> Result<Btf, KfuncError> {
        let bad = |offset: usize, what: &'static str| KfuncError::BadBtf {
            path: path.display().to_string(),
            offset,
            what,
        };
        if data.len() < 24 {
            return Err(bad(0, "shorter than the BTF header"));
        }
        let big = match [data[0], data[1]] {
            [0xeb, 0x9f] => true,
            [0x9f, 0xeb] => false,
            _ => return Err(bad(0, "not BTF (magic is not 0xeb9f)")),
        };
        let mut btf = Btf {
            data,
            big,
            types: vec![None],
            str_start: 0,
            str_end: 0,
            split_str: None,
        };
        let hdr_len = btf.u32_at(4) as usize;
        let (type_off, type_len) = (btf.u32_at(8) as usize, btf.u32_at(12) as usize);
        let (str_off, str_len) = (btf.u32_at(16) as usize, btf.u32_at(20) as usize);
        let n = btf.data.len();
        let t0 = hdr_len.checked_add(type_off).filter(|&v| v <= n);
        let t1 = t0.and_then(|t| t.checked_add(type_len)).filter(|&v| v <= n);
        let s0 = hdr_len.checked_add(str_off).filter(|&v| v <= n);
        let s1 = s0.and_then(|s| s.checked_add(str_len)).filter(|&v| v <= n);
        let (Some(t0), Some(t1), Some(s0), Some(s1)) = (t0, t1, s0, s1) else {
            return Err(bad(4, "type or string section outside the file"));
        };
        btf.str_start = s0;
        btf.str_end = s1;
        let mut p = t0;
        while p < t1 {
            if p + 12 > t1 {
                return Err(bad(p, "type header cut short"));
            }
            let ty = Ty {
                name_off: btf.u32_at(p),
                info: btf.u32_at(p + 4),
                size_or_type: btf.u32_at(p + 8),
                rec: p + 12,
            };
            let rec_len = match ty.kind() {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * ty.vlen(),
                KIND_ENUM | KIND_FUNC_PROTO => 8 * ty.vlen(),
                0 | 2 | 7 | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
                | KIND_FUNC | 16 | KIND_TYPE_TAG => 0,
                _ => return Err(bad(p, "unknown type kind")),
            };
            p = ty.rec + rec_len;
            if p > t1 {
                return Err(bad(ty.rec, "type records run past the type section"));
            }
            btf.types.push(Some(ty));
        }
        Ok(btf)
    }

    /// A kernel module's BTF (`/sys/kernel/btf/<module>`), read on top of `base` (vmlinux's):
    /// split BTF, whose type ids continue after the base's and whose string offsets continue
    /// after the base's string section. The result holds the types of both.
    pub fn module(name: &str, base: Btf) -> Result<Btf, KfuncError> {
        let path = Path::new("/sys/kernel/btf").join(name);
        let data = std::fs::read(&path).map_err(|source| KfuncError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Btf::parse_split(data, &path, base)
    }

    /// Parses split BTF `data` on top of `base` (see [`Btf::module`]).
    pub fn parse_split(data: Vec<u8>, path: &Path, base: Btf) -> Result<Btf, KfuncError> {
        if base.split_str.is_some() {
            return Err(KfuncError::BadBtf {
                path: path.display().to_string(),
                offset: 0,
                what: "the base is itself split BTF",
            });
        }
        let split = Btf::parse(data, path)?;
        if split.big != base.big {
            return Err(KfuncError::BadBtf {
                path: path.display().to_string(),
                offset: 0,
                what: "byte order differs from the base BTF's",
            });
        }
        let shift = base.data.len();
        let base_str_len = (base.str_end - base.str_start) as u32;
        let mut btf = base;
        btf.data.extend_from_slice(&split.data);
        btf.types.extend(split.types.into_iter().skip(1).map(|t| {
            t.map(|t| Ty {
                rec: t.rec + shift,
                ..t
            })
        }));
        btf.split_str = Some((split.str_start + shift, split.str_end + shift, base_str_len));
        Ok(btf)
    }

    /// Number of type ids (void included): a split BTF on top of this one starts there.
    pub fn type_count(&self) -> u32 {
        self.types.len() as u32
    }

    fn u32_at(&self, p: usize) -> u32 {
        let b = [
            self.data[p],
            self.data[p + 1],
            self.data[p + 2],
            self.data[p + 3],
        ];
        if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// The string at `off` of the string section (empty when outside it).
    pub fn name(&self, off: u32) -> &[u8] {
        let (start, end, off) = match self.split_str {
            Some((s0, s1, base_len)) if off >= base_len => (s0, s1, off - base_len),
            _ => (self.str_start, self.str_end, off),
        };
        let s = start.saturating_add(off as usize);
        if s >= end {
            return b"";
        }
        let rest = &self.data[s..end];
        let e = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        &rest[..e]
    }

    fn ty(&self, id: u32) -> Option<&Ty> {
        self.types.get(id as usize).and_then(|t| t.as_ref())
    }

    /// Id of the first type of `kind` named `name`.
    fn find(&self, kind: u8, name: &str) -> Option<u32> {
        self.types.iter().enumerate().find_map(|(id, t)| {
            let t = t.as_ref()?;
            (t.kind() == kind && self.name(t.name_off) == name.as_bytes()).then_some(id as u32)
        })
    }

    /// Id of the kernel function `name` (a kfunc's call target).
    pub fn func(&self, name: &str) -> Option<u32> {
        self.find(KIND_FUNC, name)
    }

    /// Id of `struct name`.
    pub fn struct_id(&self, name: &str) -> Option<u32> {
        self.find(KIND_STRUCT, name)
    }

    /// Size in bytes of a struct or union.
    pub fn size(&self, id: u32) -> Option<u32> {
        let t = self.ty(id)?;
        matches!(t.kind(), KIND_STRUCT | KIND_UNION).then_some(t.size_or_type)
    }

    /// The id of `id` with typedefs and qualifiers taken off.
    fn resolve_id(&self, mut id: u32) -> Option<u32> {
        for _ in 0..32 {
            let t = self.ty(id)?;
            match t.kind() {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Some(id),
            }
        }
        None
    }

    /// `id` with typedefs and qualifiers taken off.
    fn resolve(&self, mut id: u32) -> Option<&Ty> {
        for _ in 0..32 {
            let t = self.ty(id)?;
            match t.kind() {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Some(t),
            }
        }
        None
    }

    /// Byte offset and size of member `name` of struct/union `id`, looking into anonymous
    /// struct and union members as C does. None for bitfields.
    pub fn member(&self, id: u32, name: &str) -> Option<(u32, u32)> {
        self.member_in(self.ty(id)?, name, 0, 0)
            .map(|(off, size, _)| (off, size))
    }

    /// Byte offset and size of a member nested through struct members: `path` names one
    /// member of struct/union `id`, then one of that member's struct, and so on (C's
    /// `a.b.c`).
    pub fn member_path(&self, id: u32, path: &[&str]) -> Option<(u32, u32)> {
        let (mut id, mut total, mut size) = (id, 0u32, self.size(id)?);
        for name in path {
            let (off, sz, ty) = self.member_in(self.ty(id)?, name, 0, 0)?;
            total = total.checked_add(off)?;
            size = sz;
            id = ty;
        }
        Some((total, size))
    }

    /// Byte offset, size and (unqualified) type id of member `name`.
    fn member_in(&self, t: &Ty, name: &str, base_bits: u32, depth: u32) -> Option<(u32, u32, u32)> {
        if !matches!(t.kind(), KIND_STRUCT | KIND_UNION) || depth > 8 {
            return None;
        }
        for i in 0..t.vlen() {
            let r = t.rec + 12 * i;
            let (m_name, m_type, m_off) = (self.u32_at(r), self.u32_at(r + 4), self.u32_at(r + 8));
            let (bits, bitfield) = if t.kind_flag() {
                (m_off & 0xff_ffff, m_off >> 24 != 0)
            } else {
                (m_off, false)
            };
            let n = self.name(m_name);
            let mt = self.resolve(m_type)?;
            if n == name.as_bytes() {
                let off = base_bits + bits;
                if bitfield || !off.is_multiple_of(8) {
                    return None;
                }
                let size = match mt.kind() {
                    KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 => {
                        mt.size_or_type
                    }
                    2 => 8,
                    _ => return None,
                };
                return Some((off / 8, size, self.resolve_id(m_type)?));
            }
            if n.is_empty()
                && let Some(found) = self.member_in(mt, name, base_bits + bits, depth + 1)
            {
                return Some(found);
            }
        }
        None
    }

    /// Value of enumerator `name` (in any enum).
    pub fn enumerator(&self, name: &str) -> Option<i64> {
        for t in self.types.iter().flatten() {
            let (rec, signed_words) = match t.kind() {
                KIND_ENUM => (8, false),
                KIND_ENUM64 => (12, true),
                _ => continue,
            };
            for i in 0..t.vlen() {
                let r = t.rec + rec * i;
                if self.name(self.u32_at(r)) == name.as_bytes() {
                    let lo = self.u32_at(r + 4);
                    return Some(if signed_words {
                        ((self.u32_at(r + 8) as u64) << 32 | lo as u64) as i64
                    } else {
                        lo as i32 as i64
                    });
                }
            }
        }
        None
    }
}

/// What the loader needs for the kfunc path: the layout for the program's `XDP_LEN` and the
/// kfuncs' BTF ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kfuncs {
    pub layout: XdpLenLayout,
    pub cast_to_kern_ctx: u32,
    pub rdonly_cast: u32,
}

impl Kfuncs {
    /// Reads the layout and ids from `btf`.
    pub fn from_btf(btf: &Btf) -> Result<Kfuncs, KfuncError> {
        let missing = |what: &str| KfuncError::Missing(what.to_string());
        let func = |n: &str| btf.func(n).ok_or_else(|| missing(&format!("kfunc {n}")));
        let xb = btf
            .struct_id("xdp_buff")
            .ok_or_else(|| missing("struct xdp_buff"))?;
        let sh = btf
            .struct_id("skb_shared_info")
            .ok_or_else(|| missing("struct skb_shared_info"))?;
        let field = |id: u32, s: &str, f: &str, size: u32| match btf.member(id, f) {
            Some((off, sz)) if sz == size => Ok(off),
            Some(_) => Err(missing(&format!("{s}.{f} of {size} bytes"))),
            None => Err(missing(&format!("{s}.{f}"))),
        };
        let has_frags = btf
            .enumerator("XDP_FLAGS_HAS_FRAGS")
            .filter(|&v| v > 0 && v <= u32::MAX as i64)
            .ok_or_else(|| missing("XDP_FLAGS_HAS_FRAGS"))?;
        let sh_size = btf
            .size(sh)
            .ok_or_else(|| missing("skb_shared_info's size"))?;
        Ok(Kfuncs {
            layout: XdpLenLayout {
                enabled: 1,
                flags_off: field(xb, "xdp_buff", "flags", 4)?,
                hard_start_off: field(xb, "xdp_buff", "data_hard_start", 8)?,
                frame_sz_off: field(xb, "xdp_buff", "frame_sz", 4)?,
                has_frags: has_frags as u32,
                shinfo_size: sh_size.div_ceil(SMP_CACHE_BYTES) * SMP_CACHE_BYTES,
                frags_size_off: field(sh, "skb_shared_info", "xdp_frags_size", 4)?,
                shinfo_btf_id: sh,
            },
            cast_to_kern_ctx: func("bpf_cast_to_kern_ctx")?,
            rdonly_cast: func("bpf_rdonly_cast")?,
        })
    }
}

/// An ELF image in 8-byte aligned memory (the object parser reads it in place).
pub struct AlignedObject {
    words: Vec<u64>,
    len: usize,
}

impl AlignedObject {
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialised bytes; u8 has no alignment needs.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `self` is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

const BPF_CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
const BPF_MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const BPF_PSEUDO_KFUNC_CALL: u8 = 2;

/// A copy of the eBPF object `elf` with every placeholder call rewritten: into the kfunc call
/// (`kfuncs`), or into `r0 = 0` (None: the program's `XDP_LEN.enabled` is 0 and that path is
/// never taken). Returns the copy and the number of calls rewritten.
pub fn patch_object(
    elf: &[u8],
    kfuncs: Option<&Kfuncs>,
) -> Result<(AlignedObject, usize), KfuncError> {
    let file = object::File::parse(elf).map_err(|e| KfuncError::Object(e.to_string()))?;
    if !file.is_little_endian() {
        return Err(KfuncError::Object(
            "big-endian objects are not supported".into(),
        ));
    }
    let mut ranges = Vec::new();
    for s in file.sections() {
        if s.kind() == SectionKind::Text
            && let Some((off, size)) = s.file_range()
        {
            ranges.push((off as usize, size as usize));
        }
    }
    let mut out = AlignedObject {
        words: vec![0u64; elf.len().div_ceil(8)],
        len: elf.len(),
    };
    out.bytes_mut().copy_from_slice(elf);
    let mut n = 0;
    let bytes = out.bytes_mut();
    for (off, size) in ranges {
        let end = off
            .checked_add(size)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| {
                KfuncError::Object(format!("section at byte offset {off} runs past the file"))
            })?;
        for insn in bytes[off..end].as_chunks_mut::<8>().0 {
            if insn[0] != BPF_CALL || insn[1] != 0 || insn[2..4] != [0, 0] {
                continue;
            }
            let imm = u32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
            let target = match imm {
                kfunc_call::CAST_TO_KERN_CTX => kfuncs.map(|k| k.cast_to_kern_ctx),
                kfunc_call::RDONLY_CAST => kfuncs.map(|k| k.rdonly_cast),
                _ => continue,
            };
            match target {
                Some(id) => {
                    insn[1] = BPF_PSEUDO_KFUNC_CALL << 4;
                    insn[4..8].copy_from_slice(&id.to_le_bytes());
                }
                None => {
                    insn[0] = BPF_MOV64_K;
                    insn[4..8].copy_from_slice(&0u32.to_le_bytes());
                }
            }
            n += 1;
        }
    }
    Ok((out, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian BTF blob from types (header, records) and a string table.
    fn blob(types: &[u8], strings: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&[0x9f, 0xeb, 1, 0]);
        for v in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(types);
        b.extend_from_slice(strings);
        b
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn info(kind: u8, vlen: u32) -> u32 {
        (kind as u32) << 24 | vlen
    }

    #[test]
    fn finds_members_inside_anonymous_unions() {
        // strings: 0 "", 1 "int", 5 "outer", 11 "a", 13 "b", 15 "E_ONE"
        let strings = b"\0int\0outer\0a\0b\0E_ONE\0";
        let types = words(&[
            // 1: int, 4 bytes
            1,
            info(KIND_INT, 0),
            4,
            32,
            // 2: union { int b; } (anonymous), 4 bytes
            0,
            info(KIND_UNION, 1),
            4,
            13,
            1,
            0,
            // 3: struct outer { int a; union { int b; }; } at bits 0 and 64
            5,
            info(KIND_STRUCT, 2),
            16,
            11,
            1,
            0,
            0,
            2,
            64,
            // 4: enum { E_ONE = 1 }
            0,
            info(KIND_ENUM, 1),
            4,
            15,
            1,
        ]);
        let btf = Btf::parse(blob(&types, strings), Path::new("t")).unwrap();
        let outer = btf.struct_id("outer").unwrap();
        assert_eq!(outer, 3);
        assert_eq!(btf.size(outer), Some(16));
        assert_eq!(btf.member(outer, "a"), Some((0, 4)));
        assert_eq!(btf.member(outer, "b"), Some((8, 4)));
        assert_eq!(btf.member(outer, "c"), None);
        assert_eq!(btf.enumerator("E_ONE"), Some(1));
        assert_eq!(btf.enumerator("E_TWO"), None);
    }

    /// A base BTF (ids 1 int, 2 unsigned char, 3 ptr to void) and a split BTF on top of it
    /// whose structs nest (`outer { u8 pad[..]; int x; mid m; }`, `mid { u8 c; inner in; }`),
    /// with names both in the base's strings and in the split's own.
    #[test]
    fn split_btf_continues_the_base_ids_and_strings() {
        // base strings: 0 "", 1 "int", 5 "u8"
        let base_strings = b"\0int\0u8\0";
        let base_types = words(&[
            1,
            info(KIND_INT, 0),
            4,
            32, // 1: int
            5,
            info(KIND_INT, 0),
            1,
            8, // 2: u8
            0,
            info(2, 0),
            0, // 3: void *
        ]);
        let base = Btf::parse(blob(&base_types, base_strings), Path::new("vmlinux")).unwrap();
        assert_eq!(base.type_count(), 4);
        // split strings (offsets after the base's 8 bytes): 8 "", 9 "inner", 15 "mid",
        // 19 "outer", 25 "c", 27 "in", 30 "m", 32 "x", 34 "p"
        let split_strings = b"\0inner\0mid\0outer\0c\0in\0m\0x\0p\0";
        let split_types = words(&[
            // 4: struct inner { u8 c; (pad) int int_at_4 named "x"; } size 8
            9,
            info(KIND_STRUCT, 2),
            8,
            25,
            2,
            0,
            32,
            1,
            32,
            // 5: typedef inner_t = inner (name "in")
            27,
            info(KIND_TYPEDEF, 0),
            4,
            // 6: struct mid { u8 c; inner_t in at 8 } size 16
            15,
            info(KIND_STRUCT, 2),
            16,
            25,
            2,
            0,
            27,
            5,
            64,
            // 7: struct outer { void *p; int x at 8; mid m at 16 } size 32 ("p" split string)
            19,
            info(KIND_STRUCT, 3),
            32,
            34,
            3,
            0,
            32,
            1,
            64,
            30,
            6,
            128,
        ]);
        let btf = Btf::parse_split(
            blob(&split_types, split_strings),
            Path::new("/sys/kernel/btf/mod"),
            base,
        )
        .unwrap();
        assert_eq!(btf.type_count(), 8);
        let outer = btf.struct_id("outer").unwrap();
        assert_eq!(outer, 7);
        assert_eq!(btf.struct_id("mid"), Some(6));
        assert_eq!(btf.name(1), b"int");
        assert_eq!(btf.name(19), b"outer");
        assert_eq!(btf.member(outer, "p"), Some((0, 8)));
        assert_eq!(btf.member(outer, "x"), Some((8, 4)));
        assert_eq!(btf.member_path(outer, &["m"]), Some((16, 16)));
        assert_eq!(btf.member_path(outer, &["m", "c"]), Some((16, 1)));
        // Through the typedef to the inner struct: 16 + 8 + 4.
        assert_eq!(btf.member_path(outer, &["m", "in", "x"]), Some((28, 4)));
        assert_eq!(btf.member_path(outer, &["m", "in", "nope"]), None);
        assert_eq!(btf.member_path(outer, &["x", "c"]), None);
        // A split BTF is not a base.
        let again = Btf::parse_split(blob(&split_types, split_strings), Path::new("m2"), btf);
        assert!(again.is_err());
    }

    /// Every kernel module BTF of this host reads as split BTF over vmlinux, and each of its
    /// structs' members resolves to an offset inside the struct.
    #[test]
    fn the_host_module_btfs_read_as_split_btf() {
        let Ok(dir) = std::fs::read_dir("/sys/kernel/btf") else {
            eprintln!("SKIP: no /sys/kernel/btf");
            return;
        };
        let mut mods: Vec<String> = dir
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "vmlinux")
            .collect();
        mods.sort();
        let Ok(base) = Btf::vmlinux() else {
            eprintln!("SKIP: vmlinux BTF not readable");
            return;
        };
        let base_count = base.type_count();
        let mut checked = 0;
        for m in mods.iter().take(8) {
            let btf = Btf::module(
                m,
                Btf::parse(base.data.clone(), Path::new(VMLINUX_BTF)).unwrap(),
            )
            .unwrap_or_else(|e| panic!("{m}: {e}"));
            for id in base_count..btf.type_count() {
                let t = *btf.ty(id).unwrap();
                if t.kind() != KIND_STRUCT || t.vlen() == 0 || btf.name(t.name_off).is_empty() {
                    continue;
                }
                let r = t.rec;
                let first = String::from_utf8_lossy(btf.name(btf.u32_at(r))).into_owned();
                if first.is_empty() {
                    continue;
                }
                if let Some((off, size)) = btf.member_path(id, &[&first]) {
                    assert!(off + size <= t.size_or_type, "{m}: struct id {id}.{first}");
                    checked += 1;
                }
            }
        }
        if ib_core_loaded() {
            let btf = Btf::module("ib_core", Btf::vmlinux().unwrap()).unwrap();
            let attr = btf.struct_id("ib_qp_attr").unwrap();
            assert_eq!(
                btf.member_path(attr, &["ah_attr", "grh", "traffic_class"]),
                Some((94, 1))
            );
        }
        eprintln!(
            "{} module BTFs, {checked} struct members resolved",
            mods.len().min(8)
        );
    }

    fn ib_core_loaded() -> bool {
        Path::new("/sys/kernel/btf/ib_core").exists()
    }

    #[test]
    fn malformed_btf_is_an_error_with_an_offset() {
        let e = Btf::parse(vec![0; 10], Path::new("x.btf")).err().unwrap();
        assert!(
            e.to_string().contains("x.btf") && e.to_string().contains("offset 0"),
            "{e}"
        );
        let e = Btf::parse(vec![0x12; 40], Path::new("x.btf"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("magic"), "{e}");
        // A struct claiming 5 members with none present.
        let types = words(&[0, info(KIND_STRUCT, 5), 8]);
        let e = Btf::parse(blob(&types, b"\0"), Path::new("x.btf"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("offset 36"), "{e}");
        let types = words(&[0, info(30, 0), 8]);
        let e = Btf::parse(blob(&types, b"\0"), Path::new("x.btf"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("unknown type kind"), "{e}");
        // Every truncation of a valid blob is an error or a parse, never a panic.
        let types = words(&[1, info(KIND_INT, 0), 4, 32, 0, info(KIND_ENUM, 1), 4, 1, 7]);
        let good = blob(&types, b"\0int\0");
        for n in 0..good.len() {
            let _ = Btf::parse(good[..n].to_vec(), Path::new("t"));
        }
    }

    #[test]
    fn rewrites_only_the_placeholder_calls() {
        let object = super::super::OBJECT;
        if object.is_empty() {
            eprintln!("SKIP: built with AYA_BUILD_SKIP=1 (no eBPF object)");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI builds carry the eBPF object"
            );
            return;
        }
        let k = Kfuncs {
            layout: XdpLenLayout::default(),
            cast_to_kern_ctx: 1111,
            rdonly_cast: 2222,
        };
        let (patched, n) = patch_object(object, Some(&k)).unwrap();
        // roce_xdp and xdp_len_probe each call both kfuncs once.
        assert_eq!(n, 4);
        let (off, on) = (object, patched.bytes());
        assert_eq!(off.len(), on.len());
        let changed: Vec<usize> = (0..off.len()).filter(|&i| off[i] != on[i]).collect();
        // Per call: the src register nibble and the immediate, nothing else.
        assert!(
            changed.len() <= n * 5 && changed.len() >= n * 3,
            "{changed:?}"
        );
        let (zeroed, m) = patch_object(object, None).unwrap();
        assert_eq!(m, 4);
        assert_eq!(patch_object(zeroed.bytes(), None).unwrap().1, 0);
        // Nothing left to rewrite in a rewritten object.
        assert_eq!(patch_object(patched.bytes(), Some(&k)).unwrap().1, 0);
    }

    #[test]
    fn reads_the_running_kernels_layout() {
        let btf = match Btf::vmlinux() {
            Ok(b) => b,
            Err(e) => {
                eprintln!("SKIP: {}", contract::error::chain(&e));
                assert!(std::env::var_os("CI").is_none(), "CI kernels have BTF");
                return;
            }
        };
        let k = Kfuncs::from_btf(&btf).unwrap();
        let l = k.layout;
        // Fields every kernel with multi-buffer XDP has, at their places on 64-bit kernels:
        // data, data_end, data_meta, data_hard_start, rxq, txq, then frame_sz and flags.
        assert_eq!(l.hard_start_off, 24);
        assert_eq!(l.frame_sz_off, 48);
        assert_eq!(l.flags_off, 52);
        assert_eq!(l.has_frags, 1);
        assert_eq!(l.shinfo_size % SMP_CACHE_BYTES, 0);
        assert!(
            l.shinfo_size >= 256 && l.frags_size_off < l.shinfo_size,
            "{l:?}"
        );
        assert!(k.cast_to_kern_ctx != 0 && k.rdonly_cast != 0 && l.shinfo_btf_id != 0);
    }
}
