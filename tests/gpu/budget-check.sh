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
t_done
