#!/usr/bin/env bash
# The tracing tools users already run, for one architecture's guest:
# Debian's perf (linux-perf of the test kernels' version) and trace-cmd,
# and libbpf, with the libraries they load. The packages and their library
# dependencies are downloaded (not installed) and extracted into a cache
# directory, from where scripts/qemu-run.sh copies the binaries and what
# they need (their ELF NEEDED entries, followed) into the initramfs. With
# them, what building a libbpf program against that sysroot takes (the C
# library's and the kernel's headers, crt files and libgcc; these without
# their own dependencies): qemu/kp-libbpf-count.c.
# Usage: scripts/tools-sysroot.sh x86_64|arm64   (prints the directory)
set -euo pipefail
. "$(dirname "$0")/env.sh"
arch=${1:?arch}
case $arch in x86_64) deb=amd64 ;; arm64) deb=arm64 ;; *) echo "unknown arch $arch" >&2; exit 1 ;; esac
# (-2: since libbpf and the build packages joined.)
dest="$KP_CACHE/tools-$arch-$KVER-2"
if [ ! -e "$dest/.done" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	top=("linux-perf:$deb=$KVER" "trace-cmd:$deb" "libbpf1:$deb" "libbpf-dev:$deb")
	build=("libc6-dev:$deb" "linux-libc-dev:$deb" "libgcc-12-dev:$deb")
	# Only libraries: the tools' perl and python dependencies are for
	# scripts the guest does not run.
	# (apt names the host's own architecture's packages without a suffix.)
	if [ "$deb" = "$(dpkg --print-architecture)" ]; then pat='^(lib[^ :]*|zlib1g)$'; else pat="^(lib[^ :]*|zlib1g):$deb\$"; fi
	deps=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances "${top[@]}" |
		grep -E "$pat" | sed "s/:$deb\$//; s/\$/:$deb/" | sort -u)
	# shellcheck disable=SC2086
	(cd "$tmp" && apt-get download -qq "${top[@]}" "${build[@]}" $deps 2>/dev/null)
	rm -rf "$dest.part"
	mkdir -p "$dest.part"
	for f in "$tmp"/*.deb; do dpkg-deb -x "$f" "$dest.part"; done
	rm -rf "$dest"
	mv "$dest.part" "$dest"
	touch "$dest/.done"
fi
echo "$dest"
