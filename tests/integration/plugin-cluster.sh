#!/bin/bash
# spank_skiff.so on a real local Slurm cluster (tests/cluster/up, 3 emulated
# nodes): real srun/sbatch/salloc as the non-root test user, one cluster per
# run of this script. Needs root (namespaces, daemons).
set -u
source "$(dirname "$0")/../lib.sh"
# SKIFF_TRACE=1: a timestamped trace, to see where the time goes
[ -n "${SKIFF_TRACE:-}" ] && { PS4='+ ${EPOCHREALTIME} '; set -x; }
cd "$T_ROOT"

[ "$(id -u)" -eq 0 ] || { t_skip "plugin cluster" "needs root to start the test cluster"; t_done; }
PLUGIN=${SKIFF_PLUGIN:-$BUILD/plugin/spank_skiff.so} # tests/cluster/up loads it
[ -f "$PLUGIN" ] || { t_fail "plugin built" "$PLUGIN missing (run make)"; t_done; }
for b in mksquashfs busybox srun; do
  command -v "$b" >/dev/null || [ -x /bin/busybox ] || { t_skip "plugin cluster" "$b missing"; t_done; }
done

t_cluster 3 || t_done
PLUGSTACK_ORIG=$T_PLUGSTACK_ORIG
U=$SKIFF_TEST_USER
UHOME=$(getent passwd "$U" | cut -d: -f6)
T=$(mktemp -d /tmp/skiff-plugin-test.XXXXXX)
chmod 755 "$T"
cleanup() {
  rm -rf "$T"
  rm -rf "$UHOME/.local/share/skiff/containers"/pt-* 2>/dev/null
  t_cluster_done
}
trap cleanup EXIT

# --- the test image: busybox-static in a squashfs, with an image config ------
R=$T/rootfs
mkdir -p "$R"/{bin,etc,tmp,proc,dev,sys,data,.skiff,opt/work}
cp /bin/busybox "$R/bin/"
for c in sh ls cat id echo true env hostname touch pwd sleep mkdir test grep wc rm printf readlink stat; do
  ln -sf busybox "$R/bin/$c"
done
printf 'root:x:0:0:root:/root:/bin/sh\n%s:x:%s:%s::/home/%s:/bin/sh\n' "$U" "$(id -u "$U")" "$(id -g "$U")" "$U" >"$R/etc/passwd"
printf 'root:x:0:\n' >"$R/etc/group"
touch "$R/etc/hosts" "$R/etc/resolv.conf" "$R/etc/hostname"
echo from-image >"$R/etc/skiff-marker"
# Mount targets: a user who is not remapped to root cannot create files in
# the image's root-owned directories (they show as nobody), so they exist.
touch "$R/etc/mfile"
cat >"$R/.skiff/config.json" <<'EOF'
{"Env": ["PATH=/bin", "IMGVAR=image", "SHARED=image"], "WorkingDir": "/opt/work", "Entrypoint": ["/bin/echo", "EP"]}
EOF
IMG=$T/busybox.sqsh
mksquashfs "$R" "$IMG" -quiet -noappend -comp zstd -all-root >/dev/null || { t_fail "build test image"; t_done; }
chmod 644 "$IMG"
W=$T/work          # the user's working directory for steps
mkdir -p "$W"; chown "$U:" "$W"

# as_user CMD...: runs CMD as the test user in $W with the cluster's config.
as_user() { (cd "$W" && runuser -u "$U" -- env SLURM_CONF="$SLURM_CONF" "$@"); }
# out_is NAME EXPECTED CMD...: passes when CMD succeeds and prints EXPECTED.
out_is() {
  local name=$1 want=$2 got; shift 2
  got=$("$@" 2>"$T/err"); local rc=$?
  if [ $rc -ne 0 ]; then t_fail "$name" "exit $rc: $(head -c 600 "$T/err")"
  elif [ "$got" != "$want" ]; then t_fail "$name" "got '$got', want '$want'"
  else t_pass "$name"; fi
}
srun1() { as_user srun -Q -N1 -n1 -w n1 "$@"; }

# --- basics ----------------------------------------------------------------------
out_is "single node: image file visible" from-image srun1 --container-image="$IMG" cat /etc/skiff-marker
out_is "relative ./ image path" from-image \
  bash -c "cp '$IMG' '$W/bb.sqsh' && chmod 644 '$W/bb.sqsh' && cd '$W' && runuser -u '$U' -- env SLURM_CONF='$SLURM_CONF' srun -Q -n1 --container-image=./bb.sqsh cat /etc/skiff-marker"

