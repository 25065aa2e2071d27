#!/bin/bash
# The security review's attacks on spank_skiff.so (findings 1-6; 7 is in
# runtime-import.sh; 8-9 issue 14's; 10-14 the second review's, issue 23),
# each performed as an ordinary user on a real local Slurm cluster. Every
# case passes because the attack fails, and nothing is left behind.
#
# It runs in a private mount namespace with a cluster of its own: before the
# fixes, a forged holder pid made slurmstepd SIGKILL every process of the
# mount namespace it named, and that must never be the machine's.
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT"
[ "$(id -u)" -eq 0 ] || { t_skip "plugin attacks" "needs root to start the test cluster"; t_done; }
PLUGIN=${SKIFF_PLUGIN:-$BUILD/plugin/spank_skiff.so} # tests/cluster/up loads it
# What the nodes run is built with the cluster's plugin (for another Slurm's
# Debian tree, in that tree: tests/cluster/slurm-tree, `make node`).
NODE_BUILD=$(dirname "$(dirname "$PLUGIN")")
HELPERS=$NODE_BUILD/plugin # skiff-helper and skiff-helper-full, beside the plugin
[ -f "$PLUGIN" ] && [ -x "$HELPERS/skiff-helper" ] || { t_fail "plugin built" "run make"; t_done; }
# the attacker's FUSE server and the fd 0 probe (tests/build.mk), run on the nodes
FUSE_STALL=$NODE_BUILD/tests/fuse-stall FD0_PROBE=$NODE_BUILD/tests/spank_fd0_probe.so
[ -x "$FUSE_STALL" ] && [ -f "$FD0_PROBE" ] || make -s BUILD="$NODE_BUILD" test-programs >/dev/null ||
  { t_fail "test programs built" "make test-programs"; t_done; }
