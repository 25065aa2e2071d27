#!/bin/bash
# Tensor parallelism (--tp), ZeRO-3 (--zero 3), pipeline parallelism (--pp)
# and activation recomputation (--recompute) on skiff-train's CUDA path, on
# one card's worth of ranks:
# --tp 2 and dp2 x tp2 with ZeRO-1 against one process on the same global
# batch, and a --tp 2 checkpoint (the parts gathered into the whole weights)
# resumed by one process; --pp 2 --micro-batches 4, dp2 x pp2, dp2 x pp2
# with ZeRO-1 and tp2 x pp2 against one process, a --pp 2 and a dp2 x pp2
# ZeRO-1 checkpoint resumed by one process, dp2 x pp2 with ZeRO-3 against
# one process, its checkpoint (each rank's stage shard) resumed by one
# process and its losses ZeRO-1's bits, --pp 2 --recompute the bits of
# --pp 2; --zero 3 on 2
# ranks against one process (fp32 and bf16), its checkpoint (each rank's shard) resumed by one process;
# --zero 3 under --tp 2 and dp2 x tp2 (fp32) against one process, each
# checkpoint (every rank's shard of its tensor-parallel part) resumed by one;
# --recompute alone, under --tp 2 and under --zero 3 giving the same bits
# as without. The ranks share the device, so every collective is
# host-staged (NCCL refuses two ranks on one GPU): this checks the split of
# the model, the sums, the gathers and the process groups, not their speed.
# Runs on the CPU emulation (build/emu/bin/skiff-train, model tiny) in
# `make test`; tests/gpu/device-run.sh runs it on a GPU with the real binary.
# Env: SKIFF_PARALLEL_TEST_BIN (the binary), SKIFF_PARALLEL_TEST_MODEL (tiny),
# _SEQ (16), _BATCH (1, per data-parallel rank), _STEPS (3), _TOL (2e-5:
# fp32, relative), _BF16_TOL (5e-3: bf16, absolute).
source "$(dirname "$0")/../lib.sh"
ST=${SKIFF_PARALLEL_TEST_BIN:-$BUILD/emu/bin/skiff-train}
TOOL=$BUILD/tests/gpu/gpu_tool
MODEL=${SKIFF_PARALLEL_TEST_MODEL:-tiny}
SEQ=${SKIFF_PARALLEL_TEST_SEQ:-16}
B=${SKIFF_PARALLEL_TEST_BATCH:-1}
STEPS=${SKIFF_PARALLEL_TEST_STEPS:-3}
TOL=${SKIFF_PARALLEL_TEST_TOL:-2e-5}
BTOL=${SKIFF_PARALLEL_TEST_BF16_TOL:-5e-3}
if [ ! -x "$ST" ] || [ ! -x "$TOOL" ]; then
  t_skip "tensor parallelism on the CUDA path" "$ST or $TOOL is not built (needs nvcc at build time)"
  t_done
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
{ "$TOOL" mkshard --out "$tmp/train_000.bin" --tokens 200000 --vocab 256 --text &&
  "$TOOL" mkshard --out "$tmp/val_000.bin" --tokens 20000 --vocab 256 --text; } >/dev/null ||
  { t_fail "tensor parallelism: mkshard"; t_done; }
xloss() { grep -o '"loss":[0-9.]*' "$1" | cut -d: -f2 | tr '\n' ' '; }
# follows_bf16 NAME RC ONE.jsonl RUN.jsonl: the run (its ranks' exit RC)
# gave one process's losses within BTOL at every step
follows_bf16() {
  local name="$1 follows one process within $BTOL" rc=$2 one two
  one=$(xloss "$3") two=$(xloss "$4")
  if [ "$rc" -eq 0 ] && awk -v a="$one" -v b="$two" -v t="$BTOL" -v n="$STEPS" '
       BEGIN { if (split(a, x) != n || split(b, y) != n) exit 1
               for (i = 1; i <= n; i++) if ((x[i] - y[i])^2 > t * t) exit 1 }'; then
    t_pass "$name ($one| $two)"
  else
    t_fail "$name" "exit $rc; one: $one; this: $two; $(tail -2 "$4".r* | tr '\n' ' ')"
  fi
}
# split_then_one NAME RC ONE.jsonl SPLIT.jsonl RESUMED.jsonl FIRST-LINE-RE: a
# split run of STEPS-1 steps (its ranks' exit RC, rank 0's first line
# matching the RE) gave one process's losses within TOL relative, and its
# checkpoint resumed by one process gave the last step's (RESUMED.jsonl)
split_then_one() {
  local name="$1: one process's losses within $TOL relative, its checkpoint resumed by one process"
  local rc=$2 one two res
  one=$(xloss "$3") two=$(xloss "$4") res=$(xloss "$5")
  if [ "$rc" -eq 0 ] && grep -q "$6" "$4.r0" && awk -v a="$one" -v b="$two" -v c="$res" -v t="$TOL" -v n="$STEPS" '
       function bad(x, y) { return (x - y)^2 > (t * x)^2 }
       BEGIN { if (split(a, x) != n || split(b, y) != n - 1 || split(c, z) != 1) exit 1
               for (i = 1; i < n; i++) if (bad(x[i], y[i])) exit 1
               exit bad(x[n], z[1]) }'; then
    t_pass "$name ($one| $two| $res)"
  else
    t_fail "$name" "exit $rc; one: $one split: $two resumed: $res; $(tail -n 2 "$4".r* "${5%.jsonl}.out" | tr '\n' ' ')"
  fi
}
# same_bits NAME A B: two logs agree on everything but the timings
same_bits() {
  local strip='s/"tokens_per_s".*//'
  if [ -s "$2" ] && cmp -s <(sed "$strip" "$2") <(sed "$strip" "$3"); then
    t_pass "$1 ($(xloss "$2"))"
  else
    t_fail "$1" "$(xloss "$2")| $(xloss "$3")"
  fi
}

