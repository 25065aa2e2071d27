#!/bin/bash
# Benchmark: time to first exec of a registry image, lazy start (issue 27,
# doc/lazy.md) beside today's full import, in one run, as ratios. The image
# is busybox plus a layer of BENCH_LAZY_MB (default 1024) MB of random bytes
# (tests/integration/lib/mkimage.py lazy-smoke; made once under
# build/bench-cache), pushed to a real registry on 127.0.0.1. Each row is
# `skiff resolve URI` then `skiff start PATH /bin/true` (what srun's helper
# does), hyperfine's --prepare resetting the state the row names:
#   full import, cold cache     image_mode=full, no image cached
#   lazy, first ever            image_mode=lazy, nothing cached: the index
#                               pass (the whole blob streams through it once)
#   lazy, index there, cold node  the lazy image (index, skeleton, prefetch
#                               list) cached, no data on the node
#   floor of the index pass     the layers from the registry through zlib
# Then paired A/B tables (tests/bench/abpairs.py: the two commands of a
# pair run back to back in a random order, so the load of a shared machine
# hits both alike; the median of the per-pair ratios):
#   A4  the index pass (skiff resolve: the pass, the skeleton), and the
#       first-ever start (that and a start), against the floor
#   A6  a hot node (the lazy image and the data it reads there) against a
#       cached squashfs: resolve + start, and `skiff start` alone
# Also prints what the node holds after one cold-node start (allocated bytes
# of the sparse data file) against the layers' compressed size.
# SKIFF_BENCH_BASE=DIR (another checkout's build directory, e.g. main's):
# also pairs its index pass and its hot lazy start with this build's.
# Loopback only: the registry is on 127.0.0.1 with no link shaping, so the
# transfer costs little and the full import's figure is mostly inflate and
# squash (on a 1 Gbit/s link the full import pays the transfer too).
#   BENCH_RUNS=N (default 3)   BENCH_LAZY_MB=N (default 1024)
#   BENCH_PAIRS=N (default 2 x BENCH_RUNS: the A4 pairs; A6 takes 10 x BENCH_RUNS)
# BENCH_LAZY_SIZES=1G,4G,20G (BENCH_SHAPE=1gbit, BENCH_FULL_SIZES=...): runs
# tests/bench/lazy-cluster.sh instead, issue 27's A1, A2, A3 and A5 under srun
# on the emulated cluster with shaped links (its header says how).
set -u
BASE=${SKIFF_BENCH_BASE:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ -n "${BENCH_LAZY_SIZES:-}" ] && exec "$ROOT/tests/bench/lazy-cluster.sh"
BUILD=${BUILD:-$ROOT/build}
SKIFF=$BUILD/bin/skiff
RUNS=${BENCH_RUNS:-3}
MB=${BENCH_LAZY_MB:-1024}
CACHE=$BUILD/bench-cache
LAYOUT=$CACHE/lazy-$MB.layout
source "$ROOT/tests/lib.sh" # registry_start, registry_stop

for tool in docker-registry skopeo hyperfine python3 gzip curl; do
  command -v "$tool" >/dev/null || { echo "bench lazy: $tool missing (scripts/install-deps test)"; exit 1; }
done
[ -x "$SKIFF" ] || { echo "bench lazy: build first (make)"; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "bench lazy: run as root (FUSE in a user namespace needs /dev/fuse usable)"; exit 1; }
mkdir -p "$CACHE"
if [ ! -f "$LAYOUT.done" ]; then
  rm -rf "$LAYOUT"
  echo "bench lazy: making the image ($MB MB of random bytes, gzip -6; once)" >&2
  LAZY_PAYLOAD_MB=$MB "$ROOT/tests/integration/lib/mkimage.py" "$LAYOUT" lazy-smoke >/dev/null \
    && touch "$LAYOUT.done" || { echo "bench lazy: image build failed"; exit 1; }
fi

W=$(mktemp -d /tmp/skiff-bench-lazy.XXXXXX)
trap 'registry_stop; rm -rf "$W"' EXIT
registry_start "$W/reg" || exit 1
URI=docker://127.0.0.1:$REG_PORT#bench/lazy:$MB
skopeo copy -q --dest-tls-verify=false --format v2s2 "oci:$LAYOUT:lazy-smoke" \
  "docker://127.0.0.1:$REG_PORT/bench/lazy:$MB" >/dev/null || { echo "bench lazy: push failed"; exit 1; }
