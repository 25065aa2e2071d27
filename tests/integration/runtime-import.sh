#!/bin/bash
# skiff import against a real registry (Debian docker-registry on 127.0.0.1)
# and every archive/layout source, plus hostile and broken inputs: each must
# fail with a clear error and leave nothing at the output, in the cache or in
# temp_path. Test images are built offline (tests/integration/lib/mkimage.py)
# and pushed with skopeo as Docker v2s2 and as OCI.
set -u
source "$(dirname "$0")/../lib.sh"
SKIFF=$BUILD/bin/skiff
MKIMAGE=$T_ROOT/tests/integration/lib/mkimage.py

for tool in docker-registry skopeo unsquashfs mksquashfs zstd curl; do
  if ! command -v "$tool" >/dev/null; then
    t_skip "runtime-import" "$tool is not installed (scripts/install-deps test)"; t_done
  fi
done
[ -x "$SKIFF" ] || { t_fail "skiff binary" "$SKIFF missing: run make"; t_done; }

W=$(mktemp -d /tmp/skiff-import-test.XXXXXX)
cleanup() {
  registry_stop; [ -n "${TOKPID:-}" ] && kill "$TOKPID" 2>/dev/null
  fake_stop
  rm -rf "$W" /tmp/skiff-evil-target
}
trap cleanup EXIT
export SKIFF_CONFIG=$W/skiff.conf
cat >"$SKIFF_CONFIG" <<EOF2
cache_path = $W/cache
temp_path = $W/tmp
credentials_file = $W/credentials
enroot_config_path = $W/enroot
EOF2
mkdir -p "$W/tmp" "$W/out"
cd "$W/out" || exit 1

"$MKIMAGE" "$W/layout" busybox multilayer zstd multi evil-dotdot evil-symlink evil-hardlink truncated baddigest \
  multimember badcrc \
  || { t_fail "build test images"; t_done; }
registry_start "$W/reg" || { t_fail "start registry"; t_done; }
R=127.0.0.1:$REG_PORT
push() { skopeo copy -q --dest-tls-verify=false "$@" >/dev/null; }
push --format v2s2 oci:"$W/layout":busybox docker://$R/busybox:v2s2 &&
push --format oci oci:"$W/layout":busybox docker://$R/busybox:oci &&
push --format oci oci:"$W/layout":zstd docker://$R/busybox:zstd &&
push --format oci oci:"$W/layout":multilayer docker://$R/multilayer:1 &&
push --all --format v2s2 oci:"$W/layout":multi docker://$R/multi:v2s2 &&
push --all --format oci oci:"$W/layout":multi docker://$R/multi:oci &&
push --format oci oci:"$W/layout":evil-dotdot docker://$R/evil:dotdot &&
push --format oci oci:"$W/layout":truncated docker://$R/broken:truncated \
  || { t_fail "push test images with skopeo"; t_done; }

