# trainer/cuda/: the CUDA path of skiff-train. Included by the top Makefile
# before trainer/build.mk; everything here exists only when nvcc was found.
#   TRAINER_CUDA_OBJS    nvcc-built objects linked into skiff-train
#   TRAINER_CUDA_LIBS    CUDA runtime, cuBLASLt, NCCL (+ rpath)
#   TRAINER_CUDA_CFLAGS  for trainer/main.c: -DSKIFF_HAVE_CUDA
#   make gpu-test        build + tests/gpu/run-tests.sh (needs a GPU)
#   make gpu-bench       build + tests/gpu/bench.sh (needs a GPU)
#   make gpu-budget      per-kernel ptxas resources + analytic roofline of one
#                        d12 step (no GPU needed; tests/gpu/budget.c)
#   make gpu-rehearse    tests/gpu/device-run.sh in a Debian 13 tree without a
#                        GPU (root; tests/gpu/rehearse.sh)
#   make gpu-llmc        llm.c's CUDA trainer into build-llmc/ for device-run.sh
# WERROR= (top Makefile), NCCL_HOME=DIR and GPU_HOST_DEPS=DIR (trainer/build.mk)
# build on a machine without our packages, as device-run.sh does.
ifneq ($(strip $(NVCC)),)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -arch=sm_90
# NCCL: the toolkit's (or the system's) by default; NCCL_HOME=DIR takes
# DIR/include and DIR/lib instead, the layout of the pip wheel
# nvidia-nccl-cu13 (site-packages/nvidia/nccl), which ships libnccl.so.2
# and no libnccl.so: hence -l:libnccl.so.2, which every layout has.
NCCL_HOME ?=
NCCL_INC := $(if $(NCCL_HOME),-I$(NCCL_HOME)/include)
# Its -L and runpath go first, so they win over a toolkit that has one too.
NCCL_LDIR := $(if $(NCCL_HOME),-L$(NCCL_HOME)/lib -Wl$(comma)-rpath$(comma)$(NCCL_HOME)/lib)
# Host-side warnings are errors as for the C code; -fPIE because skiff-train
# links as a PIE; hardening flags as far as the host compiler takes them.
NVCC_FLAGS := -O3 $(CUDA_ARCH) -std=c++17 -lineinfo \
  -Xcompiler -Wall,-Wextra$(if $(WERROR),$(comma)$(WERROR)),-fPIE,-fstack-protector-strong,-fstack-clash-protection,-fcf-protection \
  -Xcompiler -D_FORTIFY_SOURCE=2 -D_GNU_SOURCE -Icommon -Itrainer -Itrainer/cuda $(NCCL_INC)
