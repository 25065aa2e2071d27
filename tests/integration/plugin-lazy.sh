#!/bin/bash
# Lazy image start under srun (issue 27; doc/lazy.md), the CI smoke version
# of tests/bench/lazy.sh: a real local Slurm cluster (tests/cluster/up, 3
# emulated nodes), a real registry on the cluster's bridge address, an
# image made here (busybox + a 64 MB random payload: mkimage.py lazy-smoke)
# started with image_mode=lazy, as the non-root test user:
#   - the first step indexes the image once (two steps x 3 nodes starting
#     at once: one index pass, all succeed), starts reading little of it,
#     and srun prints "fetched X of Y MB";
#   - what a task reads is the image's (sha256 of the payload);
#   - the registry stopped mid-run: a read of data not fetched gets EIO
#     within lazy_timeout with a message on srun's stderr, scancel ends a
#     step whose task waits for data in < 10 s, nothing is left in D state,
#     and no process of the user's (fetcher, FUSE server) on any node.
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT"

[ "$(id -u)" -eq 0 ] || { t_skip "lazy start under srun" "needs root to start the test cluster"; t_done; }
PLUGIN=$BUILD/plugin/spank_skiff.so
[ -f "$PLUGIN" ] || { t_fail "plugin built" "$PLUGIN missing (run make)"; t_done; }
for tool in docker-registry skopeo; do
  command -v $tool >/dev/null || { t_skip "lazy start under srun" "$tool is not installed (scripts/install-deps test)"; t_done; }
done

