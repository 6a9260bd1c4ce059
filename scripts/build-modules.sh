#!/usr/bin/env bash
# Build kprobes.ko, the test modules and the examples for one architecture.
# The sources are mirrored into out/<arch>/src so that the two architectures'
# objects never mix (Kbuild writes objects next to the sources).
# Usage: scripts/build-modules.sh x86_64|arm64
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/env.sh"
arch=${1:?arch}
llvm_env "$arch"
kdir=$(kdir_for "$arch")
[ -f "$kdir/.built" ] || "$here/scripts/setup.sh" "$arch"
out="$here/out/$arch/src"
mkdir -p "$out"
# -c --no-times: compare contents; unchanged files keep their times (Kbuild
# stays incremental), changed ones get the time of the copy, so an edit made
# while a build ran can never look older than its object.
rsync -a -c --no-times --delete --exclude '*.o' --exclude '*.ko' --exclude '.*.cmd' --exclude '*.mod*' \
	--exclude 'modules.order' --exclude 'Module.symvers' --exclude '*.rmeta' --exclude '*.d' \
	"$here/Kbuild" "$here/src" "$here/arch" "$here/tests" "$here/examples" "$here/include" "$here/bench" "$out/"
# The kernel's samples/kprobes, unmodified but for the include: once
# against the engine (kp_compat.h), and as they are (where the kernel has
# kprobes) to compare their output. Written only when they change, so that
# Kbuild stays incremental.
mkdir -p "$out/samples/kp" "$out/samples/kernel"
for f in kprobe_example kretprobe_example; do
	sed 's|#include <linux/kprobes.h>|#include "kp_compat.h"|' "$KSRC/samples/kprobes/$f.c" >"$out/samples/kp/$f.c.new"
	cp "$KSRC/samples/kprobes/$f.c" "$out/samples/kernel/$f.c.new"
	for d in kp kernel; do
		if cmp -s "$out/samples/$d/$f.c.new" "$out/samples/$d/$f.c"; then
			rm "$out/samples/$d/$f.c.new"
		else
			mv "$out/samples/$d/$f.c.new" "$out/samples/$d/$f.c"
		fi
	done
done
extra=()
[ "${CLIPPY:-0}" = 1 ] && extra+=(CLIPPY=1)
make -s -C "$kdir" M="$out" ARCH="$(karch_for "$arch")" LLVM="$(llvm_for "$arch")" KCFLAGS=-Werror "${extra[@]}" modules
# x86_64: the trampolines and the Rust functions they call share one page
# (.text.kp_tramp, page-aligned, the trampolines first: Kbuild), so that
# their calls are direct jumps an emulator chains rather than looks up.
# Checked on x86_64 (the bench's) and x86_64-hardened; x86_64-debug's is
# twice as big (KASAN's instrumentation) and is not checked.
if [ "$arch" = x86_64 ] || [ "$arch" = x86_64-hardened ]; then
	set -- $(objdump -h "$out/kprobes.ko" | awk '$2 == ".text.kp_tramp" { print $3, $NF }')
	if [ $# != 2 ] || [ $((16#$1)) -gt 4096 ] || [ "$2" != "2**12" ]; then
		echo "build-modules: .text.kp_tramp is not one page-aligned page: ${*:-missing} (Kbuild)" >&2
		exit 1
	fi
fi
find "$out" -name '*.ko' -printf '%P\n' | sort
