# Shared settings for tests/cluster/up and tests/cluster/down (sourced, bash).
# Everything that two clusters on one machine could share is derived from
# SKIFF_CLUSTER_INDEX (0-9), so several engineers can each run one at once.

c_die() { echo "cluster: $*" >&2; exit 1; }
c_log() { [ -n "${SKIFF_CLUSTER_QUIET:-}" ] || echo "cluster: $*" >&2; }

C_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
C_ROOT=$(cd "$C_HERE/../.." && pwd)

C_IDX=${SKIFF_CLUSTER_INDEX:-0}
if [ "$C_IDX" = auto ]; then
  # This checkout's running cluster if it has one, else the first index
  # that no other checkout owns (tests use this: engineers share machines).
  C_IDX=""
  if [ -f "$C_HERE/run/env.sh" ]; then
    C_IDX=$(sed -n 's/^export SKIFF_CLUSTER_INDEX=//p' "$C_HERE/run/env.sh")
  fi
  if [ -z "$C_IDX" ]; then
    for i in 0 1 2 3 4 5 6 7 8 9; do
      o=/run/skiff-cluster-$i/owner
      if ! [ -f "$o" ] || [ "$(cat "$o")" = "$C_ROOT" ]; then C_IDX=$i; break; fi
    done
  fi
  [ -n "$C_IDX" ] || c_die "SKIFF_CLUSTER_INDEX=auto: all ten cluster indexes are in use"
fi
case "$C_IDX" in
  [0-9]) ;;
  *) c_die "SKIFF_CLUSTER_INDEX must be a single digit 0-9 or auto, got '$C_IDX'" ;;
esac
# The worktree's run/ holds env.sh; daemon state lives under /run so that it
# is on a local filesystem and owned by root whatever the checkout is.
C_RUN=$C_HERE/run
C_STATE=/run/skiff-cluster-$C_IDX
C_BRIDGE=skiffbr$C_IDX
C_NET=10.200.$C_IDX
C_HOST_ADDR=$C_NET.1
C_CTLD_PORT=$((6817 + 10 * C_IDX))
C_SLURMD_PORT=$((6818 + 10 * C_IDX))
C_NS_PREFIX=skiff${C_IDX}n
C_USER=${SKIFF_TEST_USER:-skifftest}

c_ns() { echo "$C_NS_PREFIX$1"; }              # netns name of node K
c_veth() { echo "sk${C_IDX}n$1h"; }             # host side of node K's veth
c_addr() { echo "$C_NET.$((10 + $1))"; }        # node K's address

# c_wait SECONDS WHAT CMD...: an event wait: polls CMD every 50 ms until it
# succeeds, at most SECONDS (times the load's scale, as tests/lib.sh's
# t_load_scale: 1-4); 1 then, after saying on stderr what it waited for.
c_wait() {
  local limit=$1 what=$2; shift 2
  limit=$((limit * $(awk -v n="$(nproc)" '{ s = 1 + int($1 / n); if (s > 4) s = 4; print s }' /proc/loadavg)))
  local end=$(( $(date +%s%N) / 1000000 + limit * 1000 ))
  until "$@" >/dev/null 2>&1; do
    if [ $(( $(date +%s%N) / 1000000 )) -ge "$end" ]; then
      echo "cluster: timed out after $limit s waiting for $what" >&2
      return 1
    fi
    sleep 0.05 # sleep-ok: the poll's pace
  done
  return 0
}

# Node count of the running cluster (0 when none).
c_nodes() { cat "$C_STATE/nodes" 2>/dev/null || echo 0; }

# Node names resolve as they would through a site's DNS: a marked block in the
# host's /etc/hosts (containers see the host's file). Rewritten in place, not
# renamed over, because /etc/hosts may be a bind mount. With two clusters at
# once the first block naming nK wins on the host; inside the nodes (slurmd and
# everything it starts) each cluster sees its own file, STATE/etc/hosts (up).
C_HOSTS_MARK="# skiff-cluster-$C_IDX"
c_hosts_remove() {
  grep -q -- "$C_HOSTS_MARK\$" /etc/hosts 2>/dev/null || return 0
  local kept
  kept=$(grep -v -- "$C_HOSTS_MARK\$" /etc/hosts)
  printf '%s\n' "$kept" >/etc/hosts
}
c_hosts_lines() { # N
  local k
  for k in $(seq 1 "$1"); do
    printf '%s n%s %s\n' "$(c_addr "$k")" "$k" "$C_HOSTS_MARK"
  done
}
c_hosts_add() { # N
  c_hosts_remove
  c_hosts_lines "$1" >>/etc/hosts
}

# c_slurm_version [TREE]: the version of Slurm (e.g. 22.05.8) installed on
# this host, or in the Debian tree TREE (scripts/make-debian-tree).
c_slurm_version() {
  local v
  v=$(dpkg-query ${1:+--admindir="$1/root/var/lib/dpkg"} -W -f '${Version}' slurm-wlm 2>/dev/null)
  v=${v#*:}
  echo "${v%%-*}"
}
