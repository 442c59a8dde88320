#!/usr/bin/env bash
# test_fuzz_jinja.sh - runs the Jinja fuzzer (tests/fuzz/run.sh SECONDS
# jinja) for a short while in a scratch directory: PASS if it builds and no
# property breaks (no crash, leak, hang or unbounded memory on hostile
# templates); SKIP without clang's libFuzzer. FUZZ_JINJA_SECONDS overrides 20.
source tests/cli/lib.sh
secs=${FUZZ_JINJA_SECONDS:-20}
if ! have_libfuzzer; then
  skip fuzz_jinja "clang with libFuzzer is not available"
  exit 0
fi
run_fuzzer fuzz_jinja "$secs" 'error|run.sh' jinja
