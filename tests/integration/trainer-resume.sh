#!/bin/bash
# Checkpoints: --stop-after then --resume continues bit for bit (params,
# AdamW state, step, data position), alone and with ZeRO on 2 ranks; a
# checkpoint of another world size or model is refused; nothing temporary is
# left behind.
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

out=$("$TRAIN" train "${COMMON[@]}" --batch 4 --grad-accum 2 --ckpt-dir "$TDIR/single-part" --resume 2>&1) &&
  grep -q "nothing left to do" <<<"$out" && cmp -s "$TDIR/single-full/rank-0.ckpt" "$TDIR/single-part/rank-0.ckpt" &&
  t_pass "resume of a finished run succeeds and changes nothing" || t_fail "resume of a finished run" "$out"
t_fails_with "resume refuses another world size" "saved with WORLD_SIZE=2, this run has 1" \
  "$TRAIN" train "${COMMON[@]}" --batch 2 --zero 1 --ckpt-dir "$TDIR/zero1-part" --resume
t_fails_with "resume refuses another model" "checkpoint of another model" \
  "$TRAIN" train --model mini --data "$D" --seq 32 --steps 12 --batch 2 --quiet --ckpt-dir "$TDIR/single-part" --resume
t_fails_with "resume refuses another ZeRO stage" "saved with --zero 1, this run uses --zero 0" \
  t_ddp 2 "$TRAIN" train "${COMMON[@]}" --batch 2 --ckpt-dir "$TDIR/zero1-part" --resume
t_fails_with "resume refuses ZeRO-3 shards under another stage" "saved with --zero 3, this run uses --zero 2" \
  t_ddp 2 "$TRAIN" train "${COMMON[@]}" --batch 2 --zero 2 --ckpt-dir "$TDIR/zero3-part" --resume
t_fails_with "resume without a checkpoint says so" "no checkpoint of this rank" \
  "$TRAIN" train "${COMMON[@]}" --batch 2 --ckpt-dir "$TDIR/none" --resume
t_done