t_private_mount_ns "plugin attacks" "$@"
t_scratch T attack
victims=()
stall_mounts=()
t_at_exit 'unstall; for p in "${victims[@]}"; do kill -KILL "$p" 2>/dev/null; done'
SKIFF_CLUSTER_QUIET=1 BUILD=$BUILD tests/cluster/up 2 || { t_fail "cluster up"; t_done; }
t_at_exit "SKIFF_CLUSTER_QUIET=1 tests/cluster/down"
source tests/cluster/run/env.sh
U=$SKIFF_TEST_USER
UID_U=$(id -u "$U")
UHOME=$(getent passwd "$U" | cut -d: -f6)
O=skiffother
id "$O" >/dev/null 2>&1 || useradd -M -s /bin/bash "$O" 2>/dev/null || id "$O" >/dev/null || { t_fail "second user"; t_done; }
# The test user's files of this run: a directory in their home (a job's
# files are the user's, where the user's jobs can reach them) named after
# this cluster, and their skiff data and cache in it (named containers,
# images): nothing another suite or cluster of the same user uses.
SEC=$UHOME/.skiff-attacks-$SKIFF_CLUSTER_INDEX
runuser -u "$U" -- mkdir -p "$SEC/data" "$SEC/cache"
t_at_exit "rm -rf '$SEC'"
printf 'data_path = %s/data\ncache_path = %s/cache\n' "$SEC" "$SEC" >"$T/skiff.conf"
chmod 644 "$T/skiff.conf"
# another user's directory in the scratch directory, for their squats
mkdir -p "$T/o" && chown "$O:" "$T/o" && chmod 755 "$T/o"
# unstall: every stalled FUSE connection aborted (through fusectl, mounted
# in this private namespace: every process waiting on it gets ENOTCONN and
# exits), its server killed and its mount detached; the importers that
# never answer killed. Nothing stays in D state.
stop_importers() {
  local p
  for p in $(cat "$T/stall/pids" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  : >"$T/stall/pids" 2>/dev/null
}
unstall() {
  local p m conn
  stop_importers
  for m in "${stall_mounts[@]}"; do
    conn=$(awk -v m="$m" '$5 == m { split($3, d, ":"); print d[2] }' "/proc/$SLURMD_N1/mountinfo" | tail -1)
    if [ -n "$conn" ]; then
      [ -d /sys/fs/fuse/connections/"$conn" ] || mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null
      echo 1 >/sys/fs/fuse/connections/"$conn"/abort 2>/dev/null
    fi
    p=$(cat "$T/stall/server.${m//\//_}" 2>/dev/null)
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
    nsenter -t "$SLURMD_N1" -m fusermount3 -u -z "$m" 2>/dev/null || nsenter -t "$SLURMD_N1" -m umount -l "$m" 2>/dev/null
  done
  stall_mounts=()
}
# stall DIR: the user mounts a FUSE filesystem that never answers on DIR
# (their own directory), with Debian's setuid fusermount3, on node n1 (in
# its slurmd's mount namespace, as from a job of theirs there)
stall() {
  local d=$1 out=$T/stall/server.${1//\//_}.out
  runuser -u "$U" -- mkdir -p "$d"
  nsenter -t "$SLURMD_N1" -m setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups "$FUSE_STALL" "$d" >"$out" 2>&1 &
  echo $! >"$T/stall/server.${d//\//_}"
  stall_mounts+=("$d")
  t_wait "fuse-stall to mount $d" 30 grep -q ready "$out" && return 0
  echo "fuse-stall did not mount $d: $(cat "$out")"; return 1
}
# processes of the user in uninterruptible sleep, in this cluster's nodes
# (other clusters on the machine run the same user's jobs, and this test)
d_state() {
  t_cluster_procs | while read -r p _; do ps -o pid=,stat=,wchan:32=,args= -p "$p"; done | awk '$2 ~ /^D/'
}

# A runtime base of this cluster's own: /run/skiff is shared by every test
# cluster on the machine (the test user's states of other clusters' steps
# would be seen, or swapped, here)
RT=/run/skiff-attacks-$SKIFF_CLUSTER_INDEX
t_at_exit "rm -rf '$RT'"
# plugstack ARGS...: the plugin with this run's runtime base and skiff.conf
# (unless ARGS give another config=)
plugstack() {
  local conf="config=$T/skiff.conf"
  case " $* " in *" config="*) conf="" ;; esac
  echo "required $PLUGIN runtime_path=$RT $conf $*" >"$SKIFF_PLUGSTACK"
}
T_AS_USER_DIR=$T
node_pids() { ip netns pids "${SKIFF_CLUSTER_NS_PREFIX:-skiff${SKIFF_CLUSTER_INDEX}n}$1" 2>/dev/null; }
# skiff processes of the user on node N (helper, holder, FUSE server): all
# show skiff-helper's command line
skiff_procs() {
  local p
  for p in $(node_pids "$1"); do
    [ "$(stat -c %u /proc/$p 2>/dev/null)" = "$UID_U" ] || continue
    tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -q "^$HELPERS/skiff-helper" && echo "$p"
  done
}
helper_now() { # N VERB: the pid of `skiff-helper VERB` on node N now
  local p prog=$HELPERS/skiff-helper
  [ "$2" = start ] || prog=$prog-full
  for p in $(node_pids "$1"); do
    [ "$(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)" = "$prog $2 " ] &&
      [ "$(stat -c %u /proc/$p)" = "$UID_U" ] && { echo "$p"; return 0; }
  done
  return 1
}
# helper_of N VERB: the pid of `skiff-helper VERB` (start; the others are
# skiff-helper-full's) on node N, waiting for it to appear (a FAIL-able
# nothing when it does not)
helper_of() { t_wait "skiff-helper $2 on n$1" 60 helper_now "$@" >/dev/null && helper_now "$@"; }
jobs_left() { squeue -h -u "$U" 2>/dev/null; } # the user's jobs (this cluster is the suite's own)
gone_within() { t_wait_gone "${*:2} to find nothing" "$@"; } # SECONDS CMD: CMD prints nothing within SECONDS

# the image, and the attacker's tool
BB=$(t_busybox_sqsh) || { t_fail "the busybox image"; t_done; }
cp "$BB" "$T/bb.sqsh" && chmod 644 "$T/bb.sqsh"
t_program attack-getfd "the attacker's tool" || t_done
install -m 755 "$BUILD/tests/attack-getfd" "$T/getfd"

# Processes a successful forgery would have killed: root's, and one of the
# user's own in this (the host's, for the cluster) mount namespace.
sleep infinity & victims+=($!); ROOT_VICTIM=$!
# (setpriv execs: $! is the user's sleep, not a root runuser waiting for it)
setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups sleep infinity & victims+=($!); USER_VICTIM=$!
SLURMD_N2=$(pgrep -f "slurmd -f $SLURM_CONF -N n2" | head -1)
SLURMD_N1=$(pgrep -f "slurmd -f $SLURM_CONF -N n1" | head -1)

# An importer that never answers (pyxis's importer contract, plugstack
# importer=): the helper waits for it, and can still be killed. Its pids go
# to $T/stall/pids for unstall.
mkdir -p "$T/stall" && chmod 755 "$T/stall" && touch "$T/stall/pids" && chmod 666 "$T/stall/pids"
cat >"$T/stall/importer" <<EOF
#!/bin/sh
[ "\$1" = get ] || exit 0
echo \$\$ >>$T/stall/pids
exec sleep infinity
EOF
chmod 755 "$T/stall/importer"

# forge NAME PAYLOAD_FILE [SRUN_OPTION...]: starts a step whose helper waits
# for an importer that never answers, takes the helper's reply pipe with
# pidfd_getfd and writes PAYLOAD_FILE into it (as the review did); the
# step's output goes to $T/NAME.out, its seconds to $T/NAME.took.
PLUGARGS="timeout=6"
forge() {
  local name=$1 payload=$2 h; shift 2
  plugstack $PLUGARGS importer="$T/stall/importer"
  local t0=$(date +%s%N)
  t_as_user srun -Q -n1 -w n1 --container-image=site/stall:1 "$@" true >"$T/$name.out" 2>&1 &
  local spid=$!
  if ! h=$(helper_of 1 start); then
    kill $spid; wait $spid; echo "no helper found" >>"$T/$name.out"; plugstack $PLUGARGS; return 1
  fi
  chmod 644 "$payload"
  runuser -u "$U" -- "$T/getfd" "$h" 4 write "$payload" >>"$T/$name.out" 2>&1 || echo "getfd failed" >>"$T/$name.out"
  wait $spid
  echo "rc=$?" >>"$T/$name.out"
  echo $(( ($(date +%s%N) - t0) / 1000000 )) >"$T/$name.ms"
  plugstack $PLUGARGS
  stop_importers
}

plugstack timeout=6

# --- 1. a forged reply naming someone else's process -------------------------------------
if t_case "1: a forged reply naming someone else's process"; then
printf 'S0\0H%d\0W/\0Z\0' "$ROOT_VICTIM" >"$T/forge-root"
forge forge-root "$T/forge-root"
if grep -q "rc=0" "$T/forge-root.out"; then t_fail "1: forged holder = a root process" "the step ran: $(cat "$T/forge-root.out")"
elif ! grep -q "is not the helper's container process (refused)" "$T/forge-root.out"; then
  t_fail "1: forged holder = a root process" "$(cat "$T/forge-root.out")"
else t_pass "1: a forged reply naming a root process is refused, with a clear error"; fi
printf 'S0\0H%d\0W/\0Z\0' "$USER_VICTIM" >"$T/forge-user"
forge forge-user "$T/forge-user"
grep -q "is not the helper's container process (refused)" "$T/forge-user.out" &&
  t_pass "1: a forged reply naming the user's own process in the host namespace is refused" ||
  t_fail "1: forged holder = the user's own process" "$(cat "$T/forge-user.out")"
# a reply that never ends: bounded in size
{ printf 'S0\0'; head -c $((5 << 20)) /dev/zero | tr '\0' 'E'; } >"$T/forge-big"
forge forge-big "$T/forge-big"
grep -q "answer longer than" "$T/forge-big.out" && t_pass "1: an answer over 4 MiB is refused (read bounded in size)" ||
  t_fail "1: oversized answer" "$(head -c 600 "$T/forge-big.out")"
# after the steps' exit (the helpers blocked on the FIFO are killed at the deadline)
gone_within 20 skiff_procs 1 && t_pass "1: the blocked helpers are gone after the deadline" ||
  t_fail "1: helpers left" "$(skiff_procs 1 | xargs -r ps -o pid,user,args -p)"
if kill -0 "$ROOT_VICTIM" && kill -0 "$USER_VICTIM" && kill -0 "$SLURMD_N2"; then
  t_pass "1: root's process, the user's own process and slurmd of another node are all alive"
else t_fail "1: victims" "root victim $(kill -0 $ROOT_VICTIM 2>&1 && echo alive), user victim $(kill -0 $USER_VICTIM 2>&1 && echo alive), slurmd n2 $(kill -0 $SLURMD_N2 2>&1 && echo alive)"; fi

fi

# --- 2. a named container whose image is a link to a root-only file ----------------------------
if t_case "2: a named container whose image is a link to a root-only file"; then
d=$SEC/data/containers/atk-shd.n1
runuser -u "$U" -- sh -c "mkdir -p '$d/upper' '$d/work' && ln -sfn /etc/shadow '$d/image'"
out=$(t_as_user srun -Q -n1 -w n1 --container-name=atk-shd true 2>&1); rc=$?
first=$(head -1 /etc/shadow)
if [ $rc -eq 0 ] || grep -qF "$first" <<<"$out" || grep -qF "${first%%:*}:" <<<"$(grep -v 'skiff:' <<<"$out")"; then
  t_fail "2: named container image -> /etc/shadow" "rc=$rc: $out"
elif grep -q "Permission denied" <<<"$out"; then t_pass "2: a named container linked to /etc/shadow is read as the user (Permission denied), nothing of it shown"
else t_fail "2: named container image -> /etc/shadow" "$out"; fi
# (timeout=120: "at once" is well before the deadline a FIFO would hold it to)
plugstack timeout=120
runuser -u "$U" -- sh -c "rm -f '$SEC/f2'; mkfifo '$SEC/f2'; ln -sfn '$SEC/f2' '$d/image'"
start=$(date +%s)
out=$(t_as_user srun -Q -n1 -w n1 --container-name=atk-shd true 2>&1); rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -ne 0 ] && [ "$took" -le 60 ] && grep -q "atk-shd.n1/image is not a regular file (it is a FIFO)" <<<"$out"; then
  t_pass "2: a named container linked to a FIFO is refused at once (${took} s of timeout=120), naming the path (issue 23)"
else t_fail "2: named container -> FIFO" "rc=$rc, ${took} s: $out"; fi
plugstack timeout=6

fi

