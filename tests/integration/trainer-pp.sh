#!/bin/bash
# Pipeline-parallel equivalence on localhost (--pp N --micro-batches M): the
# stages of one pipeline, and two pipelines side by side (dp2 x pp2: ranks
# stage*2 + dp_rank), reach the same losses and parameters as one process
# on the same global batch, with either schedule (1f1b, gpipe); the two
# schedules give the same bits (each stage adds its micro-batches'
# gradients in the same order); a resumed run equals an uninterrupted one
# bit for bit. Composed: tp2 x pp2 and dp2 x tp2 x pp2 (Megatron's order,
# rank = stage*DP*TP + dp_rank*TP + tp_rank), and ZeRO-1/2 within each
# stage's data-parallel group (dp2 x pp2, tp2 x pp2, dp2 x tp2 x pp2), the
# same losses as one process; ZeRO-3 (pp2, dp2 x pp2, tp2 x pp2: each
# stage's weights sharded too, gathered once per step) the same, resumed
# bit for bit and put back together by one process; --recompute and the
# GPipe schedule change no bit of tp2 x pp2.
#
# Tolerance: 1e-5 relative on every logged loss over 20 steps, 5e-5 on every
# parameter (as trainer-ddp.sh, whose header says why the runs are close but
# not bit-identical to one process: the DP all-reduce and the sum of the
# tied embedding's two halves add in another order than one process does).
source "$(dirname "$0")/../lib.sh"
t_trainer_init
t_corpus
D="$TDIR/lic_train_*.bin"
COMMON=(--model tiny --data "$D" --seq 32 --steps 20 --lr 1e-3 --warmup 2 --quiet)
TOL=5e-5 RTOL=1e-5

run() { # run NAME P [more args]
  local name=$1 P=$2; shift 2
  rm -rf "$TDIR/$name"
  if [ "$P" = 1 ]; then
    "$TRAIN" train "${COMMON[@]}" --ckpt-dir "$TDIR/$name" --log "$TDIR/$name.jsonl" "$@"
  else
    t_ddp "$P" "$TRAIN" train "${COMMON[@]}" --ckpt-dir "$TDIR/$name" --log "$TDIR/$name.jsonl" "$@"
  fi
}

# every step's loss within a relative tolerance, the same number of steps
same() { t_same_run "$1" "$2" "$3" "$4" "$5" rel; } # same NAME A B PARAM_TOL LOSS_RTOL

# one process on the global batch: 4 (pp2) and 8 (dp2 x pp2) micro-batches of 2
run p1 1 --batch 2 --grad-accum 4 || t_fail "one process trains (global batch 8)"
run p1x 1 --batch 2 --grad-accum 8 || t_fail "one process trains (global batch 16)"
for s in 1f1b gpipe; do
  if run "pp2-$s" 2 --batch 2 --pp 2 --micro-batches 4 --pp-schedule "$s"; then
    same "--pp 2 --micro-batches 4 ($s) equals 1 process (20 steps, loss rtol $RTOL)" p1 "pp2-$s" $TOL $RTOL
  else t_fail "--pp 2 ($s) runs"; fi
  if run "dp2pp2-$s" 4 --batch 2 --pp 2 --micro-batches 4 --pp-schedule "$s"; then
    same "dp2 x pp2 ($s) equals 1 process (20 steps, loss rtol $RTOL)" p1x "dp2pp2-$s" $TOL $RTOL
  else t_fail "dp2 x pp2 ($s) runs"; fi
done
same "1f1b and gpipe give the same bits (pp2)" pp2-1f1b pp2-gpipe 0 0
same "1f1b and gpipe give the same bits (dp2 x pp2)" dp2pp2-1f1b dp2pp2-gpipe 0 0

