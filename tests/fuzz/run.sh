#!/usr/bin/env bash
# run.sh [SECONDS] - build the GGUF fuzz target with clang's libFuzzer +
# ASan/UBSan, make a seed corpus, and fuzz for SECONDS (default 60).
#
#   $FUZZ_BUILD (default build-fuzz/)  fuzz_gguf, seedgen, gguf.dict,
#                                      corpus/ (seeds + what libFuzzer finds),
#                                      crashes/ (reproducers)
# Exit status: 0 clean, 1 the fuzzer found a crash (reproducer in crashes/),
# 2 the build failed. Reproduce a crash: $FUZZ_BUILD/fuzz_gguf crashes/FILE
set -u
cd "$(dirname "$0")/../.."
SECS=${1:-60}
OUT=${FUZZ_BUILD:-build-fuzz}
CLANG=${FUZZ_CC:-clang}
SHARED=../shared/models
mkdir -p "$OUT/corpus" "$OUT/crashes"

SRC="src/base/err.c src/base/mem.c src/tensor/dtype.c $(ls src/gguf/*.c)"
FLAGS="-std=c11 -g -O1 -D_GNU_SOURCE -Isrc -Iinclude -fno-omit-frame-pointer"
# shellcheck disable=SC2086
$CLANG $FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  $SRC tests/fuzz/fuzz_gguf.c -o "$OUT/fuzz_gguf" -lm || exit 2
# shellcheck disable=SC2086
$CLANG $FLAGS -DFUZZ_SEEDGEN $SRC tests/fuzz/fuzz_gguf.c -o "$OUT/seedgen" -lm || exit 2

# Seeds: writer-made files, metadata-only copies of the shared GGUFs, and the
# shared GGUFs cut to 64 KiB (their headers and directories, no bulk data).
models=$(ls "$SHARED"/*.gguf "$SHARED"/vocab/*.gguf 2>/dev/null)
# shellcheck disable=SC2086
"$OUT/seedgen" "$OUT/corpus" $models || exit 2
for m in $models; do head -c 65536 "$m" >"$OUT/corpus/cut-$(basename "$m")"; done

cat >"$OUT/gguf.dict" <<'DICT'
"GGUF"
"\x03\x00\x00\x00"
"\x02\x00\x00\x00"
"general.alignment"
"general.architecture"
"tokenizer.ggml.tokens"
"\x00\x00\x00\x00\x00\x00\x00\x80"
"\xff\xff\xff\xff\xff\xff\xff\xff"
"\x09\x00\x00\x00"
"\x08\x00\x00\x00"
"\x20\x00\x00\x00"
DICT

# -malloc_limit_mb: the reader must never allocate more than a few times the
# input size, so any large allocation from a <= 64 KiB input is a bug.
exec "$OUT/fuzz_gguf" -max_total_time="$SECS" -max_len=65536 -timeout=10 \
  -malloc_limit_mb=64 -rss_limit_mb=2048 -dict="$OUT/gguf.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$OUT/corpus"
