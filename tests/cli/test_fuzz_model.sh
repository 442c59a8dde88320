#!/usr/bin/env bash
# test_fuzz_model.sh - runs the model-reading fuzzer (tests/fuzz/run.sh
# SECONDS model: hyper-parameters, tensor binding, MoE layers) for a short
# while in a scratch directory: PASS if it builds and no property breaks;
# SKIP when clang's libFuzzer or the uninstrumented engine library
# (build/libpagellm.a, for the kernels) is not there. FUZZ_MODEL_SECONDS
# overrides 10.
source tests/cli/lib.sh
secs=${FUZZ_MODEL_SECONDS:-10}
lib=${FUZZ_LIBPL:-build/libpagellm.a}
if ! have_libfuzzer; then
  skip fuzz_model "clang with libFuzzer is not available"
  exit 0
fi
if [ ! -f "$lib" ]; then
  skip fuzz_model "$lib not built (make)"
  exit 0
fi
FUZZ_LIBPL=$lib run_fuzzer fuzz_model "$secs" 'error|run.sh' model
