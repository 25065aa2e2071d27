#!/bin/bash
# The RDMA fabric and GPUs in containers as enroot's hooks expose them
# (issue 25), on a host that looks like a GPU node with InfiniBand, EFA and
# Slingshot to the hooks: tests/fixtures/nvidia-driver/make-fixture (real
# character devices with the right names and numbers, a sysfs tree of two
# ConnectX HCAs and an EFA adapter, /proc/driver/nvidia with a MIG device, a
# driver root with tiny NVIDIA libraries and this host's real rdma-core
# libraries and providers). No GPU, HCA or RDMA kernel driver exists here:
# what runs for real is the hooks, the runtime, Slurm (with GRES gpu over
# the fixture's device nodes), Open MPI under --mpi=pmix, the image's
# ldconfig and dynamic linker, and rdma-core's own ibv_devinfo/ibv_devices
# (they list the fixture's devices; opening one fails, no driver owns it).
#   1. the rdma hook as the runtime runs it (argv = its path, the ABI
#      environment, as the test user), pointed at the fixture by 45-rdma.conf;
#   2. skiff doctor --fabric against the fixture;
#   3. on the real local cluster, in the fabric test image
#      (scripts/make-fabric-image: the MPI image, ibverbs-utils and an NGC
#      image's NVIDIA_* environment): rdma-core's tools, an MLPerf-shaped
#      and a Megatron-shaped job script, --gpus-per-task, CUDA_VISIBLE_DEVICES
#      renumbering, the line srun prints when a multi-node step gets no RDMA
#      device, RLIMIT_MEMLOCK, the host's RDMA libraries (mount_driver).
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT" || exit 1
[ "$(id -u)" -eq 0 ] || { t_skip "RDMA and GPU hooks against the fixture" "needs root (mknod)"; t_done; }
H=$BUILD/hooks
make -s "BUILD=$BUILD" "$H/10-identity" "$H/20-home" "$H/30-shm" "$H/40-gpu" "$H/45-rdma" "$H/50-pmix" \
  "$H/60-slurm" "$BUILD/bin/skiff" >/dev/null || { t_fail "build hooks and skiff"; t_done; }

T=$(mktemp -d /tmp/skiff-fabric-test.XXXXXX)
chmod 755 "$T"
cleanup() { rm -rf "$T"; }
trap cleanup EXIT
USR=${SKIFF_TEST_USER:-skifftest}
id "$USR" >/dev/null 2>&1 || useradd -m -s /bin/bash "$USR" 2>/dev/null
F=$T/fx
tests/fixtures/nvidia-driver/make-fixture "$F" || { t_fail "fixture (make-fixture)"; t_done; }

# hooks directories as an admin installs them, NAME.conf beside each hook
hooks() { # hooks DIR [RDMA-KNOB-LINE...]
  local d=$1; shift
  mkdir -p "$d"
  cp "$H"/[0-9][0-9]-* "$d/"
  printf 'dev_root = %s\ndriver_root = %s\ndriver_proc = %s\n' "$F/dev" "$F/driver" "$F/proc/driver/nvidia" \
    >"$d/40-gpu.conf"
  printf 'dev_root = %s\nsys_root = %s\ndriver_root = %s\n' "$F/dev" "$F/sys" "$F/driver" >"$d/45-rdma.conf"
  for l in "$@"; do echo "$l" >>"$d/45-rdma.conf"; done
}
hooks "$T/hooks"
hooks "$T/hooks-off" "default_visible = void"
hooks "$T/hooks-mofed" "mount_driver = yes"
hooks "$T/hooks-nocxi" "cxi = no"
hooks "$T/hooks-bad" "mount_drivers = yes"
chmod -R a+rX "$T"

