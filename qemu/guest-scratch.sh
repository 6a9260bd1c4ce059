. /guest-lib.sh
check engine-insmod insmod $M/kprobes.ko
check kunit-insmod insmod $M/kprobes_kunit.ko
check kunit-rmmod rmmod kprobes_kunit
run_examples
check module-churn-100 module_churn
check engine-rmmod rmmod kprobes
