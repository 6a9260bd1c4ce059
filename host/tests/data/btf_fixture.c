// SPDX-License-Identifier: GPL-2.0
/*
 * The types behind host/tests/data/btf_fixture.btf, the BTF the host tests
 * of BTF argument names read (host/tests/events.rs). Regenerate with:
 *
 *   clang -g -O0 -c btf_fixture.c -o /tmp/btf_fixture.o &&
 *   pahole -J --btf_encode_detached=btf_fixture.btf /tmp/btf_fixture.o
 *
 * (clang 14 and pahole 1.24, Debian 12's.)
 */
struct inner {
	int a;
	unsigned int b : 3, c : 5;
	int neg : 4;
	unsigned char name[8];
};

struct outer {
	long x;
	struct inner in;
	struct inner *ip;
	union {
		int u1;
		struct {
			short s1;
			short s2;
		};
	};
	const unsigned char *ustr;
	const char *str;
};

enum kind { KIND_A, KIND_B };

typedef unsigned long size_type;

int f_all(struct outer *o, size_type n, const unsigned char *s, enum kind k, _Bool flag)
{
	return o->x + n + s[0] + k + flag;
}

void f_void(int x)
{
	(void)x;
}

struct inner *f_ptr(void)
{
	return 0;
}

int f_long_names(int a_parameter_with_a_very_long_name_number_one,
		 int a_parameter_with_a_very_long_name_number_two,
		 int a_parameter_with_a_very_long_name_number_three)
{
	return a_parameter_with_a_very_long_name_number_one +
	       a_parameter_with_a_very_long_name_number_two +
	       a_parameter_with_a_very_long_name_number_three;
}

int f_var(int n, ...)
{
	return n;
}
