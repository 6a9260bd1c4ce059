// SPDX-License-Identifier: GPL-2.0

//! The trace event's side, called from `src/events.c`: the record's size,
//! filling it at a hit, printing it, its fields for `format` and filters.

use super::*;
use crate::abi::{KpKprobe, KpKretprobeInstance};
use crate::event_parse::Type;
use core::fmt::Write;
use kernel::bindings::pt_regs;
use kernel::ffi::{c_char, c_int, c_void};

/// C callback: bytes of arguments for this hit (fixed part + strings).
///
/// # Safety
///
/// `site` is a live site, `regs` the trap frame.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_args_size(
    site: *const c_void,
    regs: *mut pt_regs,
    edata: *const c_void,
) -> usize {
    // SAFETY: per the function's contract.
    let (site, fixed, hit) = unsafe { hit_of(site, regs, edata) };
    let mut total = fixed;
    let mut strings = site.args.iter().filter(|a| a.ty.is_string()).peekable();
    if strings.peek().is_none() {
        // No string: no scratch buffer to clear on every hit.
        return total;
    }
    // Measuring stops past what a record can hold (a `__data_loc` offset
    // has 16 bits): the reserve then fails at once, and a hit never reads
    // 128 arrays of 64 strings with interrupts off.
    for a in strings {
        for j in 0..usize::from(a.count.max(1)) {
            if total > 0xffff {
                return total;
            }
            total += string_len(a, hit, j);
        }
    }
    total
}

/// The site, its event's fixed size and what its fetch programs read at
/// this hit.
///
/// # Safety
///
/// `site` is a live site, `regs` the trap frame, `edata` NULL or (a return
/// probe's) the data its entry handler saved for this call.
unsafe fn hit_of<'a>(
    site: *const c_void,
    regs: *mut pt_regs,
    edata: *const c_void,
) -> (&'a Site, usize, Hit<'a>) {
    // SAFETY: per the function's contract; a site's event outlives it.
    let (site, regs) = unsafe { (&*site.cast::<Site>(), &*regs) };
    // SAFETY: as above.
    let fixed = unsafe { (*site.ev).fixed };
    let args = &site.entry_args[..];
    let saved = if edata.is_null() || args.is_empty() {
        (&[][..], &[][..])
    } else {
        // SAFETY: the entry handler filled one word per saved argument
        // (`data_size` is that many words, 8-byte aligned).
        (args, unsafe {
            core::slice::from_raw_parts(edata.cast::<u64>(), args.len())
        })
    };
    (site, fixed, Hit { regs, saved })
}

/// C callback: fills the arguments of a reserved record of `size` bytes
/// after `head`.
///
/// # Safety
///
/// `site` is a live site, `regs` the trap frame, `edata` as for
/// `kp_tev_record()`, `entry` a reserved record of `head + size` bytes.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_store_args(
    site: *const c_void,
    regs: *mut pt_regs,
    edata: *const c_void,
    entry: *mut u8,
    head: usize,
    size: usize,
) {
    // SAFETY: per the function's contract.
    let (site, fixed, hit) = unsafe { hit_of(site, regs, edata) };
    // SAFETY: the record has `head + size` bytes.
    let body = unsafe { core::slice::from_raw_parts_mut(entry.add(head), size) };
    let mut dyn_at = fixed.min(size);
    for a in site.args.iter() {
        let Some(field) = body.get_mut(a.offset..a.offset + a.size) else {
            continue;
        };
        if a.ty.is_string() {
            // One `__data_loc` per string, each pointing after the fixed
            // part (an array: `count` of them).
            for j in 0..usize::from(a.count.max(1)) {
                // Past a 16-bit offset: no string (its loc says empty).
                let room = if head + dyn_at > 0xffff {
                    0
                } else {
                    (size - dyn_at).min(MAX_STRING)
                };
                let (field_end, rest) = body.split_at_mut(dyn_at);
                let n = fetch_string(a, hit, j, &mut rest[..room]);
                let loc = ((n as u32) << 16) | ((head + dyn_at) as u32 & 0xffff);
                let at = a.offset + 4 * j;
                if let Some(f) = field_end.get_mut(at..at + 4) {
                    f.copy_from_slice(&loc.to_ne_bytes());
                }
                dyn_at += n;
            }
        } else if a.count != 0 {
            fetch_array(a, hit, field);
        } else {
            let v = match a.reg {
                // SAFETY: `r` indexes `struct pt_regs` words, from the
                // arch's register table (as `fetch::run`'s `Reg`).
                Some(r) => unsafe {
                    *(hit.regs as *const pt_regs)
                        .cast::<u64>()
                        .add(usize::from(r))
                },
                None => fetch_value(a, hit),
            };
            store_value(field, v);
        }
    }
}

/// C callback: the event's name for the output line.
///
/// # Safety
///
/// `owner` is a live event.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_name(owner: *mut c_void) -> *const c_char {
    // SAFETY: per the function's contract.
    unsafe { (*owner.cast::<Event>()).name.as_ptr() }
}

