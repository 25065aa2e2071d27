#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/gpu/device-run.sh: everything a short GPU session runs, in one call
# of at most ~10 minutes, on a bare image that reaches no package registry
# (nvcc, the driver, NCCL as the pip wheel nvidia-nccl-cu13, a distribution
# gcc; no jansson, utf8proc or Debian packages). Phases, each under its own
# `timeout` and within one overall deadline, most needed first:
#   1. preflight  what was found (nvcc, driver, GPU, NCCL headers/library,
#                 cuBLASLt, gcc, jansson/utf8proc); exit 2 with the list of
#                 what is missing
#   2. build      skiff-train and gpu_tool, warnings not errors (WERROR=),
#                 NCCL from wherever preflight found it, jansson/utf8proc
#                 from build-gpu-deps/ when the system lacks them
#                 (`make gpu-host-deps` here, carried along)
#      no GPU:    stops here, exit 3 ("no GPU"): what `make gpu-rehearse` checks
#   3. bench      bf16 GEMM peak; the d12 step (B=64, T=1024, bf16) at ZeRO-0
#                 with the per-op table, at ZeRO-1 (rank 0 of 8), with the
#                 128-row attention and without fused epilogues (A/B)
#   4. llm.c      its train_gpt2.cu on the same model, batch and card, random
#                 weights (build-llmc/, from `make gpu-llmc`; or LLMC_DIR)
#   5. budget     the analytic model calibrated with the per-op table
#   6. tests      tests/gpu/run-tests.sh (CUDA against the CPU reference, ...)
#      parallel   tests/gpu/parallel.sh: --tp 2 and dp2 x tp2 (ZeRO-1), --pp 2,
#                 dp2 x pp2 (also ZeRO-1) and tp2 x pp2 (a --pp 2 and a
#                 ZeRO-1 pipeline checkpoint resumed), --zero 3
#                 (fp32 and bf16, its checkpoint resumed by one process) on
#                 this one card against one process, --recompute (alone,
#                 with --tp 2, --pp 2, --zero 3) against keeping the
#                 activations (ranks sharing the card: host-staged
#                 collectives, so correctness, not speed; NCCL's group
#                 communicators and its ZeRO-3 gathers need one GPU per rank)
#   7. rest       tests/gpu/bench.sh's end-to-end rows
# Every log goes to $OUT (default ./gpu-logs): device-run.log (this output),
# one NAME.log per phase, ops.tsv (per-op times). Exit 0 when every phase
# passed, else 1 (2: preflight, 3: no GPU).
# Env: SKIFF_GPU_DEADLINE seconds for all phases (540), SKIFF_GPU_NO_BUILD=1
# (use build/ as it is), SKIFF_GPU_BUILD_LIMIT seconds for the build (300),
# SKIFF_GPU_STOP_AFTER=build (stop after the build), SKIFF_GPU_ONLY=NAME,...
# (after the build, only these phases: a short lease's focused check),
# NCCL_HOME, CUDA_HOME, LLMC_DIR, GPU_HOST_DEPS (default build-gpu-deps).
set -u
cd "$(dirname "$0")/../.."
root=$PWD
out=${OUT:-gpu-logs}
mkdir -p "$out"
out=$(cd "$out" && pwd)
deadline=$(($(date +%s) + ${SKIFF_GPU_DEADLINE:-540}))
exec > >(tee "$out/device-run.log") 2>&1
failed=()

say() { printf '== %s\n' "$*"; }
# phase NAME LIMIT CMD...: CMD under timeout (LIMIT, or what is left of the
# deadline), output in $out/NAME.log, its tail here on failure.
phase() {
  local name=$1 limit=$2 left start rc
  shift 2
  if [ -n "${SKIFF_GPU_ONLY:-}" ] && [ "$name" != build ] && [[ ",$SKIFF_GPU_ONLY," != *",$name,"* ]]; then
    say "$name: not in SKIFF_GPU_ONLY"
    return 1
  fi
  left=$((deadline - $(date +%s) - 5))
  ((left < limit)) && limit=$left
  if ((limit < 15)); then
    say "$name: skipped (the deadline is near)"
    failed+=("$name (skipped)")
    return 1
  fi
  start=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  say "$name: exit $rc in $(($(date +%s) - start)) s (limit $limit s)$([ $rc -eq 124 ] && echo ', TIMED OUT')"
  if [ $rc -ne 0 ]; then
    tail -15 "$out/$name.log" | sed 's/^/   | /'
    failed+=("$name")
  fi
  return $rc
}

# ---- 1. preflight --------------------------------------------------------
say "$(date -u +%FT%TZ) device-run in $root, logs in $out"
missing=()
NVCC=${NVCC:-$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })}
if [ -n "$NVCC" ] && [ -x "$NVCC" ]; then
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
  say "nvcc: $NVCC ($("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