CUDA_SRC := $(wildcard trainer/cuda/*.cu)
TRAINER_CUDA_OBJS := $(patsubst %.cu,$(BUILD)/%.o,$(CUDA_SRC))
# The runpath finds CUDA where the runfile installs it (no ld.so.conf entry);
# packages set CUDA_RPATH= and depend on CUDA's packages, which add one.
CUDA_RPATH ?= -Wl,-rpath,$(CUDA_HOME)/lib64
TRAINER_CUDA_LIBS := $(NCCL_LDIR) -L$(CUDA_HOME)/lib64 $(CUDA_RPATH) -lcudart -lcublasLt -lcublas -l:libnccl.so.2 -lstdc++
TRAINER_CUDA_CFLAGS := -DSKIFF_HAVE_CUDA -I$(CUDA_HOME)/include $(NCCL_INC)

# ptxas reports registers, spills and shared memory per kernel: kept in
# OBJ.ptxas for `make gpu-budget` (other compiler output still goes to stderr).
$(BUILD)/trainer/cuda/%.o: trainer/cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -Xptxas -v -MD -MF $(@:.o=.d) -c $< -o $@ 2> $(@:.o=.ptxas.tmp); rc=$$?; \
	  grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' $(@:.o=.ptxas.tmp) >&2; \
	  mv $(@:.o=.ptxas.tmp) $(@:.o=.ptxas); exit $$rc

# tests/gpu/gpu_tool: CUDA vs CPU check, GEMM peak and throughput benchmark,
# synthetic shards. Links the same objects as skiff-train.
GPU_TOOL := $(BUILD)/tests/gpu/gpu_tool
$(BUILD)/tests/gpu/%.o: PART_CFLAGS := -Icommon -Itrainer -Itrainer/cuda -fopenmp $(TRAINER_CUDA_CFLAGS)
GPU_TOOL_OBJS := $(BUILD)/tests/gpu/gpu_tool.o $(BUILD)/tests/gpu/budget.o
$(GPU_TOOL): $(GPU_TOOL_OBJS) $(TRAINER_CUDA_OBJS) $(BUILD)/libskifftrain.a $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CXX) $(EXE_LDFLAGS) -o $@ $^ $(TRAINER_CUDA_LIBS) -fopenmp -lpthread -lm

# tests/gpu/emu: the kernels compiled for the CPU (CUDA-on-threads emulation)
# and checked against the CPU reference layers; needs the CUDA headers only.
# The layer headers bring their launchers along, whose stream the
# emulation's LAUNCH does not use (-Wno-unused-parameter, as for EMU_OBJS).
KERNEL_EMU := $(BUILD)/tests/gpu/kernels_emu
$(KERNEL_EMU): tests/gpu/emu/kernels_emu.cpp tests/gpu/emu/cuda_emu.h $(wildcard trainer/cuda/*.cuh) \
               $(wildcard trainer/layers/*.h)
	@mkdir -p $(@D)
	$(CXX) -std=c++20 -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter -fopenmp -pthread -DSKIFF_CUDA_EMU \
	  -I$(CUDA_HOME)/include -Icommon -Itrainer -Itrainer/cuda -Itests/gpu/emu $< -o $@

# The whole CUDA path compiled for the CPU emulation (tests/gpu/emu: kernels
# on CPU threads, stand-ins for the CUDA runtime, cuBLASLt and NCCL):
# build/emu/bin/skiff-train and build/emu/tests/gpu/gpu_tool run the GPU tests'
# host logic without a GPU (`make cuda-emu-test`; slow: tiny models only).
EMU_CXXFLAGS := -std=c++20 -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter -fopenmp -pthread \
  -DSKIFF_CUDA_EMU -I$(CUDA_HOME)/include -Icommon -Itrainer -Itrainer/cuda -Itests/gpu/emu
EMU_OBJS := $(patsubst trainer/cuda/%.cu,$(BUILD)/emu/%.o,$(CUDA_SRC)) $(BUILD)/emu/runtime_emu.o
$(BUILD)/emu/%.o: trainer/cuda/%.cu tests/gpu/emu/cuda_emu.h
	@mkdir -p $(@D)
	$(CXX) -x c++ $(EMU_CXXFLAGS) -include tests/gpu/emu/cuda_emu.h -MMD -MP -c $< -o $@
$(BUILD)/emu/runtime_emu.o: tests/gpu/emu/runtime_emu.cpp tests/gpu/emu/cuda_emu.h
	@mkdir -p $(@D)
	$(CXX) $(EMU_CXXFLAGS) -MMD -MP -c $< -o $@
EMU_SKIFF_TRAIN := $(BUILD)/emu/bin/skiff-train
EMU_GPU_TOOL := $(BUILD)/emu/tests/gpu/gpu_tool
$(EMU_SKIFF_TRAIN): $(BUILD)/trainer/main.o $(EMU_OBJS) $(BUILD)/libskifftrain.a $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CXX) $(EXE_LDFLAGS) -o $@ $^ -fopenmp -pthread $(TRAINER_LDLIBS)
$(EMU_GPU_TOOL): $(GPU_TOOL_OBJS) $(EMU_OBJS) $(BUILD)/libskifftrain.a $(LIBSKIFFCOMMON)
	@mkdir -p $(@D)
	$(CXX) $(EXE_LDFLAGS) -o $@ $^ -fopenmp -pthread -lm

cuda-emu: $(EMU_SKIFF_TRAIN) $(EMU_GPU_TOOL)
cuda-emu-test: cuda-emu
	BUILD=$(abspath $(BUILD))/emu SKIFF_GPU_TEST_MODEL=tiny SKIFF_GPU_TEST_SEQ=64 SKIFF_GPU_TEST_BATCH=2 SKIFF_GPU_TEST_STEPS=4 \
	  SKIFF_GPU_TEST_QUICK=1 tests/gpu/run-tests.sh

# Built by `make` too, so CI (nvcc, no GPU) compiles and links all of it.
all: $(GPU_TOOL) $(KERNEL_EMU) $(EMU_GPU_TOOL) $(EMU_SKIFF_TRAIN)

# The CPU-side check that runs in `make test`: the CUDA build links, fails
# cleanly without a GPU, and its host-only pieces work; and the budget check:
# no kernel of the d12 step spills, the modeled step time does not regress.
INTEGRATION_TESTS += tests/gpu/cpu-side-check.sh tests/gpu/budget-check.sh tests/gpu/peer-death.sh tests/gpu/parallel.sh

# tests/gpu/device-run.sh rehearsed without a GPU: in a Debian 13 tree
# (newer gcc) without jansson, utf8proc or NCCL packages, NCCL in the pip
# wheel's layout; it must pass preflight and build and stop at "no GPU".
gpu-rehearse:
	tests/gpu/rehearse.sh

# llm.c's CUDA trainer (the anchor checkout) copied into build-llmc/ (ignored
# by git) for device-run.sh's side-by-side phase on a GPU machine.
LLMC_DIR ?= ../shared/anchors/llm.c
gpu-llmc:
	@[ -e $(LLMC_DIR)/train_gpt2.cu ] || { echo "gpu-llmc: no llm.c checkout at LLMC_DIR=$(LLMC_DIR)" >&2; exit 1; }
	rm -rf build-llmc && mkdir -p build-llmc && cp -r $(LLMC_DIR)/train_gpt2.cu $(LLMC_DIR)/llmc $(LLMC_DIR)/LICENSE build-llmc/

gpu-test: $(BUILD)/bin/skiff-train $(GPU_TOOL)
	tests/gpu/run-tests.sh

gpu-bench: $(BUILD)/bin/skiff-train $(GPU_TOOL)
	tests/gpu/bench.sh

# The analytic model of one step and the ptxas resources of its kernels;
# fails when a kernel spills or the modeled time exceeds the baseline.
gpu-budget: $(GPU_TOOL)
	$(GPU_TOOL) budget --ptxas-dir $(BUILD)/trainer/cuda --check tests/gpu/budget-baseline.txt
else
gpu-test gpu-bench gpu-budget cuda-emu cuda-emu-test gpu-rehearse gpu-llmc:
	@echo "$@: nvcc not found (set NVCC=/path/to/nvcc); the CUDA path is not built" >&2; exit 1
endif

.PHONY: gpu-test gpu-bench gpu-budget cuda-emu cuda-emu-test gpu-rehearse gpu-llmc
