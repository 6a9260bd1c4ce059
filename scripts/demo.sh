#!/usr/bin/env bash
# `make demo`: build, boot QEMU, load the engine and the example probe, make
# user space open files, show what the probe caught. Exit status: success.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
arch=${1:-x86_64}
"$here/scripts/setup.sh" "$arch"
"$here/scripts/build-modules.sh" "$arch" >/dev/null
rc=0
"$here/scripts/qemu-run.sh" "$arch" demo || rc=$?
log="$here/out/$arch/demo-console.log"
# Show the job's output without the boot messages.
sed -n '/KP-GUEST: /,$p' "$log" | grep -v '^\[ *[0-9.]*\] \(reboot\|ACPI\|input\)'
if [ $rc != 0 ] || ! grep -q "KP-GUEST: job finished, status 0" "$log" ||
	grep -qE 'Oops|BUG:|WARNING:|Kernel panic|general protection fault|Unexpected kernel BRK|Internal error:' "$log"; then
	echo "demo FAILED (console log: $log)"
	exit 1
fi
echo "demo OK (console log: $log)"
