#!/bin/bash
# The gpu hook (hooks/gpu.c) against a host that looks like an NVIDIA GPU node:
# tests/fixtures/nvidia-driver/make-fixture makes real character devices
# (nvidia0, nvidia1, nvidiactl, nvidia-uvm, ... with NVIDIA's major 195 and
# free dynamic majors) and a driver root with tiny real libcuda.so.1,
# libnvidia-ml.so.1, libnvidia-ptxjitcompiler.so.1, nvidia-smi and an
# ld.so.cache written by ldconfig. No GPU exists here: what runs for real is
# the hook, the runtime's binds, Slurm, the container and the image's ldconfig
# and dynamic linker; the driver and the GPUs are the fixture's.
#   1. the hook as the runtime runs it (argv = its path, the ABI environment,
#      as the test user), pointed at the fixture by its 40-gpu.conf;
#   2. on the real local cluster (tests/cluster/up), srun --container-image
#      with the Debian MPI test image (scripts/make-mpi-image): what a step
#      sees in /dev, ldconfig -p, dlopen("libcuda.so.1"), nvidia-smi, and
#      that no node opens beyond what the host grants.
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT" || exit 1
[ "$(id -u)" -eq 0 ] || { t_skip "gpu hook against the driver fixture" "needs root (mknod)"; t_done; }
H=$BUILD/hooks
make -s "BUILD=$BUILD" "$H/10-identity" "$H/20-home" "$H/30-shm" "$H/40-gpu" "$H/50-pmix" "$H/60-slurm" \
  >/dev/null || { t_fail "build hooks"; t_done; }

T=$(mktemp -d /tmp/skiff-gpu-test.XXXXXX)
chmod 755 "$T"
USR=${SKIFF_TEST_USER:-skifftest}
id "$USR" >/dev/null 2>&1 || useradd -m -s /bin/bash "$USR" 2>/dev/null
F=$T/fx
tests/fixtures/nvidia-driver/make-fixture "$F" || { t_fail "driver fixture (make-fixture)"; rm -rf "$T"; t_done; }
# A second driver root whose cache lists a library that was removed since.
cp -a "$F/driver" "$T/broken"
rm "$T/broken/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.580.00.00"

# The hook as installed by an admin: NAME and NAME.conf in the hooks directory.
mkdir "$T/hooks" "$T/hooks-broken"
cp "$H"/[0-9][0-9]-* "$T/hooks/"
cp "$H/40-gpu" "$T/hooks-broken/"
printf 'dev_root = %s\ndriver_root = %s\ndriver_proc = %s\n' "$F/dev" "$F/driver" "$F/proc/driver/nvidia" \
  >"$T/hooks/40-gpu.conf"
printf '# a driver with a library missing\ndev_root = %s\ndriver_root = %s\n' "$F/dev" "$T/broken" \
  >"$T/hooks-broken/40-gpu.conf"
chmod -R a+rX "$T"

# --- 1. the hook alone ----------------------------------------------------------------------
# gpu DIR [VAR=VALUE...]: runs DIR/40-gpu as the runtime does (IMAGE_ENV: the
# image's environment)
gpu() {
  local dir=$1; shift
  t_hook_run "$T" "$USR" "$dir/40-gpu" "$@"
}
# the mount targets the hook wrote, sorted, on one line
targets() { awk '{print $2}' "$T/fstab" | sort | tr '\n' ' '; }
L=/usr/lib/x86_64-linux-gnu
DRIVER="/usr/bin/nvidia-smi $L/libcuda.so $L/libcuda.so.1 $L/libnvidia-ml.so $L/libnvidia-ml.so.1 $L/libnvidia-ptxjitcompiler.so $L/libnvidia-ptxjitcompiler.so.1"
CTL="/dev/gdrdrv /dev/nvidia-uvm /dev/nvidia-uvm-tools"
IMEX=/dev/nvidia-caps-imex-channels/channel0
want_set() { tr ' ' '\n' <<<"$*" | grep . | sort | tr '\n' ' '; }

