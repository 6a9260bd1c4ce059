# Guest job for `make bench`: both engines on the breakpoint path (the
# kernel's jump optimization off), then the benchmark module, which prints
# KP-BENCH lines.
. /guest-lib.sh
echo 0 >/proc/sys/debug/kprobes-optimization
check bench-engine-insmod insmod $M/kprobes.ko
# KP_CMDLINE=kp_bench_rows=kprobe-entry,kretprobe make bench: only those rows.
rows=all
for w in $(cat /proc/cmdline); do
	case $w in kp_bench_rows=*) rows=${w#kp_bench_rows=} ;; esac
done
check bench-run insmod $M/kp_bench.ko rows=$rows
rmmod kp_bench
rmmod kprobes
