#!/bin/bash
# skiff-train's parallel layouts under `srun --container-image` on the local
# cluster, each task's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
# MASTER_PORT set by skiff's hook: 2 nodes x 2 tasks with --zero 1
# --recompute, 2 nodes x 1 task with --zero 2 --grad-accum 2, 2 nodes x 2
# tasks as dp2 x tp2 (--tp 2: each node's two tasks are one tensor-parallel
# group, Megatron's order, with ZeRO-1 across the nodes), 2 nodes x 2 tasks
# with --zero 3, dp2 x pp2 (--pp 2 --micro-batches 2: the stages across
# the nodes) and tp2 x pp2 (a stage per node, split over its two tasks),
# each against
# one process on the same global batch (24 x 64 tokens, 12 steps; tolerance
# 5e-5 as in trainer-ddp.sh); the 4 ranks with --recompute equal them without
# it bit for bit. The image is the demo's: busybox and a CPU-only skiff-train.
source "$(dirname "$0")/../lib.sh"
[ "$(id -u)" -eq 0 ] || { t_skip "skiff-train layouts on the cluster" "needs root for the local cluster"; t_done; }
cd "$T_ROOT" || exit 1
# the demo's CPU-only build (the image then carries no CUDA libraries), with
# BUILD spelled relative to the tree as the demo spells it
cpu_build=$(realpath -m --relative-to="$T_ROOT" "$BUILD/cpu")
make -s -j2 BUILD="$cpu_build" NVCC= "$cpu_build/bin/skiff-train" >/dev/null ||
  { t_fail "build a CPU-only skiff-train"; t_done; }
t_cluster 2 || t_done
W=$(mktemp -d /var/tmp/skiff-trainer-cluster.XXXXXX)
t_at_exit "rm -rf '$W'"
T_AS_USER_DIR=$W
mkdir -p "$W/home"
chown -R "$SKIFF_TEST_USER:" "$W"
chmod 755 "$W"
"$T_ROOT/scripts/make-trainer-rootfs" "$W/rootfs" "$T_ROOT/$cpu_build/bin/skiff-train" &&
  t_as_user HOME="$W/home" "$BUILD/bin/skiff" import -o "$W/trainer.sqsh" "dir:$W/rootfs" >/dev/null 2>&1 &&
  t_as_user HOME="$W/home" "$BUILD/bin/skiff-train" tokenize --out "$W/data/lic" --val-frac 0 \
    /usr/share/common-licenses/{GPL-3,Apache-2.0} >/dev/null ||
  { t_fail "trainer image and corpus"; t_done; }

S() { t_as_user HOME="$W/home" srun -Q --kill-on-bad-exit=1 --container-image="$W/trainer.sqsh" --container-mounts="$W:/demo" \
  --container-workdir=/demo "$@"; }
A=(skiff-train train --model tiny --data '/demo/data/lic_train_*.bin' --seq 64 --steps 12 --lr 1e-3 --threads 1
  --quiet --timeout 60)
strip() { sed 's/"tokens_per_s".*//' "$W/$1.jsonl"; }
S -N 1 -n 1 "${A[@]}" --batch 24 --log /demo/p1.jsonl || t_fail "one process in a container"

layout() { # NAME DESCRIPTION SRUN-ARGS... -- TRAIN-ARGS...
  local name=$1 desc=$2 sargs=()
  shift 2
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  if ! S "${sargs[@]}" "${A[@]}" "$@" --log "/demo/$name.jsonl"; then t_fail "$desc runs"; return 1; fi
  if t_close_losses "$W/p1.jsonl" "$W/$name.jsonl" 5e-5; then
    t_pass "$desc: 12 losses within 5e-5 of one process ($(t_losses "$W/$name.jsonl" | sed -n '1p;$p' | paste -sd' ' | sed 's/ / -> /'))"
  else
    t_fail "$desc equals one process" "$(paste -d' ' <(t_losses "$W/p1.jsonl") <(t_losses "$W/$name.jsonl") | tr '\n' ';')"
  fi
}
layout z1r "2 nodes x 2 tasks, --zero 1 --recompute" -N 2 --ntasks-per-node=2 -- --batch 6 --zero 1 --recompute
layout z2k "2 nodes x 1 task, --zero 2 --grad-accum 2" -N 2 --ntasks-per-node=1 -- --batch 6 --zero 2 --grad-accum 2
layout d2t2 "2 nodes x 2 tasks, dp2 x tp2 (--tp 2 --zero 1)" -N 2 --ntasks-per-node=2 -- --batch 12 --tp 2 --zero 1
layout z3 "2 nodes x 2 tasks, --zero 3 (FSDP)" -N 2 --ntasks-per-node=2 -- --batch 6 --zero 3
# pipeline stages across the nodes, data parallel within each (rank = stage * 2 + dp_rank)
layout dp2pp2 "2 nodes x 2 tasks, dp2 x pp2 (1f1b)" -N 2 --ntasks-per-node=2 -- --batch 6 --pp 2 --micro-batches 2
# each node one stage, its two tasks the stage's tensor-parallel group (rank = stage * 2 + tp_rank)
layout tp2pp2 "2 nodes x 2 tasks, tp2 x pp2" -N 2 --ntasks-per-node=2 -- --batch 12 --tp 2 --pp 2 --micro-batches 2
if S -N 2 --ntasks-per-node=2 "${A[@]}" --batch 6 --zero 1 --log /demo/z1.jsonl && [ -s "$W/z1.jsonl" ] &&
  cmp -s <(strip z1) <(strip z1r); then
  t_pass "4 ranks --zero 1: --recompute equals keeping the activations bit for bit"
else
  t_fail "4 ranks --zero 1: --recompute equals keeping the activations" "$(diff <(strip z1) <(strip z1r) | head -3)"
fi
left=$(t_cluster_procs skiff-train)
[ -z "$left" ] && t_pass "no trainer process left on the nodes" || t_fail "no trainer process left on the nodes" "$left"
t_done
