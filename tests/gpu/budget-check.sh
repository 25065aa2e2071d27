#!/bin/bash
# The budget gate of the CUDA path (no GPU needed): for GPT-2 124M at B=64,
# T=1024, bf16, no kernel of the step spills registers (ptxas for sm_90, from
# the logs the build keeps next to the objects), and the analytic step time
# (roofline floor and estimate, gpu_tool budget) does not exceed
# tests/gpu/budget-baseline.txt. After a change that improves the model, the
# baseline is rewritten with `gpu_tool budget --write-baseline`.
source "$(dirname "$0")/../lib.sh"
TOOL=$BUILD/tests/gpu/gpu_tool
if [ ! -x "$TOOL" ]; then
  t_skip "gpu budget" "nvcc was not found at build time, the CUDA path is not built"
  t_done
fi
out=$("$TOOL" budget --ptxas-dir "$BUILD/trainer/cuda" --check "$T_ROOT/tests/gpu/budget-baseline.txt" --quiet 2>&1)
rc=$?
grep -v -E '^(PASS|FAIL):' <<<"$out" | sed 's/^/  /'
while read -r verdict rest; do
  case $verdict in
    PASS:) t_pass "budget: $rest" ;;
    FAIL:) t_fail "budget: $rest" ;;
  esac
done < <(grep -E '^(PASS|FAIL):' <<<"$out")
if [ "$rc" -ne 0 ] && ! grep -q '^FAIL:' <<<"$out"; then t_fail "gpu_tool budget" "exit $rc"; fi
# The gate can fail: a baseline below the model must be refused.
low=$(mktemp); trap 'rm -f "$low"' EXIT
printf 'floor_ms 1\nestimate_ms 1\n' >"$low"
if "$TOOL" budget --check "$low" --quiet >/dev/null 2>&1; then
  t_fail "budget: a regression against the baseline fails the check"
else
  t_pass "budget: a regression against the baseline fails the check"
fi
# ... and so must a hot kernel that spills (here: ptxas logs edited to say so;
# the 64-row forward, which the step runs by default).
spdir=$(mktemp -d); trap 'rm -f "$low"; rm -rf "$spdir"' EXIT
cp "$BUILD"/trainer/cuda/*.ptxas "$spdir"/
awk '/Compiling entry function .*attention_forward_kernelI13__nv_bfloat16Li64E/ { hit = 1 }
     hit && /bytes spill stores/ { sub(/ 0 bytes spill stores/, " 8 bytes spill stores"); hit = 0 } { print }' \
  "$BUILD/trainer/cuda/attention.ptxas" >"$spdir/attention.ptxas"
if out=$("$TOOL" budget --ptxas-dir "$spdir" --check "$T_ROOT/tests/gpu/budget-baseline.txt" --quiet 2>&1); then
  t_fail "budget: a spilling hot kernel fails the check" "$out"
elif grep -q 'kernel(s) of the step spill' <<<"$out"; then
  t_pass "budget: a spilling hot kernel fails the check"
else
  t_fail "budget: a spilling hot kernel fails the check" "$out"
fi
t_done
