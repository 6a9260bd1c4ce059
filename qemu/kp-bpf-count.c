// SPDX-License-Identifier: GPL-2.0
/*
 * kp-bpf-count: attaches a BPF program to a trace event the way libbpf's and
 * bcc's legacy kprobe route does (perf_event_open(PERF_TYPE_TRACEPOINT, the
 * event's id) + PERF_EVENT_IOC_SET_BPF), makes N getppid() calls, and
 * prints what the program counted:
 *
 *     kp-bpf-count <event id> <n> <function address, hex>
 *     -> "count <calls seen from this process> ip <function>+0x<offset>"
 *
 * (the offset of the last regs->ip/pc the program saw from the function's
 * address; "ip 0x<address>" when it lies before the function)
 *
 * The program counts hits from this process only (its tgid is patched into
 * the program) and keeps the last instruction pointer its context held, so
 * the guest job checks that exactly n calls ran it and that the registers
 * it was given are the probe's. For the guest of `make test` (static,
 * freestanding: the initramfs has busybox and no libc; built by
 * scripts/qemu-run.sh with clang for either architecture).
 */
typedef unsigned long u64;
typedef unsigned int u32;
typedef long s64;

#if defined(__x86_64__)
#define NR_WRITE 1
#define NR_IOCTL 16
#define NR_GETPID 39
#define NR_GETPPID 110
#define NR_EXIT_GROUP 231
#define NR_PERF_EVENT_OPEN 298
#define NR_BPF 321
/* offsetof(struct pt_regs, ip) */
#define REGS_IP_OFF 128

static s64 sys6(s64 n, s64 a, s64 b, s64 c, s64 d, s64 e)
{
	register s64 r10 __asm__("r10") = d;
	register s64 r8 __asm__("r8") = e;
	s64 ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
			 : "rcx", "r11", "memory");
	return ret;
}

__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall cmain\n\tud2\n");
#elif defined(__aarch64__)
#define NR_WRITE 64
#define NR_IOCTL 29
#define NR_GETPID 172
#define NR_GETPPID 173
#define NR_EXIT_GROUP 94
#define NR_PERF_EVENT_OPEN 241
#define NR_BPF 280
/* offsetof(struct pt_regs, pc): regs[31], sp, pc */
#define REGS_IP_OFF 256

static s64 sys6(s64 n, s64 a, s64 b, s64 c, s64 d, s64 e)
{
	register s64 x8 __asm__("x8") = n;
	register s64 x0 __asm__("x0") = a;
	register s64 x1 __asm__("x1") = b;
	register s64 x2 __asm__("x2") = c;
	register s64 x3 __asm__("x3") = d;
	register s64 x4 __asm__("x4") = e;

	__asm__ volatile("svc #0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4)
			 : "memory");
	return x0;
}

__asm__(".globl _start\n_start:\n\tmov x0, sp\n\tbl cmain\n\tbrk #0\n");
#else
#error "x86_64 or arm64"
#endif

#define sys(n, a, b, c) sys6(n, (s64)(a), (s64)(b), (s64)(c), 0, 0)

static void out(const char *s)
{
	u64 n = 0;

	while (s[n])
		n++;
	sys(NR_WRITE, 1, s, n);
}

