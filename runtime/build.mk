# runtime/: libskiff (static, also built PIC for the SPANK plugin) and the skiff CLI.
# libskiff holds no common/ objects: link $(LIBSKIFFCOMMON) after it.
RUNTIME_PKGS := mount libcap libarchive libsquashfs1 libcurl jansson fuse3 libseccomp
RUNTIME_CFLAGS := $(shell pkg-config --cflags $(RUNTIME_PKGS) 2>/dev/null)
# squashfuse's static libraries (the in-process FUSE server, fusemount.c) and
# the decompressors they call.
RUNTIME_LIBS := -lsquashfuse_ll -lsquashfuse $(shell pkg-config --libs $(RUNTIME_PKGS) 2>/dev/null) -lcrypto \
                -lz -llzma -llz4 -lzstd -llzo2 -lisal

RUNTIME_LIB_SRC := $(wildcard runtime/lib/*.c runtime/lib/*/*.c)
LIBSKIFF     := $(BUILD)/libskiff.a
LIBSKIFF_PIC := $(BUILD)/libskiff_pic.a

# runtime/ may include common/ and itself (plus the libraries' headers).
# Inside libskiff the folders are layers, held to by the same means as the
# parts (runtime/lib/README.md): the top folder (config, records, rootfs,
# spawn) sees only itself, image/ sees the top, fs/ the top and image/ (the
# squashfs check), container/ all of them. RUNTIME_INC, all of libskiff's
# headers, is for the CLI, the plugin and the tests.
RUNTIME_TOP_INC := -Iruntime/lib
RUNTIME_IMAGE_INC := $(RUNTIME_TOP_INC) -Iruntime/lib/image
RUNTIME_FS_INC := $(RUNTIME_IMAGE_INC) -Iruntime/lib/fs
RUNTIME_INC := $(RUNTIME_FS_INC) -Iruntime/lib/container
RUNTIME_PART_CFLAGS := -Icommon $(RUNTIME_INC) $(RUNTIME_CFLAGS)
$(BUILD)/runtime/%.o $(BUILD)/pic/runtime/%.o $(BUILD)/tests/unit/runtime/%.o: PART_CFLAGS := $(RUNTIME_PART_CFLAGS)
# (the pattern with the shortest stem wins: each folder's objects get its own)
$(BUILD)/runtime/lib/%.o $(BUILD)/pic/runtime/lib/%.o: PART_CFLAGS := -Icommon $(RUNTIME_TOP_INC) $(RUNTIME_CFLAGS)
$(BUILD)/runtime/lib/image/%.o $(BUILD)/pic/runtime/lib/image/%.o: \
    PART_CFLAGS := -Icommon $(RUNTIME_IMAGE_INC) $(RUNTIME_CFLAGS)
$(BUILD)/runtime/lib/fs/%.o $(BUILD)/pic/runtime/lib/fs/%.o: PART_CFLAGS := -Icommon $(RUNTIME_FS_INC) $(RUNTIME_CFLAGS)
$(BUILD)/runtime/lib/container/%.o $(BUILD)/pic/runtime/lib/container/%.o: PART_CFLAGS := $(RUNTIME_PART_CFLAGS)

$(LIBSKIFF): $(patsubst %.c,$(BUILD)/%.o,$(RUNTIME_LIB_SRC))
	$(archive)

$(LIBSKIFF_PIC): $(patsubst %.c,$(BUILD)/pic/%.o,$(RUNTIME_LIB_SRC))
	$(archive)

# bin/skiff links only what the container verbs need (11 shared objects with vDSO and loader
# instead of 49: ~4 ms less per `skiff start`, see tests/bench/start.sh);
# `skiff import|resolve` exec bin/skiff-import, the full CLI. Each has a
# small main file of its own (cli/skiff.c, cli/skiff-import.c) over the
# verbs' objects, built once.
SKIFF_CLI := $(BUILD)/bin/skiff
SKIFF_IMPORT_CLI := $(BUILD)/bin/skiff-import
SKIFF_LEAN_LIBS := -lsquashfuse_ll -lsquashfuse $(shell pkg-config --libs fuse3 jansson libseccomp 2>/dev/null) \
                   -lz -llzma -llz4 -lzstd -llzo2
