// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! Reading the kernel's BTF (`include/uapi/linux/btf.h`): the type
//! information `CONFIG_DEBUG_INFO_BTF` puts into vmlinux (what
//! `/sys/kernel/btf/vmlinux` shows), for the BTF argument names of probe
//! events (`$arg*`, `file->f_path.dentry`, a typed `$retval`).
//!
//! Pure, `core`-only, no allocation: the caller gives the blob and an index
//! it allocated ([`Btf::count`] entries, filled by [`Btf::fill_index`]).
//! The blob is the kernel's own, but nothing read from it is trusted: every
//! offset, length, count and type id is checked, a malformed record ends
//! the walk (`None`), and a lookup of a bad id finds nothing. The lookups
//! are the kernel's (`kernel/bpf/btf.c`, `kernel/trace/trace_btf.c`), with
//! their order and results, so that the engine's parser resolves a name
//! exactly as the kernel's does.

/// `BTF_MAGIC`.
const MAGIC: u16 = 0xeb9f;

/// BTF kinds (`BTF_KIND_*`).
pub mod kind {
    /// `void` (type id 0 only).
    pub const UNKN: u32 = 0;
    /// An integer.
    pub const INT: u32 = 1;
    /// A pointer.
    pub const PTR: u32 = 2;
    /// An array.
    pub const ARRAY: u32 = 3;
    /// A struct.
    pub const STRUCT: u32 = 4;
    /// A union.
    pub const UNION: u32 = 5;
    /// An enum (32-bit).
    pub const ENUM: u32 = 6;
    /// A forward declaration.
    pub const FWD: u32 = 7;
    /// A typedef.
    pub const TYPEDEF: u32 = 8;
    /// `volatile`.
    pub const VOLATILE: u32 = 9;
    /// `const`.
    pub const CONST: u32 = 10;
    /// `restrict`.
    pub const RESTRICT: u32 = 11;
    /// A function.
    pub const FUNC: u32 = 12;
    /// A function's prototype.
    pub const FUNC_PROTO: u32 = 13;
    /// A variable.
    pub const VAR: u32 = 14;
    /// A data section.
    pub const DATASEC: u32 = 15;
    /// A floating-point type.
    pub const FLOAT: u32 = 16;
    /// A declaration tag.
    pub const DECL_TAG: u32 = 17;
    /// A type tag.
    pub const TYPE_TAG: u32 = 18;
    /// An enum (64-bit).
    pub const ENUM64: u32 = 19;
}

/// `BTF_INT_SIGNED` of an integer's encoding.
pub const INT_SIGNED: u32 = 1;

/// Where the sections are in a BTF blob: `(types, strings)` byte ranges.
fn sections(data: &[u8]) -> Option<(core::ops::Range<usize>, core::ops::Range<usize>)> {
    let u16_at = |o: usize| -> Option<u16> {
        let b = data.get(o..o.checked_add(2)?)?;
        Some(u16::from_ne_bytes([*b.first()?, *b.get(1)?]))
    };
    if u16_at(0)? != MAGIC || *data.get(2)? != 1 {
        return None;
    }
    let hdr_len = usize::try_from(u32_at(data, 4)?).ok()?;
    let field = |o: usize| usize::try_from(u32_at(data, o)?).ok();
    let (type_off, type_len) = (field(8)?, field(12)?);
    let (str_off, str_len) = (field(16)?, field(20)?);
    let start = |off: usize, len: usize| -> Option<core::ops::Range<usize>> {
        let a = hdr_len.checked_add(off)?;
        let b = a.checked_add(len)?;
        (b <= data.len()).then_some(a..b)
    };
    Some((start(type_off, type_len)?, start(str_off, str_len)?))
}

fn u32_at(data: &[u8], o: usize) -> Option<u32> {
    let b = data.get(o..o.checked_add(4)?)?;
    let mut w = [0u8; 4];
    w.copy_from_slice(b);
    Some(u32::from_ne_bytes(w))
}

/// One type record: `struct btf_type` and what follows it.
#[derive(Clone, Copy, Debug)]
pub struct Type<'a> {
    /// Its id.
    pub id: u32,
    /// `name_off`.
    pub name_off: u32,
    info: u32,
    /// `size` or `type`, by kind.
    pub size_or_type: u32,
    /// The kind's trailing data.
    extra: &'a [u8],
}

/// `void`: what id 0 stands for (the kernel's `btf_void`).
const VOID: Type<'static> = Type {
    id: 0,
    name_off: 0,
    info: 0,
    size_or_type: 0,
    extra: &[],
};

