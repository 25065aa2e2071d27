#!/bin/bash
# Lazy images (runtime/lib/image/lazy.h, doc/lazy.md), without Slurm:
#  - the differential test (issue 27, A8): every import fixture is imported
#    in full (packed from the tar streams, image/pack.h, and, with
#    import_mksquashfs=yes, unpacked onto a tree by layer.c and squashed by
#    mksquashfs) and made a lazy image; all are served by skiff's FUSE server
#    (BUILD/tests/lazy-serve) and listed (tests/integration/lib/treelist.py:
#    names, types, modes, owners, link counts, sizes, sha256 of every file,
#    symlink targets, file mtimes, xattrs): the lists must be the same, as
#    root and as a user; the hostile fixtures are refused by both;
#  - what a lazy image must never do: serve bytes that are not the layer's
#    (a corrupted blob, a planted span in the shared span store), leave a
#    read waiting past lazy_timeout or a killed reader unkillable, go on
#    silently when its fetcher dies or its disk is full;
#  - a registry image started lazily (Range requests), and the fallbacks.
# Fixtures: tests/integration/lib/mkimage.py; registry: Debian's.
set -u
source "$(dirname "$0")/../lib.sh"
SKIFF=$BUILD/bin/skiff
MKIMAGE=$T_ROOT/tests/integration/lib/mkimage.py
TREELIST=$T_ROOT/tests/integration/lib/treelist.py

for tool in unsquashfs mksquashfs zstd python3; do
  command -v "$tool" >/dev/null || { t_skip "runtime-lazy" "$tool is not installed (scripts/install-deps test)"; t_done; }
done
[ -x "$SKIFF" ] || { t_fail "skiff binary" "$SKIFF missing: run make"; t_done; }
t_program lazy-serve "lazy images: the serving driver" || t_done
SERVE=$BUILD/tests/lazy-serve

t_scratch W lazy-test
conf() {  # DIR: a config of the user's own under DIR
  cat >"$1/skiff.conf" <<EOF2
cache_path = $1/cache
temp_path = $1/tmp
lazy_timeout = ${LAZY_TIMEOUT:-20}
EOF2
  mkdir -p "$1/tmp" "$1/mnt"
}
mkdir -p "$W/root"
conf "$W/root"
export SKIFF_CONFIG=$W/root/skiff.conf

GOOD="busybox multilayer multimember longnames"
BAD="evil-dotdot evil-symlink evil-hardlink truncated badcrc baddigest"
"$MKIMAGE" "$W/layout" $GOOD $BAD zstd >/dev/null || { t_fail "build test images"; t_done; }
chmod -R a+rX "$W/layout"

# ---- A8: the differential test ---------------------------------------------
# run_as WHO CMD...: CMD as root, or as the test user when there is one,
# with its own config under $W/user
TUSER=${SKIFF_TEST_USER:-skifftest}
if id "$TUSER" >/dev/null 2>&1 && [ -r /dev/fuse ] && [ -w /dev/fuse ]; then
  mkdir -p "$W/user" && conf "$W/user" && chown -R "$TUSER" "$W/user"
  WHO="root $TUSER"
else
  WHO=root
  t_skip "A8 as a user" "no user $TUSER, or /dev/fuse is not open to users (tests/cluster/up makes it 0666)"
fi
run_as() { if [ "$1" = root ]; then shift; "$@"; else shift; t_as_user -C "$W" SKIFF_CONFIG="$W/user/skiff.conf" "$@"; fi; }
home_of() { [ "$1" = root ] && echo "$W/root" || echo "$W/user"; }

