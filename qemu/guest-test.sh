# Guest job for `make test`: load the engine, run the KUnit module (its suites
# run at load and print KTAP), then check the examples and the kernel's kprobes.
. /guest-lib.sh
# Debug kernel: forget what kmemleak suspects from boot; checked at the end.
KMEMLEAK=/sys/kernel/debug/kmemleak
[ -e $KMEMLEAK ] && echo clear >$KMEMLEAK
# Hardened kernels report a task blocked too long (a hang then says where):
# the insmod that runs the KUnit suites waits uninterruptibly for each
# case, up to about four minutes (kp_mass on arm64-hardened), and KUnit
# times a case out at five; eight minutes is a hang.
[ -w /proc/sys/kernel/hung_task_timeout_secs ] && echo 480 >/proc/sys/kernel/hung_task_timeout_secs
check engine-insmod insmod $M/kprobes.ko
# notify_die() is refused: NOKPROBE_SYMBOL where the kernel has kprobes;
# where it has not, the engine's own trap path (derived on x86_64, named
# on arm64: the die chain its oops recovery runs in).
if [ -n "$KERNEL_KPROBES" ]; then
	check debugfs-blacklist grep -q 'notify_die+0x0.*NOKPROBE_SYMBOL' $KP/blacklist
else
	check debugfs-blacklist grep -q 'notify_die+0x0' $KP/blacklist
fi
# For kp_random: replay a seed given on the kernel command line
# (KP_CMDLINE="kp_random_seed=0x..." make test).
for w in $(cat /proc/cmdline); do
	case $w in kp_random_seed=*) echo "${w#kp_random_seed=}" >/tmp/kp_random_seed ;; esac
done
# Where the kernel's text landed (KASLR), to name the raw addresses that
# kp_random and kp_mass print, and a hung guest's pc, after the fact:
# subtract this _stext's System.map value.
echo "KP-GUEST: $(grep -w _stext /proc/kallsyms)"
# For kp_smoke: the kernel's own kprobes blacklist, readable by kernel_read()
# (on a kernel without kprobes the file is the engine's now: none).
if [ -n "$KERNEL_KPROBES" ]; then
	cat /sys/kernel/debug/kprobes/blacklist >/tmp/kernel-kprobes-blacklist
fi
# For kp_alloc_fail: the kernel's fault injection counts GFP_KERNEL slab
# objects and single pages (it ignores both by default), silently; it stays
# inert unless a task sets its fail_nth (probability 0).
for f in failslab fail_page_alloc; do
	echo N >/sys/kernel/debug/$f/ignore-gfp-wait
	echo 0 >/sys/kernel/debug/$f/verbose