# --- 1. the rdma hook alone --------------------------------------------------------------------
# rdma DIR [VAR=VALUE...]: runs DIR/45-rdma as the runtime does (IMAGE_ENV:
# the image's environment); its stderr in $T/err
UNLIMITED=SLURM_RLIMIT_MEMLOCK=18446744073709551615
rdma() {
  local dir=$1; shift
  t_hook_run "$T" "$USR" "$dir/45-rdma" "$@" 2>"$T/err"
}
# rdma_err: rdma with its stderr on stdout (for t_fails_with)
rdma_err() {
  rdma "$@"
  local rc=$?
  cat "$T/err"
  return $rc
}
targets() { awk '{print $2}' "$T/fstab" | sort | tr '\n' ' '; }
want_set() { tr ' ' '\n' <<<"$*" | grep . | sort | tr '\n' ' '; }
IB=/dev/infiniband
ALL="$IB/uverbs0 $IB/uverbs1 $IB/uverbs2 $IB/umad0 $IB/umad1 $IB/issm0 $IB/rdma_cm /dev/cxi0"

if rdma "$T/hooks" $UNLIMITED && [ "$(targets)" = "$(want_set "$ALL")" ] && [ ! -s "$T/err" ] &&
   grep -qx "$F/dev/infiniband/uverbs0 $IB/uverbs0 none rw,bind,x-create=file" "$T/fstab"; then
  t_pass "no MELLANOX_VISIBLE_DEVICES (default_visible = all): every HCA's uverbs, umad and issm node, rdma_cm, Slingshot's cxi0"
else t_fail "rdma default" "$(cat "$T/fstab" "$T/err")"; fi
# natural name order: efa_0 (0), mlx5_0 (1), mlx5_1 (2)
if rdma "$T/hooks" $UNLIMITED MELLANOX_VISIBLE_DEVICES=1 &&
   [ "$(targets)" = "$(want_set "$IB/uverbs0 $IB/umad0 $IB/issm0 $IB/rdma_cm /dev/cxi0")" ] &&
   rdma "$T/hooks" $UNLIMITED MELLANOX_VISIBLE_DEVICES=0,2 &&
   [ "$(targets)" = "$(want_set "$IB/uverbs2 $IB/uverbs1 $IB/umad1 $IB/rdma_cm /dev/cxi0")" ]; then
  t_pass "MELLANOX_VISIBLE_DEVICES=1: mlx5_0's nodes only; =0,2: efa_0 and mlx5_1 (indices in natural name order)"
else t_fail "rdma indices" "$(cat "$T/fstab")"; fi
ok=1
for e in MELLANOX_VISIBLE_DEVICES=none MELLANOX_VISIBLE_DEVICES=void; do
  rdma "$T/hooks" "$e" && [ ! -s "$T/fstab" ] || ok=0
done
IMAGE_ENV=MELLANOX_VISIBLE_DEVICES=none rdma "$T/hooks" && [ ! -s "$T/fstab" ] || ok=0
IMAGE_ENV=MELLANOX_VISIBLE_DEVICES=none rdma "$T/hooks" $UNLIMITED MELLANOX_VISIBLE_DEVICES=all &&
  [ "$(targets)" = "$(want_set "$ALL")" ] || ok=0
[ $ok = 1 ] && t_pass "none and void (the job's or the image's) give no fabric device; the job's all wins over the image's none" ||
  t_fail "rdma none/void/image" "$(cat "$T/fstab")"
t_fails_with "an index the node does not have is an error that lists the devices" \
  "MELLANOX_VISIBLE_DEVICES lists RDMA device 3, but this node has 3: 0 efa_0, 1 mlx5_0, 2 mlx5_1" \
  rdma_err "$T/hooks" MELLANOX_VISIBLE_DEVICES=3
t_fails_with "a device name where an index belongs is an error" \
  "MELLANOX_VISIBLE_DEVICES: RDMA device list 'mlx5_0': expected a device index" \
  rdma_err "$T/hooks" MELLANOX_VISIBLE_DEVICES=mlx5_0
t_fails_with "an unknown knob is an error naming the file and line" "45-rdma.conf:4: unknown key 'mount_drivers'" \
  rdma_err "$T/hooks-bad"