# make_images WHO IMG: IMG imported in full, made a lazy image and imported
# through a tree, each served and listed, under WHO's home (once: what a
# later case needs is made on its first call). 1 with the reason in
# $H/$img.why when a step failed.
make_images() {
  local who=$1 img=$2 H k
  H=$(home_of "$who")
  [ -e "$H/$img.made" ] && return 0
  run_as "$who" "$SKIFF" import -o "$H/$img.sqsh" "oci:$W/layout:$img" >"$H/$img.full.log" 2>&1 ||
    { echo "full import: $(cat "$H/$img.full.log")" >"$H/$img.why"; return 1; }
  run_as "$who" "$SKIFF" import --lazy -o "$H/$img.lazy" "oci:$W/layout:$img" >"$H/$img.lazy.log" 2>&1 ||
    { echo "lazy image: $(cat "$H/$img.lazy.log")" >"$H/$img.why"; return 1; }
  run_as "$who" env SKIFF_IMPORT_MKSQUASHFS=yes "$SKIFF" import -o "$H/$img.tree" "oci:$W/layout:$img" \
    >"$H/$img.tree.log" 2>&1 || { echo "import through a tree: $(cat "$H/$img.tree.log")" >"$H/$img.why"; return 1; }
  for k in sqsh lazy tree; do
    run_as "$who" "$SERVE" "$H/$img.$k" "$H/mnt" python3 "$TREELIST" "$H/mnt" >"$H/$img.$k.list" 2>"$H/$img.$k.err" ||
      { echo "serve the $k image: $(cat "$H/$img.$k.err")" >"$H/$img.why"; return 1; }
  done
  touch "$H/$img.made"
}

for who in $WHO; do
  H=$(home_of "$who")
  for img in $GOOD; do
    t_case "A8 $who $img: the lazy tree is the imported tree" || continue
    make_images "$who" "$img" || { t_fail "$T_CASE" "$(cat "$H/$img.why")"; continue; }
    if [ -s "$H/$img.sqsh.list" ] && diff -u "$H/$img.sqsh.list" "$H/$img.lazy.list" >"$H/$img.diff"; then
      t_pass "$T_CASE ($(wc -l <"$H/$img.lazy.list") entries)"
    else
      t_fail "$T_CASE" "$(head -20 "$H/$img.diff")"
    fi
    if [ -s "$H/$img.tree.list" ] && diff -u "$H/$img.tree.list" "$H/$img.sqsh.list" >"$H/$img.tdiff"; then
      t_pass "A8 $who $img: the packed import is the tree layer.c unpacks, squashed by mksquashfs"
    else
      t_fail "A8 $who $img: the packed import is the tree layer.c unpacks, squashed by mksquashfs" \
        "$(head -20 "$H/$img.tdiff")"
    fi
  done
  # the hostile and broken layers: refused by both, lazily with the same reason
  reason() { sed -E 's/.*: (entry|hardlink|digest mismatch|the layer)/\1/; s/ \(truncated or corrupt layer\)//' <<<"$1"; }
  for img in $BAD; do
    t_case "A8 $who $img: refused by all" || continue
    full=$(run_as "$who" "$SKIFF" import -o "$H/bad.sqsh" "oci:$W/layout:$img" 2>&1) && full=
    tree=$(run_as "$who" env SKIFF_IMPORT_MKSQUASHFS=yes "$SKIFF" import -o "$H/bad.sqsh" "oci:$W/layout:$img" 2>&1) && tree=
    lazy=$(run_as "$who" "$SKIFF" import --lazy -o "$H/bad.lazy" "oci:$W/layout:$img" 2>&1) && lazy=
    if [ -z "$full" ] || [ -z "$lazy" ] || [ -z "$tree" ]; then
      t_fail "$T_CASE" "full: ${full:-imported}; lazy: ${lazy:-made}; through a tree: ${tree:-imported}"
    elif [ -e "$H/bad.sqsh" ]; then
      t_fail "A8 $who $img: no image left behind" "$(ls -l "$H/bad.sqsh")"
    elif [ -e "$H/bad.lazy" ] || ls -a "$H" | grep -q '\.tmp\.' || find "$H/cache" -name '*.tmp*' | grep -q .; then
      t_fail "A8 $who $img: nothing left behind" "$(ls -a "$H"; find "$H/cache" -name '*.tmp*')"
    else
      case $img in
        truncated | badcrc) t_pass "A8 $who $img: refused by both (lazy: $(reason "$lazy"))" ;;
        *) [ "$(reason "$full")" = "$(reason "$lazy")" ] && [ "$(reason "$full")" = "$(reason "$tree")" ] \
             && t_pass "A8 $who $img: refused by all, for the same reason" \
             || t_fail "A8 $who $img: refused by all, for the same reason" "full: $full; lazy: $lazy; through a tree: $tree" ;;
      esac
    fi
  done
done
if t_case "a zstd layer: no lazy image, and what to do"; then
  t_fails_with "$T_CASE" "not gzip-compressed; import it without --lazy" \
    "$SKIFF" import --lazy -o "$W/root/z.lazy" "oci:$W/layout:zstd"
  [ ! -e "$W/root/z.lazy" ] && t_pass "zstd: nothing left behind" || t_fail "zstd: nothing left behind"
