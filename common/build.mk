# common/: libskiffcommon (the error contract, fd I/O, string lists, the
# monotonic clock): libc only, linked by every part. A PIC copy for the
# SPANK plugin. It may include nothing of the other parts.
COMMON_SRC := $(wildcard common/*.c)
LIBSKIFFCOMMON     := $(BUILD)/libskiffcommon.a
LIBSKIFFCOMMON_PIC := $(BUILD)/libskiffcommon_pic.a

$(BUILD)/common/%.o $(BUILD)/pic/common/%.o: PART_CFLAGS := -Icommon

$(LIBSKIFFCOMMON): $(patsubst %.c,$(BUILD)/%.o,$(COMMON_SRC))
	$(archive)

$(LIBSKIFFCOMMON_PIC): $(patsubst %.c,$(BUILD)/pic/%.o,$(COMMON_SRC))
	$(archive)

all: $(LIBSKIFFCOMMON) $(LIBSKIFFCOMMON_PIC)

# Criterion unit tests: tests/unit/common/test_*.c, linked with libskiffcommon only.
$(BUILD)/tests/unit/common/%.o: PART_CFLAGS := -Icommon
COMMON_UNIT := $(patsubst tests/unit/common/%.c,$(BUILD)/tests/unit/common/%,$(wildcard tests/unit/common/test_*.c))
$(BUILD)/tests/unit/common/%: $(BUILD)/tests/unit/common/%.o $(LIBSKIFFCOMMON)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ -lcriterion
UNIT_TESTS += $(COMMON_UNIT)