# --tp inside the stages: each stage's blocks split over 2 tensor-parallel
# ranks, activations sent between the same tensor-parallel rank of
# neighbouring stages; ZeRO shards each stage's optimizer state (and with
# ZeRO-2 its gradient, every micro-batch) over the stage's data-parallel
# ranks. 4 micro-batches of 2 per pipeline: global batch 8 (one pipeline)
# or 16 (two).
compose() { # compose NAME P REFERENCE ARGS...
  local name=$1 P=$2 ref=$3; shift 3
  if run "$name" "$P" --batch 2 --micro-batches 4 "$@"; then
    same "$name ($*) equals 1 process (20 steps, loss rtol $RTOL)" "$ref" "$name" $TOL $RTOL
  else t_fail "$name ($*) runs"; fi
}
compose tp2pp2 4 p1 --tp 2 --pp 2
compose tp2pp2-zero1 4 p1 --tp 2 --pp 2 --zero 1
compose dp2pp2-zero1 4 p1x --pp 2 --zero 1
compose dp2pp2-zero2 4 p1x --pp 2 --zero 2
compose dp2tp2pp2 8 p1x --tp 2 --pp 2
compose dp2tp2pp2-zero2 8 p1x --tp 2 --pp 2 --zero 2
# ZeRO-3 inside the stages: each rank keeps its shard of its stage's
# weights (cut as ZeRO-1/2 cut the stage's ranges), gathered over the
# stage's data-parallel ranks once per step for the whole schedule
compose pp2-zero3 2 p1 --pp 2 --zero 3
compose dp2pp2-zero3 4 p1x --pp 2 --zero 3
compose tp2pp2-zero3 4 p1 --tp 2 --pp 2 --zero 3
run tp2pp2-gpipe 4 --batch 2 --micro-batches 4 --tp 2 --pp 2 --pp-schedule gpipe &&
  run tp2pp2-rc 4 --batch 2 --micro-batches 4 --tp 2 --pp 2 --recompute || t_fail "tp2 x pp2 with gpipe, --recompute run"
same "1f1b and gpipe give the same bits (tp2 x pp2)" tp2pp2 tp2pp2-gpipe 0 0
same "--recompute gives the same bits (tp2 x pp2)" tp2pp2 tp2pp2-rc 0 0

# bit-exact resume inside the layout: 10 steps, stop, resume to 20
rm -rf "$TDIR/res"
if t_ddp 4 "$TRAIN" train "${COMMON[@]}" --batch 2 --pp 2 --micro-batches 4 --ckpt-dir "$TDIR/res" \
  --log "$TDIR/res.jsonl" --stop-after 10 &&
  t_ddp 4 "$TRAIN" train "${COMMON[@]}" --batch 2 --pp 2 --micro-batches 4 --ckpt-dir "$TDIR/res" \
    --log "$TDIR/res.jsonl" --resume; then
  same "dp2 x pp2: --stop-after 10 then --resume equals 20 steps bit for bit" dp2pp2-1f1b res 0 0
else t_fail "dp2 x pp2 stops and resumes"; fi

# the same with ZeRO-3: every rank's file holds its shard of its stage's
# weights, m and v, read back as they were
rm -rf "$TDIR/res3"
if t_ddp 4 "$TRAIN" train "${COMMON[@]}" --batch 2 --pp 2 --micro-batches 4 --zero 3 --ckpt-dir "$TDIR/res3" \
  --log "$TDIR/res3.jsonl" --stop-after 10 &&
  t_ddp 4 "$TRAIN" train "${COMMON[@]}" --batch 2 --pp 2 --micro-batches 4 --zero 3 --ckpt-dir "$TDIR/res3" \
    --log "$TDIR/res3.jsonl" --resume; then
  same "dp2 x pp2 ZeRO-3: --stop-after 10 then --resume equals 20 steps bit for bit" dp2pp2-zero3 res3 0 0
else t_fail "dp2 x pp2 ZeRO-3 stops and resumes"; fi

