#!/bin/bash
# GPU tests of skiff-train's CUDA path (needs one NVIDIA GPU, sm_90). Run with
# `make gpu-test`, or directly after building build/bin/skiff-train and
# build/tests/gpu/gpu_tool. Each case prints PASS:/FAIL:/SKIP:; exit status 1
# when any case failed. Takes about 1-2 minutes on an H100.
#   1. CUDA vs the CPU reference, same weights and batch: probabilities, loss,
#      every gradient, one AdamW step, bit-identical second backward — for
#      fp32 (TF32), bf16 and fp16, head sizes 16/32/64, a partial 64-row tile.
#   2. 10-step loss trajectory: CUDA fp32 against the CPU path, and bf16 learns.
#   3. save -> resume gives the same losses, bit for bit (printed to 6 digits).
#   4. 2 ranks sharing the GPU through the host-staged backend equal 1 rank at
#      the same global batch (ZeRO 0, ZeRO 1 and ZeRO-3).
#   5. fp16: an injected overflow is skipped and the loss scale recovers; a
#      persistent one fails after SKIFF_TRAIN_MAX_SKIPPED steps.
#   6. resuming a finished run exits 0; a dead or stopped peer is an error
#      within --timeout (peer-death.sh with the real binary).
# Overrides (used by `make cuda-emu-test`, which runs this against the CPU
# emulation where only tiny models are affordable): SKIFF_GPU_TEST_MODEL
# (small), SKIFF_GPU_TEST_SEQ (128), SKIFF_GPU_TEST_BATCH (4, even),
# SKIFF_GPU_TEST_QUICK=1 (only the three precision checks in part 1), BUILD.
source "$(dirname "$0")/../lib.sh"
MODEL=${SKIFF_GPU_TEST_MODEL:-small}
SEQ=${SKIFF_GPU_TEST_SEQ:-128}
BATCH=${SKIFF_GPU_TEST_BATCH:-4}
HALF=$((BATCH / 2))
STEPS=${SKIFF_GPU_TEST_STEPS:-10}   # trajectory length (the resume test saves at STEPS/2)
MID=$((STEPS / 2))
ST=$BUILD/bin/skiff-train
TOOL=$BUILD/tests/gpu/gpu_tool
for b in "$ST" "$TOOL"; do
  [ -x "$b" ] || { echo "FAIL: $b is not built (make gpu-test builds it)"; exit 1; }
done
if ! "$TOOL" gemm --size 256 --iters 1 >/dev/null 2>&1; then
  t_skip "all GPU tests" "no usable GPU here: $("$TOOL" gemm --size 256 --iters 1 2>&1 | tail -1)"
  t_done
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
log() { echo "[$(date +%T)] $*"; }
# losses FILE.jsonl: one loss per line
losses() { grep -o '"loss":[-0-9.eE+naif]*' "$1" | cut -d: -f2; }
# close A B TOL: every line of A and B (loss lists) differ by at most TOL
close() { paste "$1" "$2" | awk -v t="$3" 'NF != 2 || ($1 - $2 > t || $2 - $1 > t) { bad = 1; print "  step " NR ": " $1 " vs " $2 } END { exit bad || NR == 0 }'; }

"$TOOL" mkshard --out "$tmp/train_000.bin" --tokens 2000000 --vocab 256 --text >/dev/null || { echo "FAIL: mkshard"; exit 1; }
DATA="$tmp/train_*.bin"
COMMON=(--model "$MODEL" --data "$DATA" --seq "$SEQ" --lr 1e-3 --warmup 2)

# ---- 1. CUDA vs CPU ---------------------------------------------------------
check() {
  local name="CUDA vs CPU: $*${CHECK_LABEL:+ ($CHECK_LABEL)}" out
  log "$name"
  if out=$("$TOOL" check "$@" 2>&1); then t_pass "$name"; else t_fail "$name" "$(grep -E 'FAIL|gpu_tool' <<<"$out" | head -20)"; fi
  sed 's/^\(PASS\|FAIL\):/  \1 -/' <<<"$out"   # details, not counted
}
check --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --precision fp32
check --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --precision bf16
check --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --precision fp16
if [ "${SKIFF_GPU_TEST_QUICK:-0}" != 1 ]; then
  # without cuBLASLt's DGELU/BGRADB epilogues (own GELU' and column sums)
  SKIFF_CUDA_FUSED_EPILOGUES=0 CHECK_LABEL="no fused epilogues" check --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --precision bf16
  check --model small --batch 3 --seq 96 --precision bf16   # partial tile, odd batch
  check --model tiny --batch 4 --seq 64 --precision bf16    # head size 16
  check --model mini --batch 4 --seq 128 --precision fp32   # head size 32
