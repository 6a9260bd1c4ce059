#!/usr/bin/env python3
"""Names the samples of a host perf profile of QEMU (TCG, -perfmap) after
the guest's functions (scripts/bench-profile.sh).

usage: tcg-profile.py PERF_DATA SYSTEM_MAP CONSOLE_LOG [TOP]

QEMU's perf map names each translated block "guest-0x<address>", the guest
address the block starts at. The block's guest function comes from the
kernel's System.map (moved by the KASLR offset the guest's _stext shows)
and from the modules' symbols the guest printed ("KP-BENCH-SYM" lines of
qemu/guest-bench.sh). Samples outside translated code are QEMU's own
functions (helpers, the main loop). Prints each name's share of all
samples, largest first: "G" guest functions, "H" QEMU's.
"""
import bisect
import collections
import re
import subprocess
import sys


# Farther than this past a symbol, an address is taken for code without
# one (no kernel function is this long).
FAR = 0x8000


def load_symbols(system_map, log):
    syms = []
    stext_map = None
    for line in open(system_map):
        parts = line.split()
        if len(parts) < 3:
            continue
        if parts[2] == "_stext":
            stext_map = int(parts[0], 16)
        if parts[1].lower() in ("t", "w"):
            syms.append((int(parts[0], 16), parts[2]))
    offset = 0
    mods = {}
    pat = re.compile(r"KP-BENCH-SYM ([0-9a-f]+) (\S) (\S+)(?:\s+\[(\S+)\])?")
    for line in open(log, errors="replace"):
        m = pat.search(line)
        if not m:
            continue
        addr, kind, name, mod = int(m.group(1), 16), m.group(2), m.group(3), m.group(4)
        if mod is None:
            if name == "_stext" and stext_map is not None:
                offset = addr - stext_map
        elif kind.lower() in ("t", "w"):
            # The last load's addresses win (the module may load again).
            mods[(mod, name)] = addr
    syms = [(a + offset, n) for a, n in syms]
    syms += [(a, "%s [%s]" % (n, mod)) for (mod, n), a in mods.items()]
    syms.sort()
    return syms


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    data, system_map, log = sys.argv[1:4]
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    syms = load_symbols(system_map, log)
    addrs = [a for a, _ in syms]
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "ip,sym"],
        capture_output=True, text=True, check=True,
    ).stdout
    counts = collections.Counter()
    total = guest = 0
    for line in out.splitlines():
        parts = line.split(None, 1)
        if not parts:
            continue
        total += 1
        sym = parts[1].strip() if len(parts) > 1 else "[unknown]"
        if sym.startswith("guest-0x"):
            guest += 1
            pc = int(sym[len("guest-0x"):].split("+")[0], 16)
            if pc < 1 << 47:
                counts["G (user space, or boot code before paging)"] += 1
                continue
            i = bisect.bisect_right(addrs, pc) - 1
            # Far from any symbol: code the kernel made at run time (its
            # optprobe detours and kprobe slots, ftrace trampolines, BPF).
            # (The engine's slot area is one symbol of 512 KiB.)
            if i < 0 or (pc - addrs[i] > FAR and not syms[i][1].startswith("kp_insn_slots")):
                name = "? (no symbol: run-time code near %#x)" % (pc & ~0xFFFFF)
            else:
                name = syms[i][1]
            counts["G " + name] += 1
        else:
            counts["H " + sym.split("+")[0]] += 1
    if not total:
        sys.exit("no samples in " + data)
    print("%d samples, %.1f%% in translated guest code" % (total, 100.0 * guest / total))
    for name, n in counts.most_common(top):
        print("%6.2f%%  %s" % (100.0 * n / total, name))


if __name__ == "__main__":
    main()
