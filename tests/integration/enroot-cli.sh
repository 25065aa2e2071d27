#!/bin/bash
# skiff-enroot, enroot's command line over libskiff (issue 30), as the
# non-root test user on a busybox squashfs: every verb job scripts and
# admins use (import, create, start, exec, list [-f], remove [-f], export,
# version), the names pyxis gave its containers, the ENROOT_* variables,
# enroot's site configuration (enroot_compat: environ.d, mounts.d,
# hooks.d) and the errors: unknown flags and verbs exit 2 naming them.
# Cluster-side scripts (MLPerf's and JAX-Toolbox's shapes): plugin-enroot.sh.
source "$(dirname "$0")/../lib.sh"
E=$BUILD/bin/skiff-enroot
TUSER=${SKIFF_TEST_USER:-skifftest}

if [ "$(id -u)" -ne 0 ]; then t_skip "enroot-cli" "must run as root to create the test user"; t_done; fi
for p in busybox mksquashfs setpriv; do
  command -v $p >/dev/null || { t_skip "enroot-cli" "$p missing (scripts/install-deps test)"; t_done; }
done
[ -x "$E" ] || { t_fail "enroot-cli" "$E not built"; t_done; }
id -u $TUSER >/dev/null 2>&1 || useradd -m $TUSER || { t_fail "create user $TUSER"; t_done; }
TUID=$(id -u $TUSER)
THOME=$(getent passwd $TUSER | cut -d: -f6)
[ -c /dev/fuse ] && chmod 0666 /dev/fuse