compressed=$(python3 - "$LAYOUT" <<'EOF'
import json, os, sys
lay = sys.argv[1]
blob = lambda d: os.path.join(lay, "blobs", "sha256", d.split(":")[1])
idx = json.load(open(os.path.join(lay, "index.json")))
man = json.load(open(blob(idx["manifests"][0]["digest"])))
print(sum(l["size"] for l in man["layers"]))
EOF
)

modes="full lazy"
[ -n "$BASE" ] && modes="$modes base"
for mode in $modes; do
  mkdir -p "$W/$mode/tmp"
  cat >"$W/$mode/skiff.conf" <<EOF
allow_http = yes
image_mode = ${mode/base/lazy}
cache_path = $W/$mode/cache
temp_path = $W/$mode/tmp
EOF
  bin=$SKIFF
  [ "$mode" = base ] && bin=$BASE/bin/skiff
  # one first exec: resolve (import, index pass or the cache) and start;
  # and a start alone, of the image resolved once
  cat >"$W/$mode/first-exec" <<EOF
#!/bin/bash
export SKIFF_CONFIG=$W/$mode/skiff.conf
img=\$("$bin" resolve "$URI") && exec "$bin" start "\$img" /bin/true
EOF
  cat >"$W/$mode/start" <<EOF
#!/bin/bash
export SKIFF_CONFIG=$W/$mode/skiff.conf
exec "$bin" start "\$(cat $W/$mode/image)" /bin/true
EOF
  printf '#!/bin/sh\nexport SKIFF_CONFIG=%s/skiff.conf\nexec %s resolve %s >%s/image\n' "$W/$mode" "$bin" "$URI" "$W/$mode" \
    >"$W/$mode/resolve"
  chmod 755 "$W/$mode/first-exec" "$W/$mode/start" "$W/$mode/resolve"
done
# the floor of an index pass: the layers streamed from the registry through
# zlib's inflate (what the pass uses; transfer and inflate at once, nothing
# kept: gzip(1) -d is slower than zlib)
python3 - "$LAYOUT" "http://127.0.0.1:$REG_PORT/v2/bench/lazy/blobs/" >"$W/floor" <<'EOF'
import json, os, sys
lay, url = sys.argv[1:3]
blob = lambda d: os.path.join(lay, "blobs", "sha256", d.split(":")[1])
idx = json.load(open(os.path.join(lay, "index.json")))
print("#!/bin/sh")
inflate = ("import sys, zlib; d = zlib.decompressobj(31); "
           "[d.decompress(b) for b in iter(lambda: sys.stdin.buffer.read(1 << 20), bytes())]")
for l in json.load(open(blob(idx["manifests"][0]["digest"])))["layers"]:
    print(f"curl -fsSL {url}{l['digest']} | python3 -c '{inflate}' || exit 1")
EOF
printf '#!/bin/sh\nrm -rf %s/full/cache\n' "$W" >"$W/cold-full"
printf '#!/bin/sh\nrm -rf %s/lazy/cache\n' "$W" >"$W/cold-lazy"
printf '#!/bin/sh\nrm -rf %s/lazy/cache/lazy-data\n' "$W" >"$W/cold-node"
chmod 755 "$W"/cold-* "$W/floor"
# the cached rows need their images: one run of each
"$W/full/first-exec" && "$W/lazy/first-exec" || { echo "bench lazy: a first exec failed"; exit 1; }
"$W/cold-node"
"$W/lazy/first-exec" || exit 1
data=$(find "$W/lazy/cache/lazy-data" -name '*.data' -exec du -B1 {} + | awk '{s += $1} END {print s + 0}')
for mode in $modes; do
  "$W/$mode/resolve" && "$W/$mode/first-exec" || { echo "bench lazy: resolve ($mode) failed"; exit 1; }
done

load=$(cut -d' ' -f1-3 /proc/loadavg)
hyperfine -N --runs "$RUNS" --export-json "$W/cold.json" \
  -n "full import, cold cache" --prepare "$W/cold-full" "$W/full/first-exec" \
  -n "lazy, first ever (index pass)" --prepare "$W/cold-lazy" "$W/lazy/first-exec" \
  -n "lazy, index there, cold node" --prepare "$W/cold-node" "$W/lazy/first-exec" \
  -n "floor of the index pass: curl | zlib inflate of the layers" --prepare /bin/true "$W/floor" >"$W/cold.log" 2>&1 \
  || { echo "bench lazy: hyperfine failed"; cat "$W/cold.log"; exit 1; }
python3 - "$W/cold.json" "$MB" "$RUNS" "$load" "$compressed" "$data" <<'EOF'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))["results"]
mb, runs, load, comp, data = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
med = {r["command"]: statistics.median(r["times"]) for r in rows}
full, lazy = med["full import, cold cache"], med["lazy, index there, cold node"]
print(f"### Lazy start: time to first exec, busybox + {mb} MB random payload, registry on 127.0.0.1 "
      f"(2 cores, load before: {load}; {runs} runs)\n")
