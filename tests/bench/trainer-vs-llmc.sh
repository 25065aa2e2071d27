#!/bin/bash
# skiff-train's CPU path against llm.c's CPU reference trainer (train_gpt2.c),
# side by side on the same machine: GPT-2 124M (d12), batch 4 x 64 tokens,
# OMP_NUM_THREADS=2 for both, the shape train_gpt2.c hard-codes.
#
# llm.c is built from the anchor checkout (karpathy/llm.c; see LLMC_DIR below)
# with the flags its own Makefile uses (-Ofast -march=native -fopenmp). Its
# inputs are made here: a GPT-2 124M checkpoint in llm.c's format with
# GPT-2-style random weights (timing only: the loss means nothing) and token
# shards from `skiff-train tokenize` (llm.c's shard format). The two trainers
# run alternately, ROUNDS times each, STEPS steps a run; the first SKIP steps
# of every run (page faults, lazily allocated optimizer state) are dropped.
# A step is what each program times itself: data, forward, backward, AdamW
# (skiff-train also computes the gradient norm). Prints the median s/step of
# each, the ratio llm.c / skiff-train (the goal is >= 1.5) and the load.
#
# The machine may be shared: alternating runs see the same neighbours, and
# medians shrug off single slow steps; still read the load line.
# Env: ROUNDS (3), STEPS (6, at most 9: llm.c validates at step 10), SKIP (2),
# THREADS (2), LLMC_DIR (a checkout of llm.c holding train_gpt2.c).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TRAIN=${SKIFF_TRAIN:-$ROOT/build/bin/skiff-train}
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-6} SKIP=${SKIP:-2} THREADS=${THREADS:-2}
if [ "$STEPS" -gt 9 ] || [ "$SKIP" -ge "$STEPS" ]; then
  echo "bench: need SKIP < STEPS <= 9" >&2; exit 2
fi

# The anchor: LLMC_DIR when set (and nothing else), else shared/anchors/llm.c
# beside this checkout or beside the main checkout this one is a worktree of.
find_llmc() {
  local c common
  if [ -n "${LLMC_DIR:-}" ]; then
    [ -f "$LLMC_DIR/train_gpt2.c" ] && { cd "$LLMC_DIR" && pwd; return 0; }
    return 1
  fi
  common=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null)
  for c in "$ROOT/../shared/anchors/llm.c" ${common:+"$(dirname "$common")/../shared/anchors/llm.c"}; do
    [ -f "$c/train_gpt2.c" ] && { cd "$c" && pwd; return 0; }
  done
  return 1
}
if ! LLMC=$(find_llmc); then
  echo "SKIP: skiff-train vs llm.c (no llm.c checkout${LLMC_DIR:+ at LLMC_DIR=$LLMC_DIR}:" \
    "set LLMC_DIR to a karpathy/llm.c tree with train_gpt2.c)"
  exit 0
fi
[ -x "$TRAIN" ] || { echo "bench: $TRAIN is not built (make)" >&2; exit 1; }

W=$(mktemp -d /tmp/skiff-vs-llmc.XXXXXX)
LPID=""
cleanup() { [ -n "$LPID" ] && kill "$LPID" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT

# ---- llm.c: build, checkpoint, data ----------------------------------------
mkdir -p "$W/llmc/dev/data/tinyshakespeare"
cp -r "$LLMC/train_gpt2.c" "$W/llmc/"
[ -d "$LLMC/llmc" ] && cp -r "$LLMC/llmc" "$W/llmc/"
(cd "$W/llmc" && gcc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result train_gpt2.c -lm \
  -o train_gpt2) >"$W/llmc-build.log" 2>&1 ||
  { echo "bench: building llm.c's train_gpt2.c failed:" >&2; cat "$W/llmc-build.log" >&2; exit 1; }

# llm.c's checkpoint: 256 int32 header (magic 20240326, version 3, maxT, V,
# L, NH, C, Vp), then the 16 tensors in its order as float32. Weights
# N(0, 0.02), LayerNorm gains 1, biases 0.
cat >"$W/mkckpt.c" <<'EOF'
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    const long maxT = 1024, V = 50257, Vp = 50304, L = 12, NH = 12, C = 768;
    int32_t h[256] = {20240326, 3, (int32_t)maxT, (int32_t)V, (int32_t)L, (int32_t)NH,
                      (int32_t)C, (int32_t)Vp};
    /* tensor sizes and kind: 0 weight ~N(0,0.02), 1 gain (1), 2 bias (0) */
    long n[16] = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                  L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    int kind[16] = {0, 0, 1, 2, 0, 2, 0, 2, 1, 2, 0, 2, 0, 2, 1, 2};
    FILE *f = fopen(argv[1], "wb");
    if (!f || fwrite(h, sizeof h, 1, f) != 1) return 1;
    uint64_t s = 88172645463325252ull;
    static float buf[1 << 16];
    for (int t = 0; t < 16; t++)
        for (long done = 0; done < n[t];) {
            long k = n[t] - done < (1 << 16) ? n[t] - done : (1 << 16);
            for (long i = 0; i < k; i++) {
                if (kind[t]) { buf[i] = kind[t] == 1 ? 1.0f : 0.0f; continue; }
                double u = 0; /* Irwin-Hall: sum of 4 uniforms, variance 1/3 */
                for (int j = 0; j < 4; j++) {
                    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                    u += (s >> 11) * 0x1.0p-53;
                }
                buf[i] = (float)((u - 2.0) * sqrt(3.0) * 0.02);
            }
            if (fwrite(buf, sizeof(float), (size_t)k, f) != (size_t)k) return 1;
            done += k;
        }
    return fclose(f) ? 1 : 0;
}
EOF
if ! cc -O2 -o "$W/mkckpt" "$W/mkckpt.c" -lm || ! "$W/mkckpt" "$W/llmc/gpt2_124M.bin"; then
  echo "bench: writing the llm.c checkpoint failed" >&2; exit 1