fi

# ---- the cache's modes --------------------------------------------------------
if [ "$WHO" != root ] && t_case "lazy index and data are the user's alone (0700 dirs, 0600 files)"; then
  if make_images "$TUSER" longnames; then
    bad=$(find "$W/user/cache" \( -type d ! -perm 700 \) -o \( -name '*.idx' ! -perm 600 \) -o \( -name '*.data' ! -perm 600 \) -o \( -name '*.map' ! -perm 600 \) | head -3)
    [ -z "$bad" ] && t_pass "$T_CASE" || t_fail "$T_CASE" "$(ls -ld $bad)"
    [ "$(find "$W/user/cache" ! -user "$TUSER" | head -1)" = "" ] && t_pass "every lazy file is the user's" \
      || t_fail "every lazy file is the user's" "$(find "$W/user/cache" ! -user "$TUSER" | head -3)"
  else t_fail "$T_CASE" "$(cat "$W/user/longnames.why")"; fi
fi

# ---- what a lazy image never does -----------------------------------------------
# (the cases below need root's longnames images)
H=$W/root
L=$H/longnames.lazy
make_images root longnames || { t_fail "the longnames images" "$(cat "$H/longnames.why")"; t_done; }
# Each case below starts from a lazy image with nothing on this node: no
# data file, and no prefetch list. Every serve records what it read in the
# image's prefetch list, and a fetcher that finds one execs at once and
# fetches those spans in the background (lazyfetch.c): a case that tests
# what happens when the fetcher cannot deliver must not find the data
# already there. With no list, the fetcher waits, forked but not exec'd,
# for the first read it is asked for (lazyrun.c's standby).
reset_data() { rm -rf "$H/cache/lazy-data" "$L/prefetch"; }
blob_of() {  # the blob of the longnames layer that holds random-10m
  python3 - "$L/plan" <<'EOF2'
import json, sys
print(json.load(open(sys.argv[1]))["layers"][1]["blob"])
EOF2
}
BLOB=$(blob_of)
want=$(grep '^random-10m ' "$H/longnames.sqsh.list" | awk '{print $7}')
read_file() {  # FILE: sha256 of FILE in the lazy image, its stderr in $H/read.err
  "$SERVE" "$L" "$H/mnt" sh -c "sha256sum $H/mnt/$1 | cut -d' ' -f1" 2>"$H/read.err"
}

# a corrupted blob: EIO with a message, never its bytes
if t_case "corrupt bytes never reach a reader: EIO and a message"; then
  cp "$BLOB" "$H/blob.orig"
  python3 -c "
import sys; f=open(sys.argv[1],'r+b'); f.seek(5<<20); b=f.read(1); f.seek(5<<20); f.write(bytes([b[0]^0x55]))" "$BLOB"
  reset_data
  got=$(read_file random-10m)
  if [ "$got" = "$want" ]; then t_fail "$T_CASE" "the read succeeded"
  elif grep -q "skiff: lazy image: a read failed (EIO): .*not what the index recorded" "$H/read.err"; then t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$H/read.err")"; fi
  cp "$H/blob.orig" "$BLOB"
  reset_data
  [ "$(read_file random-10m)" = "$want" ] && t_pass "the same read once the blob is right" \
    || t_fail "the same read once the blob is right" "$(cat "$H/read.err")"
fi

