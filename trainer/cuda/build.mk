# trainer/cuda/: the CUDA path of skiff-train. Included by the top Makefile
# before trainer/build.mk; everything here exists only when nvcc was found.
#   TRAINER_CUDA_OBJS    nvcc-built objects linked into skiff-train
#   TRAINER_CUDA_LIBS    CUDA runtime, cuBLASLt, NCCL (+ rpath)
#   TRAINER_CUDA_CFLAGS  for trainer/main.c: -DSKIFF_HAVE_CUDA
#   make gpu-test        build + tests/gpu/run-tests.sh (needs a GPU)
#   make gpu-bench       build + tests/gpu/bench.sh (needs a GPU)
ifneq ($(strip $(NVCC)),)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -arch=sm_90
# Host-side warnings are errors as for the C code; -fPIE because skiff-train
# links as a PIE; hardening flags as far as the host compiler takes them.
NVCC_FLAGS := -O3 $(CUDA_ARCH) -std=c++17 -lineinfo \
  -Xcompiler -Wall,-Wextra,-Werror,-fPIE,-fstack-protector-strong,-fstack-clash-protection,-fcf-protection \
  -Xcompiler -D_FORTIFY_SOURCE=2 -D_GNU_SOURCE -Iruntime/lib -Itrainer -Itrainer/cuda
CUDA_SRC := $(wildcard trainer/cuda/*.cu)
TRAINER_CUDA_OBJS := $(patsubst %.cu,$(BUILD)/%.o,$(CUDA_SRC))
TRAINER_CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lnccl -lstdc++
TRAINER_CUDA_CFLAGS := -DSKIFF_HAVE_CUDA -I$(CUDA_HOME)/include

$(BUILD)/trainer/cuda/%.o: trainer/cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -MD -MF $(@:.o=.d) -c $< -o $@

# tests/gpu/gpu_tool: CUDA vs CPU check, GEMM peak and throughput benchmark,
# synthetic shards. Links the same objects as skiff-train.
GPU_TOOL := $(BUILD)/tests/gpu/gpu_tool
$(BUILD)/tests/gpu/%.o: PIE_CFLAGS += -fopenmp -Itrainer -Itrainer/cuda $(TRAINER_CUDA_CFLAGS)
$(GPU_TOOL): $(BUILD)/tests/gpu/gpu_tool.o $(TRAINER_CUDA_OBJS) $(BUILD)/libskifftrain.a $(BUILD)/libskiff.a
	@mkdir -p $(@D)
	$(CXX) $(EXE_LDFLAGS) -o $@ $^ $(TRAINER_CUDA_LIBS) -fopenmp -lpthread -lm

# tests/gpu/emu: the kernels compiled for the CPU (CUDA-on-threads emulation)
# and checked against the CPU reference layers; needs the CUDA headers only.
KERNEL_EMU := $(BUILD)/tests/gpu/kernels_emu
$(KERNEL_EMU): tests/gpu/emu/kernels_emu.cpp tests/gpu/emu/cuda_emu.h trainer/cuda/kernels_dev.cuh \
               trainer/cuda/attention_dev.cuh trainer/cuda/common.cuh $(wildcard trainer/layers/*.h)
	@mkdir -p $(@D)
	$(CXX) -std=c++20 -O1 -g -Wall -Wextra -Werror -fopenmp -pthread -DSKIFF_CUDA_EMU \
	  -I$(CUDA_HOME)/include -Iruntime/lib -Itrainer -Itrainer/cuda -Itests/gpu/emu $< -o $@

# Built by `make` too, so CI (nvcc, no GPU) compiles and links all of it.
all: $(GPU_TOOL) $(KERNEL_EMU)

# The CPU-side check that runs in `make test`: the CUDA build links, fails
# cleanly without a GPU, and its host-only pieces work.
INTEGRATION_TESTS += tests/gpu/cpu-side-check.sh

gpu-test: $(BUILD)/bin/skiff-train $(GPU_TOOL)
	tests/gpu/run-tests.sh

gpu-bench: $(BUILD)/bin/skiff-train $(GPU_TOOL)
	tests/gpu/bench.sh
else
gpu-test gpu-bench:
	@echo "$@: nvcc not found (set NVCC=/path/to/nvcc); the CUDA path is not built" >&2; exit 1
endif

.PHONY: gpu-test gpu-bench
