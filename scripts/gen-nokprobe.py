#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Writes the kernel's own list of functions never to probe, by name.

The kernel marks them `NOKPROBE_SYMBOL(name)`, `__kprobes` (its section
`.kprobes.text`), `nokprobe_inline`, or in assembly `NOKPROBE(name)` and
`_ASM_NOKPROBE(name)`. Both leave a trace in the running kernel only where it is
built with CONFIG_KPROBES: without it (the hardened test kernels, and any
kernel built without kprobes) `NOKPROBE_SYMBOL()` expands to nothing and
`__kprobes` puts the function in plain `.text`. The engine still must not
probe them: they are the paths a breakpoint, a fault or a stack walk takes
(`return_address()`, which lockdep's irq tracing calls on arm64's exception
exit, hit itself until `die()` deadlocked the machine). So the names are
read from the kernel source here, once per kernel version, and compiled in:

    scripts/gen-nokprobe.py [KSRC]    (default: $KSRC from scripts/env.sh)

writes src/nokprobe_names.rs (generic code: everything outside arch/) and
arch/{x86_64,arm64}/nokprobe_names.rs (arch/x86, arch/arm64). Names the
running kernel does not have are skipped at load; a static function that
shares its name with another refuses both (as the kernel's list refuses
every function behind a `_kbl_addr_` symbol). Where the kernel has kprobes
the engine also reads their live list (`_kbl_addr_*`), and
`kp_smoke.smoke_blacklist_covers_the_kernels` fails when that list, or
`.kprobes.text`, has a function this one lacks: regenerate after a kernel
upgrade.
"""
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NOKPROBE = re.compile(r'(?<![A-Za-z_0-9])NOKPROBE_SYMBOL\(\s*([A-Za-z_]\w*)\s*\)')
KPROBES_ATTR = re.compile(r'(?<![A-Za-z_0-9])__kprobes(?![A-Za-z_0-9])')
# `__kprobes` right before the declarator: `int __kprobes name(`,
# `void __kprobes *name(`, or the name on the next line.
KPROBES_DECL = re.compile(r'\s*\*?\s*([A-Za-z_]\w*)\s*\(')
# `nokprobe_inline` (plain `inline` without kprobes, `__always_inline` with
# them): a compiler that keeps one out of line must not have it probed.
NOKPROBE_INLINE = re.compile(r'(?<![A-Za-z_0-9])nokprobe_inline(?![A-Za-z_0-9])')
# Assembly: `NOKPROBE(name)` (arm64) and `_ASM_NOKPROBE(name)` (x86), and
# inside an assembler macro `_ASM_NOKPROBE(prefix\arg)`, expanded for each
# use of the macro in the same file (`xen_pv_trap asm_exc_int3`).
ASM_NOKPROBE = re.compile(r'(?<![A-Za-z_0-9])(?:_ASM_)?NOKPROBE\(\s*([A-Za-z_][\w\\]*)\s*\)')
ASM_MACRO = re.compile(r'^\s*\.macro\s+(\w+)\s+(\w+)[^\n]*\n(.*?)^\s*\.endm', re.M | re.S)
# Not the kernel: user-space tools, documentation, build scripts.
SKIP_TOP = {'arch', 'tools', 'Documentation', 'samples', 'scripts', 'usr'}


def line_of(text, pos):
    start = text.rfind('\n', 0, pos) + 1
    end = text.find('\n', pos)
    return text[start:end if end >= 0 else len(text)]


def not_code(line):
    """A comment line, a preprocessor line or a macro body's line."""
    return line.startswith(('#', '*', '/*', '//')) or line.endswith('\\')


