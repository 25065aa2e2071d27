#!/bin/bash
# skiff-train's command line contract: every subcommand (as `skiff-train
# --help` lists them) answers --help and -h with its usage on stdout and exit
# 0 before parsing anything else; usage errors exit 2 and read
# "skiff-train SUBCMD: ..." with no strerror text (": Invalid argument");
# `tokenize` on one file gives train and val shards in a directory it creates.
source "$(dirname "$0")/../lib.sh"
t_trainer_init

mapfile -t subs < <("$TRAIN" --help | awk '/^  [a-z]/ { print $1 }')
if [ ${#subs[@]} -ge 7 ]; then t_pass "skiff-train --help lists ${#subs[@]} subcommands: ${subs[*]}"
else t_fail "skiff-train --help lists the subcommands" "$("$TRAIN" --help 2>&1)"; fi

bad_help=()
for s in "${subs[@]}"; do
  for h in --help -h; do
    # --help wins even after other (or wrong) arguments
    out=$("$TRAIN" "$s" --bogus-flag "$h" 2>"$TDIR/err"); rc=$?
    if [ $rc -ne 0 ] || [[ $out != "usage: skiff-train $s"* ]] || [ -s "$TDIR/err" ]; then
      bad_help+=("$s $h (exit $rc: $(head -c 100 <<<"$out$(cat "$TDIR/err")"))")
    fi
  done
  out=$("$TRAIN" help "$s"); [[ $out == "usage: skiff-train $s"* ]] || bad_help+=("help $s")
done
if [ ${#bad_help[@]} -eq 0 ]; then t_pass "SUBCMD --help and -h: exit 0, usage on stdout, for all ${#subs[@]}"
else t_fail "SUBCMD --help" "${bad_help[*]}"; fi

# usage_error NAME CMD...: exit 2, "skiff-train SUB: ..." on stderr, no strerror
bad_usage=() n_usage=0
usage_error() {
  local sub=$1; shift
  local err rc
  err=$("$TRAIN" "$sub" "$@" 2>&1 >/dev/null); rc=$?
  n_usage=$((n_usage + 1))
  if [ $rc -ne 2 ] || [[ $err != "skiff-train $sub: "* ]] || grep -q ': Invalid argument' <<<"$err"; then
    bad_usage+=("[$sub $* -> exit $rc: $(head -1 <<<"$err")]")
  fi
}
for s in "${subs[@]}"; do usage_error "$s" --no-such-option; done
usage_error train --batch
usage_error train --model tiny --data x --batch 0 --seq 8 --steps 1
usage_error train --model tiny --data x --batch 1 --seq 8 --steps 1 --zero 4
usage_error train --model tiny --data x --batch 1 --seq 8 --steps 1 --zero 3 --pp 2 --device cuda
usage_error train --model tiny --data x --batch 1 --seq 8 --steps 1 --zero 3 --zero3-buffers 3
usage_error train --model tiny --data x --batch 1 --seq 8 --steps 1 --device tpu
usage_error train --model tiny --data x --batch 1 --seq 8 --steps 1 --precision fp8
usage_error train --model tiny --data x --batch 1 --seq 8 --steps 1 --lr fast
usage_error train --model tiny --data x --batch 1 --seq 8 --steps 1 --data-order random
usage_error train --model huge --data x --batch 1 --seq 8 --steps 1
usage_error train --data x --batch 1 --seq 8 --steps 1
usage_error train --model tiny --data x --batch 1 --seq 8 --steps 1 extra
usage_error tokenize --out "$TDIR/u/x"
usage_error tokenize --out "$TDIR/u/x" --val-frac 0.7 /etc/hostname
usage_error tokenize --out "$TDIR/u/x" --tokenizer klingon /etc/hostname
usage_error tokenize --out "$TDIR/u/x" --shard-tokens 1 /etc/hostname
usage_error sample
usage_error sample --ckpt-dir a --init-from b
usage_error sample --ckpt-dir a --tokens 0
usage_error decode
usage_error export --llmc x.bin
usage_error tokenizer-import --encoder x
usage_error plot only-one-argument
usage_error compare a b --tol minus
if [ ${#bad_usage[@]} -eq 0 ]; then
  t_pass "$n_usage usage errors: exit 2, 'skiff-train SUBCMD: ...', none ends in ': Invalid argument'"
else
  t_fail "usage errors" "${bad_usage[*]}"
fi
# runtime validation errors do not carry strerror(EINVAL) either
out=$(RANK=0 "$TRAIN" train --model tiny --data x --batch 1 --seq 8 --steps 1 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q 'RANK is set but WORLD_SIZE is not' <<<"$out" && ! grep -q 'Invalid argument' <<<"$out"; then
  t_pass "env:// errors name the variable, no strerror"
else
  t_fail "env:// errors" "exit $rc: $out"
fi
t_fails_with "no subcommand: usage, exit 2" "usage: skiff-train" "$TRAIN"
t_fails_with "unknown subcommand: exit 2" "unknown subcommand 'fly'" "$TRAIN" fly

# ---- tokenize: one 3 MB file, an output directory that does not exist ------------
for i in $(seq 1 65); do cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0; done >"$TDIR/one.txt"
size=$(stat -c %s "$TDIR/one.txt")
if out=$("$TRAIN" tokenize --out "$TDIR/new/dir/one" "$TDIR/one.txt" 2>&1) &&
   [ -s "$TDIR/new/dir/one_train_000000.bin" ] && [ -s "$TDIR/new/dir/one_val_000000.bin" ]; then
  t_pass "tokenize one $((size / 1000)) kB file into a new directory: $(tail -1 <<<"$out")"
else
  t_fail "tokenize one file gives train and val" "$out"
fi
# the val part is the last tenth of the tokens, after an end-of-text token
tr=$(od -A n -t d4 -j 8 -N 4 "$TDIR/new/dir/one_train_000000.bin" | tr -d ' ')
va=$(od -A n -t d4 -j 8 -N 4 "$TDIR/new/dir/one_val_000000.bin" | tr -d ' ')
if awk -v t="$tr" -v v="$va" 'BEGIN { f = (v - 1) / (t + v - 1); exit !(f > 0.099 && f < 0.101) }'; then
  t_pass "split by tokens: $tr train, $va val tokens"
else
  t_fail "split by tokens" "$tr train, $va val"
fi

# ---- tokenize --out DIR: into the directory, named after the input ----------------
mkdir -p "$TDIR/outdir"
L=/usr/share/common-licenses
if "$TRAIN" tokenize --out "$TDIR/outdir" "$L/GPL-3" >/dev/null 2>&1 &&
   "$TRAIN" tokenize --out "$TDIR/newdir/" "$L/GPL-3" "$L/Apache-2.0" >/dev/null 2>&1 &&
   [ -s "$TDIR/outdir/GPL-3_train_000000.bin" ] && [ -s "$TDIR/newdir/common-licenses_train_000000.bin" ] &&
   [ -z "$(ls "$TDIR" | grep -E '^(outdir|newdir)_')" ]; then
  t_pass "tokenize --out DIR and DIR/ write into the directory (GPL-3_train_*, common-licenses_train_*)"
else
  t_fail "tokenize --out DIR writes into the directory" "$(ls -R "$TDIR/outdir" "$TDIR/newdir" 2>&1 | tr '\n' ' ')"
fi
t_done