for v in CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES SLURM_STEP_GPUS; do
  want=$(want_set "$CTL $IMEX /dev/nvidia1 /dev/nvidiactl $DRIVER")
  menv=SKIFF_GPU_MINORS=1 # host numbers: each task's CUDA_VISIBLE_DEVICES is renumbered
  [ $v = NVIDIA_VISIBLE_DEVICES ] && menv=""
  if gpu "$T/hooks" "$v=1" && [ "$(targets)" = "$want" ] && [ "$(cat "$T/env")" = "$menv" ] &&
     grep -qx "$F/driver$L/libcuda.so.580.00.00 $L/libcuda.so.1 none ro,bind,x-create=file" "$T/fstab" &&
     grep -qx "$F/dev/nvidia1 /dev/nvidia1 none rw,bind,x-create=file" "$T/fstab"; then
    t_pass "$v=1: nvidia1 and the control devices (not nvidia0), the driver's libraries at their cache paths, nvidia-smi"
  else t_fail "$v=1" "$(cat "$T/fstab")"; fi
done
if gpu "$T/hooks" SLURM_STEP_GPUS=1 CUDA_VISIBLE_DEVICES=1 && grep -qx 'SKIFF_GPU_MINORS=1' "$T/env" &&
   gpu "$T/hooks" SLURM_STEP_GPUS=1 CUDA_VISIBLE_DEVICES=0 && [ ! -s "$T/env" ] &&
   gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=1 CUDA_VISIBLE_DEVICES=0 && [ ! -s "$T/env" ]; then
  t_pass "Slurm's host GPU numbers (CUDA_VISIBLE_DEVICES = SLURM_STEP_GPUS) are renumbered in the tasks (SKIFF_GPU_MINORS); Slurm's own numbering (cgroups) and NVIDIA_VISIBLE_DEVICES' are not"
else t_fail "renumbering map" "$(cat "$T/env")"; fi
if gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=0 CUDA_VISIBLE_DEVICES=1 && grep -q ' /dev/nvidia0 ' "$T/fstab" &&
   ! grep -q ' /dev/nvidia1 ' "$T/fstab"; then
  t_pass "NVIDIA_VISIBLE_DEVICES wins over CUDA_VISIBLE_DEVICES"
else t_fail "visibility precedence" "$(cat "$T/fstab")"; fi
for e in NVIDIA_VISIBLE_DEVICES=void CUDA_VISIBLE_DEVICES=NoDevFiles SKIFF_NOTHING=1; do
  if gpu "$T/hooks" "$e" && [ ! -s "$T/fstab" ] && [ ! -s "$T/env" ]; then
    t_pass "$e: nothing bound"
  else t_fail "$e gets nothing" "$(cat "$T/fstab")"; fi
done
if gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=none && [ "$(targets)" = "$(want_set "$CTL /dev/nvidiactl $DRIVER")" ]; then
  t_pass "NVIDIA_VISIBLE_DEVICES=none: the driver without a GPU"
else t_fail "none" "$(cat "$T/fstab")"; fi
if gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=all &&
   [ "$(targets)" = "$(want_set "$CTL $IMEX /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl $DRIVER")" ]; then
  t_pass "NVIDIA_VISIBLE_DEVICES=all: both GPUs"
else t_fail "all" "$(cat "$T/fstab")"; fi

# --- as enroot's 98-nvidia decides, with NVIDIA's container variables ---------------------------
NGC='NVIDIA_VISIBLE_DEVICES=all
NVIDIA_DRIVER_CAPABILITIES=compute,utility'
if IMAGE_ENV=$NGC gpu "$T/hooks" SLURM_JOB_ID=7 &&
   [ "$(targets)" = "$(want_set "$CTL $IMEX /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl $DRIVER")" ]; then
  t_pass "an NGC-style image (its own NVIDIA_VISIBLE_DEVICES=all) in a job that asked Slurm for no GPU (--exclusive): every GPU, as enroot gives"
