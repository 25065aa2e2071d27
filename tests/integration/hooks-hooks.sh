#!/bin/bash
# Runs each bundled hook the way the runtime does (argv = its path only, an
# explicit environment with SKIFF_ROOTFS, SKIFF_ENV_FILE, SKIFF_MOUNTS_FILE,
# SKIFF_STATE_DIR, ...) against a scratch root, and checks the lines it
# appends. The runtime's own end-to-end use of them is in the runtime's and
# plugin's tests.
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT" || exit 1
H=$BUILD/hooks
make -s "BUILD=$BUILD" "$H/10-identity" "$H/20-home" "$H/30-shm" "$H/40-gpu" "$H/45-rdma" "$H/50-pmix" "$H/60-slurm" \
  >/dev/null || { t_fail "build hooks"; t_done; }

t_scratch W hooktest
USR=${SKIFF_TEST_USER:-skifftest}
id "$USR" >/dev/null 2>&1 || useradd -m -s /bin/bash "$USR" 2>/dev/null
UID_T=$(id -u "$USR"); GID_T=$(id -g "$USR"); HOME_T=$(getent passwd "$USR" | cut -d: -f6)

# fresh ROOT, env file, mounts file, state dir for one hook run
setup() {
  rm -rf "$W/root" "$W/state" "$W/env" "$W/fstab"
  mkdir -p "$W/root/etc" "$W/root/dev/shm" "$W/state"
  printf 'root:x:0:0:root:/root:/bin/sh\nimg:x:%s:%s:image user:/home/img:/bin/sh\n' "$UID_T" "$UID_T" >"$W/root/etc/passwd"
  printf 'root:x:0:\nimggrp:x:%s:\n' "$GID_T" >"$W/root/etc/group"
  : >"$W/env"; : >"$W/fstab"
  chown -R "$USR:" "$W/root" "$W/state" "$W/env" "$W/fstab"
}
# hook NAME [VAR=VALUE...]: runs hook NAME as the test user with the ABI env
hook() {
  local name=$1; shift
  runuser -u "$USR" -- env -i PATH=/usr/bin:/bin SKIFF_ROOTFS="$W/root" SKIFF_PID=$$ \
    SKIFF_ENV_FILE="$W/env" SKIFF_MOUNTS_FILE="$W/fstab" SKIFF_STATE_DIR="$W/state" \
    SKIFF_UID="$UID_T" SKIFF_GID="$GID_T" SKIFF_REMAP_ROOT=0 "$@" "$H/$name"
}

# --- slurm -----------------------------------------------------------------------
if t_case "slurm: step variables passed, per-task ones (PROCID, LOCALID) left out"; then
  setup
  if hook 60-slurm SLURM_JOB_ID=77 SLURM_STEP_NODELIST='n[1-3]' SLURM_PROCID=4 SLURM_LOCALID=1 \
       SLURMD_NODENAME=n2 PMIX_RANK=4 OTHER=1 &&
     grep -qx 'SLURM_JOB_ID=77' "$W/env" && grep -qx 'SLURM_STEP_NODELIST=n\[1-3\]' "$W/env" &&
     grep -qx 'SLURMD_NODENAME=n2' "$W/env" && ! grep -q 'SLURM_PROCID\|SLURM_LOCALID\|OTHER\|PMIX' "$W/env" &&
     [ ! -s "$W/fstab" ]; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$W/env")"; fi
fi

# --- identity ----------------------------------------------------------------------
if t_case "identity: job user merged into copies of the image's passwd/group (same uid replaced), bound read-only"; then
  setup
  if hook 10-identity && P=$W/state/identity/passwd && G=$W/state/identity/group &&
     grep -q "^$USR:x:$UID_T:$GID_T:" "$P" && ! grep -q '^img:' "$P" && grep -q '^root:x:0:0:' "$P" &&
     grep -q ":x:$GID_T:" "$G" && ! grep -q '^imggrp:' "$G" &&
     grep -qx "$P /etc/passwd none ro,bind,x-create=file" "$W/fstab" &&
     grep -qx "$G /etc/group none ro,bind,x-create=file" "$W/fstab" &&
     ! ls -a "$W/state/identity" | grep -q '\.tmp'; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$W/fstab" "$W/state/identity/passwd" 2>&1)"; fi
fi

