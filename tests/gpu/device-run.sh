#!/bin/bash
# Everything the GPU session runs, in one call of at most 10 minutes:
# build (unless SKIFF_GPU_NO_BUILD=1, e.g. when build/bin/skiff-train and
# build/tests/gpu/gpu_tool were built elsewhere and carried over), the
# analytic budget (to compare with what the GPU measures), the GPU tests,
# then the benchmark. Logs go to $OUT (or ./gpu-logs) as well.
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
{
  echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  if [ "${SKIFF_GPU_NO_BUILD:-0}" != 1 ]; then
    start=$(date +%s)
    make -j"$(nproc)" build/bin/skiff-train build/tests/gpu/gpu_tool >"$out/build.log" 2>&1 ||
      { echo "build failed:"; tail -30 "$out/build.log"; exit 1; }
    echo "== build: $(( $(date +%s) - start )) s"
  fi
  if [ -d build/trainer/cuda ] && ls build/trainer/cuda/*.ptxas >/dev/null 2>&1; then
    build/tests/gpu/gpu_tool budget --ptxas-dir build/trainer/cuda
  else
    build/tests/gpu/gpu_tool budget
  fi
  start=$(date +%s)
  tests/gpu/run-tests.sh; trc=$?
  echo "== gpu tests: $(( $(date +%s) - start )) s, exit $trc"
  start=$(date +%s)
  tests/gpu/bench.sh; brc=$?
  echo "== bench: $(( $(date +%s) - start )) s, exit $brc"
  [ "$trc" -eq 0 ] && [ "$brc" -eq 0 ]
} 2>&1 | tee "$out/device-run.log"
exit "${PIPESTATUS[0]}"