# the shared span store: spans left there are used only when they are the span
if t_case "span store: a planted span is rejected (not served)"; then
  STORE=$W/store
  mkdir -p "$STORE" && chmod 1777 "$STORE"
  echo "lazy_span_store = $STORE" >>"$H/skiff.conf"
  reset_data
  read_file random-10m >/dev/null
  n=$(ls "$STORE" | wc -l)
  [ "$n" -gt 0 ] && t_pass "span store: fetched spans are kept ($n)" || t_fail "span store: fetched spans are kept"
  for s in "$STORE"/*; do printf 'planted' >"$s"; done
  mv "$BLOB" "$H/blob.away"  # the source must not be needed for a good store
  reset_data
  got=$(read_file random-10m)
  mv "$H/blob.away" "$BLOB"
  [ "$got" != "$want" ] && t_pass "$T_CASE" || t_fail "$T_CASE" "served"
  reset_data
  [ "$(read_file random-10m)" = "$want" ] && t_pass "span store: a planted span is fetched again from the source" \
    || t_fail "span store: a planted span is fetched again from the source" "$(cat "$H/read.err")"
  sed -i '/lazy_span_store/d' "$H/skiff.conf"
fi

# The scripts below run under lazy-serve, which says in LAZY_SERVE_FETCHER
# which process is the span fetcher; with no prefetch list it waits, not
# exec'd yet (its name is still lazy-serve's), for the first read. They use
# bash and the harness's waits (exported); each prints what it saw, the
# case judges.
export -f t_wait t_load_scale
FETCHER='f=${LAZY_SERVE_FETCHER:-}
  [ -n "$f" ] && [ -e /proc/$f ] || { echo "fetcher=none"; exit 1; }
  echo "fetcher=$f comm=$(cat /proc/$f/comm)"
  state() { awk "{print \$3}" /proc/$1/stat 2>/dev/null; }
  gone() { ! [ -e /proc/$1 ] || [ "$(state $1)" = Z ]; }
  stopped() { [ "$(state $1)" = T ]; }
  in_read() { [ "$(cut -d" " -f1 /proc/$1/syscall 2>/dev/null)" = 0 ]; }'
# none_there CASE: the preconditions of a case that kills or stops the
# fetcher: no prefetch list (else the fetcher would fetch the file before
# the case acts) and no data file.
none_there() {
  [ ! -e "$L/prefetch" ] && [ ! -e "$H/cache/lazy-data" ] && return 0
  t_fail "$1" "a prefetch list or data is there before the case: $(ls "$L/prefetch" "$H/cache/lazy-data" 2>&1 | tr '\n' ' ')"
  return 1
}

# the fetcher killed: EIO, with a message, at once (long before lazy_timeout=20)
if t_case "fetcher killed: EIO at once, with a message"; then
  reset_data
  if none_there "$T_CASE"; then
    out=$("$SERVE" "$L" "$H/mnt" bash -c "$FETCHER"'
      kill -9 $f
      t_wait "the fetcher $f to die" 30 gone $f || exit 1
      t0=$(date +%s%N); cat '"$H/mnt"'/random-10m >/dev/null; rc=$?
      echo "rc=$rc ms=$(( ($(date +%s%N) - t0) / 1000000 ))"' 2>&1)
    ms=$(sed -n 's/.*rc=1 ms=//p' <<<"$out")
    grep -q "fetcher=[0-9]" <<<"$out" && [ -n "$ms" ] && grep -q "span fetcher is gone" <<<"$out" &&
      [ "$ms" -lt 10000 ] && t_pass "$T_CASE (${ms} ms; lazy_timeout is 20 s)" || t_fail "$T_CASE" "$out"
  fi
fi

# a fetcher that never answers: EIO within lazy_timeout
if t_case "no answer: EIO within lazy_timeout, with a message"; then
  sed -i 's/^lazy_timeout.*/lazy_timeout = 3/' "$H/skiff.conf"
  reset_data
  if none_there "$T_CASE"; then
    out=$("$SERVE" "$L" "$H/mnt" bash -c "$FETCHER"'
      kill -STOP $f && t_wait "the fetcher $f to stop" 30 stopped $f || exit 1
      echo stopped=$f
      t0=$(date +%s%N); cat '"$H/mnt"'/random-10m >/dev/null; rc=$?
      echo "rc=$rc ms=$(( ($(date +%s%N) - t0) / 1000000 ))"; kill -CONT $f' 2>&1)
    ms=$(sed -n 's/.*rc=1 ms=//p' <<<"$out")
    [ -n "$ms" ] && [ "$ms" -ge 2500 ] && [ "$ms" -lt 30000 ] && grep -q "did not come within lazy_timeout=3 s" <<<"$out" \
      && t_pass "$T_CASE (${ms} ms of 3 s)" || t_fail "$T_CASE" "$out"
  fi
fi

# a reader waiting for data that does not come is killed at once by
# SIGKILL (long before lazy_timeout=60 would end its read), nothing of the
# serve stays in D state
if t_case "a reader waiting for data dies at once by SIGKILL"; then
  sed -i 's/^lazy_timeout.*/lazy_timeout = 60/' "$H/skiff.conf"
  reset_data
  if none_there "$T_CASE"; then
    out=$("$SERVE" "$L" "$H/mnt" bash -c "$FETCHER"'
      kill -STOP $f
      cat '"$H/mnt"'/text-70m >/dev/null & r=$!
      # blocked in its read(2) of the file, whose data does not come
      t_wait "the reader $r to wait in its read" 60 in_read $r || exit 1
      echo "waiting in $(cat /proc/$r/wchan), state $(state $r)"
      t0=$(date +%s%N); kill -9 $r; wait $r
      echo "killed_ms=$(( ($(date +%s%N) - t0) / 1000000 ))"
      echo "dstate=$(for p in $(ps -o pid= --ppid $PPID); do state $p; done | grep -c "^D")"
      kill -CONT $f' 2>&1)
    km=$(sed -n 's/.*killed_ms=//p' <<<"$out")
    [ -n "$km" ] && [ "$km" -lt 20000 ] && t_pass "$T_CASE (${km} ms; $(grep -o 'waiting in .*' <<<"$out"))" \
      || t_fail "$T_CASE" "$out"
    grep -q "dstate=0" <<<"$out" && t_pass "nothing of the serve in D state" || t_fail "nothing of the serve in D state" "$out"
  fi
fi
sed -i 's/^lazy_timeout.*/lazy_timeout = 20/' "$H/skiff.conf"

# the data file's disk full: a clear error (EIO and why), never wrong data
if ! t_case "data disk full: EIO and why"; then :
elif mkdir -p "$H/small" && mount -t tmpfs -o size=2m tmpfs "$H/small" 2>/dev/null; then
  reset_data
  echo "lazy_path = $H/small/data" >>"$H/skiff.conf"
  got=$(read_file random-10m)
  [ "$got" != "$want" ] && grep -q "disk is full" "$H/read.err" && t_pass "data disk full: EIO and why" \
    || t_fail "data disk full: EIO and why" "$(cat "$H/read.err")"
  sed -i '/^lazy_path/d' "$H/skiff.conf"
  umount "$H/small"
else
  t_skip "data disk full" "cannot mount a small tmpfs here"
fi

# prefetch: what a start read is recorded for the next one
if t_case "the spans a start read are recorded"; then
  reset_data
  "$SERVE" "$L" "$H/mnt" sh -c "cat $H/mnt/after-big >/dev/null" 2>/dev/null
  [ -s "$L/prefetch" ] && t_pass "$T_CASE ($(wc -l <"$L/prefetch"))" || t_fail "$T_CASE"
fi

# ---- a registry image, lazily ---------------------------------------------------
# fake_start PORT ARGS...: tests/integration/lib/fakereg.py in front of the registry
fake_start() { local port=$1; shift; t_fakereg_start "$port" "$W/fake-$port.log" --upstream "127.0.0.1:$REG_PORT" "$@"; }
fake_stop() { t_fakereg_stop; }
t_needs "registry images" docker-registry skopeo || t_done
# registry_setup: the registry with the test image, and a user of it with a
# config of its own (image_mode = lazy) in $R; once (each case below calls
# it, and resets what it changes)
registry_setup() {
  [ -n "${ref:-}" ] && return 0
  registry_start "$W/reg" && skopeo copy -q --dest-tls-verify=false --format oci "oci:$W/layout:longnames" \
    "docker://127.0.0.1:$REG_PORT/lazy/longnames:1" >/dev/null || { t_fail "registry with the test image"; t_done; }
  R=$W/reg-user
  mkdir -p "$R" && conf "$R"
  echo "image_mode = lazy" >>"$R/skiff.conf"
  export SKIFF_CONFIG=$R/skiff.conf
  ref=docker://127.0.0.1:$REG_PORT/lazy/longnames:1
}

if t_case "image_mode=lazy: resolve makes a lazy image of a registry image"; then
registry_setup
D=$("$SKIFF" resolve "$ref" 2>"$R/err")
if [ "${D%.lazy}" != "$D" ]; then
  t_pass "image_mode=lazy: resolve makes a lazy image of a registry image"
  "$SERVE" "$D" "$R/mnt" python3 "$TREELIST" "$R/mnt" >"$R/list" 2>"$R/serve.err"
  diff -q "$R/list" "$H/longnames.sqsh.list" >/dev/null && t_pass "A8 registry: the lazy tree is the imported tree" \
    || t_fail "A8 registry: the lazy tree is the imported tree" "$(diff "$R/list" "$H/longnames.sqsh.list" | head -5; tail -3 "$R/serve.err")"
else
  t_fail "image_mode=lazy: resolve makes a lazy image of a registry image" "$D $(cat "$R/err")"
fi
D2=$("$SKIFF" resolve "$ref" 2>/dev/null)
[ "$D2" = "$D" ] && t_pass "resolve again: the same lazy image, no second index pass" || t_fail "resolve again" "$D2"
# an index of format 1 (a sha256 per span, before the chaining states):
# a cached lazy image that has one is made again, and the index with it;
# one made by hand is refused with a message that says what to do
idxver() { python3 -c 'import struct, sys; print(struct.unpack_from("<I", open(sys.argv[1], "rb").read(12), 8)[0])' "$1"; }
setver() { python3 -c 'import struct, sys; f = open(sys.argv[1], "r+b"); f.seek(8); f.write(struct.pack("<I", 1))' "$1"; }
cached=$(ls "$R"/cache/lazy-index/*.idx | head -1)
setver "$D/layer-0.idx"  # (a hard link to the cached index: both are format 1 now)
[ "$(idxver "$cached")" = 1 ] || setver "$cached"
D2=$("$SKIFF" resolve "$ref" 2>"$R/err")
"$SERVE" "$D2" "$R/mnt" python3 "$TREELIST" "$R/mnt" >"$R/list" 2>"$R/serve.err"
if [ "$D2" = "$D" ] && [ "$(idxver "$D/layer-0.idx")" = 2 ] && [ "$(idxver "$cached")" = 2 ] \
  && diff -q "$R/list" "$H/longnames.sqsh.list" >/dev/null && ! ls -d "$D".* 2>/dev/null | grep -q .; then
  t_pass "a cached lazy image with indexes of format 1 is made again (format 2), and serves the tree"
else
  t_fail "a cached lazy image with indexes of format 1 is made again" \
    "$D2 $(cat "$R/err"); versions $(idxver "$D/layer-0.idx") $(idxver "$cached"); $(ls -d "$D".* 2>/dev/null); $(tail -3 "$R/serve.err")"
fi
cp -a "$D" "$R/old.lazy" && setver "$R/old.lazy/layer-0.idx"
t_fails_with "a lazy image made by hand with an index of format 1: refused, and what to do" \
  "lazy index of format 1, made by an older skiff .this one reads format 2.: make the lazy image again" \
  "$SKIFF" start --no-entrypoint "$R/old.lazy" /bin/true
rm -rf "$R/old.lazy"
# skiff cache list/prune know lazy images: listed with their size, kept
# while a container uses them, then removed with their data files and the
# layer indexes no other image links
k=$(basename "$D" .lazy | cut -c1-12)
line=$("$SKIFF" cache list 2>&1 | grep "^$k ")
grep -q '\[lazy\]' <<<"$line" && ! grep -qE "^$k +0B " <<<"$line" && t_pass "cache list: the lazy image, with its size" \
  || t_fail "cache list: the lazy image, with its size" "$("$SKIFF" cache list 2>&1)"
# (a container that runs until the case stops it)
"$SKIFF" start --no-entrypoint "$D" /bin/sleep infinity >/dev/null 2>&1 &
SP=$!
t_at_exit "kill $SP 2>/dev/null"
in_use() { "$SKIFF" cache list 2>/dev/null | grep -qE "^$k .* yes "; }
if t_wait "cache list to show the lazy image in use by the container" 60 in_use; then
  out=$("$SKIFF" cache prune --all 2>&1)
  [ -d "$D" ] && grep -q "kept 1 image(s) in use" <<<"$out" && t_pass "cache prune: a lazy image in use is kept" \
    || t_fail "cache prune: a lazy image in use is kept" "$out"
else t_fail "cache prune: a lazy image in use is kept" "never in use: $("$SKIFF" cache list 2>&1)"; fi
kill "$SP" 2>/dev/null; wait "$SP" 2>/dev/null
out=$("$SKIFF" cache prune --all 2>&1)
left=$(ls "$R/cache/lazy-data" "$R/cache/lazy-index" 2>/dev/null | grep -cE '\.(data|map|idx)$')
[ ! -e "$D" ] && [ "$left" -eq 0 ] && t_pass "cache prune: a lazy image not in use goes, with its data files and indexes" \
  || t_fail "cache prune: a lazy image not in use goes, with its data files and indexes" "$out; $left files left"
fi

if t_case "image_mode=auto: a small image is imported in full (lazy_min_size)"; then
registry_setup
sed -i 's/^image_mode.*/image_mode = auto/' "$R/skiff.conf"
rm -rf "$R/cache/images"
D3=$("$SKIFF" resolve "$ref" 2>/dev/null)
case $D3 in *.sqsh) t_pass "image_mode=auto: a small image is imported in full (lazy_min_size)" ;;
  *) t_fail "image_mode=auto: a small image is imported in full" "$D3" ;; esac
sed -i 's/^image_mode.*/image_mode = lazy/' "$R/skiff.conf"
fi

P1=$(registry_free_port)
if t_case "a proxy that ignores Range: imported in full instead" && registry_setup && fake_start "$P1" --ignore-range; then
  rm -rf "$R/cache/images"
  D=$("$SKIFF" resolve "docker://127.0.0.1:$P1/lazy/longnames:1" 2>"$R/err")
  case $D in *.sqsh) t_pass "a proxy that ignores Range: imported in full instead" ;;
    *) t_fail "a proxy that ignores Range: imported in full instead" "$D $(cat "$R/err")" ;; esac
  t_fails_with "a proxy that ignores Range: --lazy says why" "ignores Range requests; import it without --lazy" \
    "$SKIFF" import --lazy -o "$R/ir.lazy" "docker://127.0.0.1:$P1/lazy/longnames:1"