if t_case "identity: an image /etc/passwd symlink to /etc/shadow resolves inside the root (host file not read)"; then
  setup
  ln -sf /etc/shadow "$W/root/etc/passwd"
  # as root, who could read the host's /etc/shadow: the link must resolve inside the root
  if env -i SKIFF_ROOTFS="$W/root" SKIFF_ENV_FILE="$W/env" SKIFF_MOUNTS_FILE="$W/fstab" \
       SKIFF_STATE_DIR="$W/state" SKIFF_UID="$UID_T" "$H/10-identity" &&
     ! grep -q '^root:[^x]' "$W/state/identity/passwd" && grep -q "^$USR:" "$W/state/identity/passwd"; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(head -3 "$W/state/identity/passwd" 2>&1)"; fi
fi

if t_case "identity: nothing to do when the user is root inside (SKIFF_REMAP_ROOT=1)"; then
  setup
  if hook 10-identity SKIFF_REMAP_ROOT=1 && [ ! -s "$W/fstab" ] && [ ! -e "$W/state/identity" ]; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$W/fstab")"; fi
fi

if t_case "identity: outside the runtime it says what is missing"; then
  setup
  t_fails_with "$T_CASE" 'SKIFF_STATE_DIR must be set' env -i SKIFF_ROOTFS="$W/root" "$H/10-identity"
fi

# --- home ----------------------------------------------------------------------------
if t_case "home: nothing without SKIFF_MOUNT_HOME=1"; then
  setup
  if hook 20-home && [ ! -s "$W/fstab" ]; then t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$W/fstab")"; fi
fi
if t_case "home: SKIFF_MOUNT_HOME=1 binds the job user's home"; then
  setup
  if hook 20-home SKIFF_MOUNT_HOME=1 SLURM_JOB_USER="$USR" &&
     grep -qx "$HOME_T $HOME_T none rw,bind,x-create=dir" "$W/fstab"; then
    t_pass "$T_CASE ($HOME_T)"
  else t_fail "$T_CASE" "$(cat "$W/fstab")"; fi
fi
if t_case "home: unknown user is a clear error"; then
  setup
  t_fails_with "$T_CASE" "home directory is unknown" \
    hook 20-home SKIFF_MOUNT_HOME=1 SLURM_JOB_USER=no-such-user-skiff SKIFF_UID=4242424
fi

# --- shm -------------------------------------------------------------------------------
if t_case "shm: host /dev/shm bound when the root has none mounted"; then
  setup
  if hook 30-shm && grep -qx '/dev/shm /dev/shm none rw,bind,x-create=dir' "$W/fstab"; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$W/fstab")"; fi
fi
if t_case "shm: SKIFF_SHM_SIZE=64m gives a private tmpfs"; then
  setup
  if hook 30-shm SKIFF_SHM_SIZE=64m && grep -qx 'tmpfs /dev/shm tmpfs rw,size=64m,mode=1777,x-create=dir' "$W/fstab"; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$W/fstab")"; fi
fi
if t_case "shm: bad size is a clear error"; then
  setup
  t_fails_with "$T_CASE" "SKIFF_SHM_SIZE='lots'" hook 30-shm SKIFF_SHM_SIZE=lots
fi

# --- gpu -----------------------------------------------------------------------------------
if [ -e /dev/nvidiactl ]; then
  if t_case "gpu: devices and driver libraries bound"; then
    setup
    if hook 40-gpu && grep -q '^/dev/nvidiactl /dev/nvidiactl none rw,bind' "$W/fstab" &&
       grep -q 'libcuda.so' "$W/fstab"; then t_pass "$T_CASE"
    else t_fail "$T_CASE" "$(cat "$W/fstab")"; fi
  fi
elif t_case "gpu: no NVIDIA driver on this host, nothing to do"; then
  setup
  if hook 40-gpu CUDA_VISIBLE_DEVICES=0 SLURM_STEP_GPUS=0 && [ ! -s "$W/fstab" ] && [ ! -s "$W/env" ]; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$W/fstab")"; fi
fi

# --- rdma ------------------------------------------------------------------------------------
if t_case "rdma: no RDMA device on this host, nothing to do (and nothing said)"; then
  setup
  if [ -d /sys/class/infiniband ] || [ -d /sys/class/cxi ]; then
    t_skip "$T_CASE" "this host has RDMA devices"
  elif out=$(hook 45-rdma MELLANOX_VISIBLE_DEVICES=all SLURM_STEP_NUM_NODES=2 2>&1) && [ -z "$out" ] &&
       [ ! -s "$W/fstab" ] && [ ! -s "$W/env" ]; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$out $(cat "$W/fstab")"; fi
fi