print("| what | median s | min s | max s | full import / this |")
print("|---|---:|---:|---:|---:|")
for r in rows:
    t = r["times"]
    print(f"| {r['command']} | {med[r['command']]:.3f} | {min(t):.3f} | {max(t):.3f} | {full / med[r['command']]:.1f}x |")
print()
print(f"Time to first exec, full import / lazy with the index there: {full / lazy:.1f}x "
      f"(issue 27's A2 asks >= 10x on a 1 Gbit/s link; this is loopback).")
print(f"Data on the node after one cold-node start: {data / 2**20:.1f} MB of {comp / 2**20:.0f} MB compressed "
      f"({100 * data / comp:.2f} %).")
EOF
# the paired tables (A4: every lazy run starts with no lazy cache)
PAIRS=${BENCH_PAIRS:-$((RUNS * 2))}
ab() { python3 "$ROOT/tests/bench/abpairs.py" "$@" || { echo "bench lazy: abpairs failed"; exit 1; }; }
echo
echo "A4, paired ($PAIRS pairs; load $(cut -d' ' -f1 /proc/loadavg)): the first-ever start against the floor" \
  "of its index pass (issue 27 asks <= 1.2)"
echo
ab --runs "$PAIRS" --warmup 1 --label-a floor --label-b lazy --setup-b "$W/cold-lazy" \
  --row "index pass alone (skiff resolve) / curl \\| zlib" "$W/floor" "$W/lazy/resolve" \
  --row "index pass + start / curl \\| zlib" "$W/floor" "$W/lazy/first-exec"
# CPU seconds of each (user + system, all its processes): on a loaded
# machine the wall-clock ratio follows this one. Taken in turns (floor,
# this pass, the base's pass with SKIFF_BENCH_BASE), the least of
# BENCH_CPU_ROUNDS (default 3) each.
python3 - "${BENCH_CPU_ROUNDS:-3}" "$W/floor" "$W/cold-lazy" "$W/lazy/resolve" ${BASE:+"$W/base/resolve"} <<'EOF'
import os, resource, shutil, subprocess, sys
def cpu(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
rounds, floor, cold, this = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
base = sys.argv[5] if len(sys.argv) > 5 else None
f, l, b = [], [], []
for _ in range(rounds):
    f.append(cpu([floor]))
    subprocess.run([cold], check=True)
    l.append(cpu([this]))
    if base:
        shutil.rmtree(os.path.join(os.path.dirname(base), "cache"), ignore_errors=True)
        b.append(cpu([base]))
f, l = min(f), min(l)
print(f"\nCPU time of one pass (least of {rounds}): index pass {l:.2f} s, its floor {f:.2f} s: {l / f:.2f}x")
if base:
    print(f"CPU time of the base build's pass (same turns): {min(b):.2f} s: {min(b) / f:.2f}x its floor; "
          f"this / base {l / min(b):.2f}x")
EOF
echo
echo "A6, paired ($((RUNS * 10)) pairs; load $(cut -d' ' -f1 /proc/loadavg)): a hot lazy node against a cached" \
  "squashfs (issue 27 asks <= 1.05)"
echo
ab --runs $((RUNS * 10)) --label-a squashfs --label-b lazy \
  --row "resolve + start /bin/true" "$W/full/first-exec" "$W/lazy/first-exec" \
  --row "skiff start /bin/true" "$W/full/start" "$W/lazy/start"
[ -n "$BASE" ] || exit 0
printf '#!/bin/sh\nrm -rf %s/base/cache\n' "$W" >"$W/cold-base"
chmod 755 "$W/cold-base"
echo
echo "Base build ($BASE) against this one, paired; load $(cut -d' ' -f1 /proc/loadavg)"
echo
ab --runs "$PAIRS" --warmup 1 --label-a base --label-b this --setup-a "$W/cold-base" --setup-b "$W/cold-lazy" \
  --row "lazy, first ever (index pass + start)" "$W/base/first-exec" "$W/lazy/first-exec"
# (the cold rows left no image: one resolve each, then hot starts)
"$W/base/resolve" && "$W/lazy/resolve" && "$W/base/first-exec" && "$W/lazy/first-exec" || exit 1
ab --runs $((RUNS * 10)) --label-a base --label-b this \
  --row "lazy, hot node: skiff start /bin/true" "$W/base/start" "$W/lazy/start"