fi
# a registry that tampers with every range it answers: a byte of the
# middle, the first or the last byte (a span is checked with the 64-byte
# blocks around it: its first and last bytes are inside), or the right
# length from 64 bytes further on; the read fails, and nothing of it is in
# the data file (lib/lazydata.py: every byte past the image's own files
# zero, no span marked there)
LAZYDATA=$T_ROOT/tests/integration/lib/lazydata.py
for how in middle first last shift:64; do
  t_case "tampered ranges ($how) never reach a task" || continue
  registry_setup
  P2=$(registry_free_port)
  fake_start "$P2" --corrupt-ranges "$how" || { t_fail "a registry that tampers ($how)" "it did not start"; continue; }
  rm -rf "$R/cache/images" "$R/cache/lazy-data"
  D=$("$SKIFF" resolve "docker://127.0.0.1:$P2/lazy/longnames:1" 2>"$R/err")
  out=$("$SERVE" "$D" "$R/mnt" sh -c "cat $R/mnt/random-10m | sha256sum" 2>&1)
  if grep -q "$want" <<<"$out"; then t_fail "tampered ranges ($how) never reach a task" "served"
  elif ! grep -q "not what the index recorded" <<<"$out"; then t_fail "tampered ranges ($how) never reach a task" "$out"
  elif ! left=$(python3 "$LAZYDATA" "$D" "$R/cache/lazy-data" 2>&1); then
    t_fail "tampered ranges ($how): nothing written into the data file" "$left"
  else t_pass "tampered ranges ($how) never reach a task (EIO, and why) nor the data file ($left)"; fi
  fake_stop