want=$(for i in 0 1 2 3 4 5; do echo "$i from-image"; done)
got=$(as_user srun -Q -N3 --ntasks-per-node=2 --container-image="$IMG" sh -c 'echo $SLURM_PROCID $(cat /etc/skiff-marker)' 2>"$T/err" | sort)
[ "$got" = "$want" ] && t_pass "multi-node -N3 --ntasks-per-node=2: each task sees the image and its SLURM_PROCID" ||
  t_fail "multi-node" "got: $got / $(head -c 400 "$T/err")"

got=$(as_user srun -Q -N3 --ntasks-per-node=2 --container-image="$IMG" sh -c 'echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR' 2>"$T/err" | sort)
want=$(printf '0 0 6 2 n1\n1 1 6 2 n1\n2 0 6 2 n1\n3 1 6 2 n1\n4 0 6 2 n1\n5 1 6 2 n1')
[ "$got" = "$want" ] && t_pass "training env per task (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR)" ||
  t_fail "training env" "got: $got / $(head -c 400 "$T/err")"

# --- mounts --------------------------------------------------------------------------
mkdir -p "$T/mdir"; echo in-dir >"$T/mdir/f"; echo a-file >"$T/mfile"; chmod -R a+rX "$T/mdir" "$T/mfile"
chown "$U:" "$T/mdir"
out_is "mount: a directory" in-dir srun1 --container-image="$IMG" --container-mounts="$T/mdir:/data" cat /data/f
out_is "mount: a file" a-file srun1 --container-image="$IMG" --container-mounts="$T/mfile:/etc/mfile" cat /etc/mfile
out_is "mount: rw directory is writable" ok srun1 --container-image="$IMG" --container-mounts="$T/mdir:/data" sh -c 'echo w >/data/w && echo ok'
t_fails_with "mount: ro refuses writes" "Read-only file system" \
  srun1 --container-image="$IMG" --container-mounts="$T/mdir:/data:ro" sh -c 'echo x >/data/x'
out_is "mount: several, comma-separated, ro+rbind flags" "in-dir a-file" srun1 --container-image="$IMG" \
  --container-mounts="$T/mdir:/data:ro+rbind,$T/mfile:/etc/mfile" sh -c 'echo $(cat /data/f) $(cat /etc/mfile)'
out_is "mount: tmpfs" tmpfs srun1 --container-image="$IMG" --container-mounts=tmpfs:/scratch \
  sh -c 'grep " /scratch " /proc/mounts | { read a b c d; echo $c; }'
t_fails_with "mount: missing source is an error naming it" "skiff: mount: .*$T/nope" \
  srun1 --container-image="$IMG" --container-mounts="$T/nope:/data" true

# --- workdir, env, writable, remap-root ---------------------------------------------------
out_is "workdir: the image's WorkingDir by default" /opt/work srun1 --container-image="$IMG" pwd
out_is "workdir: --container-workdir" /etc srun1 --container-image="$IMG" --container-workdir=/etc pwd
t_fails_with "workdir: missing directory is an error" "skiff: .*working directory" \
  srun1 --container-image="$IMG" --container-workdir=/does/not/exist true
out_is "env: image wins over the host by default" "image image" \
  as_user env SHARED=host srun -Q -n1 --container-image="$IMG" sh -c 'echo $SHARED $IMGVAR'
out_is "env: --container-env=NAME keeps the host's value" "host image" \
  as_user env SHARED=host srun -Q -n1 --container-image="$IMG" --container-env=SHARED sh -c 'echo $SHARED $IMGVAR'
out_is "env: --container-env=NAME=VALUE sets it" "set" \
  srun1 --container-image="$IMG" --container-env=NEWVAR=set sh -c 'echo $NEWVAR'
printf '# run settings\nFROM_FILE=1\nIMGVAR=file\n' >"$W/run.env"; printf 'OK=1\nnot an assignment\n' >"$W/bad.env"
out_is "env: --container-env-file (relative to the step's directory) over the image's" "1 file" \
  srun1 --container-image="$IMG" --container-env-file=./run.env sh -c 'echo $FROM_FILE $IMGVAR'
out_is "env: --container-env over --container-env-file" "flag" \
  srun1 --container-image="$IMG" --container-env-file=./run.env --container-env=IMGVAR=flag sh -c 'echo $IMGVAR'
t_fails_with "env: a bad --container-env-file names the file and line" "bad.env, line 2: 'not an assignment' is not NAME=VALUE" \
  srun1 --container-image="$IMG" --container-env-file=./bad.env true
out_is "env: user's RANK wins over the training env" 7 \
  as_user env RANK=7 srun -Q -n1 --container-image="$IMG" sh -c 'echo $RANK'