static void out_num(u64 v, int base)
{
	char b[24];
	int i = sizeof(b) - 1;

	b[i] = 0;
	do {
		b[--i] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	out(b + i);
}

static __attribute__((noreturn)) void die(const char *what, s64 err)
{
	out("kp-bpf-count: ");
	out(what);
	out(" failed: ");
	out_num(-err, 10);
	out("\n");
	sys(NR_EXIT_GROUP, 1, 0, 0);
	__builtin_unreachable();
}

static u64 hex(const char *s)
{
	u64 v = 0;

	if (s[0] == '0' && s[1] == 'x')
		s += 2;
	for (;; s++) {
		if (*s >= '0' && *s <= '9')
			v = v * 16 + (*s - '0');
		else if (*s >= 'a' && *s <= 'f')
			v = v * 16 + (*s - 'a' + 10);
		else
			return v;
	}
}

static u64 num(const char *s)
{
	u64 v = 0;

	while (*s >= '0' && *s <= '9')
		v = v * 10 + (*s++ - '0');
	return v;
}

/* One BPF instruction. */
struct insn {
	unsigned char code;
	unsigned char regs; /* dst (low nibble), src (high nibble) */
	short off;
	int imm;
};

#define I(c, d, s, o, i) { (c), (unsigned char)((d) | ((s) << 4)), (o), (i) }

/* Opcodes (include/uapi/linux/bpf.h, bpf_common.h). */
#define ALU64_MOV_K 0xb7
#define ALU64_MOV_X 0xbf
#define ALU64_ADD_K 0x07
#define ALU64_RSH_K 0x77
#define JMP_JNE_K 0x55
#define JMP_JEQ_K 0x15
#define JMP_CALL 0x85
#define JMP_EXIT 0x95
#define ST_MEM_W 0x62
#define STX_MEM_DW 0x7b
#define LDX_MEM_DW 0x79
#define STX_ATOMIC_DW 0xdb
#define LD_IMM64 0x18
#define PSEUDO_MAP_FD 1
#define FN_MAP_LOOKUP_ELEM 1
#define FN_GET_CURRENT_PID_TGID 14

/* The bpf() attribute union, as 8-byte words (zero past what is set). */
static u64 attr[16];

static void attr_clear(void)
{
	for (int i = 0; i < 16; i++)
		attr[i] = 0;
}

static s64 bpf(int cmd)
{
	return sys(NR_BPF, cmd, attr, sizeof(attr));
}

static s64 lookup(int map, u32 key, u64 *value)
{
	attr_clear();
	attr[0] = (u32)map;
	attr[1] = (u64)&key;
	attr[2] = (u64)value;
	return bpf(1 /* BPF_MAP_LOOKUP_ELEM */);
}

__attribute__((used)) void cmain(u64 *sp)
{
	u64 argc = sp[0];
	char **argv = (char **)(sp + 1);
	static char license[] = "GPL";
	static char log[4096];
	u32 attr_perf[32];
	s64 map, prog, ev, r;
	u64 id, n, func, count = 0, ip = 0;

	if (argc != 4) {
		out("usage: kp-bpf-count <event id> <n> <function address, hex>\n");
		sys(NR_EXIT_GROUP, 2, 0, 0);
	}
	id = num(argv[1]);
	n = num(argv[2]);
	func = hex(argv[3]);

	/* An array map: [0] = hits from this process, [1] = the last ip. */
	attr_clear();
	attr[0] = 2 /* BPF_MAP_TYPE_ARRAY */ | (u64)4 << 32; /* key_size */
	attr[1] = 8 /* value_size */ | (u64)2 << 32;	    /* max_entries */
	map = bpf(0 /* BPF_MAP_CREATE */);
	if (map < 0)
		die("BPF_MAP_CREATE", map);

	int tgid = (int)sys(NR_GETPID, 0, 0, 0);
	struct insn prog_insns[] = {
		I(ALU64_MOV_X, 6, 1, 0, 0), /* r6 = ctx (struct pt_regs *) */
		I(JMP_CALL, 0, 0, 0, FN_GET_CURRENT_PID_TGID),
		I(ALU64_RSH_K, 0, 0, 0, 32),
		I(JMP_JNE_K, 0, 0, 18, tgid), /* another process: out */
		/* count: map[0] += 1 */
		I(ST_MEM_W, 10, 0, -4, 0),
		I(ALU64_MOV_X, 2, 10, 0, 0),
		I(ALU64_ADD_K, 2, 0, 0, -4),
		I(LD_IMM64, 1, PSEUDO_MAP_FD, 0, (int)map),
		I(0, 0, 0, 0, 0),
		I(JMP_CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM),
		I(JMP_JEQ_K, 0, 0, 2, 0),
		I(ALU64_MOV_K, 1, 0, 0, 1),
		I(STX_ATOMIC_DW, 0, 1, 0, 0 /* BPF_ADD */),
		/* map[1] = ctx->ip */
		I(ST_MEM_W, 10, 0, -4, 1),
		I(ALU64_MOV_X, 2, 10, 0, 0),
		I(ALU64_ADD_K, 2, 0, 0, -4),
		I(LD_IMM64, 1, PSEUDO_MAP_FD, 0, (int)map),
		I(0, 0, 0, 0, 0),
		I(JMP_CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM),
		I(JMP_JEQ_K, 0, 0, 2, 0),
		I(LDX_MEM_DW, 1, 6, REGS_IP_OFF, 0),
		I(STX_MEM_DW, 0, 1, 0, 0),
		/* out: return 0 (no perf record) */
		I(ALU64_MOV_K, 0, 0, 0, 0),
		I(JMP_EXIT, 0, 0, 0, 0),
	};

	attr_clear();
	attr[0] = 2 /* BPF_PROG_TYPE_KPROBE */ |
		  (u64)(sizeof(prog_insns) / sizeof(prog_insns[0])) << 32;
	attr[1] = (u64)prog_insns;
	attr[2] = (u64)license;
	attr[3] = 1 /* log_level */ | (u64)sizeof(log) << 32;
	attr[4] = (u64)log;
	prog = bpf(5 /* BPF_PROG_LOAD */);
	if (prog < 0) {
		out(log);
		die("BPF_PROG_LOAD", prog);
	}

	/* struct perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes) */
	for (int i = 0; i < 32; i++)
		attr_perf[i] = 0;
	attr_perf[0] = 2;  /* type: PERF_TYPE_TRACEPOINT */
	attr_perf[1] = 64; /* size */
	attr_perf[2] = (u32)id; /* config */
	attr_perf[3] = (u32)(id >> 32);
	attr_perf[4] = 1; /* sample_period */
	attr_perf[6] = 1 << 10; /* sample_type: PERF_SAMPLE_RAW */
	attr_perf[12] = 1; /* wakeup_events */
	ev = sys6(NR_PERF_EVENT_OPEN, (s64)attr_perf, -1, 0, -1, 8 /* CLOEXEC */);
	if (ev < 0)
		die("perf_event_open", ev);
	r = sys(NR_IOCTL, ev, 0x40042408 /* PERF_EVENT_IOC_SET_BPF */, prog);
	if (r < 0)
		die("PERF_EVENT_IOC_SET_BPF", r);
	r = sys(NR_IOCTL, ev, 0x2400 /* PERF_EVENT_IOC_ENABLE */, 0);
	if (r < 0)
		die("PERF_EVENT_IOC_ENABLE", r);

	for (u64 i = 0; i < n; i++)
		sys(NR_GETPPID, 0, 0, 0);

	r = lookup(map, 0, &count);
	if (r < 0)
		die("BPF_MAP_LOOKUP_ELEM", r);
	r = lookup(map, 1, &ip);
	if (r < 0)
		die("BPF_MAP_LOOKUP_ELEM", r);
	out("count ");
	out_num(count, 10);
	if (ip >= func) {
		out(" ip <function>+0x");
		out_num(ip - func, 16);
	} else {
		out(" ip 0x");
		out_num(ip, 16);
	}
	out("\n");
	sys(NR_EXIT_GROUP, 0, 0, 0);
}
