# Guest job for `make bench`: both engines on the breakpoint path (both
# jump optimizations off), then the benchmark module, which prints KP-BENCH
# lines; then both optimizations on for row 3 (kprobe-mid-opt).
. /guest-lib.sh
echo 0 >/proc/sys/debug/kprobes-optimization
check bench-engine-insmod insmod $M/kprobes.ko
echo 0 >/sys/kernel/debug/kp/optimize
# KP_CMDLINE=kp_bench_rows=kprobe-entry,kretprobe make bench: only those rows.
# kp_bench_syms=1 (scripts/bench-profile.sh): the modules' symbols and the
# kernel's _stext on the console, to name the profile's guest addresses.
# kp_bench_reps=N: N interleaved runs per row (5 by default, at most 31).
rows=all syms= reps=5
for w in $(cat /proc/cmdline); do
	case $w in
	kp_bench_rows=*) rows=${w#kp_bench_rows=} ;;
	kp_bench_reps=*) reps=${w#kp_bench_reps=} ;;
	kp_bench_syms=1) syms=1 ;;
	esac
done
# The symbols of the modules loaded now (the benchmark's too, while it is).
bench_syms() {
	[ -n "$syms" ] || return 0
	grep -w _stext /proc/kallsyms | sed 's/^/KP-BENCH-SYM /'
	grep -E '\[(kprobes|kp_bench)\]' /proc/kallsyms | sed 's/^/KP-BENCH-SYM /'
}
check bench-run insmod $M/kp_bench.ko rows=$rows reps=$reps
bench_syms
rmmod kp_bench

# Row 8, memory: the bytes each engine allocates (and keeps) while the
# benchmark module registers, on this shell's request (its `mem`
# parameter): slab objects and per-CPU areas allocated and not freed,
# seen through the kernel's allocation trace events for that shell only
# (bytes_alloc; per-CPU: all CPUs), plus pages of vmalloc areas
# (/proc/vmallocinfo before and after). The vmap_area records of the
# address-space allocator are left out on both sides: those of temporary
# mappings (the engine writes text through a vmap() alias) are freed
# lazily, long after their unmapping.
T=/sys/kernel/tracing
mem_events="kmem/kmalloc kmem/kfree kmem/kmem_cache_alloc kmem/kmem_cache_free
percpu/percpu_alloc_percpu percpu/percpu_free_percpu"
vmalloc_pages() {
	awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^pages=/) { sub(/pages=/, "", $i); n += $i } }
		END { print n + 0 }' /proc/vmallocinfo
}
# mem_bytes REQUEST: live bytes allocated while the module serves REQUEST,
# released again afterwards. (Called in $(...), a subshell: the request goes
# from a shell of its own that traces itself.)
mem_bytes() {
	v0=$(vmalloc_pages)
	for e in $mem_events; do echo 1 >$T/events/$e/enable; done
	sh -c 'echo $$ >'$T'/set_event_pid; echo >'$T'/trace
		echo "$0" >/sys/module/kp_bench/parameters/mem' "$1" ||
		echo "KP-BENCH-MEM: '$1' failed" >&2
	for e in $mem_events; do echo 0 >$T/events/$e/enable; done
	echo >$T/set_event_pid
	v1=$(vmalloc_pages)
	echo release >/sys/module/kp_bench/parameters/mem
	awk -v vm=$(((v1 - v0) * 4096)) '{
		ev = ""
		for (i = 4; i <= NF; i++) if ($i ~ /^[a-z_]+:$/) { ev = $i; break }
		delete kv
		for (j = i + 1; j <= NF; j++) if (split($j, a, "=") == 2) kv[a[1]] = a[2]
		if (kv["call_site"] ~ /^alloc_vmap_area\+/) next
		if (ev == "kmalloc:" || ev == "kmem_cache_alloc:") {
			live["s" kv["ptr"]] = kv["bytes_alloc"]; site["s" kv["ptr"]] = kv["call_site"]
		} else if (ev == "kfree:" || ev == "kmem_cache_free:") delete live["s" kv["ptr"]]
		else if (ev == "percpu_alloc_percpu:") {
			live["p" kv["ptr"]] = kv["bytes_alloc"]; site["p" kv["ptr"]] = kv["call_site"]
		} else if (ev == "percpu_free_percpu:") delete live["p" kv["ptr"]]
	} END {
		s = vm
		for (k in live) { s += live[k]; by[site[k]] += live[k]; n[site[k]]++ }
		print s
		# Where the kept bytes were allocated (console only).
		line = sprintf("KP-BENCH-MEM-SITES %s: vmalloc %d", req, vm)
		for (c in by) line = line sprintf("; %s %d x%d", c, by[c], n[c])
		print line | "cat >&2"
	}' req="$1" $T/trace
}
# mem_row NAME N REQ_OURS REQ_KERNEL [BASE_OURS BASE_KERNEL]: bytes per unit
# (minus the bases' bytes), plus $struct_ours / $struct_kernel, printed as
# a KP-BENCH line.
mem_row() {
	o=$(mem_bytes "$3") k=$(mem_bytes "$4") ob=0 kb=0
	if [ -n "$5" ]; then
		ob=$(mem_bytes "$5") kb=$(mem_bytes "$6")
	fi
	echo "KP-BENCH-MEM $1: ours $o - $ob, kernel's $k - $kb bytes for $2"
	o=$(((o - ob) / $2 + struct_ours)) k=$(((k - kb) / $2 + struct_kernel))
	echo "KP-BENCH $1 ours $o $o $o kernel $k $k $k"
	[ "$o" -gt 0 ] && [ "$k" -gt 0 ]
}
case ,$rows, in
*,all,* | *,memory,*)
	insmod $M/kp_bench.ko rows=none
	# The parameter's sysfs path gets its dentries and inodes now, not in
	# the first measurement (ours: they were 3 bytes per probe there).
	echo release >/sys/module/kp_bench/parameters/mem
	# Per probe, the client's struct counts too (the kernel keeps its
	# per-probe state there: struct kprobe vs struct kp_kprobe).
	set -- $(dmesg | sed -n 's/.*KP-BENCH-SIZES ours \([0-9]*\) kernel \([0-9]*\).*/\1 \2/p' | tail -n 1)
	struct_ours=${1:-0} struct_kernel=${2:-0}
	check bench-memory-probe mem_row memory-per-probe 1000 probes-ours probes-kernel
	struct_ours=0 struct_kernel=0
	check bench-memory-kretprobe-instance mem_row memory-per-kretprobe-instance 1000 \
		kret-ours:1001 kret-kernel:1001 kret-ours:1 kret-kernel:1
	rmmod kp_bench
	;;
esac
case ,$rows, in
*,all,* | *,kprobe-mid-opt,*)
	# (arm64: the kernel has no optprobes; its side is its BRK probe.)
	[ -e /proc/sys/debug/kprobes-optimization ] && echo 1 >/proc/sys/debug/kprobes-optimization
	echo 1 >/sys/kernel/debug/kp/optimize
	check bench-run-opt insmod $M/kp_bench.ko rows=kprobe-mid-opt opt=1 reps=$reps
	bench_syms
	rmmod kp_bench
	;;
esac
rmmod kprobes
