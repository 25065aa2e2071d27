#!/bin/bash
# skiff-ddp-env on the real local Slurm cluster (tests/cluster/up): every
# task reports the variables it computed next to Slurm's own view, and a
# checker verifies them: RANK = SLURM_PROCID, LOCAL_WORLD_SIZE = tasks seen on
# that host, MASTER_ADDR = the host where rank 0 really ran, one MASTER_PORT
# per step, different ports for concurrent steps and array tasks, het jobs.
# Host lists are compared with Slurm's own `scontrol show hostnames/hostlist`.
#
# Most cases run the tool under plain srun (no container). The container cases
# (srun --container-image: the plugin calls the same library in task_init) run
# once the skiff plugin is loaded on the cluster, and SKIP, saying so, before.
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT" || exit 1
CL=${SKIFF_CLUSTER_SCRIPTS:-$T_ROOT/tests/cluster}
export SKIFF_CLUSTER_INDEX=${SKIFF_CLUSTER_INDEX:-5}

if [ ! -x "$CL/up" ]; then
  t_skip "hooks cluster" "no $CL/up in this tree (it comes with the plugin branch)"; t_done
fi
if [ "$(id -u)" -ne 0 ]; then t_skip "hooks cluster" "needs root to start the local cluster"; t_done; fi
make -s "BUILD=$BUILD" "$BUILD/bin/skiff-ddp-env" >/dev/null || { t_fail "build skiff-ddp-env"; t_done; }

started=0
state=/run/skiff-cluster-$SKIFF_CLUSTER_INDEX
[ -f "$state/owner" ] || started=1
if ! SKIFF_CLUSTER_QUIET=1 "$CL/up" 3; then t_fail "cluster up"; t_done; fi
# shellcheck disable=SC1091
source "$CL/run/env.sh"
U=$SKIFF_TEST_USER