done
P3=$(registry_free_port)
if t_case "a token that expires mid-run is renewed" && registry_setup && fake_start "$P3" --bearer "http://127.0.0.1:$P3/token" --token-uses 3; then
  rm -rf "$R/cache/images" "$R/cache/lazy-data"
  D=$("$SKIFF" resolve "docker://127.0.0.1:$P3/lazy/longnames:1" 2>"$R/err")
  got=$("$SERVE" "$D" "$R/mnt" sh -c "cat $R/mnt/random-10m $R/mnt/text-70m | sha256sum" 2>"$R/err2")
  exp=$("$SERVE" "$H/longnames.sqsh" "$H/mnt" sh -c "cat $H/mnt/random-10m $H/mnt/text-70m | sha256sum")
  ntok=$(grep -c '"event": "begin", "method": "GET", "path": "/token' "$W/fake-$P3.log")
  [ "$got" = "$exp" ] && [ "$ntok" -ge 3 ] && t_pass "a token that expires mid-run is renewed ($ntok tokens)" \
    || t_fail "a token that expires mid-run is renewed" "$(cat "$R/err" "$R/err2")"
fi
P4=$(registry_free_port)
if t_case "image_mode=auto on a small image: one manifest GET, lazy attempt and full import" && registry_setup &&
   fake_start "$P4"; then
  # image_mode=auto, an image under lazy_min_size: the manifest the lazy
  # attempt fetched is the full import's (one GET of it, not two)
  sed -i 's/^image_mode.*/image_mode = auto/' "$R/skiff.conf"
  rm -rf "$R/cache/images" "$R/cache/blobs"
  D=$("$SKIFF" resolve "docker://127.0.0.1:$P4/lazy/longnames:1" 2>"$R/err")
  nget=$(grep -c '"event": "begin", "method": "GET", "path": "/v2/lazy/longnames/manifests/' "$W/fake-$P4.log")
  case $D in *.sqsh) [ "$nget" -eq 1 ] && t_pass "image_mode=auto on a small image: one manifest GET, lazy attempt and full import" \
    || t_fail "image_mode=auto on a small image: one manifest GET" "$nget GETs of the manifest" ;;
    *) t_fail "image_mode=auto on a small image: one manifest GET" "$D $(cat "$R/err")" ;; esac
  sed -i 's/^image_mode.*/image_mode = lazy/' "$R/skiff.conf"
