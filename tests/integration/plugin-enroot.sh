#!/bin/bash
# A site moving from pyxis + enroot (issue 30), on the real local Slurm
# cluster (tests/cluster/up, 3 nodes), as the non-root test user:
#   1. job scripts of the shapes public ones have, written from their
#      patterns: MLPerf's NeMo GPT-3 run.sub (clean pyxis leftovers with
#      `enroot remove -f $(enroot list)` on every node, `enroot import
#      --output` from a registry, a preload step per node with
#      --container-name, then --mpi=pmix with --container-mounts,
#      --container-workdir, --container-env=MASTER_PORT,MASTER_ADDR and
#      --no-container-mount-home) and JAX-Toolbox's submit_job.sh
#      (`sbatch --export=...,ENROOT_PASSWORD=...` for a private registry,
#      enroot's credentials file, a preload, a preamble, the main step with
#      --container-entrypoint); `enroot` is skiff-enroot, as
#      skiff-enroot-compat installs it;
#   2. pyxis's enroot habits: `enroot list -f` and `enroot exec PID` into a
#      running step's container, `enroot remove -f pyxis_NAME`;
#   3. pyxis behaviours: the mount target rule, umount:DST, /root under
#      --container-mount-home --container-remap-root, joining a running
#      container's namespaces (and refusing one it lacks), loopback up and
#      private /dev/shm and /dev/mqueue with --container-unshare, PMIx as
#      pyxis sets it up (also from a named container), nothing of a
#      scancelled step's container left;
#   4. enroot's site configuration (enroot_compat) under srun.
# Every container of the test lives in the test's own data path (the test
# user's home is shared by every checkout on the machine).
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT" || exit 1

[ "$(id -u)" -eq 0 ] || { t_skip "enroot on the cluster" "needs root to start the test cluster"; t_done; }
PLUGIN=$BUILD/plugin/spank_skiff.so
[ -f "$PLUGIN" ] || { t_fail "plugin built" "$PLUGIN missing (run make)"; t_done; }
[ -x "$BUILD/bin/skiff-enroot" ] || { t_fail "skiff-enroot built" "run make"; t_done; }
for b in skopeo mksquashfs; do
  command -v "$b" >/dev/null || { t_fail "enroot on the cluster" "$b missing (scripts/install-deps test)"; t_done; }
done

t_cluster 3 || t_done
U=$SKIFF_TEST_USER
UHOME=$(getent passwd "$U" | cut -d: -f6)
UID_U=$(id -u "$U")
T=$(mktemp -d /tmp/skiff-enroot-cluster.XXXXXX)
chmod 755 "$T"
cleanup() {
  registry_stop
  scancel -u "$U" --name=skiff-enroot-test 2>/dev/null
  rm -rf "$T"
  t_cluster_done
}
trap cleanup EXIT

# ---- the site: skiff.conf (private data, cache), bundled hooks, enroot as skiff-enroot ----
mkdir -p "$T/hooks" "$T/bin" "$T/data" "$T/cache" "$T/work" "$T/results" "$T/out" "$T/enrootcfg" "$T/ctl" "$T/save" \
  "$T/site/environ.d" "$T/site/mounts.d" "$T/site/hooks.d"