done
echo 0 >/sys/kernel/debug/fail_page_alloc/min-order
# KP_CMDLINE=kp_guest_fn=NAME (while developing): only the guest-lib.sh
# function NAME, with the engine loaded, then the unload checks.
fn=
for w in $(cat /proc/cmdline); do
	case $w in kp_guest_fn=*) fn=${w#kp_guest_fn=} ;; esac
done
if [ -n "$fn" ]; then
	$fn
	check engine-rmmod rmmod kprobes
	exit 0
fi
check kunit-insmod insmod $M/kprobes_kunit.ko
check kunit-rmmod rmmod kprobes_kunit
# KP_CMDLINE=kp_kunit_only (with kunit.filter_glob=..., while developing):
# the KUnit suites only, then the engine's unload checks.
if ! grep -qw kp_kunit_only /proc/cmdline; then
	# `hits` counts the example's reports in a fresh log (no wrap-around).
	dmesg -c >/dev/null
	check example-insmod insmod $M/kprobe_example.ko testfile=/proc/version
	activity
	check example-hits sh -c "dmesg | grep -q 'filename = \"/proc/version\"'"
	if [ -n "$KERNEL_KPROBES" ]; then
		check kernel-kprobes-unused kernel_kprobes_unused
	else
		echo "KP-CHECK: skip kernel-kprobes-unused (the kernel has no kprobes)"
	fi
	check debugfs-list grep -qE 'do_sys_open\+0x[0-9a-f]+  (\[FTRACE\]  )?missed=0' $KP/list
	# A function entry is served by ftrace at its site. x86_64: the entry,
	# or +0x4 past the ENDBR on IBT kernels; arm64: the patchable entry's
	# second instruction, +0x4 (+0x8 past a BTI landing pad).
	case $ARCH in
	x86_64) check debugfs-list-ftrace grep -qE 'do_sys_open\+0x[04]  \[FTRACE\]' $KP/list ;;
	*) check debugfs-list-ftrace grep -qE 'do_sys_open\+0x[48]  \[FTRACE\]' $KP/list ;;
	esac
	check debugfs-enabled-reads-1 grep -qx 1 $KP/enabled
	echo 0 >$KP/enabled
	before=$(hits)
	activity
	check debugfs-disabled-no-hits [ "$(hits)" = "$before" ]
	echo 1 >$KP/enabled
	activity
	check debugfs-reenabled-hits [ "$(hits)" -gt "$before" ]
	check debugfs-enabled-rejects-junk sh -c "! echo 7 >$KP/enabled"
	# The example's one probe at one address; with its post handler, each
	# hit of a stepped copy is a second trap (arm64 steps, x86_64 ends the
	# copy in a call when the instruction is boostable).
	check debugfs-stats-probes grep -qx 'probes 1' $KP/stats
	check debugfs-stats-points grep -qx 'points 1' $KP/stats
	check example-rmmod rmmod kprobe_example
	check debugfs-stats-empty sh -c "grep -qx 'probes 0' $KP/stats && grep -qx 'points 0' $KP/stats && grep -qx 'kretprobe_instances 0' $KP/stats"
	# The ftrace switch: off, a new entry probe takes a breakpoint.
	echo 0 >$KP/ftrace
	dmesg -c >/dev/null
	before=$(hits)
	insmod $M/kprobe_example.ko testfile=/proc/version
	activity
	check ftrace-off-breakpoint sh -c "grep -E 'do_sys_open\+0x[0-9a-f]+  ' $KP/list | grep -vq FTRACE"
	check ftrace-off-hits [ "$(hits)" -gt "$before" ]
	rmmod kprobe_example
	echo 1 >$KP/ftrace
	run_examples
	run_compat_samples
	# The client module of README.md, built out of tree by build-client.sh.
	check readme-client-insmod insmod $M/my_probe.ko
	activity
	sleep 0
	check readme-client-rmmod rmmod my_probe
	ex_log
	check readme-client-opens has 'my_probe: open #0: /'
	check readme-client-kretprobe has 'my_probe: kernel_clone\(args 0x[0-9a-f]+\) returned [1-9][0-9]*$'
	check readme-client-unload has 'my_probe: [1-9][0-9]* opens seen'
	run_events
	run_events_tracefs
	run_events_standard
	run_events_dynamic
	run_kernel_kprobes_files
	run_ftracetest
	run_tools
	run_events_bpf
	run_events_listing_vs_kernel
	run_events_agreement
	run_events_btf_vs_kernel
	run_events_schedule
	run_events_errno_vs_kernel
	run_events_types_vs_kernel
	run_events_long_string_vs_kernel
	run_events_retprobe_args_vs_kernel
	run_events_stress
	run_events_write_chunks
	run_events_corpus
	run_events_module_later
	check module-churn-100 module_churn
	run_access
	check kretprobe-under-function-graph fgraph_kret
	[ "$ARCH" = aarch64 ] && check brk-hook-shared-with-function-tracer brk_shared
	run_oops
fi
# An event defined through dynamic_events when the engine goes.
if [ -z "$KERNEL_KE" ] && [ -e $T/dynamic_events ]; then
	echo 'p:kp_left/o do_sys_open' >>$T/dynamic_events
fi
check engine-rmmod rmmod kprobes
# Where the engine served the standard files: gone, and README the
# kernel's again.
if [ -z "$KERNEL_KE" ]; then
	check std-gone-after-unload sh -c "[ ! -e $T/kprobe_events ] && [ ! -e $T/kprobe_profile ] && ! grep -q 'place (kretprobe)' $T/README"
	check std-kprobes-files-gone-after-unload sh -c "[ ! -e /sys/kernel/debug/kprobes ] && [ ! -e /proc/sys/debug/kprobes-optimization ]"
	# Its events left dynamic_events with it, which refuses their lines
	# again as before it loaded (no operations of a module that went).
	if [ -e $T/dynamic_events ]; then
		check dyn-gone-after-unload sh -c "! grep -q kp_left $T/dynamic_events && ! echo 'p:kp_left/o do_sys_open' >>$T/dynamic_events 2>/dev/null && ! grep -q kp_left $T/dynamic_events"
	fi
fi
# Loaded again (its slab cache, debugfs files and hooks were all taken
# down), one probe, unloaded again.
check engine-reload sh -c "insmod $M/kprobes.ko && echo 'p:kp_reload/o do_sys_open' >>$E && cat /proc/version >/dev/null && echo '-:kp_reload/o' >>$E && rmmod kprobes"
# Debug kernel: nothing the engine, the tests or the examples allocated may
# be left unreferenced (two scans: kmemleak reports objects seen twice).
if [ -e $KMEMLEAK ]; then
	echo scan >$KMEMLEAK
	sleep 1
	echo scan >$KMEMLEAK
	# (A debugfs file's size is 0: read it.)
	cat $KMEMLEAK >/tmp/kmemleak
	if [ -s /tmp/kmemleak ]; then
		echo "--- kmemleak:"
		head -n 60 /tmp/kmemleak
	fi
	check kmemleak-clean [ ! -s /tmp/kmemleak ]
fi
