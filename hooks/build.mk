# hooks/: libskiffhooks (ddp_env, host lists, hook helpers; static, plus a PIC
# copy for the SPANK plugin), the skiff-ddp-env tool, the container hooks,
# their unit tests (the host list fuzzer: tests/build.mk).
#
# hooks/ may include common/ and itself, nothing of runtime/: libskiffhooks
# and everything built here link libskiffcommon, not libskiff.
HOOKS_PART_CFLAGS := -Icommon -Ihooks/lib
$(BUILD)/hooks/%.o $(BUILD)/pic/hooks/%.o $(BUILD)/tests/unit/hooks/%.o: PART_CFLAGS := $(HOOKS_PART_CFLAGS)

HOOKS_LIB_SRC := $(wildcard hooks/lib/*.c)
LIBSKIFFHOOKS     := $(BUILD)/libskiffhooks.a
LIBSKIFFHOOKS_PIC := $(BUILD)/libskiffhooks_pic.a

$(LIBSKIFFHOOKS): $(patsubst %.c,$(BUILD)/%.o,$(HOOKS_LIB_SRC))
	$(archive)

$(LIBSKIFFHOOKS_PIC): $(patsubst %.c,$(BUILD)/pic/%.o,$(HOOKS_LIB_SRC))
	$(archive)

SKIFF_DDP_ENV := $(BUILD)/bin/skiff-ddp-env
$(SKIFF_DDP_ENV): $(BUILD)/hooks/cli/skiff-ddp-env.o $(LIBSKIFFHOOKS) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^

BINS += $(SKIFF_DDP_ENV)

# Container hooks: hooks/NAME.c -> $(BUILD)/hooks/NN-NAME. The number fixes
# the order the runtime runs them in (lexical): identity files first, then
# mounts, then environment.
HOOKS_ORDER := 10-identity 20-home 30-shm 40-gpu 45-rdma 50-pmix 60-slurm
HOOKS_BINS := $(addprefix $(BUILD)/hooks/,$(HOOKS_ORDER))
define hooks_rule
$(BUILD)/hooks/$(1): $(BUILD)/hooks/$(word 2,$(subst -, ,$(1))).o $(LIBSKIFFHOOKS) $(LIBSKIFFCOMMON)
	@mkdir -p $$(@D)
	$$(CC) $$(EXE_LDFLAGS) -o $$@ $$^
endef
$(foreach h,$(HOOKS_ORDER),$(eval $(call hooks_rule,$(h))))

LIBEXEC += $(HOOKS_BINS)
all: $(LIBSKIFFHOOKS) $(LIBSKIFFHOOKS_PIC)

# Criterion unit tests: tests/unit/hooks/test_*.c, each linked with both libraries.
HOOKS_UNIT := $(patsubst tests/unit/hooks/%.c,$(BUILD)/tests/unit/hooks/%,$(wildcard tests/unit/hooks/test_*.c))
$(BUILD)/tests/unit/hooks/%: $(BUILD)/tests/unit/hooks/%.o $(LIBSKIFFHOOKS) $(LIBSKIFFCOMMON)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ -lcriterion
UNIT_TESTS += $(HOOKS_UNIT)

INTEGRATION_TESTS += $(sort $(wildcard tests/integration/hooks-*.sh))
MAN1 += hooks/skiff-ddp-env.1
