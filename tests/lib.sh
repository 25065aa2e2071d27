# The one helper library of the integration tests and benchmarks (sourced,
# bash): reporting cases, the test cluster, a real registry, programs
# `make test` builds for the tests, ports, and the trainer's runs.
# Each case prints one line that tests/run-all counts:
#   PASS: name | FAIL: name | SKIP: name (why)
# A script ends with `t_done`, which exits non-zero when any case failed.
T_FAILED=0
T_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
: "${BUILD:=$T_ROOT/build}"

t_pass() { echo "PASS: $1"; }
t_fail() { echo "FAIL: $1${2:+ — $2}"; T_FAILED=1; }
t_skip() { echo "SKIP: $1 ($2)"; }

# t_check NAME CMD...: the case passes when CMD exits 0.
t_check() {
  local name=$1; shift
  if "$@"; then t_pass "$name"; else t_fail "$name" "command failed: $*"; fi
}

# t_fails_with NAME PATTERN CMD...: passes when CMD exits non-zero and its
# stderr+stdout match the extended regex PATTERN (bad input must say why).
t_fails_with() {
  local name=$1 pat=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -eq 0 ]; then t_fail "$name" "expected failure, got success: $out"
  elif ! grep -Eq -- "$pat" <<<"$out"; then t_fail "$name" "message did not match /$pat/: $out"
  else t_pass "$name"; fi
}

t_done() { exit "$T_FAILED"; }

# t_program NAME WHAT: 0 when $BUILD/tests/NAME, a program `make test`
# builds for the integration tests (TEST_PROGRAMS in the build fragments),
# is there; else a FAIL line for WHAT saying how to build it, and 1.
t_program() {
  [ -x "$BUILD/tests/$1" ] && return 0
  t_fail "$2" "$BUILD/tests/$1 is not built (make test builds it, or: make $BUILD/tests/$1)"
  return 1
}

# t_cluster N: this checkout's running test cluster, or a new one of N nodes
# (tests/cluster/up; a free SKIFF_CLUSTER_INDEX unless the caller chose one:
# others may share the machine). Sources its run/env.sh and keeps
# plugstack.conf for t_cluster_done. Returns 1 after a FAIL line when it
# cannot start one.
t_cluster() {
  export SKIFF_CLUSTER_INDEX=${SKIFF_CLUSTER_INDEX:-auto}
  T_CLUSTER_STARTED=0
  local env=$T_ROOT/tests/cluster/run/env.sh
  # (one of the Slurm asked for: SKIFF_SLURM_ROOT, see tests/cluster/up)
  if ! [ -f "$env" ] ||
     ! (source "$env"; [ "${SKIFF_CLUSTER_SLURM_ROOT:-}" = "${SKIFF_SLURM_ROOT:-}" ] && sinfo -h >/dev/null 2>&1); then
    SKIFF_CLUSTER_QUIET=1 BUILD=$BUILD "$T_ROOT/tests/cluster/up" "$1" || { t_fail "cluster up"; return 1; }
    T_CLUSTER_STARTED=1
  fi
  # shellcheck disable=SC1090
  source "$env"
  T_PLUGSTACK_ORIG=$(cat "$SKIFF_PLUGSTACK")
}

# t_cluster_procs [-n K] [REGEX]: "PID ARGS" of each process of the test
# user in this cluster's nodes (node K's only with -n; their network
# namespaces), those whose arguments match REGEX if given. Other clusters on
# the machine run jobs as the same user: what a test left behind is looked
# for here, never among all of the user's processes.
t_cluster_procs() {
  local nodes k p args user=${SKIFF_TEST_USER:-skifftest}
  nodes=$(seq 1 "${SKIFF_CLUSTER_NODES:-0}")
  if [ "${1:-}" = -n ]; then nodes=$2; shift 2; fi
  for k in $nodes; do
    for p in $(ip netns pids "skiff${SKIFF_CLUSTER_INDEX}n$k" 2>/dev/null); do
      [ "$(stat -c %U "/proc/$p" 2>/dev/null)" = "$user" ] || continue
      args=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)
      [ -z "${1:-}" ] || grep -qE -- "$1" <<<"$args" || continue
      echo "$p $args"
    done
  done
}

