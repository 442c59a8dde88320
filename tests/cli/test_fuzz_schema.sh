#!/usr/bin/env bash
# test_fuzz_schema.sh - runs the schema fuzzer (tests/fuzz/run.sh SECONDS schema)
# for a short while in a scratch directory: PASS if it builds and no
# property breaks; SKIP when clang's libFuzzer is not available.
# FUZZ_SCHEMA_SECONDS overrides 10.
source tests/cli/lib.sh
secs=${FUZZ_SCHEMA_SECONDS:-10}
if ! have_libfuzzer; then
  skip fuzz_schema "clang with libFuzzer is not available"
  exit 0
fi
run_fuzzer fuzz_schema "$secs" 'error|run.sh' schema