# --- 3. no fd of slurmstepd's in any process the user can reach -----------------------------------
# the start helper, the holder and the FUSE server during a step (whose
# task runs until the case cancels it)
if t_case "3: no fd of slurmstepd's in any process the user can reach"; then
t_as_user srun -Q -n1 -w n1 -J sec-fds --container-image="$T/bb.sqsh" sleep infinity >/dev/null 2>&1 &
spid=$!
three() { [ "$(skiff_procs 1 | wc -l)" -ge 3 ]; }
t_wait "the step's helper, holder and FUSE server on n1" 60 three || t_fail "3: the step's processes" "$(skiff_procs 1)"
bad=""; seen=0
for p in $(skiff_procs 1); do
  seen=$((seen + 1))
  fds=$(runuser -u "$U" -- "$T/getfd" "$p" 0 list 2>/dev/null)
  bad+=$(grep -E 'socket:|/run/skiff-cluster|slurm' <<<"$fds" | sed "s/^/$p: /")
done
scancel -n sec-fds
wait $spid
# an exit-time helper: an importer whose release waits for the case's word
# (on a FIFO), after saying it waits
mkdir -p "$T/imp" && chmod 755 "$T/imp" && mkfifo -m 666 "$T/imp/go" && : >"$T/imp/waiting" && chmod 666 "$T/imp/waiting"
cat >"$T/imp/importer" <<EOF
#!/bin/sh
[ "\$1" = get ] && echo "$T/bb.sqsh" && exit 0
[ "\$1" = release ] && echo waiting >$T/imp/waiting && read _ <$T/imp/go
exit 0
EOF
chmod 755 "$T/imp/importer"
plugstack timeout=60 importer="$T/imp/importer"
t_as_user srun -Q -n1 -w n1 --container-image=site/bb:1 true >"$T/release.out" 2>&1 &
spid=$!
if h=$(helper_of 1 release) && t_wait "the importer's release to wait" 60 test -s "$T/imp/waiting"; then
  seen=$((seen + 1))
  fds=$(runuser -u "$U" -- "$T/getfd" "$h" 0 list 2>/dev/null)
  bad+=$(grep -E 'socket:|/run/skiff-cluster|slurm' <<<"$fds" | sed "s/^/$h: /")
  extra=$(awk '$1 > 5' <<<"$fds")
  [ -z "$extra" ] || bad+=" release helper holds fds beyond 0-5: $extra"
else bad+=" no release helper seen"; fi
echo go 1<>"$T/imp/go"
wait $spid
plugstack timeout=6
if [ "$seen" -ge 4 ] && [ -z "$bad" ]; then
  t_pass "3: helper, holder, FUSE server and an exit-time helper hold no socket or file of slurmstepd's ($seen processes)"
else t_fail "3: fds reachable by the user" "seen=$seen: $bad / release step: $(head -c 300 "$T/release.out")"; fi

fi

# --- 4. a helper that never answers: slurmstepd is not wedged --------------------------------------
# (the review's FIFO as the image is refused at once now, issue 23: an
# importer that never answers takes its place)
if t_case "4: a helper that never answers: slurmstepd is not wedged"; then
plugstack timeout=6 importer="$T/stall/importer"
start=$(date +%s)
out=$(t_as_user srun -Q -n1 -w n1 --container-image=site/stall:1 true 2>&1); rc=$?
took=$(( $(date +%s) - start ))
plugstack timeout=6
if [ $rc -ne 0 ] && grep -q "no answer from the user-side helper within 6 s" <<<"$out" && gone_within 60 jobs_left &&
   gone_within 60 skiff_procs 1; then
  t_pass "4: a helper that never answers fails the step after the deadline (${took} s), the job ends, no helper left"
else t_fail "4: helper that never answers" "rc=$rc ${took}s: $out / jobs: $(jobs_left) / procs: $(skiff_procs 1)"; fi
stop_importers
plugstack timeout=120
for img in "docker-archive:$SEC/f1" "$SEC/f1"; do
  rm -f "$SEC/f1"; runuser -u "$U" -- mkfifo "$SEC/f1"
  start=$(date +%s)
  out=$(t_as_user srun -Q -n1 -w n1 --container-image="$img" true 2>&1); rc=$?
  took=$(( $(date +%s) - start ))
  if [ $rc -ne 0 ] && [ "$took" -le 60 ] && grep -q "$SEC/f1 is not a regular file" <<<"$out"; then
    t_pass "4: a FIFO as --container-image=$img is refused at once (${took} s of timeout=120), naming it (issue 23)"
  else t_fail "4: FIFO as $img" "rc=$rc ${took}s: $out"; fi
done
plugstack timeout=6

fi

# --- 5. another user takes the victim's runtime directory name first ----------------------------------
# (/dev/shm/skiff-UID is the CLI's runtime directory of the user: the squat
# is made only when nobody has it, and undone only when it is still ours)
if t_case "5: another user takes the victim's runtime directory name first"; then
if [ ! -e /dev/shm/skiff-"$UID_U" ] && runuser -u "$O" -- mkdir /dev/shm/skiff-"$UID_U"; then
  t_at_exit "[ \"\$(stat -c %U /dev/shm/skiff-$UID_U 2>/dev/null)\" = $O ] && rmdir /dev/shm/skiff-$UID_U"