if rdma "$T/hooks-nocxi" $UNLIMITED && ! grep -q cxi "$T/fstab"; then t_pass "cxi = no: no Slingshot device"
else t_fail "cxi = no" "$(cat "$T/fstab")"; fi

# what the user is told, once per step: the first node of the step's node list says it
me=$(hostname -s)
NODES2=("SLURM_STEP_NUM_NODES=2" "SLURM_STEP_NODELIST=$me,othernode")
if rdma "$T/hooks-off" $UNLIMITED "${NODES2[@]}" && [ ! -s "$T/fstab" ] && [ "$(wc -l <"$T/err")" = 1 ] &&
   grep -q "^this 2-node step's container has no RDMA device although $me has 4 (efa_0, mlx5_0, mlx5_1, cxi0): the admin's default_visible = void; NCCL and MPI will use TCP sockets$" "$T/err"; then
  t_pass "policy off (default_visible = void) in a 2-node step: one line says the container has no RDMA device although the node has 4"
else t_fail "no-RDMA line" "$(cat "$T/err")"; fi
if rdma "$T/hooks" $UNLIMITED MELLANOX_VISIBLE_DEVICES=none SLURM_STEP_NUM_NODES=2 SLURM_STEP_NODELIST="othernode,$me" &&
   [ ! -s "$T/err" ] && rdma "$T/hooks" $UNLIMITED MELLANOX_VISIBLE_DEVICES=none SLURM_STEP_NUM_NODES=1 \
     SLURM_STEP_NODELIST="$me" && [ ! -s "$T/err" ] &&
   rdma "$T/hooks" $UNLIMITED MELLANOX_VISIBLE_DEVICES=none "${NODES2[@]}" &&
   grep -q "MELLANOX_VISIBLE_DEVICES=none; NCCL and MPI" "$T/err"; then
  t_pass "the line comes from the step's first node only, not for 1-node steps, and names MELLANOX_VISIBLE_DEVICES=none when the job set it"
else t_fail "no-RDMA line placement" "$(cat "$T/err")"; fi
if rdma "$T/hooks" SLURM_RLIMIT_MEMLOCK=1048576 "${NODES2[@]}" &&
   grep -qx "RLIMIT_MEMLOCK is 1 MiB for this step's tasks: RDMA memory registration fails beyond it .*" "$T/err" &&
   rdma "$T/hooks" SLURM_RLIMIT_MEMLOCK=1048576 SLURM_STEP_NUM_NODES=2 SLURM_STEP_NODELIST="othernode,$me" &&
   [ ! -s "$T/err" ] && rdma "$T/hooks" MELLANOX_VISIBLE_DEVICES=none SLURM_RLIMIT_MEMLOCK=1048576 &&
   [ ! -s "$T/err" ]; then
  t_pass "a propagated RLIMIT_MEMLOCK of 1 MiB is reported once per step (not when the container has no RDMA device)"
else t_fail "memlock" "$(cat "$T/err")"; fi

# the host's RDMA user space (MOFED-style injection)
LD=/usr/local/lib/skiff-rdma
has_libs() { for l in "$@"; do grep -q " $LD/$l none ro,bind" "$T/fstab" || return 1; done; }
if rdma "$T/hooks-mofed" $UNLIMITED MELLANOX_VISIBLE_DEVICES=1,0 &&
   grep -qx "$F/driver/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so $LD/libmlx5-rdmav34.so none ro,bind,x-create=file" "$T/fstab" &&
   grep -q "^$T/state/rdma/mlx5.driver /etc/libibverbs.d/mlx5.driver none ro,bind,x-create=file$" "$T/fstab" &&
   [ "$(cat "$T/state/rdma/mlx5.driver")" = "driver $LD/libmlx5" ] &&
   has_libs libefa-rdmav34.so libibverbs.so.1 librdmacm.so.1 libmlx5.so.1 libefa.so.1 libnl-3.so.200 libnl-route-3.so.200; then
  t_pass "mount_driver = yes: each visible device's provider (newest -rdmavN.so), a .driver file naming it, libibverbs, librdmacm, the vendor libraries and libnl under $LD"