W=$(mktemp -d /tmp/skiff-enroot-cli.XXXXXX)
chmod 0755 "$W"
cleanup() { pkill -KILL -u $TUSER -f "$W" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT

R=$W/rootfs
mkdir -p $R/{bin,etc,tmp,proc,sys,dev,root,work,.skiff}
cp "$(command -v busybox)" $R/bin/busybox
for a in $($R/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox $R/bin/$a; done
printf 'root:x:0:0:root:/root:/bin/sh\n' >$R/etc/passwd
echo '{"Env":["PATH=/bin","FROM_IMAGE=1"],"WorkingDir":"/work","Cmd":["echo","default-cmd"]}' >$R/.skiff/config.json
mksquashfs $R $W/bb+1.0.sqsh -quiet -noappend -all-root >/dev/null || { t_fail "build image"; t_done; }
mkdir -p $W/data $W/run $W/here $W/share $W/site/{environ.d,mounts.d,hooks.d} $W/ucfg/environ.d
echo shared >$W/share/f
chown -R $TUSER: $W/data $W/run $W/here $W/ucfg
chmod -R a+rX $W

# the test user, a clean environment, data and runtime paths of this test
# (through ENROOT_DATA_PATH and ENROOT_RUNTIME_PATH: enroot's variables)
en() {
  (cd "$W/here" && setpriv --reuid=$TUID --regid=$TUID --init-groups \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=$THOME ENROOT_DATA_PATH=$W/data ENROOT_RUNTIME_PATH=$W/run \
    ${EXTRA_ENV:-} "$E" "$@")
}
check_out() { # NAME EXPECTED CMD...
  local name=$1 want=$2; shift 2
  local out; out=$("$@" 2>&1)
  if [ "$out" = "$want" ]; then t_pass "$name"; else t_fail "$name" "got '$out' want '$want'"; fi
}
# usage NAME PATTERN CMD...: exit 2, the message matches, no strerror text
usage() {
  local name=$1 pat=$2; shift 2
  local out rc; out=$("$@" 2>&1); rc=$?
  if [ "$rc" != 2 ]; then t_fail "$name" "exit $rc, want 2: $out"
  elif ! grep -Eq -- "$pat" <<<"$out"; then t_fail "$name" "message did not match /$pat/: $out"
  elif grep -q ": Invalid argument" <<<"$out"; then t_fail "$name" "a strerror text: $out"
  else t_pass "$name"; fi
}
NODE=$(hostname -s)

# ---- the command line ----
check_out "version: the enroot release it follows" "3.5.0" en version
out=$(en help 2>&1)
for v in import create start exec list remove export version; do
  grep -q "^  $v " <<<"$out" || { t_fail "help lists $v" "$out"; break; }
done && t_pass "help lists every verb"
usage "an unknown flag is named, exit 2" "skiff-enroot start: unrecognized option '--bogus'" en start --bogus x
usage "an unknown short flag is named, exit 2" "skiff-enroot list: invalid option -- 'z'" en list -z
usage "an unknown verb, exit 2" "unknown command 'frobnicate'" en frobnicate
usage "bundle: refused, saying what to use" "'bundle' is not supported" en bundle x.sqsh
usage "start --conf: refused (bash configuration scripts)" "--conf is not supported.*no shell" en start --conf c.sh x
usage "import dockerd://: refused, saying what to do" "dockerd://ubuntu.*not supported.*docker save" \
  en import dockerd://ubuntu
usage "start -e with a bad name" "--env '1X=y' is not KEY" en start -e 1X=y $W/bb+1.0.sqsh true
usage "start -m that is not SRC:DST" "--mount 'nodst' is not SRC:DST" en start -m nodst $W/bb+1.0.sqsh true

# ---- import (skiff's dir: source; docker:// runs on the cluster: plugin-enroot.sh) ----
en import "dir:$R" >/dev/null 2>&1 && [ -f "$W/here/rootfs.sqsh" ] &&
  t_pass "import: enroot's default output name" || t_fail "import: default output name" "$(ls $W/here)"
out=$(en import "dir:$R" 2>&1) && t_fail "import: an existing output file is refused" "$out" ||
  t_pass "import: an existing output file is refused"
en import -f -o "$W/here/rootfs.sqsh" "dir:$R" >/dev/null 2>&1 && t_pass "import -f -o replaces it" ||
  t_fail "import -f -o replaces it"

# ---- create, list, start ----
en create "$W/bb+1.0.sqsh" >/dev/null 2>&1
en create -n pyxis_enroot-train "$W/bb+1.0.sqsh" >/dev/null 2>&1
en create -n pyxis_42_enroot-job "$W/bb+1.0.sqsh" >/dev/null 2>&1
list_line() { en list | tr '\n' ' ' | sed 's/ $//'; }
check_out "create: default name from the image, pyxis names; list shows them one a line" \
  "bb+1.0 pyxis_42_enroot-job pyxis_enroot-train" list_line
[ -d "$W/data/containers/enroot-train.$NODE" ] && [ -d "$W/data/containers/enroot-job.$NODE.job42" ] &&
  t_pass "pyxis_NAME and pyxis_JOBID_NAME are the plugin's NAME.NODE and NAME.NODE.jobJOBID" ||
  t_fail "pyxis names map to the plugin's" "$(ls $W/data/containers)"
out=$(en create -n pyxis_enroot-train "$W/bb+1.0.sqsh" 2>&1) && t_fail "create: an existing name is refused" ||
  { grep -q "exists (-f replaces it)" <<<"$out" && t_pass "create: an existing name is refused, saying -f" ||
    t_fail "create: existing name message" "$out"; }
en start --rw pyxis_enroot-train sh -c 'echo kept >/kept' >/dev/null 2>&1
en create -f -n pyxis_enroot-train "$W/bb+1.0.sqsh" >/dev/null 2>&1
check_out "create -f replaces it (a fresh writable layer)" "fresh" en start pyxis_enroot-train sh -c '[ -e /kept ] || echo fresh'
two() { echo $(en start bb+1.0) $(en start bb+1.0 pwd); }
check_out "start: the image's Entrypoint and Cmd, WorkingDir" "default-cmd /work" two
check_out "start --root" "0" en start --root "$W/bb+1.0.sqsh" id -u
EXTRA_ENV=ENROOT_REMAP_ROOT=y check_out "ENROOT_REMAP_ROOT=y" "0" en start "$W/bb+1.0.sqsh" id -u
check_out "start without --rw: the root is read-only" "ro" en start "$W/bb+1.0.sqsh" sh -c 'touch /x 2>/dev/null || echo ro'
check_out "start --rw: writable" "rw" en start --rw "$W/bb+1.0.sqsh" sh -c 'touch /x && echo rw'
EXTRA_ENV=ENROOT_ROOTFS_WRITABLE=yes check_out "ENROOT_ROOTFS_WRITABLE=yes" "rw" \
  en start "$W/bb+1.0.sqsh" sh -c 'touch /x && echo rw'
printf '# env file\nFROM_FILE="quoted value"\n\nSECOND=2\n' >"$W/here/vars.env"
check_out "start -e KEY=V, -e KEY (its value here), --env-file" "v|$THOME|quoted value 2|1" \
  en start -e K=v -e HOME --env-file vars.env "$W/bb+1.0.sqsh" sh -c 'echo "$K|$HOME|$FROM_FILE $SECOND|$FROM_IMAGE"'
check_out "start -m SRC:DST with enroot's relative DST (inside the root) and a relative SRC" "shared" \
  en start -m ../share:mnt/s "$W/bb+1.0.sqsh" cat /mnt/s/f
check_out "start -m with fstab TYPE and OPTIONS" "ro" \
  en start -m "$W/share:/s:none:bind,ro" "$W/bb+1.0.sqsh" sh -c 'touch /s/x 2>/dev/null || echo ro'
EXTRA_ENV=ENROOT_MOUNT_HOME=y check_out "ENROOT_MOUNT_HOME=y" "$THOME" \
  en start "$W/bb+1.0.sqsh" sh -c "grep -o ' $THOME ' /proc/mounts | tr -d ' '"
out=$(EXTRA_ENV=ENROOT_UNSHARE_NET=y en start "$W/bb+1.0.sqsh" sh -c 'nc 127.0.0.1 1 </dev/null' 2>&1)
grep -q "Connection refused" <<<"$out" && t_pass "ENROOT_UNSHARE_NET=y: own network, loopback up (Connection refused)" ||
  t_fail "ENROOT_UNSHARE_NET=y: loopback up" "$out"
out=$(en start nosuch true 2>&1) && t_fail "start of an unknown name fails" "$out" ||
  { grep -q "neither a squashfs image nor a container of this node" <<<"$out" && t_pass "start of an unknown name says so" ||
    t_fail "start of an unknown name says so" "$out"; }

# ---- list -f and exec PID: what pyxis and its tests parse ----
en start pyxis_enroot-train sh -c 'echo in-container >/tmp/marker; sleep 30' >/dev/null 2>&1 &
BG=$!
for _ in $(seq 100); do en list -f 2>/dev/null | awk '$1 == "pyxis_enroot-train" && $2 > 0 {f=1} END {exit !f}' && break; sleep 0.1; done
table=$(en list -f 2>&1)
head -1 <<<"$table" | grep -q "^NAME  *PID  *COMM  *STATE  *STARTED  *TIME  *MNTNS  *USERNS  *COMMAND$" &&
  t_pass "list -f: enroot's header" || t_fail "list -f: enroot's header" "$table"
PID=$(awk '$1 == "pyxis_enroot-train" {print $2}' <<<"$table")
if [ -n "$PID" ] && [ "$PID" -gt 1 ] && grep -q "sleep 30" <<<"$table" && grep -q "^bb+1.0\$" <<<"$table"; then
  t_pass "list -f: a running container's PID (second column) and COMMAND; a stopped one's name alone"
else t_fail "list -f: running container" "$table"; fi
for _ in $(seq 50); do en exec "$PID" test -e /tmp/marker 2>/dev/null && break; sleep 0.1; done
check_out "exec PID: runs in the running container, -e adds a variable" "in-container x" \
  en exec -e EXTRA=x "$PID" sh -c 'echo $(cat /tmp/marker) $EXTRA'
usage "exec with a bad pid" "'12ab' is not a process id" en exec 12ab true
kill $BG 2>/dev/null; pkill -u $TUSER -f "sleep 30" 2>/dev/null; wait $BG 2>/dev/null

# ---- export, remove ----
en start --rw bb+1.0 sh -c 'echo exported >/etc/exported' >/dev/null 2>&1
en export -o "$W/here/out.sqsh" bb+1.0 >/dev/null 2>&1
check_out "export -o: the container's files as an image start runs" "exported" en start "$W/here/out.sqsh" cat /etc/exported
out=$(en export -o "$W/here/out.sqsh" bb+1.0 2>&1) && t_fail "export over an existing file is refused" "$out" ||
  { grep -q "exists (-f replaces it)" <<<"$out" && t_pass "export over an existing file is refused, saying -f" ||
    t_fail "export message" "$out"; }
en export -f -o "$W/here/out.sqsh" bb+1.0 >/dev/null 2>&1 && t_pass "export -f replaces it" || t_fail "export -f"
echo n | en remove bb+1.0 >/dev/null 2>&1
[ -d "$W/data/containers/bb+1.0" ] && t_pass "remove without -f: 'n' keeps it" || t_fail "remove without -f: 'n' keeps it"
echo y | en remove bb+1.0 >/dev/null 2>&1
[ -d "$W/data/containers/bb+1.0" ] && t_fail "remove without -f: 'y' removes it" || t_pass "remove without -f: 'y' removes it"
out=$(en remove -f pyxis_enroot-train nosuch pyxis_42_enroot-job 2>&1); rc=$?
[ $rc = 1 ] && grep -q "no container named 'nosuch'" <<<"$out" && [ -z "$(en list)" ] &&
  t_pass "remove -f: the others removed, a missing one named, exit 1" || t_fail "remove -f" "rc=$rc $out / $(en list)"
en create -n pyxis_enroot-x "$W/bb+1.0.sqsh" >/dev/null 2>&1
EXTRA_ENV=ENROOT_FORCE_OVERRIDE=y en remove pyxis_enroot-x </dev/null >/dev/null 2>&1
[ -z "$(en list)" ] && t_pass "ENROOT_FORCE_OVERRIDE=y: remove asks nothing" || t_fail "ENROOT_FORCE_OVERRIDE" "$(en list)"
# another node's container (its node mark) is not this node's
mkdir -p "$W/data/containers/other.enroot-n9" && echo "$W/bb+1.0.sqsh" >"$W/data/containers/other.enroot-n9/image" &&
  echo enroot-n9 >"$W/data/containers/other.enroot-n9/node" && chown -R $TUSER: "$W/data/containers"
[ -z "$(en list)" ] && t_pass "list: another node's containers are not shown" || t_fail "another node's" "$(en list)"

# ---- enroot's site configuration (enroot_compat = yes) ----
cat >"$W/site/environ.d/10-enroot-site.env" <<'EOF'
# a site's environment
  SITE_VAR="from site"
USER_HOME=${HOME}
ENROOT_DROPPED=1
not a variable line
EOF
echo "$W/share /site-share none x-create=dir,bind,ro" >"$W/site/mounts.d/10-enroot-site.fstab"
cat >"$W/site/hooks.d/10-enroot-site.sh" <<'EOF'
#!/bin/sh
echo "HOOK_PID_OK=$([ -d /proc/$ENROOT_PID/ns ] && echo y)" >>"$ENROOT_ENVIRON"
echo "HOOK_REMAP=${ENROOT_REMAP_ROOT:-unset}" >>"$ENROOT_ENVIRON"
echo "HOOK_SAW_SITE=$(grep -c '^SITE_VAR=from site$' "$ENROOT_ENVIRON")" >>"$ENROOT_ENVIRON"
echo "/proc /hook-proc none rbind" >>"$ENROOT_MOUNTS"
touch "$ENROOT_ROOTFS/tmp/hook-was-here"
EOF
chmod 755 "$W/site/hooks.d/10-enroot-site.sh"
printf '#!/bin/sh\nexit 9\n' >"$W/site/hooks.d/20-enroot-off.sh"   # not executable: not run
echo "USER_LEVEL=yes" >"$W/ucfg/environ.d/enroot-user.env"
printf 'enroot_compat = yes\nenroot_sysconf_path = %s/site\n' "$W" >"$W/compat.conf"
chmod -R a+rX $W/site $W/compat.conf
SITE_ENV="SKIFF_CONFIG=$W/compat.conf ENROOT_CONFIG_PATH=$W/ucfg"
out=$(EXTRA_ENV="$SITE_ENV" en start --root "$W/bb+1.0.sqsh" sh -c \
  'echo "$SITE_VAR|$USER_HOME|${ENROOT_DROPPED:-none}|$USER_LEVEL|$HOOK_PID_OK|$HOOK_REMAP|$HOOK_SAW_SITE|$(cat /site-share/f)|$(ls /tmp)|$(test -e /hook-proc/self && echo m)"' 2>&1)
[ "$out" = "from site|$THOME|none|yes|y|y|1|shared|hook-was-here|m" ] &&
  t_pass "enroot_compat: environ.d (\${VAR}, quotes, ENROOT_* dropped), the user's environ.d, mounts.d, hooks.d with ENROOT_PID/ROOTFS/ENVIRON/MOUNTS/REMAP_ROOT" ||
  t_fail "enroot_compat site configuration" "$out"
EXTRA_ENV="ENROOT_CONFIG_PATH=$W/ucfg ENROOT_SYSCONF_PATH=$W/site" check_out \
  "without enroot_compat the site's and the user's files are not applied" "none none" \
  en start "$W/bb+1.0.sqsh" sh -c 'echo ${SITE_VAR:-none} ${USER_LEVEL:-none}'
printf '#!/bin/sh\necho "site hook says no" >&2\nexit 3\n' >"$W/site/hooks.d/30-enroot-fail.sh"
chmod 755 "$W/site/hooks.d/30-enroot-fail.sh"
out=$(EXTRA_ENV="$SITE_ENV" en start "$W/bb+1.0.sqsh" true 2>&1) && t_fail "a failing enroot hook fails the start" "$out" ||
  { grep -q "30-enroot-fail.sh failed (exit status 3): site hook says no" <<<"$out" &&
    t_pass "a failing enroot hook fails the start, named with its stderr" || t_fail "failing enroot hook" "$out"; }
rm -f "$W/site/hooks.d/30-enroot-fail.sh"
pgrep -u $TUSER -f "$W" >/dev/null && t_fail "nothing left running" "$(pgrep -u $TUSER -a -f "$W")" ||
  t_pass "nothing left running"
[ -z "$(ls -A $W/run 2>/dev/null | grep -vx blocks)" ] && t_pass "no state left" || t_fail "no state left" "$(ls -A $W/run)"
t_done
