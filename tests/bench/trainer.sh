#!/bin/bash
# skiff-train on CPU: tokens/s of the `mini` model (0.86M params) for 1, 2 and
# 4 ranks on localhost at the same global batch (8 sequences x 128 tokens),
# one OpenMP thread per rank. Per step (mean of steps 3..N from the JSONL):
#   comm ms  = time the comm thread spent in collectives
#   wait ms  = time the training loop waited on them (exposed)
#   hidden   = overlap/comm: the share of communication time that finished
#              while the backward pass was still running (overlap_ms in the
#              log: collectives completed between the start and the end of
#              the last micro-step's backward)
#   exposed  = wait / step time: what communication (and waiting for the
#              slowest peer) adds to a step, the DDP overhead on top of compute
#   vs 1 rank = tokens/s relative to one rank doing the whole global batch
#   RSS MiB   = rank 0's peak resident memory (/usr/bin/time): what a rank
#              holds under each layout, the same run
#   bubble    = --pp: the share of the schedule a stage spent not computing,
#              measured (mean over ranks and steps, the run's last line),
#              beside (N-1)/(M+N-1) for N stages and M micro-batches; the
#              --pp rows keep the global batch (--pp 2: 4 micro-batches of 2
#              on one pipeline; dp2 x pp2: 2 of 2 on each of two), and their
#              RSS lists every rank's (the stages hold different layers)
#   state MiB = parameters + gradients + optimizer state per rank, as the
#              run's first line reports them (ZeRO-3: its shards plus the
#              gathered block buffers); below the table, ZeRO-3's against
#              issue 29's target: 1/P of ZeRO-0's state plus one gathered
#              block (weights and gradient)
# Tensor parallelism in the same table: --tp 2 on 2 ranks (one replica, each
# rank half the heads and half the MLP, the whole global batch) and dp2 x tp2
# on 4 (and with ZeRO-3: each rank's part sharded over its data-parallel
# pair); their comm ms adds the tensor-parallel all-reduces (synchronous, so
# also in the exposed wait). The three composed, same global batch: dp2 x
# pp2 with ZeRO-1 and with ZeRO-3, tp2 x pp2 (4 ranks) and dp2 x tp2 x pp2
# with ZeRO-1 (8).
# Prints a markdown table. Env: STEPS (default 12), MODEL (mini), SEQ (128).
# A second table: activation recomputation (--recompute) against keeping the
# activations, one rank, the same run otherwise (mini, 8 x 256 tokens, where
# attention's T x T activations dominate): tokens/s, peak RSS
# (/usr/bin/time), activation memory (the run's first line), as ratios.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TRAIN=${SKIFF_TRAIN:-$ROOT/build/bin/skiff-train}
STEPS=${STEPS:-12} MODEL=${MODEL:-mini} SEQ=${SEQ:-128} GLOBAL=8
export OMP_NUM_THREADS=1
W=$(mktemp -d /tmp/skiff-train-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
"$TRAIN" tokenize --out "$W/lic" --val-frac 0 /usr/share/common-licenses/* >/dev/null 2>&1 ||
  { echo "bench: tokenize failed" >&2; exit 1; }

run() { # run NAME P BUCKET_MB [args]; TP=N in the environment for --tp N
  local name=$1 P=$2 mb=$3; shift 3
  local dp=$((P / ${TP:-1}))
  local port=$((20000 + (RANDOM * 7 + $$) % 30000)) pids=() r rc=0
  for ((r = 0; r < P; r++)); do
    local timed=(/usr/bin/time -f %M -o "$W/$name.rss.$r") quiet=(--quiet) out=/dev/null
    [ $r = 0 ] && timed=(/usr/bin/time -f %M -o "$W/$name.rss") quiet=() out=$W/$name.out
    RANK=$r WORLD_SIZE=$P LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "${timed[@]}" "$TRAIN" train --model "$MODEL" --data "$W/lic_train_*.bin" --seq "$SEQ" \
      --batch $((GLOBAL / dp)) --steps "$STEPS" --bucket-mb "$mb" "${quiet[@]}" \
      --log "$W/$name.jsonl" "$@" >"$out" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

# mean of a field over steps 3..N
field() { tail -n +3 "$W/$1.jsonl" | awk -v k="\"$2\":" '{ v = 0; i = index($0, k); if (i) v = substr($0, i + length(k)) + 0; s += v } END { printf "%.1f", s / NR }'; }

# params + gradients + optimizer MiB from the run's first line
state() { grep -o 'per rank: .*' "$W/$1.out" | awk '{ for (i = 1; i < NF; i++) if ($i ~ /^(params|gradients|optimizer)$/) t += $(i + 1) } END { printf "%.1f", t }'; }
echo "| ranks | micro-batch | layout | tokens/s | ms/step | comm ms/step | exposed wait ms/step | hidden | exposed | bubble (ideal) | vs 1 rank | RSS MiB | state MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
base=""
row() { # row NAME P DESC [MICRO-BATCH]; TP=N as for run
  local name=$1 P=$2 desc=$3
  local dp=$((P / ${TP:-1}))
  local mbd=${4:-$((GLOBAL / dp)) x $SEQ}
  local tps ms comm wait hidden rel exposed ov bubble rss
  tps=$(field "$name" tokens_per_s); ms=$(field "$name" ms)
  comm=$(field "$name" comm_ms); wait=$(field "$name" wait_ms); ov=$(field "$name" overlap_ms)
  hidden=$(awk -v c="$comm" -v o="$ov" 'BEGIN { if (c > 0) printf "%.0f%%", 100 * o / c; else print "-" }')
  exposed=$(awk -v m="$ms" -v w="$wait" 'BEGIN { printf "%.1f%%", 100 * w / m }')
  [ -z "$base" ] && base=$tps
  rel=$(awk -v a="$tps" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')
  bubble=$(sed -n 's/.*pipeline bubble \([0-9.]*\) measured.* = \([0-9.]*\) .*/\1 (\2)/p' "$W/$name.out")
  rss=$(($(cat "$W/$name.rss") / 1024))
  if [ -n "$bubble" ]; then
    rss=$(for ((r = 1; r < P; r++)); do echo $(($(cat "$W/$name.rss.$r") / 1024)); done | paste -sd/)
    rss="$(($(cat "$W/$name.rss") / 1024))/$rss"
  fi
  echo "| $P | $mbd | $desc | $tps | $ms | $comm | $wait | $hidden | $exposed | ${bubble:--} | $rel | $rss | $(state "$name") |"
}
run p1 1 25 && row p1 1 "-"
run p2 2 25 && row p2 2 "25 MiB (one bucket)"
run p2s 2 0.5 && row p2s 2 "0.5 MiB"
run p4 4 0.5 && row p4 4 "0.5 MiB"
run p2z 2 25 --zero 1 && row p2z 2 "ZeRO-1 (no overlap)"
run p2z2 2 25 --zero 2 && row p2z2 2 "ZeRO-2 (no overlap)"
TP=2 run t2 2 25 --tp 2 && TP=2 row t2 2 "--tp 2 (no DP)"
TP=2 run d2t2 4 0.5 --tp 2 && TP=2 row d2t2 4 "dp2 x tp2, 0.5 MiB"
TP=2 run d2t2z3 4 25 --tp 2 --zero 3 && TP=2 row d2t2z3 4 "dp2 x tp2, ZeRO-3 (prefetch + overlap)"
run p2z3 2 25 --zero 3 && row p2z3 2 "ZeRO-3 (prefetch + overlap)"
run p2z3b 2 25 --zero 3 --zero3-buffers 1 && row p2z3b 2 "ZeRO-3, --zero3-buffers 1"
run p4z3 4 25 --zero 3 && row p4z3 4 "ZeRO-3 (prefetch + overlap)"
run p4z3b 4 25 --zero 3 --zero3-buffers 1 && row p4z3b 4 "ZeRO-3, --zero3-buffers 1"
# the two schedules paired: PP_ROUNDS (3) rounds, each running both, which
# goes first alternating, and the round with the median tokens/s of each in
# the table, so a burst of other work on the machine lands on neither side
# alone (one run of each in turn once gave 1f1b 0.65x of gpipe for the same
# CPU time; doc/trainer-parallelism.md, section 6)
PPR=${PP_ROUNDS:-3} ppok=1
for ((i = 0; i < PPR; i++)); do
  for s in $( ((i % 2)) && echo "gpipe 1f1b" || echo "1f1b gpipe"); do
    run "pp2$s.$i" 2 25 --pp 2 --batch 2 --micro-batches 4 --pp-schedule "$s" || ppok=0
  done
