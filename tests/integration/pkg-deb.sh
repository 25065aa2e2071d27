#!/bin/bash
# The Debian package as an admin meets it: `make deb` builds the .debs from
# the `make dist` tarball in a scratch directory (the checkout and its build/
# are left as they were) and lints them; dpkg -i installs skiff and
# skiff-train; the test cluster's plugstack.conf includes the installed
# snippet, as /etc/slurm/plugstack.conf includes plugstack.conf.d/*.conf on
# Debian, so steps run through the installed plugin, which finds its helpers
# in /usr/libexec/skiff and runs the installed hooks; then dpkg --purge, and
# nothing of the package is left (files, directories, conffile, plugstack
# lines). Needs root. About 2-3 minutes on 2 cores, most of it the build.
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT"

[ "$(id -u)" -eq 0 ] || { t_skip "package install" "needs root (dpkg -i, the test cluster)"; t_done; }
for b in mksquashfs srun git; do
  command -v "$b" >/dev/null || { t_skip "package install" "$b missing"; t_done; }
done
[ -x /bin/busybox ] || { t_skip "package install" "busybox-static missing"; t_done; }
git rev-parse --git-dir >/dev/null 2>&1 || { t_skip "package install" "not a git checkout (make dist packs tracked files)"; t_done; }
# Never replace or purge a skiff an admin installed on this machine.
if dpkg-query -W -f='${db:Status-Status}' skiff skiff-train skiff-enroot-compat 2>/dev/null | grep -qv '^not-installed$'; then
  t_skip "package install" "a skiff package is already installed here; the test would replace and purge it"; t_done
fi

VERSION=$(cat VERSION)
ARCH=$(dpkg --print-architecture)
T=$(mktemp -d /tmp/skiff-pkg-test.XXXXXX)
chmod 755 "$T"
installed=0 clustered=0
cleanup() {
  [ "$clustered" = 1 ] && t_cluster_done
  [ "$installed" = 1 ] && dpkg_run --purge skiff-enroot-compat skiff-train skiff >/dev/null 2>&1
  rm -rf "$T"
}
trap cleanup EXIT

# dpkg_run ARGS...: dpkg, waiting (up to 3 min) while another dpkg or apt
# holds the lock: the machine may be installing packages for someone else.
dpkg_run() {
  local out i
  for i in $(seq 90); do
    out=$(dpkg "$@" 2>&1) && { printf '%s\n' "$out"; return 0; }
    grep -q 'lock' <<<"$out" || { printf '%s\n' "$out" >&2; return 1; }
    sleep 2
  done
  printf '%s\n' "$out" >&2
  return 1
}
# What the package must never touch: Slurm's configuration on this machine.
slurm_etc() { find /etc/slurm -exec sh -c 'for f; do printf "%s " "$f"; [ -f "$f" ] && sha256sum <"$f" || echo; done' sh {} + 2>/dev/null | sort; }

# --- build, in scratch, from the dist tarball; lintian (errors fail make deb) ----------
tree_before=$(git status --porcelain=v1 --ignored --untracked-files=all | grep -v '^!! build/test-logs/')
start=$(date +%s)
if make -s BUILD="$T/build" DEB_BUILD_OPTIONS="parallel=2 nocheck" DEB_BUILD_PROFILES=nocuda deb \
     >"$T/deb.log" 2>&1; then
  t_pass "make deb builds skiff and skiff-train from the dist tarball; lintian: no errors ($(( $(date +%s) - start )) s)"
else
  t_fail "make deb" "$(grep -E '^(E|W):|rror' "$T/deb.log" | head -20)"; t_done
fi
warn=$(grep -E '^(E|W): ' "$T/deb.log")
[ -z "$warn" ] && t_pass "lintian: no warnings outside debian/*.lintian-overrides" || t_fail "lintian warnings" "$warn"
tree_after=$(git status --porcelain=v1 --ignored --untracked-files=all | grep -v '^!! build/test-logs/')
[ "$tree_before" = "$tree_after" ] && t_pass "the checkout is untouched (nothing new in it, build/ included)" ||
  t_fail "checkout touched" "$(diff <(echo "$tree_before") <(echo "$tree_after") | head -10)"