else t_fail "image's NVIDIA_VISIBLE_DEVICES=all" "$(cat "$T/fstab")"; fi
if IMAGE_ENV=$NGC gpu "$T/hooks" SLURM_STEP_GPUS=1 CUDA_VISIBLE_DEVICES=1 && grep -q ' /dev/nvidia1 ' "$T/fstab" &&
   ! grep -q ' /dev/nvidia0 ' "$T/fstab" && grep -qx 'SKIFF_GPU_MINORS=1' "$T/env"; then
  t_pass "the image's all within Slurm's allocation: only the step's GPU (as a device cgroup leaves an enroot container)"
else t_fail "image all narrowed" "$(cat "$T/fstab" "$T/env")"; fi
if IMAGE_ENV=$NGC gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=void SLURM_STEP_GPUS=1 && [ ! -s "$T/fstab" ] &&
   IMAGE_ENV='NVIDIA_VISIBLE_DEVICES=void' gpu "$T/hooks" SLURM_STEP_GPUS=1 && [ ! -s "$T/fstab" ]; then
  t_pass "the job's NVIDIA_VISIBLE_DEVICES wins over the image's; an image's void gets nothing"
else t_fail "job over image" "$(cat "$T/fstab")"; fi
if gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=1 NVIDIA_DRIVER_CAPABILITIES=utility &&
   [ "$(targets)" = "$(want_set "$IMEX /dev/nvidia1 /dev/nvidiactl /usr/bin/nvidia-smi $L/libnvidia-ml.so $L/libnvidia-ml.so.1")" ] &&
   IMAGE_ENV='NVIDIA_DRIVER_CAPABILITIES=compute' gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=1 &&
   [ "$(targets)" = "$(want_set "$CTL $IMEX /dev/nvidia1 /dev/nvidiactl $L/libcuda.so $L/libcuda.so.1 $L/libnvidia-ptxjitcompiler.so $L/libnvidia-ptxjitcompiler.so.1")" ]; then
  t_pass "NVIDIA_DRIVER_CAPABILITIES: utility gives NVML and nvidia-smi only; the image's compute gives libcuda, the JIT, uvm and gdrdrv, no nvidia-smi"
else t_fail "driver capabilities" "$(cat "$T/fstab")"; fi
t_fails_with "an unknown driver capability is an error naming it" "unknown NVIDIA driver capability 'opengl'" \
  gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=1 NVIDIA_DRIVER_CAPABILITIES=compute,opengl
if gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=GPU-5a1e0001-0000-4000-8000-000000000001 && grep -q ' /dev/nvidia1 ' "$T/fstab" &&
   ! grep -q ' /dev/nvidia0 ' "$T/fstab"; then
  t_pass "a GPU UUID selects its device, mapped through /proc/driver/nvidia/gpus/*/information"
else t_fail "GPU UUID" "$(cat "$T/fstab")"; fi
MIGSET="$CTL $IMEX /dev/nvidia1 /dev/nvidia-caps/nvidia-cap12 /dev/nvidia-caps/nvidia-cap13 /dev/nvidiactl $DRIVER"
for m in "MIG-5a1e0002-0000-4000-8000-000000000002 (NVML of the driver, then /proc)" \
         "MIG-GPU-5a1e0001-0000-4000-8000-000000000001/1/0 (/proc alone)"; do
  if gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES="${m%% *}" && [ "$(targets)" = "$(want_set "$MIGSET")" ]; then
    t_pass "MIG device $m: its parent GPU's node and its GPU and compute instances' nvidia-caps only"
  else t_fail "MIG ${m%% *}" "$(cat "$T/fstab")"; fi
done
if gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=0 NVIDIA_MIG_MONITOR_DEVICES=all && grep -q ' /dev/nvidia-caps/nvidia-cap2 ' "$T/fstab" &&
   ! grep -q 'nvidia-cap1 ' "$T/fstab"; then
  t_pass "NVIDIA_MIG_MONITOR_DEVICES=all adds the MIG monitor capability, not the config one"
else t_fail "MIG monitor" "$(cat "$T/fstab")"; fi
t_fails_with "a MIG UUID the driver does not know is an error naming it" \
  "MIG device MIG-0000dead: no MIG device of this node has that UUID" gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=MIG-0000dead
if gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=1 NVIDIA_IMEX_CHANNELS=none && ! grep -q imex "$T/fstab"; then
  t_pass "NVIDIA_IMEX_CHANNELS=none: no IMEX channel"
else t_fail "IMEX none" "$(cat "$T/fstab")"; fi
REQ='NVIDIA_REQUIRE_CUDA=cuda>=13.1 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=535,driver<536'
IMAGE_ENV=$REQ t_fails_with "the image's NVIDIA_REQUIRE_CUDA above the driver's CUDA 13.0 fails the start, saying what to do" \
  "the image's NVIDIA_REQUIRE_CUDA='cuda>=13.1 .*' is not met on GPU 1: cuda>=13.1 \\(this node: cuda 13.0\\).*NVIDIA_DISABLE_REQUIRE=1" \
  gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=1
if IMAGE_ENV="$REQ" gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=1 NVIDIA_DISABLE_REQUIRE=1 &&
   IMAGE_ENV='NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla,driver>=470,driver<471' gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=1 &&
   gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=1 NVIDIA_REQUIRE_DRIVER='driver>=580' NVIDIA_REQUIRE_ARCH='arch>=9.0'; then
  t_pass "NVIDIA_DISABLE_REQUIRE=1 starts it anyway; cuda>=12.0, driver>=580 and arch>=9.0 (NVML's compute capability) are met"
else t_fail "requirements met" "$(cat "$T/fstab")"; fi
t_fails_with "a GPU's arch below the image's requirement (NVML's answer) fails the start" \
  "the job's NVIDIA_REQUIRE_ARCH='arch>=10.0' is not met on GPU 0: arch>=10.0 \(this node: arch 9.0\)" \
  gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=0 NVIDIA_REQUIRE_ARCH='arch>=10.0'
t_fails_with "a listed GPU without its device node is an error naming the node" \
  "NVIDIA_VISIBLE_DEVICES lists GPU 3: device $F/dev/nvidia3" gpu "$T/hooks" NVIDIA_VISIBLE_DEVICES=3
t_fails_with "a library in the driver's cache whose file is gone is an error naming it" \
  "driver library libnvidia-ptxjitcompiler.so.1 is listed in $T/broken/etc/ld.so.cache but $L/libnvidia-ptxjitcompiler.so.1 is missing" \
  gpu "$T/hooks-broken" CUDA_VISIBLE_DEVICES=1
mkdir "$T/nocuda"; cp "$H/40-gpu" "$T/nocuda/"
printf 'dev_root = %s\nldcache = /etc/ld.so.cache\n' "$F/dev" >"$T/nocuda/40-gpu.conf"; chmod -R a+rX "$T/nocuda"
t_fails_with "a driver cache without libcuda.so.1 is an error naming it" \
  "libcuda.so.1 is not in /etc/ld.so.cache" gpu "$T/nocuda" CUDA_VISIBLE_DEVICES=1
mkdir "$T/hostdev"; cp "$H/40-gpu" "$T/hostdev/"; chmod -R a+rX "$T/hostdev"
if [ -e /dev/nvidiactl ]; then
  t_skip "no NVIDIA driver on the host: nothing to do" "this host has /dev/nvidiactl"
elif gpu "$T/hostdev" CUDA_VISIBLE_DEVICES=1 && [ ! -s "$T/fstab" ]; then
  t_pass "default knobs on this host (no /dev/nvidiactl): nothing to do"
else t_fail "no driver on the host" "$(cat "$T/fstab")"; fi
mkdir "$T/badconf"; cp "$H/40-gpu" "$T/badconf/"; printf 'dev_rot = /dev\n' >"$T/badconf/40-gpu.conf"
chmod -R a+rX "$T/badconf"
t_fails_with "an unknown knob is an error naming the file and line" "40-gpu.conf:1: unknown key 'dev_rot'" \
  gpu "$T/badconf" CUDA_VISIBLE_DEVICES=1
