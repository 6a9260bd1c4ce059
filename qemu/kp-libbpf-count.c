// SPDX-License-Identifier: GPL-2.0
/*
 * kp-libbpf-count: a libbpf program, as users write them, attached to a
 * kernel function the way libbpf attaches a kprobe: on a kernel without a
 * kprobe PMU (no /sys/bus/event_source/devices/kprobe: CONFIG_KPROBES=n)
 * libbpf takes its legacy route by itself, writing a
 * `p:kprobes/libbpf_...` line to <tracefs>/kprobe_events (the engine's
 * there), opening the event's id with perf and attaching the program
 * (PERF_EVENT_IOC_SET_BPF); at detach it writes the `-:` line.
 *
 *     kp-libbpf-count <program.bpf.o> <function> <n>
 *     -> the kprobe_events lines libbpf defined while attached, then
 *        "count <calls of <function> the program saw from this process>"
 *
 * Between attaching and reading the count the process opens /proc/version
 * n times (the function should be one every open calls). Linked against
 * Debian's libbpf (scripts/tools-sysroot.sh), run in the hardened guests.
 */
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return level == LIBBPF_DEBUG ? 0 : vfprintf(stderr, fmt, ap);
}

/* The lines of kprobe_events libbpf wrote. */
static void show_events(void)
{
	char line[512];
	FILE *f = fopen("/sys/kernel/tracing/kprobe_events", "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "libbpf_"))
			printf("event %s", line);
	fclose(f);
}

int main(int argc, char **argv)
{
	struct bpf_object *obj;
	struct bpf_program *prog;
	struct bpf_link *link;
	struct bpf_map *counts;
	unsigned long long tgid = getpid(), calls = 0;
	unsigned int k0 = 0, k1 = 1;
	long i, n;
	int fd;

	if (argc != 4) {
		fprintf(stderr, "usage: %s program.bpf.o function n\n", argv[0]);
		return 2;
	}
	n = strtol(argv[3], NULL, 0);
	libbpf_set_print(libbpf_print);
	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "open or load of %s failed\n", argv[1]);
		return 1;
	}
	counts = bpf_object__find_map_by_name(obj, "counts");
	if (!counts || bpf_map__update_elem(counts, &k0, sizeof(k0), &tgid, sizeof(tgid), 0)) {
		fprintf(stderr, "cannot set the tgid\n");
		return 1;
	}
	prog = bpf_object__find_program_by_name(obj, "count_calls");
	link = prog ? bpf_program__attach_kprobe(prog, false, argv[2]) : NULL;
	if (!link) {
		fprintf(stderr, "attach to %s failed\n", argv[2]);
		return 1;
	}
	show_events();
	for (i = 0; i < n; i++) {
		fd = open("/proc/version", O_RDONLY);
		if (fd >= 0)
			close(fd);
	}
	if (bpf_map__lookup_elem(counts, &k1, sizeof(k1), &calls, sizeof(calls), 0)) {
		fprintf(stderr, "cannot read the count\n");
		return 1;
	}
	bpf_link__destroy(link);
	bpf_object__close(obj);
	printf("count %llu\n", calls);
	return 0;
}
