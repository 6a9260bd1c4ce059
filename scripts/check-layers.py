#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The engine's layering, checked from its source (`make test` runs this).

Reads every `crate::<module>` reference in src/ and arch/ (comments left
out) and fails, naming each offence, when:

- the modules of src/ form an import cycle (the registry calls nothing
  above it, and so on up);
- an arch backend (arch/<arch>/) uses more of the engine than the contract
  (`crate::arch`), its binding (`crate::entries`: the `Core` trait's
  implementation, through which traps and trampolines call in) and the
  modules below the registry (FOUNDATION);
- the contract (src/arch.rs) uses anything but CONTRACT_MAY_USE;
- code names an item of the crate root (the root only wires the modules);
- src/ picks an architecture (`cfg(CONFIG_X86_64)`/`cfg(CONFIG_ARM64)`)
  anywhere but src/arch.rs, or declares a `static mut`;
- a file is over LINE_LIMIT lines, the pure grammar and decoders aside.

Prints the modules bottom-up (each uses only modules printed before it).

The contract and the backend are two nodes: the core's calls into the
backend go through the contract's traits (`Arch::...`, dispatched at build
time to the backend that src/arch.rs picks), and the backend's calls into
the core go through `Core` on `entries::Engine`. That two-way relation is
what the contract is; this check makes sure it is the only one.
"""
import collections
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
ARCH = os.path.join(ROOT, "arch")

# Below the registry: what a backend and the contract may use.
FOUNDATION = {"abi", "errno", "lock", "slots", "symbols", "text", "ksym"}
BACKEND_MAY_USE = FOUNDATION | {"arch", "entries"}
CONTRACT_MAY_USE = {"abi", "errno", "lock"}
LINE_LIMIT = 650
# Pure, table-like code (the host crate builds and tests it).
LONG_OK = {"src/event_parse.rs", "arch/x86_64/decode.rs", "arch/arm64/decode.rs"}
# Client-side files (compiled into client modules, not the engine).
CLIENT_SIDE = {"src/api.rs", "arch/regs.rs"}

problems = []


def rel(p):
    return os.path.relpath(p, ROOT)


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def brace_group(text, start):
    """The text inside the braces opening at text[start], nesting allowed."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return text[start + 1 :]


def top_level_names(group):
    """The first path segment of each item of a `use` group (`a::{b, c}, d`
    gives a and d)."""
    names, depth, item = [], 0, ""
    for ch in group + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            m = re.match(r"\s*([A-Za-z_0-9]+)", item)
            if m:
                names.append(m.group(1))
            item = ""
        else:
            item += ch
    return names


def refs(text):
    text = strip_comments(text)
    out = re.findall(r"crate::([A-Za-z_0-9]+)", text)
    for m in re.finditer(r"crate::\{", text):
        out += top_level_names(brace_group(text, m.end() - 1))
    # Paths that climb out of a backend's own folder (arch/<arch>/x.rs:
    # super is the backend, super::super the contract, one more the root).
    if re.search(r"super::super::super::", text):
        out.append("<root via super>")
    return out


def rust_files(top):
    for dp, _, fns in os.walk(top):
        for fn in sorted(fns):
            if fn.endswith(".rs"):
                yield os.path.join(dp, fn)


modules = set()
for entry in os.listdir(SRC):
    p = os.path.join(SRC, entry)
    if entry.endswith(".rs"):
        modules.add(entry[:-3])
    elif os.path.isdir(p):
        modules.add(entry)
modules.discard("engine")  # the crate root
modules.discard("api")  # client-side
modules.add("backend")

graph = collections.defaultdict(set)
where = collections.defaultdict(set)


def module_of(path):
    r = rel(path)
    if r.startswith("arch/"):
        return "backend"
    return r.split("/")[1].removesuffix(".rs")


for path in list(rust_files(SRC)) + list(rust_files(ARCH)):
    r = rel(path)
    text = open(path, encoding="utf-8").read()
    nlines = text.count("\n")
    if nlines > LINE_LIMIT and r not in LONG_OK:
        problems.append(f"{r}: {nlines} lines (limit {LINE_LIMIT})")
    if r.startswith("src/"):
        code = strip_comments(text)
        if re.search(r"^\s*(pub(\([a-z]+\))?\s+)?static\s+mut\b", code, re.M):
            problems.append(f"{r}: a `static mut`")
        if r != "src/arch.rs" and re.search(r"cfg\w*!?\([^)]*CONFIG_(X86_64|ARM64)", code):
            problems.append(f"{r}: picks an architecture (only src/arch.rs may)")
    if r in CLIENT_SIDE or r == "src/engine.rs":
        continue
    m = module_of(path)
    for t in refs(text):
        if t == m:
            continue
        if t not in modules:
            problems.append(f"{r}: uses `crate::{t}`, an item of the crate root")
            continue
        graph[m].add(t)
        where[(m, t)].add(r)

for t in sorted(graph["backend"] - BACKEND_MAY_USE):
    problems.append(
        f"an arch backend uses `crate::{t}` ({', '.join(sorted(where[('backend', t)]))}): "
        "only the contract, `entries` and the modules below the registry"
    )
for t in sorted(graph["arch"] - CONTRACT_MAY_USE):
    problems.append(f"src/arch.rs uses `crate::{t}`")

# Cycles: strongly connected components (Tarjan).
index, low, stack, on, comps = {}, {}, [], set(), []


def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in sorted(graph.get(v, ())):
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            comps.append(sorted(comp))


sys.setrecursionlimit(10000)
for v in sorted(modules):
    if v not in index:
        visit(v)
for comp in comps:
    edges = [
        f"{a} -> {b} ({', '.join(sorted(where[(a, b)]))})"
        for a in comp
        for b in sorted(graph[a])
        if b in comp
    ]
    problems.append("import cycle: " + "; ".join(edges))

if not comps:
    order, done = [], set()

    def place(v):
        if v in done:
            return
        done.add(v)
        for w in sorted(graph.get(v, ())):
            place(w)
        order.append(v)

    for v in sorted(modules):
        place(v)
    print("layers, bottom-up: " + " ".join(order))

for p in problems:
    print("check-layers: " + p)
sys.exit(1 if problems else 0)