# a checkpoint of dp2 x pp2 holds the whole model on rank 0 (the stages are
# gathered there), so another layout resumes it: one process on the same
# global batch continues as if it had run all 20 steps
rm -rf "$TDIR/lay"
if t_ddp 4 "$TRAIN" train "${COMMON[@]}" --batch 2 --pp 2 --micro-batches 4 --ckpt-dir "$TDIR/lay" \
  --log "$TDIR/lay.jsonl" --stop-after 10 &&
  "$TRAIN" train "${COMMON[@]}" --batch 2 --grad-accum 8 --ckpt-dir "$TDIR/lay" --log "$TDIR/lay.jsonl" --resume; then
  same "dp2 x pp2 saved at step 10, resumed by 1 process, equals 1 process" p1x lay $TOL $RTOL
else t_fail "dp2 x pp2's checkpoint resumes under 1 process"; fi

# dp2 x pp2 ZeRO-3's stage shards put back together: one process resumes them
rm -rf "$TDIR/lay3"
if t_ddp 4 "$TRAIN" train "${COMMON[@]}" --batch 2 --pp 2 --micro-batches 4 --zero 3 --ckpt-dir "$TDIR/lay3" \
  --log "$TDIR/lay3.jsonl" --stop-after 10 &&
  "$TRAIN" train "${COMMON[@]}" --batch 2 --grad-accum 8 --ckpt-dir "$TDIR/lay3" --log "$TDIR/lay3.jsonl" --resume; then
  same "dp2 x pp2 ZeRO-3 saved at step 10, resumed by 1 process, equals 1 process" p1x lay3 $TOL $RTOL
else t_fail "dp2 x pp2 ZeRO-3's checkpoint resumes under 1 process"; fi
# and the other way: one process's checkpoint cut into dp2 x pp2 ZeRO-3's shards
rm -rf "$TDIR/lay3b"
if "$TRAIN" train "${COMMON[@]}" --batch 2 --grad-accum 8 --ckpt-dir "$TDIR/lay3b" --log "$TDIR/lay3b.jsonl" \
  --stop-after 10 &&
  t_ddp 4 "$TRAIN" train "${COMMON[@]}" --batch 2 --pp 2 --micro-batches 4 --zero 3 --ckpt-dir "$TDIR/lay3b" \
    --log "$TDIR/lay3b.jsonl" --resume; then
  same "1 process saved at step 10, resumed by dp2 x pp2 ZeRO-3, equals 1 process" p1x lay3b $TOL $RTOL
else t_fail "1 process's checkpoint resumes under dp2 x pp2 ZeRO-3"; fi

# three stages of an uneven split (mini: 4 blocks as 2+1+1), a middle stage
# and the embedding pair of the first and the last
run p1m 1 --model mini --batch 2 --grad-accum 3 --steps 20 || t_fail "one process trains mini"
if run pp3 3 --model mini --batch 2 --pp 3 --micro-batches 3 --steps 20; then
  same "--pp 3 (mini, blocks 2+1+1) equals 1 process" p1m pp3 $TOL $RTOL
else t_fail "--pp 3 runs"; fi
# the same with ZeRO-2 and --tp 2 (the first and the last stage sum the tied
# wte's gradient piece by piece in a group of their own)
if run tp2pp3-zero2 6 --model mini --batch 2 --tp 2 --pp 3 --micro-batches 3 --zero 2 --steps 20; then
  same "tp2 x pp3 with ZeRO-2 (mini) equals 1 process" p1m tp2pp3-zero2 $TOL $RTOL
else t_fail "tp2 x pp3 with ZeRO-2 runs"; fi

# ZeRO-3 over three stages: a middle stage holds blocks only, the first and
# the last stage a piece each of the tied wte, summed in their own group
if run pp3-zero3 3 --model mini --batch 2 --pp 3 --micro-batches 3 --zero 3 --steps 20; then
  same "--pp 3 with ZeRO-3 (mini) equals 1 process" p1m pp3-zero3 $TOL $RTOL
else t_fail "--pp 3 with ZeRO-3 runs"; fi

