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
# RUNTIME_INC: libskiff's headers, for whoever may include them (the CLI,
# the plugin, the tests): the base folder and its parts (runtime/README.md).
RUNTIME_INC := -Iruntime/lib -Iruntime/lib/image -Iruntime/lib/fs -Iruntime/lib/container
RUNTIME_PART_CFLAGS := -Icommon $(RUNTIME_INC) $(RUNTIME_CFLAGS)
$(BUILD)/runtime/%.o $(BUILD)/pic/runtime/%.o $(BUILD)/lean/runtime/%.o $(BUILD)/tests/unit/runtime/%.o: \
    PART_CFLAGS := $(RUNTIME_PART_CFLAGS)

$(LIBSKIFF): $(patsubst %.c,$(BUILD)/%.o,$(RUNTIME_LIB_SRC))
	$(archive)

$(LIBSKIFF_PIC): $(patsubst %.c,$(BUILD)/pic/%.o,$(RUNTIME_LIB_SRC))
	$(archive)

# bin/skiff links only what the container verbs need (11 shared objects with vDSO and loader
# instead of 49: ~4 ms less per `skiff start`, see tests/bench/start.sh);
# `skiff import|resolve` exec bin/skiff-import, the full CLI (same main.c).
SKIFF_CLI := $(BUILD)/bin/skiff
SKIFF_IMPORT_CLI := $(BUILD)/bin/skiff-import
SKIFF_LEAN_LIBS := -lsquashfuse_ll -lsquashfuse $(shell pkg-config --libs fuse3 jansson libseccomp 2>/dev/null) \
                   -lz -llzma -llz4 -lzstd -llzo2
$(BUILD)/lean/runtime/cli/main.o: runtime/cli/main.c
	@mkdir -p $(@D)
	$(CC) $(PIE_CFLAGS) -DSKIFF_CLI_LEAN -MMD -MP -c $< -o $@
$(SKIFF_CLI): $(BUILD)/lean/runtime/cli/main.o \
    $(patsubst %.c,$(BUILD)/%.o,$(filter-out runtime/cli/main.c runtime/cli/import.c runtime/cli/resolve.c,$(wildcard runtime/cli/*.c))) \
    $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(SKIFF_LEAN_LIBS)
$(SKIFF_IMPORT_CLI): $(patsubst %.c,$(BUILD)/%.o,$(wildcard runtime/cli/*.c)) $(LIBSKIFF) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS)

BINS += $(SKIFF_CLI) $(SKIFF_IMPORT_CLI)

# Criterion unit tests: tests/unit/runtime/test_*.c, each linked with libskiff.
RUNTIME_UNIT := $(patsubst tests/unit/runtime/%.c,$(BUILD)/tests/unit/runtime/%,$(wildcard tests/unit/runtime/test_*.c))
$(BUILD)/tests/unit/runtime/%: $(BUILD)/tests/unit/runtime/%.o $(LIBSKIFF) $(LIBSKIFFCOMMON)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS) -lcriterion
# test_cli runs the CLI in-process (cli_main): every verb's object but main.o.
SKIFF_CLI_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(filter-out runtime/cli/main.c,$(wildcard runtime/cli/*.c)))
$(BUILD)/tests/unit/runtime/test_cli.o: PART_CFLAGS := $(RUNTIME_PART_CFLAGS) -Iruntime/cli
$(BUILD)/tests/unit/runtime/test_cli: $(BUILD)/tests/unit/runtime/test_cli.o $(SKIFF_CLI_OBJ) $(LIBSKIFF) $(LIBSKIFFCOMMON)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ $(RUNTIME_LIBS) -lcriterion
UNIT_TESTS += $(RUNTIME_UNIT)

INTEGRATION_TESTS += tests/integration/runtime-import.sh tests/integration/runtime-cli.sh
BENCHES += tests/bench/import.sh

# Container half: integration suite, start benchmark, man page.
INTEGRATION_TESTS += tests/integration/runtime-start.sh
BENCHES += tests/bench/start.sh
MAN1 += doc/man/skiff.1 doc/man/skiff-import.1