DEB=$T/build/deb/skiff_${VERSION}-1_${ARCH}.deb
TRAIN_DEB=$T/build/deb/skiff-train_${VERSION}-1_${ARCH}.deb
COMPAT_DEB=$T/build/deb/skiff-enroot-compat_${VERSION}-1_all.deb
# The package holds what `make install` installs, plus the conffile and docs:
# dh_missing --fail-missing (debian/rules) fails the build on anything left
# out. Here: the layout an admin relies on.
plugin=$(dpkg-deb -c "$DEB" | awk '{print $6}' | sed -n 's|^\./\(.*/slurm-wlm/spank_skiff\.so\)$|/\1|p')
files=$(dpkg-deb -c "$DEB" | awk '{print $6}')
want="./usr/bin/skiff ./usr/bin/skiff-import ./usr/bin/skiff-enroot ./usr/libexec/skiff/skiff-helper ./usr/libexec/skiff/skiff-helper-full
./usr/libexec/skiff/hooks/10-identity ./usr/libexec/skiff/hooks/60-slurm ./etc/skiff/skiff.conf
./usr/share/skiff/plugstack.conf ./usr/share/man/man8/spank-skiff.8.gz"
missing=$(for f in $want; do grep -qxF "$f" <<<"$files" || echo "$f"; done)
if [ -n "$plugin" ] && [ -z "$missing" ] && ! grep -q 'slurm-wlm/skiff-helper' <<<"$files"; then
  t_pass "layout: $plugin in Slurm's plugin directory, helpers and hooks in /usr/libexec/skiff"
else t_fail "layout" "plugin '$plugin', missing: $missing"; fi
# The same file list as `make install` + `make install-config` with the
# package's directories (run in the scratch tree the package was built in:
# nothing is rebuilt), less the docs and lintian overrides; man pages are
# gzipped in the package.
SRC=$T/build/deb/skiff-$VERSION
MI=$T/make-install
make -s -C "$SRC" BUILD=build-cpu NVCC= PREFIX=/usr LIBEXECDIR=/usr/libexec \
  SLURM_PLUGIN_DIR="$(dirname "$plugin")" DESTDIR="$MI" install install-config >"$T/mi.log" 2>&1 ||
  t_fail "make install in the package's tree" "$(tail -5 "$T/mi.log")"
from_make=$(cd "$MI" && find . ! -type d | sort)
from_pkg=$( { dpkg-deb -c "$DEB"; dpkg-deb -c "$TRAIN_DEB"; } | awk '$1 !~ /^d/ {print $6}' |
            grep -Ev '^\./usr/share/(doc|lintian)/' | sed 's|\(/man/man[0-9]/.*\)\.gz$|\1|' | sort)
if [ -n "$from_make" ] && [ "$from_make" = "$from_pkg" ]; then
  t_pass "the packages hold exactly what make install + install-config install ($(wc -l <<<"$from_make") files)"
else t_fail "packages vs make install" "$(diff <(echo "$from_make") <(echo "$from_pkg") | head -10)"; fi
dep=$(dpkg-deb -f "$DEB" Depends)
if grep -Eq 'slurm-wlm-basic-plugins \(>= [0-9]+\.[0-9]+~\), slurm-wlm-basic-plugins \(<< [0-9]+\.[0-9]+~\)' <<<"$dep"; then
  t_pass "Depends pins the Slurm release built against: $(grep -Eo 'slurm-wlm-basic-plugins \(>= [^)]*\)' <<<"$dep")"
else t_fail "Slurm dependency" "$dep"; fi

# --- install: Slurm's own configuration does not change ----------------------------------
etc_before=$(slurm_etc)
if dpkg_run -i "$DEB" "$TRAIN_DEB" >"$T/install.log" 2>&1; then
  installed=1
  t_pass "dpkg -i skiff skiff-train"
else t_fail "dpkg -i" "$(tail -5 "$T/install.log")"; t_done; fi
[ "$(slurm_etc)" = "$etc_before" ] && t_pass "installing changes nothing under /etc/slurm (the plugin is not enabled)" ||
  t_fail "/etc/slurm changed by the install"
[ "$(skiff version 2>&1)" = "skiff $VERSION" ] && [ "$(skiff-train --version 2>&1)" = "skiff-train $VERSION" ] &&
  [ "$(skiff-enroot version 2>&1)" = 3.5.0 ] &&
  t_pass "the installed skiff, skiff-enroot and skiff-train run" ||
  t_fail "installed CLIs" "$(skiff version 2>&1; skiff-enroot version 2>&1; skiff-train --version 2>&1)"
# `enroot` is the admin's choice: skiff-enroot-compat, an alternatives link
# (which would leave a real /usr/bin/enroot alone: not tried where one is)
if [ -e /usr/bin/enroot ] || [ -L /usr/bin/enroot ]; then
  t_skip "skiff-enroot-compat" "/usr/bin/enroot exists on this machine"
elif ! [ -f "$COMPAT_DEB" ]; then
  t_fail "skiff-enroot-compat built" "$(ls "$T/build/deb")"
elif [ -n "$(dpkg-deb -c "$COMPAT_DEB" | awk '$6 !~ /^\.\/usr\/share\/(doc|lintian)\// && $1 !~ /^d/')" ]; then
  t_fail "skiff-enroot-compat ships no file of its own" "$(dpkg-deb -c "$COMPAT_DEB")"