else t_fail "mount_driver" "$(cat "$T/fstab" "$T/err")"; fi
if rdma "$T/hooks-mofed" $UNLIMITED MELLANOX_VISIBLE_DEVICES=none && [ ! -s "$T/fstab" ]; then
  t_pass "mount_driver = yes with no visible device: nothing of the host's"
else t_fail "mount_driver without devices" "$(cat "$T/fstab")"; fi

# --- 2. skiff doctor --fabric -------------------------------------------------------------------
printf 'hooks_dir = %s\n' "$T/hooks" >"$T/skiff.conf"
chmod 644 "$T/skiff.conf"
out=$(cd "$T" && runuser -u "$USR" -- env -i PATH=/usr/bin:/bin HOME=/tmp SKIFF_CONFIG="$T/skiff.conf" \
  "$BUILD/bin/skiff" doctor --fabric 2>&1)
rc=$?
if [ $rc = 0 ] &&
   grep -qx "host       NVIDIA driver 580.00.00 (CUDA 13.0), 2 GPUs: /dev/nvidia0 GPU-5a1e0000-0000-4000-8000-000000000000 (0000:01:00.0), /dev/nvidia1 GPU-5a1e0001-0000-4000-8000-000000000001 (0000:02:00.0)" <<<"$out" &&
   grep -qx "host       RDMA device 1: mlx5_0 (driver mlx5_core, uverbs0, issm0, umad0)" <<<"$out" &&
   grep -qx "host       RDMA device 0: efa_0 (driver efa, uverbs2)" <<<"$out" &&
   grep -qx "host       Slingshot device cxi0" <<<"$out" &&
   grep -q "^host       MOFED (mlx5_core 24.10-1.1.4" <<<"$out" &&
   grep -qx "container  no GPU and no driver (from default)" <<<"$out" &&
   grep -qx "container  GPUs 0,1 (from the image's NVIDIA_VISIBLE_DEVICES), capabilities compute,utility (image), 6 driver libraries" <<<"$out" &&
   grep -qx "container  RDMA devices efa_0,mlx5_0,mlx5_1 (from default: all), Slingshot all cxi devices" <<<"$out" &&
   grep -q "^           devices (15): .*/dev/nvidia0 /dev/nvidia1 .*/dev/infiniband/rdma_cm /dev/cxi0$" <<<"$out" &&
   grep -q "^hint       NCCL finds the HCAs itself; NCCL_IB_HCA=efa_0,mlx5_0,mlx5_1" <<<"$out" &&
   grep -q "^hint       EFA: FI_PROVIDER=efa" <<<"$out" && grep -qx "0 problems" <<<"$out"; then
  t_pass "skiff doctor --fabric: the GPUs, driver and CUDA versions, HCAs, EFA, Slingshot and MOFED, what a plain and an NGC-style image's container get, NCCL/UCX hints"
else t_fail "doctor --fabric (rc $rc)" "$out"; fi
printf 'hooks_dir = %s\n' "$T/hooks-off" >"$T/skiff-off.conf"
chmod 644 "$T/skiff-off.conf"
out=$(cd "$T" && runuser -u "$USR" -- env -i PATH=/usr/bin:/bin HOME=/tmp SKIFF_CONFIG="$T/skiff-off.conf" \
  SLURM_STEP_NUM_NODES=2 SLURM_STEP_NODELIST="$me" "$BUILD/bin/skiff" doctor --fabric 2>&1)
if grep -q "^           the user is told: hook 45-rdma: this 2-node step's container has no RDMA device" <<<"$out" &&
   grep -q "^hint       the container gets no fabric device: NCCL and MPI use TCP sockets" <<<"$out"; then
  t_pass "skiff doctor --fabric in a 2-node step with the fabric off: shows the line srun would print"
else t_fail "doctor --fabric, fabric off" "$out"; fi

