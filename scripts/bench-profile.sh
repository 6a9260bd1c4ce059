#!/usr/bin/env bash
# Where the time of `make bench` rows goes under QEMU's TCG, by guest
# function: the bench job runs under the host's perf (software clock, QEMU's
# own process only) with QEMU's -perfmap, which names each block of
# translated code after the guest address it came from; scripts/
# tcg-profile.py then names those addresses after the guest's symbols
# (System.map, and the modules' symbols the guest prints with
# kp_bench_syms=1) and lists the largest shares, guest functions ("G") and
# QEMU's own functions ("H": helper_lookup_tb_ptr is the lookup behind every
# indirect branch, and every direct one to another page, of the guest).
#
#   scripts/bench-profile.sh [ARCH] ROWS [TOP]
#   scripts/bench-profile.sh x86_64 kretprobe 40
#
# Both engines' runs of the rows are in one profile; the engine's functions
# are the [kprobes] ones. Needs the host's perf (linux-perf) and
# kernel.perf_event_paranoid <= 2. Not part of `make test`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/env.sh"
arch=x86_64
case ${1:-} in x86_64 | arm64) arch=$1 && shift ;; esac
rows=${1:?usage: bench-profile.sh [ARCH] ROWS [TOP]}
top=${2:-40}
command -v perf >/dev/null || {
	echo "bench-profile: no perf on this host (apt-get install linux-perf)" >&2
	exit 1
}
"$here/scripts/setup.sh" "$arch"
"$here/scripts/build-modules.sh" "$arch" >/dev/null
data="$here/out/$arch/bench-profile.perf"
# QEMU's maps of translated code, tens of MB each: only the last run's is
# kept (perf reads it from /tmp at report time: scripts/tcg-profile.py can
# be run again on the last profile).
rm -f /tmp/perf-*.map
KP_QEMU_ARGS=-perfmap KP_QEMU_TAG=profile KP_CMDLINE="kp_bench_rows=$rows kp_bench_syms=1" \
	perf record -q -e cpu-clock -F 4000 -o "$data" -- \
	"$here/scripts/qemu-run.sh" "$arch" bench
log="$here/out/$arch/bench-profile-console.log"
grep -a "KP-BENCH .* ours " "$log" | tr -d '\r' | sed 's/.*KP-BENCH //'
python3 "$here/scripts/tcg-profile.py" "$data" "$(kdir_for "$arch")/System.map" "$log" "$top"
