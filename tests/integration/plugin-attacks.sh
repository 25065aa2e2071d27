#!/bin/bash
# The security review's attacks on spank_skiff.so (findings 1-6; 7 is in
# runtime-import.sh), each performed as an ordinary user on a real local
# Slurm cluster. Every case passes because the attack fails, and nothing is
# left behind.
#
# It runs in a private mount namespace with a cluster of its own: before the
# fixes, a forged holder pid made slurmstepd SIGKILL every process of the
# mount namespace it named, and that must never be the machine's.
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT"
[ "$(id -u)" -eq 0 ] || { t_skip "plugin attacks" "needs root to start the test cluster"; t_done; }
PLUGIN=${SKIFF_PLUGIN:-$BUILD/plugin/spank_skiff.so} # tests/cluster/up loads it
HELPERS=$(dirname "$PLUGIN") # skiff-helper and skiff-helper-full, beside it
[ -f "$PLUGIN" ] && [ -x "$HELPERS/skiff-helper" ] || { t_fail "plugin built" "run make"; t_done; }
t_private_mount_ns "plugin attacks" "$@"
SKIFF_CLUSTER_QUIET=1 BUILD=$BUILD tests/cluster/up 2 || { t_fail "cluster up"; t_done; }
source tests/cluster/run/env.sh
U=$SKIFF_TEST_USER
UID_U=$(id -u "$U")
UHOME=$(getent passwd "$U" | cut -d: -f6)
O=skiffother
id "$O" >/dev/null 2>&1 || useradd -M -s /bin/bash "$O" 2>/dev/null || id "$O" >/dev/null || { t_fail "second user"; t_done; }
T=$(mktemp -d /tmp/skiff-attack.XXXXXX)
chmod 755 "$T"
victims=()
cleanup() {
  for p in "${victims[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$T" "$UHOME/f1" "$UHOME/f2" "$UHOME/.local/share/skiff/containers/atk-"* /dev/shm/skiff-"$UID_U" \
    /dev/shm/skiff-attack /tmp/skiff-victim-dir
  SKIFF_CLUSTER_QUIET=1 tests/cluster/down
}
trap cleanup EXIT

