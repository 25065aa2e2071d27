#!/bin/bash
# The command-line contract of the installed programs (doc/error_handling.md),
# run as built: `skiff VERB --help` and `-h` exit 0 with the verb's usage on
# stdout for every verb `skiff help` lists (import and resolve go through the
# lean bin/skiff to bin/skiff-import); usage errors exit 2 and say
# "PROGRAM VERB: ..."; and no error output of this whole file — usage and
# validation errors of skiff and skiff-ddp-env — ends in a strerror text
# such as ": Invalid argument".
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT" || exit 1
make -s "BUILD=$BUILD" "$BUILD/bin/skiff" "$BUILD/bin/skiff-import" "$BUILD/bin/skiff-ddp-env" >/dev/null ||
  { t_fail "build the CLIs"; t_done; }
SKIFF=$BUILD/bin/skiff
DDP=$BUILD/bin/skiff-ddp-env
t_scratch W cli
ALL=$W/all-errors # every error output, for the grep at the end
: >"$ALL"

# ---- --help for every verb ----
verbs=$("$SKIFF" help | sed -n 's/^  \([a-z]*\) .*/\1/p')
n=0 bad=""
for v in $verbs; do
  for h in --help -h; do
    out=$("$SKIFF" "$v" "$h" 2>"$W/err"); rc=$?
    cat "$W/err" >>"$ALL"
    if [ "$rc" != 0 ] || [[ "$out" != "usage: skiff $v"* ]] || [ -s "$W/err" ]; then
      bad="$bad $v $h (exit $rc: ${out%%$'\n'*})"
    fi
  done
  n=$((n + 1))
done
if [ -z "$bad" ] && [ "$n" -ge 10 ]; then t_pass "skiff VERB --help and -h exit 0 with the usage on stdout ($n verbs)"
else t_fail "skiff VERB --help and -h exit 0 with the usage on stdout ($n verbs)" "$bad"; fi
out=$("$SKIFF" doctor --help 2>&1)
if ! grep -q '^ok:\|^problem:' <<<"$out"; then t_pass "skiff doctor --help prints the usage, not the checks"
else t_fail "skiff doctor --help prints the usage, not the checks" "$out"; fi
for p in "skiff-ddp-env --help" "skiff-ddp-env -h" "skiff-import --help"; do
  if "$BUILD/bin/${p%% *}" "${p#* }" >"$W/out" 2>>"$ALL" && grep -q '^usage: ' "$W/out"; then
    t_pass "$p exits 0 with the usage on stdout"
  else t_fail "$p exits 0 with the usage on stdout" "$(cat "$W/out")"; fi
done

# ---- usage errors: exit 2, "PROGRAM VERB: ..." first ----
# usage_error NAME PREFIX PATTERN CMD...
usage_error() {
  local name=$1 prefix=$2 pat=$3; shift 3
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  printf '%s\n' "$out" >>"$ALL"
  if [ "$rc" != 2 ]; then t_fail "$name" "exit $rc, want 2: $out"
  elif [[ "$out" != "$prefix"* ]]; then t_fail "$name" "does not start with '$prefix': $out"
  elif ! grep -Eq -- "$pat" <<<"$out"; then t_fail "$name" "message did not match /$pat/: $out"
  else t_pass "$name"; fi
}
touch "$W/img.sqsh"
usage_error "skiff create with a bad name" "skiff create: " "container name 'bad name'" \
  "$SKIFF" create -n 'bad name' "$W/img.sqsh"
usage_error "skiff start --bogus (getopt names the program)" "skiff start: unrecognized option '--bogus'" . \
  "$SKIFF" start --bogus
usage_error "skiff import --bogus, through skiff-import" "skiff import: unrecognized option '--bogus'" . \
  "$SKIFF" import --bogus docker://x
usage_error "skiff create -n without its value" "skiff create: option requires an argument" . "$SKIFF" create -n
usage_error "skiff start without an image" "skiff start: " "no image" "$SKIFF" start
usage_error "skiff start -m with a relative source" "skiff start: " "mount spec 'rel:/x'.*absolute" \
  "$SKIFF" start -m rel:/x "$W/img.sqsh"
usage_error "skiff start -m with an unknown flag" "skiff start: " "bogus" "$SKIFF" start -m /a:/b:bogus "$W/img.sqsh"
usage_error "skiff start -e without '='" "skiff start: " "KEY=VALUE" "$SKIFF" start -e NOPE "$W/img.sqsh"
usage_error "skiff start -w relative" "skiff start: " "absolute" "$SKIFF" start -w rel "$W/img.sqsh"
usage_error "skiff exec with a bad pid" "skiff exec: " "not a process id" "$SKIFF" exec 12x true
usage_error "skiff export with a bad name" "skiff export: " "container name" "$SKIFF" export -o "$W/o.sqsh" ../x
usage_error "skiff remove with a bad name" "skiff remove: " "container name" "$SKIFF" remove ok ../x
usage_error "skiff list with an argument" "skiff list: " "unexpected argument" "$SKIFF" list x
usage_error "skiff resolve without an image" "skiff resolve: " "no image" "$SKIFF" resolve
usage_error "skiff help of an unknown verb" "skiff help: " "unknown command" "$SKIFF" help bogus
usage_error "skiff-ddp-env --bogus" "skiff-ddp-env: unrecognized option '--bogus'" . "$DDP" --bogus
usage_error "skiff-ddp-env --expand of a malformed list" "skiff-ddp-env: " "host list" "$DDP" --expand 'n[1-'
usage_error "skiff-ddp-env with an operand" "skiff-ddp-env: " "unexpected argument" "$DDP" stray

# ---- validation failures that are not usage errors still carry no strerror text ----
printf 'not a squashfs image\n' >"$W/plain.txt"
HOME=$W SKIFF_DATA_PATH=$W/data "$SKIFF" create -n plain "$W/plain.txt" 2>>"$ALL"
SKIFF_DDP_PORT_RANGE=1-2 SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0 SLURM_STEP_NODELIST=n1 \
  SLURM_STEP_TASKS_PER_NODE=1 "$DDP" >/dev/null 2>>"$ALL"

if grep -n ': Invalid argument' "$ALL" >"$W/hits"; then
  t_fail "no usage or validation error ends in ': Invalid argument'" "$(cat "$W/hits")"
else t_pass "no usage or validation error ends in ': Invalid argument' ($(grep -c . "$ALL") lines checked)"; fi
t_done
