# The one helper library of the integration tests and benchmarks (sourced,
# bash): reporting cases (and running one alone), event waits, scratch
# directories and exit hooks, the test user, a cached busybox image,
# processes, the test cluster, a real registry and the fake one in front of
# it, programs `make test` builds for the tests, ports, and the trainer's
# runs. The rules the suites keep are in tests/README.md; tests/check-suites
# holds them to it (no bare sleep as a wait, nothing of this file defined
# again in a suite).
# Each case prints one line that tests/run-all counts:
#   PASS: name | FAIL: name | SKIP: name (why)
# A script ends with `t_done`, which exits non-zero when any case failed.
T_FAILED=0
T_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
: "${BUILD:=$T_ROOT/build}"
T_SUITE=$(basename "$0")

# ---- cases -------------------------------------------------------------------
# t_case NAME: starts case NAME; 1 when SKIFF_TEST_CASE (an extended regex)
# is set and does not match NAME, so that `t_case NAME || ...` / `if t_case
# NAME; then ... fi` runs only the cases asked for. A case sets up what it
# needs itself (or calls the suite's setup function that does). A FAIL line
# of a case started this way is followed by the command that reruns it alone.
T_CASE=""
t_case() {
  T_CASE=$1
  [ -z "${SKIFF_TEST_CASE:-}" ] || grep -Eq -- "$SKIFF_TEST_CASE" <<<"$1"
}

# t_rerun: the command that reruns the current case alone (or the suite).
t_rerun() {
  local kind=integration suite="tests/integration/$T_SUITE" re
  [ -n "${SKIFF_SLURM_ROOT:-}" ] && kind=slurm-tree
  [ -f "$T_ROOT/$suite" ] || suite=$0
  if [ -n "$T_CASE" ]; then
    re=$(printf '%s' "$T_CASE" | sed -e 's/[][\.*^$(){}?+|]/\\&/g' -e "s/'/'\\\\''/g")
    echo "SKIFF_TEST_CASE='^$re\$' tests/run-all --$kind $suite"
  else
    echo "tests/run-all --$kind $suite"
  fi
}

t_pass() { echo "PASS: $1"; }
t_fail() { echo "FAIL: $1${2:+ — $2}"; echo "    rerun: $(t_rerun)"; T_FAILED=1; }
t_skip() { echo "SKIP: $1 ($2)"; }

# t_needs WHAT TOOL...: 0 when every TOOL is a command here; else a SKIP
# line for WHAT naming the missing one (scripts/install-deps installs them)
# and 1.
t_needs() {
  local what=$1 tool; shift
  for tool in "$@"; do
    command -v "$tool" >/dev/null && continue
    t_skip "$what" "$tool is not installed (scripts/install-deps test)"
    return 1
  done
}

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
# others may share the machine). A running one is used only when it is what
# the suite needs: the Slurm asked for (SKIFF_SLURM_ROOT), at least N
# nodes, every node idle or mixed, and this build's plugin (SKIFF_PLUGIN's,
# else $BUILD's); otherwise a FAIL line says what differs and what to do.
# Sources its run/env.sh, keeps plugstack.conf for t_cluster_done and
# registers t_cluster_done at exit. Returns 1 after a FAIL line when it
# cannot start one.
t_cluster() {
  export SKIFF_CLUSTER_INDEX=${SKIFF_CLUSTER_INDEX:-auto}
  T_CLUSTER_STARTED=0
  local env=$T_ROOT/tests/cluster/run/env.sh why
  # (one of the Slurm asked for: SKIFF_SLURM_ROOT, see tests/cluster/up)
  if ! [ -f "$env" ] ||
     ! (source "$env"; [ "${SKIFF_CLUSTER_SLURM_ROOT:-}" = "${SKIFF_SLURM_ROOT:-}" ] && sinfo -h >/dev/null 2>&1); then
    SKIFF_CLUSTER_QUIET=1 BUILD=$BUILD "$T_ROOT/tests/cluster/up" "$1" || { t_fail "cluster up"; return 1; }
    T_CLUSTER_STARTED=1
  elif why=$(source "$env"; t__cluster_unfit "$1"); then
    t_fail "the running test cluster" "$why: tests/cluster/down first (or make cluster-up NODES=$1 with this build)"
    return 1
  fi
  # shellcheck disable=SC1090
  source "$env"
  T_PLUGSTACK_ORIG=$(cat "$SKIFF_PLUGSTACK")
  t_at_exit t_cluster_done
}

