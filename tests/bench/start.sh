#!/bin/bash
# Benchmark: container start + /bin/true on a busybox squashfs as a non-root
# user, beside a bare `unshare -U -m true` (the floor: namespaces alone) and
# charliecloud's ch-run on the same squashfs. Prints a markdown table of
# medians (hyperfine, BENCH_RUNS runs each, default 40).
# Needs root (to create the test user skifftest and chmod 0666 /dev/fuse).
# SKIFF_BENCH_BASE=DIR (another checkout's build directory, e.g. main's):
# also prints paired A/B ratios of its bin/skiff against this build's
# (tests/bench/abpairs.py: alternating runs, so load changes hit both alike),
# the last row with each build's bundled hooks (SKIFF_HOOKS_DIR; on a node
# without GPUs or RDMA devices, such as this one, they find nothing to do).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
SKIFF=$BUILD/bin/skiff
RUNS=${BENCH_RUNS:-40}
TUSER=${SKIFF_TEST_USER:-skifftest}
for tool in hyperfine mksquashfs busybox setpriv python3; do
  command -v $tool >/dev/null || { echo "bench start: $tool missing (scripts/install-deps test)"; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "bench start: run as root (creates user $TUSER)"; exit 1; }
[ -x "$SKIFF" ] || { echo "bench start: build first (make)"; exit 1; }
id -u $TUSER >/dev/null 2>&1 || useradd -m $TUSER
TUID=$(id -u $TUSER)
chmod 0666 /dev/fuse

