#!/bin/bash
# Real MPI on the real local Slurm cluster (tests/cluster/up, 3 nodes), as the
# non-root test user:
#   - srun --mpi=pmix across nodes (each emulated node has its own TmpFS);
#   - inside containers (the MPI test image of scripts/make-mpi-image: Debian
#     bookworm with Open MPI, mpi4py and MPICH; the bundled hooks): mpi4py and
#     a C program allreduce over 3 nodes x 2 tasks with --mpi=pmix, MPICH
#     with --mpi=pmi2; the plugin's RANK/WORLD_SIZE/LOCAL_RANK equal MPI's on
#     every task; the PMIx variables and the node's PMIx server directory are
#     there (findmnt "$PMIX_SERVER_TMPDIR"), the host's /tmp is not;
#   - the seed's launch style: Open MPI's mpirun inside one sbatch allocation
#     (examples/mpirun-train.sbatch), ranks from skiff-ddp-env, skiff-train's
#     TCP ring trains and equals one process with the same global batch;
#   - nothing of the test user runs afterwards.
# The image is built once and cached (SKIFF_TEST_CACHE, default
# /var/cache/skiff-tests); the first build takes 1-3 minutes.
set -u
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT" || exit 1

[ "$(id -u)" -eq 0 ] || { t_skip "mpi cluster" "needs root to start the test cluster"; t_done; }
PLUGIN=${SKIFF_PLUGIN:-$BUILD/plugin/spank_skiff.so} # tests/cluster/up loads it
# What the nodes run is built with the cluster's plugin (for another Slurm's
# Debian tree, in that tree: tests/cluster/slurm-tree); this host runs $BUILD's.
NODE_BUILD=$(dirname "$(dirname "$PLUGIN")")
[ -f "$PLUGIN" ] || { t_fail "plugin built" "$PLUGIN missing (run make)"; t_done; }
make -s "BUILD=$BUILD" "$BUILD/bin/skiff-ddp-env" "$BUILD/bin/skiff-train" "$BUILD/hooks/10-identity" \
  "$BUILD/hooks/20-home" "$BUILD/hooks/30-shm" "$BUILD/hooks/40-gpu" "$BUILD/hooks/50-pmix" \
  "$BUILD/hooks/60-slurm" >/dev/null || { t_fail "build hooks, skiff-ddp-env, skiff-train"; t_done; }
for b in mpirun srun mksquashfs debootstrap; do
  command -v "$b" >/dev/null || { t_fail "mpi cluster" "$b missing (scripts/install-deps test)"; t_done; }
done

t0=$(date +%s)
IMG=$(scripts/make-mpi-image "${SKIFF_TEST_CACHE:-/var/cache/skiff-tests}") ||
  { t_fail "MPI test image" "scripts/make-mpi-image failed"; t_done; }
echo "MPI test image $IMG ready in $(( $(date +%s) - t0 )) s"

t_cluster 3 || t_done
U=$SKIFF_TEST_USER
UHOME=$(getent passwd "$U" | cut -d: -f6)
T=$(mktemp -d /tmp/skiff-mpi-test.XXXXXX)
MARK=$(mktemp /tmp/skiff-mpi-hosttmp.XXXXXX)
chmod 755 "$T"; chmod 644 "$MARK"
cleanup() {
  rm -rf "$T" "$MARK"
  rm -rf "$UHOME/.local/share/skiff/containers"/mt-* 2>/dev/null
  t_cluster_done
}
trap cleanup EXIT

# The bundled hooks, where the test user can run them, as the admin's hooks_dir.
mkdir "$T/hooks"
cp "$NODE_BUILD"/hooks/[0-9][0-9]-* "$T/hooks/"
echo "hooks_dir = $T/hooks" >"$T/skiff.conf"
mkdir -m 777 "$T/work"
cp "$NODE_BUILD/bin/skiff-ddp-env" "$NODE_BUILD/bin/skiff-train" examples/mpirun-train.sbatch examples/mpi-pmix.sbatch "$T/"
mkdir "$T/host"
cp "$BUILD/bin/skiff-train" "$T/host/"
chmod -R a+rX "$T"
echo "required $PLUGIN config=$T/skiff.conf" >"$SKIFF_PLUGSTACK"

