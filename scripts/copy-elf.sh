#!/usr/bin/env bash
# Copies ELF programs from a sysroot into a root directory with every
# shared library they need (their NEEDED entries, followed), at the same
# paths, and their program interpreter.
# Usage: scripts/copy-elf.sh SYSROOT ROOT /usr/bin/prog...
set -euo pipefail
sysroot=${1:?sysroot}
root=${2:?root}
shift 2
libdirs=()
for d in lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu lib/aarch64-linux-gnu usr/lib/aarch64-linux-gnu lib usr/lib lib64; do
	[ -d "$sysroot/$d" ] && libdirs+=("$d")
done
declare -A seen=()
# The file a path inside the sysroot names, its links followed inside the
# sysroot (Debian's /lib64 and /lib loader links are absolute).
resolve() {
	local p=$1 t n=0
	while [ -L "$sysroot$p" ] && [ $n -lt 16 ]; do
		t=$(readlink "$sysroot$p")
		case $t in /*) p=$t ;; *) p=$(dirname "$p")/$t ;; esac
		n=$((n + 1))
	done
	echo "$sysroot$p"
}
copy() { # path inside the sysroot
	[ -n "${seen[$1]:-}" ] && return 0
	seen[$1]=1
	mkdir -p "$root/$(dirname "$1")"
	cp "$(resolve "/$1")" "$root/$1"
	local interp lib d found
	interp=$(readelf -l "$sysroot/$1" 2>/dev/null | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
	if [ -n "$interp" ] && [ ! -e "$root$interp" ]; then
		# (amd64's /lib64 link is made by libc6's scripts, not shipped:
		# then the loader of that name in the library directories.)
		local src
		src=$(resolve "$interp")
		if [ ! -e "$src" ]; then
			for d in "${libdirs[@]}"; do
				[ -e "$sysroot/$d/$(basename "$interp")" ] && src=$(resolve "/$d/$(basename "$interp")") && break
			done
		fi
		mkdir -p "$root$(dirname "$interp")"
		cp "$src" "$root$interp"
	fi
	for lib in $(readelf -d "$sysroot/$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		found=
		for d in "${libdirs[@]}"; do
			if [ -e "$sysroot/$d/$lib" ]; then
				copy "$d/$lib"
				found=1
				break
			fi
		done
		[ -n "$found" ] || { echo "copy-elf: $lib (needed by $1) not in $sysroot" >&2; return 1; }
	done
}
for p in "$@"; do copy "${p#/}"; done