W=$(mktemp -d /tmp/skiff-bench-start.XXXXXX)
chmod 755 "$W"; mkdir -p $W/out; chown $TUSER: $W/out
# the test user's block cache (runtime/lib/fs/blockcache.h, default path):
# empty at the start, gone with the images at the end
BLOCKS=/dev/shm/skiff-$TUID/blocks
rm -rf "$BLOCKS"
trap 'rm -rf "$W" "$BLOCKS"' EXIT
R=$W/rootfs
mkdir -p $R/{bin,etc,tmp,proc,sys,dev}
cp "$(command -v busybox)" $R/bin/busybox
for a in $($R/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox $R/bin/$a; done
printf 'root:x:0:0:root:/root:/bin/sh\n' >$R/etc/passwd
printf 'root:x:0:\n' >$R/etc/group
echo '127.0.0.1 localhost' >$R/etc/hosts
# The images as `skiff import` writes them (dir: of the tree): zstd level 1 by
# default; lz4 and uncompressed through the config's compression switch.
cp "$SKIFF" $W/skiff && chmod 755 $W/skiff   # readable by the test user wherever the tree is
SKIFF_IMPORT=$BUILD/bin/skiff-import
for c in zstd lz4 none; do
  SKIFF_CACHE_PATH=$W/cache SKIFF_DATA_PATH=$W/data SKIFF_SQUASH_COMPRESSION=$c \
    "$SKIFF_IMPORT" import -o $W/$c.sqsh dir:$R >$W/import-$c.log 2>&1 || { echo "bench start: import $c failed"; cat $W/import-$c.log; exit 1; }
done
chmod 644 $W/*.sqsh
# the default runtime_path (a tmpfs), as a user gets it
as_user=(setpriv --reuid=$TUID --regid=$TUID --init-groups env -i PATH=/usr/bin:/bin HOME=$W USER=$TUSER)
cmds=(-n "bare unshare -U -m true" "unshare -U -m true"
      -n "skiff start zstd.sqsh /bin/true" "$W/skiff start $W/zstd.sqsh /bin/true"
      -n "skiff start lz4.sqsh /bin/true" "$W/skiff start $W/lz4.sqsh /bin/true"
      -n "skiff start none.sqsh /bin/true (uncompressed)" "$W/skiff start $W/none.sqsh /bin/true"
      -n "skiff start --rw zstd.sqsh /bin/true" "$W/skiff start --rw $W/zstd.sqsh /bin/true")
if command -v ch-run >/dev/null && (cd $W && "${as_user[@]}" ch-run $W/zstd.sqsh -- /bin/true) >/dev/null 2>&1; then
  cmds+=(-n "ch-run zstd.sqsh -- /bin/true" "ch-run $W/zstd.sqsh -- /bin/true")
else
  echo "bench start: ch-run unavailable or failing here; left out" >&2
fi
(cd $W && "${as_user[@]}" hyperfine -N --runs "$RUNS" --warmup 3 --export-json $W/out/h.json "${cmds[@]}" >$W/hyperfine.log 2>&1) \
  || { echo "bench start: hyperfine failed"; cat $W/hyperfine.log; exit 1; }
# the same zstd start without warming the command (SKIFF_NO_WARM, runtime/lib/fs/warm.h),
# and without the block cache: every start decompresses what it reads, as
# the first start of an image does
(cd $W && "${as_user[@]}" SKIFF_NO_WARM=1 hyperfine -N --runs "$RUNS" --warmup 3 --export-json $W/out/h2.json \
  -n "skiff start zstd.sqsh /bin/true, warming off" "$W/skiff start $W/zstd.sqsh /bin/true" >>$W/hyperfine.log 2>&1) \
  || { echo "bench start: hyperfine failed"; cat $W/hyperfine.log; exit 1; }
(cd $W && "${as_user[@]}" SKIFF_BLOCK_CACHE_SIZE=0 hyperfine -N --runs "$RUNS" --warmup 3 --export-json $W/out/h3.json \
  -n "skiff start zstd.sqsh /bin/true, block cache off (= an image's first start)" "$W/skiff start $W/zstd.sqsh /bin/true" >>$W/hyperfine.log 2>&1) \
  || { echo "bench start: hyperfine failed"; cat $W/hyperfine.log; exit 1; }
python3 - "$W/out/h.json" "$(nproc)" "$(cut -d' ' -f1 /proc/loadavg)" "$W/out/h2.json" "$W/out/h3.json" <<'PY'
import json, statistics, sys
res = json.load(open(sys.argv[1]))["results"]
res[2:2] = json.load(open(sys.argv[4]))["results"] + json.load(open(sys.argv[5]))["results"]
print(f"Container start + /bin/true, busybox squashfs, non-root (median of {len(res[0]['times'])} runs; "
      f"{sys.argv[2]} CPUs, load {sys.argv[3]})\n")
print("| command | median ms | mean ± σ ms | min ms |")
print("|---|---:|---:|---:|")
for r in res:
    t = [x * 1000 for x in r["times"]]
    print(f"| {r['command']} | {statistics.median(t):.1f} | {statistics.mean(t):.1f} ± {statistics.stdev(t):.1f} | {min(t):.1f} |")
PY

# Where the time goes: SKIFF_TRACE phase timestamps, per phase the median and
# the minimum over the runs (the minimum is the cost without preemption).
for _ in $(seq "$RUNS"); do
  (cd $W && "${as_user[@]}" SKIFF_TRACE=1 $W/skiff start $W/zstd.sqsh /bin/true 2>&1 >/dev/null | grep '^skiff-trace:'; echo END)
done >$W/trace.txt
python3 - "$W/trace.txt" <<'PY'
import statistics, sys
runs, cur = [], []
for line in open(sys.argv[1]):
    if line.startswith("END"):
        runs.append(cur); cur = []
    else:
        _, t, _pid, what = line.split(" ", 3)
        cur.append((float(t), what.strip()))
phases = {}
order = []
for r in runs:
    r.sort()
    for (t0, _), (t1, w) in zip(r, r[1:]):
        if w not in phases:
            order.append(w)
        phases.setdefault(w, []).append(t1 - t0)
print("\nPhases of skiff start zstd.sqsh /bin/true (SKIFF_TRACE; each row = time since the previous mark)\n")
print("| phase (ends at) | median ms | min ms |")
print("|---|---:|---:|")
for w in order:
    v = phases[w]
    print(f"| {w} | {statistics.median(v):.2f} | {min(v):.2f} |")
tot = [r[-1][0] - r[0][0] for r in runs if r]
print(f"| total (cli: main → cli: stopped) | {statistics.median(tot):.2f} | {min(tot):.2f} |")
PY

# ---- A/B: this build against SKIFF_BENCH_BASE's, alternating, one run ----
if [ -n "${SKIFF_BENCH_BASE:-}" ]; then
  [ -x "$SKIFF_BENCH_BASE/bin/skiff" ] || { echo "bench start: $SKIFF_BENCH_BASE/bin/skiff not built"; exit 1; }
  cp "$SKIFF_BENCH_BASE/bin/skiff" $W/skiff-base && chmod 755 $W/skiff-base
  # each build's bundled hooks (a node without GPUs or RDMA devices, as here):
  # what they cost at every start
  mkdir -p $W/hooks-base $W/hooks-this
  cp "$SKIFF_BENCH_BASE"/hooks/[0-9][0-9]-* $W/hooks-base/ && cp "$BUILD"/hooks/[0-9][0-9]-* $W/hooks-this/ &&
    chmod -R a+rX $W/hooks-base $W/hooks-this || { echo "bench start: hooks of both builds are needed (make)"; exit 1; }
  echo
  echo "A/B: $SKIFF_BENCH_BASE/bin/skiff (base) against $SKIFF (this), load $(cut -d' ' -f1 /proc/loadavg)"
  echo
  (cd $W && "${as_user[@]}" python3 "$ROOT/tests/bench/abpairs.py" --runs "$RUNS" --label-a base --label-b this \
     --row "skiff start zstd.sqsh /bin/true" "$W/skiff-base start $W/zstd.sqsh /bin/true" "$W/skiff start $W/zstd.sqsh /bin/true" \
     --row "skiff start none.sqsh /bin/true" "$W/skiff-base start $W/none.sqsh /bin/true" "$W/skiff start $W/none.sqsh /bin/true" \
     --row "skiff start --rw zstd.sqsh /bin/true" "$W/skiff-base start --rw $W/zstd.sqsh /bin/true" \
       "$W/skiff start --rw $W/zstd.sqsh /bin/true" \
     --row "skiff start zstd.sqsh /bin/true, each build's bundled hooks" \
       "SKIFF_HOOKS_DIR=$W/hooks-base $W/skiff-base start $W/zstd.sqsh /bin/true" \
       "SKIFF_HOOKS_DIR=$W/hooks-this $W/skiff start $W/zstd.sqsh /bin/true") || exit 1
fi
