#!/usr/bin/env bash
# Builds the client module README.md shows ("Using the engine from your
# module"), exactly as written there, out of tree: the block after the
# `<!-- client-module: my_probe.rs -->` marker becomes
# out/<arch>/client/my_probe/my_probe.rs next to out/<arch>/client/kprobes-rs
# (a link to the engine's build tree), built with the engine's
# Module.symvers. make test loads the result in QEMU and checks its output.
# Usage: scripts/build-client.sh x86_64|arm64   (after build-modules.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/env.sh"
arch=${1:?arch}
llvm_env "$arch"
kdir=$(kdir_for "$arch")
base="$here/out/$arch/client"
rm -rf "$base"
mkdir -p "$base/my_probe"
ln -s ../src "$base/kprobes-rs"
awk '/<!-- client-module: my_probe.rs -->/ { on = 1; next }
	on && /^```rust/ { copy = 1; next }
	copy && /^```/ { exit }
	copy { print }' "$here/README.md" >"$base/my_probe/my_probe.rs"
[ -s "$base/my_probe/my_probe.rs" ] || { echo "no client module block in README.md" >&2; exit 1; }
# As README.md says (merge-functions: kCFI; see the top-level Kbuild).
printf 'obj-m := my_probe.o\nrustflags-y += -Zmerge-functions=disabled\n' >"$base/my_probe/Kbuild"
extra=()
[ "${CLIPPY:-0}" = 1 ] && extra+=(CLIPPY=1)
make -s -C "$kdir" M="$base/my_probe" ARCH="$(karch_for "$arch")" LLVM="$(llvm_for "$arch")" \
	KBUILD_EXTRA_SYMBOLS="$here/out/$arch/src/Module.symvers" "${extra[@]}" modules
ls "$base/my_probe/my_probe.ko"