mkdir -p "$T/fakedev"; cp -a "$F/dev/nvidiactl" "$T/fakedev/"; touch "$T/fakedev/nvidia1"
mkdir "$T/regfile"; cp "$H/40-gpu" "$T/regfile/"
printf 'dev_root = %s\ndriver_root = %s\n' "$T/fakedev" "$F/driver" >"$T/regfile/40-gpu.conf"; chmod -R a+rX "$T"
t_fails_with "a GPU 'device' that is a regular file is refused" "$T/fakedev/nvidia1 is not a character device" \
  gpu "$T/regfile" CUDA_VISIBLE_DEVICES=1

# --- 2. on the real cluster, in containers -----------------------------------------------------
cleanup() { rm -rf "$T"; }
trap cleanup EXIT
if [ ! -f "$BUILD/plugin/spank_skiff.so" ]; then
  t_skip "gpu hook on the cluster" "the plugin is not built"; t_done
fi
IMG=$(scripts/make-mpi-image "${SKIFF_TEST_CACHE:-/var/cache/skiff-tests}") ||
  { t_fail "test image (scripts/make-mpi-image)"; t_done; }
t_cluster 3 || t_done
U=$SKIFF_TEST_USER
cleanup() {
  rm -rf "$T"
  t_cluster_done
}
echo "hooks_dir = $T/hooks" >"$T/skiff.conf"
echo "hooks_dir = $T/hooks-broken" >"$T/skiff-broken.conf"
chmod 644 "$T"/*.conf
echo "required $BUILD/plugin/spank_skiff.so config=$T/skiff.conf" >"$SKIFF_PLUGSTACK"
mkdir -m 777 "$T/work"
# step ENV... -- SRUN-ARGS...: one step as the test user, with ENV in its environment
step() {
  local env=()
  while [ "$1" != -- ]; do env+=("$1"); shift; done; shift
  (cd "$T/work" && timeout 60 runuser -u "$U" -- env "${env[@]}" SLURM_CONF="$SLURM_CONF" \
     srun -Q --container-image="$IMG" "$@")
}
LOOK='echo "D $(hostname) $(cd /dev && ls -d nvidia* 2>/dev/null | tr "\n" " ")"
for d in /dev/nvidia*; do [ -c "$d" ] && echo "N $(hostname) $d $(stat -c "%t:%T %a" "$d")"; done
ldconfig -p | grep -E "libcuda|libnvidia" | sed "s/^[[:space:]]*/C $(hostname) /"
python3 -c "import ctypes; v = ctypes.c_int(); ctypes.CDLL(\"libcuda.so.1\").cuDriverGetVersion(ctypes.byref(v)); print(\"V\", v.value)" 2>/dev/null
command -v nvidia-smi >/dev/null && nvidia-smi | sed "s/^/S /"; true'
host_node() { stat -c "%t:%T %a" "$F/dev/$1"; }
visible_ok() { # OUT NODES: the step ran on NODES nodes and each saw only nvidia1 and the control devices
  local out=$1 n=$2
  [ "$(grep -c '^D .* nvidia-caps-imex-channels nvidia-uvm nvidia-uvm-tools nvidia1 nvidiactl $' <<<"$out")" = "$n" ] &&
  [ "$(grep -c "^N .* /dev/nvidia1 $(host_node nvidia1)$" <<<"$out")" = "$n" ] &&
  [ "$(grep -c "^N .* /dev/nvidiactl $(host_node nvidiactl)$" <<<"$out")" = "$n" ] &&
  [ "$(grep -c "^N .* /dev/nvidia-uvm $(host_node nvidia-uvm)$" <<<"$out")" = "$n" ] &&
  [ "$(grep -c "^C .* libcuda.so.1 (libc6,x86-64) => $L/libcuda.so.1$" <<<"$out")" = "$n" ] &&
  [ "$(grep -c "^C .* libnvidia-ml.so.1 (libc6,x86-64) => $L/libnvidia-ml.so.1$" <<<"$out")" = "$n" ] &&
  [ "$(grep -c '^V 13000$' <<<"$out")" = "$n" ] && [ "$(grep -c '^S GPU 1: /dev/nvidia1$' <<<"$out")" = "$n" ] &&
  ! grep -q '^S GPU 0' <<<"$out"
}
out=$(step CUDA_VISIBLE_DEVICES=1 -- -N2 sh -c "$LOOK" 2>&1)
if visible_ok "$out" 2; then
  t_pass "CUDA_VISIBLE_DEVICES=1, 2 nodes: /dev has exactly nvidia1 + control devices (host numbers and modes), ldconfig -p lists libcuda.so.1, dlopen gets the driver's, nvidia-smi sees GPU 1"