impl<'a> Type<'a> {
    /// `BTF_INFO_KIND`.
    pub fn kind(&self) -> u32 {
        (self.info >> 24) & 0x1f
    }

    /// `BTF_INFO_VLEN`.
    pub fn vlen(&self) -> usize {
        (self.info & 0xffff) as usize
    }

    /// `BTF_INFO_KFLAG` (members carry bitfield sizes).
    pub fn kflag(&self) -> bool {
        self.info >> 31 != 0
    }

    /// An integer's `BTF_INT_ENCODING`, `BTF_INT_OFFSET`, `BTF_INT_BITS`.
    pub fn int(&self) -> Option<(u32, u32, u32)> {
        let d = u32_at(self.extra, 0)?;
        Some(((d >> 24) & 0x0f, (d >> 16) & 0xff, d & 0xff))
    }

    /// The `i`th 12-byte member (struct, union) or parameter (8 bytes,
    /// function prototype): `(name_off, type, offset)`.
    fn item(&self, i: usize, size: usize) -> Option<(u32, u32, u32)> {
        let o = i.checked_mul(size)?;
        let name = u32_at(self.extra, o)?;
        let ty = u32_at(self.extra, o.checked_add(4)?)?;
        let off = if size == 12 {
            u32_at(self.extra, o.checked_add(8)?)?
        } else {
            0
        };
        Some((name, ty, off))
    }

    /// An array's element type.
    pub fn array_elem(&self) -> Option<u32> {
        (self.kind() == kind::ARRAY)
            .then(|| u32_at(self.extra, 0))
            .flatten()
    }
}

/// The bytes following a `struct btf_type` of this kind and `vlen`.
fn extra_len(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        kind::INT | kind::VAR | kind::DECL_TAG => 4,
        kind::ARRAY => 12,
        kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => vlen.checked_mul(12)?,
        kind::ENUM | kind::FUNC_PROTO => vlen.checked_mul(8)?,
        kind::PTR
        | kind::FWD
        | kind::TYPEDEF
        | kind::VOLATILE
        | kind::CONST
        | kind::RESTRICT
        | kind::FUNC
        | kind::FLOAT
        | kind::TYPE_TAG => 0,
        _ => return None,
    })
}

/// The record at `off` of the type section, and where the next starts.
fn record_at(types: &[u8], off: usize, id: u32) -> Option<(Type<'_>, usize)> {
    let name_off = u32_at(types, off)?;
    let info = u32_at(types, off.checked_add(4)?)?;
    let size_or_type = u32_at(types, off.checked_add(8)?)?;
    let start = off.checked_add(12)?;
    let t = Type {
        id,
        name_off,
        info,
        size_or_type,
        extra: &[],
    };
    let end = start.checked_add(extra_len(t.kind(), t.vlen())?)?;
    let extra = types.get(start..end)?;
    Some((Type { extra, ..t }, end))
}

/// A struct member found by [`Btf::find_member`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its type id.
    pub ty: u32,
    /// `offset` as recorded (with a kflag struct, the bitfield size in the
    /// top 8 bits).
    pub offset: u32,
}

/// [`Btf::find_member`] looked in what is no struct or union (the kernel's
/// `-EINVAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotStruct;

/// The most anonymous members [`Btf::find_member`] remembers (the
/// kernel's `BTF_ANON_STACK_MAX`).
const ANON_STACK_MAX: usize = 16;

/// A BTF blob with its index.
#[derive(Clone, Copy, Debug)]
pub struct Btf<'a> {
    types: &'a [u8],
    strs: &'a [u8],
    /// The byte offset of type id `i + 1`'s record.
    index: &'a [u32],
}

impl<'a> Btf<'a> {
    /// How many types `data` holds (what the index needs); `None`: not a
    /// BTF blob this reader takes.
    pub fn count(data: &[u8]) -> Option<usize> {
        let (types, _) = sections(data)?;
        let types = data.get(types)?;
        let (mut off, mut n) = (0usize, 0usize);
        while off < types.len() {
            let (_, next) = record_at(types, off, 0)?;
            off = next;
            n = n.checked_add(1)?;
        }
        Some(n)
    }

    /// Fills `index` ([`Btf::count`] entries): where each type's record
    /// starts. `None`: `data` is not what [`Btf::count`] measured.
    pub fn fill_index(data: &[u8], index: &mut [u32]) -> Option<()> {
        let (t, _) = sections(data)?;
        let types = data.get(t)?;
        let mut off = 0usize;
        for slot in index.iter_mut() {
            let (_, next) = record_at(types, off, 0)?;
            *slot = u32::try_from(off).ok()?;
            off = next;
        }
        (off == types.len()).then_some(())
    }

