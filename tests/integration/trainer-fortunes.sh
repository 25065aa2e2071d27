#!/bin/bash
# End to end on real text: tokenize Debian's fortunes, train the tiny model
# for 300 steps (loss must fall by at least half), validate, plot the loss
# curve, sample from the checkpoint.
source "$(dirname "$0")/../lib.sh"
t_trainer_init
FORT=/usr/share/games/fortunes
if [ ! -d "$FORT" ]; then t_skip "fortunes training" "Debian package fortunes not installed"; t_done; fi
mapfile -t files < <(find "$FORT" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
if "$TRAIN" tokenize --out "$TDIR/fort" --doc-sep % --val-frac 0.1 "${files[@]}" >"$TDIR/tok.log"; then
  t_pass "tokenize fortunes: $(tail -1 "$TDIR/tok.log")"
else
  t_fail "tokenize fortunes" "$(cat "$TDIR/tok.log")"
fi
# llm.c header: magic 20240520, version 1, count
hdr=$(od -A n -t d4 -N 12 "$TDIR/fort_train_000000.bin" | tr -s ' ')
[[ $hdr == " 20240520 1 "* ]] && t_pass "shard header is llm.c's ($hdr)" || t_fail "shard header" "$hdr"

start=$(date +%s)
if "$TRAIN" train --model tiny --data "$TDIR/fort_train_*.bin" --val "$TDIR/fort_val_*.bin" \
     --batch 16 --seq 64 --steps 300 --lr 3e-3 --val-every 100 --val-batches 4 \
     --log "$TDIR/fort.jsonl" --ckpt-dir "$TDIR/ck" --quiet; then
  first=$(t_losses "$TDIR/fort.jsonl" | head -1)
  last=$(t_losses "$TDIR/fort.jsonl" | tail -20 | awk '{ s += $1 } END { printf "%.4f", s / NR }')
  if awk -v f="$first" -v l="$last" 'BEGIN { exit !(l <= f / 2) }'; then
    t_pass "loss falls by half in 300 steps: $first -> $last (mean of last 20) in $(( $(date +%s) - start ))s"
  else
    t_fail "loss falls by half in 300 steps" "$first -> $last"
  fi
  n=$(grep -c '"val_loss"' "$TDIR/fort.jsonl")
  [ "$n" = 3 ] && t_pass "val loss every 100 steps" || t_fail "val loss every 100 steps" "$n records"
  for k in step loss lr grad_norm tokens_per_s ms; do
    grep -q "\"$k\":" <(head -1 "$TDIR/fort.jsonl") || t_fail "log field $k"
  done
  t_pass "JSONL has step, loss, lr, grad_norm, tokens_per_s, ms"
else
  t_fail "train tiny on fortunes"
fi

if command -v gnuplot >/dev/null; then
  if "$TRAIN" plot "$TDIR/fort.jsonl" "$TDIR/loss.png" && file "$TDIR/loss.png" | grep -q 'PNG image'; then
    t_pass "plot writes a PNG loss curve"
  else
    t_fail "plot writes a PNG loss curve"
  fi
  t_fails_with "plot of an empty log fails cleanly" "no step records" "$TRAIN" plot /dev/null "$TDIR/empty.png"
  [ -e "$TDIR/empty.png" ] && t_fail "plot left a file behind"
else
  t_skip "plot" "gnuplot (Debian gnuplot-nox) not installed"
fi

out=$("$TRAIN" sample --ckpt-dir "$TDIR/ck" --prompt "Q: " --tokens 120 --temperature 0.8 --seed 3)
if [ "${#out}" -ge 100 ]; then t_pass "sample generates text: $(head -c 60 <<<"$out" | tr '\n' ' ')"
else t_fail "sample" "$out"; fi
t_done
