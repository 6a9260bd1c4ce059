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
KP=/sys/kernel/debug/kp
# hits SYM: the hit counter of the probe on SYM in the engine's debugfs list.
hits() {
	sed -n "s/.*  $1+0x[0-9a-f]*  .*hits=\([0-9]*\).*/\1/p" $KP/list | head -n 1
}
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
