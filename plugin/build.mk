# plugin/: spank_skiff.so, the SPANK plugin. It links the PIC libskiff and
# libskiffhooks (per-task training env); a version script keeps every symbol
# but Slurm's entry points local.
# plugin/ may include common/, runtime/lib and hooks/lib.
PLUGIN_PART_CFLAGS := -Icommon $(RUNTIME_INC) -Ihooks/lib -Iplugin $(RUNTIME_CFLAGS)
$(BUILD)/plugin/%.o $(BUILD)/pic/plugin/%.o $(BUILD)/tests/unit/plugin/%.o: PART_CFLAGS := $(PLUGIN_PART_CFLAGS)
# plugin/*.c is the plugin (root's side); plugin/helper/ the user-side helpers.
PLUGIN_SRC := $(wildcard plugin/*.c)
SPANK_SKIFF := $(BUILD)/plugin/spank_skiff.so
# options.c, args.c, proto.c and userproc.c need no Slurm: unit tests link them directly.
PLUGIN_PURE_OBJ := $(BUILD)/pic/plugin/options.o $(BUILD)/pic/plugin/args.o $(BUILD)/pic/plugin/proto.o \
                   $(BUILD)/pic/plugin/userproc.o

$(SPANK_SKIFF): $(patsubst %.c,$(BUILD)/pic/%.o,$(PLUGIN_SRC)) $(LIBSKIFFHOOKS_PIC) $(LIBSKIFF_PIC) $(LIBSKIFFCOMMON_PIC) \
    plugin/spank_skiff.map
	@mkdir -p $(@D)
	$(CC) $(SO_LDFLAGS) -Wl,--version-script=plugin/spank_skiff.map -Wl,--no-undefined-version \
	  -o $@ $(filter %.o %.a,$^) $(RUNTIME_LIBS)

PLUGINS += $(SPANK_SKIFF)

# Criterion unit tests: tests/unit/plugin/test_*.c
PLUGIN_UNIT := $(patsubst tests/unit/plugin/%.c,$(BUILD)/tests/unit/plugin/%,$(wildcard tests/unit/plugin/test_*.c))
$(BUILD)/tests/unit/plugin/%: $(BUILD)/tests/unit/plugin/%.o $(PLUGIN_PURE_OBJ) $(LIBSKIFF_PIC) $(LIBSKIFFCOMMON_PIC)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS) -lcriterion
UNIT_TESTS += $(PLUGIN_UNIT)

INTEGRATION_TESTS += $(sort $(wildcard tests/integration/plugin-*.sh))
# The attacker's tools plugin-attacks.sh runs (built by `make test`, never
# installed; attack-ids runs inside a container).
ATTACK_GETFD := $(BUILD)/tests/attack-getfd
ATTACK_IDS := $(BUILD)/tests/attack-ids
$(ATTACK_GETFD): tests/integration/attack-getfd.c
	$(test_static_program)
$(ATTACK_IDS): tests/integration/attack-ids.c
	$(test_static_program)
TEST_PROGRAMS += $(ATTACK_GETFD) $(ATTACK_IDS)
BENCHES += tests/bench/srun.sh

# The local Slurm test cluster (tests/cluster/); SKIFF_CLUSTER_INDEX=0..9, NODES=N.
cluster-up: $(SPANK_SKIFF)
	BUILD=$(BUILD) tests/cluster/up $(NODES)

cluster-down:
	tests/cluster/down

.PHONY: cluster-up cluster-down

MAN8 += doc/man/spank-skiff.8

# skiff-helper and skiff-helper-full: the plugin's user-side half
# (plugin/helper/), exec'd as the job's user. In the build tree they sit
# beside spank_skiff.so, where the plugin looks first; `make install` puts
# them in LIBEXECDIR/skiff, where it looks next. Each has a small main file
# over the same objects, built once: the lean one starts containers (every
# step: linked like bin/skiff, ~6 ms less to exec); the full one imports
# images and runs the exit-time verbs.
SKIFF_HELPER := $(BUILD)/plugin/skiff-helper
SKIFF_HELPER_FULL := $(BUILD)/plugin/skiff-helper-full
SKIFF_HELPER_OBJ := $(BUILD)/plugin/helper/helper.o $(BUILD)/plugin/proto.o
$(SKIFF_HELPER): $(BUILD)/plugin/helper/skiff-helper.o $(SKIFF_HELPER_OBJ) $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(SKIFF_LEAN_LIBS)
$(SKIFF_HELPER_FULL): $(BUILD)/plugin/helper/skiff-helper-full.o $(SKIFF_HELPER_OBJ) $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS)
PLUGINS += $(SKIFF_HELPER) $(SKIFF_HELPER_FULL)
