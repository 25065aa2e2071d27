# trainer/: libskifftrain.a (model, data, comm, store, checkpoints: everything
# but main.c, so the CUDA part and the unit tests link the same code) and the
# skiff-train binary. trainer/cuda/build.mk (included before this file) sets
# TRAINER_CUDA_OBJS, TRAINER_CUDA_LIBS and TRAINER_CUDA_CFLAGS when nvcc exists.
TRAINER_SRC := $(filter-out trainer/main.c,$(wildcard trainer/*.c))
TRAINER_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(TRAINER_SRC))
LIBSKIFFTRAIN := $(BUILD)/libskifftrain.a
TRAINER_LDLIBS := -fopenmp -lpthread -lm

# OpenMP for the CPU kernels; -O3 lets GCC vectorise the matmul loops. No
# -ffast-math: results must not depend on reassociation (determinism tests).
$(BUILD)/trainer/%.o $(BUILD)/tests/unit/trainer/%.o: PIE_CFLAGS += -fopenmp -O3 -Itrainer
$(BUILD)/trainer/main.o: PIE_CFLAGS += $(TRAINER_CUDA_CFLAGS)

$(LIBSKIFFTRAIN): $(TRAINER_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

SKIFF_TRAIN := $(BUILD)/bin/skiff-train
TRAINER_LINKER := $(if $(strip $(TRAINER_CUDA_OBJS)),$(CXX),$(CC))
$(SKIFF_TRAIN): $(BUILD)/trainer/main.o $(TRAINER_CUDA_OBJS) $(LIBSKIFFTRAIN) $(LIBSKIFF)
	@mkdir -p $(@D)
	$(TRAINER_LINKER) $(EXE_LDFLAGS) -o $@ $^ $(TRAINER_CUDA_LIBS) $(TRAINER_LDLIBS)

BINS += $(SKIFF_TRAIN)
MAN1 += doc/man/skiff-train.1

TRAINER_UNIT := $(patsubst tests/unit/trainer/%.c,$(BUILD)/tests/unit/trainer/%,$(wildcard tests/unit/trainer/test_*.c))
$(BUILD)/tests/unit/trainer/%: $(BUILD)/tests/unit/trainer/%.o $(LIBSKIFFTRAIN) $(LIBSKIFF)
	$(CC) $(EXE_LDFLAGS) -o $@ $^ -lcriterion $(TRAINER_LDLIBS)
UNIT_TESTS += $(TRAINER_UNIT)
INTEGRATION_TESTS += $(filter-out %/trainer-lib.sh,$(wildcard tests/integration/trainer-*.sh))
BENCHES += $(wildcard tests/bench/trainer.sh)
