# Shared paths for the scripts; sourced, not run.
# The kernel version comes from the installed linux-source-6.12 package; the
# per-arch build directory is keyed by that version and by a hash of the config
# fragments and KBUILD_RECIPE (bump it when setup.sh changes how kernels are
# built), so any change rebuilds into a new directory.
: "${KP_CACHE:=/var/cache/kprobes-rs}"
KP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KVER=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || echo none)
KSRC="$KP_CACHE/linux-$KVER"
KBUILD_RECIPE=1
export PATH="$HOME/.cargo/bin:$PATH"

# A target is an arch (x86_64, arm64) or a variant of one (x86_64-debug: the
# kernel's checkers on; qemu/x86_64-debug.config on top of x86_64.config).
# A plain arch's own additions, which its variants do not inherit, are in
# qemu/<arch>-only.config (x86_64: BTF, for the side-by-side checks of BTF
# argument names against the kernel's own parser).
karch_for() { case "$1" in x86_64 | x86_64-*) echo x86_64 ;; arm64 | arm64-*) echo arm64 ;; *) echo "unknown arch $1" >&2; return 1 ;; esac; }
# The config fragments of a target, in merge order.
configs_for() {
	local base
	base=$(karch_for "$1") || return 1
	echo "$KP_ROOT/qemu/common.config" "$KP_ROOT/qemu/$base.config"
	if [ "$1" = "$base" ]; then
		[ ! -f "$KP_ROOT/qemu/$1-only.config" ] || echo "$KP_ROOT/qemu/$1-only.config"
	else
		echo "$KP_ROOT/qemu/$1.config"
	fi
}
kdir_for() {
	local h
	h=$( (echo "recipe $KBUILD_RECIPE"; cat $(configs_for "$1")) | sha256sum | cut -c1-12)
	echo "$KP_CACHE/build-$1-$KVER-$h"
}

# bindgen (the kernel's Rust bindings) loads the newest libclang installed
# unless told otherwise, and the kernel's build refuses a libclang whose
# version differs from the clang that builds it: name the matching one.
# The hardened variants need clang 19 (kCFI: clang >= 16); the others
# keep Debian's default clang. llvm_for gives a target's LLVM= value for
# kbuild, llvm_env exports the matching LIBCLANG_PATH.
llvm_for() { case "$1" in *-hardened) echo -19 ;; *) echo 1 ;; esac; }
llvm_env() {
	local v l
	l=$(llvm_for "${1:-x86_64}")
	# Before setup.sh installs clang there is none: no path then (and no
	# failure under `set -e -o pipefail`).
	if [ "$l" = 1 ]; then v=$(clang -dumpversion 2>/dev/null | cut -d. -f1 || true); else v=${l#-}; fi
	[ -z "$v" ] || export LIBCLANG_PATH=/usr/lib/llvm-$v/lib
}
llvm_env
