#!/bin/bash
# Images at cluster scale (issue 26), the plugin's side on a real local
# Slurm cluster (tests/cluster/up): the import's time is not the step's.
# A registry slower than the step's timeout= still starts a two-node step
# (import_timeout bounds the import), the other node says it waits for the
# one that imports, srun shows the download's progress; a registry that
# stalls ends the step at import_timeout with an error that names it, and
# leaves no partial image and no temporary file behind.
# The registry: docker-registry behind tests/integration/lib/fakereg.py (the
# faults), both on the cluster's bridge address, which the nodes reach.
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT"

[ "$(id -u)" -eq 0 ] || { t_skip "plugin scale" "needs root to start the test cluster"; t_done; }
PLUGIN=$BUILD/plugin/spank_skiff.so
[ -f "$PLUGIN" ] || { t_fail "plugin built" "$PLUGIN missing (run make)"; t_done; }
for tool in docker-registry skopeo srun curl; do
  command -v "$tool" >/dev/null || { t_skip "plugin scale" "$tool is not installed (scripts/install-deps test)"; t_done; }
done

t_cluster 3 || t_done
U=$SKIFF_TEST_USER
T=$(mktemp -d /tmp/skiff-scale-plugin-test.XXXXXX)
chmod 755 "$T"
FAKEPID=""
unfake() { [ -n "$FAKEPID" ] && { kill "$FAKEPID" 2>/dev/null; wait "$FAKEPID" 2>/dev/null; }; FAKEPID=""; }
cleanup() {
  unfake
  registry_stop
  rm -rf "$T"
  t_cluster_done
}
trap cleanup EXIT

L=$T/layout
python3 "$T_ROOT/tests/integration/lib/mkimage.py" "$L" busybox-node >/dev/null 2>&1 || { t_fail "build the test image"; t_done; }
A=$SKIFF_CLUSTER_HOST_ADDR
REG_ADDR=$A registry_start "$T/reg" || { t_fail "start registry"; t_done; }
skopeo copy -q --dest-tls-verify=false --format oci "oci:$L:busybox" "docker://$A:$REG_PORT/sc/busybox:1" >/dev/null 2>"$T/err" ||
  { t_fail "push the test image" "$(cat "$T/err")"; t_done; }
FP=$(registry_free_port)
F=$A:$FP
REF="docker://$F#sc/busybox:1"
fake() {  # NAME ARGS...: fakereg.py in front of the registry, on $F
  : >"$T/fake-$1.log"
  local log=$T/fake-$1.log; shift
  /usr/bin/python3 "$T_ROOT/tests/integration/lib/fakereg.py" "$FP" "$log" --bind "$A" --upstream "$A:$REG_PORT" "$@" &
  FAKEPID=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://$F/v2/" && return 0; sleep 0.05; done
  return 1
}

# the user's cache and temporary files, shared by the nodes (as $HOME is)
C=$T/user
mkdir -p "$C/cache" "$C/tmp"; chown -R "$U:" "$C"
printf 'allow_http = yes\ncache_path = %s/cache\ntemp_path = %s/tmp\nstall_timeout = 60\n' "$C" "$C" >"$T/skiff.conf"
chmod 644 "$T/skiff.conf"
plugstack() { echo "required $PLUGIN config=$T/skiff.conf $*" >"$SKIFF_PLUGSTACK"; }
as_user() { runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" "$@"; }
# no image, no temporary file, and no blob that is not whole in the user's
# cache: an import killed at import_timeout may leave what it had verified
# (the manifest, kept by its digest for the next try), never part of a blob
nothing_left() {
  local f
  for f in $(find "$C/cache/blobs" -type f ! -name '*.lock' 2>/dev/null); do
    [ "$(sha256sum <"$f" | cut -d' ' -f1)" = "$(basename "$f")" ] || return 1
  done
  [ -z "$(find "$C/cache/images" -type f ! -name '*.lock' 2>/dev/null)" ] && [ -z "$(ls -A "$C/tmp")" ]
}

# ---- a registry slower than timeout=: import_timeout bounds the import --------------
# The image's biggest layer (about 1 MB) at 120 kB/s: an import of about 8 s.
fake slow --blob-rate 120000 || t_fail "start fakereg.py"
plugstack timeout=3 import_timeout=120
start=$(date +%s%N)
out=$(as_user srun -N2 -w n1,n2 --container-image="$REF" cat /etc/hostname 2>&1)
rc=$?
s=$(( ($(date +%s%N) - start) / 1000000000 ))
unfake
if [ $rc = 0 ] && [ "$s" -gt 3 ] && [ "$(grep -c "skiff: importing $REF" <<<"$out")" = 1 ] &&
   grep -Eq "skiff: imported $REF \([0-9]+ MB, [0-9.]+ s\)" <<<"$out"; then
  t_pass "a ${s} s import under timeout=3 import_timeout=120: the step starts on both nodes, one imports"
else t_fail "slow import" "rc=$rc ${s}s: $out"; fi
grep -q "skiff: waiting for the import of $REF by .*running for" <<<"$out" &&
  t_pass "the other node says whose import it waits for" || t_fail "waiting message" "$out"
grep -Eq "skiff: downloading [0-9.]+ [kMG]?B of [0-9.]+ [kMG]?B .*MB/s" <<<"$out" &&
  t_pass "srun shows the download's progress (bytes, rate)" || t_fail "download progress" "$out"
blobs=$(grep -c '"begin", "method": "GET", "path": "/v2/sc/busybox/blobs/' "$T/fake-slow.log")
layers=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(len(m["layers"]) + 1)' \
  "$L/blobs/sha256/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"].split(":")[1])' "$L/index.json")")
[ "$blobs" = "$layers" ] && t_pass "two nodes, one cache: each blob fetched once ($blobs GETs)" ||
  t_fail "blobs fetched once" "$blobs blob GETs for $layers blobs"

# ---- a registry that stalls: the step ends at import_timeout, nothing left -------------
rm -rf "$C/cache"/*
fake stall --blob-fault stall:30 || t_fail "start fakereg.py"
plugstack timeout=30 import_timeout=6
start=$(date +%s%N)
out=$(as_user srun -N1 -w n1 --container-image="$REF" true 2>&1)
rc=$?
s=$(( ($(date +%s%N) - start) / 1000000000 ))
if [ $rc != 0 ] && [ "$s" -lt 25 ] && grep -q "import did not end within import_timeout=6 s" <<<"$out"; then
  t_pass "a stalled import fails the step after import_timeout=6 (${s} s, not timeout=30), the error names it"
else t_fail "import_timeout" "rc=$rc ${s}s: $out"; fi
unfake
for _ in $(seq 50); do nothing_left && break; sleep 0.1; done
nothing_left && t_pass "after it: no image, no partial blob, no temporary file" || t_fail "left behind" "$(find "$C" -type f)"

t_done
