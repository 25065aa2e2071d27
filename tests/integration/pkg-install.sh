#!/bin/bash
# `make install` (PREFIX=/usr/local) gives a working plugin: the installed
# spank_skiff.so, loaded through the installed plugstack.conf line on a
# 3-node test cluster, finds its helpers in /usr/local/libexec/skiff (none
# beside it) and runs the installed hooks. The packages run this same
# install with /usr directories (tests/integration/pkg-deb.sh).
#
# Runs in a private mount namespace with a tmpfs over /usr/local and a
# cluster of its own, so the machine's /usr/local never sees the install.
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT"
[ "$(id -u)" -eq 0 ] || { t_skip "make install" "needs root (mount namespace, the test cluster)"; t_done; }
[ -x /bin/busybox ] && command -v mksquashfs >/dev/null || { t_skip "make install" "busybox-static or squashfs-tools missing"; t_done; }
t_private_mount_ns "make install" "$@"
mount -t tmpfs -o mode=755 tmpfs /usr/local || { t_fail "tmpfs over /usr/local"; t_done; }
T=$(mktemp -d /tmp/skiff-install-test.XXXXXX)
chmod 755 "$T"
cleanup() { SKIFF_CLUSTER_QUIET=1 tests/cluster/down; rm -rf "$T"; }
trap cleanup EXIT

if make -s "BUILD=$BUILD" install PREFIX=/usr/local >"$T/install.log" 2>&1; then
  t_pass "make install PREFIX=/usr/local"
else t_fail "make install" "$(tail -5 "$T/install.log")"; t_done; fi
P=/usr/local/lib/skiff/spank_skiff.so
if [ -f "$P" ] && [ -x /usr/local/libexec/skiff/skiff-helper ] && [ -x /usr/local/libexec/skiff/skiff-helper-full ] &&
   ! [ -e /usr/local/lib/skiff/skiff-helper ] && [ -x /usr/local/libexec/skiff/hooks/10-identity ] &&
   [ "$(cat /usr/local/share/skiff/plugstack.conf | grep -v '^#')" = "required $P" ]; then
  t_pass "layout: plugin in lib/skiff, helpers and hooks in libexec/skiff, the plugstack.conf line in share/skiff"
else t_fail "install layout" "$(cd /usr/local && find . | sort | head -40)"; fi

SKIFF_CLUSTER_QUIET=1 SKIFF_PLUGIN=$P tests/cluster/up 3 || { t_fail "cluster up"; t_done; }
source tests/cluster/run/env.sh
echo "include /usr/local/share/skiff/plugstack.conf" >"$SKIFF_PLUGSTACK"
U=$SKIFF_TEST_USER
R=$T/rootfs
mkdir -p "$R"/{bin,etc,tmp,proc,dev,sys}
cp /bin/busybox "$R/bin/"
for c in sh echo id; do ln -s busybox "$R/bin/$c"; done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\n' >"$R/etc/group"
touch "$R/etc/hosts" "$R/etc/resolv.conf" "$R/etc/hostname"
mksquashfs "$R" "$T/img.sqsh" -quiet -noappend -comp zstd -all-root >/dev/null && chmod 644 "$T/img.sqsh" ||
  { t_fail "test image"; t_done; }
# `id -un` names the job user only when the installed identity hook ran (the
# image's passwd has root only).
got=$(cd "$T" && runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" srun -Q -N3 --ntasks-per-node=2 \
      --container-image="$T/img.sqsh" sh -c 'echo $RANK $WORLD_SIZE $(id -un)' 2>"$T/err" | sort)
want=$(for r in 0 1 2 3 4 5; do echo "$r 6 $U"; done)
[ "$got" = "$want" ] && t_pass "srun -N3 through the installed plugin: helpers from libexec/skiff, installed hooks, RANK/WORLD_SIZE" ||
  t_fail "srun through the installed plugin" "got: $got / $(head -c 600 "$T/err")"
t_done