else t_fail "CUDA_VISIBLE_DEVICES=1 in containers" "$out"; fi
out=$(step NVIDIA_VISIBLE_DEVICES=1 -- -N1 sh -c "$LOOK" 2>&1)
if visible_ok "$out" 1; then t_pass "NVIDIA_VISIBLE_DEVICES=1: the same"
else t_fail "NVIDIA_VISIBLE_DEVICES=1 in containers" "$out"; fi
for e in NVIDIA_VISIBLE_DEVICES=void SKIFF_NO_GPU_VARIABLE=1; do
  out=$(step "$e" -- -N1 sh -c "$LOOK" 2>&1)
  if [ "$(grep -c '^D [^ ]* $' <<<"$out")" = 1 ] && ! grep -q '^[NCVS] ' <<<"$out"; then
    t_pass "$e: no device, no driver library, no nvidia-smi in the container"
  else t_fail "$e in containers" "$out"; fi
done

# Device access stays the host's: the nodes are usable (bound without nodev:
# opening nvidia1 passes the permission check, then finds no driver), the
# root-only nvidia-uvm-tools stays closed to the user, nothing can be
# chmod'ed or made, and the bind is nosuid.
if findmnt -n -o OPTIONS -T "$F/dev" | grep -qw nodev; then
  t_skip "device permissions in the container" "$F is on a nodev filesystem"
else
  host_w=$(runuser -u "$U" -- sh -c "test -w $F/dev/nvidia-uvm-tools && echo yes || echo no")
  out=$(step CUDA_VISIBLE_DEVICES=1 -- -N1 sh -c '
    (echo > /dev/nvidia1) 2>&1 | sed "s/.*: /W1 /"
    (echo > /dev/nvidia-uvm-tools) 2>&1 | sed "s/.*: /WT /"
    chmod 666 /dev/nvidia-uvm-tools 2>/dev/null && echo "CHMOD allowed" || echo "CHMOD refused"
    mknod /dev/nvidia7 c 195 7 2>/dev/null && echo "MKNOD allowed" || echo "MKNOD refused"
    echo "O $(findmnt -n -o OPTIONS /dev/nvidia1)"' 2>&1)
  if [ "$host_w" = no ] && grep -qx 'W1 No such device or address' <<<"$out" &&
     grep -qx 'WT Permission denied' <<<"$out" && grep -qx 'CHMOD refused' <<<"$out" &&
     grep -qx 'MKNOD refused' <<<"$out" && grep -q '^O .*nosuid' <<<"$out" && ! grep -q '^O .*nodev' <<<"$out"; then
    t_pass "device nodes open as on the host (nvidia1: ENXIO, no driver; root-only nvidia-uvm-tools: EACCES); chmod and mknod refused; nosuid"
  else t_fail "device permissions in the container" "host writable: $host_w; $out"; fi
fi

echo "required $BUILD/plugin/spank_skiff.so config=$T/skiff-broken.conf" >"$SKIFF_PLUGSTACK"
t_fails_with "on the cluster: a missing driver library fails the step with a message naming it" \
  "skiff: hook: .*40-gpu.*driver library libnvidia-ptxjitcompiler.so.1 is listed" \
  step CUDA_VISIBLE_DEVICES=1 -- -N1 true
echo "required $BUILD/plugin/spank_skiff.so config=$T/skiff.conf" >"$SKIFF_PLUGSTACK"

# (other clusters run jobs as the same user: only this cluster's nodes count)
for _ in $(seq 50); do [ -z "$(t_cluster_procs)" ] && break; sleep 0.1; done
left=$(t_cluster_procs)
if [ -z "$left" ]; then t_pass "no process of $U left in the cluster's nodes after the steps"
else t_fail "leftover processes" "$left"; fi
t_done