SKIFF_CLI_MAINS := runtime/cli/skiff.c runtime/cli/skiff-import.c
SKIFF_CLI_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(filter-out $(SKIFF_CLI_MAINS),$(wildcard runtime/cli/*.c)))
SKIFF_IMPORT_VERBS_OBJ := $(BUILD)/runtime/cli/import.o $(BUILD)/runtime/cli/resolve.o $(BUILD)/runtime/cli/fetch.o
$(SKIFF_CLI): $(BUILD)/runtime/cli/skiff.o $(filter-out $(SKIFF_IMPORT_VERBS_OBJ),$(SKIFF_CLI_OBJ)) \
    $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(SKIFF_LEAN_LIBS)
$(SKIFF_IMPORT_CLI): $(BUILD)/runtime/cli/skiff-import.o $(SKIFF_CLI_OBJ) $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS)

BINS += $(SKIFF_CLI) $(SKIFF_IMPORT_CLI)

# skiff-enroot: enroot's command line (runtime/cli/enroot/, enroot.h) over
# the CLI's shared pieces and libskiff, linked whole (it imports too).
# Packages install it as skiff-enroot; `enroot` is the admin's choice
# (packaging.mk, doc/admin-guide.md).
SKIFF_ENROOT_CLI := $(BUILD)/bin/skiff-enroot
SKIFF_ENROOT_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard runtime/cli/enroot/*.c))
$(BUILD)/runtime/cli/enroot/%.o: PART_CFLAGS := $(RUNTIME_PART_CFLAGS) -Iruntime/cli
$(SKIFF_ENROOT_CLI): $(SKIFF_ENROOT_OBJ) $(SKIFF_CLI_OBJ) $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS)
BINS += $(SKIFF_ENROOT_CLI)

# Criterion unit tests: tests/unit/runtime/test_*.c, each linked with libskiff.
RUNTIME_UNIT := $(patsubst tests/unit/runtime/%.c,$(BUILD)/tests/unit/runtime/%,$(wildcard tests/unit/runtime/test_*.c))
$(BUILD)/tests/unit/runtime/%: $(BUILD)/tests/unit/runtime/%.o $(LIBSKIFF) $(LIBSKIFFCOMMON)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS) -lcriterion
# test_cli runs the CLI in-process (cli_main): every verb's object, no main.
$(BUILD)/tests/unit/runtime/test_cli.o: PART_CFLAGS := $(RUNTIME_PART_CFLAGS) -Iruntime/cli
$(BUILD)/tests/unit/runtime/test_cli: $(BUILD)/tests/unit/runtime/test_cli.o $(SKIFF_CLI_OBJ) $(LIBSKIFF) $(LIBSKIFFCOMMON)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS) -lcriterion
UNIT_TESTS += $(RUNTIME_UNIT)

INTEGRATION_TESTS += tests/integration/runtime-import.sh tests/integration/runtime-cli.sh tests/integration/enroot-cli.sh
BENCHES += tests/bench/import.sh

# Container half: integration suite, start benchmark, man page.
INTEGRATION_TESTS += tests/integration/runtime-start.sh
# Programs runtime-start.sh runs (built by `make test`, never installed): the
# library driven the way the plugin drives it, and an xattr probe for a
# test image.
RUNTIME_PLUGIN_SIM := $(BUILD)/tests/runtime-plugin-sim
XATTR_PROBE := $(BUILD)/tests/xattr-probe
$(BUILD)/tests/integration/runtime-plugin-sim.o: PART_CFLAGS := $(RUNTIME_PART_CFLAGS)
$(RUNTIME_PLUGIN_SIM): $(BUILD)/tests/integration/runtime-plugin-sim.o $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS)
$(XATTR_PROBE): tests/integration/xattr-probe.c
	$(test_static_program)
TEST_PROGRAMS += $(RUNTIME_PLUGIN_SIM) $(XATTR_PROBE)
# lazy images (runtime-lazy.sh, tests/bench/lazy.sh): an image served on a
# directory by skiff's FUSE server, plain or lazy, while a command runs
LAZY_SERVE := $(BUILD)/tests/lazy-serve
$(BUILD)/tests/integration/lazy-serve.o: PART_CFLAGS := $(RUNTIME_PART_CFLAGS)
$(LAZY_SERVE): $(BUILD)/tests/integration/lazy-serve.o $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS)
TEST_PROGRAMS += $(LAZY_SERVE)
INTEGRATION_TESTS += tests/integration/runtime-lazy.sh
# Images at cluster scale (issue 26): registry requests, failures of real
# networks (tests/integration/lib/fakereg.py), the cache's lifecycle, the
# site's store; and a program that holds an image as a running container
# does (64 of them at once).
INTEGRATION_TESTS += tests/integration/image-scale.sh
IMAGE_HOLDER := $(BUILD)/tests/image-holder
$(BUILD)/tests/integration/image-holder.o: PART_CFLAGS := $(RUNTIME_PART_CFLAGS)
$(IMAGE_HOLDER): $(BUILD)/tests/integration/image-holder.o $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS)
TEST_PROGRAMS += $(IMAGE_HOLDER)
BENCHES += tests/bench/start.sh tests/bench/scale.sh tests/bench/lazy.sh
MAN1 += doc/man/skiff.1 doc/man/skiff-import.1 doc/man/skiff-enroot.1
