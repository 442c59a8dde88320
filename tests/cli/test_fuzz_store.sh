#!/usr/bin/env bash
# test_fuzz_store.sh - runs the KV tier entry fuzzer (tests/fuzz/run.sh
# SECONDS store) for a short while in a scratch directory: PASS if it builds
# and no property breaks; SKIP without clang's libFuzzer.
# FUZZ_STORE_SECONDS overrides 10.
source tests/cli/lib.sh
secs=${FUZZ_STORE_SECONDS:-10}
if ! have_libfuzzer; then
  skip fuzz_store "clang with libFuzzer is not available"
  exit 0
fi
run_fuzzer fuzz_store "$secs" 'error|run.sh' store
