#!/bin/bash
# The part of skiff-train's CUDA path that can be checked on a machine without
# a GPU (CI has nvcc but no GPU): the CUDA build links against the CUDA
# runtime, cuBLASLt and NCCL; the kernels give the CPU reference's results when
# emulated on CPU threads (tests/gpu/emu); --device cuda fails with a clear
# message instead of crashing; the host-only helpers work. The GPU tests are
# run-tests.sh.
source "$(dirname "$0")/../lib.sh"
ST=$BUILD/bin/skiff-train
TOOL=$BUILD/tests/gpu/gpu_tool
if [ ! -x "$TOOL" ]; then
  t_skip "cuda build" "nvcc was not found at build time, the CUDA path is not built"
  t_done
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

libs=$(ldd "$ST" 2>&1)
if grep -q 'libcudart' <<<"$libs" && grep -q 'libcublasLt' <<<"$libs" && grep -q 'libnccl' <<<"$libs" &&
   ! grep -q 'not found' <<<"$libs"; then
  t_pass "skiff-train links the CUDA runtime, cuBLASLt and NCCL"
else
  t_fail "skiff-train links the CUDA runtime, cuBLASLt and NCCL" "$libs"
fi

t_check "host-side token index for the deterministic embedding backward" "$TOOL" csr-selftest
# The kernels themselves, run on CPU threads against the CPU reference layers
# (prints its own PASS/FAIL lines; a failure also fails this script).
if ! "$BUILD/tests/gpu/kernels_emu"; then t_fail "emulated CUDA kernels" "see the FAIL lines above"; fi
# The whole CUDA path (model wiring, cuBLASLt calls as this code reads the API,
# AdamW) on the CPU emulation against the CPU model: tiny, bf16, one batch.
EMU_TOOL=$BUILD/emu/tests/gpu/gpu_tool
if [ -x "$EMU_TOOL" ]; then
  if out=$("$EMU_TOOL" check --model tiny --batch 2 --seq 64 --precision bf16 2>&1); then
    t_pass "emulated CUDA model matches the CPU model (tiny, bf16: logits, loss, all gradients, AdamW)"
  else
    t_fail "emulated CUDA model matches the CPU model (tiny, bf16)" "$(grep -E 'FAIL|gpu_tool' <<<"$out" | head)"
  fi
  # the same without cuBLASLt's fused epilogues (DGELU, BGRADB), as when a
  # cuBLASLt has no algorithm for them: the own GELU' and column-sum kernels
  if out=$(SKIFF_EMU_NO_FUSED_EPILOGUES=1 "$EMU_TOOL" check --model tiny --batch 2 --seq 64 --precision bf16 2>&1) &&
     grep -q 'using separate kernels instead' <<<"$out"; then
    t_pass "emulated CUDA model without the fused cuBLASLt epilogues matches the CPU model (fallback kernels)"
  else
    t_fail "emulated CUDA model without the fused epilogues" "$(grep -E 'FAIL|gpu_tool|separate' <<<"$out" | head)"
  fi
  # gpu_tool bench --zero 1 --shards 2: the device's own ZeRO-1 step, its
  # optimizer on rank 0's half of the parameters; --ops: the per-op table
  if out=$("$EMU_TOOL" bench --model tiny --batch 2 --seq 64 --precision bf16 --steps 1 --zero 1 --shards 2 \
    --ops "$tmp/ops.tsv" 2>&1) && [[ $out =~ zero=1\ shards=2\ .*\ params=([0-9]+)\ opt_params=([0-9]+) ]] &&
    ((BASH_REMATCH[2] * 2 >= BASH_REMATCH[1] && BASH_REMATCH[2] * 2 - BASH_REMATCH[1] < 256)) &&
    grep -q '^attention dkdv' "$tmp/ops.tsv" && grep -q '^qkv fwd.*BIAS algo' "$tmp/ops.tsv"; then
    t_pass "gpu_tool bench --zero 1 --shards 2: optimizer on half the parameters (${BASH_REMATCH[2]} of ${BASH_REMATCH[1]}), per-op table with cuBLASLt notes"
  else
    t_fail "gpu_tool bench --zero 1 --shards 2 (emulated)" "$out $(head -5 "$tmp/ops.tsv" 2>/dev/null)"
  fi
  # the analytic model calibrated by that table, and refusing one of another shape
  if out=$("$TOOL" budget --model tiny --batch 2 --seq 64 --calibrate "$tmp/ops.tsv" 2>&1) &&
    [[ $out =~ calibrated\ \(([0-9]+)\ measured\ ops ]] && ((BASH_REMATCH[1] >= 25)) &&
    grep -q '^range: ' <<<"$out" && ! "$TOOL" budget --calibrate "$tmp/ops.tsv" >/dev/null 2>&1; then
    t_pass "gpu_tool budget --calibrate: ${BASH_REMATCH[1]} ops measured, the rest estimated; a table of another shape is refused"
  else
    t_fail "gpu_tool budget --calibrate" "$(tail -3 <<<"$out")"
  fi
else
  t_skip "emulated CUDA model" "build/emu/tests/gpu/gpu_tool is not built"
fi
t_check "synthetic shard" "$TOOL" mkshard --out "$tmp/train_000.bin" --tokens 100000 --vocab 256 --text

# The CUDA training loop on the emulation (tiny shapes: an emulated step takes
# about a second): the resume rules of trainer/policy.c, shared with the CPU.
EMU_ST=$BUILD/emu/bin/skiff-train
if [ -x "$EMU_ST" ]; then
  EARGS=(train --model tiny --data "$tmp/train_*.bin" --batch 1 --seq 16 --device cuda --precision bf16)
  "$EMU_ST" "${EARGS[@]}" --steps 2 --ckpt-dir "$tmp/ck" --quiet >/dev/null 2>&1
  out=$("$EMU_ST" "${EARGS[@]}" --steps 2 --ckpt-dir "$tmp/ck" --resume 2>&1); rc=$?
  if [ "$rc" -eq 0 ] && grep -q 'nothing left to do' <<<"$out"; then
    t_pass "CUDA: --resume of a finished run exits 0 (the CPU's rule, so a requeued job ends)"
  else
    t_fail "CUDA: --resume of a finished run exits 0" "exit $rc: $out"
  fi
  # One policy, one checkpoint format: a run saved on the CPU resumes on CUDA
  # and the other way round, and follows the uninterrupted CPU run (fp32 on
  # the CUDA side: TF32 matmul inputs; 2e-3 here, 2 steps after the resume).
  XARGS=(train --model tiny --data "$tmp/train_*.bin" --batch 1 --seq 16 --steps 4 --quiet)
  xloss() { grep -o '"loss":[0-9.]*' "$1" | cut -d: -f2 | tr '\n' ' '; }
  "$ST" "${XARGS[@]}" --device cpu --log "$tmp/xref.jsonl" >/dev/null 2>&1
  "$ST" "${XARGS[@]}" --device cpu --stop-after 2 --ckpt-dir "$tmp/xc" >/dev/null 2>&1 &&
    "$EMU_ST" "${XARGS[@]}" --device cuda --precision fp32 --resume --ckpt-dir "$tmp/xc" --log "$tmp/xc.jsonl" \
      >"$tmp/xc.out" 2>&1
  xrc=$?
  "$EMU_ST" "${XARGS[@]}" --device cuda --precision fp32 --stop-after 2 --ckpt-dir "$tmp/xg" >/dev/null 2>&1 &&
    "$ST" "${XARGS[@]}" --device cpu --resume --ckpt-dir "$tmp/xg" --log "$tmp/xg.jsonl" >"$tmp/xg.out" 2>&1
  xrc=$((xrc + $?))
  ref=$(xloss "$tmp/xref.jsonl") c2g=$(xloss "$tmp/xc.jsonl") g2c=$(xloss "$tmp/xg.jsonl")
  if [ "$xrc" -eq 0 ] && awk -v r="$ref" -v a="$c2g" -v b="$g2c" 'BEGIN { n = split(r, x); split(a, y); split(b, z)
       if (n != 4 || split(a, y) != 2 || split(b, z) != 2) exit 1
       for (i = 1; i <= 2; i++) if ((x[i + 2] - y[i])^2 > 4e-6 || (x[i + 2] - z[i])^2 > 4e-6) exit 1 }'; then
    t_pass "a checkpoint moves between devices: CPU -> CUDA and CUDA -> CPU resume steps 3-4 like the CPU run within 2e-3 ($ref| $c2g| $g2c)"
  else
    t_fail "a checkpoint moves between devices (CPU -> CUDA, CUDA -> CPU)" \
      "exit $xrc; cpu: $ref cpu->cuda: $c2g cuda->cpu: $g2c; $(tail -2 "$tmp/xc.out" "$tmp/xg.out" | tr '\n' ' ')"
  fi
  # fp16 whose every step overflows: the loss scale stops at its floor and the
  # run fails with a clear error after SKIFF_TRAIN_MAX_SKIPPED skipped steps
  t_fails_with "CUDA fp16: persistent overflow is an error after N skipped steps, not an endless halving" \
    'fp16: 3 steps in a row overflowed.*use --precision bf16' \
    env SKIFF_TRAIN_INJECT_OVERFLOW_STEP=1+ SKIFF_TRAIN_MAX_SKIPPED=3 \
    "$EMU_ST" train --model tiny --data "$tmp/train_*.bin" --batch 1 --seq 16 --device cuda --precision fp16 --steps 10
  # fp16 save -> resume is bit-identical across a skipped step: the loss
  # scale, its good-step count and the skipped count (AdamW's step counter
  # leaves skipped steps out) travel in the checkpoint
  HARGS=(train --model tiny --data "$tmp/train_*.bin" --batch 1 --seq 16 --device cuda --precision fp16 --steps 5
    --quiet)
  export SKIFF_TRAIN_INJECT_OVERFLOW_STEP=2 SKIFF_TRAIN_SCALE_WINDOW=2
  "$EMU_ST" "${HARGS[@]}" --log "$tmp/h.jsonl" >"$tmp/h.out" 2>&1 &&
    "$EMU_ST" "${HARGS[@]}" --stop-after 3 --ckpt-dir "$tmp/hc" >/dev/null 2>&1 &&
    "$EMU_ST" "${HARGS[@]}" --resume --ckpt-dir "$tmp/hc" --log "$tmp/hr.jsonl" >"$tmp/hr.out" 2>&1
  hrc=$?
  unset SKIFF_TRAIN_INJECT_OVERFLOW_STEP SKIFF_TRAIN_SCALE_WINDOW
  href=$(xloss "$tmp/h.jsonl") hres=$(xloss "$tmp/hr.jsonl")
  if [ "$hrc" -eq 0 ] && [ -n "$hres" ] && [ "$(awk '{ print $4, $5 }' <<<"$href")" = "$(awk '{ print $1, $2 }' <<<"$hres")" ]; then
    t_pass "CUDA fp16: resume after a skipped step continues bit for bit (steps 4-5: $hres)"
  else
    t_fail "CUDA fp16: resume after a skipped step continues bit for bit" \
      "exit $hrc; uninterrupted: $href resumed: $hres; $(tail -2 "$tmp/hr.out" | tr '\n' ' ')"
  fi
  # ZeRO-1/2 gather the updated bf16 weights (not the fp32 master): two ranks
  # (host-staged) with --zero 1 and 2 follow --zero 0 (same global batch)
  run2() {  # run2 ZERO OUT
    local port=$((20000 + RANDOM % 20000)) pids=() rc=0
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$EMU_ST" "${EARGS[@]}" --steps 3 --zero "$1" --timeout 60 --log "$2" --quiet >"$2.r$r" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
  }
  if run2 0 "$tmp/z0.jsonl" && run2 1 "$tmp/z1.jsonl" && run2 2 "$tmp/z2.jsonl"; then
    l0=$(grep -o '"loss":[0-9.]*' "$tmp/z0.jsonl" | cut -d: -f2 | tr '\n' ' ')
    l1=$(grep -o '"loss":[0-9.]*' "$tmp/z1.jsonl" | cut -d: -f2 | tr '\n' ' ')
    l2=$(grep -o '"loss":[0-9.]*' "$tmp/z2.jsonl" | cut -d: -f2 | tr '\n' ' ')
    if awk -v a="$l0" -v b="$l1" -v c="$l2" 'BEGIN { n = split(a, x); split(b, y); split(c, z)
         for (i = 1; i <= n; i++) if ((x[i] - y[i])^2 > 1e-4 || (x[i] - z[i])^2 > 1e-4) exit 1
         exit n != 3 }'; then
      t_pass "CUDA bf16, 2 ranks: --zero 1 and 2 (bf16 weight all-gather) follow --zero 0 within 1e-2 ($l0| $l1| $l2)"
    else
      t_fail "CUDA bf16, 2 ranks: --zero 1 and 2 follow --zero 0" "zero0: $l0 zero1: $l1 zero2: $l2"
    fi
  else
    t_fail "CUDA bf16, 2 ranks with --zero 0/1/2" "$(tail -2 "$tmp"/z*.jsonl.r* | tr '\n' ' ')"
  fi
else
  t_skip "CUDA training loop on the emulation" "build/emu/bin/skiff-train is not built"
fi

# The data file is valid; what must fail is the device.
if "$TOOL" gemm --size 256 --iters 1 >/dev/null 2>&1; then
  t_skip "no-GPU error message" "this machine has a usable GPU; run tests/gpu/run-tests.sh"
else
  t_fails_with "--device cuda without a GPU says so" 'no usable GPU.*--device cpu' \
    "$ST" train --model small --data "$tmp/train_*.bin" --batch 2 --seq 64 --steps 1 --device cuda --precision bf16
  t_fails_with "--precision is checked" "precision" \
    "$ST" train --model small --data "$tmp/train_*.bin" --batch 2 --seq 64 --steps 1 --device cuda --precision fp8
fi
t_done
