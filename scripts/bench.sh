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
cpus=$(grep -a "^KP-GUEST: " "$log" | head -n1 | sed 's/.*, \([0-9]*\) CPUs/\1/')
{
	echo "# kprobes-rs vs the kernel's kprobes ($arch)"
	echo
	echo "Kernel $KVER, QEMU ${QEMU_ACCEL:-tcg}, $cpus CPUs; $(date -u +%Y-%m-%d)."
	echo "Per hit: (time with probe - time without) / 10^6 calls; 5 runs interleaved"
	echo "between the engines; median (min-max), ns. Both engines' jump optimization is"
	echo "off except in kprobe-mid-opt (row 3, x86_64), where each side's probe is"
	echo "measured once it reports itself optimized. Under TCG absolute times mean"
	echo "little; the ratio is the figure of merit."
	echo
	echo "| row | ours | kernel's | ratio ours/kernel |"
	echo "| --- | --- | --- | --- |"
	grep -a "KP-BENCH .* ours " "$log" | sed 's/.*KP-BENCH //' |
		awk '{ r = ($7 > 0) ? sprintf("%.2f", $3 / $7) : "n/a";
		       printf "| %s | %s (%s-%s) | %s (%s-%s) | %s |\n", $1, $3, $4, $5, $7, $8, $9, r }'
} >"$out"
cat "$out"
echo "written to $out"
