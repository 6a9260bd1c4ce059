# Guest job for `make test`: load the engine, run the KUnit module (its suites
# run at load and print KTAP), then check the example and the kernel's kprobes.
. /guest-lib.sh
check engine-insmod insmod $M/kprobes.ko
check kunit-insmod insmod $M/kprobes_kunit.ko
check kunit-rmmod rmmod kprobes_kunit
if [ "$ARCH" = x86_64 ]; then
	check example-insmod insmod $M/kprobe_example.ko
	activity
	check example-hits sh -c "dmesg | grep -q 'filename = \"/proc/version\"'"
	check kernel-kprobes-unused kernel_kprobes_unused
	check example-rmmod rmmod kprobe_example
fi
check engine-rmmod rmmod kprobes