/// C callback (the trace event's `reg`, under `event_mutex`): arms the
/// event's probes when its first user (a trace instance or a perf event)
/// enables it, and disarms them when the last one goes, as the kernel's
/// kprobe events do: a defined event costs nothing until it is enabled.
/// All or none: 0, or `-errno` with every site as it was.
///
/// # Safety
///
/// `owner` is a live, registered event.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_arm(owner: *mut c_void, on: bool) -> c_int {
    // SAFETY: per the function's contract. The sites change only under
    // `event_mutex` too (`Locked`), which the caller holds; each
    // probe stays registered while its site is on the list. No `&mut` to
    // the event or a site: hits read them meanwhile.
    let sites = unsafe { &(*owner.cast::<Event>()).sites };
    let set = |site: &KBox<Site>, on: bool| {
        let kp = core::ptr::addr_of!(site.rp.kp).cast_mut();
        // SAFETY: a registered probe; the engine changes it under its own
        // lock, as for any client's probe.
        unsafe {
            if on {
                crate::registry::kp_enable_kprobe(kp)
            } else {
                crate::registry::kp_disable_kprobe(kp)
            }
        }
    };
    // Sites waiting for their module have no probe yet: armed when it
    // loads, if the event is enabled then.
    // Nor do sites whose module went (GONE until it comes back), as the
    // kernel's enable skips a gone probe.
    let live = |s: &&KBox<Site>| s.is_registered() && s.rp.kp.flags & crate::abi::KP_FLAG_GONE == 0;
    for (i, site) in sites.iter().filter(live).enumerate() {
        let r = set(site, on);
        if r != 0 && on {
            for s in sites.iter().filter(live).take(i) {
                set(s, false);
            }
            return r;
        }
    }
    0
}

/// C callback: ` name=value` for each argument of the record `entry`.
///
/// # Safety
///
/// `owner` is the event that wrote `entry`; `s` a trace_seq.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_print_args(
    owner: *mut c_void,
    s: *mut c_void,
    entry: *const u8,
    size: c_int,
) {
    // SAFETY: per the function's contract.
    let ev = unsafe { &*owner.cast::<Event>() };
    let head = head_size(ev.is_return);
    // Every read below stays inside the record's `size` bytes, whatever
    // the record holds: a record is only ever read with the layout of the
    // event that now owns its type id, and an older event's records (had
    // the buffer not been reset after its removal) or a torn one must not
    // make the reader walk off the record.
    let size = usize::try_from(size).unwrap_or(0);
    // SAFETY: the trace core hands us the whole record of `size` bytes.
    let rec = unsafe { core::slice::from_raw_parts(entry, size) };
    for a in ev.fields.iter() {
        // Names and numbers; strings go to `s` from the record itself.
        let mut buf = [0u8; 320];
        let mut w = BufWriter::new(&mut buf);
        let _ = write!(w, " {}=", text(&a.name));
        let start = head + a.offset;
        let Some(field) = rec.get(start..start + a.size) else {
            w.put(b"(bad record)");
            flush(s, &mut w);
            continue;
        };
        // As the kernel's print_probe_args(): an array in braces.
        let n = usize::from(a.count.max(1));
        if a.count != 0 {
            w.put(b"{");
        }
        for (j, elem) in field.chunks_exact(a.size / n).enumerate() {
            if j > 0 {
                w.put(b",");
            }
            print_value(s, &mut w, a.ty, elem, rec, head);
            flush(s, &mut w);
        }
        if a.count != 0 {
            w.put(b"}");
        }
        flush(s, &mut w);
    }
}

/// Hands what `w` holds to the trace_seq `s` (raw bytes: a `char` may be
/// anything, NUL too, as the kernel's `'%c'` prints it) and empties it.
fn flush(s: *mut c_void, w: &mut BufWriter<'_>) {
    if w.len != 0 {
        // SAFETY: `w.len` bytes of the writer's buffer.
        unsafe { trace_seq_putmem(s, w.buf.as_ptr().cast(), w.len as core::ffi::c_uint) };
    }
    w.len = 0;
}