fi

"$TRAIN" tokenize --out "$W/lic" --val-frac 0.1 /usr/share/common-licenses/* >/dev/null 2>&1 ||
  { echo "bench: skiff-train tokenize failed" >&2; exit 1; }
cp "$W/lic_train_000000.bin" "$W/llmc/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
cp "$W/lic_val_000000.bin" "$W/llmc/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"

# ---- the runs ---------------------------------------------------------------
# llm.c prints "step N: train loss X (took Y ms)" and goes on to 40 steps
# with validation and sampling in between: stop it after step STEPS-1.
run_llmc() { # appends s/step of the kept steps to $W/llmc.times
  local out=$W/llmc.out n=0
  : >"$out"
  (cd "$W/llmc" && OMP_NUM_THREADS=$THREADS exec stdbuf -oL ./train_gpt2) >"$out" 2>&1 &
  LPID=$!
  while kill -0 "$LPID" 2>/dev/null; do
    n=$(grep -c '^step [0-9]*: train loss' "$out")
    [ "$n" -ge "$STEPS" ] && break
    sleep 0.2
  done
  kill "$LPID" 2>/dev/null; wait "$LPID" 2>/dev/null; LPID=""
  n=$(grep -c '^step [0-9]*: train loss' "$out")
  if [ "$n" -lt "$STEPS" ]; then
    echo "bench: llm.c stopped after $n steps:" >&2; tail -5 "$out" >&2; return 1
  fi
  sed -n 's/^step \([0-9]*\): train loss .* (took \([0-9.]*\) ms)/\1 \2/p' "$out" |
    awk -v skip="$SKIP" -v steps="$STEPS" '$1 >= skip && $1 < steps { printf "%.4f\n", $2 / 1000 }' \
    >>"$W/llmc.times"
}

run_skiff() { # appends s/step of the kept steps to $W/skiff.times
  rm -f "$W/skiff.jsonl"
  OMP_NUM_THREADS=$THREADS "$TRAIN" train --model d12 --data "$W/lic_train_*.bin" --batch 4 \
    --seq 64 --steps "$STEPS" --threads "$THREADS" --quiet --log "$W/skiff.jsonl" \
    >"$W/skiff.out" 2>&1 || { echo "bench: skiff-train failed:" >&2; tail -5 "$W/skiff.out" >&2; return 1; }
  tail -n +$((SKIP + 1)) "$W/skiff.jsonl" |
    sed -n 's/.*"ms":\([0-9.]*\).*/\1/p' | awk '{ printf "%.4f\n", $1 / 1000 }' >>"$W/skiff.times"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$W/llmc.times"; : >"$W/skiff.times"
for ((r = 1; r <= ROUNDS; r++)); do
  # alternate which goes first, so a neighbour's burst does not always hit the same one
  if ((r % 2)); then
    run_llmc || exit 1; run_skiff || exit 1
  else
    run_skiff || exit 1; run_llmc || exit 1
  fi
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

stats() { sort -n "$1" | awk '{ v[NR] = $1 } END {
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "%.3f %.3f %.3f %d", m, v[1], v[NR], NR }'; }
read -r lm lmin lmax ln <<<"$(stats "$W/llmc.times")"
read -r sm smin smax sn <<<"$(stats "$W/skiff.times")"
ratio=$(awk -v a="$lm" -v b="$sm" 'BEGIN { printf "%.2f", a / b }')
avx512=$(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)

echo "| trainer (d12, B=4, T=64, $THREADS threads) | median s/step | min | max | steps timed |"
echo "|---|---|---|---|---|"
echo "| llm.c train_gpt2.c (gcc -Ofast -march=native -fopenmp) | $lm | $lmin | $lmax | $ln |"
echo "| skiff-train (make) | $sm | $smin | $smax | $sn |"
echo
echo "ratio llm.c / skiff-train (median s/step): ${ratio}x (goal >= 1.5x)"
echo "$ROUNDS alternating rounds x $STEPS steps, first $SKIP of each run dropped; $(nproc) CPUs," \
  "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), avx512f $avx512;" \
  "load average $load0 before, $load1 after; $(date -u +%Y-%m-%d)"
