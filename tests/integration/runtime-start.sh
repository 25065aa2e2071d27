#!/bin/bash
# Integration tests for the container half of the runtime: skiff start, exec,
# create/list/remove/export, hooks, doctor. Runs as root (CI) but exercises
# skiff as a NON-root user (skifftest, created if missing), on a busybox
# squashfs built here.
# Host setup done here: `chmod 0666 /dev/fuse` (a documented host requirement;
# left in place, other tests rely on it too).
source "$(dirname "$0")/../lib.sh"
SKIFF=$BUILD/bin/skiff
TUSER=${SKIFF_TEST_USER:-skifftest}

if [ "$(id -u)" -ne 0 ]; then t_skip "runtime-start" "must run as root to create the test user"; t_done; fi
for p in busybox mksquashfs setpriv findmnt; do
  command -v $p >/dev/null || { t_skip "runtime-start" "$p missing (scripts/install-deps test)"; t_done; }
done
[ -x "$SKIFF" ] || { t_fail "runtime-start" "$SKIFF not built"; t_done; }
id -u $TUSER >/dev/null 2>&1 || useradd -m $TUSER || { t_fail "create user $TUSER"; t_done; }
TUID=$(id -u $TUSER)
[ -c /dev/fuse ] && chmod 0666 /dev/fuse

