# kprobes-rs: a kernel probe engine in Rust. See README.md.
#
#   make setup               install packages, build both test kernels (cached)
#   make [modules] ARCH=...  build kprobes.ko, tests and examples (x86_64|arm64)
#   make demo [ARCH=...]     boot QEMU, load the engine and the example, show hits
#   make test                host tests + KUnit in QEMU on x86_64 and arm64
#   make test-debug          the same on an x86_64 kernel with lockdep, KASAN, ...
#   make test-hardened       the same on the production-like kernels (kCFI, IBT, ORC, PAC, BTI, SCS, ...)
#   make bench [ARCH=...]    the engine vs the kernel's kprobes, same boot
#   make fuzz                libFuzzer on the pure logic (KP_FUZZ_SECONDS each, 3600)
#   make check               rustfmt and clippy (CLIPPY=1) over the tree

ARCH ?= x86_64
SHELL := /bin/bash

.PHONY: all modules setup demo test test-debug test-hardened bench check fmt clean fuzz

all: modules

setup:
	scripts/setup.sh

modules:
	scripts/build-modules.sh $(ARCH)

demo:
	scripts/demo.sh $(ARCH)

test:
	scripts/test.sh

# The x86_64 kernel with lockdep, KASAN, SLUB debugging, kmemleak and friends
# (qemu/x86_64-debug.config); the whole guest test set runs on it.
test-debug:
	KP_TEST_ARCHES=x86_64-debug scripts/test.sh

# The production-like kernels (qemu/x86_64-hardened.config: kCFI, IBT, ORC,
# retpolines, return thunks, KASLR, BPF; qemu/arm64-hardened.config: kCFI,
# PAC, BTI, shadow call stack, KASLR, BPF, lockdep; built with clang 19).
test-hardened:
	KP_TEST_ARCHES="x86_64-hardened arm64-hardened" scripts/test.sh

bench:
	scripts/bench.sh $(ARCH)

# Coverage-guided fuzzing of the event grammar, the symbol parsers and both
# decoders (scripts/fuzz.sh); KP_FUZZ_MERGE=1 merges new inputs into fuzz/corpus.
fuzz:
	scripts/fuzz.sh $${KP_FUZZ_SECONDS:-3600}

fmt:
	scripts/fmt.sh

check:
	scripts/fmt.sh --check
	for a in x86_64 arm64; do \
		CLIPPY=1 scripts/build-modules.sh $$a 2>&1 | tee out/clippy-$$a.log; \
		! grep -E '^(warning|error)' out/clippy-$$a.log || exit 1; \
	done
	cargo clippy --release --all-targets -- -D warnings

clean:
	rm -rf out target
