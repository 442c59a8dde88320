#!/usr/bin/env bash
# test_fuzz_tokenizer.sh - runs the tokenizer fuzzer (tests/fuzz/run.sh
# SECONDS tokenizer) for a short while in a scratch directory: PASS if it
# builds and no property breaks; SKIP when clang's libFuzzer or the shared
# vocabularies are not available. FUZZ_TOKENIZER_SECONDS overrides 20.
source tests/cli/lib.sh
secs=${FUZZ_TOKENIZER_SECONDS:-20}
probe='int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }'
if ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1 ||
   ! echo "$probe" | "${FUZZ_CC:-clang}" -fsanitize=fuzzer -x c - -o "$T/probe" 2>/dev/null; then
  skip fuzz_tokenizer "clang with libFuzzer is not available"
  exit 0
fi
if [ ! -f "$SHARED/models/stories260K.gguf" ]; then
  skip fuzz_tokenizer "$SHARED/models/stories260K.gguf not found"
  exit 0
fi
FUZZ_BUILD="$T/fuzz" bash tests/fuzz/run.sh "$secs" tokenizer >"$T/fuzz.log" 2>&1
rc=$?
if [ "$rc" -eq 2 ]; then
  fail fuzz_tokenizer_builds "$(grep -m3 -E 'error|run.sh' "$T/fuzz.log" | tr '\n' ' ')"
elif [ "$rc" -ne 0 ]; then
  pass fuzz_tokenizer_builds
  fail fuzz_tokenizer_${secs}s "exit $rc: $(grep -m3 -E 'ERROR|broken property|SUMMARY' "$T/fuzz.log" | tr '\n' ' ')"
elif ! grep -q '^Done [0-9]* runs' "$T/fuzz.log"; then
  pass fuzz_tokenizer_builds
  fail fuzz_tokenizer_${secs}s "the fuzzer did not report its runs: $(tail -n 3 "$T/fuzz.log" | tr '\n' ' ')"
else
  pass fuzz_tokenizer_builds
  echo "# fuzz_tokenizer: $(grep -m1 -o '^Done [0-9]* runs' "$T/fuzz.log" | cut -d' ' -f2) runs in ${secs}s"
  pass fuzz_tokenizer_${secs}s
fi