# t__cluster_unfit N: why the cluster of the sourced env.sh will not do (0
# with the reason printed), or 1 when it will.
t__cluster_unfit() {
  local want=${SKIFF_PLUGIN:-$BUILD/plugin/spank_skiff.so} states
  if [ "${SKIFF_CLUSTER_NODES:-0}" -lt "$1" ]; then echo "it has ${SKIFF_CLUSTER_NODES:-0} nodes, this suite needs $1"; return 0; fi
  if [ -n "${SKIFF_CLUSTER_PLUGIN:-}" ] && [ "$(readlink -f "$SKIFF_CLUSTER_PLUGIN")" != "$(readlink -f "$want")" ]; then
    echo "it runs $SKIFF_CLUSTER_PLUGIN, not $want"; return 0
  fi
  states=$(sinfo -h -o %T 2>/dev/null | sort -u | grep -vxE 'idle|mixed|allocated|completing' | tr '\n' ' ')
  if [ -n "$states" ]; then echo "nodes are $states"; return 0; fi
  return 1
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
  [ -n "${SKIFF_PLUGSTACK:-}" ] && [ -n "${T_PLUGSTACK_ORIG:-}" ] && echo "$T_PLUGSTACK_ORIG" >"$SKIFF_PLUGSTACK"
  [ "${T_CLUSTER_STARTED:-0}" = 1 ] && SKIFF_CLUSTER_QUIET=1 "$T_ROOT/tests/cluster/down"
  T_CLUSTER_STARTED=0 T_PLUGSTACK_ORIG=""
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

# t_wait_gone DESC SECS CMD...: waits until CMD prints nothing (a lookup
# that finds what is left), as t_wait.
t_wait_gone() {
  local desc=$1 secs=$2; shift 2
  t_wait "$desc" "$secs" t__prints_nothing "$@"
}
t__prints_nothing() { [ -z "$("$@" 2>/dev/null)" ]; }

# t_wait_job ID: waits (up to 2 minutes) until Slurm job ID has left the queue.
t_wait_job() { t_wait "job $1 to leave the queue" 120 t__job_gone "$1"; }
t__job_gone() { [ -z "$(squeue -h -j "$1" 2>/dev/null)" ]; }

# ---- scratch directories and exit hooks ------------------------------------------
# The one EXIT trap of a suite is this file's: suites register what must
# happen at their end with t_at_exit (latest first) and never set a trap of
# their own. SIGTERM (run-all's deadline) and SIGINT end the script through
# it too.
T_EXIT_HOOKS=()
t_at_exit() { T_EXIT_HOOKS=("$*" "${T_EXIT_HOOKS[@]}"); }
t__exit_hooks() {
  local h hooks=("${T_EXIT_HOOKS[@]}")
  T_EXIT_HOOKS=()
  for h in "${hooks[@]}"; do eval "$h"; done
}
trap t__exit_hooks EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# t_scratch VAR NAME: a new directory /tmp/skiff-NAME.XXXXXX (0755: the test
# user reaches what a case makes readable there) in $VAR, removed at exit
# (after the hooks registered later). Every path a case writes is under one.
t_scratch() {
  local d
  d=$(mktemp -d "/tmp/skiff-$2.XXXXXX") || { echo "t_scratch: mktemp failed" >&2; return 1; }
  chmod 755 "$d"
  printf -v "$1" '%s' "$d"
  t_at_exit "rm -rf '$d'"
}

# ---- the test user -------------------------------------------------------------
# t_as_user [-C DIR] [-t SECS] [-u USER] [VAR=VALUE...] CMD...: CMD as the
# test user ($SKIFF_TEST_USER, default skifftest; or USER) in DIR (default
# $T_AS_USER_DIR, else /tmp), with the cluster's SLURM_CONF when one is up
# and VAR=VALUE in its environment, stopped after SECS (default 600: no
# case waits for ever; 124 then).
t_as_user() {
  local dir=${T_AS_USER_DIR:-/tmp} secs=600 user=${SKIFF_TEST_USER:-skifftest}
  while :; do
    case ${1:-} in
      -C) dir=$2; shift 2 ;;
      -t) secs=$2; shift 2 ;;
      -u) user=$2; shift 2 ;;
      *) break ;;
    esac
  done
  (cd "$dir" && timeout "$secs" runuser -u "$user" -- env ${SLURM_CONF:+SLURM_CONF="$SLURM_CONF"} "$@")
}

# ---- a busybox image ---------------------------------------------------------------
# t_busybox_tree DIR: a root filesystem of Debian's static busybox in DIR:
# every applet a link in /bin, /etc/passwd and /etc/group with root and the
# test user, empty /etc/hosts, /etc/resolv.conf and /etc/hostname (the
# runtime binds the host's), /tmp /proc /dev /sys. Suites add what a case
# needs to a tree of their own.
t_busybox_tree() {
  local r=$1 user=${SKIFF_TEST_USER:-skifftest} uid gid a
  mkdir -p "$r"/{bin,etc,tmp,proc,dev,sys} || return 1
  chmod 1777 "$r/tmp"
  cp /bin/busybox "$r/bin/busybox" || return 1
  for a in $(/bin/busybox --list); do [ -e "$r/bin/$a" ] || ln -s busybox "$r/bin/$a"; done
  uid=$(id -u "$user" 2>/dev/null || echo 1000); gid=$(id -g "$user" 2>/dev/null || echo 1000)
  printf 'root:x:0:0:root:/root:/bin/sh
%s:x:%s:%s::/tmp:/bin/sh
' "$user" "$uid" "$gid" >"$r/etc/passwd"
  printf 'root:x:0:
%s:x:%s:
' "$user" "$gid" >"$r/etc/group"
  : >"$r/etc/hosts"; : >"$r/etc/resolv.conf"; : >"$r/etc/hostname"
}

