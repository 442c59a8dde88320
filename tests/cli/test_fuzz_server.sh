#!/usr/bin/env bash
# test_fuzz_server.sh - runs the server request-parser fuzzer
# (tests/fuzz/run.sh SECONDS server: completions and chat bodies, /tokenize,
# /detokenize, /v1/embeddings bodies, --cors-origin lists) for a short while
# in a scratch directory: PASS if it builds and no property breaks; SKIP when
# clang's libFuzzer or stories260K is not available. FUZZ_SERVER_SECONDS
# overrides 20.
source tests/cli/lib.sh
secs=${FUZZ_SERVER_SECONDS:-20}
if ! have_libfuzzer; then
  skip fuzz_server "clang with libFuzzer is not available"
  exit 0
fi
if [ ! -f "$SHARED/models/stories260K.gguf" ]; then
  skip fuzz_server "$SHARED/models/stories260K.gguf not found"
  exit 0
fi
run_fuzzer fuzz_server "$secs" 'error|run.sh' server
