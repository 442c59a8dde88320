#!/usr/bin/env bash
# test_fuzz_openai.sh - runs the openai fuzzer (tests/fuzz/run.sh SECONDS openai) for a
# short while in a scratch directory, then replays every input kept in
# tests/fuzz/regress/openai/ (crashes found once, and hostile inputs made by
# hand) once each: PASS if it builds, no property breaks and every kept
# input passes; SKIP when clang's libFuzzer is not available.
# FUZZ_OPENAI_SECONDS overrides 10.
source tests/cli/lib.sh
secs=${FUZZ_OPENAI_SECONDS:-10}
if ! have_libfuzzer; then
  skip fuzz_openai "clang with libFuzzer is not available"
  exit 0
fi
if [ ! -f "$SHARED/models/stories260K.gguf" ]; then
  skip fuzz_openai "$SHARED/models/stories260K.gguf not found"
  exit 0
fi
run_fuzzer fuzz_openai "$secs" 'error|run.sh' openai
export FUZZ_OPENAI_MODEL=$SHARED/models/stories260K.gguf
kept=(tests/fuzz/regress/openai/*)
if [ ! -x "$T/fuzz/fuzz_openai" ] || [ ! -f "${kept[0]}" ]; then
  fail fuzz_openai_regress "no fuzzer binary or no kept inputs"
elif "$T/fuzz/fuzz_openai" "${kept[@]}" >"$T/replay.log" 2>&1; then
  pass "fuzz_openai_regress_${#kept[@]}"
else
  fail fuzz_openai_regress "$(grep -m3 -E 'ERROR|broken property|SUMMARY|runtime error' "$T/replay.log" | tr '\n' ' ')"
fi
