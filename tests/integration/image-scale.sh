#!/bin/bash
# Images at cluster scale (issue 26), the parts that need no Slurm: what
# the registry is asked (counted in the real registry's access log), the
# failures of real networks (a 429 storm, resets at 50 % and 90 % of a
# blob, a stall, a wrong digest, a registry down; fakereg.py in front of the
# real registry), parallel downloads, the cache's lifecycle (64 holders of
# one image at once, prune around them, cache_max_size, named containers),
# and the site's read-only store. The plugin's side (import_timeout, the
# waiting steps, progress in srun) is plugin-scale.sh.
set -u
source "$(dirname "$0")/../lib.sh"
SKIFF=$BUILD/bin/skiff
HOLDER=$BUILD/tests/image-holder
MKIMAGE=$T_ROOT/tests/integration/lib/mkimage.py

for tool in docker-registry skopeo unsquashfs curl setpriv; do
  command -v "$tool" >/dev/null || { t_skip "image-scale" "$tool is not installed (scripts/install-deps test)"; t_done; }
done
[ -x "$SKIFF" ] || { t_fail "skiff binary" "$SKIFF missing: run make"; t_done; }
t_program image-holder "64 holders of one image" || t_done

W=$(mktemp -d /tmp/skiff-scale-test.XXXXXX)
chmod 755 "$W"
FAKEPIDS=""
cleanup() {
  exec 9>&- 2>/dev/null
  [ -n "${HOLDERS:-}" ] && kill $HOLDERS 2>/dev/null
  [ -n "${LOCKER:-}" ] && kill "$LOCKER" 2>/dev/null
  local p; for p in $FAKEPIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  registry_stop
  rm -rf "$W"
}
trap cleanup EXIT

"$MKIMAGE" "$W/layout" busybox multilayer >/dev/null || { t_fail "build test images"; t_done; }
registry_start "$W/reg" || { t_fail "start registry"; t_done; }
R=127.0.0.1:$REG_PORT
push() { skopeo copy -q --dest-tls-verify=false "$@" >/dev/null; }
push --format oci oci:"$W/layout":busybox docker://$R/busybox:oci &&
push --format oci oci:"$W/layout":multilayer docker://$R/multilayer:1 || { t_fail "push test images"; t_done; }
BIG=$(curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$R/v2/busybox/manifests/oci" |
      python3 -c 'import json,sys; print(max(json.load(sys.stdin)["layers"], key=lambda l: l["size"])["digest"])')

# conf FILE KEY=VALUE...: a skiff.conf for one case
conf() { local f=$1; shift; printf '%s\n' "temp_path = $W/tmp" "data_path = $W/data" "$@" | tr -s ' ' >"$f"; }
mkdir -p "$W/tmp"
export SKIFF_CONFIG=$W/skiff.conf
conf "$SKIFF_CONFIG" "cache_path = $W/cache"

# The registry's access log: one line per request ("METHOD PATH" of skiff's).
mark() { wc -l <"$W/reg/log"; }
asked_since() { tail -n +$(($1 + 1)) "$W/reg/log" | grep '"skiff/' | awk '{print substr($6, 2), $7}'; }

# ---- 1. what the registry is asked ---------------------------------------------
m=$(mark)
t_check "cold resolve" "$SKIFF" resolve docker://$R#busybox:oci
a=$(asked_since "$m")
[ "$(grep -c '^HEAD /v2/busybox/manifests/oci$' <<<"$a")" = 1 ] && ! grep -q '^GET /v2/busybox/manifests/oci$' <<<"$a" &&
  [ "$(grep -c '^GET /v2/busybox/blobs/' <<<"$a")" = 2 ] \
  && t_pass "cold: the tag by HEAD, the manifest by digest, each blob once ($(wc -l <<<"$a") requests)" \
  || t_fail "cold requests" "$a"
m=$(mark)
t_check "warm resolve" "$SKIFF" resolve docker://$R#busybox:oci
a=$(asked_since "$m")
[ "$a" = "HEAD /v2/busybox/manifests/oci" ] && t_pass "warm, tag_ttl=0: one HEAD, nothing else" || t_fail "warm requests" "$a"
m=$(mark)
t_check "resolve within tag_ttl" env SKIFF_TAG_TTL=3600 "$SKIFF" resolve docker://$R#busybox:oci
a=$(asked_since "$m")
[ -z "$a" ] && t_pass "warm, within tag_ttl: no request at all" || t_fail "tag_ttl requests" "$a"