    /// The reader of `data` with its index (filled by
    /// [`Btf::fill_index`]; a wrong one only makes lookups fail).
    pub fn new(data: &'a [u8], index: &'a [u32]) -> Option<Btf<'a>> {
        let (t, s) = sections(data)?;
        Some(Btf {
            types: data.get(t)?,
            strs: data.get(s)?,
            index,
        })
    }

    /// How many types there are (ids 1 to this).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Type `id` (0: `void`), as the kernel's `btf_type_by_id()`.
    pub fn ty(&self, id: u32) -> Option<Type<'a>> {
        if id == 0 {
            return Some(VOID);
        }
        let off = *self.index.get(usize::try_from(id).ok()?.checked_sub(1)?)?;
        Some(record_at(self.types, usize::try_from(off).ok()?, id)?.0)
    }

    /// The string at `off`, as the kernel's `btf_name_by_offset()` (None:
    /// past the section; the kernel's strings are NUL-terminated, and one
    /// that is not, or is not UTF-8, is taken as none).
    pub fn name(&self, off: u32) -> Option<&'a str> {
        let s = self.strs.get(usize::try_from(off).ok()?..)?;
        let end = s.iter().position(|&b| b == 0)?;
        core::str::from_utf8(s.get(..end)?).ok()
    }

    /// The type `id` names once typedefs, qualifiers and type tags are
    /// skipped, with its id (the kernel's `btf_type_skip_modifiers()`).
    pub fn skip_modifiers(&self, mut id: u32) -> Option<Type<'a>> {
        // A chain cannot be longer than the types there are.
        for _ in 0..=self.len() {
            let t = self.ty(id)?;
            match t.kind() {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Some(t),
            }
        }
        None
    }

    /// The prototype of function `name`: the first `FUNC` of that name
    /// (the kernel's `btf_find_by_name_kind()`) and its `FUNC_PROTO`, as
    /// `btf_find_func_proto()`.
    pub fn find_func_proto(&self, name: &str) -> Option<Type<'a>> {
        let f = (1..=self.len())
            .filter_map(|i| self.ty(u32::try_from(i).ok()?))
            .find(|t| t.kind() == kind::FUNC && self.name(t.name_off) == Some(name))?;
        self.ty(f.size_or_type)
            .filter(|p| p.kind() == kind::FUNC_PROTO)
    }

    /// A function prototype's `i`th parameter: `(name_off, type)`.
    pub fn param(&self, proto: &Type<'a>, i: usize) -> Option<(u32, u32)> {
        if proto.kind() != kind::FUNC_PROTO || i >= proto.vlen() {
            return None;
        }
        proto.item(i, 8).map(|(n, t, _)| (n, t))
    }

    /// The member `name` of struct or union `st`, looked for as the
    /// kernel's `btf_find_struct_member()` does: its own members first,
    /// then those of its anonymous members, the last one found first, up
    /// to [`ANON_STACK_MAX`] of them; with the bit offset of the anonymous
    /// member it was found in. `Err`: `st` (or an anonymous member) is no
    /// struct or union.
    pub fn find_member(
        &self,
        st: Type<'a>,
        name: &str,
    ) -> Result<Option<(Member, u32)>, NotStruct> {
        let mut stack = [(0u32, 0u32); ANON_STACK_MAX];
        let mut top = 0usize;
        let (mut t, mut cur) = (st, 0u32);
        // Valid BTF has no struct inside itself; a blob that had one would
        // loop: the kernel's limit on anonymous members found, per visit.
        for _ in 0..4096 {
            if !matches!(t.kind(), kind::STRUCT | kind::UNION) {
                return Err(NotStruct);
            }
            for i in 0..t.vlen() {
                let Some((name_off, ty, offset)) = t.item(i, 12) else {
                    return Err(NotStruct);
                };
                if name_off == 0 {
                    if let Some(a) = self.skip_modifiers(ty) {
                        if let Some(slot) = stack.get_mut(top) {
                            *slot = (a.id, cur.wrapping_add(offset));
                            top = top.saturating_add(1);
                        }
                    }
                } else if self.name(name_off) == Some(name) {
                    return Ok(Some((Member { ty, offset }, cur)));
                }
            }
            let Some(prev) = top.checked_sub(1) else {
                return Ok(None);
            };
            top = prev;
            let Some(&(id, off)) = stack.get(top) else {
                return Ok(None);
            };
            cur = off;
            t = self.ty(id).ok_or(NotStruct)?;
        }
        Err(NotStruct)
    }
}