t_cluster 3 || t_done
U=$SKIFF_TEST_USER
T=$(mktemp -d /tmp/skiff-lazy-cluster.XXXXXX)
chmod 755 "$T"
cleanup() {
  [ -n "${REG_PID:-}" ] && kill -CONT "$REG_PID" 2>/dev/null
  registry_stop
  scancel -u "$U" 2>/dev/null
  rm -rf "$T"
  t_cluster_done
}
trap cleanup EXIT
W=$T/work
mkdir -p "$W"
chown "$U:" "$W"
as_user() { (cd "$W" && runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" "$@"); }

# ---- the image, in a registry the nodes reach ------------------------------------
"$T_ROOT/tests/integration/lib/mkimage.py" "$T/layout" lazy-smoke >/dev/null || { t_fail "build the image"; t_done; }
REG_ADDR=$SKIFF_CLUSTER_HOST_ADDR registry_start "$T/reg" || { t_fail "registry"; t_done; }
ref=docker://$SKIFF_CLUSTER_HOST_ADDR:$REG_PORT#lazy/smoke:1
skopeo copy -q --dest-tls-verify=false --format v2s2 "oci:$T/layout:lazy-smoke" \
  "docker://$SKIFF_CLUSTER_HOST_ADDR:$REG_PORT/lazy/smoke:1" >/dev/null || { t_fail "push the image"; t_done; }
want=$(python3 - "$T/layout" <<'EOF'
import gzip, hashlib, json, os, sys, tarfile
lay = sys.argv[1]
blob = lambda d: os.path.join(lay, "blobs", "sha256", d.split(":")[1])
idx = json.load(open(os.path.join(lay, "index.json")))
man = json.load(open(blob(idx["manifests"][0]["digest"])))
with tarfile.open(fileobj=gzip.open(blob(man["layers"][-1]["digest"]))) as t:
    print(hashlib.sha256(t.extractfile("payload/random").read()).hexdigest())
EOF
)
# the user's config: its own cache and data (nothing in the shared home)
mkdir -p "$T/u" && chown "$U:" "$T/u"
cat >"$T/lazy.conf" <<EOF
allow_http = yes
image_mode = lazy
cache_path = $T/u/cache
lazy_timeout = 5
EOF
chmod 644 "$T/lazy.conf"
echo "required $PLUGIN config=$T/lazy.conf" >"$SKIFF_PLUGSTACK"

# ---- two steps x 3 nodes, cold, at once: one index pass --------------------------
as_user srun -N3 -n3 --overlap --container-image="$ref" hostname >"$T/a.out" 2>"$T/a.err" &
a=$!
as_user srun -N3 -n3 --overlap --container-image="$ref" hostname >"$T/b.out" 2>"$T/b.err" &
b=$!
wait $a; ra=$?
wait $b; rb=$?
idx=$(cat "$T/a.err" "$T/b.err" | grep -c "skiff: importing $ref")
if [ $ra -eq 0 ] && [ $rb -eq 0 ] && [ "$(sort "$T/a.out" | tr '\n' ' ')" = "n1 n2 n3 " ] && [ "$idx" -eq 1 ]; then
  t_pass "two steps x 3 nodes start cold at once: one index pass, all succeed"
else t_fail "two steps x 3 nodes start cold at once: one index pass, all succeed" \
  "rc $ra/$rb, indexed $idx times: $(cat "$T/a.out" "$T/a.err" "$T/b.err" | head -c 800)"; fi
# one line per node and step (each node's own data file and counters), each
# <= 10 % of the image: three cold nodes fetch <= 3 x that (issue 27's A3, A5)
lines=$(grep -h "fetched .* of .* MB" "$T/a.err" "$T/b.err")
most=$(sed -n 's/.*fetched \([0-9.]*\) of \([0-9]*\) MB.*/\1 \2/p' <<<"$lines" |
  awk '{ if ($1 * 10 > $2) bad = 1; if ($1 > m) m = $1; y = $2; c++ }
       END { if (bad || c != 6 || y < 60) exit 1; printf "%d lines, at most %.1f of %d MB", c, m, y }')
if [ -n "$most" ]; then
  t_pass "srun says what a start fetched, <= 10 % on each node: '$(head -1 <<<"$lines" | sed 's/^.*skiff: //')'; $most"
else t_fail "srun says what a start fetched, <= 10 % on each node of both steps" "$lines $(head -c 600 "$T/a.err")"; fi

# ---- what a task reads is the image's ------------------------------------------------
got=$(as_user srun -Q -n1 -w n1 --container-image="$ref" sha256sum /payload/random 2>"$T/err" | cut -d' ' -f1)
[ -n "$want" ] && [ "$got" = "$want" ] && t_pass "a task reads the payload lazily: the image's bytes" \
  || t_fail "a task reads the payload lazily: the image's bytes" "got '$got' want '$want': $(head -c 500 "$T/err")"

# ---- the registry stopped mid-run ----------------------------------------------------
# the task starts, then waits (for $W/go) while the registry is stopped
waiting() {  # NAME: the task script of a step that reads the payload once told to
  echo "touch /w/$1.ready; while [ ! -e /w/$1.go ]; do sleep 0.1; done; cat /payload/random >/dev/null"
}
wait_for() { for _ in $(seq 600); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }
as_user srun -Q -n1 -w n2 --container-image="$ref" --container-mounts="$W:/w" sh -c "$(waiting eio)" \
  >/dev/null 2>"$T/eio.err" &
s1=$!
if wait_for "$W/eio.ready"; then
  kill -STOP "$REG_PID"
  t0=$(date +%s%N)
  touch "$W/eio.go"
  wait $s1
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  if [ $rc -ne 0 ] && [ "$ms" -lt 9000 ] && grep -q "skiff: lazy image: a read failed (EIO): " "$T/eio.err"; then
    t_pass "registry stopped mid-run: EIO within lazy_timeout, with a message on srun's stderr (${ms} ms)"
  else t_fail "registry stopped mid-run: EIO within lazy_timeout, with a message on srun's stderr" "rc $rc, ${ms} ms: $(head -c 600 "$T/eio.err")"; fi
  kill -CONT "$REG_PID"
else t_fail "registry stopped mid-run: the step started" "$(head -c 600 "$T/eio.err")"; kill $s1; fi

# scancel while a task waits for data (lazy_timeout far away)
sed -i 's/^lazy_timeout.*/lazy_timeout = 120/' "$T/lazy.conf"
job=$(as_user sbatch --parsable -N1 -w n3 -o /dev/null \
  --wrap "srun --container-image='$ref' --container-mounts='$W:/w' sh -c '$(waiting cancel)'" 2>"$T/job")
if wait_for "$W/cancel.ready"; then
  kill -STOP "$REG_PID"
  touch "$W/cancel.go"
  sleep 2 # the task is in its read, waiting for data
  t0=$(date +%s%N)
  scancel "$job"
  while squeue -h -j "$job" 2>/dev/null | grep -q .; do
    [ $((($(date +%s%N) - t0) / 1000000)) -gt 30000 ] && break
    sleep 0.1
  done
  ms=$((($(date +%s%N) - t0) / 1000000))
  dstate=$(ps -eo stat=,user=,comm= | awk -v u="$U" '$1 ~ /^D/ && $2 == u' | head -3)
  [ "$ms" -lt 10000 ] && t_pass "scancel ends a step whose task waits for data in ${ms} ms (< 10 s)" \
    || t_fail "scancel ends a step whose task waits for data in < 10 s" "$ms ms"
  [ -z "$dstate" ] && t_pass "nothing of the user's in D state" || t_fail "nothing of the user's in D state" "$dstate"
  kill -CONT "$REG_PID"
else t_fail "scancel: the step started" "job '$job': $(cat "$T/job")"; scancel "$job" 2>/dev/null; fi

# ---- nothing left on these nodes: no fetcher, FUSE server or holder ------------------
# (their mounts live in the holder's namespaces and go with it); other
# clusters may run jobs as the same user: this cluster's nodes only
left=""
for _ in $(seq 100); do
  left=$(t_cluster_procs)
  [ -z "$left" ] && break
  sleep 0.1
done
[ -z "$left" ] && t_pass "after EIO and scancel: no fetcher, FUSE server or holder of the user's left" \
  || t_fail "after EIO and scancel: no fetcher, FUSE server or holder of the user's left" "$left"

t_done