cp "$BUILD"/hooks/[0-9][0-9]-* "$T/hooks/" 2>/dev/null
ln -s "$BUILD/bin/skiff-enroot" "$T/bin/enroot"
cat >"$T/skiff.conf" <<EOF
hooks_dir = $T/hooks
data_path = $T/data
cache_path = $T/cache
allow_http = yes
enroot_compat = yes
enroot_sysconf_path = $T/site
plugin_runtime_path = $T/run
EOF
echo 'SITE_ENV=from-enroot-site' >"$T/site/environ.d/10-enroot-test.env"
cat >"$T/site/hooks.d/10-enroot-test.sh" <<'EOF'
#!/bin/sh
echo "SITE_HOOK=job-$SLURM_JOB_ID" >>"$ENROOT_ENVIRON"
EOF
chmod 755 "$T/site/hooks.d/10-enroot-test.sh"
chown "$U:" "$T/data" "$T/cache" "$T/work" "$T/results" "$T/out" "$T/enrootcfg" "$T/ctl" "$T/save"
chmod -R a+rX "$T"
# a runtime base of the test's own: /run/skiff is shared by every test
# cluster on the machine, whose nodes have the same names
echo "required $PLUGIN config=$T/skiff.conf runtime_path=$T/run" >"$SKIFF_PLUGSTACK"
# the user's job environment: enroot on PATH, skiff's configuration
JOBENV="PATH=$T/bin:/usr/local/bin:/usr/bin:/bin SKIFF_CONFIG=$T/skiff.conf"
as_user() { (cd "$T/work" && timeout 300 runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" $JOBENV "$@"); }
srun1() { as_user srun -Q -N1 -n1 -w n1 "$@"; }
out_is() { # NAME EXPECTED CMD...
  local name=$1 want=$2 got; shift 2
  got=$("$@" 2>"$T/err"); local rc=$?
  if [ $rc -ne 0 ]; then t_fail "$name" "exit $rc: $(head -c 600 "$T/err")"
  elif [ "$got" != "$want" ]; then t_fail "$name" "got '$got', want '$want' / $(head -c 300 "$T/err")"
  else t_pass "$name"; fi
}

# ---- images: busybox in a registry the nodes reach, behind a password ----
L=$T/layout
python3 "$T_ROOT/tests/integration/lib/mkimage.py" "$L" busybox-node busybox-ep >/dev/null 2>&1 && chmod -R a+rX "$L" ||
  { t_fail "build the test image"; t_done; }
/usr/bin/python3 -W ignore -c 'import crypt; print("alice:" + crypt.crypt("enroot-s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH)))' \
  >"$T/htpasswd"
REG_ADDR=$SKIFF_CLUSTER_HOST_ADDR registry_start "$T/reg" "$T/htpasswd" || { t_fail "start the registry"; t_done; }
REG=$SKIFF_CLUSTER_HOST_ADDR:$REG_PORT
for tag in busybox busybox-ep; do
  skopeo copy -q --dest-tls-verify=false --dest-creds alice:enroot-s3cret --format v2s2 "oci:$L:$tag" \
    "docker://$REG/enroot/$tag:1" >/dev/null 2>"$T/err" || { t_fail "push the test image" "$(cat "$T/err")"; t_done; }
done
# the user's enroot credentials: the password from the job's environment
printf 'machine %s login alice password $ENROOT_PASSWORD\n' "$REG" >"$T/enrootcfg/.credentials"
chown "$U:" "$T/enrootcfg/.credentials"; chmod 600 "$T/enrootcfg/.credentials"

# ==== 1a. MLPerf's shape (training_results_v4.0 NVIDIA gpt3 nemo run.sub) ====
cat >"$T/work/run-enroot.sub" <<'EOF'
#!/bin/bash
#SBATCH --job-name=skiff-enroot-test
set -eux
: "${CONT:?CONT not set}"
: "${CONT_FILE:=${PWD}/${SLURM_JOBID}_$(basename ${CONT//[#:]/_}).squashfs}"
: "${LOGDIR:?LOGDIR not set}"
: "${MASTER_PORT:=29500}"
export MASTER_PORT
readonly _cont_name="enroot_llm_${SLURM_JOB_ID}"
# pyxis sometimes leaves containers lying around which can really confuse things:
cleanup_pyxis() {
    srun --ntasks="${SLURM_JOB_NUM_NODES}" /bin/bash -c 'if [[ "$(enroot list)" ]]; then enroot remove -f $(enroot list); fi'
}
cleanup_pyxis
# container preload
srun --ntasks=1 enroot import --output "${CONT_FILE}" "docker://${CONT}"
trap 'rm -f "${CONT_FILE}"; cleanup_pyxis' EXIT
srun --ntasks="${SLURM_JOB_NUM_NODES}" --container-image="${CONT_FILE}" --container-name="${_cont_name}" true
srun -N1 -n1 --container-name="${_cont_name}" cat /etc/hostname
srun --ntasks="${SLURM_JOB_NUM_NODES}" /bin/bash -c 'echo "LIST $(hostname) $(enroot list | tr "\n" " ")"'
export MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST-}" | head -n1)"
srun --mpi=pmix --ntasks="$(( SLURM_JOB_NUM_NODES * 2 ))" --ntasks-per-node=2 \
     --no-container-mount-home --container-name="${_cont_name}" \
     --container-mounts="${LOGDIR}:/results" --container-workdir=/results \
     --container-env=MASTER_PORT,MASTER_ADDR \
     sh -c 'echo "RANK $RANK ${PMIX_RANK:-nopmix} ${PMIX_MCA_psec:-none}=${PMIX_SECURITY_MODE:-none} $MASTER_ADDR:$MASTER_PORT $(pwd) $(grep -c " '"$HOME"' " /proc/mounts) $SITE_ENV $SITE_HOOK" >rank-$RANK.txt'
EOF
chmod 755 "$T/work/run-enroot.sub"
rm -f "$T/results"/rank-*
out=$(as_user env CONT="$REG#enroot/busybox:1" LOGDIR="$T/results" ENROOT_PASSWORD=enroot-s3cret \
        ENROOT_CONFIG_PATH="$T/enrootcfg" sbatch -Q -N3 --ntasks-per-node=2 --wait -o "$T/work/mlperf.out" "$T/work/run-enroot.sub" 2>&1); rc=$?
log=$(cat "$T/work/mlperf.out" 2>/dev/null)
JOB=$(sed -n 's/.*enroot_llm_\([0-9]*\).*/\1/p' <<<"$log" | head -1)
if [ $rc = 0 ]; then t_pass "MLPerf-shaped run.sub: enroot import/list/remove around pyxis flags, exit 0"
else t_fail "MLPerf-shaped run.sub" "sbatch exit $rc: $out / $(grep -v '^+' <<<"$log" | tail -20)"; fi
lists=$(grep -c "^LIST n[123] pyxis_enroot_llm_${JOB} $" <<<"$log")
[ "$lists" = 3 ] && t_pass "enroot list on each node shows the preloaded container as pyxis named it (pyxis_enroot_llm_$JOB)" ||
  t_fail "enroot list per node" "$(grep ^LIST <<<"$log")"
ranks=$(cat "$T/results"/rank-*.txt 2>/dev/null | sort -n -k2)
want=$(for r in 0 1 2 3 4 5; do echo "RANK $r $r native=native n1:29500 /results 0 from-enroot-site job-$JOB"; done)
[ "$ranks" = "$want" ] && t_pass "the --mpi=pmix step from the named container: RANK = PMIX_RANK, PMIX_MCA_psec = PMIX_SECURITY_MODE, --container-env, --container-workdir, mounts, no home, enroot site env and hook" ||
  t_fail "the training step" "$(diff <(echo "$want") <(echo "$ranks"))"
left=$(ls -A "$T/data/containers" 2>/dev/null; ls "$T/work"/*.squashfs 2>/dev/null)
[ -z "$left" ] && t_pass "cleanup_pyxis (enroot remove -f \$(enroot list)) left no container" || t_fail "MLPerf cleanup" "$left"

# ==== 1b. JAX-Toolbox's shape (submit_job.sh): ENROOT_PASSWORD through --export ====
cat >"$T/work/jax-enroot.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=skiff-enroot-test
#SBATCH --export="$(tr ' ' ',' <<<"$JOBENV"),ENROOT_CONFIG_PATH=$T/enrootcfg,ENROOT_PASSWORD=enroot-s3cret"
# Preload enroot container using one task per node
srun --ntasks-per-node=1 --container-name=runtime --container-image=$REG#enroot/busybox-ep:1 true
# run single-task preambles for, e.g., dependencies installation
srun --ntasks-per-node=1 --container-name=runtime sh -c 'echo installed >/preamble-done'
# Run main tasks with shared container per node
srun --tasks=6 --tasks-per-node=2 --container-name=runtime --container-mounts=$T/out:/output \\
  --container-entrypoint sh -c 'echo "\$SLURM_PROCID \$(cat /preamble-done) \$ENTRYPOINT_RAN" >/output/task-\$SLURM_PROCID'
EOF
chmod 755 "$T/work/jax-enroot.sbatch"
out=$(cd "$T/work" && timeout 300 runuser -u "$U" -- env -i SLURM_CONF="$SLURM_CONF" PATH=/usr/bin:/bin HOME="$UHOME" \
        sbatch -Q -N3 --ntasks-per-node=2 --wait -o "$T/work/jax.out" "$T/work/jax-enroot.sbatch" 2>&1); rc=$?
got=$(cat "$T/out"/task-* 2>/dev/null | sort -n | tr '\n' ' ')
if [ $rc = 0 ] && [ "$got" = "0 installed yes 1 installed yes 2 installed yes 3 installed yes 4 installed yes 5 installed yes " ]; then
  t_pass "JAX-Toolbox-shaped submit: a private registry through enroot's .credentials with ENROOT_PASSWORD from --export, preload, preamble, main step through the image's entrypoint"
else t_fail "JAX-Toolbox-shaped submit" "exit $rc: $out / $got / $(tail -5 "$T/work/jax.out" 2>/dev/null)"; fi
out=$(cd "$T/work" && timeout 120 runuser -u "$U" -- env -i SLURM_CONF="$SLURM_CONF" PATH=/usr/bin:/bin HOME="$UHOME" \
        srun -Q -N1 -w n1 --export="$(tr ' ' ',' <<<"$JOBENV"),ENROOT_CONFIG_PATH=$T/enrootcfg" \
        --container-image="$REG#enroot/busybox:2" true 2>&1)
grep -q "ENROOT_PASSWORD, which is not set" <<<"$out" &&
  t_pass "without ENROOT_PASSWORD in the job the import says which variable is missing" ||
  t_fail "missing ENROOT_PASSWORD" "$out"
rm -rf "$T/data/containers"/runtime.*

# ==== 2. pyxis's enroot habits: list -f, exec PID, remove -f pyxis_NAME ====
IMG=$T/work/bb.sqsh
as_user "$BUILD/bin/skiff-enroot" import -o "$IMG" "oci:$L:busybox" >/dev/null 2>&1 ||
  { t_fail "import the busybox image"; t_done; }
# (a container runs until its /ctl/stop-NAME appears: killing a backgrounded
# srun would not reach the step)
until_stopped() { echo "touch /tmp/up; while [ ! -e /ctl/stop-$1 ]; do sleep 0.1; done"; }
srun1 --container-image="$IMG" --container-name=enroot-exec --container-mounts="$T/ctl:/ctl" \
  sh -c "$(until_stopped exec)" >/dev/null 2>"$T/bg.err" &
BG=$!
pid=""
for _ in $(seq 100); do
  pid=$(srun1 enroot list -f 2>/dev/null | awk '$1 == "pyxis_enroot-exec" {print $2}')
  [ -n "$pid" ] && srun1 enroot exec "$pid" test -e /tmp/up 2>/dev/null && break
  sleep 0.2
done
[ -n "$pid" ] || t_fail "enroot list -f shows the running step's container" "$(srun1 enroot list -f 2>&1; cat "$T/bg.err")"
out_is "enroot list -f on the node: the step's container with its PID; enroot exec PID runs in it" "in n1" \
  srun1 enroot exec "${pid:-0}" sh -c 'test -e /tmp/up && echo in $(hostname)'
out=$(srun1 enroot remove -f pyxis_enroot-exec 2>&1) && t_fail "enroot remove -f of a running container is refused" "$out" ||
  { grep -q "in use" <<<"$out" && t_pass "enroot remove -f of a running container is refused (in use)" ||
    t_fail "remove of a running container" "$out"; }
touch "$T/ctl/stop-exec"; wait $BG 2>/dev/null
out_is "enroot remove -f pyxis_NAME removes the step's named container (just stopped)" "" \
  srun1 sh -c 'enroot remove -f pyxis_enroot-exec && enroot list'

# ==== 3. pyxis behaviours ====
t_fails_with "mounts: a target neither absolute nor ./relative is refused (pyxis)" \
  "mount destination 'mnt' is neither absolute nor relative" srun1 --container-image="$IMG" --container-mounts=/tmp:mnt:ro true
out_is "mounts: umount:DST takes --container-mount-home's home away" "0" \
  srun1 --container-image="$IMG" --container-mount-home --container-mounts="umount:$UHOME" sh -c "grep -c ' $UHOME ' /proc/mounts || true"
out_is "mount-home + remap-root: HOME=/root, /root a private tmpfs, the home at its own path" "/root tmpfs 1" \
  srun1 --container-image="$IMG" --container-mount-home --container-remap-root \
  sh -c "echo \$HOME \$(awk '\$2 == \"/root\" {print \$3}' /proc/mounts) \$(grep -c ' $UHOME ' /proc/mounts)"
out=$(srun1 --container-image="$IMG" --container-unshare=net sh -c 'nc 127.0.0.1 1 </dev/null' 2>&1)
grep -q "Connection refused" <<<"$out" && t_pass "unshare=net: loopback up (Connection refused, not unreachable)" ||
  t_fail "unshare=net loopback" "$out"
host_shm=$(stat -c %d /dev/shm)
out_is "unshare=ipc: a private /dev/shm (a tmpfs) and /dev/mqueue (an mqueue)" "private tmpfs mqueue" \
  srun1 --container-image="$IMG" --container-unshare=ipc sh -c \
  "[ \$(stat -c %d /dev/shm) != $host_shm ] && echo private \$(awk '\$2 == \"/dev/shm\" {print \$3} \$2 == \"/dev/mqueue\" {print \$3}' /proc/mounts)"
out_is "without unshare=ipc: /dev/shm is the node's, /dev/mqueue exists" "$host_shm d" \
  srun1 --container-image="$IMG" sh -c 'echo $(stat -c %d /dev/shm) $(stat -c %F /dev/mqueue | cut -c1)'
# joining running containers: their namespaces, or pyxis's error
srun1 --container-image="$IMG" --container-name=enroot-ns --container-unshare=uts,ipc,net --container-mounts="$T/ctl:/ctl" \
  sh -c "hostname enroot-ns-host; $(until_stopped ns)" >/dev/null 2>&1 &
BG=$!
srun1 --container-image="$IMG" --container-name=enroot-nons --container-mounts="$T/ctl:/ctl" \
  sh -c "$(until_stopped nons)" >/dev/null 2>&1 &
BG2=$!
for n in enroot-ns enroot-nons; do
  for _ in $(seq 100); do srun1 --overlap --container-name=$n:exec test -e /tmp/up 2>/dev/null && break; sleep 0.2; done
done
nsl='for n in uts ipc net; do readlink /proc/self/ns/$n; done'
node_ns=$(srun1 --overlap sh -c "$nsl" | tr '\n' ' ')
got=$(srun1 --overlap --container-name=enroot-ns sh -c "hostname; $nsl" | tr '\n' ' ')
if [ "${got%% *}" = enroot-ns-host ] && [ "$(wc -w <<<"$node_ns")" = 3 ] && ! grep -qF "$(cut -d' ' -f1 <<<"$node_ns")" <<<"$got" &&
   ! grep -qF "$(cut -d' ' -f2 <<<"$node_ns")" <<<"$got" && ! grep -qF "$(cut -d' ' -f3 <<<"$node_ns")" <<<"$got"; then
  t_pass "a step joining a running container is in its UTS, IPC and network namespaces"
else t_fail "joined namespaces" "node: $node_ns / joined: $got"; fi
for ns in uts:UTS ipc:IPC net:network; do
  t_fails_with "--container-unshare=${ns%%:*} on a running container without it: pyxis's error" \
    "not in a separate ${ns#*:} namespace" srun1 --overlap --container-name=enroot-nons --container-unshare=${ns%%:*} true
done
touch "$T/ctl/stop-ns" "$T/ctl/stop-nons"; wait $BG $BG2 2>/dev/null
srun1 enroot remove -f pyxis_enroot-ns pyxis_enroot-nons >/dev/null 2>&1
# PMIx from a named container (pyxis's mpi.bats "PMIx environment variables")
MPI_IMG=$(scripts/make-mpi-image "${SKIFF_TEST_CACHE:-/var/cache/skiff-tests}" 2>/dev/null) || MPI_IMG=""
if [ -n "$MPI_IMG" ]; then
  srun1 --container-image="$MPI_IMG" --container-name=enroot-mpi true
  out=$(as_user srun -Q -N1 -w n1 --mpi=pmix --ntasks=4 --container-name=enroot-mpi bash -c \
    'echo "${PMIX_RANK:-x} ${PMIX_MCA_psec:-x}=${PMIX_SECURITY_MODE:-y} ${PMIX_MCA_gds:-x}=${PMIX_GDS_MODULE:-y} $(findmnt -n -o TARGET "${PMIX_SERVER_TMPDIR%/}")=${PMIX_SERVER_TMPDIR%/}"' 2>&1 | sort)
  srun1 enroot remove -f pyxis_enroot-mpi >/dev/null 2>&1
  if [ "$(cut -d' ' -f1 <<<"$out" | tr '\n' ' ')" = "0 1 2 3 " ] &&
     [ -z "$(awk '{for (i = 2; i <= 4; i++) {split($i, a, "="); if (a[1] != a[2]) print}}' <<<"$out")" ]; then
    t_pass "PMIx from a named container: PMIX_RANK, PMIX_MCA_psec/gds = PMIX_SECURITY_MODE/GDS_MODULE, the server directory mounted"
  else t_fail "PMIx from a named container" "$out"; fi
else t_skip "PMIx from a named container" "no MPI image (scripts/make-mpi-image)"; fi
# scancel of a step: nothing of its container is left (with --container-save: its
# temporary named container, the export's state and partial image)
st_before=$(ls -A "$T/run/$UID_U" 2>/dev/null | grep -vx blocks)
as_user sbatch -Q -N1 -w n2 --job-name=skiff-enroot-test -o /dev/null \
  --wrap "srun --container-image=$IMG --container-save=$T/save/saved.sqsh sh -c 'dd if=/dev/urandom of=/tmp/big bs=1M count=64 2>/dev/null; touch /tmp/up; sleep 60'" >/dev/null
for _ in $(seq 150); do
  STEP=$(squeue -h -s -u "$U" -n skiff-enroot-test -o %i 2>/dev/null | grep -v batch | head -1)
  [ -n "$STEP" ] && ls "$T/data/containers" 2>/dev/null | grep -q '^save\.' && break
  sleep 0.2
done
sleep 2
[ -n "$STEP" ] && scancel "$STEP"
for _ in $(seq 300); do squeue -h -u "$U" -n skiff-enroot-test 2>/dev/null | grep -q . || break; sleep 0.5; done
sleep 1
st_after=$(ls -A "$T/run/$UID_U" 2>/dev/null | grep -vx blocks)
left="$(ls -A "$T/data/containers" 2>/dev/null) $(ls -A "$T/save" | grep -v '^saved.sqsh$') $(comm -13 <(echo "$st_before") <(echo "$st_after") | grep -v '^$')"
left=$(tr -s ' ' <<<"$left" | sed 's/^ //; s/ $//')
[ -z "$left" ] && t_pass "after scancel of a --container-save step: no container (enroot list, skiff list), no state, no partial image" ||
  t_fail "leftovers after scancel" "$left"
pgrep -u "$U" -f "$T" >/dev/null && t_fail "nothing of the test runs" "$(pgrep -u "$U" -a -f "$T")" ||
  t_pass "nothing of the test runs"
t_done