else
  missing+=("nvcc${NVCC:+ at $NVCC} (the CUDA toolkit; set NVCC=/path/to/nvcc)")
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null) || gpu=""
gpu=${gpu%%$'\n'*}
say "GPU: ${gpu:-none (nvidia-smi found no GPU)}"
for t in gcc g++ make python3 timeout; do
  command -v "$t" >/dev/null || missing+=("$t")
done
say "gcc: $(gcc -dumpfullversion 2>/dev/null || echo missing)"
# site-packages of every python3 on the machine (the image's PyTorch venv too)
sitepkgs() {
  local py
  for py in python3 /usr/bin/python3 /opt/*/bin/python3 /usr/local/bin/python3; do
    command -v "$py" >/dev/null 2>&1 &&
      "$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' \
        2>/dev/null
  done | sort -u
}
# NCCL: NCCL_HOME, else the pip wheel (the NCCL the image's PyTorch loads),
# else the toolkit's or the system's
if [ -z "${NCCL_HOME:-}" ]; then
  while read -r d; do
    if [ -e "$d/nvidia/nccl/include/nccl.h" ] && [ -e "$d/nvidia/nccl/lib/libnccl.so.2" ]; then
      NCCL_HOME=$d/nvidia/nccl
      break
    fi
  done < <(sitepkgs)
fi
if [ -n "${NCCL_HOME:-}" ]; then
  say "NCCL: $NCCL_HOME (include/, lib/libnccl.so.2)"
  [ -e "$NCCL_HOME/include/nccl.h" ] && [ -e "$NCCL_HOME/lib/libnccl.so.2" ] ||
    missing+=("NCCL at NCCL_HOME=$NCCL_HOME (include/nccl.h, lib/libnccl.so.2)")
elif [ -e "$CUDA_HOME/include/nccl.h" ] || [ -e /usr/include/nccl.h ]; then
  say "NCCL: with the toolkit or the system ($(ls "$CUDA_HOME"/include/nccl.h /usr/include/nccl.h 2>/dev/null | head -1))"
else
  missing+=("NCCL (nccl.h, libnccl.so.2: the pip wheel nvidia-nccl-cu13, or NCCL_HOME=DIR)")
fi
if ls "$CUDA_HOME"/lib64/libcublasLt.so* >/dev/null 2>&1; then
  say "cuBLASLt: $(ls "$CUDA_HOME"/lib64/libcublasLt.so* | head -1)"
else
  missing+=("cuBLASLt ($CUDA_HOME/lib64/libcublasLt.so)")
fi
deps=${GPU_HOST_DEPS:-build-gpu-deps}
hostdeps=()
for h in jansson utf8proc; do
  if echo "#include <$h.h>" | gcc -E -x c - >/dev/null 2>&1; then
    say "$h: the system's"
  elif [ -e "$deps/usr/include/$h.h" ]; then
    say "$h: $deps (Debian's, unpacked)"
    hostdeps=(GPU_HOST_DEPS="$deps")
  else
    missing+=("$h headers and library (run 'make gpu-host-deps' on a Debian machine and bring build-gpu-deps/)")
  fi
done
llmc=""
for d in "${LLMC_DIR:-}" build-llmc ../shared/anchors/llm.c; do
  [ -n "$d" ] && [ -e "$d/train_gpt2.cu" ] && { llmc=$d; break; }
done
say "llm.c: ${llmc:-not found (make gpu-llmc, or LLMC_DIR): its phase is skipped}"
if [ ${#missing[@]} -gt 0 ]; then
  say "preflight: missing, nothing built:"
  printf '   - %s\n' "${missing[@]}"
  exit 2
fi
say "preflight: everything the build needs is here"

# ---- 2. build ------------------------------------------------------------
mk=(make -j"$(nproc)" WERROR= NVCC="$NVCC" CUDA_HOME="$CUDA_HOME" ${NCCL_HOME:+NCCL_HOME="$NCCL_HOME"} "${hostdeps[@]}")
if [ "${SKIFF_GPU_NO_BUILD:-0}" != 1 ]; then
  phase build "${SKIFF_GPU_BUILD_LIMIT:-300}" "${mk[@]}" build/bin/skiff-train build/tests/gpu/gpu_tool || exit 1
  grep -c ' warning: ' "$out/build.log" | xargs -I{} echo "   {} compiler warnings (build.log)"
fi
ST=$root/build/bin/skiff-train
TOOL=$root/build/tests/gpu/gpu_tool
[ "${SKIFF_GPU_STOP_AFTER:-}" = build ] && { say "stopping after the build (SKIFF_GPU_STOP_AFTER)"; exit 0; }
if [ -z "$gpu" ]; then
  say "no GPU: preflight and build passed; nothing to run on a device"
  exit 3
fi

# ---- 3. bench (what we most need) ---------------------------------------
B=${SKIFF_GPU_BATCH:-64}
bench=(bench --model d12 --seq 1024 --precision bf16 --batch "$B" --steps 20)
phase gemm 60 "$TOOL" gemm --size 8192 --iters 100
phase bench-zero0 120 "$TOOL" "${bench[@]}" --zero 0 --ops "$out/ops.tsv"
phase bench-zero1 90 "$TOOL" "${bench[@]}" --zero 1 --shards 8
phase bench-att128 90 env SKIFF_CUDA_ATTENTION=128 "$TOOL" "${bench[@]}" --zero 0 --ops "$out/ops-att128.tsv"
phase bench-noepi 90 env SKIFF_CUDA_EPILOGUES=none "$TOOL" "${bench[@]}" --zero 0 --ops "$out/ops-noepi.tsv"
grep -h '^bench:' "$out"/bench-*.log 2>/dev/null | sed 's/^/   /'

# ---- 4. llm.c on the same card -------------------------------------------
if [ -n "$llmc" ]; then
  w=$root/build/llmc-run
  rm -rf "$w" && mkdir -p "$w/data" && cp -r "$llmc"/train_gpt2.cu "$llmc"/llmc "$w/"
  # CUDA 13 takes a cudaMemLocation where llm.c (written for CUDA 12) passes
  # cudaCpuDeviceId: the one change its copy needs to compile with nvcc 13
  if [ "$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')" -ge 13 ] 2>/dev/null; then
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
      "$w/llmc/cuda_utils.cuh"
  fi
  # llm.c reads GPU clocks through NVML when the toolkit has its header
  nvml=""
  [ -e "$CUDA_HOME/include/nvml.h" ] && nvml=-lnvidia-ml
  phase llmc-build 180 bash -c "cd '$w' && '$NVCC' -O3 -t=0 --use_fast_math -std=c++17 -arch=sm_90 \
    -I'$CUDA_HOME/include' train_gpt2.cu -L'$CUDA_HOME/lib64' -L'$CUDA_HOME/lib64/stubs' \
    -lcublas -lcublasLt $nvml -o train_gpt2cu" &&
    phase llmc-data 60 bash -c "'$TOOL' mkshard --out '$w/data/train_000000.bin' --tokens 20000000 --vocab 50257 &&
      '$TOOL' mkshard --out '$w/data/val_000000.bin' --tokens 1000000 --vocab 50257" &&
    # -v 1000 -m 1: validation (llm.c divides by -v, so not 0) only at the
    # first and last step, on one batch; -s 0: no sampling
    phase llmc-run 120 bash -c "cd '$w' && ./train_gpt2cu -e d12 -i 'data/train_*.bin' -j 'data/val_*.bin' -b $B -t 1024 \
      -d $((B * 1024)) -x 30 -v 1000 -m 1 -s 0 -h 0 -n 0"
  grep -E '^step +(10|20|30)/' "$out/llmc-run.log" 2>/dev/null | sed 's/^/   llm.c: /'
fi

# ---- 5. the model, calibrated ----------------------------------------------
if [ -s "$out/ops.tsv" ]; then
  phase budget 30 "$TOOL" budget --ptxas-dir build/trainer/cuda --calibrate "$out/ops.tsv" &&
    grep -E 'estimate|calibrated|range' "$out/budget.log" | sed 's/^/   /'
fi

# ---- 6. correctness ------------------------------------------------------
phase gpu-tests 240 env BUILD="$root/build" tests/gpu/run-tests.sh
grep -c '^PASS' "$out/gpu-tests.log" 2>/dev/null | xargs -I{} echo "   {} passed"
grep '^FAIL' "$out/gpu-tests.log" 2>/dev/null | sed 's/^/   /'
# tensor and pipeline parallelism, ZeRO-3 and recomputation on one card's
# worth of ranks (TF32 matmuls: a wider fp32 tolerance than the
# emulation's 2e-5; --pp's host-staged sendrecv between ranks on one GPU)
phase parallel 300 env BUILD="$root/build" SKIFF_PARALLEL_TEST_BIN="$ST" SKIFF_PARALLEL_TEST_MODEL=small \
  SKIFF_PARALLEL_TEST_SEQ=128 SKIFF_PARALLEL_TEST_BATCH=2 SKIFF_PARALLEL_TEST_STEPS=5 SKIFF_PARALLEL_TEST_TOL=5e-4 \
  SKIFF_PARALLEL_TEST_BF16_TOL=1e-2 tests/gpu/parallel.sh
grep -E '^(PASS|FAIL)' "$out/parallel.log" 2>/dev/null | sed 's/^/   /'

# ---- 7. the rest ---------------------------------------------------------
phase bench-e2e 180 env BUILD="$root/build" tests/gpu/bench.sh

if [ ${#failed[@]} -gt 0 ]; then
  say "done; failed: ${failed[*]}"
  exit 1
fi
say "done; every phase passed"
