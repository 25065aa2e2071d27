# skiff top-level Makefile. Each part owns a fragment (PART/build.mk) that
# appends to the lists below; this file holds the shared flags and targets.
#   make            build everything buildable here (CUDA parts when nvcc exists)
#   make test       install missing packages, build, run every test (what CI runs)
#   make test-slurm the cluster suites only, against Slurm 22.05 (host) and 24.11 (Debian 13 tree)
#   make bench      run the benchmarks and print their tables
#   make fuzz       run every fuzzer for FUZZ_SECONDS (default 60) and print a table
#   make format     format the sources (.clang-format); make format-check lists what differs
#   make install PREFIX=/usr/local DESTDIR=   (and dist, deb, rpm: packaging.mk)
SHELL := /bin/bash
.DEFAULT_GOAL := all

PREFIX  ?= /usr/local
DESTDIR ?=
# Where `make install` puts things (packaging.mk). The compiled-in defaults
# follow them: bundled hooks and the plugin's helpers LIBEXECDIR, the
# trainer's data DATADIR.
LIBEXECDIR       ?= $(PREFIX)/libexec
DATADIR          ?= $(PREFIX)/share
SLURM_PLUGIN_DIR ?= $(PREFIX)/lib/skiff
BUILD   ?= build
CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
VERSION := $(shell cat VERSION 2>/dev/null || echo 0.0.0)

# WERROR= turns warnings back into warnings: only for a build on a machine
# whose newer compiler warns where ours does not (tests/gpu/device-run.sh).
WERROR ?= -Werror
comma := ,
WARN := -Wall -Wextra $(WERROR) -Wformat=2 -Wformat-security -Wshadow \
        -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith -Wcast-qual \
        -Wwrite-strings -Wundef -Wvla -Wnull-dereference -Wimplicit-fallthrough
HARDEN := -fstack-protector-strong -D_FORTIFY_SOURCE=2 -fstack-clash-protection \
          -fcf-protection -fno-strict-overflow
OPT ?= -O2 -g
CFLAGS ?=
BASE_CFLAGS := -std=gnu11 $(OPT) $(WARN) $(HARDEN) -D_GNU_SOURCE \
               -DSKIFF_VERSION='"$(VERSION)"' \
               -DSKIFF_HOOKS_DIR_DEFAULT='"$(LIBEXECDIR)/skiff/hooks"' \
               -DSKIFF_HELPER_DIR_DEFAULT='"$(LIBEXECDIR)/skiff"' $(SAN) $(CFLAGS)
# PART_CFLAGS: each fragment sets it on its own objects (a pattern-specific
# value), with the include paths that part may use: the layering of
# doc/ARCHITECTURE.md is what the compiler enforces. Nothing is global.
# Deferred (=), so the per-object value is what the compile sees.
PART_CFLAGS :=
PIE_CFLAGS   = $(BASE_CFLAGS) $(PART_CFLAGS) -fPIE
PIC_CFLAGS   = $(BASE_CFLAGS) $(PART_CFLAGS) -fPIC
LDHARDEN    := -Wl,-z,relro,-z,now -Wl,-z,noexecstack $(SAN)
EXE_LDFLAGS := -pie $(LDHARDEN)
SO_LDFLAGS  := -shared $(LDHARDEN)

# The recipe of every static library: made afresh, so that a source that
# moved or went away leaves no old member behind (`ar rcs` keeps them).
define archive =
@mkdir -p $(@D)
rm -f $@ && $(AR) rcs $@ $^
endef

# Lists filled by the fragments.
BINS :=          # executables installed to $(PREFIX)/bin
LIBEXEC :=       # executables installed to $(LIBEXECDIR)/skiff/hooks
PLUGINS :=       # spank_skiff.so (to SLURM_PLUGIN_DIR) and the programs it execs (to LIBEXECDIR/skiff)
UNIT_TESTS :=    # Criterion test executables
INTEGRATION_TESTS := # scripts under tests/integration, run as root
BENCHES :=       # benchmark scripts, each prints a table
FUZZERS :=       # libFuzzer targets
TEST_DATA :=     # inputs `make test` fetches before the tests (e.g. GPT-2's vocabulary)
TEST_PROGRAMS := # programs only the integration tests run (tests/build.mk)
SHARE_FILES :=   # data files installed to $(DATADIR)/skiff
MAN1 :=
MAN8 :=

