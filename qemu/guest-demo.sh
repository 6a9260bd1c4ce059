# Guest job for `make demo`: load the engine and the example probe, make
# user space open some files, show what the probe caught, unload everything.
. /guest-lib.sh
# Kernel messages go to the log buffer only; the end of the job shows them.
dmesg -n 1
echo "=== insmod kprobes.ko"
insmod $M/kprobes.ko || exit 1
echo "=== insmod kprobe_example.ko (probes do_sys_open)"
insmod $M/kprobe_example.ko || exit 1
echo "=== insmod kretprobe_example.ko (times do_sys_open's returns)"
insmod $M/kretprobe_example.ko || exit 1
echo "=== user space opens some files"
activity
echo "=== the engine's probe list (/sys/kernel/debug/kp/list):"
cat $KP/list
echo "=== the kernel's own kprobes list (must be empty):"
cat /sys/kernel/debug/kprobes/list
echo "=== rmmod"
rmmod kretprobe_example
rmmod kprobe_example
rmmod kprobes
echo "=== what the probe reported:"
dmesg | grep -E 'kprobe|kretprobe|do_sys_open' | sed 's/^\[[ 0-9.]*\] //'
dmesg | grep -q 'filename = "/proc/version"' || exit 1
dmesg | grep -q 'do_sys_open returned' || exit 1
