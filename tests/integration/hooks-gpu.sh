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
printf 'dev_root = %s\ndriver_root = %s\n' "$F/dev" "$F/driver" >"$T/hooks/40-gpu.conf"
printf '# a driver with a library missing\ndev_root = %s\ndriver_root = %s\n' "$F/dev" "$T/broken" \
  >"$T/hooks-broken/40-gpu.conf"
chmod -R a+rX "$T"

# --- 1. the hook alone ----------------------------------------------------------------------
setup() {
  rm -rf "$T/root" "$T/state" "$T/env" "$T/fstab"
  mkdir -p "$T/root/etc" "$T/state"; : >"$T/env"; : >"$T/fstab"
  chown -R "$USR:" "$T/root" "$T/state" "$T/env" "$T/fstab"
}
# gpu DIR [VAR=VALUE...]: runs DIR/40-gpu as the runtime does
gpu() {
  local dir=$1; shift
  setup
  runuser -u "$USR" -- env -i PATH=/usr/bin:/bin SKIFF_ROOTFS="$T/root" SKIFF_STATE_DIR="$T/state" \
    SKIFF_ENV_FILE="$T/env" SKIFF_MOUNTS_FILE="$T/fstab" SKIFF_UID="$(id -u "$USR")" "$@" "$dir/40-gpu"
}
# the mount targets the hook wrote, sorted, on one line
targets() { awk '{print $2}' "$T/fstab" | sort | tr '\n' ' '; }
L=/usr/lib/x86_64-linux-gnu
DRIVER="/usr/bin/nvidia-smi $L/libcuda.so $L/libcuda.so.1 $L/libnvidia-ml.so $L/libnvidia-ml.so.1 $L/libnvidia-ptxjitcompiler.so $L/libnvidia-ptxjitcompiler.so.1"
CTL="/dev/nvidia-caps/nvidia-cap1 /dev/nvidia-uvm /dev/nvidia-uvm-tools"
want_set() { tr ' ' '\n' <<<"$*" | grep . | sort | tr '\n' ' '; }

for v in CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES SLURM_STEP_GPUS; do
  want=$(want_set "$CTL /dev/nvidia1 /dev/nvidiactl $DRIVER")
  if gpu "$T/hooks" "$v=1" && [ "$(targets)" = "$want" ] && [ ! -s "$T/env" ] &&
     grep -qx "$F/driver$L/libcuda.so.580.00.00 $L/libcuda.so.1 none ro,bind,x-create=file" "$T/fstab" &&
     grep -qx "$F/dev/nvidia1 /dev/nvidia1 none rw,bind,x-create=file" "$T/fstab"; then
    t_pass "$v=1: nvidia1 and the control devices (not nvidia0), the driver's libraries at their cache paths, nvidia-smi"
  else t_fail "$v=1" "$(cat "$T/fstab")"; fi
done
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
   [ "$(targets)" = "$(want_set "$CTL /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl $DRIVER")" ]; then
  t_pass "NVIDIA_VISIBLE_DEVICES=all: both GPUs"
else t_fail "all" "$(cat "$T/fstab")"; fi
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
  [ "$(grep -c '^D .* nvidia-caps nvidia-uvm nvidia-uvm-tools nvidia1 nvidiactl $' <<<"$out")" = "$n" ] &&
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

for _ in $(seq 50); do pgrep -u "$U" >/dev/null || break; sleep 0.1; done
if [ -z "$(pgrep -a -u "$U")" ]; then t_pass "no process of $U left after the steps"
else t_fail "leftover processes" "$(pgrep -a -u "$U")"; fi
t_done
