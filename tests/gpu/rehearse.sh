#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# `make gpu-rehearse`: tests/gpu/device-run.sh as a GPU image would run it,
# without the GPU. The image has nvcc, a newer gcc, NCCL only as the pip
# wheel nvidia-nccl-cu13 and no jansson/utf8proc; so here:
#   - a Debian 13 tree (scripts/make-debian-tree: gcc 14, make, python3, no
#     jansson, utf8proc or NCCL packages), the host's CUDA toolkit bound in;
#   - NCCL in the wheel's layout (site-packages/nvidia/nccl/{include,lib},
#     libnccl.so.2 and no libnccl.so) on the tree's python3 path. PyPI is not
#     reachable from this machine, so the files are the toolkit's NCCL, laid
#     out as the wheel lays them out; preflight must find them there;
#   - the working tree as a GPU machine receives it (tracked and untracked
#     files git does not ignore) plus build-gpu-deps/ (`make gpu-host-deps`).
# Passes when device-run.sh gets through preflight and build (skiff-train's
# NCCL resolving to the wheel's) and stops with exit 3, "no GPU". Needs root.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
root=$PWD
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA_HOME/bin/nvcc" ] || { t_skip "gpu-rehearse" "no CUDA toolkit at $CUDA_HOME"; t_done; }
[ -e "$CUDA_HOME/lib64/libnccl.so.2" ] || { t_skip "gpu-rehearse" "no NCCL in $CUDA_HOME to lay out as the wheel"; t_done; }
cache=${SKIFF_TEST_CACHE:-/var/cache/skiff-tests}
tree=$(scripts/make-debian-tree "$cache" gpu-rehearse trixie make gcc g++ python3 libc6-dev) ||
  { t_fail "gpu-rehearse: Debian 13 tree" "scripts/make-debian-tree failed"; t_done; }
scripts/gpu-host-deps build-gpu-deps || { t_fail "gpu-rehearse: build-gpu-deps" "scripts/gpu-host-deps failed"; t_done; }

w=$(mktemp -d /tmp/skiff-gpu-rehearse.XXXXXX)
trap 'rm -rf "$w"' EXIT
wheel=$w/site-packages/nvidia/nccl
mkdir -p "$w/src" "$wheel/include" "$wheel/lib"
cp "$CUDA_HOME"/include/nccl*.h "$wheel/include/"
cp -L "$CUDA_HOME/lib64/libnccl.so.2" "$wheel/lib/"
git ls-files -z -co --exclude-standard | tar -c --null -T - build-gpu-deps | tar -x -C "$w/src"
mkdir -p "$w/out"
start=$(date +%s)
scripts/in-debian-tree --bind "$CUDA_HOME" --chdir "$w/src" "$tree" \
  env PATH="$CUDA_HOME/bin:/usr/bin:/bin" PYTHONPATH="$w/site-packages" OUT="$w/out" \
  SKIFF_GPU_DEADLINE=2400 SKIFF_GPU_BUILD_LIMIT=2400 tests/gpu/device-run.sh >"$w/run.log" 2>&1
rc=$?
log=$(cat "$w/run.log")
nccl=$(scripts/in-debian-tree --bind "$CUDA_HOME" "$tree" ldd "$w/src/build/bin/skiff-train" 2>&1 | grep libnccl)
gccv=$(grep '^== gcc:' <<<"$log")
if [ $rc -eq 3 ] && grep -q '^== no GPU: preflight and build passed' <<<"$log" &&
  grep -q "^== NCCL: $wheel" <<<"$log" && grep -q 'jansson: build-gpu-deps' <<<"$log" &&
  grep -q -- "-I$wheel/include .*comm_cuda.cu" "$w/out/build.log" && [[ $nccl == *"$wheel/lib/libnccl.so.2"* ]]; then
  t_pass "device-run.sh in Debian 13 (${gccv#== }), NCCL as the pip wheel lays it out, jansson/utf8proc from build-gpu-deps: preflight, build, stops at 'no GPU' ($(($(date +%s) - start)) s)"
else
  t_fail "device-run.sh rehearsal (exit $rc, want 3)" "$(tail -25 "$w/run.log"; tail -20 "$w/out/build.log" 2>/dev/null; echo "ldd: $nccl")"
fi
t_done
