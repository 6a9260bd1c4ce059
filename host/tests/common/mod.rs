//! Shared by the decoder scans: walking the functions of a vmlinux or .ko.

/// One function symbol with size in an executable section. (Each test
/// binary compiles this module on its own and uses part of it.)
#[allow(dead_code)]
pub struct Function<'a> {
    /// Symbol name.
    pub name: &'a str,
    /// Its address (section-relative for unlinked .ko files).
    pub addr: u64,
    /// The whole section's bytes.
    pub section: &'a [u8],
    /// The function's bytes are `section[start..end]`.
    pub start: usize,
    pub end: usize,
}

/// Calls `f` for every function symbol (STT_FUNC, size > 0, in a text
/// section) of the ELF file at `path`, once per address (aliases skipped).
pub fn for_each_function(path: &str, mut f: impl FnMut(&Function<'_>)) {
    use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("parse {path}: {e}"));
    let mut seen = std::collections::HashSet::new();
    for sym in file.symbols() {
        if sym.kind() != SymbolKind::Text || sym.size() == 0 {
            continue;
        }
        let Some(sec_idx) = sym.section_index() else {
            continue;
        };
        let Ok(section) = file.section_by_index(sec_idx) else {
            continue;
        };
        if section.kind() != SectionKind::Text {
            continue;
        }
        if !seen.insert((sec_idx.0, sym.address())) {
            continue; // alias
        }
        let Ok(sdata) = section.data() else { continue };
        let Some(start) = sym.address().checked_sub(section.address()) else {
            continue;
        };
        let (start, size) = (start as usize, sym.size() as usize);
        let Some(end) = start.checked_add(size).filter(|&e| e <= sdata.len()) else {
            continue;
        };
        f(&Function {
            name: sym.name().unwrap_or("?"),
            addr: sym.address(),
            section: sdata,
            start,
            end,
        });
    }
}

/// Deterministic xorshift64* PRNG (the random cross-checks; each test binary
/// uses part of it).
#[allow(dead_code)]
pub struct Rng(pub u64);

#[allow(dead_code)]
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn byte(&mut self) -> u8 {
        (self.next_u64() >> 56) as u8
    }

    pub fn word(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 32) % n as u64) as usize
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.byte();
        }
    }
}
