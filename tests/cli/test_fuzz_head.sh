#!/usr/bin/env bash
# test_fuzz_head.sh - runs the request-head checker fuzzer (tests/fuzz/run.sh
# SECONDS head: any bytes as the first request head a client sends) for a
# short while in a scratch directory: PASS if it builds and no property
# breaks; SKIP when clang's libFuzzer is not available. FUZZ_HEAD_SECONDS
# overrides 10.
source tests/cli/lib.sh
secs=${FUZZ_HEAD_SECONDS:-10}
if ! have_libfuzzer; then
  skip fuzz_head "clang with libFuzzer is not available"
  exit 0
fi
run_fuzzer fuzz_head "$secs" 'error|run.sh' head
