# Helpers for the guest job scripts (sourced).
# check NAME CMD...: runs CMD; prints a KP-CHECK line the host counts.
check() {
	name=$1
	shift
	if "$@"; then
		echo "KP-CHECK: ok $name"
	else
		echo "KP-CHECK: FAIL $name"
	fi
}
ARCH=$(uname -m)
M=/lib/kp
# The kernel's own kprobes must stay unused: its list is empty.
kernel_kprobes_unused() {
	[ -e /sys/kernel/debug/kprobes/list ] && [ ! -s /sys/kernel/debug/kprobes/list ]
}
# User-space activity that opens files (hits do_sys_open).
activity() {
	cat /proc/version >/dev/null
	cat /etc/hostname 2>/dev/null
	ls / >/dev/null
	for f in /proc/cpuinfo /proc/meminfo /proc/uptime; do head -n 1 "$f" >/dev/null; done
}
