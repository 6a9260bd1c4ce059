# Guest job for `make bench`: both engines on the breakpoint path (both
# jump optimizations off), then the benchmark module, which prints KP-BENCH
# lines; then on x86_64 both optimizations on for row 3 (kprobe-mid-opt).
. /guest-lib.sh
echo 0 >/proc/sys/debug/kprobes-optimization
check bench-engine-insmod insmod $M/kprobes.ko
echo 0 >/sys/kernel/debug/kp/optimize
# KP_CMDLINE=kp_bench_rows=kprobe-entry,kretprobe make bench: only those rows.
rows=all
for w in $(cat /proc/cmdline); do
	case $w in kp_bench_rows=*) rows=${w#kp_bench_rows=} ;; esac
done
check bench-run insmod $M/kp_bench.ko rows=$rows
rmmod kp_bench
case ,$rows, in
*,all,* | *,kprobe-mid-opt,*)
	if [ "$(uname -m)" = x86_64 ]; then
		echo 1 >/proc/sys/debug/kprobes-optimization
		echo 1 >/sys/kernel/debug/kp/optimize
		check bench-run-opt insmod $M/kp_bench.ko rows=kprobe-mid-opt opt=1
		rmmod kp_bench
	fi
	;;
esac
rmmod kprobes