# validation runs through the pipeline too: the same validation losses
V=(--val "$TDIR/lic_val_*.bin" --val-every 5 --steps 20)
run p1v 1 --batch 2 --grad-accum 4 "${V[@]}" || t_fail "one process validates"
vl() { grep -o '"val_loss":[0-9.]*' "$1" | cut -d: -f2; }
# (ZeRO-3: a validation pass gathers the stage's weights from the shards)
for z in 0 3; do
  n=pp2v; [ $z = 3 ] && n=pp2v-zero3
  if run $n 2 --batch 2 --pp 2 --micro-batches 4 --zero $z "${V[@]}"; then
    if [ "$(vl "$TDIR/p1v.jsonl" | wc -l)" = 4 ] && paste -d' ' <(vl "$TDIR/p1v.jsonl") <(vl "$TDIR/$n.jsonl") |
      awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (NF != 2 || d > 1e-5) bad = 1 } END { exit bad }'; then
      t_pass "--pp 2 --zero $z validation losses equal 1 process ($(vl "$TDIR/$n.jsonl" | paste -sd' '))"
    else t_fail "--pp 2 --zero $z validation losses" "$(paste -d' ' <(vl "$TDIR/p1v.jsonl") <(vl "$TDIR/$n.jsonl") | tr '\n' ';')"; fi
  else t_fail "--pp 2 --zero $z validates"; fi
done

# a stage that dies is named by its rank, never a hang
port=$(t_port)
env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port SKIFF_TRAIN_TIMEOUT=20 \
  "$TRAIN" train --model tiny --data "$D" --seq 32 --batch 2 --steps 100000 --pp 2 --micro-batches 4 --quiet \
  >"$TDIR/dead.out" 2>&1 &
p0=$!
env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port SKIFF_TRAIN_TIMEOUT=20 \
  timeout -s KILL 3 "$TRAIN" train --model tiny --data "$D" --seq 32 --batch 2 --steps 100000 --pp 2 \
  --micro-batches 4 --quiet >/dev/null 2>&1
wait $p0
rc=$?
if [ $rc -ne 0 ] && grep -q 'rank 1' "$TDIR/dead.out"; then t_pass "a dead stage is named: $(cat "$TDIR/dead.out")"
else t_fail "a dead stage is named" "rc $rc: $(cat "$TDIR/dead.out")"; fi

# the bubble, measured, beside (N-1)/(M+N-1)
out=$(t_ddp 2 "$TRAIN" train --model tiny --data "$D" --seq 32 --batch 2 --steps 3 --pp 2 --micro-batches 4 2>&1)
if grep -Eq 'pipeline bubble [0-9.]+ measured .*\(N-1\)/\(M\+N-1\) = 0\.200' <<<"$out"; then
  t_pass "bubble reported: $(grep -o 'pipeline bubble.*' <<<"$out")"
else t_fail "bubble reported" "$out"; fi
if grep -q 'pipeline stage 0 of 2 (blocks 0-0), dp 1, 1f1b, 2 micro-batches in flight' <<<"$out"; then
  t_pass "the first line names the stage, its blocks and the micro-batches in flight"
else t_fail "stage described" "$out"; fi
# a stage holds its own ranges only: stage 0 of 4 on mini (wte, wpe and one
# of 4 blocks) keeps under a third of the whole model's parameters, gradients
# and AdamW state (m, v and the decay mask), by the first line's figures
out=$(t_ddp 4 "$TRAIN" train --model mini --data "$D" --seq 32 --batch 2 --steps 1 --pp 4 --micro-batches 4 2>&1)
pgo=$(sed -n 's/.*(\([0-9]*\) params.*per rank: params \([0-9.]*\) MiB, gradients \([0-9.]*\) MiB, optimizer \([0-9.]*\) MiB.*/\1 \2 \3 \4/p' <<<"$out")
if [ -n "$pgo" ] && awk -v s="$pgo" 'BEGIN { split(s, a, " "); w = a[1] * 4 / 1048576
    exit !(a[2] > 0 && a[2] * 3 < w && a[3] > 0 && a[3] * 3 < w && a[4] > 0 && a[4] < w) }'; then
  t_pass "stage 0 of 4 holds its own ranges only: $(grep -o 'per rank: params [0-9.]* MiB, gradients [0-9.]* MiB, optimizer [0-9.]* MiB' <<<"$out") (the whole model: $(awk -v n="${pgo%% *}" 'BEGIN { printf "%.1f", n * 4 / 1048576 }') MiB each, optimizer 3x)"