runp() { # runp N LOG TRAIN-ARGS...: N ranks of the CUDA loop on this machine
  local n=$1 log=$2 port=$((20000 + RANDOM % 20000)) pids=() rc=0 r
  shift 2
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$ST" "$@" --timeout 120 --log "$log" >"$log.r$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
COMMON=(train --model "$MODEL" --data "$tmp/train_*.bin" --seq "$SEQ" --device cuda --steps "$STEPS")

# fp32: --tp 2 gives one process's losses within TOL relative (the
# row-parallel sums add the ranks' partial products in another order); its
# checkpoint after STEPS-1 steps, resumed by one process, goes on as the
# one-process run does.
F=("${COMMON[@]}" --precision fp32 --batch "$B")
"$ST" "${F[@]}" --log "$tmp/one.jsonl" >"$tmp/one.out" 2>&1 &&
  runp 2 "$tmp/tp2.jsonl" "${F[@]}" --tp 2 --stop-after $((STEPS - 1)) --ckpt-dir "$tmp/ck" &&
  "$ST" "${F[@]}" --resume --ckpt-dir "$tmp/ck" --log "$tmp/res.jsonl" >"$tmp/res.out" 2>&1
rc=$?
split_then_one "CUDA fp32 --tp 2 (2 ranks)" "$rc" "$tmp/one.jsonl" "$tmp/tp2.jsonl" "$tmp/res.jsonl" \
  'world 2 = dp 1 x tp 2, .*host-staged collectives, tensor-parallel part 0 of 2'

# bf16: dp2 x tp2 with ZeRO-1 (4 ranks: two tensor-parallel and two
# data-parallel groups) against one process with twice the batch
Bf=("${COMMON[@]}" --precision bf16)
"$ST" "${Bf[@]}" --batch $((2 * B)) --log "$tmp/one2.jsonl" >"$tmp/one2.out" 2>&1 &&
  runp 4 "$tmp/d2t2.jsonl" "${Bf[@]}" --batch "$B" --tp 2 --zero 1
rc=$?
follows_bf16 "CUDA bf16 dp2 x tp2 with --zero 1 (4 ranks)" "$rc" "$tmp/one2.jsonl" "$tmp/d2t2.jsonl"
# what a rank holds: its part of the weights and activations (the describe line)
grep -h -m1 'tensor-parallel part' "$tmp"/d2t2.jsonl.r0 2>/dev/null | sed 's/^/  /'

# fp32: --pp 2 --micro-batches 4 (1F1B: activations and their gradients
# between the stages with tr_sendrecv) gives the losses of one process
# with --grad-accum 4 within TOL relative; its checkpoint after STEPS-1
# steps (the whole state on rank 0, as the CPU --pp run writes it) resumed
# by one process goes on as the one-process run does; dp2 x pp2 (4 ranks,
# GPipe, 2 micro-batches per data-parallel rank) against the same process
"$ST" "${F[@]}" --grad-accum 4 --log "$tmp/onea4.jsonl" >"$tmp/onea4.out" 2>&1 &&
  runp 2 "$tmp/pp2.jsonl" "${F[@]}" --pp 2 --micro-batches 4 --stop-after $((STEPS - 1)) --ckpt-dir "$tmp/ckp" &&
  "$ST" "${F[@]}" --grad-accum 4 --resume --ckpt-dir "$tmp/ckp" --log "$tmp/ppres.jsonl" >"$tmp/ppres.out" 2>&1
rc=$?
split_then_one "CUDA fp32 --pp 2 --micro-batches 4 (2 ranks)" "$rc" "$tmp/onea4.jsonl" "$tmp/pp2.jsonl" \
  "$tmp/ppres.jsonl" 'world 2 = dp 1 x pp 2, .*host-staged collectives, pipeline stage 0 of 2 (blocks 0-[0-9]*), dp 1, 1f1b'
runp 4 "$tmp/d2p2.jsonl" "${F[@]}" --pp 2 --micro-batches 2 --pp-schedule gpipe
rc=$?
# within RC ONE.jsonl RUN.jsonl: the run (its ranks' exit RC) gave one
# process's losses within TOL relative at every step
within() {
  local one two
  one=$(xloss "$2") two=$(xloss "$3")
  [ "$1" -eq 0 ] && awk -v a="$one" -v b="$two" -v t="$TOL" -v n="$STEPS" '
     BEGIN { if (split(a, x) != n || split(b, y) != n) exit 1
             for (i = 1; i <= n; i++) if ((x[i] - y[i])^2 > (t * x[i])^2) exit 1 }'
}
name="CUDA fp32 dp2 x pp2 (4 ranks, gpipe): one process's losses within $TOL relative"
if within "$rc" "$tmp/onea4.jsonl" "$tmp/d2p2.jsonl" &&
  grep -q 'world 4 = dp 2 x pp 2, .*pipeline stage 0 of 2 (blocks 0-[0-9]*), dp 2, gpipe' "$tmp/d2p2.jsonl.r0"; then
  t_pass "$name ($(xloss "$tmp/onea4.jsonl")| $(xloss "$tmp/d2p2.jsonl"))"
else
  t_fail "$name" "exit $rc; $(xloss "$tmp/onea4.jsonl")| $(xloss "$tmp/d2p2.jsonl"); $(tail -n 2 "$tmp"/d2p2.jsonl.r* | tr '\n' ' ')"
fi

# dp2 x pp2 with ZeRO-1: each stage's ranges sharded over its two
# data-parallel ranks (reduce-scatter, AdamW on the shard, all-gather of the
# weights), the tied wte's piece summed between the stages; its checkpoint
# (each rank's shard of its stage's m and v, the whole weights on rank 0)
# resumed by one process (a validation pass after every step, for ZeRO-3's
# below)
VAL=(--val "$tmp/val_*.bin" --val-every 1)
pp_zero() {  # Z EXTRA-PATTERN: dp2 x pp2 at --zero Z, stopped a step early, resumed by one process
  runp 4 "$tmp/d2p2z$1.jsonl" "${F[@]}" --pp 2 --micro-batches 2 --zero "$1" --stop-after $((STEPS - 1)) \
    --ckpt-dir "$tmp/ckpz$1" "${VAL[@]}" &&
    "$ST" "${F[@]}" --grad-accum 4 --resume --ckpt-dir "$tmp/ckpz$1" --log "$tmp/pz$1res.jsonl" >"$tmp/pz$1res.out" 2>&1
  split_then_one "CUDA fp32 dp2 x pp2 with --zero $1 (4 ranks)" "$?" "$tmp/onea4.jsonl" "$tmp/d2p2z$1.jsonl" \
    "$tmp/pz$1res.jsonl" "world 4 = dp 2 x pp 2, .*zero $1, .*pipeline stage 0 of 2 (blocks 0-[0-9]*), dp 2, 1f1b$2"
}
pp_zero 1 ""

# dp2 x pp2 with ZeRO-3: the same pieces, but the stepped weights stay in
# the shards until the next step gathers the stage's from them; its
# checkpoint (each rank's shard of its stage's weights, m and v, the CPU
# pipeline's files) resumed by one process, and the losses ZeRO-1's bit for
# bit (the same sums and steps, only when the gather happens differs), the
# validation losses too (each pass gathers the stepped weights first)
pp_zero 3 ".*ZeRO-3: the stage"
same_bits "CUDA fp32 dp2 x pp2 --zero 3: the losses of --zero 1, bit for bit" "$tmp/d2p2z3.jsonl" "$tmp/d2p2z1.jsonl"
vloss() { grep -o '"val_loss":[0-9.]*' "$1" | cut -d: -f2 | tr '\n' ' '; }
name="CUDA fp32 dp2 x pp2 --zero 3: the validation losses of --zero 1 after every step, bit for bit"
if [ "$(vloss "$tmp/d2p2z3.jsonl" | wc -w)" -eq $((STEPS - 1)) ] && [ "$(vloss "$tmp/d2p2z3.jsonl")" = "$(vloss "$tmp/d2p2z1.jsonl")" ]; then
  t_pass "$name ($(vloss "$tmp/d2p2z3.jsonl"))"
else
  t_fail "$name" "$(vloss "$tmp/d2p2z3.jsonl")| $(vloss "$tmp/d2p2z1.jsonl")"
fi

# tp2 x pp2: each stage's blocks split over two tensor-parallel ranks, each
# tensor-parallel rank its own pipeline (2 micro-batches of 2 sequences:
# the global batch of onea4)
runp 4 "$tmp/t2p2.jsonl" "${COMMON[@]}" --precision fp32 --batch $((2 * B)) --tp 2 --pp 2 --micro-batches 2
rc=$?
name="CUDA fp32 tp2 x pp2 (4 ranks): one process's losses within $TOL relative"
if within "$rc" "$tmp/onea4.jsonl" "$tmp/t2p2.jsonl" &&
  grep -q 'world 4 = dp 1 x tp 2 x pp 2, .*pipeline stage 0 of 2 (blocks 0-[0-9]*), dp 1, tp 2, 1f1b' \
    "$tmp/t2p2.jsonl.r0"; then
  t_pass "$name ($(xloss "$tmp/onea4.jsonl")| $(xloss "$tmp/t2p2.jsonl"))"
else
  t_fail "$name" "exit $rc; $(xloss "$tmp/onea4.jsonl")| $(xloss "$tmp/t2p2.jsonl"); $(tail -n 2 "$tmp"/t2p2.jsonl.r* | tr '\n' ' ')"
fi

# --recompute: each block's forward redone in the backward, the same bits
# as keeping the activations (one process, fp32, against one.jsonl; --tp 2,
# whose recomputed forward repeats the attention's all-reduce, against
# tp2.jsonl)
"$ST" "${F[@]}" --recompute --log "$tmp/rec.jsonl" >"$tmp/rec.out" 2>&1 &&
  grep -q 'activations [0-9.]* MiB (recomputed per block)' "$tmp/rec.out" ||
  t_fail "CUDA fp32 --recompute runs" "$(tail -2 "$tmp/rec.out" | tr '\n' ' ')"
same_bits "CUDA fp32 --recompute: the losses of keeping the activations, bit for bit" "$tmp/rec.jsonl" "$tmp/one.jsonl"
runp 2 "$tmp/rtp2.jsonl" "${F[@]}" --tp 2 --recompute --stop-after $((STEPS - 1)) --ckpt-dir "$tmp/ckr" ||
  t_fail "CUDA fp32 --tp 2 --recompute runs" "$(tail -2 "$tmp"/rtp2.jsonl.r* | tr '\n' ' ')"
same_bits "CUDA fp32 --tp 2 --recompute: the losses of --tp 2, bit for bit" "$tmp/rtp2.jsonl" "$tmp/tp2.jsonl"
# --pp 2 --recompute: each stage redoes its blocks' forward in the
# backward; the bits of --pp 2 (whose losses follow one process, above)
runp 2 "$tmp/rpp2.jsonl" "${F[@]}" --pp 2 --micro-batches 4 --recompute --stop-after $((STEPS - 1)) \
  --ckpt-dir "$tmp/ckpr" || t_fail "CUDA fp32 --pp 2 --recompute runs" "$(tail -2 "$tmp"/rpp2.jsonl.r* | tr '\n' ' ')"
same_bits "CUDA fp32 --pp 2 --recompute: the losses of --pp 2, bit for bit" "$tmp/rpp2.jsonl" "$tmp/pp2.jsonl"

# fp32: --zero 3 on 2 ranks (weights, gradients and AdamW's state sharded
# by unit, each block gathered before its forward and its backward) gives
# one process's losses on the same global batch within TOL relative; its
# checkpoint after STEPS-2 steps (each rank's shard of the weights, m and
# v) resumed by one process goes on as the one-process run does (two steps,
# so the second shows the resumed m and v)
F2=("${COMMON[@]}" --precision fp32 --batch $((2 * B)))
K=$((STEPS > 2 ? STEPS - 2 : 1))
"$ST" "${F2[@]}" --log "$tmp/one2f.jsonl" >"$tmp/one2f.out" 2>&1 &&
  runp 2 "$tmp/z3.jsonl" "${F[@]}" --zero 3 --stop-after "$K" --ckpt-dir "$tmp/ck3" &&
  "$ST" "${F2[@]}" --resume --ckpt-dir "$tmp/ck3" --log "$tmp/z3res.jsonl" >"$tmp/z3res.out" 2>&1
rc=$?
# z3_then_one NAME RC ONE.jsonl SPLIT.jsonl RESUMED.jsonl FIRST-LINE-RE: the
# split run's K steps and the one process's resumed STEPS-K gave one
# process's losses within TOL relative
z3_then_one() {
  local name="$1: one process's losses within $TOL relative, its checkpoint resumed by one process"
  local rc=$2 one two res
  one=$(xloss "$3") two=$(xloss "$4") res=$(xloss "$5")
  if [ "$rc" -eq 0 ] && grep -q "$6" "$4.r0" &&
    awk -v a="$one" -v b="$two" -v c="$res" -v t="$TOL" -v n="$STEPS" -v k="$K" '
       function bad(x, y) { return (x - y)^2 > (t * x)^2 }
       BEGIN { if (split(a, x) != n || split(b, y) != k || split(c, z) != n - k) exit 1
               for (i = 1; i <= k; i++) if (bad(x[i], y[i])) exit 1
               for (i = k + 1; i <= n; i++) if (bad(x[i], z[i - k])) exit 1 }'; then
    t_pass "$name ($one| $two| $res)"
  else
    t_fail "$name" "exit $rc; one: $one split: $two resumed: $res; $(tail -n 2 "$4".r* "${5%.jsonl}.out" | tr '\n' ' ')"
  fi
}
z3_then_one "CUDA fp32 --zero 3 (2 ranks)" "$rc" "$tmp/one2f.jsonl" "$tmp/z3.jsonl" "$tmp/z3res.jsonl" \
  'zero 3, .*host-staged collectives, .*of which gathered units'

# fp32: --zero 3 under --tp: each tensor-parallel rank's part cut into
# units and sharded over its data-parallel ranks. --tp 2 (2 ranks, a
# data-parallel group of one) against one process on the batch of one,
# dp2 x tp2 (4 ranks) against one process on twice the batch; each one's
# checkpoint (every rank's shard of its part) resumed by one process
runp 2 "$tmp/t2z3.jsonl" "${F[@]}" --tp 2 --zero 3 --stop-after $((STEPS - 1)) --ckpt-dir "$tmp/ckt3" &&
  "$ST" "${F[@]}" --resume --ckpt-dir "$tmp/ckt3" --log "$tmp/t2z3res.jsonl" >"$tmp/t2z3res.out" 2>&1
rc=$?
split_then_one "CUDA fp32 --tp 2 --zero 3 (2 ranks)" "$rc" "$tmp/one.jsonl" "$tmp/t2z3.jsonl" "$tmp/t2z3res.jsonl" \
  'world 2 = dp 1 x tp 2, .*zero 3, .*tensor-parallel part 0 of 2, .*of which gathered units'
runp 4 "$tmp/d2t2z3.jsonl" "${F[@]}" --tp 2 --zero 3 --stop-after "$K" --ckpt-dir "$tmp/ckd3" &&
  "$ST" "${F2[@]}" --resume --ckpt-dir "$tmp/ckd3" --log "$tmp/d2t2z3res.jsonl" >"$tmp/d2t2z3res.out" 2>&1
rc=$?
z3_then_one "CUDA fp32 dp2 x tp2 --zero 3 (4 ranks)" "$rc" "$tmp/one2f.jsonl" "$tmp/d2t2z3.jsonl" \
  "$tmp/d2t2z3res.jsonl" 'world 4 = dp 2 x tp 2, .*zero 3, .*tensor-parallel part 0 of 2, .*of which gathered units'

# bf16: --zero 3 on 2 ranks (the weights gathered in bf16) against one
# process with twice the batch; with --recompute (the gathered block's
# forward redone in the backward) the same bits
runp 2 "$tmp/z3b.jsonl" "${Bf[@]}" --batch "$B" --zero 3 &&
  runp 2 "$tmp/z3br.jsonl" "${Bf[@]}" --batch "$B" --zero 3 --recompute
rc=$?
follows_bf16 "CUDA bf16 --zero 3 (2 ranks)" "$rc" "$tmp/one2.jsonl" "$tmp/z3b.jsonl"
same_bits "CUDA bf16 --zero 3 --recompute (2 ranks): the losses of --zero 3, bit for bit" "$tmp/z3br.jsonl" "$tmp/z3b.jsonl"
# what a rank holds under ZeRO-3: its shards and the gathered units
grep -h -m1 'zero 3' "$tmp"/z3b.jsonl.r0 2>/dev/null | sed 's/^.*per rank:/  per rank (bf16, --zero 3):/'
t_done
