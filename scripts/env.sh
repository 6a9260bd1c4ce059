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

karch_for() { case "$1" in x86_64) echo x86_64 ;; arm64) echo arm64 ;; *) echo "unknown arch $1" >&2; return 1 ;; esac; }
kdir_for() {
	local h
	h=$( (echo "recipe $KBUILD_RECIPE"; cat "$KP_ROOT/qemu/common.config" "$KP_ROOT/qemu/$1.config") | sha256sum | cut -c1-12)
	echo "$KP_CACHE/build-$1-$KVER-$h"
}