# t_cluster_done: plugstack.conf as t_cluster found it; the cluster down if
# t_cluster started it.
t_cluster_done() {
  [ -n "${SKIFF_PLUGSTACK:-}" ] && echo "$T_PLUGSTACK_ORIG" >"$SKIFF_PLUGSTACK"
  [ "${T_CLUSTER_STARTED:-0}" = 1 ] && SKIFF_CLUSTER_QUIET=1 "$T_ROOT/tests/cluster/down"
  return 0
}

# t_private_mount_ns NAME "$@": re-runs the calling script in a private mount
# namespace (mounts and the cluster it starts stay out of the machine's), and
# skips NAME there when this checkout's test cluster is up outside it: the
# script brings up a cluster of its own inside.
t_private_mount_ns() {
  local name=$1; shift
  if [ -z "${SKIFF_PRIVATE_MOUNT_NS:-}" ]; then
    exec unshare -m --propagation private env SKIFF_PRIVATE_MOUNT_NS=1 "$0" "$@"
  fi
  export SKIFF_CLUSTER_INDEX=${SKIFF_CLUSTER_INDEX:-auto}
  if [ -f "$T_ROOT/tests/cluster/run/env.sh" ] && (source "$T_ROOT/tests/cluster/run/env.sh"; sinfo -h >/dev/null 2>&1); then
    t_skip "$name" "this checkout's test cluster is up outside a private mount namespace (tests/cluster/down first)"
    t_done
  fi
}

# t_hook_run T USER HOOK [VAR=VALUE...]: runs HOOK (an absolute path) as the
# runtime does (argv = its path, env -i with the ABI variables and VAR=VALUE,
# as USER) against a fresh scratch container: T/root (with $IMAGE_ENV, K=V
# lines, as the image's environment, /.skiff/environment), T/state, and the
# files T/env and T/fstab it writes its lines to.
t_hook_run() {
  local t=$1 user=$2 hook=$3; shift 3
  rm -rf "$t/root" "$t/state" "$t/env" "$t/fstab"
  mkdir -p "$t/root/etc" "$t/state"; : >"$t/env"; : >"$t/fstab"
  if [ -n "${IMAGE_ENV:-}" ]; then mkdir "$t/root/.skiff"; printf '%s\n' "$IMAGE_ENV" >"$t/root/.skiff/environment"; fi
  chown -R "$user:" "$t/root" "$t/state" "$t/env" "$t/fstab"
  runuser -u "$user" -- env -i PATH=/usr/bin:/bin SKIFF_ROOTFS="$t/root" SKIFF_STATE_DIR="$t/state" \
    SKIFF_ENV_FILE="$t/env" SKIFF_MOUNTS_FILE="$t/fstab" SKIFF_UID="$(id -u "$user")" "$@" "$hook"
}

# t_load_scale: how much longer than on a quiet machine a wait may take
# now: 1, plus one for each multiple of the machine's cores that its load
# average (1 min) is over them, at most 4. Deadlines are multiplied by it.
t_load_scale() {
  awk -v n="$(nproc)" '{ s = 1 + int($1 / n); if (s > 4) s = 4; print s }' /proc/loadavg
}

# t_wait DESC SECS CMD...: an event wait. Runs CMD until it succeeds, at
# most SECS seconds (times t_load_scale); 0 then, else 1 after saying on
# stderr what it waited for and how long. CMD is asked every 0.1 s: the
# poll's pace, never a wait for something to happen.
t_wait() {
  local desc=$1 secs=$2 end; shift 2
  secs=$((secs * $(t_load_scale)))
  end=$(($(date +%s%N) + secs * 1000000000))
  until "$@"; do
    if [ "$(date +%s%N)" -ge "$end" ]; then
      echo "timed out after $secs s waiting for $desc" >&2
      return 1
    fi
    sleep 0.1
  done
}

