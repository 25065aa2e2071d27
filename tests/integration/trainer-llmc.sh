#!/bin/bash
# skiff-train against llm.c itself. llm.c's CPU trainer (train_gpt2.c, from
# the llm.c sources kept beside the checkout in ../shared/anchors/llm.c) is
# built here with gcc, as its own Makefile builds it; a patched copy in the
# scratch directory reads its data in order (shuffle off) and stops after 10
# steps. A random checkpoint in llm.c's format and token shards come from
# lib/llmc-random.c (neither implementation's code). Both trainers start
# from the same checkpoint on the same shard with B=4, T=64 and llm.c's
# AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, no weight decay, no clipping,
# no schedule): the step-0 loss must agree within 1e-5 relative and the 10
# losses within 1e-4. Then: `export --llmc` gives a file llm.c reads with
# the loss skiff-train sees, bf16 checkpoints load, bad files are refused,
# `sample --init-from` works, and the CUDA path (on the CPU emulation when
# there is no GPU) starts from the same weights.
# Without llm.c's sources this SKIPs and says where it looked
# (SKIFF_LLMC_DIR=/path/to/llm.c points at a checkout).
# SKIFF_LLMC_SHAPE="maxT V L NH C Vp" runs only part 1 at another shape: the
# 124M one by hand is SKIFF_LLMC_SHAPE="1024 50257 12 12 768 50304" (a 500 MB
# checkpoint, minutes per implementation on 2 cores).
source "$(dirname "$0")/../lib.sh"
t_trainer_init

find_llmc() {
  local common c
  common=$(git -C "$T_ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null)
  # inside the checkout (a shared/ folder carried with it), beside it (CI's
  # clone, /work/main); beside the main checkout when this is a worktree
  for c in "${SKIFF_LLMC_DIR:-}" "$T_ROOT/shared/anchors/llm.c" "$T_ROOT/../shared/anchors/llm.c" \
           ${common:+"$common/../../shared/anchors/llm.c"}; do
    if [ -n "$c" ] && [ -f "$c/train_gpt2.c" ] && [ -d "$c/llmc" ]; then
      (cd "$c" && pwd)
      return 0
    fi
  done
  echo "\$SKIFF_LLMC_DIR, $T_ROOT/shared/anchors/llm.c, $T_ROOT/../shared/anchors/llm.c${common:+, $common/../../shared/anchors/llm.c}"
  return 1
}
if ! LLMC=$(find_llmc); then
  t_skip "conformance with llm.c" "llm.c's sources not found (looked at $LLMC); set SKIFF_LLMC_DIR to a checkout of karpathy/llm.c"
  t_done
fi
echo "llm.c: $LLMC"
W=$TDIR/llmc
mkdir -p "$W/dev/data/tinyshakespeare"
cp -r "$LLMC/train_gpt2.c" "$LLMC/llmc" "$W/"

# The patches: sequential data (its loader's shuffle flag) and 10 steps.
sed -i -e 's/dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 1);/dataloader_init(\&train_loader, train_tokens, B, T, 0, 1, 0);/' \
       -e 's/for (int step = 0; step <= 40; step++)/for (int step = 0; step < 10; step++)/' "$W/train_gpt2.c"
if ! grep -q 'B, T, 0, 1, 0);' "$W/train_gpt2.c" || ! grep -q 'step < 10;' "$W/train_gpt2.c"; then
  t_fail "patching llm.c's train_gpt2.c" "the patch no longer applies to $LLMC/train_gpt2.c"
  t_done
fi
# llm.c's own flags (its Makefile: -Ofast, native, OpenMP)
if ! (cd "$W" && gcc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result train_gpt2.c -lm -o train_gpt2) \
     >"$W/build.log" 2>&1; then
  t_fail "building llm.c's train_gpt2" "$(tail -5 "$W/build.log")"
  t_done
fi
GEN=$BUILD/tests/llmc-random # (tests/integration/lib/llmc-random.c, built by `make test`)
t_program llmc-random "llm.c checkpoints" || t_done

# L=2, NH=4, C=64, maxT=64, GPT-2's vocabulary; text the model can learn
# from (a random 97-token sequence repeated), so that optimizer differences
# move the losses by more than the tolerance within 10 steps.
read -r -a SHAPE <<<"${SKIFF_LLMC_SHAPE:-64 50257 2 4 64 50304}"
"$GEN" ckpt "$W/small.bin" 7 "${SHAPE[@]}"
"$GEN" shard "$W/dev/data/tinyshakespeare/tiny_shakespeare_train.bin" 11 20000 50257 97
"$GEN" shard "$W/dev/data/tinyshakespeare/tiny_shakespeare_val.bin" 12 5000 50257
DATA=$W/dev/data/tinyshakespeare/tiny_shakespeare_train.bin
# llm.c's settings, as flags
LLMC_OPTS=(--batch 4 --seq 64 --lr 1e-4 --warmup 0 --lr-min-frac 1 --beta1 0.9 --beta2 0.999
           --eps 1e-8 --weight-decay 0 --grad-clip 0 --data-order sequential --threads 2 --quiet)

# run_llmc CKPT OUT: llm.c's 10 training losses, one a line
run_llmc() {
  ln -sf "$1" "$W/gpt2_124M.bin"
  (cd "$W" && OMP_NUM_THREADS=2 timeout 600 ./train_gpt2) >"$W/llmc.log" 2>&1
  sed -n 's/^step \([0-9]*\): train loss \([-0-9.]*\).*/\2/p' "$W/llmc.log" >"$2"
}
# compare A B: max |a-b| over the lines, and the relative difference of the first
compare() {
  paste "$1" "$2" | awk 'NF == 2 { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d
                                    if (NR == 1) r = d / ($2 < 0 ? -$2 : $2); n++ }
                         END { printf "%d %.3g %.3g\n", n, m, r }'
}