# ---- helpers ---------------------------------------------------------------
FAKEPIDS=""
fake_start() {  # NAME PORT ARGS...: tests/integration/lib/fakereg.py, logging to $W/fake-NAME.log
  local log=$W/fake-$1.log port=$2; shift 2
  /usr/bin/python3 "$T_ROOT/tests/integration/lib/fakereg.py" "$port" "$log" "$@" &
  FAKEPIDS="$FAKEPIDS $!"
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && { : >"$log"; return 0; }
    sleep 0.05
  done
  return 1
}
fake_stop() { local p; for p in $FAKEPIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; FAKEPIDS=""; }
b64() { printf %s "$1" | base64 -w0; }
cat_in() { unsquashfs -cat "$1" "$2" 2>/dev/null; }
has() { unsquashfs -l "$1" 2>/dev/null | grep -qx "squashfs-root/$2"; }
json_get() { /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
nothing_left() {  # nothing at $1, no temp files beside it, temp_path empty, no partial blobs
  [ ! -e "$1" ] && [ -z "$(ls -A "$W/tmp")" ] && ! ls -a "$W/out" | grep -q '\.tmp\.' &&
    ! find "$W/cache" -name '*.tmp*' 2>/dev/null | grep -q .
}
expect_fail() {  # NAME PATTERN URI...: fails, says PATTERN, leaves nothing
  local name=$1 pat=$2; shift 2
  t_fails_with "$name" "$pat" "$SKIFF" import -o "$W/out/fail.sqsh" "$@"
  nothing_left "$W/out/fail.sqsh" && t_pass "$name: nothing left behind" || t_fail "$name: nothing left behind" "$(ls -A "$W/tmp"; ls -a "$W/out" | grep "\.tmp\."; find "$W/cache" -name "*.tmp*")"
}
check_busybox() {  # NAME FILE
  local f=$2
  has "$f" bin/busybox && has "$f" bin/sh && t_pass "$1: rootfs" || t_fail "$1: rootfs"
  [ "$(cat_in "$f" .skiff/config.json | json_get WorkingDir)" = /work ] && t_pass "$1: /.skiff/config.json" \
    || t_fail "$1: /.skiff/config.json" "$(cat_in "$f" .skiff/config.json)"
  cat_in "$f" .skiff/environment | grep -qx 'SKIFF_TEST=hello world' && t_pass "$1: /.skiff/environment" \
    || t_fail "$1: /.skiff/environment"
}

# ---- registry: v2s2, OCI, zstd, default name --------------------------------
ctype() { curl -s -o /dev/null -w '%{content_type}' -H "Accept: $2" "http://$R/v2/$1"; }
[ "$(ctype busybox/manifests/v2s2 application/vnd.docker.distribution.manifest.v2+json)" = application/vnd.docker.distribution.manifest.v2+json ] \
  && t_pass "registry serves busybox:v2s2 as Docker v2 schema 2" || t_fail "registry serves busybox:v2s2 as Docker v2 schema 2"

t_check "import v2s2 with the default name" "$SKIFF" import docker://$R#busybox:v2s2
[ -f busybox+v2s2.sqsh ] && t_pass "default name busybox+v2s2.sqsh" || t_fail "default name busybox+v2s2.sqsh" "$(ls)"
check_busybox v2s2 busybox+v2s2.sqsh
unsquashfs -lls busybox+v2s2.sqsh | grep -E 'usr/bin/s[ug]id-tool' | grep -q '^-rwxr-xr-x ' \
  && ! unsquashfs -lls busybox+v2s2.sqsh | grep -E 'usr/bin/s[ug]id-tool' | grep -qE '^-..[sS]|^-.....[sS]' \
  && t_pass "setuid/setgid bits stripped" || t_fail "setuid/setgid bits stripped" "$(unsquashfs -lls busybox+v2s2.sqsh | grep tool)"
! has busybox+v2s2.sqsh dev/null && has busybox+v2s2.sqsh dev/fifo && t_pass "device node skipped, fifo kept" \
  || t_fail "device node skipped, fifo kept"
[ "$(unsquashfs -lls busybox+v2s2.sqsh | awk '$NF=="squashfs-root/usr/bin/hard-busybox"{print $3}')" = \
  "$(unsquashfs -lls busybox+v2s2.sqsh | awk '$NF=="squashfs-root/bin/busybox"{print $3}')" ] \
  && t_pass "hardlink kept" || t_fail "hardlink kept"
t_fails_with "existing output refused without -f" "exists \(use -f" "$SKIFF" import docker://$R#busybox:v2s2
t_check "-f replaces the output" "$SKIFF" import -f docker://$R#busybox:v2s2

t_check "import OCI manifest" "$SKIFF" import -o oci.sqsh docker://$R/busybox:oci
check_busybox oci oci.sqsh
t_check "import zstd layers" "$SKIFF" import -o zstd.sqsh docker://$R#busybox:zstd
check_busybox zstd zstd.sqsh
ls "$W/cache/blobs/sha256/" | grep -qE '^[0-9a-f]{64}$' && t_pass "layer cache keyed by digest" || t_fail "layer cache keyed by digest"

# ---- manifest lists / OCI indexes ---------------------------------------------
for fmt in v2s2 oci; do
  "$SKIFF" import -o multi-$fmt.sqsh docker://$R#multi:$fmt >/dev/null 2>&1
  [ "$(cat_in multi-$fmt.sqsh arch)" = amd64 ] && t_pass "$fmt index: picks linux/amd64" || t_fail "$fmt index: picks linux/amd64"
  "$SKIFF" import -a arm64 -o multi-$fmt-arm.sqsh docker://$R#multi:$fmt >/dev/null 2>&1
  [ "$(cat_in multi-$fmt-arm.sqsh arch)" = arm64 ] && t_pass "$fmt index: -a arm64" || t_fail "$fmt index: -a arm64"
done
expect_fail "index without the platform" "no linux/s390x image.*linux/amd64, linux/arm64" -a s390x docker://$R#multi:oci

# ---- whiteouts, opaque dirs, hardlinks across layers ------------------------------
t_check "import a gzip layer of two members" "$SKIFF" import -o mm.sqsh "oci:$W/layout:multimember"
[ "$(cat_in mm.sqsh /two-members)" = yes ] && has mm.sqsh bin/busybox && t_pass "both gzip members applied" \
  || t_fail "both gzip members applied" "$(unsquashfs -l mm.sqsh 2>&1 | tail -3)"
t_check "import multi-layer image" "$SKIFF" import -o ml.sqsh docker://$R#multilayer:1
ok=1
for p in a/y a/z o/new r/file/inner hl abs-link rel-link; do has ml.sqsh "$p" || { ok=0; echo "missing $p"; }; done
for p in a/x o/old o/sub del; do has ml.sqsh "$p" && { ok=0; echo "present $p"; }; done
[ "$(cat_in ml.sqsh a/y)" = "y from layer 3" ] || { ok=0; echo "a/y wrong"; }
[ "$(cat_in ml.sqsh hl)" = "y from layer 1" ] || { ok=0; echo "hl wrong"; }
unsquashfs -lls ml.sqsh | grep -q 'abs-link -> /a/y' || { ok=0; echo "abs-link"; }
[ $ok = 1 ] && t_pass "whiteouts, opaque dir, dir replacing a file, hardlink, symlinks" || t_fail "whiteouts, opaque dir, dir replacing a file, hardlink, symlinks"

# ---- archive and layout sources ---------------------------------------------------
skopeo copy -q oci:"$W/layout":busybox docker-archive:"$W/da.tar":busybox:latest >/dev/null &&
skopeo copy -q oci:"$W/layout":busybox oci-archive:"$W/oa.tar":busybox >/dev/null &&
skopeo copy -q oci:"$W/layout":busybox dir:"$W/dirimg" >/dev/null || t_fail "skopeo copy to archives"
for src in "docker-archive:$W/da.tar" "oci-archive:$W/oa.tar:busybox" "oci:$W/layout:busybox" "dir:$W/dirimg"; do
  n=${src%%:*}
  t_check "import $n" "$SKIFF" import -o src-$n.sqsh "$src"
  check_busybox "$n" src-$n.sqsh
done
# a plain root filesystem directory (what a build script or debootstrap leaves)
mkdir -p "$W/plainroot/bin" "$W/plainroot/.skiff" && cp "$(command -v busybox)" "$W/plainroot/bin/busybox" &&
  echo '{"Env":["PLAIN=1"]}' >"$W/plainroot/.skiff/config.json"
t_check "import a plain directory" "$SKIFF" import -o plain.sqsh "dir:$W/plainroot"
has plain.sqsh bin/busybox && [ "$(cat_in plain.sqsh .skiff/config.json)" = '{"Env":["PLAIN=1"]}' ] &&
  t_pass "plain directory: tree and image config kept" || t_fail "plain directory: tree and image config kept"
expect_fail "dir: of a missing path" "not a directory" "dir:$W/nope"
[ -f da.sqsh ] || "$SKIFF" import "docker-archive:$W/da.tar" >/dev/null 2>&1
[ -f da.sqsh ] && t_pass "archive default name da.sqsh" || t_fail "archive default name da.sqsh" "$(ls)"
expect_fail "oci layout: unknown tag" "no image tagged 'nope'" "oci:$W/layout:nope"
expect_fail "oci layout with many images needs a tag" "name one with oci:" "oci:$W/layout"

# ---- as an unprivileged user (what the plugin does for a job) ------------------
if command -v setpriv >/dev/null; then
  U=$W/user; mkdir -p "$U/out" "$U/tmp"; chmod 755 "$W"; chmod -R a+rX "$W/layout"
  printf 'cache_path = %s/cache\ntemp_path = %s/tmp\ncredentials_file = %s/creds\n' "$U" "$U" "$U" >"$U/skiff.conf"
  chown -R 65534:65534 "$U"
  as_nobody() { (cd "$U/out" && SKIFF_CONFIG=$U/skiff.conf setpriv --reuid=65534 --regid=65534 --clear-groups "$@"); }
  t_check "import as an unprivileged user" as_nobody "$SKIFF" import -o ml.sqsh docker://$R#multilayer:1
  [ "$(unsquashfs -lls "$U/out/ml.sqsh" 2>/dev/null | awk '{print $2}' | sort -u)" = root/root ] \
    && t_pass "unprivileged import: files owned by root in the image" || t_fail "unprivileged import: files owned by root in the image"
  t_check "resolve as an unprivileged user" as_nobody "$SKIFF" resolve "oci:$W/layout:busybox"
else
  t_skip "import as an unprivileged user" "setpriv (util-linux) missing"
fi

# ---- hostile and broken inputs --------------------------------------------------
expect_fail "layer entry with ../" "'\.\./escape' has a '\.\.' component" "oci:$W/layout:evil-dotdot"
rm -rf /tmp/skiff-evil-target; mkdir /tmp/skiff-evil-target
expect_fail "file written through an absolute symlink" "written through a symlink" "oci:$W/layout:evil-symlink"
[ -z "$(ls -A /tmp/skiff-evil-target)" ] && t_pass "nothing written outside through the symlink" || t_fail "nothing written outside through the symlink"
expect_fail "hardlink to a path outside" "hardlink 'pw'.*'\.\.' component" "oci:$W/layout:evil-hardlink"
expect_fail "wrong layer digest" "digest mismatch" "oci:$W/layout:baddigest"
expect_fail "truncated layer (oci layout)" "truncated" "oci:$W/layout:truncated"
expect_fail "truncated layer (registry)" "truncated" docker://$R#broken:truncated
expect_fail "gzip layer with a wrong CRC" "corrupt gzip data" "oci:$W/layout:badcrc"
expect_fail "hostile layer from the registry" "'\.\./escape'" docker://$R#evil:dotdot
n=$(find "$W/cache/blobs" -type f | wc -l)
"$SKIFF" import -o "$W/out/x.sqsh" docker://$R#evil:dotdot >/dev/null 2>&1
[ "$(find "$W/cache/blobs" -type f | wc -l)" = "$n" ] && t_pass "refused image leaves no blobs in the cache" || t_fail "refused image leaves no blobs in the cache"
# A docker-archive whose layer is a symlink to a tar on the host: resolved
# inside the unpacked archive (RESOLVE_IN_ROOT), so the host file is not read.
/usr/bin/python3 - "$W" <<'EOP'
import io, json, sys, tarfile
w = sys.argv[1]
host = w + "/host-layer.tar"
with tarfile.open(host, "w") as t:
    ti = tarfile.TarInfo("host-secret"); data = b"read from the host\n"; ti.size = len(data)
    t.addfile(ti, io.BytesIO(data))
with tarfile.open(w + "/evil-archive.tar", "w") as t:
    def add(name, data):
        ti = tarfile.TarInfo(name); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
    add("config.json", json.dumps({"config": {}, "rootfs": {"type": "layers", "diff_ids": []}}).encode())
    add("manifest.json", json.dumps([{"Config": "config.json", "RepoTags": ["x:1"], "Layers": ["l/layer.tar"]}]).encode())
    ti = tarfile.TarInfo("l/layer.tar"); ti.type = tarfile.SYMTYPE; ti.linkname = host; t.addfile(ti)
EOP
expect_fail "docker-archive layer symlinked to a host file" "l/layer.tar: No such file" "docker-archive:$W/evil-archive.tar"

# A cached blob that went bad is refused, dropped from the cache, and fetched
# again by the next import.
blob=$(ls -S "$W/cache/blobs/sha256/" | head -1)
printf 'garbage' >>"$W/cache/blobs/sha256/$blob"
t_fails_with "corrupt cached layer is refused" "digest mismatch.*removed the bad blob" "$SKIFF" import -f -o "$W/out/zstd.sqsh" docker://$R#busybox:zstd
[ ! -e "$W/cache/blobs/sha256/$blob" ] && t_pass "corrupt cached layer removed" || t_fail "corrupt cached layer removed"
t_check "next import downloads it again" "$SKIFF" import -f -o "$W/out/zstd.sqsh" docker://$R#busybox:zstd

expect_fail "manifest 404" "not found on 127\.0\.0\.1:$REG_PORT \(HTTP 404" docker://$R#nope:1
DEAD=$(registry_free_port)
start=$(date +%s%N)
expect_fail "registry down" "Connection refused|Couldn't connect" docker://127.0.0.1:$DEAD#busybox:v2s2
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$ms" -lt 10000 ] && t_pass "registry down fails fast (${ms} ms; connect_timeout is 30 s)" || t_fail "registry down fails fast" "${ms} ms"
expect_fail "bad reference" "bad tag" docker://$R#busybox:
expect_fail "unknown scheme" "unknown image source" http://example.com/x

# ---- default registry and mirror ---------------------------------------------
t_check "default_registry from the config" env SKIFF_DEFAULT_REGISTRY=$R "$SKIFF" import -o dr.sqsh docker://busybox:v2s2
t_check "registry_mirror serves a dead registry's image" env SKIFF_REGISTRY_MIRROR=$R "$SKIFF" import -o mirror.sqsh docker://127.0.0.1:$DEAD#busybox:v2s2
check_busybox mirror mirror.sqsh

# ---- credentials and tokens stay with the host they were meant for -----------
# Fake mirrors, registries, token realms and blob stores (fakereg.py) record
# the Authorization header of every request; the image itself comes from the
# real registry behind them. Each import uses an empty cache so that every
# blob is fetched.
SEC_OK=1
PA=$(registry_free_port); fake_start mirror "$PA" --bearer "http://127.0.0.1:$PA/token" --token tok-from-mirror || SEC_OK=0
PB=$(registry_free_port); fake_start reg "$PB" --upstream "$R" || SEC_OK=0
PD=$(registry_free_port); fake_start realm-elsewhere "$PD" --bearer "http://localhost:$PD/token" --token tok-d --upstream "$R" || SEC_OK=0
PS=$(registry_free_port); fake_start store "$PS" --upstream "$R" || SEC_OK=0
PC=$(registry_free_port)
fake_start redirecting "$PC" --bearer "http://127.0.0.1:$PC/token" --token tok-c --upstream "$R" --redirect-blobs "http://localhost:$PS" || SEC_OK=0
PE=$(registry_free_port); fake_start big-manifest "$PE" --big-manifest $((5 << 20)) || SEC_OK=0
PF=$(registry_free_port); fake_start big-token "$PF" --bearer "http://127.0.0.1:$PF/token" --big-token $((2 << 20)) || SEC_OK=0
PG=$(registry_free_port); fake_start flaky-once "$PG" --upstream "$R" --fail-blobs 1 || SEC_OK=0
PH=$(registry_free_port); fake_start flaky-twice "$PH" --upstream "$R" --fail-blobs 2 || SEC_OK=0
if [ $SEC_OK = 1 ]; then
  flog() { cat "$W/fake-$1.log"; }
  # (a) the mirror asks for a bearer token at its own realm; the credentials
  # file has an entry only for the image's registry.
  printf 'machine 127.0.0.1:%s login alice password s3cret-reg\n' "$PB" >"$W/credentials"
  t_check "mirror with a token realm in front of a registry with credentials" \
    env SKIFF_REGISTRY_MIRROR=127.0.0.1:$PA SKIFF_CACHE_PATH=$W/cache-a "$SKIFF" import -o scoped.sqsh docker://127.0.0.1:$PB#busybox:v2s2
  check_busybox "mirror in front" scoped.sqsh
  grep -q '"path": "/token?' "$W/fake-mirror.log" && t_pass "the mirror's realm was asked for a token" \
    || t_fail "the mirror's realm was asked for a token" "$(flog mirror)"
  ! grep -q "Basic\|$(b64 alice:s3cret-reg)" "$W/fake-mirror.log" \
    && t_pass "mirror and its realm got no credentials of the image's registry" \
    || t_fail "mirror and its realm got no credentials of the image's registry" "$(flog mirror)"
  # (b) a token issued by the mirror's realm is never sent to the registry
  grep -q '/v2/busybox/blobs/' "$W/fake-reg.log" && ! grep -q 'tok-from-mirror\|Bearer' "$W/fake-reg.log" \
    && t_pass "the mirror's bearer token was not sent to the registry" \
    || t_fail "the mirror's bearer token was not sent to the registry" "$(flog reg)"
  # the mirror's own entry goes to the mirror's realm, and only that
  printf 'machine 127.0.0.1:%s login alice password s3cret-reg\nmachine 127.0.0.1:%s login mirror-user password mirror-pw\n' \
    "$PB" "$PA" >"$W/credentials"
  : >"$W/fake-mirror.log"; : >"$W/fake-reg.log"
  t_check "mirror with its own entry in the credentials file" \
    env SKIFF_REGISTRY_MIRROR=127.0.0.1:$PA SKIFF_CACHE_PATH=$W/cache-a2 "$SKIFF" import -f -o scoped.sqsh docker://127.0.0.1:$PB#busybox:v2s2
  grep '"path": "/token?' "$W/fake-mirror.log" | grep -q "Basic $(b64 mirror-user:mirror-pw)" &&
    ! grep -q "$(b64 alice:s3cret-reg)" "$W/fake-mirror.log" && ! grep -q 'tok-from-mirror' "$W/fake-reg.log" \
    && t_pass "the mirror's realm gets the mirror's entry, the registry's stays home" \
    || t_fail "the mirror's realm gets the mirror's entry, the registry's stays home" "$(flog mirror; flog reg)"
  # 3. a registry naming a token realm on another host (localhost, not
  # 127.0.0.1) does not get its password sent there ...
  printf 'machine 127.0.0.1:%s login alice password s3cret-reg\n' "$PD" >"$W/credentials"
  t_check "registry with a token realm on another host" \
    env SKIFF_CACHE_PATH=$W/cache-d "$SKIFF" import -o elsewhere.sqsh docker://127.0.0.1:$PD#busybox:oci
  grep -q '"path": "/token?' "$W/fake-realm-elsewhere.log" && ! grep -q "Basic" "$W/fake-realm-elsewhere.log" \
    && t_pass "a realm on another host gets no password of the registry" \
    || t_fail "a realm on another host gets no password of the registry" "$(flog realm-elsewhere)"
  # ... unless the credentials file has an entry for the realm's host: that one
  printf 'machine 127.0.0.1:%s login alice password s3cret-reg\nmachine localhost login realm-user password realm-pw\n' "$PD" >"$W/credentials"
  : >"$W/fake-realm-elsewhere.log"
  t_check "realm on another host with its own entry" \
    env SKIFF_CACHE_PATH=$W/cache-d2 "$SKIFF" import -f -o elsewhere.sqsh docker://127.0.0.1:$PD#busybox:oci
  grep '"path": "/token?' "$W/fake-realm-elsewhere.log" | grep -q "Basic $(b64 realm-user:realm-pw)" &&
    ! grep -q "$(b64 alice:s3cret-reg)" "$W/fake-realm-elsewhere.log" \
    && t_pass "a realm on another host gets its own entry only" \
    || t_fail "a realm on another host gets its own entry only" "$(flog realm-elsewhere)"
  # a realm on the registry's host gets the registry's entry
  printf 'machine 127.0.0.1:%s login alice password s3cret-reg\n' "$PC" >"$W/credentials"
  # blobs redirected to a storage host (localhost): downloaded without credentials
  t_check "blobs redirected to another host" \
    env SKIFF_ALLOW_HTTP=yes SKIFF_CACHE_PATH=$W/cache-c "$SKIFF" import -o redirect.sqsh docker://127.0.0.1:$PC#busybox:oci
  check_busybox redirect redirect.sqsh
  grep '"path": "/token?' "$W/fake-redirecting.log" | grep -q "Basic $(b64 alice:s3cret-reg)" \
    && t_pass "a realm on the registry's host gets the registry's entry" \
    || t_fail "a realm on the registry's host gets the registry's entry" "$(flog redirecting)"
  grep '/blobs/' "$W/fake-redirecting.log" | grep -q 'Bearer tok-c' && grep -q '/blobs/' "$W/fake-store.log" &&
    ! grep -q '"auth": "[^"]' "$W/fake-store.log" \
    && t_pass "no Authorization follows a redirect to another host" \
    || t_fail "no Authorization follows a redirect to another host" "$(flog redirecting; flog store)"
  # (c) answers over the caps
  : >"$W/credentials"
  expect_fail "manifest over 4 MiB" "GET http://127\.0\.0\.1:$PE/v2/big/manifests/1: the answer is larger than 4 MiB, the limit for a manifest; refused" \
    docker://127.0.0.1:$PE#big:1
  expect_fail "token answer over 1 MiB" "GET http://127\.0\.0\.1:$PF/token\?.*: the answer is larger than 1 MiB, the limit for a token server's answer; refused" \
    docker://127.0.0.1:$PF#big:1
  rm -f "$W/credentials"
  # (d) a registry in trouble (HTTP 503 for its first blob GETs): with
  # ENROOT_TRANSFER_RETRIES=0 no retry (skiff's own default is 5, tested in
  # image-scale.sh); =2 (transfer_retries) tries again
  ENROOT_TRANSFER_RETRIES=0 SKIFF_CACHE_PATH=$W/cache-g expect_fail "a blob answered 503, ENROOT_TRANSFER_RETRIES=0: fails" \
    "blob sha256:[0-9a-f]* on 127\.0\.0\.1:$PG: HTTP 503" docker://127.0.0.1:$PG#busybox:v2s2
  t_check "ENROOT_TRANSFER_RETRIES=2: two 503s for a blob, then the image" \
    env ENROOT_TRANSFER_RETRIES=2 SKIFF_CACHE_PATH=$W/cache-h "$SKIFF" import -o retried.sqsh docker://127.0.0.1:$PH#busybox:v2s2
  check_busybox retried retried.sqsh
  first=$(grep -m1 -o '/v2/busybox/blobs/sha256:[0-9a-f]*' "$W/fake-flaky-twice.log")
  [ -n "$first" ] && [ "$(grep '"begin"' "$W/fake-flaky-twice.log" | grep -c "\"$first\"")" = 3 ] &&
    t_pass "the blob was asked for three times (two retries)" ||
    t_fail "the blob was asked for three times" "$(flog flaky-twice)"
else
  t_fail "start the fake registries (fakereg.py)"
fi
fake_stop

# ---- resolve (what the SPANK plugin calls) ------------------------------------
p1=$W/r1 p2=$W/r2
"$SKIFF" resolve docker://$R#busybox:oci >"$p1" 2>"$p1.err" & a=$!
"$SKIFF" resolve docker://$R#busybox:oci >"$p2" 2>"$p2.err" & b=$!
wait $a; ra=$?; wait $b; rb=$?
if [ $ra = 0 ] && [ $rb = 0 ] && [ "$(cat "$p1")" = "$(cat "$p2")" ] && [ "$(ls "$W/cache/images" | grep -c '^[0-9a-f]*\.sqsh$')" = 1 ]; then
  t_pass "two concurrent resolves make one cached image"
else
  t_fail "two concurrent resolves make one cached image" "$ra $rb $(cat "$p1" "$p2" "$p1.err" "$p2.err"; ls "$W/cache/images")"
fi
img=$(cat "$p1")
check_busybox resolve "$img"
t_check "resolve reuses the cached image" test "$("$SKIFF" resolve docker://$R#busybox:oci)" = "$img"
t_check "resolve ./file.sqsh" test "$("$SKIFF" resolve ./oci.sqsh)" = "$W/out/oci.sqsh"
t_check "resolve bare name with default registry" env SKIFF_DEFAULT_REGISTRY=$R "$SKIFF" resolve busybox:oci
t_fails_with "resolve foo.sqsh without ./" "no such file \./foo\.sqsh; a local file needs a path with '/'" "$SKIFF" resolve foo.sqsh
t_fails_with "resolve existing oci.sqsh without ./" "write \./oci\.sqsh" "$SKIFF" resolve oci.sqsh
echo notsquash >"$W/out/plain.sqsh"
t_fails_with "resolve a non-squashfs file" "not a squashfs image" "$SKIFF" resolve ./plain.sqsh
t_fails_with "resolve nonsense" "neither a file path .* nor an image reference" "$SKIFF" resolve "Not An Image"
before=$(ls "$W/cache/images" | wc -l)
t_fails_with "resolve a hostile image" "'\.\./escape'" "$SKIFF" resolve docker://$R#evil:dotdot
[ "$(ls "$W/cache/images" | wc -l)" = "$before" ] && t_pass "failed resolve leaves nothing in the image cache" || t_fail "failed resolve leaves nothing in the image cache" "$(ls "$W/cache/images")"
registry_stop
t_check "resolve a cached tag while the registry is down" test "$("$SKIFF" resolve docker://$R#busybox:oci 2>/dev/null)" != ""

# ---- basic auth over the netrc-style credentials file ------------------------
/usr/bin/python3 -W ignore -c 'import crypt; print("alice:" + crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH)))' >"$W/htpasswd"
if registry_start "$W/reg-auth" "$W/htpasswd"; then
  RA=127.0.0.1:$REG_PORT
  skopeo copy -q --dest-tls-verify=false --dest-creds alice:s3cret --format oci oci:"$W/layout":busybox docker://$RA/private:1 >/dev/null \
    || t_fail "push to the auth registry"
  expect_fail "auth registry without credentials" "authentication required.*credentials file" docker://$RA#private:1
  printf 'machine %s\nlogin alice\npassword wrong\n' "$RA" >"$W/credentials"
  expect_fail "auth registry with a wrong password" "refused|authentication required" docker://$RA#private:1
  printf 'machine other.example login x password y\nmachine %s login alice password s3cret\n' "$RA" >"$W/credentials"
  t_check "auth registry with netrc credentials" "$SKIFF" import -o auth.sqsh docker://$RA#private:1
  t_check "auth registry with USER@ selecting the entry" "$SKIFF" import -f -o auth.sqsh docker://alice@$RA#private:1
  expect_fail "USER@ without a matching entry" "no password for user 'bob'" docker://bob@$RA#private:1
  registry_stop
else
  t_fail "start the htpasswd registry"
fi
# ---- bearer tokens: a real registry with "auth: token" and a tiny token server ----
if command -v openssl >/dev/null &&
   openssl req -x509 -newkey rsa:2048 -nodes -keyout "$W/tok.key" -out "$W/tok.crt" -days 2 -subj /CN=skiff-test >/dev/null 2>&1; then
  TP=$(registry_free_port)
  # a 3000-byte password: registry tokens (ECR, ACR) are 1-4 KB
  LONGPW=t0ken-$(head -c 2250 /dev/urandom | base64 -w0 | tr -d '/+=' | head -c 2994)
  /usr/bin/python3 "$T_ROOT/tests/integration/lib/tokenserver.py" "$TP" "$W/tok.key" "$W/tok.crt" skiff-registry "alice:$LONGPW" &
  TOKPID=$!
  for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$TP/" && break; sleep 0.1; done
  if registry_start "$W/reg-token" token "http://127.0.0.1:$TP/token" skiff-registry "$W/tok.crt"; then
    RT=127.0.0.1:$REG_PORT
    skopeo copy -q --dest-tls-verify=false --dest-creds "alice:$LONGPW" --format oci oci:"$W/layout":busybox docker://$RT/private:1 >/dev/null \
      || t_fail "push to the token registry"
    : >"$W/credentials"
    expect_fail "bearer registry without credentials" "token server .* refused \(HTTP 401\)" docker://$RT#private:1
    printf 'machine %s login alice password %s\n' "$RT" "$LONGPW" >"$W/credentials"
    t_check "bearer token from the realm with netrc credentials (a ${#LONGPW}-byte password, whole)" \
      "$SKIFF" import -o token.sqsh docker://$RT#private:1
    check_busybox bearer token.sqsh
    # enroot's credentials file, for a host skiff's has no entry for; its
    # password from the job's environment ($ENROOT_PASSWORD, JAX-Toolbox's way)
    : >"$W/credentials"
    mkdir -p "$W/enroot" && printf 'machine %s login alice password $ENROOT_PASSWORD\n' "$RT" >"$W/enroot/.credentials"
    ENROOT_PASSWORD=$LONGPW t_check "enroot's .credentials when skiff's has no entry, \$ENROOT_PASSWORD substituted" \
      "$SKIFF" import -o token-enroot.sqsh docker://$RT#private:1
    expect_fail "enroot's \$ENROOT_PASSWORD unset: named" "ENROOT_PASSWORD, which is not set" docker://$RT#private:1
    printf 'machine %s login alice password $(cat /tmp/pw)\n' "$RT" >"$W/enroot/.credentials"
    expect_fail "enroot's command substitution is refused" "command substitution, which skiff does not run" \
      docker://$RT#private:1
    rm -rf "$W/enroot"
    registry_stop
  else
    t_fail "start the token registry"
  fi
  kill "$TOKPID" 2>/dev/null; wait "$TOKPID" 2>/dev/null
else
  t_skip "bearer-token auth" "openssl cannot make a test certificate"
fi
t_done
