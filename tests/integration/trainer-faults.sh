#!/bin/bash
# Failures become errors, never hangs: a rank that never arrives, a rank
# killed mid-training, a rank that stops answering, and bad command lines.
source "$(dirname "$0")/../lib.sh"
t_trainer_init
t_corpus
D="$TDIR/lic_train_*.bin"
LONG=(--model tiny --data "$D" --seq 32 --batch 4 --steps 100000 --quiet)

# 1. WORLD_SIZE=3 but rank 2 never starts: rank 0 names it after --timeout.
port=$(t_port)
start=$(date +%s)
pids=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$TRAIN" train "${LONG[@]}" --timeout 2 >"$TDIR/miss$r.log" 2>&1 &
  pids+=($!)
done
wd=$(t_watchdog 60 "${pids[@]}")
wait "${pids[@]}"
kill "$wd" 2>/dev/null
took=$(( $(date +%s) - start ))
if grep -q "rank 2 of WORLD_SIZE=3 did not arrive within 2.0 s" "$TDIR/miss0.log" && [ "$took" -lt 30 ]; then
  t_pass "a rank that never arrives: rendezvous error naming it after ${took}s"
else
  t_fail "a rank that never arrives" "$(cat "$TDIR"/miss*.log) (${took}s)"
fi

# 2. No rank 0 at all: the others say the store is unreachable.
t_fails_with "no rank 0: store not reachable, names MASTER_ADDR:MASTER_PORT" \
  "rank 0's store at MASTER_ADDR:MASTER_PORT=127.0.0.1:$port not reachable" \
  env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port SKIFF_TRAIN_TIMEOUT=1 "$TRAIN" train "${LONG[@]}"

# 3. A rank killed mid-step: the others exit non-zero with an error that says
# a peer closed the connection, well within the timeout (EOF is immediate);
# under DDP and under ZeRO-3 (whose per-block gathers are in flight while
# the compute runs).
kill_case() { # kill_case DESC [train args]
  local desc=$1; shift
  local port pids=() r wd start rc0 rc1 took
  port=$(t_port)
  for r in 0 1 2; do
    RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$TRAIN" train "${LONG[@]}" --timeout 30 "$@" >"$TDIR/kill$r.log" 2>&1 &
    pids+=($!)
  done
  wd=$(t_watchdog 60 "${pids[@]}")
  sleep 2
  kill -9 "${pids[2]}"
  start=$(date +%s)
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
  took=$(( $(date +%s) - start ))
  kill "$wd" 2>/dev/null
  if [ $rc0 -ne 0 ] && [ $rc0 -ne 137 ] && [ $rc1 -ne 0 ] && [ $rc1 -ne 137 ] && [ "$took" -lt 30 ] &&
     grep -q "closed the connection" "$TDIR/kill0.log" "$TDIR/kill1.log"; then
    t_pass "$desc: the others fail in ${took}s with '$(grep -h -o 'rank [0-9] closed the connection' "$TDIR"/kill[01].log | head -1)'"
  else
    t_fail "$desc" "rc $rc0/$rc1 after ${took}s: $(cat "$TDIR"/kill[01].log)"
  fi
}
kill_case "a rank killed mid-step"
kill_case "a rank killed mid-step under --zero 3" --zero 3

# silent NAME P ARGS...: P ranks train; after 2 s rank 1 stops answering
# (SIGSTOP); waits for the others, then kills it. Sets rcs[r] (the others'
# exit codes) and took (seconds from the stop until the last exited).
silent() {
  local name=$1 P=$2 r; shift 2
  local port; port=$(t_port)
  local pids=()
  for ((r = 0; r < P; r++)); do
    RANK=$r WORLD_SIZE=$P MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$TRAIN" train "${LONG[@]}" "$@" >"$TDIR/$name$r.log" 2>&1 &
    pids+=($!)
  done
  local wd; wd=$(t_watchdog 60 "${pids[@]}")
  sleep 2
  kill -STOP "${pids[1]}"
  local start; start=$(date +%s)
  rcs=()
  for ((r = 0; r < P; r++)); do [ $r = 1 ] || { wait "${pids[r]}"; rcs[r]=$?; }; done
  took=$(( $(date +%s) - start ))
  kill -KILL "${pids[1]}" 2>/dev/null; wait "${pids[1]}" 2>/dev/null
  kill "$wd" 2>/dev/null
}
failed_not_killed() { local rc; for rc in "$@"; do [ "$rc" -ne 0 ] && [ "$rc" -ne 137 ] || return 1; done; }