fi

# ---- 2. trajectories ---------------------------------------------------------
log "$STEPS-step trajectory: CUDA fp32 vs CPU"
"$ST" train "${COMMON[@]}" --batch "$BATCH" --steps "$STEPS" --device cpu --log "$tmp/cpu.jsonl" >"$tmp/cpu.out" 2>&1
"$ST" train "${COMMON[@]}" --batch "$BATCH" --steps "$STEPS" --device cuda --precision fp32 --log "$tmp/f32.jsonl" >"$tmp/f32.out" 2>&1
losses "$tmp/cpu.jsonl" >"$tmp/cpu.l"; losses "$tmp/f32.jsonl" >"$tmp/f32.l"
paste "$tmp/cpu.l" "$tmp/f32.l" | sed 's/^/  cpu|cuda-fp32 /'
name="$STEPS-step loss trajectory: CUDA fp32 (TF32) within 0.02 of the CPU path at every step"
if [ "$(wc -l <"$tmp/f32.l")" -eq "$STEPS" ] && close "$tmp/cpu.l" "$tmp/f32.l" 0.02; then
  t_pass "$name"
else
  t_fail "$name" "$(tail -3 "$tmp/f32.out")"
fi

log "$STEPS-step trajectory: bf16, and save -> resume"
"$ST" train "${COMMON[@]}" --batch "$BATCH" --steps "$STEPS" --device cuda --precision bf16 --log "$tmp/a.jsonl" \
  --ckpt-dir "$tmp/ckA" >"$tmp/a.out" 2>&1
losses "$tmp/a.jsonl" >"$tmp/a.l"
sed 's/^/  bf16 /' "$tmp/a.l"
# 10 steps at lr 1e-3 on this text take the loss down by well over 0.5;
# shorter runs (emulation) only check that it falls.
drop=$([ "$STEPS" -ge 10 ] && echo 0.5 || echo 0)
name="bf16 $STEPS-step trajectory: loss falls by more than $drop"
if [ "$(wc -l <"$tmp/a.l")" -eq "$STEPS" ] &&
   awk -v n="$STEPS" -v d="$drop" 'NR == 1 { f = $1 } END { exit !(NR == n && $1 < f - d) }' "$tmp/a.l"; then
  t_pass "$name"
else
  t_fail "$name" "$(tail -3 "$tmp/a.out")"
fi
"$ST" train "${COMMON[@]}" --batch "$BATCH" --steps "$STEPS" --device cuda --precision bf16 --log "$tmp/b.jsonl" \
  --ckpt-dir "$tmp/ckB" --stop-after "$MID" >"$tmp/b1.out" 2>&1
"$ST" train "${COMMON[@]}" --batch "$BATCH" --steps "$STEPS" --device cuda --precision bf16 --log "$tmp/b.jsonl" \
  --ckpt-dir "$tmp/ckB" --resume >"$tmp/b2.out" 2>&1
losses "$tmp/b.jsonl" >"$tmp/b.l"
name="save at step $MID -> resume: steps $((MID + 1))-$STEPS give identical losses (bf16)"
if [ "$(wc -l <"$tmp/b.l")" -eq "$STEPS" ] && cmp -s "$tmp/a.l" "$tmp/b.l"; then
  t_pass "$name"
else
  t_fail "$name" "$(paste "$tmp/a.l" "$tmp/b.l" | tr '\n' ';') $(tail -2 "$tmp/b2.out")"
fi