out_is "env: ddp_env=0 in plugstack.conf turns the training env off" "unset" \
  bash -c "echo 'required $PLUGIN ddp_env=0' >'$SKIFF_PLUGSTACK'; cd '$W'; runuser -u '$U' -- env SLURM_CONF='$SLURM_CONF' srun -Q -n1 --container-image='$IMG' sh -c 'echo \${RANK:-unset}'; rc=\$?; echo '$PLUGSTACK_ORIG' >'$SKIFF_PLUGSTACK'; exit \$rc"
out_is "writable by default" ok srun1 --container-image="$IMG" sh -c 'touch /newfile && echo ok'
t_fails_with "--container-readonly refuses writes" "Read-only file system" \
  srun1 --container-image="$IMG" --container-readonly touch /newfile
out_is "--container-mount-home: the home directory is there" "$UHOME" \
  srun1 --container-image="$IMG" --container-mount-home sh -c 'cd "$HOME" && pwd'
out_is "--container-unshare=net: only loopback" "lo" \
  srun1 --container-image="$IMG" --container-unshare=net sh -c "sed -n '3,\$p' /proc/net/dev | cut -d: -f1 | tr -d ' '"
out_is "--container-remap-root: id -u is 0" 0 srun1 --container-image="$IMG" --container-remap-root id -u
out_is "no remap: own uid" "$(id -u "$U")" srun1 --container-image="$IMG" id -u
out_is "--container-entrypoint runs Entrypoint + the command (docker's rule)" "EP echo hi" srun1 --container-image="$IMG" --container-entrypoint echo hi
out_is "env fallback SKIFF_CONTAINER_IMAGE" from-image as_user env SKIFF_CONTAINER_IMAGE="$IMG" srun -Q -n1 cat /etc/skiff-marker
out_is "env fallback PYXIS_CONTAINER_REMAP_ROOT" 0 as_user env PYXIS_CONTAINER_REMAP_ROOT=1 srun -Q -n1 --container-image="$IMG" id -u
out_is "command line wins over SKIFF_CONTAINER_WORKDIR" /etc \
  as_user env SKIFF_CONTAINER_WORKDIR=/bin srun -Q -n1 --container-image="$IMG" --container-workdir=/etc pwd

# --- named containers, save ------------------------------------------------------------
as_user srun -Q -n1 -w n1 --container-image="$IMG" --container-name=pt-named sh -c 'echo kept >/k' >/dev/null 2>"$T/err1" || cat "$T/err1"
out_is "named container: a file written in step 1 is seen in step 2" kept srun1 --container-name=pt-named cat /k
out_is "named container :create starts fresh" gone srun1 --container-image="$IMG" --container-name=pt-named:create sh -c 'cat /k 2>/dev/null || echo gone'
t_fails_with "named container :exec needs a running one" "container 'pt-never' is not running on n1" srun1 --container-name=pt-never:exec true

rm -f "$T/saved.sqsh"; chown "$U:" "$T"
srun1 --container-image="$IMG" --container-save="$T/saved.sqsh" sh -c 'echo saved >/saved-file' >/dev/null 2>"$T/err"
# no waiting: srun returns once the image is written (a script's next line uses it)
out_is "--container-save, then start the saved image (right after srun returned)" saved \
  srun1 --container-image="$T/saved.sqsh" cat /saved-file
# the save runs after the tasks: srun's exit status is theirs, its error goes to srun's stderr
srun1 --container-image="$IMG" --container-save=/nonexistent/x.sqsh true >/dev/null 2>"$T/err"
grep -q 'skiff: save: .*/nonexistent/.*No such file or directory' "$T/err" &&
  t_pass "a failed --container-save is reported on srun's stderr" ||
  t_fail "a failed --container-save is reported on srun's stderr" "$(head -c 400 "$T/err")"
chown root: "$T"

# --- sbatch -----------------------------------------------------------------------------
cat >"$W/job.sh" <<EOF
#!/bin/sh
#SBATCH --container-image=$IMG
#SBATCH -o $W/job.out
cat /etc/skiff-marker
EOF
chown "$U:" "$W/job.sh"
if as_user sbatch -Q --wait "$W/job.sh" >/dev/null 2>"$T/err" && [ "$(cat "$W/job.out" 2>/dev/null)" = from-image ]; then
  t_pass "sbatch --container-image runs the batch script in the container"
else t_fail "sbatch" "$(cat "$T/err" "$W/job.out" 2>/dev/null | head -c 600)"; fi

