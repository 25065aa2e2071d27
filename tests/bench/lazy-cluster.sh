#!/bin/bash
# Benchmark: issue 27's A1, A2, A3 and A5 (doc/lazy.md) on the emulated
# cluster: lazy starts and today's full import, under srun, of images of
# several sizes, from a real registry (docker-registry) on the cluster's
# bridge, through links shaped with tc. tests/bench/lazy.sh runs this when
# BENCH_LAZY_SIZES is set; it can also be run alone.
#
#   BENCH_LAZY_SIZES=1G,4G,20G   the images: each is a real rootfs (the
#       debootstrap bookworm + python3 + perl tree tests/bench/import.sh
#       makes, one gzip layer) plus a payload layer. A size up to 4G is all
#       random bytes; a larger one is a tenth random and the rest zeros
#       ("20G": 2 GiB random + 18 GiB zeros, ~2.1 GB compressed). SIZE:RANDOM
#       sets the random part (e.g. 20G:2G). 64M is the smoke run. Images are
#       streamed into the registry (tests/bench/lazyimage.py): no scratch.
#   BENCH_SHAPE=1gbit   each node's link (both directions: the host side of
#       its veth and its eth0, in its network namespace) limited with tc tbf
#       to this rate; "none": unshaped. No delay: this kernel has no netem
#       (CONFIG_NET_SCH_NETEM is not set; tbf, htb, ingress, u32, bpf are
#       all it has), so the 1 ms of the issue is not emulated; the summary
#       bounds its cost from the number of requests a start makes.
#   BENCH_RUNS=3        cold-node starts per size (A1, A3), in rounds: one
#                       of each size after the other (the summary pairs them)
#   BENCH_MODULES_RUNS  the "many modules" starts per size (BENCH_RUNS)
#   BENCH_FULL_SIZES    sizes that also get a full import (A2), default all
#   BENCH_FULL_RUNS=1   full imports per size
# Every start is `srun -N1 -n1 -w nK --container-image=REF python3 -c pass`
# as the cluster's test user, timed from srun's start to its end (srun's own
# ~50-100 ms included); rows:
#   lazy, first ever     image_mode=lazy, nothing cached: the index pass
#                        (reported, not a criterion here: A4 is lazy.sh's)
#   lazy, cold node      the lazy image (index, skeleton, prefetch list) in
#                        cache_path, no data on any node (A1; A3: registry
#                        bytes during the step, and srun's "fetched X of Y")
#   lazy, 3 nodes cold   srun -N3 -n3, no data on any node (A5)
#   full import          image_mode=full, nothing cached: import, then start
#                        (A2)
#   squashfs             the image imported (the full import's), a start
#                        on another node: the floor
#   many modules         a cold node, python3 importing a dozen stdlib
#                        packages (the issue's "time to useful work"); run
#                        after the rows above, since a start's reads become
#                        the next one's prefetch list
# Registry bytes are the sizes of the blob GETs in docker-registry's access
# log. The page cache is not dropped (the machine is shared): the skeleton
# and index of a "cold node" are in it, as on a node whose cache_path is
# local; a node's data file is removed before each cold start.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
SIZES=${BENCH_LAZY_SIZES:-64M}
SHAPE=${BENCH_SHAPE:-1gbit}
RUNS=${BENCH_RUNS:-3}
FULL_SIZES=${BENCH_FULL_SIZES:-$SIZES}
FULL_RUNS=${BENCH_FULL_RUNS:-1}
MRUNS=${BENCH_MODULES_RUNS:-$RUNS}
BASE_LAYOUT=$BUILD/bench-cache/bookworm-python3-perl.layout
PLUGIN=$BUILD/plugin/spank_skiff.so
source "$ROOT/tests/lib.sh" # t_cluster, registry_start