# ---- 1. the same 10 steps ---------------------------------------------------------
run_llmc "$W/small.bin" "$W/llmc.loss"
if "$TRAIN" train --init-from "$W/small.bin" --data "$DATA" --steps 10 "${LLMC_OPTS[@]}" \
     --log "$W/skiff.jsonl" --ckpt-dir "$W/ck" >"$W/skiff.log" 2>&1; then
  t_losses "$W/skiff.jsonl" >"$W/skiff.loss"
  read -r n maxd rel0 < <(compare "$W/skiff.loss" "$W/llmc.loss")
  a0=$(head -1 "$W/skiff.loss") b0=$(head -1 "$W/llmc.loss")
  paste "$W/skiff.loss" "$W/llmc.loss" | sed 's/^/  skiff-train | llm.c  /'
  if [ "$n" = 10 ] && awk -v r="$rel0" 'BEGIN { exit !(r <= 1e-5) }'; then
    t_pass "step-0 loss: skiff-train $a0, llm.c $b0 (relative difference $rel0 <= 1e-5)"
  else
    t_fail "step-0 loss within 1e-5 relative" "skiff-train $a0, llm.c $b0 ($rel0; $n steps compared); $(tail -3 "$W/llmc.log")"
  fi
  if [ "$n" = 10 ] && awk -v m="$maxd" 'BEGIN { exit !(m <= 1e-4) }'; then
    t_pass "10 training losses within 1e-4 of llm.c's (max difference $maxd; loss $a0 -> $(tail -1 "$W/skiff.loss"))"
  else
    t_fail "10 training losses within 1e-4 of llm.c's" "max difference $maxd over $n steps"
  fi
else
  t_fail "skiff-train train --init-from an llm.c checkpoint" "$(tail -5 "$W/skiff.log")"
fi
if [ -n "${SKIFF_LLMC_SHAPE:-}" ]; then
  echo "shape maxT V L NH C Vp = ${SHAPE[*]}: parts 2-6 run at the default shape only"
  t_done
fi

# ---- 2. export --llmc: llm.c reads it and sees skiff-train's loss -----------------
if "$TRAIN" export --llmc "$W/exported.bin" --ckpt-dir "$W/ck" >"$W/export.log" 2>&1 &&
   "$TRAIN" train --init-from "$W/exported.bin" --data "$DATA" --steps 1 "${LLMC_OPTS[@]}" \
     --log "$W/exp.jsonl" >/dev/null 2>&1; then
  run_llmc "$W/exported.bin" "$W/llmc-exp.loss"
  a=$(t_losses "$W/exp.jsonl" | head -1) b=$(head -1 "$W/llmc-exp.loss")
  if [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = (a - b) / b; exit !(d <= 1e-5 && d >= -1e-5) }'; then
    t_pass "export --llmc after 10 steps: llm.c loads it, loss $b (skiff-train: $a)"
  else
    t_fail "export --llmc: llm.c reads the weights skiff-train trained" "skiff-train $a, llm.c '${b}': $(tail -3 "$W/llmc.log")"
  fi
else
  t_fail "export --llmc" "$(cat "$W/export.log")"
fi

# --bf16: version 5, what llm.c's CUDA trainer loads; the loss moves by bf16 rounding only
if "$TRAIN" export --bf16 --llmc "$W/exported16.bin" --ckpt-dir "$W/ck" >/dev/null 2>&1 &&
   [ "$(od -A n -t d4 -j 4 -N 4 "$W/exported16.bin" | tr -d ' ')" = 5 ] &&
   "$TRAIN" train --init-from "$W/exported16.bin" --data "$DATA" --steps 1 "${LLMC_OPTS[@]}" \
     --log "$W/exp16.jsonl" >/dev/null 2>&1 &&
   awk -v a="$(t_losses "$W/exp16.jsonl")" -v b="$a" 'BEGIN { d = a - b; exit !(d < 0.01 && d > -0.01) }'; then
  t_pass "export --bf16 writes version 5; it trains from loss $(t_losses "$W/exp16.jsonl") (fp32: $a)"