as_user() { (cd "$T/work" && timeout 120 runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" "$@"); }
# MPI steps: a rank that fails ends the step (the others would wait in MPI_Init).
mpi_srun() { as_user srun -Q --kill-on-bad-exit=1 "$@"; }
# sbatch_wait ARGS...: submits and polls squeue (sbatch --wait polls slowly).
sbatch_wait() {
  local id
  id=$(as_user sbatch --parsable "$@" 2>"$T/sbatch.err") || return 1
  t_wait_job "${id%%;*}"
}

# --- PMIx without containers: every node makes its own client directory --------------------------
if out=$(mpi_srun --mpi=pmix -N3 --ntasks-per-node=2 true 2>&1); then
  t_pass "srun --mpi=pmix -N3 --ntasks-per-node=2 (no container): every node has its own TmpFS"
else t_fail "srun --mpi=pmix across nodes" "$out"; fi

# check_ranks N: reads "M rank size sum RANK WORLD_SIZE LOCAL_RANK mpi_local host" lines of
# one step; prints problems and fails on any.
check_ranks() {
  awk -v n="$1" '
    /^M / {
      k++; r = $2
      if ($3 != n) { print "rank " r ": MPI size " $3 ", want " n; bad = 1 }
      if ($4 != n * (n - 1) / 2) { print "rank " r ": allreduce sum " $4 ", want " n * (n - 1) / 2; bad = 1 }
      if ($5 != r || $6 != $3 || $7 != $8) {
        print "rank " r ": RANK=" $5 " WORLD_SIZE=" $6 " LOCAL_RANK=" $7 " but MPI says " r "/" $3 " local " $8; bad = 1 }
      if (seen[r]++) { print "rank " r " twice"; bad = 1 }
      per_host[$9]++
    }
    END {
      if (k != n) { print "got " k " ranks, want " n; exit 1 }
      for (h in per_host) if (per_host[h] != 2) { print h " ran " per_host[h] " ranks, want 2"; bad = 1 }
      exit bad
    }'
}

# --- --mpi=pmix into containers ----------------------------------------------------------------
PY='from mpi4py import MPI
import os, socket
w = MPI.COMM_WORLD
local = w.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
s = w.allreduce(w.Get_rank())
e = os.environ.get
print("M", w.Get_rank(), w.Get_size(), s, e("RANK", "-"), e("WORLD_SIZE", "-"), e("LOCAL_RANK", "-"), local,
      socket.gethostname(), flush=True)'
out=$(mpi_srun --mpi=pmix -N3 --ntasks-per-node=2 --container-image="$IMG" python3 -c "$PY" 2>&1)
if why=$(check_ranks 6 <<<"$out") && ! grep -q 'PMIX ERROR' <<<"$out"; then
  t_pass "pmix, mpi4py in containers, 3 nodes x 2: size 6, allreduce 15 on every rank, RANK/WORLD_SIZE/LOCAL_RANK = MPI's"
else t_fail "pmix mpi4py in containers" "$why"; echo "$out" | sed 's/^/    /'; fi

out=$(mpi_srun --mpi=pmix -N3 --ntasks-per-node=2 --container-image="$IMG" hello_mpi 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c ' ok$' <<<"$out")" = 6 ] && [ "$(grep -c '^rank [0-5]/6 ' <<<"$out")" = 6 ] &&
   ! grep -q 'PMIX ERROR' <<<"$out"; then
  t_pass "pmix, C program (Open MPI) in containers, 3 nodes x 2: allreduce and training variables agree on every rank"
else t_fail "pmix C program in containers" "exit $rc"; echo "$out" | sed 's/^/    /'; fi

# One task per node: its PMIx variables, the node's server directory mounted
# at the same path, and the host's /tmp not visible.
out=$(mpi_srun --mpi=pmix -N3 --ntasks-per-node=1 --container-image="$IMG" sh -c \
  'echo "V $(hostname) $PMIX_RANK $PMIX_NAMESPACE ${PMIX_SERVER_URI41%%;*} $PMIX_SERVER_TMPDIR $(findmnt -n -o TARGET,OPTIONS "$PMIX_SERVER_TMPDIR" | tr " " "|") $(test -e '"$MARK"' && echo hosttmp || echo owntmp)"' 2>&1)
ok=1
for k in 1 2 3; do
  l=$(grep "^V n$k " <<<"$out") || { ok=0; continue; }
  read -r _ _ rank ns uri dir mnt tmp <<<"$l"
  d=${dir%/}
  [[ "$rank" =~ ^[0-2]$ ]] && [[ "$ns" == slurm.pmix.* ]] && [[ "$uri" == pmix-server.* ]] &&
    [ "$d" = "$SKIFF_CLUSTER_STATE/spool/n$k/pmix.${ns#slurm.pmix.}" ] && [[ "$mnt" == "$d|"*noexec* ]] &&
    [ "$tmp" = owntmp ] || ok=0
done
if [ "$ok" = 1 ]; then
  t_pass "pmix in containers: PMIX_* present, findmnt \$PMIX_SERVER_TMPDIR shows the node's own server directory (noexec); host /tmp not bound"
else t_fail "PMIx variables and server directory inside" "$out"; fi

# --- --mpi=pmi2 into containers (MPICH) --------------------------------------------------------
# MPICH's data path is UCX, which takes all emulated nodes for one machine
# (one kernel, one boot id) and so picks shared memory between them: SysV
# segments and /proc/PID/fd links do not cross the containers' namespaces,
# named POSIX segments in the host's /dev/shm (bound in every container) do.
# (UCX_TLS=tcp,self would be the real-cluster path, but Debian's UCX 1.13 +
# MPICH 4.0 hang in MPI_Finalize with it about every other run, with or
# without containers.) The wire-up is Slurm's PMI-2 across the three nodes.
out=$(mpi_srun --mpi=pmi2 -N3 --ntasks-per-node=2 --container-image="$IMG" sh -c \
  'echo "P $PMI_RANK $PMI_SIZE $(readlink /proc/self/fd/$PMI_FD)"
   UCX_TLS=posix,self UCX_POSIX_USE_PROC_LINK=n exec hello_mpi.mpich' 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c ' ok$' <<<"$out")" = 6 ] && [ "$(grep -c '^P [0-5] 6 socket:' <<<"$out")" = 6 ]; then
  t_pass "pmi2, C program (MPICH) in containers, 3 nodes x 2: PMI_FD is Slurm's socket, allreduce and variables agree"
else t_fail "pmi2 in containers" "exit $rc"; echo "$out" | sed 's/^/    /'; fi

# --- a named container made by a plain step serves a PMIx step ------------------------------------
# (both steps on n1,n2: a named container lives on the nodes that made it)
if as_user srun -Q -w n1,n2 --container-image="$IMG" --container-name=mt-mpi true >/dev/null 2>&1 &&
   out=$(mpi_srun --mpi=pmix -w n1,n2 --ntasks-per-node=2 --container-name=mt-mpi hello_mpi 2>&1) &&
   [ "$(grep -c ' ok$' <<<"$out")" = 4 ] && ! grep -q 'PMIX ERROR' <<<"$out"; then
  t_pass "pmix in a named container created by an earlier plain step"
else t_fail "pmix in a named container" "${out:-}"; fi

# --- examples/mpi-pmix.sbatch as written, the image as ./mpi.sqsh --------------------------------
# (the emulation's UCX settings for MPICH, see above, in the job's environment)
ln -s "$IMG" "$T/work/mpi.sqsh"
if sbatch_wait -N3 --ntasks-per-node=2 --chdir="$T/work" -o "$T/work/pmix-example.out" \
     --export=ALL,UCX_TLS=posix,self,UCX_POSIX_USE_PROC_LINK=n "$T/mpi-pmix.sbatch" &&
   [ "$(grep -c '^rank [0-5]/6 .* ok$' "$T/work/pmix-example.out")" = 12 ] &&
   [ "$(grep -c '^[0-5] 6 15$' "$T/work/pmix-example.out")" = 6 ]; then
  t_pass "examples/mpi-pmix.sbatch: hello_mpi (pmix), mpi4py (pmix) and hello_mpi.mpich (pmi2) on 3 nodes x 2"
else t_fail "examples/mpi-pmix.sbatch" "$(cat "$T/sbatch.err" "$T/work/pmix-example.out" 2>&1)"; fi

# --- the seed's launch style: mpirun inside one allocation, no srun per rank -----------------------
W=$T/work
as_user "$T/host/skiff-train" tokenize --out "$W/lic" --val-frac 0.2 \
  /usr/share/common-licenses/{GPL-3,Apache-2.0,MPL-2.0} >/dev/null 2>&1
sbatch_wait -o "$W/mpirun.out" \
  --export=ALL,TRAIN=$T/skiff-train,DDP_ENV=$T/skiff-ddp-env,DATA="$W/lic_train_*.bin",OUT=$W/m4 \
  "$T/mpirun-train.sbatch" || t_fail "sbatch examples/mpirun-train.sbatch" "$(cat "$T/sbatch.err")"
r=$(grep -c '^rank ' "$W/mpirun.out" 2>/dev/null)
if [ "$r" = 4 ] &&
   [ "$(grep '^rank ' "$W/mpirun.out" | sed 's/, master.*//' | sort | tr '\n' ';')" = \
     "rank 0 of 4, local rank 0 on n1;rank 1 of 4, local rank 1 on n1;rank 2 of 4, local rank 0 on n2;rank 3 of 4, local rank 1 on n2;" ] &&
   [ "$(grep -o 'master .*' "$W/mpirun.out" | sort -u | wc -l)" = 1 ] && grep -q 'master n1:' "$W/mpirun.out"; then
  t_pass "mpirun -np 4 --map-by ppr:2:node in sbatch -N2: skiff-ddp-env gives ranks 0-3, local ranks 0/1 per node, one MASTER_ADDR n1:port"
else t_fail "mpirun ranks through skiff-ddp-env" "$(cat "$W/mpirun.out" 2>&1)"; fi
first=$(sed -n '1s/.*"loss":\([0-9.]*\).*/\1/p' "$W/m4.jsonl" 2>/dev/null)
last=$(sed -n '$s/.*"loss":\([0-9.]*\).*/\1/p' "$W/m4.jsonl" 2>/dev/null)
# The same global batch (4 ranks x 3 = 12 sequences) in one process: the
# parameters must agree (tolerance of tests/integration/trainer-ddp.sh).
OMP_NUM_THREADS=1 "$T/host/skiff-train" train --model tiny --data "$W/lic_train_*.bin" --batch 12 --seq 32 --steps 10 \
  --lr 1e-3 --warmup 2 --threads 1 --quiet --ckpt-dir "$T/one.ckpt" --log "$T/one.jsonl" >/dev/null 2>&1
if [ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' &&
   cmp=$("$T/host/skiff-train" compare "$T/one.ckpt" "$W/m4.ckpt" --tol 5e-5 2>&1); then
  t_pass "mpirun-launched skiff-train: loss $first -> $last over 10 steps, parameters equal one process's ($cmp)"
else t_fail "mpirun-launched training" "loss '$first' -> '$last'; ${cmp:-no compare}; $(tail -5 "$W/mpirun.out" 2>&1)"; fi

# --- nothing left behind ---------------------------------------------------------------------------
# (other clusters run jobs as the same user: only this cluster's nodes count)
for _ in $(seq 50); do [ -z "$(t_cluster_procs)" ] && break; sleep 0.1; done
left=$(t_cluster_procs)
spool=$(ls -d "$SKIFF_CLUSTER_STATE"/spool/n*/pmix.* "$SKIFF_CLUSTER_STATE"/tmp/n*/spmix_appdir_* 2>/dev/null)
if [ -z "$left" ] && [ -z "$spool" ]; then t_pass "no process of $U on this cluster and no PMIx directory left after the steps"
else t_fail "leftovers" "processes: $left; directories: $spool"; fi
t_done
