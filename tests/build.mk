# The generator of random llm.c checkpoints trainer-llmc.sh compares the
# trainer against llm.c with (built by `make test`, never installed).
LLMC_RANDOM := $(BUILD)/tests/llmc-random
$(LLMC_RANDOM): tests/integration/lib/llmc-random.c
	@mkdir -p $(@D)
	$(CC) $(PIE_CFLAGS) $(EXE_LDFLAGS) -o $@ $< -lm
TEST_PROGRAMS += $(LLMC_RANDOM)

# Real MPI across the test cluster's nodes, in and out of containers (it
# builds the cached MPI image with scripts/make-mpi-image on first use).
INTEGRATION_TESTS += tests/integration/mpi-cluster.sh
# The suites' own rules (tests/README.md, tests/check-suites).
INTEGRATION_TESTS += tests/integration/suite-rules.sh
# Whole-system tests: the demo path at a smaller size (last: it uses every part).
INTEGRATION_TESTS += tests/integration/e2e-demo.sh
# The suites that drive Slurm itself (srun/sbatch/salloc, the plugin in every
# SPANK context, the job epilog, PMIx and PMI-2, steps sharing an allocation)
# run a second time against Debian 13's Slurm 24.11: tests/cluster/slurm-tree
# makes the tree (cached) and builds the plugin in it; their lines read
# "[24.11] ...". Not again: trainer-ddp (no Slurm) and e2e-demo (its Slurm
# path is plugin-cluster's and hooks-cluster's; its time is training).
SLURM_TREE_TESTS := $(addprefix tests/integration/,plugin-cluster.sh plugin-pyxis.sh plugin-attacks.sh \
                      hooks-cluster.sh mpi-cluster.sh)

# Programs the integration tests run (built by `make test`, never installed):
# the attacker's FUSE server that never answers, and a SPANK plugin that
# records where slurmstepd's fd 0 points (tests/integration/plugin-attacks.sh).
FUSE_STALL := $(BUILD)/tests/fuse-stall
SPANK_FD0_PROBE := $(BUILD)/tests/spank_fd0_probe.so
TEST_PROGRAMS += $(FUSE_STALL) $(SPANK_FD0_PROBE)
$(FUSE_STALL): tests/integration/fuse-stall.c
	@mkdir -p $(@D)
	$(CC) $(PIE_CFLAGS) $(shell pkg-config --cflags fuse3) $(EXE_LDFLAGS) -o $@ $< $(shell pkg-config --libs fuse3)
$(SPANK_FD0_PROBE): tests/integration/spank-fd0-probe.c
	@mkdir -p $(@D)
	$(CC) $(PIC_CFLAGS) $(SO_LDFLAGS) -o $@ $<

# ---- fuzzing (doc/fuzzing.md) ----------------------------------------------
# libFuzzer targets, one per parser family: tests/fuzz/fuzz_NAME.c ->
# $(BUILD)/fuzz/fuzz_NAME. clang only (-fsanitize=fuzzer); the parsers they
# drive are compiled again here, with coverage and ASan + UBSan, into
# libskiff_fuzz.a (every part's library sources, so a target links what it
# calls). `make fuzz` runs each for FUZZ_SECONDS and prints a table
# (tests/fuzz/run); `make test` runs each for a few seconds
# (tests/integration/fuzz-smoke.sh). Nothing is written into the source tree:
# corpora grow under $(BUILD)/fuzz/corpus, findings land in $(BUILD)/fuzz/findings.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_INC := -Icommon $(RUNTIME_INC) -Ihooks/lib -Iplugin -Itrainer
FUZZ_CFLAGS := -std=gnu11 -O1 -g -D_GNU_SOURCE -DSKIFF_VERSION='"$(VERSION)"' $(WARN) -Wno-unknown-pragmas -Wno-string-plus-int \
               $(FUZZ_INC) $(RUNTIME_CFLAGS) $(FUZZ_SAN)
# (trainer/cpu_device.c calls OpenMP's runtime, which the fuzzers do not
# link; nothing they reach needs it)
FUZZ_LIB_SRC := $(wildcard common/*.c) $(RUNTIME_LIB_SRC) $(HOOKS_LIB_SRC) \
                plugin/options.c plugin/args.c plugin/proto.c \
                $(filter-out trainer/cpu_device.c,$(TRAINER_SRC))
FUZZ_OBJ_DIR := $(BUILD)/fuzz/obj
LIBSKIFF_FUZZ := $(BUILD)/fuzz/libskiff_fuzz.a
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZERS += $(addprefix $(BUILD)/fuzz/,$(FUZZ_TARGETS))

$(FUZZ_OBJ_DIR)/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

# (rebuilt from scratch: a member of a file that moved away must not linger)
$(LIBSKIFF_FUZZ): $(patsubst %.c,$(FUZZ_OBJ_DIR)/%.o,$(FUZZ_LIB_SRC))
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/fuzz/fuzz_%: $(FUZZ_OBJ_DIR)/tests/fuzz/fuzz_%.o $(FUZZ_OBJ_DIR)/tests/fuzz/fuzzlib.o $(LIBSKIFF_FUZZ)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(RUNTIME_LIBS) $(filter-out -fopenmp,$(TRAINER_LDLIBS))

fuzzers: $(FUZZERS)

# for tests/integration/fuzz-smoke.sh
print-fuzzers:
	@printf '%s\n' $(FUZZERS)

INTEGRATION_TESTS += tests/integration/fuzz-smoke.sh

.PHONY: fuzzers print-fuzzers
test-programs: $(TEST_PROGRAMS)
.PHONY: test-programs
