#!/bin/bash
# A short run of every libFuzzer target (doc/fuzzing.md): each builds with
# clang -fsanitize=fuzzer,address,undefined, replays its committed seeds and
# fuzzes for FUZZ_SMOKE_SECONDS (default 3). A crash, leak, sanitizer report
# or broken property is a FAIL whose reproducer stays in build/fuzz/findings/.
# `make fuzz` runs the same targets for longer.
source "$(dirname "$0")/../lib.sh"
cd "$T_ROOT" || exit 1
secs=${FUZZ_SMOKE_SECONDS:-3}

if ! command -v clang >/dev/null; then
  t_skip "fuzz" "clang is not installed (scripts/install-deps test)"; t_done
fi
mkdir -p "$BUILD/fuzz"
if ! make -s -j2 "BUILD=$BUILD" fuzzers >"$BUILD/fuzz/build.log" 2>&1; then
  if grep -q 'libclang_rt.fuzzer' "$BUILD/fuzz/build.log"; then
    t_skip "fuzz" "libclang-rt-14-dev is missing (scripts/install-deps test)"; t_done
  fi
  tail -30 "$BUILD/fuzz/build.log"
  t_fail "fuzz: build" "see $BUILD/fuzz/build.log"; t_done
fi
t_pass "fuzz: build (every library file compiled by clang too)"

mapfile -t fuzzers < <(make -s --no-print-directory "BUILD=$BUILD" print-fuzzers)
[ "${#fuzzers[@]}" -gt 0 ] || { t_fail "fuzz: no targets"; t_done; }
tests/fuzz/run --seconds "$secs" "${fuzzers[@]}"
while IFS=$'\t' read -r name s execs rate corpus crashes; do
  [ "$name" = target ] && continue
  if [ "$crashes" = 0 ] && [ "$execs" != "?" ] && [ "$execs" -gt 0 ]; then
    t_pass "fuzz $name: ${s}s, $execs inputs, no findings"
  else
    t_fail "fuzz $name" "$crashes finding(s); reproducer in $BUILD/fuzz/findings/$name/"
  fi
done <"$BUILD/fuzz/results.tsv"
t_done
