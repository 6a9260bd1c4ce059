#!/usr/bin/env python3
# Writes the fuzzers' seed corpus (fuzz/corpus/TARGET/) and dictionaries
# (fuzz/TARGET.dict). Run again after changing it: `python3 fuzz/seed.py`.
# The seeds are the grammar's documented forms and the edge numbers of
# every width in every notation; libFuzzer mutates from there.
import hashlib, os, struct

here = os.path.dirname(os.path.abspath(__file__))

def edge_numbers():
    vals = [0, 1, 7, 8, 63, 64, 65, 4096, 4097, 1 << 31, (1 << 32) - 1, 1 << 32,
            1 << 63, (1 << 64) - 1, 1 << 64]
    out = []
    for v in vals:
        for s in (str(v), hex(v), "0" + oct(v)[2:]):
            out += [s, "-" + s]
    return out

def write(target, items):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    for b in items:
        if isinstance(b, str):
            b = b.encode()
        with open(os.path.join(d, hashlib.sha1(b).hexdigest()), "wb") as f:
            f.write(b)

def dictionary(target, tokens):
    with open(os.path.join(here, target + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary, written by fuzz/seed.py\n")
        for t in tokens:
            esc = "".join(c if c.isprintable() and c not in '\\"' else "\\x%02x" % ord(c)
                          for c in t)
            f.write('"%s"\n' % esc)

nums = edge_numbers()
lines = [
    "p:myprobe do_sys_open dfd=%ax filename=%dx flags=%cx mode=+4($stack)",
    "r:myretprobe do_sys_open $retval",
    "p:g/e vfs_read+0x10 a=+0(%si):string b=$comm c=@jiffies-8:u32",
    "p do_sys_open a=%di:b3@1/8 b=-4(+8(%bp)):x16 c=\\-1 d=$arg1 e=%ax:symbol",
    "r8:g/e m:f+0 $retval:s64",
    "p do_sys_open%return",
    "-:g/e",
    "-:e",
    "p:x do_sys_open a=%x0 b=+u8(%x1):ustring c=$stack2",
    "p 0xffffffff81000000 a=@0x10:u8",
]
templates = [
    "rN do_sys_open", "p do_sys_open+N", "p N", "p do_sys_open a=%di:bN@N/N",
    "p do_sys_open a=$stackN", "p do_sys_open a=$argN", "p do_sys_open a=@N",
    "p do_sys_open a=@jiffies+N", "p do_sys_open a=+N(%di)", "p do_sys_open a=-N(%di)",
    "p do_sys_open a=\\N", "p do_sys_open a=%di:uN",
]
for t in templates:
    for n in nums:
        lines.append(t.replace("N", n))
write("event_line", lines)
dictionary("event_line", ["p:", "r:", "-:", "p", "r", "%return", "$retval", "$comm",
    "$stack", "$arg", "@", "+", "-", "(", ")", "+0(", "+u0(", ":", "=", "/", "\\",
    ":string", ":ustring", ":symbol", ":symstr", ":char", ":u8", ":s16", ":x32",
    ":u64", ":b", "[", "]", "%di", "%si", "%ax", "%sp", "%ip", "%x0", "%x30", "%sp",
    "%pc", " ", "\n", "#", "kprobes_rs/", "m:", "0x", "0"] + nums)

write("ksym", ["do_sys_open+0x0/0x10", "vfs_read+0x10/0x120 [ext4]",
    "f+0x1/0x2 [mod 0123456789abcdef]", "0xffffffff81000000", "a+0xffffffffffffffff/0x1",
    "m:sym", "sym", "a.b$c", "x+0x10000000000000000/0x1"])
dictionary("ksym", ["+0x", "/0x", " [", "]", ":", "ffffffffffffffff", "10000000000000000"])

x86 = [bytes.fromhex(h) for h in [
    "f30f1efa", "0f1f440000", "e800000000", "55", "4889e5", "488b05 00000000".replace(" ", ""),
    "c3", "cc", "e9 00000000".replace(" ", ""), "0f8500000000", "7400", "ff2500000000",
    "ff d0".replace(" ", ""), "c5f877", "62f17d48 6f 00".replace(" ", ""), "8fe878c0c001",
    "f0480fc10a", "66 2e 0f 1f 84 00 00 00 00 00".replace(" ", ""), "0f0b", "cd03", "e2fe",
    "48b8" + "ff" * 8, "0f0f00b4"]]
write("x86_decode", x86)

arm = [0xd503201f, 0xaa1e03e9, 0xd503233f, 0xa9bf7bfd, 0x910003fd, 0x94000000,
    0x14000000, 0x54000000, 0xb4000000, 0x36000000, 0x10000000, 0x90000000, 0x58000000,
    0xd65f03c0, 0xd63f0000, 0xc85f7c00, 0xc8007c00, 0xd4200000, 0xd503245f]
write("arm64_decode", [struct.pack("<I", w) for w in arm] +
      [b"".join(struct.pack("<I", w) for w in arm)])
dictionary("arm64_decode", [])
os.remove(os.path.join(here, "arm64_decode.dict"))
