#!/usr/bin/env bash
# Install everything the project needs and build the test kernels.
#
# Idempotent: each step checks whether its result is already there. Kernel
# builds go to a cache outside the checkout ($KP_CACHE, default
# /var/cache/kprobes-rs), keyed by the kernel package version and a hash of
# the config fragment plus this script, so a second run takes seconds.
#
# Usage: scripts/setup.sh [x86_64] [arm64]   (default: both)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/env.sh"

log() { printf '[setup] %s\n' "$*" >&2; }

arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(x86_64 arm64)

SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive

apt_updated=
apt_update() {
	[ -n "$apt_updated" ] && return 0
	$SUDO apt-get update -qq
	apt_updated=1
}

# --- Debian packages ---------------------------------------------------------
need_bpo=
if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
	log "adding bookworm-backports to the apt sources"
	printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
		$SUDO tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null
	need_bpo=1
fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	log "adding the arm64 dpkg architecture (for busybox-static:arm64)"
	$SUDO dpkg --add-architecture arm64
	need_bpo=1
fi
[ -z "$need_bpo" ] || apt_update

pkgs=(clang lld llvm libclang-dev clang-19 lld-19 llvm-19 libclang-19-dev flex bison bc libelf-dev libssl-dev cpio
      busybox-static make python3 xz-utils kmod binutils rsync g++ dwarves)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing: ${missing[*]}"
	apt_update
	$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
bpo_missing=()
for p in linux-source-6.12 qemu-system-x86 qemu-system-arm; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || bpo_missing+=("$p")
done
if [ ${#bpo_missing[@]} -gt 0 ]; then
	log "installing from bookworm-backports: ${bpo_missing[*]}"
	apt_update
	$SUDO apt-get install -y -qq -t bookworm-backports "${bpo_missing[@]}" >/dev/null
fi

# arm64 busybox for the arm64 initramfs (extracted, not installed).
if [ ! -x "$KP_CACHE/busybox-arm64/bin/busybox" ]; then
	log "fetching busybox-static:arm64"
	apt_update
	tmp=$(mktemp -d)
	chmod 777 "$tmp" # apt-get download drops privileges to _apt
	(cd "$tmp" && apt-get download -qq busybox-static:arm64)
	mkdir -p "$KP_CACHE/busybox-arm64"
	dpkg-deb -x "$tmp"/busybox-static_*_arm64.deb "$KP_CACHE/busybox-arm64"
	rm -rf "$tmp"
fi

# --- Rust toolchain pieces -----------------------------------------------------
for c in rust-src clippy rustfmt; do
	if ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
		log "adding $c"
		rustup component add "$c"
	fi
done
if ! command -v bindgen >/dev/null || ! bindgen --version 2>/dev/null | grep -q '0.69.5'; then
	log "installing bindgen-cli 0.69.5"
	cargo install -q bindgen-cli --version 0.69.5 --locked
fi

# --- Kernel source -------------------------------------------------------------
# Re-read the paths: the kernel version is known only once linux-source-6.12
# is installed.
. "$here/scripts/env.sh"
[ "$KVER" != none ] || { log "linux-source-6.12 is not installed"; exit 1; }
if [ ! -f "$KSRC/.unpacked" ]; then
	log "unpacking kernel source $KVER into $KSRC"
	rm -rf "$KSRC"
	mkdir -p "$KSRC"
	tar -xf /usr/src/linux-source-6.12.tar.xz -C "$KSRC" --strip-components=1
	touch "$KSRC/.unpacked"
fi

# --- Kernels -------------------------------------------------------------------
for arch in "${arches[@]}"; do
	kdir=$(kdir_for "$arch")
	if [ -f "$kdir/.built" ]; then
		log "$arch kernel up to date: $kdir"
		continue
	fi
	log "building the $arch kernel in $kdir (a few minutes)"
	rm -rf "$kdir"
	mkdir -p "$kdir"
	karch=$(karch_for "$arch")
	llvm_env "$arch"
	kmake() { make -s -C "$KSRC" O="$kdir" ARCH="$karch" LLVM="$(llvm_for "$arch")" "$@"; }
	kmake tinyconfig >/dev/null
	cat $(configs_for "$arch") >"$kdir/fragment.config"
	"$KSRC/scripts/kconfig/merge_config.sh" -m -O "$kdir" "$kdir/.config" "$kdir/fragment.config" >/dev/null
	kmake olddefconfig >/dev/null
	# Every option asked for must have made it into the final config.
	bad=0
	while read -r line; do
		case "$line" in
		CONFIG_*=*)
			grep -qx "$line" "$kdir/.config" || { log "config: $line did not stick"; bad=1; } ;;
		"# CONFIG_"*" is not set")
			opt=${line#\# }; opt=${opt%% *}
			! grep -q "^$opt=" "$kdir/.config" || { log "config: $opt should be off"; bad=1; } ;;
		esac
	done < <(
		# A later fragment overrides an earlier one (merge_config.sh):
		# check each option's last mention only.
		tac "$kdir/fragment.config" |
			awk '{ o = $0; sub(/^# /, "", o); sub(/[= ].*/, "", o) }
			     o ~ /^CONFIG_/ && !seen[o]++' | tac
	)
	if [ "$bad" != 0 ]; then
		kmake rustavailable || true
		exit 1
	fi
	if ! kmake -j"$(nproc)" >"$kdir/build.log" 2>&1; then
		tail -n 60 "$kdir/build.log" >&2
		log "$arch kernel build failed (full log: $kdir/build.log)"
		exit 1
	fi
	touch "$kdir/.built"
	log "$arch kernel built"
done