# --- invalid arguments: clear error, non-zero exit ------------------------------------------
t_fails_with "invalid: foo.sqsh without ./ says what to write" "write ./foo.sqsh" srun1 --container-image=foo.sqsh true
t_fails_with "invalid: neither path nor reference" "neither a file path .* nor a valid image reference" srun1 --container-image='Bad Image!' true
t_fails_with "invalid: missing image file names the phase" "skiff: import: .*$T/missing.sqsh" srun1 --container-image="$T/missing.sqsh" true
t_fails_with "invalid: bad container name" "not a valid container name" srun1 --container-image="$IMG" --container-name='a/b' true
t_fails_with "invalid: bad name mode" "unknown mode 'sometimes'" srun1 --container-image="$IMG" --container-name=x:sometimes true
t_fails_with "invalid: unknown mount flag" "unknown mount flag 'bogus'" srun1 --container-image="$IMG" --container-mounts=/tmp:/t:bogus true
t_fails_with "invalid: a relative workdir that does not exist is named (from the image's WorkingDir)" \
  "working directory: open /opt/work/rel: No such file" srun1 --container-image="$IMG" --container-workdir=rel true
t_fails_with "invalid: --container-unshare=pid" "unknown namespace 'pid'" srun1 --container-image="$IMG" --container-unshare=pid true
t_fails_with "invalid: --container-env=1BAD" "not a variable name" srun1 --container-image="$IMG" --container-env=1BAD true
t_fails_with "invalid: --container-mounts without an image" "needs --container-image" srun1 --container-mounts=/tmp:/t true
t_fails_with "invalid: SKIFF_CONTAINER_REMAP_ROOT=maybe" "SKIFF_CONTAINER_REMAP_ROOT='maybe': not a boolean" \
  as_user env SKIFF_CONTAINER_REMAP_ROOT=maybe srun -Q -n1 --container-image="$IMG" true
t_fails_with "invalid: --container-save to a directory" "is a directory" srun1 --container-image="$IMG" --container-save=/tmp/ true
t_fails_with "invalid: sbatch rejects a bad option too" "write ./foo.sqsh" as_user sbatch -Q --container-image=foo.sqsh --wrap true
echo "required $PLUGIN bogus_arg=1" >"$SKIFF_PLUGSTACK"
t_fails_with "invalid: unknown plugstack.conf argument is fatal and named" "unknown argument 'bogus_arg=1'" srun1 true
echo "required $PLUGIN container_scope=sometimes" >"$SKIFF_PLUGSTACK"
t_fails_with "invalid: container_scope value" "container_scope=sometimes: use job or global" srun1 true
echo "$PLUGSTACK_ORIG" >"$SKIFF_PLUGSTACK"

# --- a killed step leaves nothing behind --------------------------------------------------------
state_before=$(ls -A "/run/skiff/$(id -u "$U")" 2>/dev/null | grep -E '^n2\.' || true)
# setpriv execs srun itself, so $! is srun and gets the signals
(cd "$W" && exec setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups env SLURM_CONF="$SLURM_CONF" \
  srun -Q -n1 -w n2 --container-image="$IMG" --container-mounts="$T/mdir:/data" sleep 300 >/dev/null 2>&1) &
spid=$!
# other clusters may run jobs as the same user: look only at node n2's netns
node_procs() { t_cluster_procs -n 2; }
for _ in $(seq 200); do node_procs | grep -q ' sleep 300 $' && break; sleep 0.05; done
holder_seen=$(node_procs | wc -l)
kill -INT $spid; sleep 0.3; kill -INT $spid 2>/dev/null
wait $spid 2>/dev/null
left=""
for _ in $(seq 100); do
  left=$(node_procs)
  [ -z "$left" ] && break
  sleep 0.1
done
mnt=$(findmnt -rn -o SOURCE,TARGET | grep -F "$IMG" || true)
rt=$(ls -A "/run/skiff/$(id -u "$U")" 2>/dev/null | grep -E '^n2\.' | grep -vxF "$state_before" || true)
if [ "$holder_seen" -gt 0 ] && [ -z "$left" ] && [ -z "$mnt" ] && [ -z "$rt" ]; then
  t_pass "interrupted srun: no process, mount or state left"
else t_fail "interrupted srun" "procs: $left / mounts: $mnt / state: $rt"; fi