done
median_round() { # median_round NAME: the round whose tokens/s is the median of NAME.0..
  for ((i = 0; i < PPR; i++)); do echo "$(field "$1.$i" tokens_per_s) $i"; done | sort -n |
    awk -v n="$PPR" 'NR == int((n + 1) / 2) { print $2 }'
}
if [ $ppok = 1 ]; then
  for s in 1f1b gpipe; do
    m=$(median_round "pp2$s")
    for f in "$W/pp2$s.$m".*; do cp "$f" "$W/pp2$s${f#"$W/pp2$s.$m"}"; done
    row "pp2$s" 2 "--pp 2, $s (median of $PPR)" "2 x $SEQ x M 4"
  done
fi
run dp2pp2 4 25 --pp 2 --batch 2 --micro-batches 2 && row dp2pp2 4 "dp2 x pp2, 1f1b" "2 x $SEQ x M 2"
run dp2pp2z1 4 25 --pp 2 --batch 2 --micro-batches 2 --zero 1 && row dp2pp2z1 4 "dp2 x pp2, ZeRO-1" "2 x $SEQ x M 2"
run dp2pp2z3 4 25 --pp 2 --batch 2 --micro-batches 2 --zero 3 && row dp2pp2z3 4 "dp2 x pp2, ZeRO-3 (one gather a step)" "2 x $SEQ x M 2"
TP=2 run t2pp2 4 25 --tp 2 --pp 2 --batch 4 --micro-batches 2 && TP=2 row t2pp2 4 "tp2 x pp2" "4 x $SEQ x M 2"
TP=2 run d2t2p2 8 25 --tp 2 --pp 2 --batch 2 --micro-batches 2 --zero 1 &&
  TP=2 row d2t2p2 8 "dp2 x tp2 x pp2, ZeRO-1" "2 x $SEQ x M 2"
