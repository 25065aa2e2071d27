#!/bin/bash
# Benchmark: what one step of N nodes costs the registry, and how soon every
# node has its image (issue 26). N emulated nodes = N concurrent
# `skiff resolve` of one tag into one shared cache (a home directory on a
# shared filesystem), as each node's helper does for a step; the registry is
# docker-registry on loopback behind tests/integration/lib/fakereg.py, which
# logs every request and the bytes of each answer. The image: 4 layers of
# incompressible data (BENCH_IMAGE_MB, default 64 MB). For N = 1, 4, 16
# (BENCH_NODES), each case BENCH_RUNS times (default 3; the median):
#   cold      an empty cache: the first step of the image
#   warm      the image cached, tag_ttl=0 (the default): each step asks the tag
#   warm+ttl  the image cached, tag_ttl=600: within the TTL
# SKIFF_BENCH_BASE=DIR (another checkout's build directory, e.g. main's before
# issue 26): its bin/skiff runs the same cases in the same run, side by side.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
RUNS=${BENCH_RUNS:-3}
NODES=${BENCH_NODES:-1 4 16}
MB=${BENCH_IMAGE_MB:-64}
BASE=${SKIFF_BENCH_BASE:-}
source "$ROOT/tests/lib.sh" # registry_start, registry_stop, registry_free_port

for tool in docker-registry skopeo python3 curl zstd; do
  command -v "$tool" >/dev/null || { echo "bench scale: $tool missing (scripts/install-deps test)"; exit 1; }
done
[ -x "$BUILD/bin/skiff" ] || { echo "bench scale: build first (make)"; exit 1; }
[ -z "$BASE" ] || [ -x "$BASE/bin/skiff" ] || { echo "bench scale: $BASE/bin/skiff missing"; exit 1; }

W=$(mktemp -d /tmp/skiff-bench-scale.XXXXXX)
FAKEPID=""
trap '[ -n "$FAKEPID" ] && kill $FAKEPID 2>/dev/null; registry_stop; rm -rf "$W"' EXIT
ROOT=$ROOT PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 - "$W/layout" "$MB" <<'EOP' || { echo "bench scale: image build failed"; exit 1; }
import os, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests/integration/lib"))
import mkimage
lay, mb = mkimage.Layout(sys.argv[1]), int(sys.argv[2])
layers = []
for i in range(4):
    t = mkimage.Tar()
    t.add("data", "dir")
    for k in range(4):
        t.add("data/l%d-f%d" % (i, k), data=os.urandom(mb * 1024 * 1024 // 16))
    layers.append(t.bytes())
lay.tag("big", mkimage.image(lay, layers, how="zstd"))
EOP
registry_start "$W/reg" || exit 1
R=127.0.0.1:$REG_PORT
skopeo copy -q --dest-tls-verify=false --format oci "oci:$W/layout:big" "docker://$R/scale/big:1" >/dev/null ||
  { echo "bench scale: push failed"; exit 1; }
FP=$(registry_free_port)
LOG=$W/requests.log
/usr/bin/python3 "$ROOT/tests/integration/lib/fakereg.py" "$FP" "$LOG" --upstream "$R" &
FAKEPID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$FP/v2/" && break; sleep 0.05; done
REF="docker://127.0.0.1:$FP#scale/big:1"

# step BUILD N: N nodes resolve the tag at once; prints "requests HEADs GETs bytes seconds"
step() {
  local bin=$1/bin/skiff n=$2 i pids="" m start
  m=$(wc -l <"$LOG")
  start=$(date +%s%N)
  for i in $(seq "$n"); do
    "$bin" resolve "$REF" >"$W/out.$i" 2>&1 &
    pids="$pids $!"
  done
  for i in $pids; do wait "$i" || { echo "bench scale: resolve failed: $(cat "$W"/out.*)" >&2; exit 1; }; done
  local ns=$(($(date +%s%N) - start))
  tail -n +$((m + 1)) "$LOG" | /usr/bin/python3 -c '
import json, sys
reqs = heads = gets = byt = 0
for line in sys.stdin:
    r = json.loads(line)
    if r["event"] == "begin" and r["path"] != "/v2/":
        reqs += 1
        heads += r["method"] == "HEAD"
        gets += r["method"] == "GET"
    if r["event"] == "end":
        byt += r.get("bytes", 0)
print(reqs, heads, gets, byt, "%.3f" % (int(sys.argv[1]) / 1e9))' "$ns"
}

# one case, RUNS times: "requests (HEAD/GET)" kB seconds, medians
measure() {  # BUILD N CASE
  local b=$1 n=$2 c=$3 r
  export SKIFF_CONFIG=$W/skiff.conf
  printf 'cache_path = %s\ntemp_path = %s\n' "$W/cache" "$W/tmp" >"$SKIFF_CONFIG"
  [ "$c" = warm+ttl ] && echo "tag_ttl = 600" >>"$SKIFF_CONFIG"
  mkdir -p "$W/tmp"
  [ "$c" = cold ] || { rm -rf "$W/cache"; step "$b" 1 >/dev/null; }
  for r in $(seq "$RUNS"); do
    [ "$c" = cold ] && rm -rf "$W/cache"
    step "$b" "$n"
  done | /usr/bin/python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin]
med = lambda k: statistics.median(float(r[k]) for r in rows)
print("%d %d/%d %.0f %.2f" % (med(0), med(1), med(2), med(3) / 1e3, med(4)))'
}

echo "### images at cluster scale: one step of N emulated nodes ($(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg), image ${MB} MB in 4 layers, median of $RUNS runs)"
echo
echo "| nodes | case | build | registry requests / step | of them HEAD/GET | kB from the registry / step | s until every node has the image |"
echo "|---|---|---|---|---|---|---|"
for n in $NODES; do
  for c in cold warm warm+ttl; do
    for b in ${BASE:+"$BASE"} "$BUILD"; do
      [ "$b" = "$BASE" ] && [ "$c" = warm+ttl ] && continue # no tag_ttl before issue 26
      read -r q hg kb s < <(measure "$b" "$n" "$c")
      [ -n "${s:-}" ] || exit 1
      printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$n" "$c" "$([ "$b" = "$BUILD" ] && echo this || echo base)" "$q" "$hg" "$kb" "$s"
    done
  done
done
echo
echo "Goal (issue 26): blobs once per cache, one HEAD per node per step at tag_ttl=0, none within the TTL."
echo "Load after: $(cut -d' ' -f1-3 /proc/loadavg) (the machine may be shared: compare rows of one run)."
