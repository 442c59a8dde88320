#!/usr/bin/env bash
# test_fuzz_cli.sh - runs the cli fuzzer (tests/fuzz/run.sh SECONDS cli) for a
# short while in a scratch directory, then replays every input kept in
# tests/fuzz/regress/cli/ (crashes found once, and hostile inputs made by
# hand) once each: PASS if it builds, no property breaks and every kept
# input passes; SKIP when clang's libFuzzer is not available.
# FUZZ_CLI_SECONDS overrides 5.
source tests/cli/lib.sh
secs=${FUZZ_CLI_SECONDS:-5}
if ! have_libfuzzer; then
  skip fuzz_cli "clang with libFuzzer is not available"
  exit 0
fi
run_fuzzer fuzz_cli "$secs" 'error|run.sh' cli
kept=(tests/fuzz/regress/cli/*)
if [ ! -x "$T/fuzz/fuzz_cli" ] || [ ! -f "${kept[0]}" ]; then
  fail fuzz_cli_regress "no fuzzer binary or no kept inputs"
elif "$T/fuzz/fuzz_cli" "${kept[@]}" >"$T/replay.log" 2>&1; then
  pass "fuzz_cli_regress_${#kept[@]}"
else
  fail fuzz_cli_regress "$(grep -m3 -E 'ERROR|broken property|SUMMARY|runtime error' "$T/replay.log" | tr '\n' ' ')"
fi
