// SPDX-License-Identifier: GPL-2.0
/*
 * The BPF side of qemu/kp-libbpf-count.c: a kprobe program, as libbpf users
 * write them (SEC("kprobe"), a BTF-defined map), that counts the calls made by
 * one process (its tgid set by the loader).
 * Built by scripts/qemu-run.sh with clang -target bpf against Debian's
 * libbpf-dev headers.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/*
 * [0]: the tgid to count (set by the loader), [1]: its calls. (A map, not
 * global data: libbpf probes global data support with a socket filter
 * program, which a kernel without networking, as the test kernels, lacks.)
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

SEC("kprobe")
int count_calls(void *ctx)
{
	__u32 k0 = 0, k1 = 1;
	__u64 *tgid = bpf_map_lookup_elem(&counts, &k0);
	__u64 *calls = bpf_map_lookup_elem(&counts, &k1);

	if (tgid && calls && bpf_get_current_pid_tgid() >> 32 == *tgid)
		__sync_fetch_and_add(calls, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
