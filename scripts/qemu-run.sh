#!/usr/bin/env bash
# Boot the test kernel of one arch in QEMU with our modules and a guest job.
# Usage: scripts/qemu-run.sh x86_64|arm64 test|demo
# Prints the console log path; exit status: 0 if the guest finished its job
# (the caller judges the log), 1 on timeout or if QEMU failed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/env.sh"
arch=${1:?arch}
job=${2:?job}
kdir=$(kdir_for "$arch")
out="$here/out/$arch"
root="$out/initramfs"
# KP_QEMU_TAG=name: a second boot of the same kernel, logged apart.
log="$out/$job${KP_QEMU_TAG:+-$KP_QEMU_TAG}-console.log"
timeout_s=${KP_QEMU_TIMEOUT:-600}

rm -rf "$root"
mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,etc,lib/kp}
karch=$(karch_for "$arch")
case $karch in
x86_64) cp /bin/busybox "$root/bin/busybox" ;;
arm64) cp "$KP_CACHE/busybox-arm64/bin/busybox" "$root/bin/busybox" ;;
esac
cp "$here/qemu/init" "$root/init"
cp "$here/qemu/guest-lib.sh" "$root/guest-lib.sh"
cp "$here/qemu/guest-$job.sh" "$root/job.sh"
echo kprobes-guest >"$root/etc/hostname"
# An unprivileged user for the access-control checks.
printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
# The modules of the last build (modules.order), not stale ones left over.
sed 's/\.o$/.ko/' "$out/src/modules.order" | xargs cp -t "$root/lib/kp/"
# The README's client module (scripts/build-client.sh), when built.
[ -f "$out/client/my_probe/my_probe.ko" ] && cp "$out/client/my_probe/my_probe.ko" "$root/lib/kp/"
# The event grammar fuzzer's corpus, replayed by the test job.
if [ "$job" = test ] && [ -d "$here/fuzz/corpus/event_line" ]; then
	mkdir -p "$root/corpus"
	cp "$here"/fuzz/corpus/event_line/* "$root/corpus/"
fi
# The kernel's ftrace selftests (test.d/kprobe/*.tc and their harness).
if [ "$job" = test ]; then
	cp -r "$KSRC/tools/testing/selftests/ftrace" "$root/ftrace"
fi
# Debian's perf and trace-cmd with their libraries (scripts/tools-sysroot.sh)
# where the engine serves the standard files (the kernels without kprobes:
# the hardened ones). KP_TOOLS=1 adds them elsewhere too.
if [ "$job" = test ] && { [ "${arch%-hardened}" != "$arch" ] || [ "${KP_TOOLS:-0}" = 1 ]; }; then
	sysroot=$("$here/scripts/tools-sysroot.sh" "$karch")
	"$here/scripts/copy-elf.sh" "$sysroot" "$root" /usr/bin/perf /usr/bin/trace-cmd
	# A libbpf program (qemu/kp-libbpf-count.c), built against that
	# sysroot's libbpf, and its BPF object.
	case $karch in x86_64) triplet=x86_64-linux-gnu ;; arm64) triplet=aarch64-linux-gnu ;; esac
	clang -target bpf -O2 -g -Wall -Werror -I "$sysroot/usr/include" -I "$sysroot/usr/include/$triplet" \
		-c "$here/qemu/kp-libbpf-count.bpf.c" -o "$root/lib/kp/kp-libbpf-count.bpf.o"
	clang --target=$triplet --sysroot="$sysroot" -fuse-ld=lld -O2 -Wall -Wextra -Werror \
		-o "$root/bin/kp-libbpf-count" "$here/qemu/kp-libbpf-count.c" -lbpf
	"$here/scripts/copy-elf.sh" "$sysroot" "$root" "/usr/lib/$triplet/libbpf.so.1"
fi
# The guest's BPF loader (static, no libc: the initramfs has none).
case $karch in x86_64) ctarget=x86_64-linux-gnu ;; arm64) ctarget=aarch64-linux-gnu ;; esac
clang --target=$ctarget -O2 -static -nostdlib -ffreestanding -fno-builtin -fno-stack-protector \
	-fuse-ld=lld -Wall -Wextra -Werror -o "$root/bin/kp-bpf-count" "$here/qemu/kp-bpf-count.c"
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$out/initramfs.cpio.gz"

accel=(-accel tcg)
[ "${QEMU_ACCEL:-tcg}" = kvm ] && accel=(-accel kvm)
common=(-smp 2 -m 1024 -nographic -no-reboot -initrd "$out/initramfs.cpio.gz" "${accel[@]}")
# KP_QEMU_ARGS="...": more QEMU options (profiling: "-perfmap" for host perf).
# shellcheck disable=SC2206
[ -n "${KP_QEMU_ARGS:-}" ] && common+=(${KP_QEMU_ARGS})
# KP_QEMU_MONITOR=path: an HMP monitor on that unix socket (debugging a hung guest:
# "info registers -a").
[ -n "${KP_QEMU_MONITOR:-}" ] && common+=(-monitor "unix:$KP_QEMU_MONITOR,server,nowait")
cmdline="panic=-1 oops=panic loglevel=7 ${KP_CMDLINE:-}"
case $karch in
x86_64)
	cmd=(qemu-system-x86_64 -cpu max -kernel "$kdir/arch/x86/boot/bzImage"
	     -append "console=ttyS0 $cmdline" "${common[@]}") ;;
arm64)
	# GICv3 for pseudo-NMIs (the PMU's overflow interrupt is one: kp_nmi).
	# The hardened kernel needs a CPU with PAC and BTI, which TCG enforces
	# (the implementation-defined PAC algorithm: QARMA5 is several times
	# slower to emulate). QEMU's virt board hands the kernel a KASLR seed.
	cpu=cortex-a57
	[ "$arch" = arm64-hardened ] && cpu=max,pauth-impdef=on
	cmd=(qemu-system-aarch64 -M virt,gic-version=3 -cpu "$cpu" -kernel "$kdir/arch/arm64/boot/Image"
	     -append "console=ttyAMA0 irqchip.gicv3_pseudo_nmi=1 $cmdline" "${common[@]}") ;;
esac
echo "[qemu] $arch $job: console log in $log" >&2
rc=0
timeout --foreground "$timeout_s" "${cmd[@]}" </dev/null >"$log" 2>&1 || rc=$?
if [ $rc = 124 ]; then
	echo "[qemu] $arch $job: TIMEOUT after ${timeout_s}s" >&2
	echo "KP-HOST: timeout after ${timeout_s}s" >>"$log"
	exit 1
fi
if ! grep -q "KP-GUEST: job finished" "$log"; then
	echo "[qemu] $arch $job: the guest did not finish its job (qemu exit $rc)" >&2
	exit 1
fi