def scan(ksrc, top, generic):
    names = {}
    for d, dirs, files in os.walk(os.path.join(ksrc, top)):
        dirs.sort()
        if generic and os.path.samefile(d, ksrc):
            dirs[:] = [x for x in dirs if x not in SKIP_TOP]
        for f in sorted(files):
            if not f.endswith(('.c', '.h', '.S')):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, ksrc)
            with open(path, errors='replace') as fh:
                text = fh.read()
            if f.endswith('.S'):
                scan_asm(text, rel, names)
                continue
            for m in NOKPROBE.finditer(text):
                line = line_of(text, m.start()).strip()
                # The macro's own definition, or a use inside another
                # macro (its argument is a parameter, not a function).
                if line.startswith('#') or line.endswith('\\'):
                    continue
                names.setdefault(m.group(1), rel)
            for m in KPROBES_ATTR.finditer(text):
                line = line_of(text, m.start()).strip()
                if not_code(line):
                    continue
                d2 = KPROBES_DECL.match(text, m.end())
                if d2:
                    names.setdefault(d2.group(1), rel + ' (__kprobes)')
                else:
                    sys.exit(f'gen-nokprobe: cannot read the function after __kprobes: {rel}: {line}')
            for m in NOKPROBE_INLINE.finditer(text):
                line = line_of(text, m.start()).strip()
                if not_code(line):
                    continue
                # The declarator's name: the identifier right before the
                # first `(`, with only a type's words and `*` before it.
                paren = text.find('(', m.end())
                decl = text[m.end():paren]
                d2 = re.fullmatch(r'[\s\w\*]*?([A-Za-z_]\w*)\s*', decl)
                if paren < 0 or not d2:
                    sys.exit(f'gen-nokprobe: cannot read the function after nokprobe_inline: {rel}: {line}')
                names.setdefault(d2.group(1), rel + ' (nokprobe_inline)')
    return names


def scan_asm(text, rel, names):
    for m in ASM_NOKPROBE.finditer(text):
        line = line_of(text, m.start()).strip()
        if line.startswith('#'):
            continue
        if '\\' not in m.group(1):
            names.setdefault(m.group(1), rel + ' (asm)')
    for mac in ASM_MACRO.finditer(text):
        name, arg, body = mac.groups()
        for m in ASM_NOKPROBE.finditer(body):
            pre, sep, post = m.group(1).partition('\\' + arg)
            if not sep or '\\' in pre + post:
                continue
            for use in re.finditer(r'^\s*' + name + r'\s+(\w+)\s*$', text, re.M):
                names.setdefault(pre + use.group(1) + post, rel + f' (asm, {name})')


def write(path, const, doc, names, version):
    width = max(len(n) for n in names)
    out = [
        '// SPDX-License-Identifier: GPL-2.0',
        '',
        f'//! {doc}',
        '//!',
        f'//! Generated by `scripts/gen-nokprobe.py` from Linux {version}: do not',
        '//! edit; regenerate after a kernel upgrade (see the script).',
        '',
        '/// Function names, sorted, with the file that marks each.',
        '#[rustfmt::skip]',
        f'pub(crate) const {const}: &[&[u8]] = &[',
    ]
    for n in sorted(names):
        out.append(f'    b"{n}",{" " * (width - len(n))} // {names[n]}')
    out.append('];')
    with open(path, 'w') as fh:
        fh.write('\n'.join(out) + '\n')


def main():
    if len(sys.argv) > 1:
        ksrc = sys.argv[1]
    else:
        ksrc = subprocess.run(['bash', '-c', f'. {here}/scripts/env.sh; echo "$KSRC"'],
                              capture_output=True, text=True, check=True).stdout.strip()
    version = subprocess.run(['make', '-s', '-C', ksrc, 'kernelversion'],
                             capture_output=True, text=True, check=True).stdout.strip()
    generic = scan(ksrc, '.', True)
    write(os.path.join(here, 'src/nokprobe_names.rs'), 'GENERIC',
          'What the kernel marks never to probe, outside `arch/`.',
          generic, version)
    for arch, kdir in (('x86_64', 'arch/x86'), ('arm64', 'arch/arm64')):
        names = {n: p for n, p in scan(ksrc, kdir, False).items() if n not in generic}
        write(os.path.join(here, f'arch/{arch}/nokprobe_names.rs'), 'NOKPROBE_NAMES',
              f'What the kernel marks never to probe, in `{kdir}`.',
              names, version)


main()
