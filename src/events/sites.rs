// SPDX-License-Identifier: GPL-2.0

//! An event's sites: appending one to an event (the kernel's
//! `append_trace_kprobe()`), removing sites and events (`-:` lines, the
//! kernel's `dyn_event_release()` matching).

use super::*;
use crate::event_parse::{ErrKind, ProbeDef};
use kernel::bindings;
use kernel::ffi::c_int;

/// Appends `site` to event `i`, as the kernel's `append_trace_kprobe()`:
/// the same kind of probe, the same argument names and types, not a copy
/// of a site it has; armed at once if the event is enabled.
pub(super) fn append(
    g: &mut Locked,
    i: usize,
    d: &ProbeDef<'_>,
    mut site: KBox<Site>,
    fields: &[Field],
) -> core::result::Result<(), Refusal> {
    let Some(ev) = g.events().get_mut(i) else {
        return Err((ErrKind::FailRegProbe, 0, ENOENT));
    };
    if ev.is_return != d.is_return {
        return Err((ErrKind::DiffProbeType, 0, EEXIST));
    }
    if let Some(k) = fields_differ(&ev.fields, fields) {
        // The kernel's caret: at the kth argument of the line, or past
        // its end when the line has fewer.
        let pos = d.arg_pos(k - 1).unwrap_or(PAST_END);
        return Err((ErrKind::DiffArgType, pos, EEXIST));
    }
    if ev.sites.iter().any(|s| s.body() == site.body()) {
        return Err((ErrKind::SameProbe, 0, EEXIST));
    }
    notrace_refused(d, &mut site)?;
    site.ev = &**ev;
    register_or_wait(&mut site, d).map_err(|e| registration_refused(d, e))?;
    // Under `event_mutex` (`Locked`): enabling and disabling the event
    // walk the sites under it, and cannot come between the check and the
    // arming.
    let armed = {
        let r = if ev.sites.reserve(1, GFP_KERNEL).is_err() {
            -(bindings::ENOMEM as c_int)
        // SAFETY: a registered event of ours.
        } else if site.is_registered() && unsafe { kp_tev_enabled(ev.tev) } {
            // SAFETY: a registered probe.
            unsafe { crate::registry::kp_enable_kprobe(&mut site.rp.kp) }
        } else {
            0
        };
        if r == 0 {
            // Cannot fail: room was reserved.
            let _ = ev.sites.push(site, GFP_KERNEL);
            Ok(())
        } else {
            Err((r, site))
        }
    };
    match armed {
        Ok(()) => {
            if let Some(s) = g.events().get(i).and_then(|e| e.sites.last()) {
                super::dynevent::list(s);
            }
            Ok(())
        }
        Err((r, mut site)) => {
            unregister_probe(&mut site, d.is_return);
            Err((ErrKind::FailRegProbe, 0, Error::from_errno(r)))
        }
    }
}

/// Whether a site's definition (location and arguments) starts with the
/// `words` of a removal, as the kernel's `trace_kprobe_match_command_head()`
/// compares them (none: every site).
pub(super) fn words_match<'a>(body: &[u8], words: impl IntoIterator<Item = &'a [u8]>) -> bool {
    let mut have = body.split(|&c| c == b' ').filter(|w| !w.is_empty());
    words.into_iter().all(|w| have.next() == Some(w))
}

/// The words of a `-:` line after its event.
fn removal_words(words: &str) -> impl Iterator<Item = &[u8]> {
    words.split_ascii_whitespace().map(str::as_bytes)
}

/// `-:[GRP/]EVENT [LOCATION [ARGS]]`: removes the matching sites; an event
/// that loses them all goes (`-EBUSY`, and it stays whole, while it is
/// enabled or open: the kernel would take its other sites first). A site
/// of an event that keeps others goes even while the event is enabled, as
/// in the kernel. `-ENOENT` if nothing matched.
pub(super) fn remove(g: &mut Locked, group: Option<&str>, event: &str, words: &str) -> Result {
    let ev_matches = |e: &Event| {
        (event.is_empty() || e.name_str() == event) && group.map_or(true, |g| e.group_str() == g)
    };
    let mut found = false;
    let mut r = Ok(());
    let mut i = 0;
    while i < g.events().len() {
        let ev = &mut g.events()[i];
        let n = if ev_matches(ev) {
            ev.sites
                .iter()
                .filter(|s| words_match(s.body(), removal_words(words)))
                .count()
        } else {
            0
        };
        if n == 0 {
            i += 1;
            continue;
        }
        found = true;
        if n == ev.sites.len() {
            r = remove_at(g, i);
            if r.is_err() {
                break;
            }
            continue;
        }
        while let Some(k) = ev
            .sites
            .iter()
            .position(|s| words_match(s.body(), removal_words(words)))
        {
            let mut site = take_at(&mut ev.sites, k);
            unregister_probe(&mut site, ev.is_return);
        }
        i += 1;
    }
    reset_buffers();
    if !found {
        return Err(ENOENT);
    }
    r
}

/// Takes element `i` out of `v`, keeping the order (KVec of 6.12 has no
/// `remove`).
fn take_at<T>(v: &mut KVec<T>, i: usize) -> T {
    v.as_mut_slice()[i..].rotate_left(1);
    let last = v.len() - 1;
    // SAFETY: the element at `last` is read out exactly once and the length
    // shrinks past it, so it is neither used nor dropped again.
    unsafe {
        let p = v.as_mut_ptr().add(last);
        v.set_len(last);
        p.read()
    }
}

/// Removes site `k` of event `i`: the event with it when it is the last
/// (`-EBUSY` while the event is enabled), as the kernel's
/// `unregister_trace_kprobe()`.
pub(super) fn remove_site(g: &mut Locked, i: usize, k: usize) -> Result {
    let ev = g.events().get_mut(i).ok_or(ENOENT)?;
    if k >= ev.sites.len() {
        return Err(ENOENT);
    }
    if ev.sites.len() == 1 {
        return remove_at(g, i);
    }
    let is_return = ev.is_return;
    let mut site = take_at(&mut ev.sites, k);
    unregister_probe(&mut site, is_return);
    Ok(())
}

/// Removes event `i` with its sites: `-EBUSY` while it is enabled.
pub(super) fn remove_at(g: &mut Locked, i: usize) -> Result {
    let events = g.events();
    let Some(ev) = events.get_mut(i) else {
        return Err(ENOENT);
    };
    // SAFETY: a registered event of ours.
    let r = unsafe { kp_tev_unregister(ev.tev) };
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    // Unregistered: nothing arms or disarms the sites any more.
    let is_return = ev.is_return;
    for s in ev.sites.iter_mut() {
        unregister_probe(s, is_return);
    }
    // SAFETY: unregistered above; no handler runs any more.
    unsafe { kp_tev_free(ev.tev) };
    drop(take_at(events, i));
    Ok(())
}
