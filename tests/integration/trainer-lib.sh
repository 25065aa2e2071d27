# Helpers for the trainer's integration tests (sourced; not a test itself).
# shellcheck shell=bash
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
TRAIN=${SKIFF_TRAIN:-$BUILD/bin/skiff-train}
TDIR=$(mktemp -d /tmp/skiff-train-it.XXXXXX)
# Tests run on 2 shared cores: one OpenMP thread per rank keeps P ranks from
# fighting over them.
export OMP_NUM_THREADS=1
trap 'rm -rf "$TDIR"' EXIT

# A free-ish TCP port for MASTER_PORT (random; the store refuses a used one
# with a clear message, which would fail the test loudly, not hang it).
# t_port: a port for a test's rank 0, below the kernel's ephemeral range
# (ip_local_port_range starts at 32768: a port in it may be the local end of
# any outgoing connection, and rank 0's listen then fails), not listening now.
t_port() {
  local p i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    p=$((20000 + (RANDOM * 7 + $$ + i) % 12000))
    ss -Htln "sport = :$p" 2>/dev/null | grep -q . || break
  done
  echo $p
}

# t_corpus: byte-tokenized shards of Debian's licence texts (always present)
# under $TDIR/lic_{train,val}_*.bin.
t_corpus() {
  [ -e "$TDIR/lic_train_000000.bin" ] && return 0
  "$TRAIN" tokenize --out "$TDIR/lic" --val-frac 0.2 /usr/share/common-licenses/{GPL-3,Apache-2.0,MPL-2.0} >/dev/null
}

# t_ddp P CMD...: runs P ranks of CMD on localhost with env:// variables; exit
# status is the first non-zero one. The ranks wait 30 s for each other (not
# the trainer's 300 s): when rank 0 stops early on purpose (a refused resume),
# a rank that had not connected yet otherwise retries for 5 minutes.
t_ddp() {
  local P=$1; shift
  local port; port=$(t_port)
  local pids=() r rc=0
  for ((r = 0; r < P; r++)); do
    SKIFF_TRAIN_TIMEOUT=${SKIFF_TRAIN_TIMEOUT:-30} \
    RANK=$r WORLD_SIZE=$P LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
    pids+=($!)
  done
  local s
  for p in "${pids[@]}"; do
    wait "$p"; s=$?
    [ $s -ne 0 ] && [ $rc -eq 0 ] && rc=$s
  done
  return $rc
}

# t_watchdog SECONDS PID...: kills the PIDs if still running after SECONDS,
# so a hang fails the test instead of blocking CI. Prints the watchdog's pid.
t_watchdog() {
  local secs=$1; shift
  ( sleep "$secs"; kill -9 "$@" 2>/dev/null ) >/dev/null 2>&1 &
  echo $!
}

# t_losses LOG: the loss column of a JSONL log, one per line.
t_losses() { sed -n 's/.*"loss":\([-0-9.e+]*\).*/\1/p' "$1"; }

# t_close_losses A B TOL: every step's loss within TOL (absolute).
t_close_losses() {
  paste -d' ' <(t_losses "$1") <(t_losses "$2") |
    awk -v tol="$3" 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > tol) bad = 1; n++ }
                     END { exit (bad || n == 0) }'
}
