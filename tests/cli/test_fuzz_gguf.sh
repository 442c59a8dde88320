#!/usr/bin/env bash
# test_fuzz_gguf.sh - runs the GGUF fuzzer (tests/fuzz/run.sh) for a short
# while in a scratch directory: PASS if it builds and finds no crash; SKIP
# when clang's libFuzzer is not available. FUZZ_GGUF_SECONDS overrides 20.
source tests/cli/lib.sh
secs=${FUZZ_GGUF_SECONDS:-20}
if ! have_libfuzzer; then
  skip fuzz_gguf "clang with libFuzzer is not available"
  exit 0
fi
run_fuzzer fuzz_gguf "$secs" 'error|seedgen'
