#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer through the libfuzzer-sys crate, stable
# rustc's sancov instrumentation) of the engine's pure logic: the
# kprobe_events grammar, the symbol parsers and both instruction decoders.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   (default: 3600 s each, all targets)
#   make fuzz [KP_FUZZ_SECONDS=N]           the same from make
#
# Each target starts from its checked-in corpus (fuzz/corpus/TARGET) plus
# what earlier runs found (out/fuzz/TARGET); `KP_FUZZ_MERGE=1` merges what
# was found back into fuzz/corpus (minimized, libFuzzer's -merge). Numbers
# come from fuzz/*.dict: the edge values of every width (0, 1, 2^31, 2^32-1,
# 2^63, 2^64-1, their successors, negatives) in each notation the grammar
# reads. A crash leaves its input in out/fuzz/crash-TARGET-* and fails the
# run. Prints one line per target:
#   fuzz TARGET: N inputs, cov C, features F, corpus K, crashes 0
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PATH="$HOME/.cargo/bin:$PATH"
secs=${1:-3600}
shift || true
# libFuzzer takes -max_total_time=0 as "no limit".
case $secs in '' | *[!0-9]* | 0) echo "fuzz: SECONDS must be a positive number, not '$secs'"; exit 2 ;; esac
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(event_line ksym x86_decode arm64_decode)

# The instrumentation cargo-fuzz uses, all of it stable rustc flags.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Cllvm-args=-sanitizer-coverage-stack-depth \
 -Cdebug-assertions -Coverflow-checks"
export CARGO_TARGET_DIR=$here/target/fuzz
mkdir -p out/fuzz
# An explicit --target keeps RUSTFLAGS off build scripts (as cargo-fuzz does).
host=$(rustc -vV | sed -n 's/^host: //p')
if ! cargo build --release --target "$host" --manifest-path fuzz/Cargo.toml >out/fuzz-build.log 2>&1; then
	tail -n 20 out/fuzz-build.log
	echo "fuzz: build failed (log: out/fuzz-build.log)"
	exit 1
fi

status=0
for t in "${targets[@]}"; do
	work=out/fuzz/$t
	mkdir -p "$work"
	# Crashes of earlier runs are kept, but not counted against this one.
	if compgen -G "out/fuzz/crash-$t-*" >/dev/null; then
		mkdir -p out/fuzz/earlier
		mv out/fuzz/crash-"$t"-* out/fuzz/earlier/
	fi
	dict=()
	[ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
	log=out/fuzz/$t.log
	"$CARGO_TARGET_DIR/$host/release/$t" "$work" "fuzz/corpus/$t" "${dict[@]}" \
		-max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="out/fuzz/crash-$t-" >"$log" 2>&1
	rc=$?
	execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -n1)
	last=$(grep -E '^#[0-9]+' "$log" | tail -n1)
	cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
	ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
	corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$last")
	crashes=$(find out/fuzz -maxdepth 1 -name "crash-$t-*" | wc -l)
	echo "fuzz $t: ${execs:-0} inputs, cov ${cov:-?}, features ${ft:-?}, corpus ${corp:-?}, crashes $crashes"
	if [ "$rc" != 0 ] || [ "$crashes" != 0 ] || [ -z "$execs" ]; then
		status=1
		grep -E 'panicked|ERROR|SUMMARY' "$log" | head -n 5
		echo "fuzz $t: FAILED (exit $rc, log: $log)"
	fi
	if [ "${KP_FUZZ_MERGE:-0}" = 1 ]; then
		mkdir -p "out/fuzz/merged-$t"
		"$CARGO_TARGET_DIR/$host/release/$t" -merge=1 "out/fuzz/merged-$t" "fuzz/corpus/$t" "$work" >/dev/null 2>&1 &&
			rm -rf "fuzz/corpus/$t" && mv "out/fuzz/merged-$t" "fuzz/corpus/$t"
	fi
done
exit $status