W=$(mktemp -d /tmp/skiff-ddpcl.XXXXXX)
chmod 755 "$W"; mkdir -m 777 "$W/out"
cleanup() {
  rm -rf "$W"
  [ "$started" = 1 ] && SKIFF_CLUSTER_QUIET=1 "$CL/down" >/dev/null 2>&1
}
trap cleanup EXIT
cp "$BUILD/bin/skiff-ddp-env" "$W/skiff-ddp-env"
cat >"$W/report" <<EOF
#!/bin/bash
out=\$("$W/skiff-ddp-env" 2>"$W/out/err.\$SLURM_JOB_ID.\$SLURM_STEP_ID.\$SLURM_PROCID") || { echo "ERR \$(hostname) \$SLURM_PROCID"; exit 1; }
eval "\$out"
echo "T host=\$(hostname) procid=\$SLURM_PROCID localid=\$SLURM_LOCALID nodeid=\$SLURM_NODEID job=\$SLURM_JOB_ID step=\$SLURM_STEP_ID rank=\${RANK-} ws=\${WORLD_SIZE-} lr=\${LOCAL_RANK-} lws=\${LOCAL_WORLD_SIZE-} nr=\${NODE_RANK-} gr=\${GROUP_RANK-} gws=\${GROUP_WORLD_SIZE-} rr=\${ROLE_RANK-} rws=\${ROLE_WORLD_SIZE-} ma=\${MASTER_ADDR-} mp=\${MASTER_PORT-} omp=\${OMP_NUM_THREADS:-unset}"
EOF
chmod 755 "$W/report" "$W/skiff-ddp-env"
as_user() { (cd "$W" && timeout 90 runuser -u "$U" -- "$@"); }
# sbatch_wait ARGS...: submits and polls squeue every 0.2 s (sbatch --wait
# polls every few seconds, which would dominate this test's time).
sbatch_wait() {
  local id
  id=$(as_user sbatch --parsable "$@" 2>/dev/null) || return 1
  id=${id%%;*}
  [ -n "$id" ] || return 1
  for _ in $(seq 450); do
    [ -z "$(squeue -h -j "$id" 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  return 1
}

# check N: reads "T ..." lines of ONE step on stdin; prints problems, exits 1 on any.
check() {
  awk -v n="$1" '
    /^ERR/ { print "task failed: " $0; bad = 1; next }
    /^T / {
      delete f
      for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = substr($i, length(kv[1]) + 2) }
      k = ++cnt; host[k] = f["host"]; rank[k] = f["rank"]
      if (f["rank"] != f["procid"]) { print "RANK " f["rank"] " != SLURM_PROCID " f["procid"]; bad = 1 }
      if (f["lr"] != f["localid"]) { print "LOCAL_RANK " f["lr"] " != SLURM_LOCALID " f["localid"]; bad = 1 }
      if (f["nr"] != f["nodeid"] || f["gr"] != f["nodeid"]) { print "NODE_RANK/GROUP_RANK != SLURM_NODEID on rank " f["rank"]; bad = 1 }
      if (f["ws"] != n || f["rws"] != n) { print "WORLD_SIZE " f["ws"] " != " n; bad = 1 }
      if (f["rr"] != f["rank"]) { print "ROLE_RANK != RANK"; bad = 1 }
      lws[k] = f["lws"]; ma[k] = f["ma"]; mp[k] = f["mp"]; gws[k] = f["gws"]; omp[k] = f["omp"]
      per_host[f["host"]]++
      if (seen[f["rank"]]++) { print "rank " f["rank"] " twice"; bad = 1 }
      if (f["rank"] == 0) rank0_host = f["host"]
    }
    END {
      if (cnt != n) { print "got " cnt " tasks, expected " n; exit 1 }
      nh = 0; for (h in per_host) nh++
      for (k = 1; k <= cnt; k++) {
        if (lws[k] != per_host[host[k]]) { print "LOCAL_WORLD_SIZE " lws[k] " on " host[k] " but " per_host[host[k]] " tasks ran there"; bad = 1 }
        if (ma[k] != rank0_host) { print "MASTER_ADDR " ma[k] " but rank 0 ran on " rank0_host; bad = 1 }
        if (mp[k] != mp[1]) { print "MASTER_PORT differs within the step"; bad = 1 }
        if (mp[k] < 20000 || mp[k] > 29999) { print "MASTER_PORT " mp[k] " outside 20000-29999"; bad = 1 }
        if (gws[k] != nh) { print "GROUP_WORLD_SIZE " gws[k] " but " nh " hosts"; bad = 1 }
        want = lws[k] > 1 ? "1" : "unset"
        if (omp[k] != want) { print "OMP_NUM_THREADS " omp[k] " with " lws[k] " tasks on the node"; bad = 1 }
      }
      exit bad
    }'
}

# step_case NAME N SRUN-ARGS...: one step, all checks
step_case() {
  local name=$1 n=$2; shift 2
  local out
  out=$(as_user srun -Q "$@" "$W/report" 2>&1)
  local why
  if why=$(check "$n" <<<"$out"); then t_pass "$name"
  else t_fail "$name" "$why"; echo "$out" | sed 's/^/    /'; fi
}

step_case "srun -N3 -n7 (block): every variable matches Slurm's view" 7 -N3 -n7
step_case "srun -N3 -n7 --distribution=cyclic: local ranks from SLURM_LOCALID, not rank arithmetic" 7 \
  -N3 -n7 --distribution=cyclic
step_case "srun -N2 -n5 (uneven 3+2)" 5 -N2 -n5

as_user srun -Q -N1 -n1 env SKIFF_DDP_ENV=0 "$W/report" >"$W/off.txt" 2>&1
if grep -q 'rank= ws= ' "$W/off.txt"; then t_pass "SKIFF_DDP_ENV=0 turns it off"
else t_fail "SKIFF_DDP_ENV=0" "$(cat "$W/off.txt")"; fi

# Two concurrent steps of one job: each consistent, ports differ.
out=$(as_user salloc -Q -N2 -n4 bash -c "srun --overlap -n2 $W/report & srun --overlap -n2 $W/report & wait" 2>&1)
steps=$(grep '^T ' <<<"$out" | sed 's/.* step=\([0-9]*\) .*/\1/' | sort -u)
ports=$(grep '^T ' <<<"$out" | sed 's/.* mp=\([0-9]*\) .*/\1/' | sort -u | wc -l)
ok=1
[ "$(wc -w <<<"$steps")" = 2 ] || ok=0
for s in $steps; do grep "^T .* step=$s " <<<"$out" | check 2 >/dev/null || ok=0; done
if [ "$ok" = 1 ] && [ "$ports" = 2 ]; then t_pass "two concurrent steps of one job: each consistent, different MASTER_PORTs"
else t_fail "concurrent steps" "$out"; fi