else
  t_fail "export --bf16" "loss '$(t_losses "$W/exp16.jsonl" 2>/dev/null)' vs $a"
fi

# ---- 3. bf16 checkpoints (version 5) load as the same values in fp32 -----------------
"$GEN" ckpt "$W/b16.bin" 9 64 50257 2 4 64 50304 bf16
"$GEN" ckpt "$W/b16w.bin" 9 64 50257 2 4 64 50304 bf16-as-fp32
for f in b16 b16w; do
  "$TRAIN" train --init-from "$W/$f.bin" --data "$DATA" --steps 2 "${LLMC_OPTS[@]}" --log "$W/$f.jsonl" >/dev/null 2>&1
done
if [ -s "$W/b16.jsonl" ] && cmp -s <(t_losses "$W/b16.jsonl") <(t_losses "$W/b16w.jsonl"); then
  t_pass "a bf16 (version 5) checkpoint trains exactly as its values in fp32 ($(t_losses "$W/b16.jsonl" | tr '\n' ' '))"
else
  t_fail "bf16 checkpoint" "$(t_losses "$W/b16.jsonl" | tr '\n' ' ') vs $(t_losses "$W/b16w.jsonl" | tr '\n' ' ')"
fi

# ---- 4. bad files and shapes are refused with the reason ----------------------------
head -c 100000 "$W/small.bin" >"$W/cut.bin"
printf 'not a checkpoint at all, just text that is long enough to have a header ......' >"$W/text.bin"
head -c 1024 /dev/zero >>"$W/text.bin"
t_fails_with "--model that disagrees with the file" "holds maxT=64 V=50257 L=2 NH=4 C=64 Vp=50304, but --model tiny" \
  "$TRAIN" train --model tiny --init-from "$W/small.bin" --data "$DATA" --batch 4 --seq 64 --steps 1
t_fails_with "a truncated checkpoint" "truncated" \
  "$TRAIN" train --init-from "$W/cut.bin" --data "$DATA" --batch 4 --seq 64 --steps 1
t_fails_with "not an llm.c checkpoint" "not llm.c's checkpoint magic" \
  "$TRAIN" train --init-from "$W/text.bin" --data "$DATA" --batch 4 --seq 64 --steps 1
t_fails_with "--seq beyond the file's context" "--seq 65: model small.bin has a context of 64" \
  "$TRAIN" train --init-from "$W/small.bin" --data "$DATA" --batch 4 --seq 65 --steps 1

# ---- 5. sample from an llm.c checkpoint ----------------------------------------------
if [ -f "$BUILD/share/skiff/gpt2-bpe.bin" ]; then
  if out=$(SKIFF_GPT2_BPE=$BUILD/share/skiff/gpt2-bpe.bin "$TRAIN" sample --init-from "$W/exported.bin" \
             --prompt "Hello" --tokens 8 --seed 5 2>&1) && [ "${#out}" -gt 5 ]; then
    t_pass "sample --init-from FILE.bin decodes GPT-2 tokens: $(head -c 60 <<<"$out" | tr '\n' ' ')"
  else
    t_fail "sample --init-from FILE.bin" "$out"
  fi
else
  t_skip "sample --init-from with GPT-2 tokens" "no GPT-2 vocabulary: run make gpt2-bpe"
fi

# ---- 6. the CUDA path starts from the same weights -------------------------------------
# On the CPU emulation of the CUDA runtime (build/emu, built with nvcc's
# headers) unless a GPU is here: tiny byte-vocabulary shape, one step, fp32.
CUDA_TRAIN=$BUILD/emu/bin/skiff-train
[ -e /dev/nvidia0 ] && CUDA_TRAIN=$TRAIN
if [ -x "$CUDA_TRAIN" ]; then
  "$GEN" ckpt "$W/tiny.bin" 5 64 256 2 4 64 256
  "$GEN" shard "$W/tiny_train.bin" 3 5000 256 97
  T1=(--init-from "$W/tiny.bin" --data "$W/tiny_train.bin" --batch 1 --seq 64 --steps 1 --lr 1e-3 --quiet)
  "$TRAIN" train "${T1[@]}" --threads 2 --log "$W/t_cpu.jsonl" >/dev/null 2>&1
  "$CUDA_TRAIN" train "${T1[@]}" --device cuda --precision fp32 --log "$W/t_cuda.jsonl" >"$W/t_cuda.log" 2>&1
  a=$(t_losses "$W/t_cpu.jsonl") b=$(t_losses "$W/t_cuda.jsonl")
  if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(d <= 1e-4 && d >= -1e-4) }'; then
    t_pass "CUDA path ($([ "$CUDA_TRAIN" = "$TRAIN" ] && echo GPU || echo CPU emulation)) from --init-from: loss $b, CPU $a"
  else
    t_fail "CUDA path from --init-from" "CPU '$a', CUDA '$b': $(tail -3 "$W/t_cuda.log")"
  fi
else
  t_skip "CUDA path from --init-from" "nvcc was not found at build time: no CUDA build"
fi
t_done