# ---- 3. two ranks on one GPU (host-staged) ------------------------------------
# run2 ZERO OUT: 2 ranks with --batch BATCH/2 each, the global batch of 1 rank x BATCH.
run2() {
  local zero=$1 out=$2 port=$((20000 + RANDOM % 20000)) pids=() rc=0
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$ST" train "${COMMON[@]}" --batch "$HALF" --steps "$MID" --device cuda --precision fp32 --zero "$zero" \
      --timeout 120 --log "$out.jsonl" >"$out.r$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
log "1 rank vs 2 ranks sharing the GPU"
"$ST" train "${COMMON[@]}" --batch "$BATCH" --steps "$MID" --device cuda --precision fp32 --log "$tmp/one.jsonl" >"$tmp/one.out" 2>&1
losses "$tmp/one.jsonl" >"$tmp/one.l"
# (--zero 3: the weights sharded too, gathered block by block)
for z in 0 1 3; do
  name="2 ranks on one GPU (host-staged, zero $z) match 1 rank at the same global batch (fp32, $MID steps, 2e-3)"
  if run2 "$z" "$tmp/two$z"; then
    losses "$tmp/two$z.jsonl" >"$tmp/two$z.l"
    paste "$tmp/one.l" "$tmp/two$z.l" | sed "s/^/  1rank|2ranks-zero$z /"
    if ! grep -q 'host-staged' "$tmp/two$z.r0"; then
      t_fail "$name" "rank 0 did not pick the host-staged backend: $(head -2 "$tmp/two$z.r0")"
    elif [ "$(wc -l <"$tmp/two$z.l")" -eq "$MID" ] && close "$tmp/one.l" "$tmp/two$z.l" 0.002; then
      t_pass "$name"
    else
      t_fail "$name"
    fi
  else
    t_fail "$name" "a rank failed: $(tail -2 "$tmp/two$z.r0" "$tmp/two$z.r1" | tr '\n' ' ')"
  fi
done

# ---- 4. fp16 overflow ----------------------------------------------------------
log "fp16 injected overflow"
# Scale starts at 65536; window 3: steps 1-2 good, 3 overflows (-> 32768),
# 4-6 good (-> 65536 after step 6).
SKIFF_TRAIN_INJECT_OVERFLOW_STEP=3 SKIFF_TRAIN_SCALE_WINDOW=3 \
  "$ST" train "${COMMON[@]}" --batch "$BATCH" --steps 6 --device cuda --precision fp16 --log "$tmp/h.jsonl" >"$tmp/h.out" 2>&1
losses "$tmp/h.jsonl" >"$tmp/h.l"
grep '^fp16' "$tmp/h.out" | sed 's/^/  /'
if grep -q '^fp16: step 3: gradient overflow, step skipped, loss scale now 32768' "$tmp/h.out" &&
   grep -q '^fp16: step 6: loss scale now 65536' "$tmp/h.out" &&
   [ "$(wc -l <"$tmp/h.l")" -eq 6 ] && ! grep -qiE 'nan|inf' "$tmp/h.l"; then
  t_pass "fp16: overflow at step 3 is skipped, the scale halves and grows back after 3 good steps"
else
  t_fail "fp16: overflow at step 3 is skipped, the scale halves and grows back after 3 good steps" "$(tail -5 "$tmp/h.out")"
fi
t_fails_with "fp16: overflow in every step stops the run after SKIFF_TRAIN_MAX_SKIPPED steps" \
  'fp16: 4 steps in a row overflowed.*--precision bf16' \
  env SKIFF_TRAIN_INJECT_OVERFLOW_STEP=2+ SKIFF_TRAIN_MAX_SKIPPED=4 \
  "$ST" train "${COMMON[@]}" --batch "$BATCH" --steps 20 --device cuda --precision fp16

# ---- 5. resume rules and dead peers ------------------------------------------
out=$("$ST" train "${COMMON[@]}" --batch "$BATCH" --steps "$STEPS" --device cuda --precision bf16 \
  --ckpt-dir "$tmp/ckA" --resume 2>&1); rc=$?
if [ "$rc" -eq 0 ] && grep -q 'nothing left to do' <<<"$out"; then
  t_pass "--resume of a finished run exits 0"
else
  t_fail "--resume of a finished run exits 0" "exit $rc: $out"
fi
if [ "${SKIFF_GPU_TEST_QUICK:-0}" != 1 ]; then
  SKIFF_PEER_TEST_BIN=$ST "$(dirname "$0")/peer-death.sh" | sed 's/^\(PASS\|FAIL\|SKIP\):/  \1 -/'
  if [ "${PIPESTATUS[0]}" -eq 0 ]; then t_pass "dead and stopped peers are errors within --timeout (GPU)"
  else t_fail "dead and stopped peers are errors within --timeout (GPU)"; fi
fi
t_done
