#!/bin/bash
# Benchmark: skiff import of a ~300 MB debootstrap image (bookworm minbase
# with python3, numpy and perl: the size of the issue's Debian image)
# from a real registry on 127.0.0.1, next to mksquashfs of the same tree (the
# floor: import = download + unpack + the same squash). Prints a markdown
# table of medians. The tree is made once under build/bench-cache (debootstrap
# with the Debian mirror apt is configured with).
#   BENCH_RUNS=N (default 5)   BENCH_TEMP=DIR scratch for skiff (default /tmp)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
SKIFF=$BUILD/bin/skiff
RUNS=${BENCH_RUNS:-5}
CACHE=$BUILD/bench-cache
# the packages on top of minbase (part of the cache's name: changing them
# makes a new tree)
INCLUDE=python3,perl
TREE=$CACHE/bookworm-$(echo $INCLUDE | tr , -)
LAYOUT=$TREE.layout
source "$ROOT/tests/lib.sh" # registry_start, registry_stop

for tool in debootstrap docker-registry skopeo mksquashfs hyperfine zstd; do
  command -v "$tool" >/dev/null || { echo "bench import: $tool missing (scripts/install-deps test)"; exit 1; }
done
mkdir -p "$CACHE"

apt_mirror() {  # the first Debian mirror apt uses for bookworm
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '/^URIs:/{u=$2} /^Suites:/{if ($0 ~ /bookworm( |$)/ && u !~ /security/) {print u; exit}} /^$/{u=""}' "$f"
  done | head -1
  [ -f /etc/apt/sources.list ] && awk '$1=="deb" && $3=="bookworm"{print $2; exit}' /etc/apt/sources.list
}

if [ ! -f "$TREE.done" ]; then
  mirror=$(apt_mirror | head -1)
  [ -n "$mirror" ] || { echo "bench import: no bookworm mirror in apt's sources"; exit 1; }
  rm -rf "$TREE"
  echo "bench import: debootstrap --variant=minbase --include=$INCLUDE bookworm (once, ~2 min)" >&2
  debootstrap --variant=minbase --include=$INCLUDE bookworm "$TREE" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
    || { echo "bench import: debootstrap failed, see $CACHE/debootstrap.log"; exit 1; }
  touch "$TREE.done"
fi
if [ ! -f "$LAYOUT.done" ]; then
  rm -rf "$LAYOUT" "$TREE.tar"
  tar -C "$TREE" --numeric-owner -cf "$TREE.tar" . &&
  "$ROOT/tests/integration/lib/mkimage.py" "$LAYOUT" --from-tar gzip "$TREE.tar" gzip &&
  "$ROOT/tests/integration/lib/mkimage.py" "$LAYOUT" --from-tar zstd "$TREE.tar" zstd &&
  rm -f "$TREE.tar" && touch "$LAYOUT.done" || { echo "bench import: image build failed"; exit 1; }
fi

SIZE=${SIZE:-0}
if [ "$SIZE" != 0 ]; then
  size_mb=$(numfmt --from=iec "$SIZE" 2>/dev/null) || { echo "bench import: SIZE=$SIZE: want a size like 1G or 1536M"; exit 1; }
  size_mb=$((size_mb / 1048576))
  tree_mb=$(du -sm "$TREE" | cut -f1)
  pay_mb=$((size_mb > tree_mb + 256 ? size_mb - tree_mb : 256))
  BIG=$CACHE/big-${size_mb}M
  if [ ! -f "$BIG.done" ]; then
    echo "bench import: a ${size_mb} MB image: the tree + $pay_mb MB of random payload layers (once)" >&2
    rm -rf "$BIG" && mkdir -p "$BIG/floor" || exit 1
    tar -C "$TREE" --numeric-owner -cf "$BIG/0.tar" . && cp -a "$TREE/." "$BIG/floor/" || exit 1
    tars=("$BIG/0.tar") left=$pay_mb i=1
    while [ "$left" -gt 0 ]; do
      n=$((left > 256 ? 256 : left))
      mkdir -p "$BIG/p$i/payload/$i" && for f in $(seq 1 $(((n + 15) / 16))); do
        head -c $((n < 16 ? n : 16))M /dev/urandom >"$BIG/p$i/payload/$i/f$f" || exit 1
      done
      tar -C "$BIG/p$i" --numeric-owner -cf "$BIG/$i.tar" . && cp -a "$BIG/p$i/." "$BIG/floor/" || exit 1
      rm -rf "$BIG/p$i"
      tars+=("$BIG/$i.tar") left=$((left - n)) i=$((i + 1))
    done
    "$ROOT/tests/integration/lib/mkimage.py" "$BIG/layout" --from-tars big gzip "${tars[@]}" &&
    rm -f "${tars[@]}" && touch "$BIG.done" || { echo "bench import: image build failed"; exit 1; }
  fi
fi