W=$(mktemp -d /tmp/skiff-rt-start.XXXXXX)
chmod 0755 "$W"
cleanup() { pkill -KILL -u $TUSER -f "$W" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT

# ---- the test image ----
R=$W/rootfs
mkdir -p $R/{bin,etc,tmp,proc,sys,dev,work,.skiff}
cp "$(command -v busybox)" $R/bin/busybox
for a in $($R/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox $R/bin/$a; done
printf 'root:x:0:0:root:/root:/bin/sh\n%s:x:%s:%s::/tmp:/bin/sh\n' $TUSER $TUID $TUID >$R/etc/passwd
printf 'root:x:0:\n' >$R/etc/group
echo '127.0.0.1 localhost' >$R/etc/hosts
cat >$R/.skiff/config.json <<'EOF'
{"Env":["PATH=/bin","FROM_IMAGE=1","OVER=image"],"WorkingDir":"/work","Cmd":["echo","default-cmd"]}
EOF
cp $R/bin/busybox $R/bin/busybox-suid && chmod 4755 $R/bin/busybox-suid
mkdir -p $W/outside
ln -s $W/outside $R/escape            # an absolute host path
ln -s ../../../../../../$W/outside $R/escape2   # ../ climbing out
mksquashfs $R $W/bb.sqsh -quiet -noappend -all-root >/dev/null || { t_fail "build image"; t_done; }
# a second image: Entrypoint, no WorkingDir
sed -i 's|"WorkingDir":"/work",||; s|"Cmd":\["echo","default-cmd"\]|"Entrypoint":["echo","ep"],"Cmd":["c1"]|' $R/.skiff/config.json
mksquashfs $R $W/ep.sqsh -quiet -noappend -all-root >/dev/null
# a third image: no /etc/hosts (the host's cannot be mounted into a read-only image)
mv $R/etc/hosts $W/hosts.saved && mksquashfs $R $W/nohosts.sqsh -quiet -noappend -all-root >/dev/null && mv $W/hosts.saved $R/etc/hosts
echo notsquash >$W/bad.sqsh
mkdir -p $W/data $W/run $W/ucache $W/hooks $W/share $W/ro && echo hostfile >$W/share/f.txt && echo rodata >$W/ro/r.txt
chown -R $TUSER: $W/data $W/run $W/ucache $W/share $W/hooks
chmod 0644 $W/*.sqsh

# run as the test user, clean env, isolated data/runtime paths
as_user() {
  (cd "$W" && setpriv --reuid=$TUID --regid=$TUID --init-groups \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/home/$TUSER \
    SKIFF_DATA_PATH=$W/data SKIFF_RUNTIME_PATH=$W/run SKIFF_BLOCK_CACHE_PATH=$W/ucache/blocks ${EXTRA_ENV:-} "$@")
}
st() { as_user "$SKIFF" start "$@"; }

# the containers' state in a runtime directory (its block cache aside)
state_in() { ls -A "$1" 2>/dev/null | grep -vx blocks; }

# after each case: nothing of ours still running, no state left
leftovers() {
  # (other suites may run jobs as the same user: look only at ours)
  local procs; procs=$(pgrep -u $TUSER -a -f "$W" || true)
  [ -z "$procs" ] || { echo "left running: $procs"; return 1; }
  # (the block cache lives in runtime_path/blocks: a cache, not state)
  [ -z "$(state_in $W/run)" ] || { echo "state left: $(state_in $W/run)"; return 1; }
  ! findmnt -rn -o TARGET | grep -q "$W" || { echo "mount left on host"; return 1; }
}

check_rc() { # NAME WANT CMD...
  local name=$1 want=$2; shift 2
  local out rc; out=$("$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ]; then t_pass "$name"; else t_fail "$name" "rc=$rc want $want: $out"; fi
}
check_out() { # NAME EXPECTED CMD...
  local name=$1 want=$2; shift 2
  local out; out=$("$@" 2>&1)
  if [ "$out" = "$want" ]; then t_pass "$name"; else t_fail "$name" "got '$out' want '$want'"; fi
}

# ---- exit status ----
check_rc "start true exits 0" 0 st $W/bb.sqsh true
check_rc "start false exits 1" 1 st $W/bb.sqsh false
check_rc "command exit status returned" 7 st $W/bb.sqsh sh -c 'exit 7'
check_rc "signal death is 128+N" 137 st $W/bb.sqsh sh -c 'kill -9 $$'
check_rc "missing command is 127" 127 st $W/bb.sqsh /no/such/cmd
check_out "default Cmd from image" "default-cmd" st $W/bb.sqsh
check_out "Entrypoint + Cmd" "ep c1" st $W/ep.sqsh
check_out "Entrypoint + user args" "ep x" st $W/ep.sqsh x
check_out "--no-entrypoint" "x" st --no-entrypoint $W/ep.sqsh echo x
t_check "nothing left after runs" leftovers

# ---- identity, privileges ----
check_out "runs as the user" "$TUID" st $W/bb.sqsh id -u
check_out "--remap-root gives uid 0" "0 0" st --remap-root $W/bb.sqsh sh -c 'echo $(id -u) $(id -g)'
check_out "no capabilities, no_new_privs" "CapBnd:	0000000000000000 CapEff:	0000000000000000 NoNewPrivs:	1" \
  st --remap-root $W/bb.sqsh sh -c 'grep -E "^(CapEff|NoNewPrivs|CapBnd)" /proc/self/status | sort | tr "\n" " " | sed "s/ $//"'
out=$(st $W/bb.sqsh sh -c 'ls -l /bin/busybox-suid; /bin/busybox-suid sh -c "grep -E ^Uid: /proc/self/status"' 2>&1)
if grep -q '^-rws' <<<"$out" && grep -Eq "^Uid:\s+$TUID\s+$TUID\s+$TUID\s+$TUID" <<<"${out#*$'\n'}"; then
  t_pass "setuid file grants nothing"
else t_fail "setuid file grants nothing" "$out"; fi
out=$(st $W/bb.sqsh cat /proc/self/mountinfo)
if awk '{print $6}' <<<"$out" | grep -v nosuid | grep -q .; then t_fail "every mount nosuid" "$out"; else t_pass "every mount nosuid"; fi
if awk '$5 !~ "^/dev/(null|zero|full|random|urandom|tty|pts)$" {print $6}' <<<"$out" | grep -v nodev | grep -q .; then
  t_fail "every mount but device binds nodev" "$out"; else t_pass "every mount but device binds nodev"; fi

# ---- root filesystem ----
check_rc "root is read-only by default" 1 st $W/bb.sqsh sh -c 'echo x > /newfile'
check_out "--rw root is writable (overlay)" "x" st --rw $W/bb.sqsh sh -c 'echo x > /newfile && cat /newfile'
check_out "--rw changes do not persist" "gone" st $W/bb.sqsh sh -c 'test -e /newfile || echo gone'
check_out "/tmp is a writable tmpfs" "tmpfs ok" st $W/bb.sqsh sh -c 'echo ok > /tmp/t && echo "$(awk "\$2==\"/tmp\"{print \$3}" /proc/mounts) $(cat /tmp/t)"'
check_out "minimal /dev" "full mqueue null ptmx pts random shm tty urandom zero" \
  st $W/bb.sqsh sh -c 'ls /dev | grep -v -e ^fd -e ^std | tr "\n" " " | sed "s/ $//"'
check_out "/dev/null and /dev/zero work" "5" st $W/bb.sqsh sh -c 'echo x > /dev/null && head -c 5 /dev/zero | wc -c'
check_out "host hostname and /etc/hosts" "$(hostname) $(md5sum </etc/hosts)" st $W/bb.sqsh sh -c 'echo "$(hostname) $(md5sum </etc/hosts)"'
# the image has no resolv.conf or hostname (made in the upper before the
# overlay), then one whose /etc is a symlink (made through it)
etc_case() {
  local want="" got f
  for f in /etc/resolv.conf /etc/hostname; do [ -r $f ] && want="$want $(md5sum <$f)"; done
  got=$(st $W/bb.sqsh sh -c 'for f in /etc/resolv.conf /etc/hostname; do [ -e $f ] && echo -n " $(md5sum <$f)"; done')
  [ "$got" = "$want" ] && echo same || echo "differ: '$got' '$want'"
}
check_out "host resolv.conf and hostname where the image has none" "same" etc_case
if [ ! -e $W/etclink.sqsh ]; then
  cp -a $R $W/etclink && mv $W/etclink/etc $W/etclink/etc.real && ln -s etc.real $W/etclink/etc &&
    rm -f $W/etclink/etc.real/hosts &&
    mksquashfs $W/etclink $W/etclink.sqsh -quiet -noappend -all-root >/dev/null && chmod 0644 $W/etclink.sqsh
fi
check_out "an image whose /etc is a symlink keeps it, host files mounted through it" \
  "$(md5sum </etc/hosts) root" st --no-entrypoint $W/etclink.sqsh sh -c 'echo "$(md5sum </etc/hosts) $(head -1 /etc/passwd | cut -d: -f1)"'
check_out "/sys is read-only" "ro" st $W/bb.sqsh sh -c 'awk "\$5==\"/sys\"{print substr(\$6,1,2)}" /proc/self/mountinfo'

# ---- env and workdir ----
check_out "image env + -e precedence" "1 cli" st -e OVER=cli $W/bb.sqsh sh -c 'echo $FROM_IMAGE $OVER'
io_case() { echo in-data | st $W/bb.sqsh sh -c 'cat; echo err-data >&2' 2>&1 | paste -sd'|'; }
check_out "stdin, stdout and stderr are the caller's" "in-data|err-data" io_case
home_case() {
  echo "$(EXTRA_ENV=TERM=xterm-t st $W/bb.sqsh sh -c 'echo $HOME $TERM')|$(EXTRA_ENV=TERM=xterm-t st --remap-root $W/bb.sqsh sh -c 'echo $HOME $TERM')"
}
check_out "HOME (--remap-root: /root) and TERM from the caller" "/home/$TUSER xterm-t|/root xterm-t" home_case
check_out "image WorkingDir" "/work" st $W/bb.sqsh pwd
check_out "--workdir" "/tmp" st --workdir /tmp $W/bb.sqsh pwd
t_fails_with "missing workdir is a clear error" "working directory.*/nope" st --workdir /nope $W/bb.sqsh true
check_out "read-only image without /etc/hosts starts" "started" st --no-entrypoint $W/nohosts.sqsh echo started
check_out "no WorkingDir means /" "/" st --no-entrypoint $W/ep.sqsh pwd

# ---- mounts ----
check_out "--mount-home: the home directory at its own path" "$(getent passwd $TUSER | cut -d: -f6) 1" \
  st --mount-home $W/bb.sqsh sh -c "d=$(getent passwd $TUSER | cut -d: -f6); echo \$d \$(grep -c \" \$d \" /proc/mounts)"
check_out "--mount-home --remap-root: the home at its own path, /root a private tmpfs, HOME=/root (pyxis)" \
  "/root tmpfs 1" st --mount-home --remap-root $W/bb.sqsh sh -c \
  "echo \$HOME \$(awk '\$2 == \"/root\" {print \$3}' /proc/mounts) \$(grep -c ' $(getent passwd $TUSER | cut -d: -f6) ' /proc/mounts)"
check_out "bind a file" "hostfile" st -m $W/share/f.txt:/etc/f.txt $W/bb.sqsh cat /etc/f.txt
check_out "bind a dir, writable" "hostfile w" st -m $W/share:/mnt/share $W/bb.sqsh sh -c 'echo w > /mnt/share/w && cat /mnt/share/f.txt /mnt/share/w | tr "\n" " " | sed "s/ $//"'
check_rc "ro mount enforced" 1 st -m $W/share:/mnt/share:ro $W/bb.sqsh sh -c 'echo x > /mnt/share/x'
check_out "tmpfs mount" "tmpfs" st -m tmpfs:/scratch:size=1m $W/bb.sqsh sh -c 'awk "\$2==\"/scratch\"{print \$3}" /proc/mounts'
check_out "x-create=dir" "yes" st -m $W/share/f.txt:/made/here:x-create=file+ro $W/bb.sqsh sh -c 'test -f /made/here && echo yes'
check_out "a bound character device stays usable (gpu hook binds)" "ok" st --rw -m /dev/null:/devnull:x-create=file $W/bb.sqsh sh -c 'echo x > /devnull && echo ok'
t_fails_with "missing source is a clear error" "source path does not exist: $W/nope" st -m $W/nope:/x $W/bb.sqsh true
t_fails_with "bad mount flag is a clear error" "unknown mount flag 'bogus'" st -m $W/share:/x:bogus $W/bb.sqsh true
check_out "a relative destination (./) starts at the root" "hostfile" st -m $W/share:./mnt/rel $W/bb.sqsh cat /mnt/rel/f.txt
t_fails_with "a destination neither absolute nor ./relative is refused (pyxis)" "neither absolute nor relative: write /mnt" \
  st -m $W/share:mnt $W/bb.sqsh true
check_out "umount:DST takes a default mount away (pyxis)" "0" st -m umount:/tmp $W/bb.sqsh sh -c 'grep -c " /tmp " /proc/mounts'
check_out "umount:DST after --mount-home takes the home away" "0" \
  st --mount-home -m umount:$(getent passwd $TUSER | cut -d: -f6) $W/bb.sqsh sh -c "grep -c ' $(getent passwd $TUSER | cut -d: -f6) ' /proc/mounts"
t_fails_with "umount:DST where nothing is mounted is an error" "umount /etc: nothing is mounted there" \
  st -m umount:/etc $W/bb.sqsh true
check_rc "umount:DST:nofail where nothing is mounted" 0 st -m umount:/etc:nofail $W/bb.sqsh true
check_out "/dev/mqueue exists (pyxis), /dev/shm is the host's" "d $(stat -c %d /dev/shm)" \
  st $W/bb.sqsh sh -c 'echo $(stat -c %F /dev/mqueue | cut -c1) $(stat -c %d /dev/shm)'
t_fails_with "a destination whose '..' leaves the root is refused (EXDEV)" "Invalid cross-device link" \
  st -m $W/share:../x $W/bb.sqsh true
# escape attempts: symlinks in the image used as mount destinations
st -m $W/share:/escape/x $W/bb.sqsh true >/dev/null 2>&1
st -m $W/share:/escape2/y $W/bb.sqsh true >/dev/null 2>&1
if [ -e $W/outside/x ] || [ -e $W/outside/y ]; then t_fail "symlinked destination stays inside the root" "created on the host"
else
  out=$(st -m $W/share:/escape/x $W/bb.sqsh sh -c "cat $W/outside/x/f.txt" 2>&1)
  if [ "$out" = hostfile ]; then t_pass "symlinked destination stays inside the root"
  else t_fail "symlinked destination stays inside the root" "$out"; fi
fi
check_out "..-symlink destination clamped at the root" "hostfile" st -m $W/share:/escape2/y $W/bb.sqsh cat $W/outside/y/f.txt
t_fails_with "not a squashfs image" "not a squashfs image" st $W/bad.sqsh true
t_fails_with "no such image or name" "neither a squashfs file nor a named container" st $W/none.sqsh true

# ---- signals ----
mkdir -p $W/share/sig && chown $TUSER: $W/share/sig
st -m $W/share/sig:/sig $W/bb.sqsh sh -c 'trap "echo term > /sig/out; exit 3" TERM; echo $$ > /sig/pid; while :; do sleep 0.1; done' &
spid=$!
for _ in $(seq 100); do [ -s $W/share/sig/pid ] && break; sleep 0.05; done
# skiff exec joins the running container (by the command's pid)
cpid=$(cat $W/share/sig/pid 2>/dev/null)
check_out "exec into a running container" "image /work 1" as_user "$SKIFF" exec "$cpid" sh -c 'echo $OVER $(pwd) $(ls /sig | grep -c pid)'
t_fails_with "exec into a non-container pid" "not in a skiff container|is it running, and yours" as_user "$SKIFF" exec $$ true
# a process that joined with skiff exec and outlives the command goes at stop
# (sleeps of durations no other run of this test uses: other checkouts run it
# at the same time as the same user)
SLP=1$$
as_user "$SKIFF" exec "$cpid" sh -c "sleep ${SLP}4 & echo \$! >/sig/joined" >/dev/null 2>&1
kill -TERM "$(pgrep -o -u $TUSER -f "$SKIFF start -m $W/share/sig")"
wait $spid; rc=$?
if [ "$rc" -eq 3 ] && [ "$(cat $W/share/sig/out 2>/dev/null)" = term ]; then t_pass "TERM forwarded to the command"
else t_fail "TERM forwarded to the command" "rc=$rc out=$(cat $W/share/sig/out 2>&1)"; fi
if [ -s $W/share/sig/joined ] && ! pgrep -u $TUSER -f "^sleep ${SLP}4\$" | xargs -r ps -o stat= -p 2>/dev/null | grep -qv '^Z'; then
  t_pass "a process joined with skiff exec is killed at stop"
else t_fail "a process joined with skiff exec is killed at stop" "$(pgrep -a -u $TUSER -f "^sleep ${SLP}4\$")"; fi
st $W/bb.sqsh sh -c "sleep ${SLP}3 & exit 0" >/dev/null 2>&1
st $W/bb.sqsh sh -c "(sh -c 'sleep ${SLP}5 &' &) ; sleep 0.1; exit 0" >/dev/null 2>&1
# (a killed orphan may stay a zombie until this machine's init reaps it: not running)
if pgrep -u $TUSER -f "^sleep ${SLP}[35]\$" | xargs -r ps -o stat= -p 2>/dev/null | grep -qv '^Z'; then t_fail "background processes (also double-forked) killed at exit"; else t_pass "background processes (also double-forked) killed at exit"; fi
t_check "nothing mounted or left after signals" leftovers

# ---- hooks ----
H=$W/hooks
cat >$H/10-first <<EOF
#!/bin/sh
echo "first \$SKIFF_PID \$(test -f \$SKIFF_ROOTFS/.skiff/config.json && echo rootfs)" >> $W/share/hooklog
mkdir -p "\$SKIFF_STATE_DIR/scratch/sub" && touch "\$SKIFF_STATE_DIR/scratch/sub/f"   # hooks may keep scratch there
echo OVER=hook >> "\$SKIFF_ENV_FILE"
echo HOOKONLY=yes >> "\$SKIFF_ENV_FILE"
echo "$W/ro /hookmnt none bind,ro,x-create=dir" >> "\$SKIFF_MOUNTS_FILE"
EOF
cat >$H/20-second <<EOF
#!/bin/sh
echo second >> $W/share/hooklog
EOF
echo "not executable" >$H/15-README
chmod 755 $H/10-first $H/20-second; chown -R $TUSER: $H
rm -f $W/share/hooklog
EXTRA_ENV="SKIFF_HOOKS_DIR=$H"
check_out "hook env file and mounts file applied" "hook yes rodata" st $W/bb.sqsh sh -c 'echo $OVER $HOOKONLY $(cat /hookmnt/r.txt)'
if grep -Eq '^first [0-9]+ rootfs$' $W/share/hooklog && [ "$(sed -n 2p $W/share/hooklog)" = second ] && [ "$(wc -l <$W/share/hooklog)" = 2 ]; then
  t_pass "hooks run in lexical order with SKIFF_ROOTFS/SKIFF_PID"
else t_fail "hooks run in lexical order with SKIFF_ROOTFS/SKIFF_PID" "$(cat $W/share/hooklog)"; fi
check_out "-e beats the hook env file" "cli" st -e OVER=cli $W/bb.sqsh sh -c 'echo $OVER'
# the admin's hooks_dir (skiff.conf) and the user's $SKIFF_HOOKS_DIR both run, merged
# by name; a name in both runs the admin's first (doc/hooks.md)
AH=$W/adminhooks
mkdir -p $AH
printf '#!/bin/sh\necho admin-05 >> %s\n' $W/share/hooklog >$AH/05-admin
printf '#!/bin/sh\necho admin-20 >> %s\n' $W/share/hooklog >$AH/20-second
chmod 755 $AH $AH/05-admin $AH/20-second
printf 'hooks_dir = %s\n' $AH >$W/admin.conf && chmod 644 $W/admin.conf
rm -f $W/share/hooklog
EXTRA_ENV="SKIFF_CONFIG=$W/admin.conf SKIFF_HOOKS_DIR=$H"
check_rc "admin and user hook directories: start" 0 st $W/bb.sqsh true
got=$(sed 's/^first .*/first/' $W/share/hooklog 2>/dev/null | tr '\n' ' ')
if [ "$got" = "admin-05 first admin-20 second " ]; then t_pass "admin and user hook directories both run, in name order"
else t_fail "admin and user hook directories both run, in name order" "got: $got"; fi
EXTRA_ENV="SKIFF_HOOKS_DIR=$H"
printf '#!/bin/sh\necho boom >&2\nexit 4\n' >$H/30-fail; chmod 755 $H/30-fail; chown $TUSER: $H/30-fail
t_fails_with "failing hook aborts, named, with status and stderr" "hook $H/30-fail failed \(exit status 4\): boom" st $W/bb.sqsh true
rm -f $H/30-fail
printf '#!/bin/sh\nsleep 30\n' >$H/40-slow; chmod 755 $H/40-slow; chown $TUSER: $H/40-slow
EXTRA_ENV="SKIFF_HOOKS_DIR=$H SKIFF_HOOK_TIMEOUT=1"
t_fails_with "hung hook is killed after the timeout" "hook $H/40-slow failed \(timed out after 1000 ms\)" st $W/bb.sqsh true
rm -f $H/40-slow
EXTRA_ENV=
t_check "nothing left after hooks" leftovers

# ---- named containers ----
check_rc "create" 0 as_user "$SKIFF" create -n c1 $W/bb.sqsh
t_fails_with "create twice is refused" "exists" as_user "$SKIFF" create -n c1 $W/bb.sqsh
t_fails_with "bad name refused" "may only contain" as_user "$SKIFF" create -n ../x $W/bb.sqsh
check_out "list" "c1	$W/bb.sqsh" as_user "$SKIFF" list
check_rc "named start writes persist (1)" 0 st c1 sh -c 'echo persisted > /data.txt && rm /bin/vi'
check_out "named start writes persist (2)" "persisted novi" st c1 sh -c 'echo $(cat /data.txt) $(test -e /bin/vi || echo novi)'
st c1 sh -c 'touch /busy; sleep 3' >/dev/null 2>&1 &
bpid=$!
for _ in $(seq 100); do as_user test -e $W/data/containers/c1/upper/busy && break; sleep 0.05; done
out=$(st c1 sh -c 'touch /second; echo ran' 2>&1)
grep -q "container 'c1' is in use: this one starts from its files" <<<"$out" && grep -qx ran <<<"$out" &&
  t_pass "a named container in use: a second start runs, told its changes are not kept" ||
  t_fail "a named container in use: a second start" "$out"
kill -TERM "$(pgrep -o -u $TUSER -f "$SKIFF start c1 sh")" 2>/dev/null; wait $bpid
check_rc "the second start's changes were not kept" 1 as_user test -e $W/data/containers/c1/upper/second
check_rc "export" 0 as_user "$SKIFF" export -o $W/share/c1.sqsh c1
check_out "start the exported image" "persisted novi default-cmd" st $W/share/c1.sqsh sh -c 'echo $(cat /data.txt) $(test -e /bin/vi || echo novi) $(echo default-cmd)'
check_rc "remove" 0 as_user "$SKIFF" remove c1
check_out "list after remove" "" as_user "$SKIFF" list
t_fails_with "start a removed name" "neither a squashfs file nor a named container" st c1 true
t_check "nothing left after named containers" leftovers

# ---- extraction fallback: /dev/fuse unusable for this user ----
touch $W/nofuse && chmod 000 $W/nofuse
out=$(unshare -m sh -c "mount --bind $W/nofuse /dev/fuse && cd $W && setpriv --reuid=$TUID --regid=$TUID --init-groups env -i PATH=/usr/bin:/bin SKIFF_RUNTIME_PATH=$W/run $SKIFF start $W/bb.sqsh sh -c 'head -c 7 /.skiff/config.json; echo'" 2>&1)
if [ "$out" = '{"Env":' ] ; then t_pass "extraction fallback without FUSE"; else t_fail "extraction fallback without FUSE" "$out"; fi

# ---- the library the way the SPANK plugin drives it (root, euid = user) ----
# (tests/integration/runtime-plugin-sim.c, built by `make test`)
if t_program runtime-plugin-sim "plugin flow: the driver"; then
  out=$(cd $W && SKIFF_RUNTIME_PATH=$W/run "$BUILD/tests/runtime-plugin-sim" $TUID $TUID $W/bb.sqsh n1.42.0 2 \
        sh -c 'echo "r$RANK $(id -u) $(pwd) $OVER $(grep -c "^Seccomp:.2" /proc/self/status)"' 2>&1)
  if grep -q "state $W/run/n1.42.0" <<<"$out" && grep -qx "r0 $TUID /work image 1" <<<"$out" &&
     grep -qx "r1 $TUID /work image 1" <<<"$out"; then t_pass "plugin flow: start as the user (the helper), join per task, stop"
  else t_fail "plugin flow: start as the user (the helper), join per task, stop" "$out"; fi
  t_check "nothing left after the plugin flow" leftovers
fi

# ---- the import half's contract: an image from `skiff import` starts with its config ----
if command -v umoci >/dev/null; then
  mkdir -p $W/e2e && cp -a $R $W/e2e/tree && rm -rf $W/e2e/tree/.skiff
  if (cd $W/e2e && umoci init --layout oci && umoci new --image oci:t && umoci insert --image oci:t tree / &&
      umoci config --image oci:t --config.env=E2E=yes --config.workingdir=/bin --config.cmd=echo --config.cmd=from-cmd) >$W/e2e.log 2>&1; then
    chown -R $TUSER: $W/e2e
    as_user "$SKIFF" import -o $W/e2e/t.sqsh oci:$W/e2e/oci:t >>$W/e2e.log 2>&1
    check_out "skiff import'ed image: Cmd, Env, WorkingDir" "from-cmd|yes /bin" \
      sh -c "echo \$(cd $W && setpriv --reuid=$TUID --regid=$TUID --init-groups env -i PATH=/usr/bin:/bin SKIFF_RUNTIME_PATH=$W/run $SKIFF start $W/e2e/t.sqsh)'|'\$(cd $W && setpriv --reuid=$TUID --regid=$TUID --init-groups env -i PATH=/usr/bin:/bin SKIFF_RUNTIME_PATH=$W/run $SKIFF start $W/e2e/t.sqsh sh -c 'echo \$E2E \$(pwd)')"
  else t_fail "build an OCI image with umoci" "$(cat $W/e2e.log)"; fi
else t_skip "skiff import'ed image" "umoci missing (scripts/install-deps test)"; fi

# ---- file data through the FUSE server: parallel readers, warming ----
# Files of awkward sizes (empty, around the 128 KiB block size, fragments,
# several blocks) in a zstd image, read back by 4 processes at once; every
# sum must match the host's. Then a dynamically linked command (the host's
# `true` with its libraries), whose executable and ELF interpreter are warmed.
D=$W/data-img
mkdir -p $D/bin $D/files
cp $R/bin/busybox $D/bin/ && for a in sh sha256sum cat; do ln -s busybox $D/bin/$a; done
i=0
for n in 0 1 4095 131071 131072 131073 300000 1500000 3000000; do
  head -c $n /dev/urandom >$D/files/f$i; i=$((i + 1))
done
(cd $D/files && sha256sum f* >$W/data-img.sums)
mksquashfs $D $W/data.sqsh -quiet -noappend -all-root -comp zstd >/dev/null && chmod 0644 $W/data.sqsh
out=$(st $W/data.sqsh sh -c 'cd /files; for k in 1 2 3 4; do sha256sum f* >/tmp/s$k & done; wait; cat /tmp/s1 /tmp/s2 /tmp/s3 /tmp/s4' 2>&1)
if [ "$out" = "$(cat $W/data-img.sums $W/data-img.sums $W/data-img.sums $W/data-img.sums)" ]; then
  t_pass "file data: 4 parallel readers get the image's bytes"
else t_fail "file data: 4 parallel readers get the image's bytes" "$(diff <(echo "$out") <(cat $W/data-img.sums{,,,}) | head -5)"; fi
T=$W/dyn-img
mkdir -p $T/bin
cp "$(type -P true)" $T/bin/true
for lib in $(ldd "$(type -P true)" | grep -o '/[^ ]*'); do mkdir -p $T$(dirname $lib) && cp -L $lib $T$lib; done
mksquashfs $T $W/dyn.sqsh -quiet -noappend -all-root >/dev/null && chmod 0644 $W/dyn.sqsh
check_rc "a dynamically linked command starts (warmed with its interpreter)" 0 st $W/dyn.sqsh /bin/true
check_rc "a missing command still exits 127 (nothing to warm)" 127 st $W/dyn.sqsh /bin/nothing-here
st_nowarm() { EXTRA_ENV=SKIFF_NO_WARM=1 st "$@"; }
check_rc "the same without warming (SKIFF_NO_WARM)" 0 st_nowarm $W/dyn.sqsh /bin/true
# A command that exits at once while its 8 MB executable is still being
# warmed: the holder is killed with a warming thread waiting on the FUSE
# server. Every start must come back, and leave nothing (a server inside the
# holder's own process once left it stuck in the kernel for good).
B=$W/big-img
mkdir -p $B/bin
{ cat $R/bin/busybox; head -c 8000000 /dev/urandom; } >$B/bin/big && chmod 755 $B/bin/big
mksquashfs $B $W/big.sqsh -quiet -noappend -all-root -comp zstd >/dev/null && chmod 0644 $W/big.sqsh
hung=0
for i in $(seq 20); do
  timeout -s KILL 20 setpriv --reuid=$TUID --regid=$TUID --init-groups env -i PATH=/bin SKIFF_RUNTIME_PATH=$W/run \
    $SKIFF start $W/big.sqsh /bin/big >/dev/null 2>&1
  [ $? -eq 137 ] && hung=$((hung + 1))
done
if [ $hung -eq 0 ] && ! ps -u $TUSER -o stat=,args= | grep "$W" | grep -q '^[DZ]'; then
  t_pass "killed while warming: 20 starts come back, nothing stuck"
else t_fail "killed while warming: 20 starts come back, nothing stuck" "$hung hung; $(ps -u $TUSER -o pid,stat,args | grep "$W")"; fi
# skiff start killed outright (SIGKILL: no chance to clean up): the holder
# and the command die with it; the state it leaves is removed by the next
# start (and by skiff list).
st $W/bb.sqsh sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 &
kpid=$!
for _ in $(seq 100); do [ -n "$(ls -A $W/run 2>/dev/null)" ] && break; sleep 0.05; done
sleep 0.2
pkill -KILL -P $kpid 2>/dev/null; kill -KILL $kpid 2>/dev/null; wait $kpid 2>/dev/null
for _ in $(seq 100); do pgrep -u $TUSER -f "$W/bb.sqsh" >/dev/null || break; sleep 0.05; done
stale=$(state_in $W/run | wc -l)
st $W/bb.sqsh true
if [ "$stale" -ge 1 ] && [ -z "$(state_in $W/run)" ] && ! pgrep -u $TUSER -f "$W/bb.sqsh" >/dev/null; then
  t_pass "a killed skiff start: nothing runs on, its state goes at the next start"
else t_fail "a killed skiff start: nothing runs on, its state goes at the next start" "stale=$stale left=$(state_in $W/run) procs=$(pgrep -u $TUSER -af "$W/bb.sqsh")"; fi
# xattrs through the FUSE server: an image with them answers list/get/size
# query/ENODATA/ERANGE; one without an xattr table says "not supported".
X=$W/xattr-img
mkdir -p $X/bin && echo hi >$X/f
if ! t_program xattr-probe "xattr probe"; then
  :
elif ! cp "$BUILD/tests/xattr-probe" $X/bin/xa; then
  t_fail "xattr probe: copy it into the image"
elif ! python3 -c "import os,sys; os.setxattr(sys.argv[1], 'user.skiff', b'hello')" $X/f 2>>$W/xa.log; then
  t_skip "xattrs of an image" "$(dirname $W) takes no user xattrs here: $(tail -1 $W/xa.log)"
else
  mksquashfs $X $W/xa.sqsh -quiet -noappend -all-root -xattrs >/dev/null
  mksquashfs $X $W/noxa.sqsh -quiet -noappend -all-root -no-xattrs >/dev/null
  chmod 0644 $W/xa.sqsh $W/noxa.sqsh
  check_out "xattrs of an image: list, get, size, missing, too small" \
    "$(printf 'name user.skiff\nvalue hello (size query 5)\nmissing: No data available\nsmall buffer: Numerical result out of range')" \
    st $W/xa.sqsh /bin/xa /f
  check_out "an image without xattrs: not supported" \
    "$(printf 'list: Operation not supported\nget: Operation not supported\nmissing: Operation not supported\nsmall buffer: Operation not supported')" \
    st $W/noxa.sqsh /bin/xa /f
fi
# ---- the block cache (runtime/lib/blockcache.h) ----
# Compressible files (so their blocks are compressed and cached): several
# blocks, a fragment tail, a sparse file with a hole. The first start fills
# the cache, the next ones are served from it.
B=$W/bc-img
mkdir -p $B/bin $B/files
cp $R/bin/busybox $B/bin/ && for a in sh sha256sum cat; do ln -s busybox $B/bin/$a; done
for n in 1000 131072 400000 1500000; do head -c $((n * 3 / 4 + 3)) /dev/urandom | base64 -w0 | head -c $n >$B/files/c$n; done
head -c 5000 /dev/urandom | base64 -w0 >$B/files/sparse && truncate -s 700000 $B/files/sparse && echo skiff-marker-end >>$B/files/sparse
(cd $B/files && sha256sum * >$W/bc.sums)
mkbc() { mksquashfs $B $1 -quiet -noappend -all-root -comp zstd >/dev/null && chmod 0644 $1; }
mkbc $W/bc.sqsh
sums_ok() { # NAME [st args]: the files' sums in the container equal the host's
  local name=$1; shift
  local out; out=$(st "$@" $W/bc.sqsh sh -c 'cd /files && sha256sum *' 2>&1)
  if [ "$out" = "$(cat $W/bc.sums)" ]; then t_pass "$name"; else t_fail "$name" "$(diff <(echo "$out") $W/bc.sums | head -4)"; fi
}
rm -rf $W/ucache/blocks
sums_ok "block cache: the first start fills it"
bcfile=$(ls $W/ucache/blocks/img-* 2>/dev/null)
if [ -n "$bcfile" ] && [ "$(stat -c %U $bcfile)" = $TUSER ] && [ "$(du -k $bcfile | cut -f1)" -gt 1000 ]; then
  t_pass "block cache: one file per image, the user's, holding the blocks read"
else t_fail "block cache: one file per image, the user's, holding the blocks read" "$(ls -ls $W/ucache/blocks 2>&1)"; fi
out=$(st $W/bc.sqsh sh -c 'cd /files; for k in 1 2 3 4; do sha256sum * >/tmp/s$k & done; wait; cat /tmp/s1 /tmp/s2 /tmp/s3 /tmp/s4' 2>&1)
if [ "$out" = "$(cat $W/bc.sums{,,,})" ]; then t_pass "block cache: 4 parallel readers served from it"
else t_fail "block cache: 4 parallel readers served from it" "$(diff <(echo "$out") <(cat $W/bc.sums{,,,}) | head -4)"; fi
# served from it indeed: a change planted in the cached blocks shows (the
# cache is the user's own data, like the image), and goes with the file
cp $bcfile $W/bc.saved
python3 - $bcfile <<'PY'
import sys
f = open(sys.argv[1], "r+b"); data = bytearray(f.read())
i = data.find(b"skiff-marker-end", 4096)   # the sparse file's last line, in a cached block
if i >= 0: f.seek(i); f.write(b"SKIFF-MARKER-END")
PY
out=$(st $W/bc.sqsh sh -c 'tail -c 17 /files/sparse' 2>&1)
if [ "$out" = SKIFF-MARKER-END ]; then t_pass "block cache: later starts read it, not the image"; else t_fail "block cache: later starts read it, not the image" "$out"; fi
cp $W/bc.saved $bcfile
# the image replaced at the same path (a new inode), then changed in place
# (same inode): never the old blocks
echo changed >>$B/files/c1000 && (cd $B/files && sha256sum * >$W/bc.sums)
mkbc $W/bc2.sqsh && mv $W/bc2.sqsh $W/bc.sqsh
sums_ok "block cache: a re-imported image is not served stale blocks"
echo again >>$B/files/c400000 && (cd $B/files && sha256sum * >$W/bc.sums)
mkbc $W/bc2.sqsh && cat $W/bc2.sqsh >$W/bc.sqsh && rm $W/bc2.sqsh
sums_ok "block cache: an image rewritten in place is not served stale blocks"
# garbage where the cache was: replaced
for f in $W/ucache/blocks/img-*; do head -c 5000 /dev/urandom >$f; done
sums_ok "block cache: a corrupt cache file is replaced"
EXTRA_ENV="SKIFF_BLOCK_CACHE_SIZE=1" sums_ok "block cache: smaller than the files (1 MiB)"
EXTRA_ENV="SKIFF_BLOCK_CACHE_SIZE=1" sums_ok "block cache: smaller than the files, second start"
if [ "$(du -sk $W/ucache/blocks | cut -f1)" -le 2200 ]; then   # per image <= 1 MiB, all <= 2x that
  t_pass "block cache: bounded by block_cache_size"
else t_fail "block cache: bounded by block_cache_size" "$(ls -las $W/ucache/blocks | tr '\n' ' ')"; fi
rm -rf $W/ucache/blocks
EXTRA_ENV="SKIFF_BLOCK_CACHE_SIZE=0" sums_ok "block cache: off (block_cache_size = 0)"
[ ! -e $W/ucache/blocks ] && t_pass "block cache: off leaves nothing" || t_fail "block cache: off leaves nothing" "$(ls -la $W/ucache/blocks)"
mkdir -p $W/ucache/blocks && chown $TUSER: $W/ucache/blocks && chmod 0777 $W/ucache/blocks
sums_ok "block cache: a directory others can write is not used"
[ -z "$(ls -A $W/ucache/blocks)" ] && t_pass "block cache: nothing written to a shared directory" || t_fail "block cache: nothing written to a shared directory" "$(ls -la $W/ucache/blocks)"
rm -rf $W/ucache/blocks
t_check "nothing left after the data cases" leftovers

# ---- doctor ----
out=$(as_user "$SKIFF" doctor 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "ok:.*user + mount namespaces" <<<"$out" && grep -q "ok:.*/dev/fuse is usable" <<<"$out"; then
  t_pass "doctor as user: all ok"; else t_fail "doctor as user: all ok" "rc=$rc $out"; fi
out=$(unshare -m sh -c "mount --bind $W/nofuse /dev/fuse && $SKIFF doctor" 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "fix: chmod 0666 /dev/fuse" <<<"$out"; then t_pass "doctor reports /dev/fuse with its fix"
else t_fail "doctor reports /dev/fuse with its fix" "rc=$rc $out"; fi
mkdir -p $W/ucache/shared && chown $TUSER: $W/ucache/shared && chmod 0777 $W/ucache/shared
out=$(EXTRA_ENV="SKIFF_BLOCK_CACHE_PATH=$W/ucache/shared" as_user "$SKIFF" doctor 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "fix: chmod 700 $W/ucache/shared" <<<"$out"; then t_pass "doctor reports an unusable block cache with its fix"
else t_fail "doctor reports an unusable block cache with its fix" "rc=$rc $out"; fi
rm -rf $W/ucache/shared
t_check "nothing left at the end" leftovers
t_done
