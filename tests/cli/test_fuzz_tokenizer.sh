#!/usr/bin/env bash
# test_fuzz_tokenizer.sh - runs the tokenizer fuzzer (tests/fuzz/run.sh
# SECONDS tokenizer) for a short while in a scratch directory: PASS if it
# builds and no property breaks; SKIP when clang's libFuzzer or the shared
# vocabularies are not available. FUZZ_TOKENIZER_SECONDS overrides 20.
source tests/cli/lib.sh
secs=${FUZZ_TOKENIZER_SECONDS:-20}
if ! have_libfuzzer; then
  skip fuzz_tokenizer "clang with libFuzzer is not available"
  exit 0
fi
if [ ! -f "$SHARED/models/stories260K.gguf" ]; then
  skip fuzz_tokenizer "$SHARED/models/stories260K.gguf not found"
  exit 0
fi
run_fuzzer fuzz_tokenizer "$secs" 'error|run.sh' tokenizer