# a registry that sends no Docker-Content-Digest: the manifest is fetched instead
FAKEPORT=$(registry_free_port)
fake() {  # NAME ARGS...: fakereg.py in front of the registry, on $FAKEPORT
  local log=$W/fake-$1.log; shift
  : >"$log"
  /usr/bin/python3 "$T_ROOT/tests/integration/lib/fakereg.py" "$FAKEPORT" "$log" --upstream "$R" "$@" &
  FAKEPIDS="$FAKEPIDS $!"
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$FAKEPORT/v2/" && return 0; sleep 0.05; done
  return 1
}
unfake() { local p; for p in $FAKEPIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; FAKEPIDS=""; }
F=127.0.0.1:$FAKEPORT
fake nodigest --no-digest-header || t_fail "start fakereg.py"
conf "$W/nd.conf" "cache_path = $W/nd"
if SKIFF_CONFIG=$W/nd.conf "$SKIFF" resolve docker://$F#busybox:oci >/dev/null 2>"$W/err" &&
   grep -q '"begin", "method": "GET", "path": "/v2/busybox/manifests/oci"' "$W/fake-nodigest.log"; then
  t_pass "a registry without Docker-Content-Digest: HEAD, then the manifest by GET"
else t_fail "no digest header" "$(cat "$W/err"; cat "$W/fake-nodigest.log")"; fi
unfake
start=$(date +%s%N)
out=$(SKIFF_CONFIG=$W/nd.conf "$SKIFF" resolve docker://$F#busybox:oci 2>&1)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ -f "$out" ] && [ "$ms" -lt 5000 ] && t_pass "registry gone: the tag's last image, at once (${ms} ms)" \
  || t_fail "offline fallback" "$out (${ms} ms)"

# ---- 2. failures of real networks ------------------------------------------------
# each import into an empty cache, through fakereg.py with one fault
nothing_left() {  # the cache has no image, no blob, no temporary file; temp_path is empty
  [ -z "$(find "$1/images" "$1/blobs" -type f ! -name '*.lock' 2>/dev/null)" ] && [ -z "$(ls -A "$W/tmp")" ]
}
big_lines() { grep "\"$1\", \"method\": \"GET\", \"path\": \"/v2/busybox/blobs/$BIG\"" "$W/fake-$2.log"; }
blob_gets() { big_lines begin "$1" | wc -l; }
second_range() { big_lines begin "$1" | sed -n 2p | sed 's/.*"range": "\([^"]*\)".*/\1/'; }
faulty() {  # NAME FAULT [FAKEREG-ARGS...]: an import through a registry with that fault; sets OUT, RC
  local name=$1 f=$2; shift 2
  fake "$name" --blob-fault "$f" "$@" || t_fail "start fakereg.py ($f $*)"
  conf "$W/$name.conf" "cache_path = $W/c-$name" "stall_timeout = 2" "transfer_retries = ${RETRIES:-5}"
  OUT=$(SKIFF_CONFIG=$W/$name.conf "$SKIFF" import -o "$W/$name.sqsh" docker://$F#busybox:oci 2>&1); RC=$?
  unfake
}
faulty storm 429:4
[ $RC = 0 ] && [ "$(big_lines end storm | grep -c '"status": 429')" = 4 ] && unsquashfs -l "$W/storm.sqsh" >/dev/null 2>&1 \
  && t_pass "a 429 storm (4 in a row, Retry-After: 1) is waited out" || t_fail "429 storm" "$OUT"
for pct in 50 90; do
  faulty "reset$pct" "reset:$pct"
  r=$(second_range "reset$pct")
  [ $RC = 0 ] && [ "$(blob_gets "reset$pct")" = 2 ] && [[ "$r" =~ ^bytes=[1-9][0-9]*- ]] \
    && t_pass "a reset at $pct % of a blob: resumed with Range ($r), not started over" \
    || t_fail "reset at $pct %" "rc=$RC range='$r' $OUT"
done
faulty trunc trunc:60
r=$(second_range trunc)
[ $RC = 0 ] && [ "$(blob_gets trunc)" = 2 ] && [[ "$r" =~ ^bytes=[1-9][0-9]*- ]] \
  && t_pass "an answer that ends short of its length (clean close at 60 %): resumed ($r)" \
  || t_fail "truncated answer" "rc=$RC range='$r' $OUT"
RETRIES=0 faulty lastreset reset:50
[ $RC != 0 ] && grep -Eq "blobs/sha256:.*(remaining to read|reset)" <<<"$OUT" && [ ! -e "$W/lastreset.sqsh" ] && nothing_left "$W/c-lastreset" \
  && t_pass "a reset with no retry left (transfer_retries=0): a clear error, nothing partial" \
  || t_fail "reset, no retries" "rc=$RC $OUT"
# tokens that expire every 3 requests, one of them mid-blob (the resumed
# range after a reset is the 401's): each renewed at the realm, import whole
faulty expiry reset:50 --bearer "http://127.0.0.1:$FAKEPORT/token" --token-uses 3
tokens=$(grep -c '"begin", "method": "GET", "path": "/token' "$W/fake-expiry.log")
expired=$(grep -c '"status": 401' "$W/fake-expiry.log")
[ $RC = 0 ] && [ "$tokens" -ge 2 ] && [ "$expired" -ge 2 ] && unsquashfs -l "$W/expiry.sqsh" >/dev/null 2>&1 \
  && t_pass "bearer tokens that expire mid-pull: renewed ($tokens tokens, $expired answers 401), the image whole" \
  || t_fail "token expiry" "rc=$RC tokens=$tokens 401s=$expired $OUT"
faulty stall stall:40
r=$(second_range stall)
[ $RC = 0 ] && [[ "$r" =~ ^bytes=[1-9][0-9]*- ]] && t_pass "a registry that stalls: cut after stall_timeout, resumed ($r)" \
  || t_fail "stall" "rc=$RC range='$r' $OUT"
faulty flip flip
[ $RC != 0 ] && grep -q "digest mismatch" <<<"$OUT" && [ ! -e "$W/flip.sqsh" ] && nothing_left "$W/c-flip" \
  && t_pass "a wrong digest: a clear error, no image, no blob, nothing partial" || t_fail "wrong digest" "rc=$RC $OUT"
RETRIES=2 faulty gone 503
[ $RC != 0 ] && grep -q "HTTP 503.*gave up after 3 tries" <<<"$OUT" && nothing_left "$W/c-gone" \
  && t_pass "503 for ever: gives up after transfer_retries, says so, leaves nothing" || t_fail "503" "rc=$RC $OUT"

# layers download at once, up to max_connections
for n in 4 1; do
  fake "par$n" --blob-delay 0.5 || t_fail "start fakereg.py"
  conf "$W/par$n.conf" "cache_path = $W/c-par$n" "max_connections = $n"
  SKIFF_CONFIG=$W/par$n.conf "$SKIFF" import -o "$W/par$n.sqsh" docker://$F#multilayer:1 >/dev/null 2>&1
  unfake
  most=$(grep '"begin".*/blobs/' "$W/fake-par$n.log" | sed 's/.*"inflight": \([0-9]*\).*/\1/' | sort -n | tail -1)
  if [ "$n" = 4 ]; then [ "${most:-0}" -ge 2 ] && t_pass "max_connections=4: $most blobs downloading at once" \
                                                || t_fail "parallel downloads" "at most ${most:-0} at once"
  else [ "${most:-0}" = 1 ] && t_pass "max_connections=1: one at a time" || t_fail "max_connections=1" "$most at once"; fi
done

# ---- 3. the cache's lifecycle -----------------------------------------------------
"$SKIFF" resolve docker://$R#multilayer:1 >/dev/null
list=$("$SKIFF" cache list 2>&1)
grep -q "busybox:oci" <<<"$list" && grep -q "multilayer:1" <<<"$list" && grep -q "^2 image(s)" <<<"$(tail -1 <<<"$list")" \
  && t_pass "cache list: images, sizes, last use, their tags" || t_fail "cache list" "$list"

# holders: N image-holder processes on busybox, released together when fd 9 closes
holders() {  # N: starts them, waits until all hold; HOLD_S: the seconds it took
  rm -f "$W/release"; mkfifo "$W/release"; exec 9<>"$W/release"
  local i start=$(date +%s%N)
  HOLDERS=""
  for i in $(seq "$1"); do
    "$HOLDER" docker://$R#busybox:oci <"$W/release" >"$W/held.$i" 2>&1 9>&- &
    HOLDERS="$HOLDERS $!"
  done
  for _ in $(seq 1200); do
    [ "$(cat "$W"/held.* 2>/dev/null | grep -c '^held ')" -ge "$1" ] && break
    sleep 0.05
  done
  HOLD_S=$(awk -v ns=$(($(date +%s%N) - start)) 'BEGIN {printf "%.2f", ns / 1e9}')
}
release() { local p; exec 9>&-; for p in $HOLDERS; do wait "$p"; done; HOLDERS=""; rm -f "$W"/held.*; }
holders 4; t4=$HOLD_S; release
holders 64; t64=$HOLD_S
held=$(cat "$W"/held.* | grep -c '^held ')
[ "$held" = 64 ] && t_pass "64 holders of one cached image at once: none waits for another (64 in ${t64} s, 4 in ${t4} s)" \
  || t_fail "64 holders" "$held of 64 hold it after ${t64} s: $(cat "$W"/held.* | grep -v '^held' | head -3)"
out=$("$SKIFF" cache prune --all 2>&1)
bb=$(head -1 "$W/held.1" | cut -d' ' -f2)
[ -f "$bb" ] && ! grep -q "multilayer:1" <<<"$("$SKIFF" cache list)" && grep -q "kept 1 image(s) in use" <<<"$out" \
  && t_pass "prune --all during them: removes the image nobody holds, keeps the one 64 hold" || t_fail "prune while held" "$out"
release
"$SKIFF" resolve docker://$R#multilayer:1 >/dev/null
out=$("$SKIFF" cache prune --all --dry-run 2>&1)
grep -q "would remove 2 image(s)" <<<"$out" && [ "$("$SKIFF" cache list | tail -1 | cut -d' ' -f1)" = 2 ] \
  && t_pass "prune --dry-run says, removes nothing" || t_fail "dry run" "$out"
info=$(ls "$W"/cache/images/*.info | head -1)
touch -d '3 days ago' "$info"
out=$("$SKIFF" cache prune --older-than 2d 2>&1)
[ ! -e "$info" ] && grep -q "removed 1 image(s)" <<<"$out" && grep -q "unused for 3 d" <<<"$out" \
  && t_pass "prune --older-than 2d: the image unused for 3 days, and its blobs" || t_fail "older-than" "$out"
# a named container's image stays
img=$("$SKIFF" resolve docker://$R#multilayer:1)
"$SKIFF" create -n scale-named "$img" >/dev/null 2>&1
out=$("$SKIFF" cache prune --all 2>&1)
[ -f "$img" ] && grep -q "kept 1 image(s) in use" <<<"$out" && t_pass "prune keeps a named container's image" \
  || t_fail "named container's image" "$out"
"$SKIFF" remove scale-named >/dev/null 2>&1
# cache_max_size: after an import, least recently used first; the new one stays
conf "$W/max.conf" "cache_path = $W/c-max" "cache_max_size = 1K"
a=$(SKIFF_CONFIG=$W/max.conf "$SKIFF" resolve docker://$R#busybox:oci)
b=$(SKIFF_CONFIG=$W/max.conf "$SKIFF" resolve docker://$R#multilayer:1)
[ ! -e "$a" ] && [ -f "$b" ] && [ -z "$(ls -A "$W/c-max/blobs/sha256")" ] \
  && t_pass "cache_max_size: the import prunes the least recently used image and the blobs, keeps its own" \
  || t_fail "cache_max_size" "$(ls "$W/c-max/images" "$W/c-max/blobs/sha256")"
t_fails_with "prune --max-size needs a size" "give a size such as" "$SKIFF" cache prune --max-size lots

# ---- 4. the site's store ---------------------------------------------------------
export SKIFF_CONFIG=$W/site.conf
conf "$SKIFF_CONFIG" "cache_path = $W/admin-cache" "system_cache_path = $W/store"
sys=$("$SKIFF" import --system docker://$R#multilayer:1 2>/dev/null)
[ -f "$sys" ] && [ "$(stat -c %a "$sys")" = 644 ] && [ "$(stat -c %a "$W/store/images")" = 755 ] \
  && t_pass "skiff import --system: into the store, readable by all, writable by its owner" || t_fail "import --system" "$sys"
U=$W/user; mkdir -p "$U/tmp"
printf 'cache_path = %s/cache\ntemp_path = %s/tmp\nsystem_cache_path = %s\n' "$U" "$U" "$W/store" >"$U/skiff.conf"
chown -R 65534:65534 "$U"
as_user() { SKIFF_CONFIG=$U/skiff.conf setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
m=$(mark)
got=$(as_user "$SKIFF" resolve docker://$R#multilayer:1 2>&1)
a=$(asked_since "$m")
[ "$got" = "$sys" ] && [ "$a" = "HEAD /v2/multilayer/manifests/1" ] && [ -z "$(ls -A "$U/cache/images" 2>/dev/null)" ] \
  && t_pass "a user's resolve starts from the store: one HEAD, no import" || t_fail "store used" "$got / $a"
m=$(mark)
got=$(as_user env SKIFF_TAG_TTL=600 "$SKIFF" resolve docker://$R#multilayer:1 2>&1)
[ "$got" = "$sys" ] && [ -z "$(asked_since "$m")" ] && t_pass "within tag_ttl the store's own record answers: no request" \
  || t_fail "store tag_ttl" "$got"
t_fails_with "a user cannot fill the store" "only the store's owner fills it" as_user "$SKIFF" import --system docker://$R#busybox:oci
chown 65534 "$sys"
t_fails_with "a foreign file in the store is refused" "not to the store's owner.*foreign file; refused" \
  as_user "$SKIFF" resolve docker://$R#multilayer:1
chown 0 "$sys"; chmod 644 "$sys"
cp "$sys" "$W/sys.bak"; truncate -s 200000 "$sys"
t_fails_with "a store image cut short is refused" "cut short.*refused" as_user "$SKIFF" resolve docker://$R#multilayer:1
cp "$W/sys.bak" "$sys"; chmod 644 "$sys"
chmod 775 "$W/store/images"
t_fails_with "a store others may write to is refused" "writable by others than its owner.*chmod go-w" \
  as_user "$SKIFF" resolve docker://$R#multilayer:1
chmod 755 "$W/store/images"
t_check "the store, repaired, serves again" as_user "$SKIFF" resolve docker://$R#multilayer:1
# its tag records are checked as its images are (issue 38)
tag=$(ls "$W"/store/tags/* | head -1)
chown 65534 "$tag"
t_fails_with "a tag record in the store that is another user's is refused" "tags/.* belongs to uid 65534, not to the store's owner" \
  as_user "$SKIFF" resolve docker://$R#multilayer:1
chown 0 "$tag"; chmod 664 "$tag"
t_fails_with "a tag record in the store others may write to is refused" "tags/.* is writable by others than its owner" \
  as_user "$SKIFF" resolve docker://$R#multilayer:1
chmod 644 "$tag"
# nobody locks the store's images: another user's exclusive flock on one
# (flock(2) allows it on a read-only fd) holds back neither a reader nor
# the store's owner (issue 38)
: >"$W/lock.held"; chmod 666 "$W/lock.held"
setpriv --reuid=65533 --regid=65533 --clear-groups \
  bash -c 'exec 8<"$1" && flock -x 8 && echo held >"$2" && exec sleep 100000' _ "$sys" "$W/lock.held" &
LOCKER=$!
if t_wait "another user's exclusive lock on $sys (or its end)" 20 bash -c "test -s '$W/lock.held' || ! kill -0 $LOCKER" &&
   test -s "$W/lock.held"; then
  t_check "a user's resolve from the store while another user locks the image" as_user timeout 60 "$SKIFF" resolve docker://$R#multilayer:1
  t_check "the owner's import --system of the locked image" timeout 60 "$SKIFF" import --system docker://$R#multilayer:1
  out=$(timeout 60 "$SKIFF" cache list --system 2>&1)
  [ "$(awk '/multilayer:1/ { print $5 }' <<<"$out")" = no ] &&
    t_pass "the store's listing: another user's lock does not make an image in use" || t_fail "store listing" "$out"
  out=$(timeout 60 "$SKIFF" cache prune --system --all 2>&1)
  [ ! -e "$sys" ] && grep -q "removed 1 image(s)" <<<"$out" && t_pass "the owner's prune removes the locked image" ||
    t_fail "prune of a locked store image" "$out"
else t_fail "another user's lock" "not taken"; fi
kill "$LOCKER" 2>/dev/null; wait "$LOCKER" 2>/dev/null

t_done
