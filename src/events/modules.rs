// SPDX-License-Identifier: GPL-2.0

//! Events on modules: a site whose module is not loaded waits for it (the
//! kernel's `register_trace_kprobe()`), and is registered when it comes
//! (its COMING notifier), again at each later load, `@SYM` resolved anew
//! each time (the kernel's `trace_kprobe_module_callback()`).

use super::*;
use crate::event_parse as ep;
use crate::event_parse::ProbeDef;
use core::fmt::Write;

/// [`register_probe`], or, as the kernel's `register_trace_kprobe()`, a
/// site on a module that is not loaded waits for it (`module_coming`).
pub(super) fn register_or_wait(site: &mut Site, d: &ProbeDef<'_>) -> Result {
    match register_probe(site, d) {
        Err(_) if module_pending(d) => {
            pr_warn!(
                "This probe might be able to register after target module is loaded. Continue.\n"
            );
            // Listed as given until registered (the kernel's `r:` before
            // a kretprobe gets its default instance count).
            set_def(site, d, false);
            Ok(())
        }
        r => r,
    }
}

/// The site's listing line: a return probe without an instance count
/// shows the default once `registered`, as the kernel's. (Out of memory:
/// the line stays as it was.)
pub(super) fn set_def(site: &mut Site, d: &ProbeDef<'_>, registered: bool) {
    let listed = if registered {
        d.with_default_maxactive(crate::kretprobe::default_maxactive() as u32)
    } else {
        *d
    };
    let mut def = KVec::new();
    let mut w = VecWriter(&mut def, false);
    let _ = write!(w, "{}", listed);
    if !w.1 {
        site.def = def;
    }
}

/// Whether `d` probes a module that is not loaded (its site waits).
pub(super) fn module_pending(d: &ProbeDef<'_>) -> bool {
    match d.location {
        ep::Location::Symbol {
            module: Some(m), ..
        } => !module_loaded(m.as_bytes()),
        _ => false,
    }
}

/// Whether module `name` is loaded.
fn module_loaded(name: &[u8]) -> bool {
    let mut buf = [0u8; 64];
    let Some(n) = core::str::from_utf8(name).ok() else {
        return false;
    };
    match symbol_spec(&mut buf, None, n) {
        Some(c) => crate::symbols::module_loaded(c),
        None => false,
    }
}

/// A module is coming (its COMING notifier, text ready, init not run):
/// registers the sites that wait for it, and again those it had before it
/// last went (their probes went with its text), armed if their event is
/// enabled, as the kernel's `trace_kprobe_module_callback()`.
pub(crate) fn module_coming(name: &[u8]) {
    let mut g = Locked::lock();
    for ev in g.events().iter_mut() {
        let (is_return, tev) = (ev.is_return, ev.tev);
        for site in ev.sites.iter_mut() {
            if site.module.as_deref() != Some(name) {
                continue;
            }
            let mut def = KVec::new();
            if def.extend_from_slice(&site.def, GFP_KERNEL).is_err() {
                pr_warn!("kprobe_events: a site not registered on module load: no memory\n");
                continue;
            }
            let line = core::str::from_utf8(&def).unwrap_or("?");
            let Ok(ep::Command::Probe(d)) = parse(line) else {
                pr_warn!(
                    "kprobe_events: {} not registered on module load: refused\n",
                    line
                );
                continue;
            };
            // `@SYM` resolved again, the module's own now among them (the
            // kernel's traceprobe_update_arg() at each registration). The
            // same fields: the same line.
            let args = match compile_args(&d, false) {
                Ok((a, _)) => a,
                Err((k, e)) => {
                    pr_warn!(
                        "kprobe_events: {} not registered on module load: {} ({:?})\n",
                        line,
                        k.message(),
                        e
                    );
                    unregister_probe(site, is_return);
                    continue;
                }
            };
            // Under `event_mutex` (`Locked`), as the kernel's callback:
            // enabling and disabling the event cannot come in between.
            unregister_probe(site, is_return);
            // Unregistered: no hit reads the programs being replaced.
            site.args = args;
            site.rp = fresh(&site.rp);
            if let Err(e) = register_probe(site, &d) {
                pr_warn!(
                    "kprobe_events: {} not registered on module load: {:?}\n",
                    line,
                    e
                );
                continue;
            }
            // The kernel's notrace rule, now that the address is known.
            let addr = site.rp.kp.addr as usize;
            if within_notrace_func(addr) {
                pr_warn!(
                    "Could not probe notrace function {}\n",
                    crate::symbols::Shown(addr)
                );
                unregister_probe(site, is_return);
                continue;
            }
            set_def(site, &d, true);
            // SAFETY: a registered event of ours.
            if unsafe { kp_tev_enabled(tev) } {
                // SAFETY: a registered probe.
                let r = unsafe { crate::registry::kp_enable_kprobe(&mut site.rp.kp) };
                if r != 0 {
                    pr_warn!("kprobe_events: {} not armed on module load: {}\n", line, r);
                }
            }
        }
    }
}

/// A kretprobe as `old` was before registration: what the event set
/// (instances, entry data), none of what the engine filled in.
fn fresh(old: &KpKretprobe) -> KpKretprobe {
    let mut rp = KpKretprobe::new();
    rp.maxactive = old.maxactive;
    rp.entry_handler = old.entry_handler;
    rp.data_size = old.data_size;
    rp
}