# --- 3. on the real cluster, in containers -------------------------------------------------------
if [ ! -f "$BUILD/plugin/spank_skiff.so" ]; then t_skip "fabric on the cluster" "the plugin is not built"; t_done; fi
IMG=$(scripts/make-fabric-image "${SKIFF_TEST_CACHE:-/var/cache/skiff-tests}") ||
  { t_fail "fabric test image (scripts/make-fabric-image)"; t_done; }
export SKIFF_CLUSTER_GPUS=$F/dev # GRES gpu:2 over the fixture's nvidia0, nvidia1
t_cluster 2 || t_done
U=$SKIFF_TEST_USER
UHOME=$(getent passwd "$U" | cut -d: -f6)
cleanup() {
  rm -rf "$T" "$UHOME/.local/share/skiff/containers"/fabric_* 2>/dev/null
  t_cluster_done
}
GRES=0
scontrol show node n1 2>/dev/null | grep -q 'Gres=gpu:2' && GRES=1
mkdir -m 777 "$T/work"
for v in "" -off -mofed; do
  printf 'hooks_dir = %s\n' "$T/hooks$v" >"$T/skiff$v.conf"
  chmod 644 "$T/skiff$v.conf"
done
plug() { echo "required $BUILD/plugin/spank_skiff.so config=$T/skiff$1.conf container_scope=job" >"$SKIFF_PLUGSTACK"; }
plug ""
as_user() { (cd "$T/work" && timeout 120 runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" "$@"); }
step() { as_user srun -Q --container-image="$IMG" "$@"; }
SYSMNT="--container-mounts=$F/sys:/mnt"

# rdma-core's own tools, reading the fixture's sysfs (SYSFS_PATH) and opening
# the /dev/infiniband nodes the hook bound
IBV='export SYSFS_PATH=/mnt; ibv_devinfo --list; ibv_devices; ibv_devinfo -d mlx5_0 2>&1 | tail -1'
out=$(step -N1 "$SYSMNT" bash -c "$IBV" 2>&1)
if grep -qx '3 HCAs found:' <<<"$out" && grep -qP '^\s+mlx5_0\s+0c42a10300f68e20$' <<<"$out" &&
   grep -qP '^\s+efa_0\s+0000000000000000$' <<<"$out" && grep -qx 'Failed to open device' <<<"$out"; then
  t_pass "ibv_devinfo --list and ibv_devices in the container list the node's mlx5_0, mlx5_1 and efa_0 (opening one fails: no driver)"
else t_fail "rdma-core tools in the container" "$out"; fi
out=$(MELLANOX_VISIBLE_DEVICES=1 step -N1 "$SYSMNT" bash -c "$IBV; ls /dev/infiniband | tr '\n' ' '" 2>&1)
if grep -qx '1 HCA found:' <<<"$out" && grep -qP '^\s+mlx5_0$' <<<"$out" && ! grep -q mlx5_1 <<<"$out" &&
   grep -qx 'issm0 rdma_cm umad0 uverbs0 ' <<<"$out"; then
  t_pass "MELLANOX_VISIBLE_DEVICES=1 from the job's environment: libibverbs lists mlx5_0 only (the others' nodes are not there)"
else t_fail "MELLANOX_VISIBLE_DEVICES in the container" "$out"; fi

# the line srun prints once per multi-node step without RDMA
out=$(MELLANOX_VISIBLE_DEVICES=none step -N2 true 2>&1)
if [ "$(grep -c "has no RDMA device although" <<<"$out")" = 1 ] &&
   grep -q "^skiff: n1: hook 45-rdma: this 2-node step's container has no RDMA device although n1 has 4 (efa_0, mlx5_0, mlx5_1, cxi0): MELLANOX_VISIBLE_DEVICES=none; NCCL and MPI will use TCP sockets" <<<"$out"; then
  t_pass "srun -N2 with MELLANOX_VISIBLE_DEVICES=none: one line on srun's stderr says the containers have no RDMA device"
else t_fail "srun's no-RDMA line" "$out"; fi
plug -off
out2=$(step -N2 true 2>&1)
out1=$(step -N1 true 2>&1)
plug ""
if [ "$(grep -c "has no RDMA device although" <<<"$out2")" = 1 ] && grep -q "default_visible = void" <<<"$out2" &&
   ! grep -q "RDMA device" <<<"$out1"; then
  t_pass "the admin's policy off: the same one line for a 2-node step, none for a 1-node step"
else t_fail "srun's line, policy off" "$out2 / $out1"; fi
out=$(as_user bash -c "ulimit -S -l 1024; srun -Q -N2 --container-image=$IMG bash -c 'echo L \$(ulimit -l)'" 2>&1)
if [ "$(grep -c '^L 1024$' <<<"$out")" = 2 ] && [ "$(grep -c 'RLIMIT_MEMLOCK is 1 MiB' <<<"$out")" = 1 ]; then
  t_pass "RLIMIT_MEMLOCK: the tasks keep the job's 1024 KiB, and srun says once that RDMA needs it unlimited"
else t_fail "memlock on the cluster" "$out"; fi

# GPUs: an NGC-style image (NVIDIA_VISIBLE_DEVICES=all in its environment)
LOOK='echo "G $(hostname) $(cd /dev && ls -d nvidia[0-9]* 2>/dev/null | tr "\n" " ")| ${CUDA_VISIBLE_DEVICES-unset} ${SKIFF_GPU_MINORS-}"'
out=$(step -N2 --exclusive bash -c "$LOOK" 2>&1)
if [ "$(grep -c '^G n[12] nvidia0 nvidia1 | unset $' <<<"$out")" = 2 ]; then
  t_pass "--exclusive without --gpus, an image with NVIDIA_VISIBLE_DEVICES=all: every GPU on every node (as enroot gives)"
else t_fail "exclusive, image all" "$out"; fi
out=$(NVIDIA_VISIBLE_DEVICES=MIG-5a1e0002-0000-4000-8000-000000000002 step -N1 bash -c \
  'echo "M $(cd /dev && ls -d nvidia[0-9]* nvidia-caps/* | tr "\n" " ")"' 2>&1)
if grep -qx 'M nvidia-caps/nvidia-cap12 nvidia-caps/nvidia-cap13 nvidia1 ' <<<"$out"; then
  t_pass "a MIG UUID in the job's NVIDIA_VISIBLE_DEVICES: the container has its parent GPU and its two nvidia-caps nodes only"
else t_fail "MIG on the cluster" "$out"; fi
NVIDIA_REQUIRE_CUDA='cuda>=14.0' t_fails_with \
  "the job's NVIDIA_REQUIRE_CUDA above the driver's CUDA fails the step with the reason on srun's stderr" \
  "skiff: hook: .*40-gpu.*the job's NVIDIA_REQUIRE_CUDA='cuda>=14.0' is not met.*cuda 13.0" step -N1 true

if [ $GRES = 1 ]; then
  out=$(step -N1 --gpus=1 bash -c "$LOOK" 2>&1)
  if grep -qx 'G n[12] nvidia0 | 0 0' <<<"$out"; then
    t_pass "--gpus=1 and the image's all: only the allocated GPU (Slurm's allocation narrows it)"
  else t_fail "--gpus=1 narrows" "$out"; fi
  # a second step gets GPU 1 while the first holds GPU 0: Slurm says
  # CUDA_VISIBLE_DEVICES=1 (a host number: no device cgroups here); the
  # container has only nvidia1, so the task's value becomes 0
  out=$(as_user salloc -Q -N1 -n2 --gpus=2 bash -c "
    srun -Q -n1 --exact --gpus=1 sleep 6 & sleep 2
    srun -Q -n1 --exact --gpus=1 --container-image=$IMG bash -c '$LOOK; echo H \$SLURM_STEP_GPUS'; wait" 2>&1)
  if grep -qx 'G n[12] nvidia1 | 0 1' <<<"$out" && grep -qx 'H 1' <<<"$out"; then
    t_pass "a step given GPU 1 by Slurm: the container has only nvidia1 and the task's CUDA_VISIBLE_DEVICES=1 is renumbered to 0"
  else t_fail "CUDA_VISIBLE_DEVICES renumbering" "$out"; fi
else
  t_skip "GPU allocation on the cluster" "the running test cluster has no GRES gpu (tests/cluster/down first)"
  t_skip "CUDA_VISIBLE_DEVICES renumbering on the cluster" "no GRES gpu"
fi

# the host's RDMA user space in the container (mount_driver = yes)
plug -mofed
out=$(step -N1 "$SYSMNT" bash -c 'cat /etc/libibverbs.d/mlx5.driver; ldconfig -p | grep "libibverbs.so.1 " | head -1;
  ldd /usr/bin/ibv_devices | grep libibverbs; SYSFS_PATH=/mnt ibv_devices | tail -n +3 | wc -l' 2>&1)
plug ""
if grep -qx "driver $LD/libmlx5" <<<"$out" &&
   grep -qP "^\s+libibverbs.so.1 \(libc6,x86-64\) => $LD/libibverbs.so.1$" <<<"$out" &&
   grep -q "libibverbs.so.1 => $LD/libibverbs.so.1 " <<<"$out" && grep -qx 3 <<<"$out"; then
  t_pass "mount_driver = yes: the image's ldconfig lists the host's libibverbs first, ibv_devices runs on it and the host's providers and lists 3 devices"
else t_fail "mount_driver in the container" "$out"; fi

# job scripts of the shapes MLPerf's and Megatron-LM's public ones have
cat >"$T/work/mlperf_fabric.sub" <<'EOF'
#!/bin/bash
#SBATCH -N2 --exclusive -t 5 --job-name=fabric_mlperf
# The shape of MLPerf training's NVIDIA run.sub: no --gpus (--exclusive gives
# the nodes), a preloaded named container, ibv_devinfo --list and
# nvidia-smi in it, then the ranks with --mpi=pmix.
set -euo pipefail
: "${CONT:?}" "${FABRIC_SYS:?}"
readonly _cont_name=fabric_mlperf
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1) MASTER_PORT=29500
srun --ntasks="${SLURM_JOB_NUM_NODES}" --container-image="${CONT}" --container-name="${_cont_name}" true
srun -N1 -n1 --container-name="${_cont_name}" --container-mounts="${FABRIC_SYS}:/mnt" \
  bash -c 'SYSFS_PATH=/mnt ibv_devinfo --list'
srun -N1 -n1 --container-name="${_cont_name}" nvidia-smi
srun --mpi=pmix --ntasks-per-node=2 --no-container-mount-home --container-name="${_cont_name}" \
  --container-mounts="$PWD:/results" --container-workdir=/results --container-env=MASTER_PORT,MASTER_ADDR \
  bash -c 'echo "R $SLURM_PROCID $(hostname) $(cd /dev && ls -d nvidia[0-9]* | tr "\n" " ")| $(ls /dev/infiniband | tr "\n" " ")| $MASTER_ADDR:$MASTER_PORT"; hello_mpi'
EOF
cat >"$T/work/megatron_fabric.sh" <<'EOF'
#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 --gpus-per-task=1 -t 5 --job-name=fabric_megatron
# The shape of Megatron-LM's academic_paper_scripts SRUN.sh: NCCL_IB_*
# settings exported, one srun with the image and mounts, a task per GPU.
set -euo pipefail
: "${CONT:?}"
export NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_IB_GID_INDEX=3 NCCL_IB_TIMEOUT=22 NCCL_IB_SL=1 CUDA_DEVICE_MAX_CONNECTIONS=1
srun -l --container-image="$CONT" --container-mounts="$PWD:/workspace" --container-workdir=/workspace \
  --ntasks-per-node=2 --gpus-per-task=1 \
  bash -c 'set -- $(tr , " " <<<"$SKIFF_GPU_MINORS"); shift "${CUDA_VISIBLE_DEVICES:-99}" 2>/dev/null || set -- none
    echo "T $SLURM_PROCID $(hostname) cvd=$CUDA_VISIBLE_DEVICES gpu=$1 slurm=$SLURM_STEP_GPUS rank=$RANK local=$LOCAL_RANK of $WORLD_SIZE hca=$NCCL_IB_HCA gid=$NCCL_IB_GID_INDEX ib=$(ls /dev/infiniband | grep -c uverbs)"'
EOF
chmod 755 "$T/work"/*fabric*
sbatch_wait() { # sbatch_wait OUT ARGS...: submits as the test user and waits for the job
  local out=$1 id; shift
  id=$(as_user sbatch --parsable -o "$out" "$@" 2>"$T/sbatch.err") || return 1
  t_wait_job "${id%%;*}"
}
sbatch_wait "$T/work/mlperf.out" --export=ALL,CONT="$IMG",FABRIC_SYS="$F/sys" "$T/work/mlperf_fabric.sub"
out=$(cat "$T/work/mlperf.out" "$T/sbatch.err" 2>&1)
if grep -qx '3 HCAs found:' <<<"$out" && grep -qx 'GPU 0: /dev/nvidia0' <<<"$out" &&
   [ "$(grep -c '^R [0-3] n[12] nvidia0 nvidia1 | issm0 rdma_cm umad0 umad1 uverbs0 uverbs1 uverbs2 | n1:29500$' <<<"$out")" = 4 ] &&
   [ "$(grep -c '^rank [0-3]/4 .*allreduce 6 (want 6)' <<<"$out")" = 4 ]; then
  t_pass "an MLPerf-shaped job (sbatch --exclusive, no --gpus, preloaded named container, ibv_devinfo --list, nvidia-smi, --mpi=pmix): 4 ranks with both GPUs and the fabric on 2 nodes, MPI allreduce right"
else t_fail "MLPerf-shaped job" "$out"; fi
if [ $GRES = 1 ]; then
  sbatch_wait "$T/work/megatron.out" --export=ALL,CONT="$IMG" "$T/work/megatron_fabric.sh"
  out=$(cat "$T/work/megatron.out" "$T/sbatch.err" 2>&1)
  # each task: gpu (the host GPU its CUDA_VISIBLE_DEVICES names in the
  # container) = the GPU Slurm gave that task; the two tasks of a node differ
  lines=$(grep -E '^[0-3]: T [0-3] n[12] cvd=[01] gpu=[01] slurm=[01] rank=[0-3] local=[01] of 4 hca=mlx5_0,mlx5_1 gid=3 ib=3$' <<<"$out")
  if [ "$(wc -l <<<"$lines")" = 4 ] && [ "$(grep -c 'local=0 of 4' <<<"$lines")" = 2 ] &&
     [ -z "$(awk '{split($6,g,"="); split($7,s,"="); if (g[2] != s[2]) print}' <<<"$lines")" ] &&
     [ "$(awk '{print $4, $6}' <<<"$lines" | sort -u | wc -l)" = 4 ]; then
    t_pass "a Megatron-shaped job (NCCL_IB_* exported, --gpus-per-task=1, one container per node): each task's CUDA_VISIBLE_DEVICES names its own GPU, NCCL_IB_* and the fabric reach every rank"
  else t_fail "Megatron-shaped job" "$out"; fi
else t_skip "Megatron-shaped job (--gpus-per-task)" "the running test cluster has no GRES gpu"; fi

# (other clusters run jobs as the same user: only this cluster's nodes count)
for _ in $(seq 50); do [ -z "$(t_cluster_procs 'fabric|hello_mpi')" ] && break; sleep 0.1; done
left=$(t_cluster_procs 'fabric|hello_mpi')
if [ -z "$left" ]; then t_pass "nothing of these jobs runs afterwards"
else t_fail "leftover processes" "$left"; fi
t_done