plugstack() { echo "required $PLUGIN $*" >"$SKIFF_PLUGSTACK"; }
as_user() { (cd "$T" && runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" "$@"); }
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
helper_of() { # N VERB: the pid of `skiff-helper VERB` (start; the others are skiff-helper-full's) on node N, waiting up to 10 s
  local p prog=$HELPERS/skiff-helper
  [ "$2" = start ] || prog=$prog-full
  for _ in $(seq 200); do
    for p in $(node_pids "$1"); do
      [ "$(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)" = "$prog $2 " ] &&
        [ "$(stat -c %u /proc/$p)" = "$UID_U" ] && { echo "$p"; return 0; }
    done
    sleep 0.05
  done
  return 1
}
gone_within() { # SECONDS CMD: CMD prints nothing within SECONDS
  for _ in $(seq $(($1 * 10))); do [ -z "$("${@:2}")" ] && return 0; sleep 0.1; done
  return 1
}

# the image, and the attacker's tool
R=$T/rootfs
mkdir -p "$R"/{bin,etc,tmp,proc,dev,sys}
cp /bin/busybox "$R/bin/"
for c in sh cat true sleep ls hostname; do ln -sf busybox "$R/bin/$c"; done
touch "$R/etc/hosts" "$R/etc/resolv.conf" "$R/etc/hostname"
mksquashfs "$R" "$T/bb.sqsh" -quiet -noappend -comp zstd -all-root >/dev/null && chmod 644 "$T/bb.sqsh"
cc -O2 -o "$T/getfd" tests/integration/attack-getfd.c 2>"$T/cc.log" || { t_fail "build the attacker's tool" "$(cat "$T/cc.log")"; t_done; }
chmod 755 "$T/getfd"

# Processes a successful forgery would have killed: root's, and one of the
# user's own in this (the host's, for the cluster) mount namespace.
sleep 1000 & victims+=($!); ROOT_VICTIM=$!
# (setpriv execs: $! is the user's sleep, not a root runuser waiting for it)
setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups sleep 1000 & victims+=($!); USER_VICTIM=$!
SLURMD_N2=$(pgrep -f "slurmd -f $SLURM_CONF -N n2" | head -1)

# forge NAME PAYLOAD_FILE: starts a step whose helper blocks on a FIFO (as
# the review did), takes the helper's reply pipe with pidfd_getfd and
# writes PAYLOAD_FILE into it; the step's output goes to $T/NAME.out.
forge() {
  local name=$1 payload=$2 h
  rm -f "$UHOME/f1"; runuser -u "$U" -- mkfifo "$UHOME/f1"
  as_user srun -Q -n1 -w n1 --container-image="docker-archive:$UHOME/f1" true >"$T/$name.out" 2>&1 &
  local spid=$!
  if ! h=$(helper_of 1 start); then
    kill $spid; wait $spid; echo "no helper found" >>"$T/$name.out"; return 1
  fi
  chmod 644 "$payload"
  runuser -u "$U" -- "$T/getfd" "$h" 4 write "$payload" >>"$T/$name.out" 2>&1 || echo "getfd failed" >>"$T/$name.out"
  wait $spid
  echo "rc=$?" >>"$T/$name.out"
}

plugstack timeout=6

# --- 1. a forged reply naming someone else's process -------------------------------------
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

# --- 2. a named container whose image is a link to a root-only file ----------------------------
d=$UHOME/.local/share/skiff/containers/atk-shd.n1
runuser -u "$U" -- sh -c "mkdir -p '$d/upper' '$d/work' && ln -sfn /etc/shadow '$d/image'"
out=$(as_user srun -Q -n1 -w n1 --container-name=atk-shd true 2>&1); rc=$?
first=$(head -1 /etc/shadow)
if [ $rc -eq 0 ] || grep -qF "$first" <<<"$out" || grep -qF "${first%%:*}:" <<<"$(grep -v 'skiff:' <<<"$out")"; then
  t_fail "2: named container image -> /etc/shadow" "rc=$rc: $out"
elif grep -q "Permission denied" <<<"$out"; then t_pass "2: a named container linked to /etc/shadow is read as the user (Permission denied), nothing of it shown"
else t_fail "2: named container image -> /etc/shadow" "$out"; fi
runuser -u "$U" -- sh -c "rm -f '$UHOME/f2'; mkfifo '$UHOME/f2'; ln -sfn '$UHOME/f2' '$d/image'"
start=$(date +%s)
out=$(as_user srun -Q -n1 -w n1 --container-name=atk-shd true 2>&1); rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -ne 0 ] && [ "$took" -le 20 ] && grep -q "within 6 s" <<<"$out"; then
  t_pass "2: a named container linked to a FIFO fails at the deadline (${took} s), root not blocked"
else t_fail "2: named container -> FIFO" "rc=$rc, ${took} s: $out"; fi

# --- 3. no fd of slurmstepd's in any process the user can reach -----------------------------------
# the start helper, the holder and the FUSE server during a step
as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" sleep 4 >/dev/null 2>&1 &
spid=$!
helper_of 1 start >/dev/null
sleep 1
bad=""; seen=0
for p in $(skiff_procs 1); do
  seen=$((seen + 1))
  fds=$(runuser -u "$U" -- "$T/getfd" "$p" 0 list 2>/dev/null)
  bad+=$(grep -E 'socket:|/run/skiff-cluster|slurm' <<<"$fds" | sed "s/^/$p: /")
done
wait $spid
# an exit-time helper: an importer whose release takes a while
mkdir -p "$T/imp"; cat >"$T/imp/importer" <<EOF
#!/bin/sh
[ "\$1" = get ] && echo "$T/bb.sqsh" && exit 0
[ "\$1" = release ] && sleep 3
exit 0
EOF
chmod 755 "$T/imp/importer"
plugstack timeout=6 importer="$T/imp/importer"
as_user srun -Q -n1 -w n1 --container-image=site/bb:1 true >"$T/release.out" 2>&1 &
spid=$!
h=$(helper_of 1 release)
if [ -n "$h" ]; then
  seen=$((seen + 1))
  fds=$(runuser -u "$U" -- "$T/getfd" "$h" 0 list 2>/dev/null)
  bad+=$(grep -E 'socket:|/run/skiff-cluster|slurm' <<<"$fds" | sed "s/^/$h: /")
  extra=$(awk '$1 > 5' <<<"$fds")
  [ -z "$extra" ] || bad+=" release helper holds fds beyond 0-5: $extra"
fi
wait $spid
plugstack timeout=6
if [ "$seen" -ge 4 ] && [ -z "$bad" ]; then
  t_pass "3: helper, holder, FUSE server and an exit-time helper hold no socket or file of slurmstepd's ($seen processes)"
else t_fail "3: fds reachable by the user" "seen=$seen: $bad / release step: $(head -c 300 "$T/release.out")"; fi

# --- 4. a FIFO as the image: slurmstepd is not wedged ----------------------------------------------
rm -f "$UHOME/f1"; runuser -u "$U" -- mkfifo "$UHOME/f1"
start=$(date +%s)
out=$(as_user srun -Q -n1 -w n1 --container-image="docker-archive:$UHOME/f1" true 2>&1); rc=$?
took=$(( $(date +%s) - start ))
jobs_left() { squeue -h -u "$U" 2>/dev/null; }
if [ $rc -ne 0 ] && grep -q "no answer from the user-side helper within 6 s" <<<"$out" && gone_within 20 jobs_left &&
   gone_within 5 skiff_procs 1; then
  t_pass "4: docker-archive:FIFO fails after the deadline (${took} s), the job ends, no helper left"
else t_fail "4: FIFO image" "rc=$rc ${took}s: $out / jobs: $(jobs_left) / procs: $(skiff_procs 1)"; fi

# --- 5. another user takes the victim's runtime directory name first ----------------------------------
runuser -u "$O" -- mkdir -p /dev/shm/skiff-"$UID_U"
out=$(as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" cat /etc/hostname 2>&1); rc=$?
[ $rc -eq 0 ] && t_pass "5: /dev/shm/skiff-UID taken by another user does not stop the victim's containers" ||
  t_fail "5: squatted /dev/shm/skiff-UID" "$out"
[ "$(stat -c %u:%a /run/skiff)" = "0:755" ] && [ "$(stat -c %U:%a "/run/skiff/$UID_U")" = "$U:700" ] &&
  t_pass "5: the runtime base is root's (0755) with a private directory per user" ||
  t_fail "5: runtime base" "$(ls -ld /run/skiff "/run/skiff/$UID_U")"
runuser -u "$O" -- mkdir -p /dev/shm/skiff-attack
plugstack timeout=6 runtime_path=/dev/shm/skiff-attack
t_fails_with "5: a runtime_path base another user created first is refused, and named for the admin" \
  "runtime_path /dev/shm/skiff-attack must be a directory owned by root" \
  as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" true
plugstack timeout=6

# --- 6. the state directory swapped for a link to another user's files -------------------------------
mkdir -p /tmp/skiff-victim-dir && echo keep >/tmp/skiff-victim-dir/file
chown -R "$O:" /tmp/skiff-victim-dir && chmod 777 /tmp/skiff-victim-dir && chmod 666 /tmp/skiff-victim-dir/file
as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" sleep 3 >/dev/null 2>&1 &
spid=$!
st=""
for _ in $(seq 100); do st=$(ls "/run/skiff/$UID_U" 2>/dev/null | grep '^n1\.' | grep -v '\.old$' | head -1); [ -n "$st" ] && break; sleep 0.05; done
runuser -u "$U" -- sh -c "cd /run/skiff/$UID_U && mv '$st' '$st.old' && ln -s /tmp/skiff-victim-dir '$st'" 2>"$T/swap.err"
wait $spid
sleep 1
if [ -n "$st" ] && [ -L "/run/skiff/$UID_U/$st" ] && [ "$(cat /tmp/skiff-victim-dir/file 2>/dev/null)" = keep ]; then
  t_pass "6: a state directory swapped for a link: the other user's files are untouched"
else t_fail "6: swapped state dir" "state '$st' $(cat "$T/swap.err"): $(ls -la /tmp/skiff-victim-dir 2>&1)"; fi
runuser -u "$U" -- rm -rf "/run/skiff/$UID_U/$st" "/run/skiff/$UID_U/$st.old"

# --- 8. attaching to a running container (--container-name, issue 14) --------------------------------
# Root never reads the user's state to pick a namespace: the helper looks
# the container up as the user, root checks the process it names, and the
# tasks join as the user.
rm -f "$T/o-stop"
(cd /tmp && runuser -u "$O" -- env SLURM_CONF="$SLURM_CONF" srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" \
  sh -c 'while :; do sleep 1; done') >"$T/o.out" 2>&1 &
OSRUN=$!
O_HOLDER=""
for _ in $(seq 100); do
  for p in $(node_pids 1); do
    [ "$(stat -c %U /proc/$p 2>/dev/null)" = "$O" ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = skiff-holder ] && O_HOLDER=$p
  done
  [ -n "$O_HOLDER" ] && break; sleep 0.1
done
O_JOB=$(squeue -h -u "$O" -o %i 2>/dev/null | head -1)
if [ -n "$O_HOLDER" ] && [ -n "$O_JOB" ]; then
  t_fails_with "8: another user's running step, named JOBID.STEPID, is not found (each user's containers are their own)" \
    "container '$O_JOB.0' is not running on n1" as_user srun -Q -n1 -w n1 --container-name="$O_JOB.0:exec" true
  # a state record in the user's own runtime directory naming the other
  # user's holder (and its real namespace), or a root process
  for victim in "$O_HOLDER" "$ROOT_VICTIM"; do
    d=/run/skiff/$UID_U/n1.999999.0
    mkdir -p "$d"
    printf 'H%s\0W/\0Nforged\0M%s\0' "$victim" "$(stat -L -c '%d:%i' /proc/$victim/ns/mnt)" >"$d/state"
    chown -R "$U:" "$d"
    t_fails_with "8: a forged state record naming $( [ "$victim" = "$O_HOLDER" ] && echo "another user's container" || echo "a root process") is not attached to" \
      "container '999999.0' is not running on n1" as_user srun -Q -n1 -w n1 --container-name=999999.0:exec true
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
SLURMD_N1=$(pgrep -f "slurmd -f $SLURM_CONF -N n1" | head -1)
nsenter -t "$SLURMD_N1" -n -u setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups unshare -Urm sleep 1000 &
victims+=($!); NS_VICTIM=$!
for _ in $(seq 50); do [ "$(readlink /proc/$NS_VICTIM/ns/user)" != "$(readlink /proc/self/ns/user)" ] && break; sleep 0.1; done
printf 'S0\0H%d\0W/\0J1\0Z\0' "$NS_VICTIM" >"$T/forge-own"
forge forge-own "$T/forge-own"
sleep 1
if grep -q "rc=0" "$T/forge-own.out" && kill -0 "$NS_VICTIM" 2>/dev/null; then
  t_pass "8: a forged attach to the user's own namespace is joined as the user (nothing new), and root kills nothing in it"
else t_fail "8: forged attach to the user's own namespace" "its process was killed: $(cat "$T/forge-own.out")"; fi

# --- 9. the id filter and the namespace's capabilities grant nothing on the host ------------------------
cc -static -O2 -o "$T/ids" tests/integration/attack-ids.c 2>"$T/cc.log" || t_fail "build attack-ids" "$(cat "$T/cc.log")"
chmod 755 "$T/ids"
echo mine >"$T/owned"; chown "$U:" "$T/owned"; chmod 644 "$T/owned"
for remap in "" --container-remap-root; do
  out=$(as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" $remap \
        --container-mounts="$T/ids:/ids,$T/owned:/owned,/etc/shadow:/shadow" /ids /owned /shadow 2>&1)
  inside=$( [ -n "$remap" ] && echo 0 || echo "$UID_U")
  if grep -q "setuid=0 setresuid=0 setgroups=0 chown=0 uid=$inside euid=$inside read=EACCES" <<<"$out" &&
     [ "$(stat -c %U "$T/owned")" = "$U" ]; then
    t_pass "9: ${remap:-no remap}: setuid(0), setgroups and chown report success yet change nothing: ids stay, the host file stays the user's, /etc/shadow stays unreadable"
  else t_fail "9: id filter ${remap:-no remap}" "$out / owner $(stat -c %U "$T/owned")"; fi
done
t_fails_with "9: root in the container's namespace cannot set the node's hostname" "Operation not permitted|must be root|denied" \
  as_user srun -Q -n1 -w n1 --container-image="$T/bb.sqsh" --container-remap-root hostname attacker
[ "$(as_user srun -Q -n1 -w n1 hostname 2>&1)" = n1 ] && t_pass "9: the node's hostname is unchanged" ||
  t_fail "9: node hostname" "$(as_user srun -Q -n1 -w n1 hostname 2>&1)"

# --- nothing left --------------------------------------------------------------------------------------
left=$(for n in 1 2; do skiff_procs $n; done)
mnt=$(findmnt -rn -o SOURCE,TARGET | grep -E "squashfuse|skiff-fuse|/run/skiff/|$T" || true)
state=$(ls "/run/skiff/$UID_U" 2>/dev/null | grep -vx blocks || true)
[ -z "$left" ] && [ -z "$mnt" ] && [ -z "$state" ] && t_pass "no helper, mount or state left after the attacks" ||
  t_fail "leftovers" "procs: $left / mounts: $mnt / state: $state"
t_done
