#!/bin/bash
# Builds the host list fuzzer (clang -fsanitize=fuzzer,address,undefined) and
# runs it for SKIFF_FUZZ_SECONDS (default 60). Any crash, leak, sanitizer
# report or broken round trip is a FAIL; the reproducer is kept under
# build/fuzz/findings/.
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT" || exit 1
secs=${SKIFF_FUZZ_SECONDS:-60}

if ! command -v clang >/dev/null; then
  t_skip "fuzz hostlist" "clang is not installed (scripts/install-deps test)"; t_done
fi
if ! make -s "BUILD=$BUILD" "$BUILD/fuzz/fuzz_hostlist" >"$BUILD/fuzz-build.log" 2>&1; then
  if grep -q 'libclang_rt.fuzzer' "$BUILD/fuzz-build.log"; then
    t_skip "fuzz hostlist" "libclang-rt-14-dev is missing (scripts/install-deps test)"; t_done
  fi
  cat "$BUILD/fuzz-build.log"
  t_fail "fuzz hostlist: build"; t_done
fi
t_pass "fuzz hostlist: build"

corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
i=0
for seed in 'n1' 'n[1-3]' 'gpu-a[01-02]-b[3,5]' 'n[08-11],login' 'x[01,3-4,006]' 'r[1-2]n[1-2]' \
            'n[3-1]' 'n[' 'a,,b' 'n[1-1048576]' 'n[9-10]'; do
  printf '%s' "$seed" >"$corpus/seed$i"; i=$((i + 1))
done
mkdir -p "$BUILD/fuzz/findings"
log=$BUILD/fuzz/fuzz_hostlist.log
"$BUILD/fuzz/fuzz_hostlist" -max_total_time="$secs" -max_len=512 -rss_limit_mb=1024 -timeout=10 \
  -artifact_prefix="$BUILD/fuzz/findings/" -print_final_stats=1 "$corpus" >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
if [ "$rc" -eq 0 ]; then
  t_pass "fuzz hostlist: ${secs}s, ${execs:-?} inputs, no findings"
else
  tail -40 "$log"
  t_fail "fuzz hostlist" "libFuzzer exited $rc; reproducer in $BUILD/fuzz/findings/"
fi
t_done
