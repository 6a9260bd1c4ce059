# Guest job for `make bench`: both engines on the breakpoint path (the
# kernel's jump optimization off), then the benchmark module, which prints
# KP-BENCH lines.
. /guest-lib.sh
echo 0 >/proc/sys/debug/kprobes-optimization
check bench-engine-insmod insmod $M/kprobes.ko
check bench-run insmod $M/kp_bench.ko
rmmod kp_bench
rmmod kprobes