# --- pmix -------------------------------------------------------------------------------------
if t_case "pmix: the server directory bound (noexec), not /tmp; no variable overrides the tasks' own"; then
  setup
  rm -rf "$W/pmix.77.0"; mkdir -p "$W/pmix.77.0"; chown "$USR:" "$W/pmix.77.0"
  # Slurm writes the server directory with a trailing slash; PMIX_SYSTEM_TMPDIR
  # is /tmp by default and must not be bound over the container's own /tmp.
  if hook 50-pmix PMIX_SERVER_TMPDIR="$W/pmix.77.0/" PMIX_SYSTEM_TMPDIR=/tmp PMIX_RANK=3 \
       PMIX_NAMESPACE=slurm.pmix.77.0 PMI_FD=5 &&
     [ "$(grep -c . "$W/fstab")" = 1 ] &&
     grep -qx "$W/pmix.77.0 $W/pmix.77.0 none rw,bind,noexec,x-create=dir" "$W/fstab" && [ ! -s "$W/env" ]; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$W/fstab" "$W/env")"; fi
fi
if t_case "pmix: nothing to do without PMIx"; then
  setup
  if hook 50-pmix && [ ! -s "$W/fstab" ] && [ ! -s "$W/env" ]; then t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(cat "$W/fstab" "$W/env")"; fi
fi
if t_case "pmix: a server directory that is not there is a clear error naming it"; then
  setup
  t_fails_with "$T_CASE" "PMIx server directory $W/pmix.78.0 \(PMIX_SERVER_TMPDIR\)" \
    hook 50-pmix PMIX_SERVER_TMPDIR="$W/pmix.78.0/"
fi
if t_case "pmix: a relative PMIX_SERVER_TMPDIR is refused"; then
  setup
  t_fails_with "$T_CASE" "not an absolute path" hook 50-pmix PMIX_SERVER_TMPDIR=pmix.1.0
fi

# --- ABI misuse ----------------------------------------------------------------------------------
t_case "hooks refuse to run without SKIFF_ENV_FILE" &&
  t_fails_with "$T_CASE" "SKIFF_ENV_FILE is not set" env -i SLURM_JOB_ID=1 "$H/60-slurm"

# --- in a real container (the runtime from this tree) -------------------------------------------
SKIFF=$BUILD/bin/skiff
if ! t_case "identity hook in a real container (skiff start): whoami says the job user, the image's entry of its uid is replaced"; then
  :
elif [ ! -x "$SKIFF" ] || ! command -v mksquashfs >/dev/null || [ ! -x /bin/busybox ]; then
  t_skip "$T_CASE" "needs build/bin/skiff, mksquashfs and busybox-static"
else
  # busybox, with an image user of the test user's uid that the hook must replace
  R=$W/img; rm -rf "$R"; t_busybox_tree "$R"
  printf 'root:x:0:0:root:/root:/bin/sh\nimg:x:%s:%s::/:/bin/sh\n' "$UID_T" "$UID_T" >"$R/etc/passwd"
  printf 'root:x:0:\n' >"$R/etc/group"
  mksquashfs "$R" "$W/img.sqsh" -quiet -noappend -comp lz4 >/dev/null 2>&1; chmod -R a+rX "$W"
  out=$(t_as_user -C "$W" -t 120 SKIFF_HOOKS_DIR="$H" "$SKIFF" start "$W/img.sqsh" \
        sh -c 'whoami; grep -c "^img:" /etc/passwd; id -gn' 2>&1)
  if [ "$(head -1 <<<"$out")" = "$USR" ] && [ "$(sed -n 2p <<<"$out")" = 0 ]; then
    t_pass "$T_CASE ($USR, uid $UID_T)"
  else t_fail "$T_CASE" "$out"; fi
fi

# --- install layout --------------------------------------------------------------------------------
if t_case "make install puts skiff-ddp-env in bin and the hooks, in order, in libexec/skiff/hooks"; then
  D=$W/destdir
  rm -rf "$D"
  if make -s "BUILD=$BUILD" install DESTDIR="$D" PREFIX=/usr/local >/dev/null 2>&1 &&
     [ -x "$D/usr/local/bin/skiff-ddp-env" ] &&
     [ "$(ls "$D/usr/local/libexec/skiff/hooks" | tr '\n' ' ')" = "10-identity 20-home 30-shm 40-gpu 45-rdma 50-pmix 60-slurm " ]; then
    t_pass "$T_CASE"
  else t_fail "$T_CASE" "$(ls -R "$D" 2>&1 | head -20)"; fi
fi
t_done