W=$(mktemp -d /tmp/skiff-bench.XXXXXX)
trap 'registry_stop; rm -rf "$W"' EXIT
registry_start "$W/reg" || exit 1
R=127.0.0.1:$REG_PORT
if [ "$SIZE" != 0 ]; then
  skopeo copy -q --dest-tls-verify=false --format oci oci:"$BIG/layout":big docker://$R/big:1 >/dev/null \
    || { echo "bench import: push failed"; exit 1; }
  RUNS=${BENCH_RUNS:-5}
  export SKIFF_CONFIG=$W/skiff.conf
  printf 'cache_path = %s\ntemp_path = %s\n' "$W/cache" "${BENCH_TEMP:-/tmp}" >"$SKIFF_CONFIG"
  printf 'cache_path = %s\ntemp_path = %s\nimport_mksquashfs = yes\n' "$W/cache" "${BENCH_TEMP:-/tmp}" >"$W/old.conf"
  floor_mb=$(du -sm "$BIG/floor" | cut -f1)
  nlayers=$(/usr/bin/python3 -c 'import json,sys; i=json.load(open(sys.argv[1]+"/index.json")); m=json.load(open(sys.argv[1]+"/blobs/sha256/"+i["manifests"][0]["digest"][7:])); print(len(m["layers"]))' "$BIG/layout")
  load0=$(cut -d" " -f1-3 /proc/loadavg)
  # one import of each kind first, under /usr/bin/time: peak memory
  rss() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; }
  rss_new=$(rm -rf "$W/cache"; rss "$SKIFF" import -f -o "$W/a.sqsh" docker://$R#big:1)
  rss_old=$(rm -rf "$W/cache"; SKIFF_CONFIG=$W/old.conf rss "$SKIFF" import -f -o "$W/o.sqsh" docker://$R#big:1)
  rss_mk=$(rss mksquashfs "$BIG/floor" "$W/m.sqsh" -noappend -no-progress -quiet -comp zstd -Xcompression-level 1)
  # paired runs (tests/bench/abpairs.py): the floor and an import alternate,
  # in random order, so that the shared machine's load hits both alike
  floor="mksquashfs $BIG/floor $W/m.sqsh -noappend -no-progress -quiet -comp zstd -Xcompression-level 1"
  ab() {  # LABEL SETUP_B CMD_B
    /usr/bin/python3 "$ROOT/tests/bench/abpairs.py" --runs "$RUNS" --warmup 1 --label-a mksquashfs --label-b skiff \
      --setup-a "rm -f $W/m.sqsh" --setup-b "$2" --row "$1" "$floor" "$3" || exit 1
  }
  echo "### skiff import benchmark, SIZE=$SIZE ($(nproc) cores, load before: $load0, image $nlayers gzip layers, merged tree ${floor_mb} MB, $RUNS pairs each, temp_path ${BENCH_TEMP:-/tmp})"
  echo
  echo "Each row: mksquashfs -comp zstd -Xcompression-level 1 of the merged tree (the floor, A) and a skiff import (B) of the image from docker-registry on 127.0.0.1, alternating; ratio = skiff / mksquashfs per pair."
  echo
  set -o pipefail
  # every side starts without its output file, as the floor does (rm -f
  # m.sqsh): truncating the last run's 900 MB costs ~0.2 s of the run
  ab "skiff import, cold cache" "rm -rf $W/cache $W/a.sqsh" "$SKIFF import -f -o $W/a.sqsh docker://$R#big:1" || exit 1
  ab "skiff import, layers cached" "rm -f $W/c.sqsh" "$SKIFF import -f -o $W/c.sqsh docker://$R#big:1" | tail -n +3 || exit 1
  ab "skiff import, cold cache, import_mksquashfs=yes (the old path)" "rm -rf $W/cache $W/o.sqsh" \
    "env SKIFF_CONFIG=$W/old.conf $SKIFF import -f -o $W/o.sqsh docker://$R#big:1" | tail -n +3 || exit 1
  # CPU time (user + sys, least of 3): what the load on a shared machine
  # does not change. The registry's own CPU while it serves the import is
  # shown apart: on a cluster it is another machine's.
  cpu() { /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{printf "%.2f", $1 + $2}'; }
  regcpu() { awk '{printf "%.2f", ($14 + $15) / 100}' /proc/$REG_PID/stat; }
  least() { tr ' ' '\n' | grep . | sort -n | head -1; }
  c_mk="" c_im="" c_old="" c_reg=""
  for _ in 1 2 3; do
    rm -f "$W/m.sqsh"; c_mk+=" $(cpu $floor)"
    rm -rf "$W/cache" "$W/a.sqsh"; r0=$(regcpu); c_im+=" $(cpu "$SKIFF" import -f -o "$W/a.sqsh" docker://$R#big:1)"
    c_reg+=" $(echo "$(regcpu) $r0" | awk '{printf "%.2f", $1 - $2}')"
    rm -rf "$W/cache" "$W/o.sqsh"; c_old+=" $(SKIFF_CONFIG=$W/old.conf cpu "$SKIFF" import -f -o "$W/o.sqsh" docker://$R#big:1)"
  done
  m_mk=$(least <<<"$c_mk") m_im=$(least <<<"$c_im") m_old=$(least <<<"$c_old") m_reg=$(least <<<"$c_reg")
  echo
  echo "CPU time, user + sys, least of 3 runs: mksquashfs $m_mk s, skiff import (cold cache) $m_im s" \
    "($(awk -v a="$m_im" -v b="$m_mk" 'BEGIN{printf "%.2f", a / b}')x), old path $m_old s" \
    "($(awk -v a="$m_old" -v b="$m_mk" 'BEGIN{printf "%.2f", a / b}')x); the registry serving the import: $m_reg s more."
  echo
  echo "Output: import $(($(stat -c %s "$W/a.sqsh") / 1000000)) MB, old path $(($(stat -c %s "$W/o.sqsh") / 1000000)) MB, mksquashfs $(($(stat -c %s "$W/m.sqsh") / 1000000)) MB."
  echo "Peak RSS: import $((rss_new / 1024)) MB, old path $((rss_old / 1024)) MB (plus its scratch tree: the unpacked image, on /dev/shm when"
  echo "temp_path is /tmp and /tmp is no tmpfs), mksquashfs $((rss_mk / 1024)) MB."
  echo "Target: skiff import (cold cache) / mksquashfs <= 1.3. Load after: $(cut -d' ' -f1-3 /proc/loadavg)."
  exit 0
fi
skopeo copy -q --dest-tls-verify=false --format v2s2 oci:"$LAYOUT":gzip docker://$R/deb:gzip >/dev/null &&
skopeo copy -q --dest-tls-verify=false --format oci oci:"$LAYOUT":zstd docker://$R/deb:zstd >/dev/null \
  || { echo "bench import: push failed"; exit 1; }

export SKIFF_CONFIG=$W/skiff.conf
printf 'cache_path = %s\ntemp_path = %s\n' "$W/cache" "${BENCH_TEMP:-/tmp}" >"$SKIFF_CONFIG"
tree_mb=$(du -sm "$TREE" | cut -f1)
json=$W/h.json
hyperfine -N --runs "$RUNS" --warmup 1 --export-json "$json" \
  --prepare "rm -rf $W/cache" -n "skiff import, gzip layer, cold cache (v2s2)" "$SKIFF import -f -o $W/a.sqsh docker://$R#deb:gzip" \
  --prepare "rm -rf $W/cache" -n "skiff import, zstd layer, cold cache (OCI)" "$SKIFF import -f -o $W/b.sqsh docker://$R#deb:zstd" \
  --prepare "true" -n "skiff import, zstd layer, layer cached" "$SKIFF import -f -o $W/c.sqsh docker://$R#deb:zstd" \
  --prepare "rm -f $W/m.sqsh" -n "mksquashfs -comp zstd -Xcompression-level 1 (floor)" "mksquashfs $TREE $W/m.sqsh -noappend -no-progress -quiet -comp zstd -Xcompression-level 1" \
  >"$W/hyperfine.log" 2>&1 || { cat "$W/hyperfine.log"; exit 1; }
# zstd's default level (15) takes ~20-50 s here: one run is enough to show why skiff uses 1.
hyperfine -N --runs 1 --export-json "$W/h15.json" -n "mksquashfs -comp zstd (default level 15, 1 run)" \
  "mksquashfs $TREE $W/d.sqsh -noappend -no-progress -quiet -comp zstd" >>"$W/hyperfine.log" 2>&1 \
  || { cat "$W/hyperfine.log"; exit 1; }

echo "### skiff import benchmark ($(nproc) cores, load before: $(cut -d" " -f1-3 /proc/loadavg), tree ${tree_mb} MB, $RUNS runs each, temp_path ${BENCH_TEMP:-/tmp} (default: unpacks on /dev/shm when /tmp is no tmpfs))"
echo
/usr/bin/python3 - "$json" "$W" "$W/h15.json" <<'EOP'
import json, os, statistics, sys
res = json.load(open(sys.argv[1]))["results"] + json.load(open(sys.argv[3]))["results"]
w = sys.argv[2]
files = {"gzip layer, cold": "a.sqsh", "zstd layer, cold": "b.sqsh", "layer cached": "c.sqsh", "(floor)": "m.sqsh", "level 15": "d.sqsh"}
floor = [statistics.median(r["times"]) for r in res if "(floor)" in r["command"]][0]
print("| what | median s | min s | max s | median / floor | output MB |")
print("|---|---|---|---|---|---|")
for r in res:
    size = ""
    for k, f in files.items():
        if k in r["command"] and os.path.exists(os.path.join(w, f)):
            size = "%.1f" % (os.path.getsize(os.path.join(w, f)) / 1e6)
    med = statistics.median(r["times"])
    print("| %s | %.2f | %.2f | %.2f | %.2f | %s |" % (r["command"], med, min(r["times"]), max(r["times"]), med / floor, size))
EOP
echo
echo "Target: import <= 1.5 s on 2 cores. Load after: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared: compare rows of one run)."
