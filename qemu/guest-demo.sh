# Guest job for `make demo`: load the engine, then each example module in
# turn; user space triggers it (opens a file, forks); show what it caught;
# then probe events defined by text (kprobe_events).
. /guest-lib.sh
# Kernel messages go to the log buffer only; the job shows them per example.
dmesg -n 1
echo "=== insmod kprobes.ko"
insmod $M/kprobes.ko || exit 1
echo "=== the examples, one at a time (KP-CHECK lines compare with user space)"
run_examples
echo "=== kprobe_events: the tutorial sequence, output in the kernel's trace buffer"
run_events
echo "=== kprobe_example and kretprobe_example together on do_sys_open"
insmod $M/kprobe_example.ko testfile=/proc/version
insmod $M/kretprobe_example.ko
activity
echo "--- the engine's probe list (/sys/kernel/debug/kp/list):"
cat $KP/list
echo "--- what the engine holds (/sys/kernel/debug/kp/stats):"
cat $KP/stats
echo "--- armed globally (/sys/kernel/debug/kp/enabled):"
cat $KP/enabled
echo "--- the first refused ranges (/sys/kernel/debug/kp/blacklist, $(wc -l <$KP/blacklist) lines):"
head -n 5 $KP/blacklist
echo "--- the kernel's own kprobes list (must be empty):"
cat /sys/kernel/debug/kprobes/list
check demo-kernel-kprobes-unused kernel_kprobes_unused
rmmod kretprobe_example
rmmod kprobe_example
echo "=== rmmod kprobes"
rmmod kprobes
echo "=== $KP_FAILS failed checks"
[ "$KP_FAILS" = 0 ]
