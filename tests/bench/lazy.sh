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
#   lazy, data there            nothing reset (a hot node)
#   squashfs, cached            the full import's image cached (the floor)
#   floor of the index pass     the layers from the registry through zlib
# Also prints what the node holds after one cold-node start (allocated bytes
# of the sparse data file) against the layers' compressed size.
# Loopback only: the registry is on 127.0.0.1 with no link shaping, so the
# transfer costs little and the full import's figure is mostly inflate and
# squash (on a 1 Gbit/s link the full import pays the transfer too).
#   BENCH_RUNS=N (default 3)   BENCH_LAZY_MB=N (default 1024)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
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

for mode in full lazy; do
  mkdir -p "$W/$mode/tmp"
  cat >"$W/$mode/skiff.conf" <<EOF
allow_http = yes
image_mode = $mode
cache_path = $W/$mode/cache
temp_path = $W/$mode/tmp
EOF
  # one first exec: resolve (import, index pass or the cache) and start
  cat >"$W/$mode/first-exec" <<EOF
#!/bin/bash
export SKIFF_CONFIG=$W/$mode/skiff.conf
img=\$("$SKIFF" resolve "$URI") && exec "$SKIFF" start "\$img" /bin/true
EOF
  chmod 755 "$W/$mode/first-exec"
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

load=$(cut -d' ' -f1-3 /proc/loadavg)
hyperfine -N --runs "$RUNS" --export-json "$W/cold.json" \
  -n "full import, cold cache" --prepare "$W/cold-full" "$W/full/first-exec" \
  -n "lazy, first ever (index pass)" --prepare "$W/cold-lazy" "$W/lazy/first-exec" \
  -n "lazy, index there, cold node" --prepare "$W/cold-node" "$W/lazy/first-exec" \
  -n "floor of the index pass: curl | zlib inflate of the layers" --prepare /bin/true "$W/floor" >"$W/cold.log" 2>&1 \
  || { echo "bench lazy: hyperfine failed"; cat "$W/cold.log"; exit 1; }
# warm rows: several times the runs (they take milliseconds)
hyperfine -N --runs $((RUNS * 10)) --warmup 2 --export-json "$W/hot.json" \
  -n "lazy, data there (hot node)" "$W/lazy/first-exec" \
  -n "squashfs, cached (full import done)" "$W/full/first-exec" >"$W/hot.log" 2>&1 \
  || { echo "bench lazy: hyperfine failed"; cat "$W/hot.log"; exit 1; }

python3 - "$W/cold.json" "$W/hot.json" "$MB" "$RUNS" "$load" "$compressed" "$data" <<'EOF'
import json, statistics, sys
cold, hot = (json.load(open(p))["results"] for p in sys.argv[1:3])
mb, runs, load, comp, data = sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
rows = cold + hot
med = {r["command"]: statistics.median(r["times"]) for r in rows}
full, lazy = med["full import, cold cache"], med["lazy, index there, cold node"]
print(f"### Lazy start: time to first exec, busybox + {mb} MB random payload, registry on 127.0.0.1 "
      f"(2 cores, load before: {load}; cold rows {runs} runs, hot rows {int(runs) * 10})\n")
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
print(f"Index pass (first ever, with the start) / its floor (transfer and inflate in one stream): "
      f"{med['lazy, first ever (index pass)'] / med['floor of the index pass: curl | zlib inflate of the layers']:.2f} "
      f"(issue 27's A4 asks <= 1.2).")
print(f"Hot lazy start / cached squashfs start: "
      f"{med['lazy, data there (hot node)'] / med['squashfs, cached (full import done)']:.2f}")
EOF