fi
fake_stop

# lazy_complete: the rest comes in the background; once the map says every
# span is there, a stopped registry changes nothing (the whole tree is read)
if t_case "lazy_complete: every span fetched in the background; then the registry stopped changes nothing"; then
registry_setup
rm -rf "$R/cache/images"
echo "lazy_complete = yes" >>"$R/skiff.conf"
rm -rf "$R/cache/lazy-data"
D=$("$SKIFF" resolve "$ref" 2>/dev/null)
complete='import glob, struct, sys
for m in glob.glob(sys.argv[1] + "/*.map"):
    h = open(m, "rb").read(80)
    n, present, done = struct.unpack_from("<I", h, 12)[0], *struct.unpack_from("<II", h, 72)
    sys.exit(0 if n and present == n and done else 1)
sys.exit(1)'
"$SERVE" "$D" "$R/mnt" bash -c "
  cat $R/mnt/after-big >/dev/null
  t_wait 'the map to say every span is there' 120 python3 -c '$complete' $R/cache/lazy-data && echo complete=yes
  kill -STOP $REG_PID
  python3 $TREELIST $R/mnt >$R/complete.list
  kill -CONT $REG_PID" >"$R/complete.out" 2>&1
kill -CONT "$REG_PID" 2>/dev/null
grep -q complete=yes "$R/complete.out" && diff -q "$R/complete.list" "$H/longnames.sqsh.list" >/dev/null \
  && t_pass "lazy_complete: every span fetched in the background; then the registry stopped changes nothing" \
  || t_fail "lazy_complete: every span fetched in the background; then the registry stopped changes nothing" \
    "$(head -c 600 "$R/complete.out")"