# t_wait_job ID: waits (up to 2 minutes) until Slurm job ID has left the queue.
t_wait_job() {
  for _ in $(seq 600); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  return 1
}

# ---- a real registry -------------------------------------------------------
# Starts a real registry (Debian docker-registry, Distribution 2.8) on
# 127.0.0.1 (or REG_ADDR, e.g. a test cluster's bridge address that its
# nodes reach) with a free port and storage in a temp dir.
#   registry_start DIR [htpasswd-file]  -> sets REG_PORT, REG_PID; returns 1 if it did not come up
#   registry_start DIR token REALM SERVICE CERT.pem   (bearer tokens, see tokenserver.py)
#   registry_stop
# The caller removes DIR.
registry_free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

registry_start() {
  local dir=$1 htpasswd=${2:-} port auth=""
  port=$(registry_free_port) || return 1
  mkdir -p "$dir/storage"
  if [ "$htpasswd" = token ]; then
    auth="auth:
  token:
    realm: $3
    service: $4
    issuer: skiff-test
    rootcertbundle: $5"
  elif [ -n "$htpasswd" ]; then
    auth="auth:
  htpasswd:
    realm: skiff-test
    path: $htpasswd"
  fi
  cat >"$dir/config.yml" <<EOC
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: ${REG_ADDR:-127.0.0.1}:$port
$auth
EOC
  /usr/bin/docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 400); do  # up to 20 s on a loaded machine
    if curl -s -o /dev/null "http://${REG_ADDR:-127.0.0.1}:$port/v2/"; then
      REG_PORT=$port; REG_PID=$pid
      REG_PIDS="${REG_PIDS:-} $pid"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  echo "registry did not start; log:" >&2; cat "$dir/log" >&2
  return 1
}

registry_stop() {
  local p
  for p in ${REG_PIDS:-}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  REG_PIDS=""
}

# ---- the trainer's runs -----------------------------------------------------
# t_trainer_init: for a trainer test: TRAIN (skiff-train), TDIR (a scratch
# directory removed at exit) and one OpenMP thread per rank (tests run on
# 2 shared cores: P ranks would fight over them).
t_trainer_init() {
  TRAIN=${SKIFF_TRAIN:-$BUILD/bin/skiff-train}
  TDIR=$(mktemp -d /tmp/skiff-train-it.XXXXXX)
  export OMP_NUM_THREADS=1
  trap 'rm -rf "$TDIR"' EXIT
}

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
t_close_losses() { # t_close_losses A.jsonl B.jsonl TOL [rel]: every step's loss within TOL (relative with rel)
  paste -d' ' <(t_losses "$1") <(t_losses "$2") |
    awk -v tol="$3" -v rel="${4:-}" 'NF != 2 { bad = 1 }
      { d = $1 - $2; if (rel == "rel") d = d / $2; if (d < 0) d = -d; if (d > tol) bad = 1; n++ }
      END { exit (bad || n == 0) }'
}

# t_same_run NAME A B PARAM_TOL LOSS_TOL [rel]: the runs $TDIR/A and $TDIR/B
# (checkpoint directories, with A.jsonl and B.jsonl beside them) end with
# parameters within PARAM_TOL ($TRAIN compare) and losses within LOSS_TOL.
t_same_run() {
  local out
  if ! out=$("$TRAIN" compare "$TDIR/$2" "$TDIR/$3" --tol "$4" 2>&1); then t_fail "$1" "$out"; return; fi
  if ! t_close_losses "$TDIR/$2.jsonl" "$TDIR/$3.jsonl" "$5" "${6:-}"; then
    t_fail "$1" "losses differ: $(paste -d' ' <(t_losses "$TDIR/$2.jsonl") <(t_losses "$TDIR/$3.jsonl") | tr '\n' ';')"
    return
  fi
  t_pass "$1 ($out)"
}
