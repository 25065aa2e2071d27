#!/bin/bash
# The suites keep tests/README.md's rules (tests/check-suites): no sleep as
# a wait, the harness defined once in tests/lib.sh. First the checker's own
# self-test (each rule refuses a suite that breaks it), then the suites.
set -u
source "$(dirname "$0")/../lib.sh"
if t_case "check-suites refuses each rule's violation"; then
  out=$("$T_ROOT/tests/check-suites" --self-test 2>&1) && t_pass "$T_CASE" || t_fail "$T_CASE" "$out"
fi
if t_case "the suites keep the rules tests/check-suites can see"; then
  out=$("$T_ROOT/tests/check-suites" 2>&1) && t_pass "$T_CASE" ||
    t_fail "$T_CASE" "$(wc -l <<<"$out") violation(s): $(head -20 <<<"$out")"
fi
t_done