# t_busybox_sqsh: the path of a squashfs image of t_busybox_tree (zstd,
# owned by root, 0644), made once per build directory
# ($BUILD/test-cache/busybox.sqsh) and again when /bin/busybox or this
# file is newer. Read-only for the suites: one that changes an image makes
# its own.
t_busybox_sqsh() {
  local dir=$BUILD/test-cache img=$BUILD/test-cache/busybox.sqsh tmp
  if [ ! -f "$img" ] || [ /bin/busybox -nt "$img" ] || [ "${BASH_SOURCE[0]}" -nt "$img" ]; then
    mkdir -p "$dir" && chmod 755 "$dir" || return 1
    tmp=$(mktemp -d "$dir/.busybox.XXXXXX") || return 1
    t_busybox_tree "$tmp/root" &&
      mksquashfs "$tmp/root" "$tmp/busybox.sqsh" -quiet -noappend -comp zstd -all-root >/dev/null &&
      chmod 644 "$tmp/busybox.sqsh" && mv "$tmp/busybox.sqsh" "$img"
    local rc=$?
    rm -rf "$tmp"
    [ $rc -eq 0 ] || { echo "t_busybox_sqsh: could not make $img" >&2; return 1; }
  fi
  echo "$img"
}

# ---- processes ----------------------------------------------------------------------
# t_child_by_comm PARENT COMM [SECS]: the pid of PARENT's child whose name
# (comm) is COMM, waiting up to SECS (default 30, times t_load_scale) for it
# to appear (until it execs, a child has its parent's name). Nothing found
# is a failure: 1, after saying so on stderr, never an empty pid to kill.
t_child_by_comm() {
  local parent=$1 comm=$2 secs=${3:-30}
  t_wait "a child '$comm' of process $parent" "$secs" t__child_by_comm "$parent" "$comm" >/dev/null || return 1
  t__child_by_comm "$parent" "$comm"
}
t__child_by_comm() {
  local p
  for p in $(ps -o pid= --ppid "$1"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ] && { echo "$p"; return 0; }
  done
  return 1
}

# t_descendants PID: PID's descendants' pids, one a line (its own tree: what
# a case started, never all of a user's processes).
t_descendants() {
  local c
  for c in $(ps -o pid= --ppid "$1"); do echo "$c"; t_descendants "$c"; done
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
  [ -n "${T_REG_HOOKED:-}" ] || { T_REG_HOOKED=1; t_at_exit registry_stop; }
  REG_PIDS="${REG_PIDS:-} $pid"
  if t_wait "the registry on ${REG_ADDR:-127.0.0.1}:$port to answer (or exit)" 60 \
       t__answers_or_gone "$pid" "http://${REG_ADDR:-127.0.0.1}:$port/v2/" && kill -0 "$pid" 2>/dev/null; then
    REG_PORT=$port; REG_PID=$pid
    return 0
  fi
  echo "registry did not start; log:" >&2; cat "$dir/log" >&2
  return 1
}

# t__answers_or_gone PID URL: URL answers, or PID (the server) has exited.
t__answers_or_gone() { curl -s -o /dev/null "$2" || ! kill -0 "$1" 2>/dev/null; }

registry_stop() {
  local p
  for p in ${REG_PIDS:-}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  REG_PIDS=""
}

# t_fakereg_start PORT LOG [ARG...]: tests/integration/lib/fakereg.py (the
# faults of real registries, in front of a real one: give --upstream) on
# PORT of ${REG_ADDR:-127.0.0.1}, its log in LOG; returns once it answers
# (1 when it does not, or exits). Stopped by t_fakereg_stop, and at exit.
t_fakereg_start() {
  local port=$1 log=$2 addr=${REG_ADDR:-127.0.0.1}; shift 2
  : >"$log"
  /usr/bin/python3 "$T_ROOT/tests/integration/lib/fakereg.py" "$port" "$log" --bind "$addr" "$@" &
  local pid=$!
  [ -n "${T_FAKE_HOOKED:-}" ] || { T_FAKE_HOOKED=1; t_at_exit t_fakereg_stop; }
  T_FAKE_PIDS="${T_FAKE_PIDS:-} $pid"
  t_wait "fakereg.py on $addr:$port to answer (or exit)" 60 t__answers_or_gone "$pid" "http://$addr:$port/v2/" &&
    kill -0 "$pid" 2>/dev/null
}

t_fakereg_stop() {
  local p
  for p in ${T_FAKE_PIDS:-}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  T_FAKE_PIDS=""
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