# --- 8 concurrent steps resolve one image URI: one import, none fails --------------------------
L=$T/layout
python3 "$T_ROOT/tests/integration/lib/mkimage.py" "$L" busybox-node >/dev/null 2>&1 && chmod -R a+rX "$L"
if [ -f "$L/index.json" ]; then
  rm -rf "$UHOME/.cache/skiff/images"
  as_user salloc -Q -N1 -w n3 -n8 bash -c '
    for i in 1 2 3 4 5 6 7 8; do srun -Q --overlap -n1 --container-image=oci:'"$L"':busybox sh -c "test -x /bin/busybox && echo ok" & done; wait' \
    >"$T/conc.out" 2>"$T/conc.err"
  n_ok=$(grep -c '^ok$' "$T/conc.out")
  n_img=$(find "$UHOME/.cache/skiff/images" -name '*.sqsh' 2>/dev/null | wc -l)
  if [ "$n_ok" = 8 ] && [ "$n_img" = 1 ]; then t_pass "8 concurrent steps on one oci: image: all ran, one import"
  else t_fail "8 concurrent steps" "ok=$n_ok images=$n_img: $(head -c 600 "$T/conc.err")"; fi
else
  t_skip "8 concurrent steps" "tests/integration/lib/mkimage.py could not build an OCI layout"
fi

# --- importer=PROGRAM (pyxis's contract: "get IMAGE" prints a squashfs path) -------------------
cat >"$T/importer" <<EOF
#!/bin/sh
[ "\$1" = get ] && [ "\$2" = "site/busybox:1" ] && echo "$IMG" && exit 0
[ "\$1" = release ] && exit 0
echo "unknown image \$2" >&2; exit 3
EOF
chmod 755 "$T/importer"
echo "required $PLUGIN importer=$T/importer" >"$SKIFF_PLUGSTACK"
out_is "importer=PROGRAM resolves the image" from-image srun1 --container-image=site/busybox:1 cat /etc/skiff-marker
t_fails_with "importer failure is an import error" "skiff: import: importer .* failed" srun1 --container-image=site/other:1 true
echo "$PLUGSTACK_ORIG" >"$SKIFF_PLUGSTACK"

# --- a failing hook is named as the hook phase ----------------------------------------------------
mkdir -p "$T/hookfail"
printf '#!/bin/sh\necho "no such device here" >&2\nexit 3\n' >"$T/hookfail/10-fails"
chmod 755 "$T/hookfail/10-fails"
echo "hooks_dir = $T/hookfail" >"$T/hookfail.conf"
echo "required $PLUGIN config=$T/hookfail.conf" >"$SKIFF_PLUGSTACK"
t_fails_with "a failing hook: the error names the hook phase, the hook and its message" \
  "skiff: hook: .*10-fails.*no such device here" srun1 --container-image="$IMG" true
echo "$PLUGSTACK_ORIG" >"$SKIFF_PLUGSTACK"

# --- container_scope=job: named containers go at job end ------------------------------------------
echo "required $PLUGIN container_scope=job" >"$SKIFF_PLUGSTACK"
jid=$(as_user sbatch --parsable -w n1 --wrap "srun --container-image=$IMG --container-name=pt-job true" 2>"$T/err")
for _ in $(seq 100); do squeue -h -j "$jid" 2>/dev/null | grep -q . || break; sleep 0.1; done
jobc="pt-job.n1.job$jid"
for _ in $(seq 50); do [ -d "$UHOME/.local/share/skiff/containers/$jobc" ] || break; sleep 0.1; done
if [ -n "$jid" ] && ! [ -d "$UHOME/.local/share/skiff/containers/$jobc" ]; then
  t_pass "container_scope=job: named container removed at job end"
else t_fail "container_scope=job" "job '$jid': $(ls "$UHOME/.local/share/skiff/containers" 2>/dev/null) $(head -c 300 "$T/err")"; fi
# A salloc job has no batch step: the job epilog alone removes it (the job
# id is printed only when the container was there during the job).
jid=$(as_user salloc -Q -w n1 sh -c 'srun -Q --container-image='"$IMG"' --container-name=pt-job2 true &&
  test -d "'"$UHOME"'/.local/share/skiff/containers/pt-job2.n1.job$SLURM_JOB_ID" && echo $SLURM_JOB_ID' 2>"$T/err")
jobc="pt-job2.n1.job$jid"
for _ in $(seq 100); do [ -d "$UHOME/.local/share/skiff/containers/$jobc" ] || break; sleep 0.1; done
if [ -n "$jid" ] && ! [ -d "$UHOME/.local/share/skiff/containers/$jobc" ]; then
  t_pass "container_scope=job: the job epilog removes a salloc job's named container (no batch step)"
else t_fail "container_scope=job, salloc" "job '$jid': $(ls "$UHOME/.local/share/skiff/containers" 2>/dev/null) $(head -c 300 "$T/err")"; fi
echo "$PLUGSTACK_ORIG" >"$SKIFF_PLUGSTACK"

t_done