else t_fail "a stage's memory is below the whole model's" "$out"; fi
out=$(t_ddp 8 "$TRAIN" train --model tiny --data "$D" --seq 32 --batch 2 --steps 1 --tp 2 --pp 2 --zero 1 2>&1)
if grep -q 'world 8 = dp 2 x tp 2 x pp 2, .*zero 1, .*stage 0 of 2 (blocks 0-0), dp 2, tp 2, 1f1b' <<<"$out"; then
  t_pass "the first line names the three factors and the stage's place"
else t_fail "dp x tp x pp described" "$out"; fi

# ZeRO-3's memory line: a rank of dp2 x pp2 keeps its shard of its stage's
# weights between steps, and holds two of the stage's weights, gradient and
# the reductions' packing at a time for a step, where ZeRO-2 holds all three
# all the time: by the first lines' figures (mini), params + gradients +
# optimizer under ZeRO-3 stay below ZeRO-2's
mem() { t_ddp 4 "$TRAIN" train --model mini --data "$D" --seq 32 --batch 2 --steps 1 --pp 2 "$@" 2>&1; }
sum3() { sed -n 's/.*per rank: params \([0-9.]*\) MiB, gradients \([0-9.]*\) MiB, optimizer \([0-9.]*\) MiB.*/\1 \2 \3/p' <<<"$1" |
  awk '{ print $1 + $2 + $3 }'; }
o2=$(mem --zero 2) o3=$(mem --zero 3)
s2=$(sum3 "$o2") s3=$(sum3 "$o3")
if grep -q 'zero 3, .*of which held for the step only [0-9.]* MiB + [0-9.]* MiB (the packing' <<<"$o3" &&
  [ -n "$s2" ] && [ -n "$s3" ] && awk -v a="$s3" -v b="$s2" 'BEGIN { exit !(a < b) }'; then
  t_pass "dp2 x pp2 ZeRO-3 holds less than ZeRO-2 ($s3 MiB against $s2 MiB): $(grep -o 'per rank: .*reducing)' <<<"$o3")"
else t_fail "dp2 x pp2 ZeRO-3 memory line" "$o2 ;; $o3"; fi

# usage errors name the flag
err() { # err NAME EXPECT P ARGS...
  local name=$1 expect=$2 P=$3 out; shift 3
  if [ "$P" = 1 ]; then out=$("$TRAIN" train --model tiny --data "$D" --seq 32 --batch 2 --steps 1 "$@" 2>&1)
  else out=$(t_ddp "$P" "$TRAIN" train --model tiny --data "$D" --seq 32 --batch 2 --steps 1 "$@" 2>&1); fi
  local rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$expect" <<<"$out"; then t_pass "$name"; else t_fail "$name" "rc $rc: $out"; fi
}
err "--pp that does not divide WORLD_SIZE is refused" "--pp 2 does not divide WORLD_SIZE 3" 3 --pp 2
err "--tp x --pp that does not divide WORLD_SIZE is refused" "--tp 2 x --pp 2 = 4 does not divide WORLD_SIZE 6" 6 \
  --tp 2 --pp 2
err "--pp beyond the layers is refused" "--pp 3: model tiny has only 2 layers" 1 --pp 3
err "--pp with --zero 3 on CUDA is refused (the CPU composes them)" \
  "--pp 2 with --zero 3 on --device cuda: ZeRO-3 and pipeline stages are composed on the CPU only" 1 --pp 2 \
  --zero 3 --device cuda
err "--micro-batches and a different --grad-accum are refused" "--micro-batches 4 and --grad-accum 2" 1 \
  --micro-batches 4 --grad-accum 2
err "--pp-schedule takes 1f1b or gpipe" "--pp-schedule 'zb': use 1f1b or gpipe" 1 --pp-schedule zb
t_done