fi
out=$(t_as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" cat /etc/hostname 2>&1); rc=$?
[ $rc -eq 0 ] && t_pass "5: /dev/shm/skiff-UID taken by another user does not stop the victim's containers" ||
  t_fail "5: squatted /dev/shm/skiff-UID" "$out"
[ "$(stat -c %u:%a "$RT")" = "0:755" ] && [ "$(stat -c %U:%a "$RT/$UID_U")" = "$U:700" ] &&
  t_pass "5: the runtime base is root's (0755) with a private directory per user" ||
  t_fail "5: runtime base" "$(ls -ld "$RT" "$RT/$UID_U")"
runuser -u "$O" -- mkdir -p "$T/o/rt"
plugstack timeout=6 runtime_path="$T/o/rt"
t_fails_with "5: a runtime_path base another user created first is refused, and named for the admin" \
  "runtime_path $T/o/rt must be a directory owned by root" \
  t_as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" true
plugstack timeout=6

fi

# --- 6. the state directory swapped for a link to another user's files -------------------------------
if t_case "6: the state directory swapped for a link to another user's files"; then
V=$T/victim-dir
mkdir -p "$V" && echo keep >"$V/file"
chown -R "$O:" "$V" && chmod 777 "$V" && chmod 666 "$V/file"
# the step's task waits on a FIFO for the case's word, then ends by itself
mkdir -p "$T/g6" && chmod 755 "$T/g6" && mkfifo -m 666 "$T/g6/go"
t_as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" --container-mounts="$T/g6:/g6" cat /g6/go >/dev/null 2>&1 &
spid=$!
state_now() { ls "$RT/$UID_U" 2>/dev/null | grep '^n1\.' | grep -v '\.old$' | head -1 | grep .; }
st=""
t_wait "the step's state directory in $RT/$UID_U" 60 state_now >/dev/null && st=$(state_now)
[ -n "$st" ] && runuser -u "$U" -- sh -c "cd $RT/$UID_U && mv '$st' '$st.old' && ln -s '$V' '$st'" 2>"$T/swap.err"
echo go 1<>"$T/g6/go"
wait $spid
gone_within 60 skiff_procs 1 && gone_within 60 jobs_left || t_fail "6: the step's end" "procs $(skiff_procs 1), jobs $(jobs_left)"
if [ -n "$st" ] && [ -L "$RT/$UID_U/$st" ] && [ "$(cat "$V/file" 2>/dev/null)" = keep ]; then
  t_pass "6: a state directory swapped for a link: the other user's files are untouched"
else t_fail "6: swapped state dir" "state '$st' $(cat "$T/swap.err"): $(ls -la "$V" 2>&1)"; fi
runuser -u "$U" -- rm -rf "$RT/$UID_U/$st" "$RT/$UID_U/$st.old"

fi

# --- 8. attaching to a running container (--container-name, issue 14) --------------------------------
# Root never reads the user's state to pick a namespace: the helper looks
# the container up as the user, root checks the process it names, and the
# tasks join as the user.
# (the other user's step runs until the case cancels it)
if t_case "8: attaching to a running container (--container-name, issue 14)"; then
t_as_user -u "$O" srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" sleep infinity >"$T/o.out" 2>&1 &
OSRUN=$!
o_holder_now() {
  local p
  for p in $(node_pids 1); do
    [ "$(stat -c %U /proc/$p 2>/dev/null)" = "$O" ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = skiff-holder ] && { echo "$p"; return 0; }
  done
  return 1
}
O_HOLDER=""
t_wait "the other user's container holder on n1" 60 o_holder_now >/dev/null && O_HOLDER=$(o_holder_now)
O_JOB=$(squeue -h -u "$O" -o %i 2>/dev/null | head -1)
if [ -n "$O_HOLDER" ] && [ -n "$O_JOB" ]; then
  t_fails_with "8: another user's running step, named JOBID.STEPID, is not found (each user's containers are their own)" \
    "container '$O_JOB.0' is not running on n1" t_as_user srun -Q -n1 -w n1 --container-name="$O_JOB.0:exec" true
  # a state record in the user's own runtime directory naming the other
  # user's holder (and its real namespace), or a root process
  for victim in "$O_HOLDER" "$ROOT_VICTIM"; do
    d=$RT/$UID_U/n1.999999.0
    mkdir -p "$d"
    printf 'H%s\0W/\0Nforged\0M%s\0' "$victim" "$(stat -L -c '%d:%i' /proc/$victim/ns/mnt)" >"$d/state"
    chown -R "$U:" "$d"
    t_fails_with "8: a forged state record naming $( [ "$victim" = "$O_HOLDER" ] && echo "another user's container" || echo "a root process") is not attached to" \
      "container '999999.0' is not running on n1" t_as_user srun -Q -n1 -w n1 --container-name=999999.0:exec true
    rm -rf "$d"
  done
  # a forged answer (the helper's reply pipe, as in 1) naming the other
  # user's container, or the user's own host process: root refuses
  for victim in "$O_HOLDER" "$USER_VICTIM"; do
    printf 'S0\0H%d\0W/\0J1\0Z\0' "$victim" >"$T/forge-attach"
    forge forge-attach "$T/forge-attach"
    if grep -q "rc=0" "$T/forge-attach.out"; then t_fail "8: forged attach to process $victim" "the step ran: $(cat "$T/forge-attach.out")"
    elif grep -Eq "is not a running container of the job's user \(refused\)|is not in a container's mount namespace \(refused\)" "$T/forge-attach.out"; then
      t_pass "8: a forged answer attaching to $( [ "$victim" = "$O_HOLDER" ] && echo "another user's container" || echo "the user's own host process") is refused"
    else t_fail "8: forged attach to process $victim" "$(cat "$T/forge-attach.out")"; fi
  done
  kill -0 "$O_HOLDER" && kill -0 "$USER_VICTIM" && t_pass "8: the other user's container and the user's process live on" ||
    t_fail "8: victims of the forged attaches" "holder $O_HOLDER / user process $USER_VICTIM gone"
else
  t_fail "8: another user's container" "no holder of $O on n1: $(cat "$T/o.out")"
fi
scancel -u "$O" 2>/dev/null; wait $OSRUN 2>/dev/null
# a forged attach to a namespace the user made: the user's own, so root
# lets the tasks join it (as the user) and kills nothing in it afterwards
# (in node n1's network and UTS namespaces, as the step's tasks are: joining
# the host's would be refused by the kernel, the join running as the user)
nsenter -t "$SLURMD_N1" -n -u setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups unshare -Urm sleep infinity &
victims+=($!); NS_VICTIM=$!
own_ns() { [ "$(readlink /proc/$NS_VICTIM/ns/user)" != "$(readlink /proc/self/ns/user)" ]; }
t_wait "the user's process $NS_VICTIM in a user namespace of its own" 30 own_ns || t_fail "8: the user's namespace" "not made"
printf 'S0\0H%d\0W/\0J1\0Z\0' "$NS_VICTIM" >"$T/forge-own"
forge forge-own "$T/forge-own"
# (the step's end, where root would kill in its container, is over)
gone_within 60 jobs_left && gone_within 60 skiff_procs 1 || t_fail "8: the forged step's end" "$(jobs_left) $(skiff_procs 1)"
if grep -q "rc=0" "$T/forge-own.out" && kill -0 "$NS_VICTIM" 2>/dev/null; then
  t_pass "8: a forged attach to the user's own namespace is joined as the user (nothing new), and root kills nothing in it"
else t_fail "8: forged attach to the user's own namespace" "its process was killed: $(cat "$T/forge-own.out")"; fi

fi

# --- 9. the id filter and the namespace's capabilities grant nothing on the host ------------------------
if t_case "9: the id filter and the namespace's capabilities grant nothing on the host"; then
t_program attack-ids "attack-ids" && install -m 755 "$BUILD/tests/attack-ids" "$T/ids"
echo mine >"$T/owned"; chown "$U:" "$T/owned"; chmod 644 "$T/owned"
for remap in "" --container-remap-root; do
  out=$(t_as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" $remap \
        --container-mounts="$T/ids:/ids,$T/owned:/owned,/etc/shadow:/shadow" /ids /owned /shadow 2>&1)
  inside=$( [ -n "$remap" ] && echo 0 || echo "$UID_U")
  if grep -q "setuid=0 setresuid=0 setgroups=0 chown=0 uid=$inside euid=$inside read=EACCES" <<<"$out" &&
     [ "$(stat -c %U "$T/owned")" = "$U" ]; then
    t_pass "9: ${remap:-no remap}: setuid(0), setgroups and chown report success yet change nothing: ids stay, the host file stays the user's, /etc/shadow stays unreadable"
  else t_fail "9: id filter ${remap:-no remap}" "$out / owner $(stat -c %U "$T/owned")"; fi
done
t_fails_with "9: root in the container's namespace cannot set the node's hostname" "Operation not permitted|must be root|denied" \
  t_as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" --container-remap-root hostname attacker
[ "$(t_as_user srun -Q -n1 -w n1 hostname 2>&1)" = n1 ] && t_pass "9: the node's hostname is unchanged" ||
  t_fail "9: node hostname" "$(t_as_user srun -Q -n1 -w n1 hostname 2>&1)"

fi

# ===== issue 23: the second review ======================================================================
LOG1=$SKIFF_CLUSTER_STATE/log/slurmd-n1.log
log_since() { tail -c +"$(($1 + 1))" "$LOG1"; } # slurmd's log of n1 from byte offset $1 on
node_state() { sinfo -h -n n1 -o %T 2>/dev/null; }
# another user's job on n1; prints its seconds, fails after $1 s
other_job() {
  local t0=$(date +%s%N) out
  out=$( (cd /tmp && timeout "$1" runuser -u "$O" -- env SLURM_CONF="$SLURM_CONF" srun -Q -n1 -w n1 true) 2>&1) ||
    { echo "no: $out"; return 1; }
  echo $(( ($(date +%s%N) - t0) / 1000000 ))
}

# --- 10. a FUSE filesystem of the user's that never answers (issue 23, finding 1) -----------------------
# Whatever touches it waits in D state, where SIGKILL does not end it. Root
# never waits for such a process past its bound: the step that reads an
# image under it and the job epilog that sweeps named containers under it
# (container_scope=job) both end, the node takes another user's job at once
# and is not drained.
if t_case "10: a FUSE filesystem of the user's that never answers (issue 23, finding 1)"; then
stall "$SEC/stall-img" || t_fail "10: fuse-stall mounted"
plugstack timeout=5
at=$(stat -c %s "$LOG1")
t0=$(date +%s%N)
out=$(t_as_user srun -Q -n1 -w n1 --container-image="$SEC/stall-img/bb.sqsh" true 2>&1); rc=$?
took=$(( ($(date +%s%N) - t0) / 1000000 ))
stuck=$(d_state | grep request_wait_answer)
if [ $rc -ne 0 ] && grep -q "no answer from the user-side helper within 5 s" <<<"$out" && [ "$took" -ge 5000 ] &&
   [ "$took" -le 60000 ] && [ -n "$stuck" ]; then
  t_pass "10: step: the helper stuck on the image's FUSE directory (D state) fails the step in $took ms (timeout=5)"
else t_fail "10: step with a stalled image directory" "rc=$rc, $took ms, stuck: '$stuck': $out"; fi
if o=$(other_job 60); then
  t_pass "10: step: another user's job runs on the node right after ($o ms)"
else t_fail "10: step: another user's job" "$o / node $(node_state)"; fi
reported() { log_since "$at" | grep -q "did not exit within 2000 ms of SIGKILL"; }
t_wait "slurmd's log to report the helper SIGKILL did not end" 30 reported
rep=$(log_since "$at" | grep "did not exit within 2000 ms of SIGKILL")
if grep -q "skiff-helper start" <<<"$rep" && grep -q "state D, waiting in request_wait_answer" <<<"$rep" &&
   grep -q "'$SEC/stall-img' (fuse" <<<"$rep" && [ "$(wc -l <<<"$rep")" -eq 1 ]; then
  t_pass "10: step: slurmd's log says once which process is stuck, where, and on whose FUSE mount"
  echo "    ${rep#*skiff: }"
else t_fail "10: step: the stuck helper's log line" "'$rep'"; fi
unstall
gone_within 30 d_state && t_pass "10: step: aborting the stalled connection ends the stuck helper (nothing left in D state)" ||
  t_fail "10: step: processes left in D state" "$(d_state)"

plugstack timeout=5 container_scope=job
runuser -u "$U" -- mkdir -p "$SEC/data/containers"
stall "$SEC/data/containers" || t_fail "10: fuse-stall mounted on containers/"
at=$(stat -c %s "$LOG1")
out=$(t_as_user timeout 60 srun -Q -n1 -w n1 true 2>&1); rc=$?
# the job's epilog sweeps its named containers now, as the user
if o=$(other_job 60) && [ "$o" -le 45000 ]; then
  t_pass "10: epilog: another user's job runs on the node $o ms after the job whose sweep is stuck (timeout=5)"
else t_fail "10: epilog: another user's job" "srun rc=$rc $out / $o / node $(node_state) / $(squeue -h -w n1)"; fi
t_wait "slurmd's log to report the sweep SIGKILL did not end" 30 reported
rep=$(log_since "$at" | grep "did not exit within 2000 ms of SIGKILL")
stuck=$(d_state | grep request_wait_answer)
if grep -q "skiff-helper sweep" <<<"$rep" && grep -q "'$SEC/data/containers' (fuse" <<<"$rep" &&
   [ -n "$stuck" ]; then
  t_pass "10: epilog: the sweep stuck in D state is reported once and left behind"
else t_fail "10: epilog: the stuck sweep" "log: '$rep' / stuck: '$stuck'"; fi
unstall
gone_within 30 d_state && t_pass "10: epilog: nothing left in D state once the connection is aborted" ||
  t_fail "10: epilog: processes left in D state" "$(d_state)"
case $(node_state) in
  *drain* | *down*) t_fail "10: the node" "$(node_state): $(sinfo -h -n n1 -o %E)" ;;
  *) t_pass "10: the node is not drained ($(node_state))" ;;
