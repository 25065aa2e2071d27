#!/bin/bash
# Checkpoints: --stop-after then --resume continues bit for bit (params,
# AdamW state, step, data position), alone and with ZeRO on 2 ranks, under
# --tp 2, dp2 x tp2, tp2 x pp2, dp2 x pp2 with ZeRO and tp2 / dp2 x tp2
# with ZeRO-3 (every rank's file); a checkpoint resumes under another
# layout (world size, --tp, --pp, ZeRO stage) on the same global batch (dp2 x tp2 -> 1 process and back,
# tp2 x pp2 -> 1 process and back, dp2 x pp2 with ZeRO-1 -> 1 process, DDP
# -> pp2 on as many ranks; --zero 3's shards put together and taken apart,
# under --tp 2 and dp2 x tp2 too);
# another global batch under another layout, or another model, is refused;
# nothing temporary is left behind.
source "$(dirname "$0")/../lib.sh"
t_trainer_init
t_corpus
D="$TDIR/lic_train_*.bin"
COMMON=(--model tiny --data "$D" --seq 32 --steps 12 --lr 1e-3 --quiet)

# resume_case NAME P ARGS...: uninterrupted run vs stop-after 5 + resume.
resume_case() {
  local name=$1 P=$2; shift 2
  local full="$TDIR/$name-full" part="$TDIR/$name-part" launch=()
  [ "$P" -gt 1 ] && launch=(t_ddp "$P")
  "${launch[@]}" "$TRAIN" train "${COMMON[@]}" "$@" --ckpt-dir "$full" --log "$full.jsonl" || { t_fail "$name: full run"; return; }
  "${launch[@]}" "$TRAIN" train "${COMMON[@]}" "$@" --ckpt-dir "$part" --log "$part.jsonl" --stop-after 5 || { t_fail "$name: --stop-after"; return; }
  if [ "$(wc -l <"$part.jsonl")" != 5 ]; then t_fail "$name: --stop-after 5 ran $(wc -l <"$part.jsonl") steps"; return; fi
  "${launch[@]}" "$TRAIN" train "${COMMON[@]}" "$@" --ckpt-dir "$part" --log "$part.jsonl" --resume || { t_fail "$name: --resume"; return; }
  local r ok=1
  for ((r = 0; r < P; r++)); do cmp -s "$full/rank-$r.ckpt" "$part/rank-$r.ckpt" || ok=0; done
  # the logs agree on everything but timings
  local strip='s/"tokens_per_s".*//'
  if [ $ok = 1 ] && diff <(sed "$strip" "$full.jsonl") <(sed "$strip" "$part.jsonl") >/dev/null; then
    t_pass "$name: stop-after 5 + resume equals the uninterrupted run bit for bit"
  else
    t_fail "$name: resumed run differs" "$(diff <(sed "$strip" "$full.jsonl") <(sed "$strip" "$part.jsonl") | head -5)"
  fi
  ls -a "$part" | grep -q '\.tmp' && t_fail "$name: temporary checkpoint left behind"
}

resume_case single 1 --batch 4 --grad-accum 2
resume_case zero1 2 --batch 2 --zero 1
resume_case zero3 2 --batch 2 --zero 3 --grad-accum 2
resume_case ddp 2 --batch 2 --bucket-mb 0.05
resume_case recompute 1 --batch 4 --recompute
resume_case tp2 2 --batch 4 --tp 2
resume_case dp2xtp2 4 --batch 2 --tp 2
resume_case dp2xtp2-zero2 4 --batch 2 --tp 2 --zero 2
resume_case tp2xpp2 4 --batch 2 --tp 2 --pp 2 --micro-batches 2
resume_case tp2xpp2-zero1 4 --batch 2 --tp 2 --pp 2 --micro-batches 2 --zero 1
resume_case dp2xpp2-zero2 4 --batch 2 --pp 2 --micro-batches 2 --zero 2
resume_case tp2-zero3 2 --batch 4 --tp 2 --zero 3
resume_case dp2xtp2-zero3 4 --batch 2 --tp 2 --zero 3 --grad-accum 2

