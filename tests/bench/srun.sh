#!/bin/bash
# Container overhead per srun step on the local Slurm cluster (tests/cluster):
# median wall time of `srun ... --container-image=BUSYBOX.sqsh true` minus
# that of `srun ... true`, for -n1 and -N3 -n6. Runs as the non-root test
# user; the two variants alternate so load changes hit both alike.
# Prints a markdown table. SKIFF_BENCH_RUNS (default 20) per variant.
# SKIFF_BENCH_BASE=DIR (another checkout's build directory, e.g. main's):
# also prints paired A/B ratios of container steps with its spank_skiff.so
# (and the helpers beside it) against this build's, the cluster's
# plugstack.conf switched before each run (srun reads it at every step).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
: "${BUILD:=$ROOT/build}"
RUNS=${SKIFF_BENCH_RUNS:-20}
# SKIFF_BENCH_FLAGS: extra container flags to measure (e.g. --container-readonly)
EXTRA=${SKIFF_BENCH_FLAGS:-}
[ "$(id -u)" -eq 0 ] || { echo "srun.sh: needs root (starts the test cluster)" >&2; exit 1; }
[ -f "$BUILD/plugin/spank_skiff.so" ] || { echo "srun.sh: $BUILD/plugin/spank_skiff.so not built" >&2; exit 1; }

# a free cluster index unless the caller chose one (others may share the machine)
export SKIFF_CLUSTER_INDEX=${SKIFF_CLUSTER_INDEX:-auto}
started=0
if ! [ -f tests/cluster/run/env.sh ] || ! (source tests/cluster/run/env.sh; sinfo -h >/dev/null 2>&1); then
  SKIFF_CLUSTER_QUIET=1 BUILD=$BUILD tests/cluster/up 3 || exit 1
  started=1
fi
source tests/cluster/run/env.sh
U=$SKIFF_TEST_USER
T=$(mktemp -d /tmp/skiff-bench.XXXXXX); chmod 755 "$T"
trap 'rm -rf "$T"; [ "$started" = 1 ] && SKIFF_CLUSTER_QUIET=1 tests/cluster/down' EXIT

R=$T/rootfs
mkdir -p "$R"/{bin,etc,tmp,proc,dev,sys}
cp /bin/busybox "$R/bin/"; ln -s busybox "$R/bin/true"; ln -s busybox "$R/bin/sh"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"; printf 'root:x:0:\n' >"$R/etc/group"
touch "$R/etc/hosts" "$R/etc/resolv.conf" "$R/etc/hostname"
mksquashfs "$R" "$T/busybox.sqsh" -quiet -noappend -comp zstd -all-root >/dev/null
chmod 644 "$T/busybox.sqsh"

# ms CMD...: wall milliseconds of one run; fails the bench if CMD fails.
ms() {
  local a b
  a=$(date +%s%N)
  (cd "$T" && runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" "$@") >/dev/null 2>"$T/err" ||
    { echo "srun.sh: failed: $* ($(head -c 300 "$T/err"))" >&2; exit 1; }
  b=$(date +%s%N)
  echo $(( (b - a) / 1000 ))
}
median() { sort -n | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

row() {
  local label=$1; shift
  : >"$T/bare"; : >"$T/ctr"
  ms srun -Q "$@" true >/dev/null; ms srun -Q "$@" $EXTRA --container-image="$T/busybox.sqsh" true >/dev/null # warm-up
  for _ in $(seq "$RUNS"); do
    ms srun -Q "$@" true >>"$T/bare" || exit 1
    ms srun -Q "$@" $EXTRA --container-image="$T/busybox.sqsh" true >>"$T/ctr" || exit 1
  done
  local b c bm cm pd
  b=$(median <"$T/bare"); c=$(median <"$T/ctr")
  # each container run follows a bare run: the median of the pairwise
  # differences cancels slow drifts in the machine's load
  pd=$(paste "$T/ctr" "$T/bare" | awk '{print $1 - $2}' | median)
  bm=$(sort -n "$T/bare" | head -1); cm=$(sort -n "$T/ctr" | head -1)
  awk -v l="$label" -v b="$b" -v c="$c" -v bm="$bm" -v cm="$cm" -v pd="$pd" \
    'BEGIN {printf "| %s | %.1f | %.1f | %+.1f | %+.1f | %.1f | %.1f | %+.1f |\n", l, b/1000, c/1000, (c-b)/1000, pd/1000, bm/1000, cm/1000, (cm-bm)/1000}'
}

# The minimum is shown too: on a shared, loaded machine it moves less than
# the median. The load average is printed so readers can judge.
echo "| step ($RUNS runs each, ms) | bare median | container median | overhead | median of paired diffs | bare min | container min | overhead (min) |"
echo "|---|---|---|---|---|---|---|---|"
row "srun -n1 true" -n1
row "srun -N3 -n6 true" -N3 -n6
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs${EXTRA:+, extra flags: $EXTRA}"

# ---- A/B: this build's plugin against SKIFF_BENCH_BASE's, alternating ----
if [ -n "${SKIFF_BENCH_BASE:-}" ]; then
  BASE_SO=$SKIFF_BENCH_BASE/plugin/spank_skiff.so
  [ -f "$BASE_SO" ] || { echo "srun.sh: $BASE_SO not built" >&2; exit 1; }
  THIS_SO=$(awk '{print $2}' "$SKIFF_PLUGSTACK")
  ARGS=$(cut -d' ' -f3- "$SKIFF_PLUGSTACK")
  # the plugstack.conf line for one plugin, written as tests/cluster/up does
  use() { echo "printf 'required %s %s\\n' '$1' '$ARGS' >'$SKIFF_PLUGSTACK.new' && chmod 644 '$SKIFF_PLUGSTACK.new' &&
          mv '$SKIFF_PLUGSTACK.new' '$SKIFF_PLUGSTACK'"; }
  trap 'sh -c "$(use "$THIS_SO")"; rm -rf "$T"; [ "$started" = 1 ] && SKIFF_CLUSTER_QUIET=1 tests/cluster/down' EXIT
  as_user="cd $T && runuser -u $U -- env SLURM_CONF=$SLURM_CONF"
  echo
  echo "A/B: $BASE_SO (base) against $THIS_SO (this), load $(cut -d' ' -f1 /proc/loadavg)"
  echo
  python3 tests/bench/abpairs.py --runs "$RUNS" --label-a base --label-b this \
    --setup-a "$(use "$BASE_SO")" --setup-b "$(use "$THIS_SO")" \
    --row "srun -n1 --container-image true" "$as_user srun -Q -n1 $EXTRA --container-image=$T/busybox.sqsh true" \
      "$as_user srun -Q -n1 $EXTRA --container-image=$T/busybox.sqsh true" \
    --row "srun -N3 -n6 --container-image true" "$as_user srun -Q -N3 -n6 $EXTRA --container-image=$T/busybox.sqsh true" \
      "$as_user srun -Q -N3 -n6 $EXTRA --container-image=$T/busybox.sqsh true" || exit 1
fi