# Heterogeneous job, component 0 on the last node: the step's node list is
# sorted (n1 first) but rank 0 runs on n3. One allocation for both steps: het
# jobs are started by the backfill scheduler, which can take its time.
out=$(as_user salloc -Q -w n3 -n1 : -w n1,n2 -n3 bash -c \
  "srun --het-group=0,1 $W/report; echo SPLIT; srun --het-group=1 $W/report" 2>&1)
both=$(sed -n '/^SPLIT$/q;p' <<<"$out"); one=$(sed -n '/^SPLIT$/,$p' <<<"$out")
if why=$(check 4 <<<"$both") && grep -q 'rank=0 .* ma=n3 ' <<<"$both"; then
  t_pass "het job (component 0 on n3, 1 on n1,n2): MASTER_ADDR is rank 0's host n3, local sizes right"
else t_fail "het job" "$why $out"; fi
if why=$(check 3 <<<"$one"); then t_pass "het job, step on component 1 only"
else t_fail "het job component 1" "$why $out"; fi

# A batch script that evals skiff-ddp-env, then srun: tasks recompute, not inherit rank 0.
sbatch_wait -N2 -n3 -o "$W/out/batch.txt" \
  --wrap "eval \"\$($W/skiff-ddp-env 2>/dev/null)\"; echo B rank=\$RANK ws=\$WORLD_SIZE; srun $W/report" >/dev/null 2>&1
if grep -q '^B rank=0 ws=1$' "$W/out/batch.txt" 2>/dev/null && why=$(grep '^T ' "$W/out/batch.txt" | check 3); then
  t_pass "batch script eval then srun: the batch process is rank 0 of 1, tasks recompute their own"
else t_fail "batch then srun" "$why $(cat "$W/out/batch.txt" 2>&1)"; fi

# Job array: tasks of one array run as separate jobs, possibly side by side.
sbatch_wait -a 1-2 -N1 -n2 -o "$W/out/arr-%a.txt" --wrap "srun $W/report" >/dev/null 2>&1
p1=$(grep -h '^T ' "$W/out/arr-1.txt" 2>/dev/null | sed 's/.* mp=\([0-9]*\) .*/\1/' | sort -u)
p2=$(grep -h '^T ' "$W/out/arr-2.txt" 2>/dev/null | sed 's/.* mp=\([0-9]*\) .*/\1/' | sort -u)
if [ -n "$p1" ] && [ -n "$p2" ] && [ "$(wc -l <<<"$p1")" = 1 ] && [ "$p1" != "$p2" ] &&
   grep '^T ' "$W/out/arr-1.txt" | check 2 >/dev/null; then
  t_pass "job array: each array task gets its own MASTER_PORT ($p1, $p2)"
else t_fail "job array" "$(cat "$W/out"/arr-*.txt 2>&1)"; fi

# --- The same inside containers: the plugin calls ddp_env in task_init. -------------
if ! srun --help 2>/dev/null | grep -q -- '--container-image'; then
  t_skip "containers: srun --container-image -N3 -n7, cyclic, concurrent steps" \
    "the skiff plugin is not loaded on the cluster (no ${SKIFF_PLUGIN:-$BUILD/plugin/spank_skiff.so})"
elif ! command -v mksquashfs >/dev/null || [ ! -x /bin/busybox ]; then
  t_skip "containers" "needs mksquashfs and busybox-static (scripts/install-deps test)"