/// One value of a record as the kernel's fetch types print it: `elem` its
/// bytes in the fixed part; a string's `__data_loc` points into `rec`
/// (its bytes after `head`), and goes from there to `s`.
fn print_value(
    s: *mut c_void,
    w: &mut BufWriter<'_>,
    ty: Type,
    elem: &[u8],
    rec: &[u8],
    head: usize,
) {
    let mut word = [0u8; 8];
    let k = elem.len().min(8);
    word[..k].copy_from_slice(&elem[..k]);
    let v = u64::from_ne_bytes(word);
    let _ = match ty {
        Type::Unsigned(_) | Type::Bitfield { signed: false, .. } => write!(w, "{}", v),
        Type::Signed(n)
        | Type::Bitfield {
            container: n,
            signed: true,
            ..
        } => {
            let shift = 64 - 8 * u32::from(n);
            write!(w, "{}", ((v << shift) as i64) >> shift)
        }
        Type::Hex(_) => write!(w, "0x{:x}", v),
        Type::Char => {
            w.put(&[b'\'', v as u8, b'\'']);
            Ok(())
        }
        Type::Symbol => {
            let mut sym = [0u8; 256];
            let n = format_symbol(&mut sym, v as usize).min(sym.len() - 1);
            w.put(&sym[..n]);
            Ok(())
        }
        Type::String | Type::UString | Type::SymStr => {
            let loc = v as u32;
            let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
            if len == 0 {
                w.write_str("(fault)")
            } else if let Some(bytes) = rec.get(off..off + len - 1).filter(|_| off >= head) {
                // As `"%s"`: the bytes as they are, up to a NUL.
                let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
                w.put(b"\"");
                flush(s, w);
                // SAFETY: `end` bytes of the record.
                unsafe { trace_seq_putmem(s, bytes.as_ptr().cast(), end as core::ffi::c_uint) };
                w.put(b"\"");
                Ok(())
            } else {
                w.write_str("(bad record)")
            }
        }
    };
}

/// C callback: the arguments' fields for filters and `format`.
///
/// # Safety
///
/// `owner` is a live event; `call` its trace_event_call.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_define_fields(
    owner: *mut c_void,
    call: *mut c_void,
) -> c_int {
    // SAFETY: per the function's contract.
    let ev = unsafe { &*owner.cast::<Event>() };
    let head = head_size(ev.is_return);
    for a in ev.fields.iter() {
        let signed = field_type(a.ty).2;
        // SAFETY: NUL-terminated strings that live as long as the event.
        let r = unsafe {
            trace_define_field(
                call,
                a.c_type.as_ptr(),
                a.name.as_ptr(),
                (head + a.offset) as c_int,
                a.size as c_int,
                c_int::from(signed),
                0,
            )
        };
        if r != 0 {
            return r;
        }
    }
    0
}

/// The probe's pre handler: count, record.
///
/// # Safety
///
/// Called by the engine with a site's probe.
pub(super) unsafe extern "C" fn on_hit(p: *mut KpKprobe, regs: *mut pt_regs) -> c_int {
    // SAFETY: `p` is the first field of a live `Site` (`#[repr(C)]`),
    // whose event outlives it.
    let (site, tev) = unsafe { (&*p.cast::<Site>(), (*(*p.cast::<Site>()).ev).tev) };
    site.hits.inc();
    // SAFETY: a registered event; `regs` is the trap frame.
    unsafe {
        kp_tev_record(
            tev,
            (site as *const Site).cast(),
            regs,
            site.rp.kp.addr as usize,
            0,
            core::ptr::null(),
        )
    };
    0
}

/// A return site's entry handler: saves the `$argN` values its arguments
/// read, at the function's entry (the kernel's `store_trace_entry_data()`).
///
/// # Safety
///
/// Called by the engine with an instance of a site's kretprobe, whose
/// `data_size` holds a word per saved argument.
pub(super) unsafe extern "C" fn on_entry(
    ri: *mut KpKretprobeInstance,
    regs: *mut pt_regs,
) -> c_int {
    // SAFETY: `rp` is the first field of a live `Site`; `regs` the frame.
    let (site, regs) = unsafe { (&*(*ri).rp.cast::<Site>(), &*regs) };
    // SAFETY: `data_size` is a word per saved argument, 8-byte aligned.
    let data = unsafe {
        core::slice::from_raw_parts_mut((*ri).data().cast::<u64>(), site.entry_args.len())
    };
    for (d, &k) in data.iter_mut().zip(site.entry_args.iter()) {
        *d = fetch::arg_value(regs, k).unwrap_or(0);
    }
    0
}

/// The kretprobe's return handler: count, record.
///
/// # Safety
///
/// Called by the engine with an instance of a site's kretprobe.
pub(super) unsafe extern "C" fn on_return(
    ri: *mut KpKretprobeInstance,
    regs: *mut pt_regs,
) -> c_int {
    // SAFETY: `rp` is the first field of a live `Site`, whose event
    // outlives it.
    let (site, ret) = unsafe { (&*(*ri).rp.cast::<Site>(), (*ri).ret_addr) };
    site.hits.inc();
    // What the entry handler saved (if it is there: none without `$argN`).
    let edata = if site.entry_args.is_empty() {
        core::ptr::null()
    } else {
        // SAFETY: the instance is live while its return handler runs.
        unsafe { (*ri).data().cast_const().cast() }
    };
    // SAFETY: as in `on_hit`.
    unsafe {
        kp_tev_record(
            (*site.ev).tev,
            (site as *const Site).cast(),
            regs,
            site.rp.kp.addr as usize,
            ret,
            edata,
        )
    };
    0
}