die() { echo "bench lazy-cluster: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (it starts the test cluster and shapes its links)"
for tool in docker-registry python3 openssl tc nsenter curl; do
  command -v "$tool" >/dev/null || die "$tool missing (scripts/install-deps test)"
done
[ -f "$PLUGIN" ] || die "build first (make): $PLUGIN missing"
[ -f "$BASE_LAYOUT.done" ] || die "no rootfs image at $BASE_LAYOUT: run tests/bench/import.sh once (it makes it with debootstrap)"
# SIZE[:RANDOM] -> "NAME RANDOM_MIB ZERO_MIB"
mib() { numfmt --from=iec "$1" 2>/dev/null | awk '{ printf "%d", $1 / 1048576 }'; }
declare -A RAND ZERO
for s in ${SIZES//,/ }; do
  name=${s%%:*} total=$(mib "${s%%:*}")
  [ -n "$total" ] && [ "$total" -gt 0 ] || die "BENCH_LAZY_SIZES: '$s' is not a size like 64M or 20G[:2G]"
  if [ "$s" != "$name" ]; then r=$(mib "${s#*:}"); elif [ "$total" -le 4096 ]; then r=$total; else r=$((total / 10)); fi
  [ -n "$r" ] && [ "$r" -le "$total" ] || die "BENCH_LAZY_SIZES: '$s': the random part is more than the size"
  RAND[$name]=$r ZERO[$name]=$((total - r))
  NAMES+=("$name")
done
for s in ${FULL_SIZES//,/ }; do
  [ -n "${RAND[${s%%:*}]:-}" ] || die "BENCH_FULL_SIZES: '$s' is not one of BENCH_LAZY_SIZES"
done
case "$SHAPE" in none | [0-9]*[kmg]bit) ;; *) die "BENCH_SHAPE: '$SHAPE': want a tc rate like 1gbit, or none" ;; esac

t_cluster 3 >/dev/null || die "no test cluster"
U=$SKIFF_TEST_USER
T=$(mktemp -d /tmp/skiff-bench-lazyc.XXXXXX)
chmod 755 "$T"
shaped=()
cleanup() {
  local dev
  for dev in "${shaped[@]}"; do
    case "$dev" in
      *@*) tc -n "${dev#*@}" qdisc del dev "${dev%@*}" root 2>/dev/null ;;
      *) tc qdisc del dev "$dev" root 2>/dev/null ;;
    esac
  done
  registry_stop
  scancel -u "$U" 2>/dev/null
  rm -rf "$T"
  t_cluster_done
}
trap cleanup EXIT
mkdir -p "$T/u" "$T/w" && chown "$U:" "$T/u" "$T/w"
as_user() { (cd "$T/w" && runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" "$@"); }

# ---- the registry and the images -------------------------------------------------
REG_ADDR=$SKIFF_CLUSTER_HOST_ADDR registry_start "$T/reg" || die "registry did not start"
R=$SKIFF_CLUSTER_HOST_ADDR:$REG_PORT
LOG=$T/reg/log
declare -A COMP
for n in "${NAMES[@]}"; do
  echo "bench lazy-cluster: pushing the $n image (${RAND[$n]} MiB random, ${ZERO[$n]} MiB zeros)" >&2
  out=$("$ROOT/tests/bench/lazyimage.py" "$BASE_LAYOUT" gzip "http://$R" "bench/lazy:$n" "${RAND[$n]}" "${ZERO[$n]}") ||
    die "pushing the $n image failed"
  COMP[$n]=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["compressed"])' "$out")
  echo "bench lazy-cluster: $out" >&2
done
ROOTFS_DIGEST=$(python3 - "$BASE_LAYOUT" <<'EOF'
import json, os, sys
lay = sys.argv[1]
idx = json.load(open(os.path.join(lay, "index.json")))
m = [m for m in idx["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == "gzip"][0]
print(json.load(open(os.path.join(lay, "blobs", "sha256", m["digest"][7:])))["layers"][0]["digest"])
EOF
)

# ---- the links ----------------------------------------------------------------------
node_addr() { echo "${SKIFF_CLUSTER_HOST_ADDR%.1}.$((10 + $1))"; }
if [ "$SHAPE" != none ]; then
  for k in 1 2 3; do
    ns=skiff${SKIFF_CLUSTER_INDEX}n$k veth=sk${SKIFF_CLUSTER_INDEX}n${k}h
    tc qdisc replace dev "$veth" root tbf rate "$SHAPE" burst 256kb latency 10ms || die "tc on $veth failed"
    shaped+=("$veth")
    tc -n "$ns" qdisc replace dev eth0 root tbf rate "$SHAPE" burst 256kb latency 10ms || die "tc in $ns failed"
    shaped+=("eth0@$ns")
  done
fi
# what the link gives: the rootfs layer's blob, from node 1
link=$(nsenter --net="/run/netns/skiff${SKIFF_CLUSTER_INDEX}n1" curl -s -o /dev/null \
  -w '%{size_download} %{time_total}' "http://$R/v2/bench/lazy/blobs/$ROOTFS_DIGEST" |
  awk '{ printf "%.1f MB/s (%d MB in %.2f s)", $1 / $2 / 1e6, $1 / 1e6, $2 }')
# (no ping here: the round trip of a TCP connect, least of 5)
rtt=$(for _ in 1 2 3 4 5; do
  nsenter --net="/run/netns/skiff${SKIFF_CLUSTER_INDEX}n1" curl -s -o /dev/null -w '%{time_connect}\n' "http://$R/v2/"
done | sort -n | head -1 | awk '{ printf "%.3f ms", $1 * 1000 }')
echo "bench lazy-cluster: link from n1 ($SHAPE): $link, TCP connect $rtt" >&2

# ---- starts -------------------------------------------------------------------------
for mode in lazy full; do
  mkdir -p "$T/u/$mode" && chown "$U:" "$T/u/$mode"
  printf 'allow_http = yes\nimage_mode = %s\ncache_path = %s\n' "$mode" "$T/u/$mode/cache" >"$T/$mode.conf"
  chmod 644 "$T/$mode.conf"
done
use() { echo "required $PLUGIN config=$T/$1.conf" >"$SKIFF_PLUGSTACK"; }
settle() {  # until no process of the user's is left on the nodes (the fetcher ends a second after its step)
  for _ in $(seq 200); do [ -z "$(t_cluster_procs)" ] && return 0; sleep 0.1; done
  echo "bench lazy-cluster: processes left: $(t_cluster_procs | head -3)" >&2
}
cold() { settle; rm -rf "$T/u/lazy/cache/lazy-data"; }
# reg_bytes FROM: bytes of blob GETs in the access log after line FROM, then
# the count of those requests
reg_bytes() {
  sleep 0.3
  tail -n +"$(($1 + 1))" "$LOG" | awk '$6 == "\"GET" && $7 ~ /\/blobs\/sha256:/ && ($9 == 200 || $9 == 206) { b += $10; n++ }
    END { printf "%.0f %d", b, n }'
}
RES=$T/results
# start KIND SIZE NODES CMD...: one timed srun; a line in $RES:
# KIND SIZE NODES SECONDS BYTES REQUESTS FETCHED_MB
start() {
  local kind=$1 n=$2 nodes=$3 mark t0 t1 rc fetched bytes
  shift 3
  mark=$(wc -l <"$LOG")
  t0=$(date +%s%N)
  as_user srun -N"$(tr , '\n' <<<"$nodes" | wc -l)" -n"$(tr , '\n' <<<"$nodes" | wc -l)" -w "$nodes" \
    --container-image="docker://$R#bench/lazy:$n" "$@" >"$T/out" 2>"$T/err"
  rc=$?
  t1=$(date +%s%N)
  [ $rc -eq 0 ] || { echo "bench lazy-cluster: $kind $n on $nodes failed (rc $rc): $(head -c 800 "$T/err")" >&2; return 1; }
  settle
  bytes=$(reg_bytes "$mark")
  fetched=$(sed -n 's/.*fetched \([0-9.]*\) of [0-9]* MB.*/\1/p' "$T/err" | awk '{ s += $1 } END { printf "%.1f", s }')
  [ "$kind" = cold ] && [ ! -f "$T/said-$n" ] && grep -m1 "fetched .* of .* MB" "$T/err" | sed 's/^.*skiff: //' >"$T/said-$n"
  echo "$kind $n $nodes $(((t1 - t0) / 1000000)) $bytes $fetched" | tee -a "$RES" >&2
}
PYMODS="import asyncio, concurrent.futures, decimal, email.mime.multipart, http.server, json, logging.handlers, sqlite3, ssl, unittest, urllib.request, xml.etree.ElementTree"

use lazy
load_lazy=$(cut -d' ' -f1-3 /proc/loadavg)
for n in "${NAMES[@]}"; do  # the index pass (first ever), then one start that writes the prefetch list
  cold; start "first" "$n" n1 python3 -c pass || exit 1
  cold; start "warm" "$n" n2 python3 -c pass || exit 1
done
load_cold=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$RUNS"); do
  order=("${NAMES[@]}")
  [ $((r % 2)) -eq 0 ] && order=($(printf '%s\n' "${NAMES[@]}" | tac))
  i=0
  for n in "${order[@]}"; do
    k=$(((r + i) % 3 + 1)) i=$((i + 1))
    cold; start cold "$n" "n$k" python3 -c pass || exit 1
  done
done
for n in "${NAMES[@]}"; do
  cold; start three "$n" n1,n2,n3 python3 -c pass || exit 1
done
# after the rows above: a start's reads become the next one's prefetch list,
# and these read more than python3 -c pass does (one start first to make it)
for n in "${NAMES[@]}"; do
  cold; start warm-modules "$n" n1 python3 -c "$PYMODS" || exit 1
  for r in $(seq 1 "$MRUNS"); do
    cold; start modules "$n" "n$((r % 3 + 1))" python3 -c "$PYMODS" || exit 1
  done
done
load_full=$(cut -d' ' -f1-3 /proc/loadavg)
use full
for s in ${FULL_SIZES//,/ }; do
  n=${s%%:*}
  for _ in $(seq 1 "$FULL_RUNS"); do
    settle; rm -rf "$T/u/full/cache"
    start full "$n" n1 python3 -c pass || exit 1
    start squashfs "$n" n2 python3 -c pass || exit 1
  done
  settle; rm -rf "$T/u/full/cache"
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- summary --------------------------------------------------------------------------
comp=""
for n in "${NAMES[@]}"; do comp="$comp $n=${COMP[$n]}"; done
python3 - "$RES" "$SHAPE" "$link" "$rtt" "$RUNS" "$load_lazy" "$load_cold" "$load_full" "$load_end" "${NAMES[*]}" $comp <<'EOF'
import statistics, sys
res, shape, link, rtt, runs, l0, l1, l2, l3, names = sys.argv[1:11]
names = names.split()
comp = dict(a.split("=") for a in sys.argv[11:])
comp = {k: int(v) for k, v in comp.items()}
rows = [l.split() for l in open(res)]
def sel(kind, n):
    return [(int(r[3]) / 1000, int(r[4]), int(r[5]), float(r[6])) for r in rows if r[0] == kind and r[1] == n]
med = lambda xs: statistics.median(xs) if xs else float("nan")
MB = 1e6
print(f"### Issue 27 on the emulated cluster: srun, links {shape} (tbf, no delay), registry on the bridge\n")
print(f"Link from a node: {link}; TCP connect {rtt}. Load average before the first-ever starts {l0}, "
      f"before the cold-node rounds {l1}, "
      f"before the full imports {l2}, at the end {l3}. {runs} cold-node runs per size.\n")
print("| image | compressed MB | lazy, first ever (index pass) s | lazy, cold node s (median; min-max) | "
      "registry MB, cold start (median) | % of compressed | srun: fetched MB | requests | "
      "many modules s | 3 nodes cold: registry MB | / single node | full import s | full / lazy | squashfs (imported) s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
summ = {}
for n in names:
    c = comp[n]
    first, cold, mods, three, full, sq = (sel(k, n) for k in ("first", "cold", "modules", "three", "full", "squashfs"))
    t = med([x[0] for x in cold]); b = med([x[1] for x in cold]); q = med([x[2] for x in cold])
    f = med([x[3] for x in cold]); m = med([x[0] for x in mods])
    b3 = three[0][1] if three else float("nan")
    tf = med([x[0] for x in full]) if full else None
    ts = med([x[0] for x in sq]) if sq else None
    summ[n] = dict(t=t, b=b, c=c, b3=b3, tf=tf, q=q, tmin=min(x[0] for x in cold))
    rng = f"{min(x[0] for x in cold):.2f}-{max(x[0] for x in cold):.2f}"
    print(f"| {n} | {c / MB:.0f} | {first[0][0]:.1f} | {t:.2f} ({rng}) | {b / MB:.1f} | {100 * b / c:.2f} % | {f:.1f} | {q:.0f} | "
          f"{m:.2f} | {b3 / MB:.1f} | {b3 / b:.2f}x | " + (f"{tf:.1f} | {tf / t:.0f}x | {ts:.2f} |" if tf else "not run | | |"))
print()
big = names[-1]  # the last of BENCH_LAZY_SIZES: the "20 GB" one
ts = [summ[n]["t"] for n in names]
spread = max(ts) / min(ts) - 1
print(f"- A1: cold-node start of the {big} image {summ[big]['t']:.2f} s (asks <= 5 s): "
      f"{'met' if summ[big]['t'] <= 5 else 'NOT met'}; spread across {', '.join(names)}: "
      f"{100 * spread:.1f} % of medians (asks <= 10 %): {'met' if spread <= 0.10 else 'NOT met'}; "
      f"of the least times: {100 * (max(summ[n]['tmin'] for n in names) / min(summ[n]['tmin'] for n in names) - 1):.1f} %")
# paired: the rounds ran the sizes one after another, so the ratio of two
# sizes' times within a round sees the same load
rounds = {}
for r in rows:
    if r[0] == "cold":
        rounds.setdefault(r[1], []).append(int(r[3]) / 1000)
if len(names) > 1 and all(len(rounds.get(n, [])) == len(rounds[names[0]]) for n in names):
    pr = {n: med([b / a for a, b in zip(rounds[names[0]], rounds[n])]) for n in names[1:]}
    print(f"- A1, paired by round (median of the per-round ratios to {names[0]}): " +
          ", ".join(f"{n} {pr[n]:.3f}" for n in names[1:]) +
          f": {'within' if all(abs(v - 1) <= 0.10 for v in pr.values()) else 'NOT within'} 10 %")
for n in names:
    if summ[n]["tf"]:
        r = summ[n]["tf"] / summ[n]["t"]
        verdict = f"(asks >= 10x): {'met' if r >= 10 else 'NOT met'}" if n == "4G" else "(reported)"
        print(f"- A2, {n}: full import {summ[n]['tf']:.1f} s / lazy cold node {summ[n]['t']:.2f} s = {r:.0f}x {verdict}")
for n in names:
    p = summ[n]["b"] / summ[n]["c"]
    print(f"- A3, {n}: registry bytes through a cold start {summ[n]['b'] / MB:.1f} MB = {100 * p:.2f} % of "
          f"{summ[n]['c'] / MB:.0f} MB (asks <= 10 %): {'met' if p <= 0.10 else 'NOT met'}")
for n in names:
    r = summ[n]["b3"] / summ[n]["b"]
    print(f"- A5, {n}: 3 nodes cold {summ[n]['b3'] / MB:.1f} MB = {r:.2f}x one node's (asks <= 3x): "
          f"{'met' if r <= 3 else 'NOT met'}")
q = max(summ[n]["q"] for n in names)
print(f"- The delay not emulated: a cold start made at most {q:.0f} blob requests (median per size); "
      f"were each one after another on a new connection with a 1 ms delay each way (2 ms RTT), at most "
      f"~5 RTT each (connect, request, TCP slow start to the link's window): <= {10 * q / 1000:.2f} s more.")
for n in names:
    try:
        print(f"- srun said ({n}, a cold node): `{open(res.replace('results', 'said-' + n)).read().strip()}`")
    except OSError:
        pass
EOF