else
  R=$W/img; mkdir -p "$R"/{bin,etc,dev,proc,sys,tmp}
  cp /bin/busybox "$R/bin/"; for c in sh hostname cat; do ln -s busybox "$R/bin/$c"; done
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"; printf 'root:x:0:\n' >"$R/etc/group"
  touch "$R/etc/hosts" "$R/etc/resolv.conf" "$R/etc/hostname"
  # the report without skiff-ddp-env: inside, the variables must already be there
  sed -e '2,3d' -e 's|^#!/bin/bash|#!/bin/sh|' "$W/report" >"$R/bin/report"; chmod 755 "$R/bin/report"
  mksquashfs "$R" "$W/img.sqsh" -quiet -noappend -comp lz4 >/dev/null 2>&1; chmod -R a+rX "$W"
  creport() { local n=$1 name=$2; shift 2; local out why
    out=$(as_user srun -Q --container-image="$W/img.sqsh" "$@" /bin/report 2>&1)
    if why=$(check "$n" <<<"$out"); then t_pass "$name"; else t_fail "$name" "$why"; echo "$out" | sed 's/^/    /'; fi; }
  creport 7 "containers: srun -N3 -n7 --container-image: every variable matches Slurm's view" -N3 -n7
  creport 7 "containers: srun -N3 -n7 --distribution=cyclic --container-image" -N3 -n7 --distribution=cyclic
  out=$(as_user salloc -Q -N2 -n4 bash -c "srun --overlap -n2 --container-image=$W/img.sqsh /bin/report &
        srun --overlap -n2 --container-image=$W/img.sqsh /bin/report & wait" 2>&1)
  ok=1; steps=$(grep '^T ' <<<"$out" | sed 's/.* step=\([0-9]*\) .*/\1/' | sort -u)
  [ "$(wc -w <<<"$steps")" = 2 ] || ok=0
  for s in $steps; do grep "^T .* step=$s " <<<"$out" | check 2 >/dev/null || ok=0; done
  if [ "$ok" = 1 ] && [ "$(grep '^T ' <<<"$out" | sed 's/.* mp=\([0-9]*\) .*/\1/' | sort -u | wc -l)" = 2 ]; then
    t_pass "containers: two concurrent steps of one job get different MASTER_PORTs"
  else t_fail "containers: concurrent steps" "$out"; fi
  # values a batch script exported with skiff-ddp-env reach the tasks through
  # srun: the plugin must recompute them, yet keep what the user changed after
  sbatch_wait -N2 -n3 -o "$W/out/cbatch.txt" --wrap "eval \"\$($W/skiff-ddp-env 2>/dev/null)\";
    srun --container-image=$W/img.sqsh /bin/report; echo SPLIT; RANK=5 srun -N1 -n1 --container-image=$W/img.sqsh /bin/report" \
    >/dev/null 2>&1
  first=$(sed -n '/^SPLIT$/q;p' "$W/out/cbatch.txt" 2>/dev/null)
  if why=$(check 3 <<<"$first") && grep -q '^T .* rank=5 ' "$W/out/cbatch.txt"; then
    t_pass "containers: batch script eval then srun: tasks get their own ranks; a RANK the user set afterwards stays"
  else t_fail "containers: batch then srun" "$why $(cat "$W/out/cbatch.txt" 2>&1)"; fi
fi

# Host lists: the same answers as Slurm's own code.
hl_ok=1
for l in 'n1' 'n[1-3]' 'gpu-a[01-02]-b[3,5]' 'n[08-11],login' 'x[01,3-4,006]' 'r[1-2]n[1-2]' \
         'a[1-2]b[3-4],c9' 'n[9-11]' 'node[001-100]'; do
  mine=$("$BUILD/bin/skiff-ddp-env" --expand "$l" | tr '\n' ' ')
  theirs=$(scontrol show hostnames "$l" 2>/dev/null | tr '\n' ' ')
  if [ "$mine" != "$theirs" ]; then hl_ok=0; echo "expand $l: skiff '$mine' vs slurm '$theirs'"; fi
done
for h in 'n1 n2 n3' 'n1 n3 n2 n10 n9' 'a1 a2 b1 c' 'n01 n02 n03 n05' 'x9 x10 x11'; do
  # shellcheck disable=SC2086
  mine=$("$BUILD/bin/skiff-ddp-env" --compress $h)
  theirs=$(scontrol show hostlist "$(tr ' ' ',' <<<"$h")" 2>/dev/null)
  if [ "$mine" != "$theirs" ]; then hl_ok=0; echo "compress $h: skiff '$mine' vs slurm '$theirs'"; fi
done
if [ "$hl_ok" = 1 ]; then t_pass "host list expansion and compression agree with scontrol show hostnames/hostlist"
else t_fail "host lists vs scontrol"; fi
t_done