# relayout NAME P1 ARGS1... -- P2 ARGS2...: --stop-after 5 under one layout,
# --resume under another on the same global batch: AdamW's state is put back
# together from the first layout's files and laid out for the second, so
# the run goes on as the uninterrupted first one: every loss within 1e-5
# relative, every weight within 5e-5 (the layouts sum in other orders).
relayout() {
  local name=$1 P1=$2 a1=() l1=() l2=(); shift 2
  while [ "$1" != -- ]; do a1+=("$1"); shift; done
  shift
  local P2=$1; shift
  [ "$P1" -gt 1 ] && l1=(t_ddp "$P1")
  [ "$P2" -gt 1 ] && l2=(t_ddp "$P2")
  local full="$TDIR/$name-full" part="$TDIR/$name-part" out
  "${l1[@]}" "$TRAIN" train "${COMMON[@]}" "${a1[@]}" --ckpt-dir "$full" --log "$full.jsonl" &&
    "${l1[@]}" "$TRAIN" train "${COMMON[@]}" "${a1[@]}" --ckpt-dir "$part" --log "$part.jsonl" --stop-after 5 &&
    "${l2[@]}" "$TRAIN" train "${COMMON[@]}" "$@" --ckpt-dir "$part" --log "$part.jsonl" --resume ||
    { t_fail "$name: the runs"; return; }
  if out=$("$TRAIN" compare "$full" "$part" --tol 5e-5 2>&1) &&
    paste -d' ' <(t_losses "$full.jsonl") <(t_losses "$part.jsonl") |
    awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > 1e-5 || NF != 2) bad = 1; n++ } END { exit (bad || n != 12) }'; then
    t_pass "$name: stop-after 5 + resume under another layout goes on as the uninterrupted run ($out)"
  else
    t_fail "$name: resumed under another layout" "$out; $(paste -d' ' <(t_losses "$full.jsonl") <(t_losses "$part.jsonl") | tr '\n' ';')"
  fi
}
relayout dp2xtp2-to-1 4 --batch 2 --tp 2 --zero 1 -- 1 --batch 4
relayout 1-to-dp2xtp2 1 --batch 4 -- 4 --batch 2 --tp 2 --zero 2
relayout tp2-to-zero1 2 --batch 4 --tp 2 -- 2 --batch 2 --zero 1
# --pp: rank 0's file holds every stage's weights; the optimizer state is
# put together from every stage's files (ZeRO: each stage's shards)
relayout tp2xpp2-to-1 4 --batch 2 --tp 2 --pp 2 --micro-batches 2 -- 1 --batch 2 --grad-accum 2
relayout 1-to-tp2xpp2 1 --batch 4 -- 4 --batch 2 --tp 2 --pp 2 --micro-batches 2 --zero 1
relayout dp2xpp2-zero1-to-1 4 --batch 2 --pp 2 --micro-batches 2 --zero 1 -- 1 --batch 4 --grad-accum 2
relayout ddp-to-pp2 2 --batch 2 --grad-accum 2 -- 2 --batch 2 --pp 2 --micro-batches 4 --zero 2
# --zero 3: every file holds its shard of the weights, m and v, put together
# unit by unit; a --zero 3 run takes its shard of whatever was saved
relayout zero3-to-1 2 --batch 2 --zero 3 -- 1 --batch 4
relayout dp2xtp2-to-zero3 4 --batch 2 --tp 2 --zero 1 -- 2 --batch 2 --zero 3
relayout zero3-2-to-4 2 --batch 2 --zero 3 -- 4 --batch 1 --zero 3 --zero3-buffers 1
# under --tp each file holds its shard of its tensor-parallel rank's part:
# the shards make the parts, the parts the model, and back
relayout tp2-zero3-to-1 2 --batch 4 --tp 2 --zero 3 -- 1 --batch 4
relayout 1-to-dp2xtp2-zero3 1 --batch 4 -- 4 --batch 2 --tp 2 --zero 3
relayout dp2xtp2-zero3-to-zero3 4 --batch 2 --tp 2 --zero 3 -- 2 --batch 2 --zero 3

out=$("$TRAIN" train "${COMMON[@]}" --batch 4 --grad-accum 2 --ckpt-dir "$TDIR/single-part" --resume 2>&1) &&
  grep -q "nothing left to do" <<<"$out" && cmp -s "$TDIR/single-full/rank-0.ckpt" "$TDIR/single-part/rank-0.ckpt" &&
  t_pass "resume of a finished run succeeds and changes nothing" || t_fail "resume of a finished run" "$out"
t_fails_with "resume refuses another world size" "saved with WORLD_SIZE=2, this run has 1" \
  "$TRAIN" train "${COMMON[@]}" --batch 2 --zero 1 --ckpt-dir "$TDIR/zero1-part" --resume
t_fails_with "resume under another layout refuses another global batch" \
  "saved with WORLD_SIZE=2, this run has 2 \(--tp 2, 1; --pp 1, 1; --zero 0, 0\); another layout resumes with the same global batch: 4 sequences per step there, 8 here" \
  t_ddp 2 "$TRAIN" train "${COMMON[@]}" --batch 4 --ckpt-dir "$TDIR/tp2-part" --resume
t_fails_with "resume refuses another model" "checkpoint of another model" \
  "$TRAIN" train --model mini --data "$D" --seq 32 --steps 12 --batch 2 --quiet --ckpt-dir "$TDIR/single-part" --resume
t_fails_with "resume without a checkpoint says so" "no checkpoint of this rank" \
  "$TRAIN" train "${COMMON[@]}" --batch 2 --ckpt-dir "$TDIR/none" --resume
t_done