echo
if [ $ppok = 1 ]; then
  echo "--pp 2, 1f1b / gpipe tokens/s, round by round (paired): $(for ((i = 0; i < PPR; i++)); do
    awk -v a="$(field "pp21f1b.$i" tokens_per_s)" -v b="$(field "pp2gpipe.$i" tokens_per_s)" 'BEGIN { printf "%.2f ", a / b }'
  done)"
  echo
fi
# one block of the model, weights and gradient: 2 (12 C^2 + 13 C) floats
C=$(grep -o ' C[0-9]*' "$W/p1.out" | head -1 | tr -d ' C')
blk=$(awk -v c="$C" 'BEGIN { printf "%.2f", 2 * (12 * c * c + 13 * c) * 4 / 1048576 }')
for z in p2z3 p2z3b p4z3 p4z3b; do
  P=${z:1:1} z0=$([ "${z:1:1}" = 2 ] && echo p2 || echo p4)
  awk -v s="$(state $z)" -v a="$(state $z0)" -v P="$P" -v b="$blk" -v n="$z" 'BEGIN {
    t = a / P + b; printf "%s: ZeRO-3 state %.1f MiB per rank; target ZeRO-0 %.1f / %d + one block %.2f = %.1f MiB: %s\n",
      n, s, a, P, b, t, s <= t ? "met" : "over" }'
done
echo
echo "model $MODEL, $STEPS steps (means of steps 3..$STEPS), global batch $GLOBAL x $SEQ tokens, $(getconf _NPROCESSORS_ONLN) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

RSTEPS=6
recompute_run() { # NAME [args]: fills $W/NAME.jsonl, .rss (KiB), .acts (MiB)
  local name=$1; shift
  /usr/bin/time -f %M -o "$W/$name.rss" "$TRAIN" train --model mini --data "$W/lic_train_*.bin" --seq 256 \
    --batch 8 --steps $RSTEPS --log "$W/$name.jsonl" "$@" >"$W/$name.out" || return 1
  sed -n 's/.*activations \([0-9.]*\) MiB.*/\1/p' "$W/$name.out" >"$W/$name.acts"
}
echo
echo "| mini, 1 rank, 8 x 256 | tokens/s | peak RSS MiB | activations MiB | losses |"
echo "|---|---|---|---|---|"
if recompute_run keep && recompute_run rec --recompute; then
  same=$(cmp -s <(sed 's/"tokens_per_s".*//' "$W/keep.jsonl") <(sed 's/"tokens_per_s".*//' "$W/rec.jsonl") &&
    echo "the same bits" || echo DIFFER)
  for n in keep rec; do
    echo "| $([ $n = rec ] && echo --recompute || echo "activations kept") | $(field $n tokens_per_s) |" \
      "$(($(cat "$W/$n.rss") / 1024)) | $(cat "$W/$n.acts") | $same |"
  done
  awk -v a="$(field rec tokens_per_s)" -v b="$(field keep tokens_per_s)" -v r="$(cat "$W/rec.rss")" \
    -v k="$(cat "$W/keep.rss")" 'BEGIN { printf "| --recompute / kept | %.2fx | %.2fx | | |\n", a / b, r / k }'
else
  echo "bench: the --recompute runs failed" >&2
  exit 1
fi
echo
echo "means of steps 3..$RSTEPS, one OpenMP thread, load average $(cut -d' ' -f1-3 /proc/loadavg)"