# Each part's fragment; a missing one is an error, not a silently smaller build.
include common/build.mk
include runtime/build.mk
include hooks/build.mk
include plugin/build.mk
include trainer/cuda/build.mk
include trainer/build.mk
include tests/build.mk
include packaging.mk

all: $(BINS) $(LIBEXEC) $(PLUGINS)

# What the test cluster's nodes run: the plugin and the programs it execs,
# the hooks, skiff-ddp-env, skiff-train, and the attack tests' SPANK probe
# and FUSE server (tests/cluster/slurm-tree builds them in a Debian 13 tree).
node: $(PLUGINS) $(LIBEXEC) $(SKIFF_DDP_ENV) $(SKIFF_TRAIN) $(SPANK_FD0_PROBE) $(FUSE_STALL)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(PIE_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(PIC_CFLAGS) -MMD -MP -c $< -o $@

# A program the integration tests copy into a container image: static (the
# image has no libc), the warnings of everything else, no hardening flags
# that a static link would refuse.
define test_static_program =
@mkdir -p $(@D)
$(CC) -std=gnu11 -O2 $(WARN) -static -o $@ $<
endef

-include $(shell find $(BUILD) -path $(BUILD)/bench-cache -prune -o -name '*.d' -type f -print 2>/dev/null)

deps:
	scripts/install-deps all

# The main job: containerised DDP training under srun on a local cluster.
demo:
	scripts/demo

# Unit tests only (fast, no root needed).
unit-test: $(UNIT_TESTS)
	tests/run-all --unit $(UNIT_TESTS)

# Everything CI runs: packages, build, unit tests, integration tests, and the
# cluster suites again against Debian 13's Slurm 24.11 (tests/build.mk).
test: deps
	$(MAKE) all $(UNIT_TESTS) $(TEST_DATA) $(TEST_PROGRAMS)
	tests/run-all --unit $(UNIT_TESTS) --integration $(INTEGRATION_TESTS) --slurm-tree $(SLURM_TREE_TESTS)

# make test N times in a row (STRESS_RUNS, default 5) under two CPU burners
# and an I/O burner: the suite must be green on every run (tests/README.md).
stress: deps
	tests/stress-suite -n $(or $(STRESS_RUNS),5) $(MAKE) test

# Only the cluster suites, against this host's Slurm and Debian 13's.
test-slurm: deps
	$(MAKE) all $(TEST_DATA) $(TEST_PROGRAMS)
	tests/run-all --integration $(SLURM_TREE_TESTS) --slurm-tree $(SLURM_TREE_TESTS)

bench: deps all
	$(if $(TEST_DATA),$(MAKE) $(TEST_DATA))
	tests/run-all --bench $(BENCHES)

fuzz: deps
	$(MAKE) fuzzers
	tests/fuzz/run --seconds $(FUZZ_SECONDS) $(FUZZERS)

asan:
	$(MAKE) BUILD=build-asan OPT='-O1 -g' SAN='-fsanitize=address,undefined -fno-omit-frame-pointer' unit-test

# The C, C++ and CUDA sources git knows of (tracked or new, not ignored),
# formatted by .clang-format (trainer/ and tests/gpu/ refine it).
FORMAT_FILES = $(shell git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cu' '*.cuh' '*.cpp' | \
                 while read -r f; do [ -f "$$f" ] && echo "$$f"; done)
format:
	clang-format -i $(FORMAT_FILES)

# Lists the files `make format` would change; fails when there are any.
format-check:
	@command -v clang-format >/dev/null || { echo "format-check: clang-format not found (scripts/install-deps)" >&2; exit 2; }
	@bad=$$(for f in $(FORMAT_FILES); do clang-format --dry-run -Werror "$$f" >/dev/null 2>&1 || echo "$$f"; done); \
	if [ -n "$$bad" ]; then \
	  echo "format-check: $$(echo "$$bad" | wc -l) file(s) not formatted (run 'make format'):"; \
	  echo "$$bad" | sed 's/^/  /'; exit 1; \
	fi; echo "format-check: $(words $(FORMAT_FILES)) files formatted"

clean:
	rm -rf $(BUILD) $(BUILD)-trixie build-asan

.PHONY: all node deps demo unit-test test stress test-slurm bench fuzz asan format format-check clean