sed -i '/^lazy_complete/d' "$R/skiff.conf"
fi

# the registry gone mid-run: what was fetched is served, the rest is EIO
# within lazy_timeout with a message
if t_case "registry killed mid-run: EIO within lazy_timeout, with a message"; then
registry_setup
rm -rf "$R/cache/images"
sed -i 's/^lazy_timeout.*/lazy_timeout = 4/' "$R/skiff.conf"
rm -rf "$R/cache/lazy-data"
D=$("$SKIFF" resolve "$ref" 2>/dev/null)
out=$("$SERVE" "$D" "$R/mnt" bash -c "
  cat $R/mnt/after-big >/dev/null && echo first=ok
  kill $REG_PID; t_wait 'the registry to stop answering' 30 bash -c '! curl -s -o /dev/null http://127.0.0.1:$REG_PORT/v2/' || exit 1
  t0=\$(date +%s%N); cat $R/mnt/random-10m >/dev/null; rc=\$?
  echo rc=\$rc ms=\$(( (\$(date +%s%N) - t0) / 1000000 ))
  cat $R/mnt/after-big >/dev/null && echo again=ok" 2>&1)
ms=$(sed -n 's/.*rc=1 ms=//p' <<<"$out")
grep -q first=ok <<<"$out" && [ -n "$ms" ] && [ "$ms" -lt 30000 ] && grep -q "a read failed (EIO)" <<<"$out" \
  && grep -q again=ok <<<"$out" && t_pass "registry killed mid-run: EIO within lazy_timeout (${ms} ms of 4 s), with a message; fetched data still served" \
  || t_fail "registry killed mid-run: EIO within lazy_timeout, with a message" "$out"
fi

t_done