# 4. A rank that stops answering (SIGSTOP): the others time out naming a rank.
silent stop 2 --timeout 3
if failed_not_killed "${rcs[0]}" && grep -q "rank 1 .* nothing for 3.0 s" "$TDIR/stop0.log"; then
  t_pass "a silent rank: rank 0 fails after ${took}s naming rank 1"
else
  t_fail "a silent rank" "rc ${rcs[0]} after ${took}s: $(cat "$TDIR/stop0.log")"
fi

# 4b. The same under dp2 x tp2 (--tp 2): rank 1, rank 0's tensor-parallel
# peer, stops answering in the middle of the model's all-reduces; rank 0
# fails within the timeout naming a rank it waited on, and so does every
# other rank (none hangs).
silent tpstop 4 --tp 2 --timeout 3
if failed_not_killed "${rcs[0]}" "${rcs[2]}" "${rcs[3]}" &&
  grep -Eq "rank [123] (sent nothing for 3.0 s|closed the connection)" "$TDIR/tpstop0.log"; then
  t_pass "a silent rank under --tp 2: the others fail in ${took}s ($(grep -Eho 'rank 0: .*' "$TDIR/tpstop0.log" | head -1))"
else
  t_fail "a silent rank under --tp 2" "rc ${rcs[*]} after ${took}s: $(cat "$TDIR"/tpstop[023].log)"
fi

# 4c. And under dp2 x tp2 with --zero 3: rank 1 stops inside the model's
# all-reduces (rank 0, its tensor-parallel peer) and the per-block gathers
# and reduce-scatters of its part (rank 3, its data-parallel peer); every
# other rank fails within the timeout naming a rank.
silent tpz3stop 4 --tp 2 --zero 3 --timeout 3
if failed_not_killed "${rcs[0]}" "${rcs[2]}" "${rcs[3]}" &&
  grep -Eq "rank [123] (sent nothing for 3.0 s|closed the connection)" "$TDIR/tpz3stop0.log" &&
  grep -Eq "rank [0-2] (sent nothing for 3.0 s|closed the connection)" "$TDIR/tpz3stop3.log"; then
  t_pass "a silent rank under dp2 x tp2 --zero 3: the others fail in ${took}s ($(grep -Eho 'rank 3: .*' "$TDIR/tpz3stop3.log" | head -1))"
else
  t_fail "a silent rank under dp2 x tp2 --zero 3" "rc ${rcs[*]} after ${took}s: $(cat "$TDIR"/tpz3stop[023].log)"
fi

# 5. Command-line errors: exit 2 and a message.
t_fails_with "unknown model lists the presets" "unknown model 'huge' \(known: tiny" \
  "$TRAIN" train --model huge --data "$D" --batch 1 --seq 8 --steps 1
t_fails_with "--seq beyond the context" "--seq 65: model tiny has a context of 64" \
  "$TRAIN" train --model tiny --data "$D" --batch 1 --seq 65 --steps 1
t_fails_with "missing shards" "no shard matches" \
  "$TRAIN" train --model tiny --data "$TDIR/none_*.bin" --batch 1 --seq 8 --steps 1
t_fails_with "--stop-after needs --ckpt-dir" "give --ckpt-dir" \
  "$TRAIN" train --model tiny --data "$D" --batch 1 --seq 8 --steps 5 --stop-after 2
t_fails_with "half an env:// setup" "RANK is set but WORLD_SIZE is not" \
  env RANK=0 "$TRAIN" train --model tiny --data "$D" --batch 1 --seq 8 --steps 1
t_fails_with "--tp on CUDA that does not divide the heads: a clear error" "--tp 3: must divide the model's heads" \
  "$TRAIN" train --model tiny --data "$D" --batch 1 --seq 8 --steps 1 --device cuda --tp 3
if "$TRAIN" train --help | grep -q 'device cpu|cuda'; then t_pass "train --help lists --device"; else t_fail "train --help"; fi
out=$("$TRAIN" train --model tiny --data "$D" --batch 1 --seq 8 --steps 1 --device cuda --quiet 2>&1); rc=$?
if grep -q "built without CUDA" <<<"$out"; then
  [ $rc -eq 2 ] && t_pass "--device cuda without CUDA: clear error" || t_fail "--device cuda exit code $rc"
else
  t_skip "--device cuda without CUDA" "this skiff-train was built with CUDA"
fi
t_done
