#!/usr/bin/env bash
# test_fuzz_grammar.sh - runs the grammar fuzzer (tests/fuzz/run.sh SECONDS grammar)
# for a short while in a scratch directory: PASS if it builds and no
# property breaks; SKIP when clang's libFuzzer is not available.
# FUZZ_GRAMMAR_SECONDS overrides 10.
source tests/cli/lib.sh
secs=${FUZZ_GRAMMAR_SECONDS:-10}
if ! have_libfuzzer; then
  skip fuzz_grammar "clang with libFuzzer is not available"
  exit 0
fi
run_fuzzer fuzz_grammar "$secs" 'error|run.sh' grammar
