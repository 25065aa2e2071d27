#!/bin/bash
# A dead or stopped peer on skiff-train's CUDA path is a clear error within
# --timeout, never a hang: two ranks on one device (host-staged backend),
# then rank 1 is killed (SIGKILL), or stopped (SIGSTOP: a silent peer), in
# the middle of training. Rank 0 must exit non-zero, name rank 1, and do so
# within the timeout plus one step; under --zero 3 too (rank 1 killed while
# the blocks' gathers and reduce-scatters run). Runs on the CPU emulation
# (build/emu/bin/skiff-train) in `make test`; tests/gpu/run-tests.sh runs it
# against the real binary on a GPU (SKIFF_PEER_TEST_BIN). Last, a peer that
# dies inside NCCL's communicator creation (emulation only).
source "$(dirname "$0")/../lib.sh"
ST=${SKIFF_PEER_TEST_BIN:-$BUILD/emu/bin/skiff-train}
TOOL=$BUILD/tests/gpu/gpu_tool
if [ ! -x "$ST" ] || [ ! -x "$TOOL" ]; then
  t_skip "dead peer on the CUDA path" "$ST or $TOOL is not built (needs nvcc at build time)"
  t_done
fi
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
lines() { { wc -l <"$1"; } 2>/dev/null || echo 0; }
trap cleanup EXIT
"$TOOL" mkshard --out "$tmp/train_000.bin" --tokens 200000 --vocab 256 --text >/dev/null ||
  { t_fail "dead peer: mkshard"; t_done; }
TIMEOUT=${SKIFF_PEER_TEST_TIMEOUT:-20}

# case SIGNAL [TRAIN ARGS...]: starts 2 ranks, waits for step 2 in rank 0's
# log, signals rank 1 and times rank 0's exit.
peer_case() {
  local sig=$1 port=$((20000 + RANDOM % 20000)) log="$tmp/$1.jsonl" t0 t1 rc what=""
  shift
  [ $# -gt 0 ] && what=" $*"
  rm -f "$log"
  pids=()
  for r in 0 1; do
    SKIFF_TRAIN_COMM=host-staged RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port "$ST" train --model tiny --data "$tmp/train_*.bin" --batch 1 --seq 16 --steps 100000 \
      --device cuda --precision fp32 --timeout "$TIMEOUT" --log "$log" "$@" >"$tmp/$sig.r$r" 2>&1 &
    pids+=($!)
  done
  disown "${pids[1]}"  # it is killed on purpose: no job notice from bash
  local waited=0
  while [ "$(lines "$log")" -lt 2 ] && [ "$waited" -lt 600 ] && kill -0 "${pids[0]}" 2>/dev/null; do
    sleep 0.5; waited=$((waited + 1))
  done
  if [ "$(lines "$log")" -lt 2 ]; then
    t_fail "dead peer ($sig$what): training did not reach step 2" "$(tail -2 "$tmp/$sig.r0" "$tmp/$sig.r1" | tr '\n' ' ')"
    return
  fi
  t0=$(date +%s.%N)
  kill "-$sig" "${pids[1]}"
  # rank 0 must end by itself; the limit only keeps a broken build from hanging CI
  local limit=$((TIMEOUT * 3 + 120)) n=0
  while kill -0 "${pids[0]}" 2>/dev/null && [ "$n" -lt $((limit * 10)) ]; do sleep 0.1; n=$((n + 1)); done
  t1=$(date +%s.%N)
  if kill -0 "${pids[0]}" 2>/dev/null; then
    t_fail "dead peer ($sig$what): rank 0 still running after ${limit} s (a hang)"
    return
  fi
  wait "${pids[0]}"; rc=$?
  kill -9 "${pids[1]}" 2>/dev/null
  local dt msg
  dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  msg=$(grep -m1 -E 'rank 1' "$tmp/$sig.r0")
  # the step being computed when the peer stopped may finish first: allow one
  # emulated step (the log shows how long they take) on top of the timeout
  local step_s
  step_s=$(grep -o '"ms":[0-9.]*' "$log" | tail -1 | cut -d: -f2 | awk '{ printf "%d", $1 / 1000 + 1 }')
  local name="dead peer ($sig$what): rank 0 fails naming rank 1 within --timeout $TIMEOUT s (+ one step of ${step_s} s)"
  if [ "$rc" -eq 0 ]; then
    t_fail "$name" "rank 0 exited 0"
  elif [ -z "$msg" ]; then
    t_fail "$name" "no message naming rank 1: $(tail -2 "$tmp/$sig.r0")"
  elif awk -v d="$dt" -v l="$((TIMEOUT + step_s + 5))" 'BEGIN { exit !(d <= l) }'; then
    t_pass "$name: ${dt} s, exit $rc: $msg"
  else
    t_fail "$name" "took ${dt} s: $msg"
  fi
}
peer_case KILL
peer_case STOP
peer_case KILL --zero 3

# NCCL's communicator creation with a peer that dies after the id exchange
# (the emulation's NCCL: rank 1 SIGKILLs itself inside init; rank 0's
# non-blocking init must give up at --timeout and abort, not hang); then the
# same for --tp 2's tensor-parallel group, whose communicator is one of its
# own (a per-group id over the store)
init_case() {  # init_case WHAT MESSAGE [TRAIN ARGS...]
  local what=$1 want=$2 port=$((20000 + RANDOM % 20000)) t0 t1 rc r
  shift 2
  pids=()
  t0=$(date +%s.%N)
  for r in 0 1; do
    SKIFF_TRAIN_COMM=nccl SKIFF_EMU_NCCL_INIT_KILL=1 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$ST" train --model tiny --data "$tmp/train_*.bin" --batch 1 --seq 16 \
      --steps 2 --device cuda --precision fp32 --timeout "$TIMEOUT" --log "$tmp/init.jsonl" "$@" >"$tmp/init.r$r" 2>&1 &
    pids+=($!)
  done
  disown "${pids[1]}"
  local n=0 limit=$((TIMEOUT * 3 + 120))
  while kill -0 "${pids[0]}" 2>/dev/null && [ "$n" -lt $((limit * 10)) ]; do sleep 0.1; n=$((n + 1)); done
  t1=$(date +%s.%N)
  local name="NCCL init$what with a peer killed after the id exchange: rank 0 aborts the communicator at --timeout $TIMEOUT s"
  if kill -0 "${pids[0]}" 2>/dev/null; then
    t_fail "$name" "rank 0 still in init after $limit s (a hang)"
    return
  fi
  wait "${pids[0]}"; rc=$?
  local msg dt
  msg=$(grep -m1 -F -- "$want" "$tmp/init.r0")
  dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -ne 0 ] && [ -n "$msg" ] && awk -v d="$dt" -v l="$((TIMEOUT * 2 + 60))" 'BEGIN { exit !(d <= l) }' &&
    ! ls /tmp/skiff-emu-nccl-* 2>/dev/null | grep -q .; then
    t_pass "$name: exit $rc after ${dt} s: $msg"
  else
    t_fail "$name" "exit $rc after ${dt} s: $(tail -2 "$tmp/init.r0" | tr '\n' ' ')"
  fi
}
if [ -n "${SKIFF_PEER_TEST_BIN:-}" ]; then
  t_skip "NCCL init with a killed peer" "needs the emulation's NCCL (SKIFF_EMU_NCCL_INIT_KILL)"
else
  init_case "" "NCCL communicator of 2 ranks was not ready within --timeout"
  init_case " (--tp 2, tensor-parallel group)" "NCCL communicator of 2 ranks (group tp/0) was not ready within --timeout" \
    --tp 2
fi
t_done