esac
plugstack timeout=6

fi

# --- 11. log and terminal injection (issue 23, finding 2) -------------------------------------------------
# Every way the plugin reaches slurmd's log or srun's terminal goes through
# plugin/log.c, which sanitises the line (common/sanitize.c)
if t_case "11: log and terminal injection (issue 23, finding 2)"; then
raw=$(grep -nE 'slurm_(error|info|verbose|debug[0-9]?|spank_log)\(|dprintf\(|fprintf\(stderr' plugin/*.c |
      grep -vE '^plugin/(log|helper)\.c:')
[ -z "$raw" ] && t_pass "11: no sink in plugin/ but plugin/log.c's (the helper's stderr is only its own)" ||
  t_fail "11: sinks that bypass the sanitiser" "$raw"
# the review's vectors: a forged log line, terminal escapes, C1 raw and as
# UTF-8, a bidi override, CR, invalid UTF-8
vectors=($'sec-inj\n[2026-11-26T09:50:53.701] [4.0] error: FORGED: sec' $'sec-inj\e[2J\e]0;pwned\a'
         $'sec-inj\xc2\x9b31mC1 \x9b31mraw' $'sec-inj\xe2\x80\xaeRLO\xe2\x81\xa6' $'sec-inj\rCR\xff\xfe')
bad_bytes() { # FILE: the lines of FILE a user wrote control bytes or a line into
  LC_ALL=C grep -naP '\x1b|\x07|\r|\xc2[\x80-\x9f]|\xe2\x80[\xa8-\xae]|\xe2\x81[\xa6-\xa9]|\xff\xfe|[^\xc2]\x9b31m|^\[2026-11-26T09:50:53\.701\]' "$1"
}
at=$(stat -c %s "$LOG1")
: >"$T/inj.out"
for i in "${!vectors[@]}"; do
  v=${vectors[$i]}
  t_as_user srun -Q -n1 -w n1 --container-image="./$v" true >>"$T/inj.out" 2>&1
  t_as_user srun -Q -n1 -w n1 --export=ALL,SKIFF_CONTAINER_IMAGE="./$v" true >>"$T/inj.out" 2>&1
  t_as_user srun -Q -n1 -w n1 --export=ALL,PYXIS_CONTAINER_WORKDIR="/$v",PYXIS_CONTAINER_IMAGE="$T/bb.sqsh" true \
    >>"$T/inj.out" 2>&1
  printf 'S-1\0pmount\0n2\0e%s\0Z\0' "$v" >"$T/inj-reply"
  forge inj-reply "$T/inj-reply"; cat "$T/inj-reply.out" >>"$T/inj.out"
  printf 'I%s\0i1048576 1500 %s\0S-1\0pimport\0n2\0eprogress then failure\0Z\0' "$v" "$v" >"$T/inj-progress"
  forge inj-progress "$T/inj-progress"; cat "$T/inj-progress.out" >>"$T/inj.out"
done
injected() { [ "$(log_since "$at" | grep -ac 'sec-inj')" -ge 25 ]; }
t_wait "slurmd's log to hold the injected steps' lines" 30 injected
log_since "$at" >"$T/inj.log"
seen_out=$(grep -ac 'sec-inj' "$T/inj.out"); seen_log=$(grep -ac 'sec-inj' "$T/inj.log")
esc_out=$(grep -acF 'sec-inj\x1b[2J' "$T/inj.out"); esc_log=$(grep -acF 'sec-inj\x1b[2J' "$T/inj.log")
prog=$(grep -acF 'importing sec-inj\u202eRLO' "$T/inj.out")
if [ "$seen_out" -ge 25 ] && [ "$seen_log" -ge 25 ] && [ "$esc_out" -ge 4 ] && [ "$esc_log" -ge 4 ] && [ "$prog" -ge 1 ] &&
   iconv -f UTF-8 -t UTF-8 "$T/inj.out" >/dev/null 2>&1 && iconv -f UTF-8 -t UTF-8 "$T/inj.log" >/dev/null 2>&1 &&
   [ -z "$(bad_bytes "$T/inj.out")" ] && [ -z "$(bad_bytes "$T/inj.log")" ]; then
  t_pass "11: 5 vectors x (option, SKIFF_/PYXIS_ env, reply record, progress record): srun's stderr and slurmd's log hold them escaped, one line each, valid UTF-8"
else
  t_fail "11: injection" "srun lines $seen_out (escaped $esc_out, progress $prog), log lines $seen_log (escaped $esc_log); srun: $(bad_bytes "$T/inj.out" | head -3 | cat -A | cut -c1-200) / log: $(bad_bytes "$T/inj.log" | head -3 | cat -A | cut -c1-200)"
fi

fi

# --- 12. slurmstepd's fd 0 stays on /dev/null (issue 23, finding 3) --------------------------------------
# spank_fd0_probe.so, after skiff in plugstack.conf, records fd 0 at each callback
if t_case "12: slurmstepd's fd 0 stays on /dev/null (issue 23, finding 3)"; then
fd0_plugstack() { printf 'required %s runtime_path=%s config=%s %s\nrequired %s out=%s\n' "$PLUGIN" "$RT" "$T/skiff.conf" "$*" "$FD0_PROBE" "$T/fd0.log" >"$SKIFF_PLUGSTACK"; }
: >"$T/fd0.log"; chmod 666 "$T/fd0.log"
fd0_plugstack timeout=6
t_as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" true >"$T/fd0-plain.out" 2>&1
t_as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" --container-save="$SEC/save.sqsh" true >"$T/fd0-save.out" 2>&1
# the named container's first step says when its task runs, then runs until
# the case cancels it; the second attaches to it
mkdir -p "$T/g12" && chmod 777 "$T/g12"
t_as_user srun -Q -n1 -w n1 -J sec-att-first --container-image="$T/bb.sqsh" --container-name=sec-att \
  --container-mounts="$T/g12:/g12" sh -c 'echo up >/g12/up; exec sleep infinity' >"$T/fd0-first.out" 2>&1 &
apid=$!
t_wait "the named container's first step to run its task" 60 test -s "$T/g12/up" || t_fail "12: the first step" "$(cat "$T/fd0-first.out")"
t_as_user srun -Q -n1 -w n1 --container-name=sec-att true >"$T/fd0-attach.out" 2>&1
scancel -n sec-att-first
wait $apid
t_as_user srun -Q -n1 -w n1 --container-image=./sec-missing.sqsh true >"$T/fd0-fail.out" 2>&1
five_exits() { [ "$(awk '$2 == "exit"' "$T/fd0.log" | wc -l)" -ge 5 ]; }
t_wait "the probe to see the five steps' exit" 60 five_exits
steps=$(awk '$2 == "exit"' "$T/fd0.log" | wc -l)
off=$(grep -v 'fd0=/dev/null$' "$T/fd0.log")
if [ "$steps" -ge 5 ] && [ -z "$off" ] && [ -f "$SEC/save.sqsh" ] && grep -q "no such\|No such" "$T/fd0-fail.out"; then
  t_pass "12: slurmstepd's fd 0 is /dev/null at init and after task_exit and exit: plain, --container-save, attached, failed ($steps steps)"
else t_fail "12: slurmstepd's fd 0" "$steps exits; not /dev/null: $off / $(cat "$T"/fd0-*.out | head -5)"; fi
rm -rf "$SEC/save.sqsh" "$SEC/data/containers/sec-att.n1"
plugstack timeout=6

fi

# --- 13. user_init has one deadline (issue 23, finding 4) -------------------------------------------------
# a forged answer attaching to a process that does not exist: root starts
# a second helper, within the same deadline, and kills the first
if t_case "13: user_init has one deadline (issue 23, finding 4)"; then
ghost=$(( $(cat /proc/sys/kernel/pid_max) - 7 ))
while kill -0 "$ghost" 2>/dev/null; do ghost=$((ghost - 1)); done
printf 'S0\0H%d\0W/\0J1\0Z\0' "$ghost" >"$T/forge-ghost"
# (timeout=10: one deadline ends it after 10 s; the bug took three, 30 s)
PLUGARGS="timeout=10"
forge forge-ghost "$T/forge-ghost" --container-name=sec-ghost
PLUGARGS="timeout=6"
ms=$(cat "$T/forge-ghost.ms")
if grep -q "rc=0" "$T/forge-ghost.out" || ! grep -q "no answer from the user-side helper within 10 s" "$T/forge-ghost.out"; then
  t_fail "13: a forged attach to a process that does not exist" "$ms ms: $(cat "$T/forge-ghost.out")"
elif [ "$ms" -ge 10000 ] && [ "$ms" -le 20000 ]; then
  t_pass "13: timeout=10, a forged attach to a process that does not exist, a second helper: the step fails in $ms ms"
else t_fail "13: user_init's deadline" "the step took $ms ms (timeout=10)"; fi

fi

# --- 14. hardening (issue 23, 5) --------------------------------------------------------------------------
# block_cache_path=BASE: root-owned, one directory per user; a base another
# user made first only turns the cache off, and says so to the admin
if t_case "14: hardening (issue 23, 5)"; then
B1=$T/blocks B2=$T/o/blocks2
plugstack timeout=6 block_cache_path="$B1"
out=$(t_as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" cat /bin/busybox 2>&1 >/dev/null); rc=$?
if [ $rc -eq 0 ] && [ "$(stat -c %u:%a "$B1")" = "0:755" ] &&
   [ "$(stat -c %U:%a "$B1/$UID_U")" = "$U:700" ] && [ -n "$(ls "$B1/$UID_U")" ]; then
  t_pass "14: block_cache_path=BASE: BASE is root's (0755), the user's cache is BASE/UID (0700) and filled"
else t_fail "14: block_cache_path base" "rc=$rc $out / $(ls -laR "$B1" 2>&1 | head)"; fi
runuser -u "$O" -- mkdir -m 777 "$B2"
plugstack timeout=6 block_cache_path="$B2"
at=$(stat -c %s "$LOG1")
out=$(t_as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" cat /bin/busybox 2>&1 >/dev/null); rc=$?
told() { log_since "$at" | grep -q "block_cache_path $B2 must be a directory owned by root.*the block cache is off"; }
t_wait "slurmd's log to say the block cache is off" 30 told
if [ $rc -eq 0 ] && [ -z "$(ls -A "$B2")" ] && told; then
  t_pass "14: a block_cache_path base another user made first: the step runs without the cache, nothing lands there, the admin is told"
else t_fail "14: squatted block_cache_path" "rc=$rc $out / $(ls -la "$B2")"; fi
plugstack timeout=6

fi

# ===== issue 38: the third review ======================================================================
# --- 15. a lock on the site store's image holds every other user back (finding 1) ----------------------
# The store's images are 0644, and flock(2) takes an exclusive lock on a
# read-only fd: the other user ($O) locks one and keeps it. Nobody locks
# the store's images any more: the victim's step runs from the store, the
# store owner's import and prune of that image finish, the prune removes it.
if t_case "15: a lock on the site store's image holds every other user back (finding 1)"; then
SKIFF=${SKIFF:-$BUILD/bin/skiff} # the store owner's CLI
A=$SKIFF_CLUSTER_HOST_ADDR
STORE=$T/store
if ! python3 tests/integration/lib/mkimage.py "$T/layout" busybox-node >/dev/null 2>&1 ||
   ! REG_ADDR=$A registry_start "$T/reg" ||
   ! skopeo copy -q --dest-tls-verify=false --format oci "oci:$T/layout:busybox" "docker://$A:$REG_PORT/sec/bb:1" \
     >/dev/null 2>"$T/push.err"; then
  t_fail "15: the store's image" "build, registry or push failed: $(cat "$T/push.err" 2>/dev/null)"
fi
REF="docker://$A:$REG_PORT#sec/bb:1"
mkdir -p "$T/admin/tmp" "$T/ucache"; chmod 1777 "$T/ucache"
printf 'allow_http = yes\nsystem_cache_path = %s\ncache_path = %s/admin/cache\ntemp_path = %s/admin/tmp\n' \
  "$STORE" "$T" "$T" >"$T/admin.conf"
# the users' configuration: the store, and a cache of each user's own in this case's scratch
printf 'allow_http = yes\nsystem_cache_path = %s\ncache_path = %s/ucache/${USER}\ndata_path = %s/data\n' "$STORE" "$T" "$SEC" >"$T/site.conf"
chmod 644 "$T/site.conf"
admin() { timeout 120 env SKIFF_CONFIG="$T/admin.conf" "$SKIFF" "$@"; }
sys=$(admin import --system "$REF" 2>"$T/import.err")
if [ -f "$sys" ] && [ "$(stat -c %a "$sys")" = 644 ]; then
  # the attacker's lock, held until the case stops it
  : >"$T/atk.held"; chmod 666 "$T/atk.held"
  setpriv --reuid="$O" --regid="$(id -g "$O")" --init-groups \
    bash -c 'exec 8<"$1" && flock -x 8 && echo held >"$2" && exec sleep infinity' _ "$sys" "$T/atk.held" 2>"$T/atk.err" &
  ATK=$!; victims+=("$ATK")
  if t_wait "the other user's exclusive lock on $sys (or its end)" 20 bash -c "test -s '$T/atk.held' || ! kill -0 $ATK" &&
     test -s "$T/atk.held" && ! flock -n -s "$sys" true; then
    t_pass "15: another user holds an exclusive flock on the store's image (as the review did)"
  else t_fail "15: the attacker's lock" "$(cat "$T/atk.err")"; fi
  plugstack timeout=6 config="$T/site.conf"
  out=$(t_as_user timeout 120 srun -Q -n1 -w n1 --container-image="$REF" echo sec-ran 2>&1); rc=$?
  if [ $rc = 0 ] && grep -qx sec-ran <<<"$out" && ! grep -q "importing" <<<"$out" && [ -z "$(find "$T/ucache" -path '*/images/*')" ]; then
    t_pass "15: the victim's step runs from the store while the lock is held (no import, no image in its cache)"
  else t_fail "15: the victim's step" "rc=$rc: $out / $(find "$T/ucache" -path '*/images/*')"; fi
  out=$(admin import --system "$REF" 2>&1); rc=$?
  [ $rc = 0 ] && [ "$out" = "$sys" ] && t_pass "15: the store owner's import --system of the locked image finishes" ||
    t_fail "15: the owner's import" "rc=$rc (124: still waiting after 120 s): $out"
  out=$(admin cache prune --system --all 2>&1); rc=$?
  if [ $rc = 0 ] && [ ! -e "$sys" ] && grep -q "removed 1 image(s)" <<<"$out"; then
    t_pass "15: the store owner's prune removes the locked image (the lock keeps nothing in the store)"
  else t_fail "15: the owner's prune" "rc=$rc: $out"; fi
  kill "$ATK" 2>/dev/null; wait "$ATK" 2>/dev/null
  plugstack timeout=6
else t_fail "15: import --system" "$sys $(cat "$T/import.err")"; fi

fi

# --- 16. records of the user's helper move root's deadline without end (finding 2) --------------------
# The user takes the helper's reply pipe (fd 4) and writes an import's
# start once, then an import's end every second. user_init ends at the
# bound it fixed when it began (timeout= + import_timeout=), whatever is
# written; before, every end record gave timeout= again.
if t_case "16: records of the user's helper move root's deadline without end (finding 2)"; then
printf 'Isec-feed\0' >"$T/feed-first"; printf 'i0 0 forged\0' >"$T/feed-next"; chmod 644 "$T"/feed-*
plugstack timeout=6 import_timeout=10 importer="$T/stall/importer"
t0=$(date +%s%N)
t_as_user timeout 120 srun -Q -n1 -w n1 --container-image=site/stall:1 true >"$T/feed.out" 2>&1 &
spid=$!
if h=$(helper_of 1 start); then
  runuser -u "$U" -- "$T/getfd" "$h" 4 feed "$T/feed-first" "$T/feed-next" 1000 >"$T/feed.fed" 2>&1 &
  FEEDER=$!; victims+=("$FEEDER")
fi
wait $spid; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
fed=$(cat "$T/feed.fed" 2>/dev/null)
if [ -n "${FEEDER:-}" ] && t_wait "the feeder to end with the reply pipe" 30 bash -c "! kill -0 $FEEDER 2>/dev/null"; then
  feeder_gone=1
else feeder_gone=0; kill "${FEEDER:-}" 2>/dev/null; fi
if [ $rc != 0 ] && [ $rc != 124 ] && grep -q "^fed" <<<"$fed" && grep -q "no answer from the user-side helper" "$T/feed.out" &&
   [ "$ms" -ge 6000 ] && [ "$ms" -le $(( (6 + 10 + 30) * 1000 )) ] && [ $feeder_gone = 1 ]; then
  t_pass "16: forged import records every second: user_init ends at its own bound all the same ($ms ms; timeout=6 import_timeout=10), the feeder's pipe is closed"
else t_fail "16: forged import records" "rc=$rc (124: still waiting after 120 s), $ms ms, feeder: '$fed' gone=$feeder_gone: $(cat "$T/feed.out")"; fi
stop_importers

fi

# --- 17. scancel during user_init ends it at once (finding 2, the reasoned half) ----------------------
# A step told that another's import of its image runs (a forged waiting
# record: import_timeout=600 from then) is cancelled: root asks Slurm's
# controller whether the job still runs while it waits, so the job leaves
# the queue and another user's job starts on the node within seconds.
# A Slurm with auth_setuid_lock (24.11) cannot be asked from user_init (the
# plugin does not ask there: slurmstepd would die): the cancelled job then
# leaves at user_init's own bound, timeout + import_timeout, and the case
# holds it to that, with import_timeout=20.
if t_case "17: scancel during user_init ends it at once (finding 2, the reasoned half)"; then
libfull=$(find "${SKIFF_SLURM_ROOT:-/usr/lib}" -name libslurmfull.so -path '*/slurm-wlm/*' 2>/dev/null | head -1)
[ -n "$libfull" ] || t_fail "17: Slurm's libslurmfull.so under ${SKIFF_SLURM_ROOT:-/usr/lib}" "not found"
if nm -D "$libfull" 2>/dev/null | grep -qw auth_setuid_lock; then asks=0 import_s=20; else asks=1 import_s=600; fi
printf 'q1\tsomeone\tsec-cancel\0' >"$T/cancel-first"; chmod 644 "$T/cancel-first"
plugstack timeout=6 import_timeout=$import_s importer="$T/stall/importer"
t_as_user srun -Q -n1 -w n1 -J sec-cancel --container-image=site/stall:1 true >"$T/cancel.out" 2>&1 &
spid=$!
job=""
if h=$(helper_of 1 start) && runuser -u "$U" -- "$T/getfd" "$h" 4 write "$T/cancel-first" &&
   t_wait "srun to show the forged waiting record (root raised its deadline)" 30 grep -q "waiting for the import of sec-cancel" "$T/cancel.out" &&
   job=$(squeue -h -n sec-cancel -o %i) && [ -n "$job" ]; then
  at=$(stat -c %s "$LOG1")
  t0=$(date +%s%N)
  scancel "$job"
  if t_wait "job $job to leave the queue after scancel" $((asks ? 60 : 120)) bash -c "[ -z \"\$(squeue -h -j $job 2>/dev/null)\" ]"; then
    left_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    # (where the plugin cannot ask, slurmstepd leaves at user_init's bound,
    # after the job: the node answers slurmctld again then)
    [ $asks = 1 ] || t_wait "n1 to answer slurmctld again after the cancelled step (idle, no '*')" 120 bash -c "[ \"\$(sinfo -h -n n1 -o %T)\" = idle ]"
    if o=$(other_job 60); then
      t_pass "17: scancel during user_init: the job leaves the queue in $left_ms ms$([ $asks = 1 ] || echo " (this Slurm cannot be asked from user_init: at user_init's bound, import_timeout=$import_s)"), another user's job runs on the node right after ($o ms)"
    else t_fail "17: another user's job after scancel" "$o / node $(node_state)"; fi
    if [ $asks = 1 ]; then
      t_wait "slurmd's log to say why the step stopped waiting" 20 bash -c "tail -c +$((at + 1)) '$LOG1' | grep -q 'job $job was cancelled (or ended) while its container started'" &&
        t_pass "17: slurmd's log says the step stopped waiting because the job was cancelled" ||
        t_fail "17: the log line" "$(log_since "$at" | tail -5)"
    fi
  else t_fail "17: scancel during user_init" "job $job still there: $(squeue -h -j "$job" -o '%i %T %R') / node $(node_state)"; fi
else t_fail "17: a step waiting in user_init" "helper '$h', job '$job': $(cat "$T/cancel.out")"; fi
scancel -n sec-cancel 2>/dev/null
wait $spid 2>/dev/null
stop_importers
plugstack timeout=6

fi

# --- 18. what one step may put in slurmd's log (suspicion 2) ------------------------------------------
# 1000 forged progress records, then a failure: slurmd's log gets the
# step's budget of lines, one line saying how much was dropped, and the
# failure itself.
if t_case "18: what one step may put in slurmd's log (suspicion 2)"; then
{ for i in $(seq 1000); do printf 'rsec-flood line %d of a forged flood\0' "$i"; done
  printf 'S-1\0pimport\0n2\0esec-flood: the failure after the flood\0Z\0'; } >"$T/flood"
at=$(stat -c %s "$LOG1")
forge flood "$T/flood"
if t_wait "slurmd's log to say how many of the step's lines it dropped" 30 bash -c "tail -c +$((at + 1)) '$LOG1' | grep -q 'more line(s) of this step'"; then
  log_since "$at" >"$T/flood.log"
  n=$(grep -c 'sec-flood line' "$T/flood.log")
  if [ "$n" -le 128 ] && [ "$n" -ge 64 ] && grep -q "sec-flood: the failure after the flood" "$T/flood.log" &&
     grep -q "sec-flood: the failure after the flood" "$T/flood.out" && [ "$(grep -c 'more line(s) of this step' "$T/flood.log")" = 1 ]; then
    t_pass "18: 1000 forged progress lines: slurmd's log holds $n, then one line on what was dropped ($(grep -o '[0-9]* more line(s) of this step ([0-9]* bytes)' "$T/flood.log")), and the step's failure"
  else t_fail "18: the step's log budget" "$n flood lines: $(grep -v 'sec-flood line' "$T/flood.log" | tail -5)"; fi
else t_fail "18: the step's log budget" "no 'dropped' line: $(log_since "$at" | grep -vc 'sec-flood line') other lines, $(log_since "$at" | grep -c 'sec-flood line') flood lines"; fi

fi

# --- 19. every place root reads what a user controls has its bounds in doc/SECURITY.md (suspicion 3) ---
# The functions of plugin/ (root's side: the helper's files are the
# user's) that read from a process, a file, a pipe or the job's
# environment, against the table "Where root reads what a user controls".
if t_case "19: every place root reads what a user controls has its bounds in doc/SECURITY.md (suspicion 3)"; then
found=$(tests/integration/lib/root-reads.sh plugin/*.c | sort)
listed=$(sed -n '/^### Where root reads what a user controls/,/^### /p' doc/SECURITY.md |
         sed -n 's/^| `\([a-z]*\.c\): \([a-z_0-9]*\)` |.*/\1: \2/p' | sort)
missing=$(comm -23 <(echo "$found") <(echo "$listed")); stale=$(comm -13 <(echo "$found") <(echo "$listed"))
if [ -n "$found" ] && [ -z "$missing" ] && [ -z "$stale" ]; then
  t_pass "19: each of the $(wc -l <<<"$found") functions where root reads what a user controls has a row (size and time bound) in doc/SECURITY.md"
else t_fail "19: doc/SECURITY.md's table of root's reads" "not in the table: $(echo $missing) / in the table but reading nothing: $(echo $stale)"; fi

fi

# --- nothing left --------------------------------------------------------------------------------------
left=$(for n in 1 2; do skiff_procs $n; done)
mnt=$(findmnt -rn -o SOURCE,TARGET | grep -E "squashfuse|skiff-fuse|$RT/|$T" || true)
state=$(ls "$RT/$UID_U" 2>/dev/null | grep -vx blocks || true)
[ -z "$left" ] && [ -z "$mnt" ] && [ -z "$state" ] && t_pass "no helper, mount or state left after the attacks" ||
  t_fail "leftovers" "procs: $left / mounts: $mnt / state: $state"
t_done
