#!/bin/bash
# GPU benchmark of skiff-train's CUDA path: GPT-2 124M (d12: L12 C768, T=1024,
# vocab 50257 padded to 50304), bf16, the largest micro-batch that fits.
# Prints a markdown table: tokens/s, MFU against 989 TFLOP/s (H100 SXM dense
# bf16) and against the bf16 GEMM peak measured here by cuBLASLt, memory.
# FLOPs per token = 6N + 6*L*C*T (N = parameters incl. the padded vocab rows).
# Rows: the model step alone (gpu_tool bench: forward, backward, AdamW on
# synthetic tokens) and skiff-train end to end (data loader, logging), each
# with --zero 0 and --zero 1 (gpu_tool bench: rank 0's step of an 8-GPU
# ZeRO-1 run, its optimizer on 1/8 of the parameters; skiff-train: one rank,
# where ZeRO-1 adds the gather/cast path).
# Needs one GPU; about 2-3 minutes on an H100. `make gpu-bench` runs it.
set -u
BUILD=${BUILD:-$(cd "$(dirname "$0")/../.." && pwd)/build}
ST=$BUILD/bin/skiff-train
TOOL=$BUILD/tests/gpu/gpu_tool
MODEL=${SKIFF_BENCH_MODEL:-d12}
SEQ=${SKIFF_BENCH_SEQ:-1024}
STEPS=${SKIFF_BENCH_STEPS:-20}
BATCH=${SKIFF_BENCH_BATCH:-auto}    # micro-batch; auto = largest of 64/48/32/... that fits
GEMM=${SKIFF_BENCH_GEMM:-8192}      # size of the square GEMM for the peak
PEAK_SPEC=989
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2" | head -1; }

gemm=$("$TOOL" gemm --size "$GEMM" --iters 100) || { echo "bench: GEMM microbenchmark failed (no GPU?)" >&2; exit 1; }
echo "$gemm" >&2
peak=$(field tflops "$gemm")
device=$(sed -n 's/.*device="\([^"]*\)".*/\1/p' <<<"$gemm")

rows=()
B=""
for z in 0 1; do
  out=$("$TOOL" bench --model "$MODEL" --seq "$SEQ" --precision bf16 --batch "${B:-$BATCH}" --zero "$z" --steps "$STEPS") ||
    { echo "bench: gpu_tool bench --zero $z failed" >&2; exit 1; }
  echo "$out" >&2
  B=$(field batch "$out")
  params=$(field params "$out")
  tps=$(field tokens_per_s "$out")
  tf=$(field tflops "$out")
  rows+=("| model step, zero $z | $B | $tps | $(field step_ms "$out") | $(awk -v a="$tf" -v b=$PEAK_SPEC 'BEGIN{printf "%.1f%%", 100*a/b}') | $(awk -v a="$tf" -v b="$peak" 'BEGIN{printf "%.1f%%", 100*a/b}') | $(field model_gib "$out") / $(field device_used_gib "$out") GiB |")
done

# End to end through skiff-train on a synthetic GPT-2-vocabulary shard.
read -r L C V < <(awk -v m="$MODEL" 'BEGIN{ if (m=="d12") print 12, 768, 50257; else if (m=="d6") print 6, 384, 50257;
  else if (m=="small") print 6, 384, 256; else if (m=="mini") print 4, 128, 256; else if (m=="tiny") print 2, 64, 256;
  else print 0, 0, 0 }')
need=$(( B * SEQ * (STEPS + 6) + SEQ * 4 ))
"$TOOL" mkshard --out "$tmp/train_000.bin" --tokens "$need" --vocab "$V" >/dev/null || exit 1
for z in 0 1; do
  "$ST" train --model "$MODEL" --data "$tmp/train_*.bin" --batch "$B" --seq "$SEQ" --steps $((STEPS + 5)) \
    --device cuda --precision bf16 --zero "$z" --log "$tmp/e2e$z.jsonl" >"$tmp/e2e$z.out" 2>&1 ||
    { echo "bench: skiff-train --zero $z failed: $(tail -3 "$tmp/e2e$z.out")" >&2; exit 1; }
  # median tokens/s over the steps after the first 5 (warm-up)
  tps=$(grep -o '"tokens_per_s":[0-9.]*' "$tmp/e2e$z.jsonl" | cut -d: -f2 | tail -n +6 | sort -n |
        awk '{ v[NR] = $1 } END { printf "%.0f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  ms=$(grep -o '"ms":[0-9.]*' "$tmp/e2e$z.jsonl" | cut -d: -f2 | tail -n +6 | sort -n | awk '{ v[NR] = $1 } END { printf "%.1f", v[int((NR + 1) / 2)] }')
  mem=$(sed -n 's/.*GPU memory: \([0-9.]*\) GiB allocated by the model, \([0-9.]*\) GiB in use.*/\1 \/ \2 GiB/p' "$tmp/e2e$z.out")
  tf=$(awk -v t="$tps" -v n="$params" -v l="$L" -v c="$C" -v s="$SEQ" 'BEGIN{ printf "%.1f", t * (6 * n + 6 * l * c * s) / 1e12 }')
  rows+=("| skiff-train end to end, zero $z | $B | $tps | $ms | $(awk -v a="$tf" -v b=$PEAK_SPEC 'BEGIN{printf "%.1f%%", 100*a/b}') | $(awk -v a="$tf" -v b="$peak" 'BEGIN{printf "%.1f%%", 100*a/b}') | $mem |")
done

echo
echo "### skiff-train CUDA, $MODEL, T=$SEQ, bf16 on $device"
echo
echo "bf16 cuBLASLt GEMM ${GEMM}^3 measured: **$peak TFLOP/s** (spec: $PEAK_SPEC dense)"
echo
echo "| run | micro-batch | tokens/s | step ms | MFU vs $PEAK_SPEC TF | MFU vs measured GEMM peak | memory (model / device in use) |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
best=$(printf '%s\n' "${rows[@]}" | awk -F'|' '{ gsub(/ /, "", $4); if ($4 + 0 > m) m = $4 + 0 } END { print m }')
echo "Target >= 600000 tokens/s on one H100: best $best -> $(awk -v b="$best" 'BEGIN{ print (b >= 600000 ? "met" : "NOT met") }')"
