#!/usr/bin/env bash
# test_fuzz_segment.sh - runs the disk tier segment scan fuzzer (tests/fuzz/run.sh
# SECONDS segment) for a short while in a scratch directory: PASS if it builds
# and no property breaks; SKIP without clang's libFuzzer.
# FUZZ_SEGMENT_SECONDS overrides 10.
source tests/cli/lib.sh
secs=${FUZZ_SEGMENT_SECONDS:-10}
if ! have_libfuzzer; then
  skip fuzz_segment "clang with libFuzzer is not available"
  exit 0
fi
run_fuzzer fuzz_segment "$secs" 'error|run.sh' segment
