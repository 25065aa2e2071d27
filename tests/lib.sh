# Shared helpers for integration test scripts (sourced, bash).
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
