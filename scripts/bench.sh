#!/usr/bin/env bash
# `make bench [ARCH=...]`: the engine against the kernel's own kprobes in one
# boot (bench/kp_bench.c); writes bench/results-<arch>.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/env.sh"
arch=${1:-x86_64}
"$here/scripts/setup.sh" "$arch"
"$here/scripts/build-modules.sh" "$arch" >/dev/null
KP_QEMU_TIMEOUT=${KP_QEMU_TIMEOUT:-900} "$here/scripts/qemu-run.sh" "$arch" bench
log="$here/out/$arch/bench-console.log"
if ! grep -qaE "KP-CHECK: ok bench-run\s*$" "$log" || grep -qa "KP-CHECK: FAIL" "$log"; then
	grep -a "KP-BENCH\|KP-CHECK" "$log" || true
	echo "bench FAILED (console log: $log)"
	exit 1
fi
out="$here/bench/results-$arch.md"
cpus=$(grep -a "^KP-GUEST: " "$log" | head -n1 | tr -d "\r" | sed 's/.*, \([0-9]*\) CPUs/\1/')
reps=$(grep -a "KP-BENCH start:" "$log" | head -n1 | tr -d "\r" | sed 's/.* x \([0-9]*\) reps.*/\1/')
{
	echo "# kprobes-rs vs the kernel's kprobes ($arch)"
	echo
	echo "Kernel $KVER, QEMU ${QEMU_ACCEL:-tcg}, $cpus CPUs; $(date -u +%Y-%m-%d)."
	echo "Per hit: (time with probe - time without) / 10^6 calls; $reps runs interleaved"
	echo "between the engines; median (min-max), ns. Both engines' jump optimization is"
	echo "off except in kprobe-mid-opt (row 3), where each side's probe is measured"
	echo "once it reports itself optimized (arm64: the kernel has no optprobes, its"
	echo "side is its BRK probe). event-3args: the same kprobe"
	echo "event (three register arguments) enabled on each side in turn, records"
	echo "written to the trace buffer. Under TCG absolute times mean little; the ratio"
	echo "is the figure of merit."
	echo
	echo "Memory rows (bytes, one measurement): what each engine allocates and keeps"
	echo "while 1000 probes on distinct instructions (NOPs), or one kretprobe with 1001"
	echo "instances (less one with 1), are registered: slab objects and per-CPU areas"
	echo "(the kernel's allocation trace events) and vmalloc pages (/proc/vmallocinfo);"
	echo "per probe, plus the client's struct (struct kp_kprobe / struct kprobe, where"
	echo "each engine keeps its per-probe state)."
	echo "Not in them: this engine's out-of-line slots (one per probed address or"
	echo "kretprobe instance), a static text area in the module image (x86_64: 8192 x"
	echo "64 bytes, plus 1024 x 128 for jump-optimization detours; arm64: 8192 x 32),"
	echo "where the kernel allocates its slots as needed."
	echo
	echo "| row | ours | kernel's | ratio ours/kernel |"
	echo "| --- | --- | --- | --- |"
	grep -a "KP-BENCH .* ours " "$log" | tr -d "\r" | sed 's/.*KP-BENCH //' |
		awk '{ r = ($7 > 0) ? sprintf("%.2f", $3 / $7) : "n/a";
		       if ($1 ~ /^memory/)
			       printf "| %s | %s bytes | %s bytes | %s |\n", $1, $3, $7, r
		       else
			       printf "| %s | %s (%s-%s) | %s (%s-%s) | %s |\n", $1, $3, $4, $5, $7, $8, $9, r }'
} >"$out"
cat "$out"
echo "written to $out"