elif ! [ -e /usr/bin/enroot ] && dpkg_run -i "$COMPAT_DEB" >"$T/compat.log" 2>&1 &&
     [ "$(readlink /usr/bin/enroot)" = /etc/alternatives/enroot ] && [ "$(enroot version 2>&1)" = 3.5.0 ]; then
  t_pass "skiff-enroot-compat: enroot is skiff-enroot through update-alternatives"
  dpkg_run --purge skiff-enroot-compat >/dev/null 2>&1
  [ -e /usr/bin/enroot ] || [ -L /usr/bin/enroot ] && t_fail "purging skiff-enroot-compat removes the enroot link" ||
    t_pass "purging skiff-enroot-compat removes the enroot link"
else t_fail "skiff-enroot-compat" "$(tail -5 "$T/compat.log" 2>/dev/null; ls -l /usr/bin/enroot 2>&1)"; fi
if dpkg-query -W -f='${Conffiles}' skiff | grep -q ' /etc/skiff/skiff.conf ' &&
   ! grep -Eq '^[[:space:]]*[a-z_]+[[:space:]]*=' /etc/skiff/skiff.conf; then
  t_pass "/etc/skiff/skiff.conf is a conffile with every setting commented out"
else t_fail "skiff.conf" "$(dpkg-query -W -f='${Conffiles}' skiff)"; fi

# --- the installed plugin on the test cluster ----------------------------------------------------
export SKIFF_PLUGIN=$plugin   # for a cluster t_cluster starts; the plugstack is rewritten below anyway
t_cluster 3 || t_done
clustered=1
U=$SKIFF_TEST_USER
# As on Debian: plugstack.conf includes plugstack.conf.d/*.conf, where the
# admin links the package's snippet.
mkdir -p "$T/plugstack.conf.d"
ln -s /usr/share/skiff/plugstack.conf "$T/plugstack.conf.d/skiff.conf"
echo "include $T/plugstack.conf.d/*.conf" >"$SKIFF_PLUGSTACK"

# busybox image whose /etc/passwd has root only: `id -un` names the job user
# only when the installed identity hook (/usr/libexec/skiff/hooks) ran.
R=$T/rootfs
mkdir -p "$R"/{bin,etc,tmp,proc,dev,sys}
cp /bin/busybox "$R/bin/"
for c in sh echo id cat; do ln -s busybox "$R/bin/$c"; done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\n' >"$R/etc/group"
touch "$R/etc/hosts" "$R/etc/resolv.conf" "$R/etc/hostname"
IMG=$T/busybox.sqsh
mksquashfs "$R" "$IMG" -quiet -noappend -comp zstd -all-root >/dev/null || { t_fail "build test image"; t_done; }
chmod 644 "$IMG"
W=$T/work; mkdir -p "$W"; chown "$U:" "$W"

got=$(cd "$W" && runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" srun -Q -N3 --ntasks-per-node=2 \
      --container-image="$IMG" sh -c 'echo $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $(id -un)' 2>"$T/err" | sort)
want=$(for r in 0 1 2 3 4 5; do echo "$r $((r % 2)) 6 n1 $U"; done)
if [ "$got" = "$want" ]; then
  t_pass "srun -N3 --ntasks-per-node=2 through the installed plugin: container, RANK/WORLD_SIZE per task, installed hooks"
else t_fail "srun through the installed plugin" "got: $got / $(head -c 600 "$T/err")"; fi
printf '%s\n' "$T_PLUGSTACK_ORIG" >"$SKIFF_PLUGSTACK"

# --- purge: nothing of the package is left ----------------------------------------------------------
owned=$(dpkg-query -L skiff skiff-train 2>/dev/null)
if dpkg_run --purge skiff-train skiff >"$T/purge.log" 2>&1; then
  installed=0
  t_pass "dpkg --purge skiff skiff-train"
else t_fail "dpkg --purge" "$(tail -5 "$T/purge.log")"; fi
# Directories such as /usr/bin stay; the package's own must go too.
left=$(while read -r f; do
  case "$f" in
    /etc/skiff*|/usr/libexec/skiff*|/usr/share/skiff*|/usr/share/doc/skiff*) ;;
    *) [ -d "$f" ] && [ ! -L "$f" ] && continue ;;
  esac
  if [ -e "$f" ] || [ -L "$f" ]; then echo "$f"; fi
done <<<"$owned")
status=$(dpkg-query -W -f='${db:Status-Status}\n' skiff skiff-train 2>/dev/null | sort -u)
if [ -n "$owned" ] && [ -z "$left" ] && { [ -z "$status" ] || [ "$status" = not-installed ]; }; then
  t_pass "purged: none of the $(wc -l <<<"$owned") paths the packages owned is left, /etc/skiff included"
else t_fail "purge left files" "status '$status': $left"; fi
plug=$(grep -rls 'skiff' /etc/slurm 2>/dev/null; grep -l "$T\|/usr/share/skiff" "$SKIFF_PLUGSTACK" 2>/dev/null)
[ -z "$plug" ] && [ "$(slurm_etc)" = "$etc_before" ] &&
  t_pass "no plugstack line names skiff (/etc/slurm as before, the cluster's plugstack.conf restored)" ||
  t_fail "plugstack lines left" "$plug"
t_done
