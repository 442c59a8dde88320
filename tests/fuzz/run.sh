#!/usr/bin/env bash
# run.sh [SECONDS] [TARGET] - build a fuzz target with clang's libFuzzer +
# ASan/UBSan, make its seed corpus, and fuzz for SECONDS (default 60).
# TARGET: gguf (default; the GGUF reader and writer), tokenizer (text ->
# ids -> text over stories260K and ../shared/models/vocab/*.gguf) or store
# (the KV tier entry reader, src/store/store_entry.c).
#
#   $FUZZ_BUILD (default build-fuzz/)  fuzz_TARGET, seedgen (gguf), TARGET.dict,
#                                      corpus-TARGET/ (seeds + what libFuzzer
#                                      finds), crashes/ (reproducers)
# Exit status: 0 clean, 1 the fuzzer found a crash (reproducer in crashes/),
# 2 the build failed. Reproduce a crash: $FUZZ_BUILD/fuzz_TARGET crashes/FILE
# (the tokenizer target needs FUZZ_TOK_VOCABS as run.sh sets it).
set -u
cd "$(dirname "$0")/../.."
SECS=${1:-60}
TARGET=${2:-gguf}
OUT=${FUZZ_BUILD:-build-fuzz}
CLANG=${FUZZ_CC:-clang}
SHARED=../shared/models
CORPUS="$OUT/corpus-$TARGET"
[ "$TARGET" = gguf ] && CORPUS="$OUT/corpus" # where earlier runs kept it
mkdir -p "$CORPUS" "$OUT/crashes"
FLAGS="-std=c11 -g -O1 -D_GNU_SOURCE -Isrc -Iinclude -fno-omit-frame-pointer"
SAN="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"

case "$TARGET" in
gguf)
SRC="src/base/err.c src/base/mem.c src/tensor/dtype.c $(ls src/gguf/*.c)"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC tests/fuzz/fuzz_gguf.c -o "$OUT/fuzz_gguf" -lm || exit 2
# shellcheck disable=SC2086
$CLANG $FLAGS -DFUZZ_SEEDGEN $SRC tests/fuzz/fuzz_gguf.c -o "$OUT/seedgen" -lm || exit 2

# Seeds: writer-made files, metadata-only copies of the shared GGUFs, and the
# shared GGUFs cut to 64 KiB (their headers and directories, no bulk data).
models=$(ls "$SHARED"/*.gguf "$SHARED"/vocab/*.gguf 2>/dev/null)
# shellcheck disable=SC2086
"$OUT/seedgen" "$CORPUS" $models || exit 2
for m in $models; do head -c 65536 "$m" >"$CORPUS/cut-$(basename "$m")"; done

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
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
tokenizer)
SRC="src/base/err.c src/base/mem.c src/tensor/dtype.c $(ls src/gguf/*.c src/tokenizer/*.c)"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC tests/fuzz/fuzz_tokenizer.c -o "$OUT/fuzz_tokenizer" -lpcre2-8 -lxxhash -lm || exit 2
vocabs=$(ls "$SHARED"/stories260K.gguf "$SHARED"/vocab/*.gguf 2>/dev/null | tr '\n' ':')
[ -n "$vocabs" ] || { echo "run.sh: no vocabulary under $SHARED" >&2; exit 2; }
export FUZZ_TOK_VOCABS=${vocabs%:}

# Seeds: llama.cpp's tokenizer test texts (vocab/*.inp, one per
# __ggml_vocab_test__ block), each behind the selector bytes of every
# vocabulary, plain and with BOS + special parsing.
n=0
for inp in "$SHARED"/vocab/*.inp; do
  [ -f "$inp" ] || continue
  awk -v dir="$CORPUS" -v base="$(basename "$inp")" '
    /^__ggml_vocab_test__$/ { if (have) { close(f) } k++; f = sprintf("%s/seed-%s-%03d.txt", dir, base, k); printf "" > f; have = 1; first = 1; next }
    have { if (!first) printf "\n" >> f; printf "%s", $0 >> f; first = 0 }' "$inp"
done
for f in "$CORPUS"/seed-*.txt; do
  [ -f "$f" ] || continue
  for sel in 00 01 02 03 0c 0d 0e; do
    { printf "\\x$sel"; cat "$f"; } >"$CORPUS/s$sel-$(basename "$f" .txt)"
  done
  rm -f "$f"; n=$((n + 1))
done
printf '\x10\x01\x00\x02\x00\x03\x00\x0a\x01\xff\x00' >"$CORPUS/ids-1"
printf '\x11\x01\x00\x02\x00\xd3\x01\x0a\x01\xff\x00' >"$CORPUS/ids-2"
cat >"$OUT/tokenizer.dict" <<'DICT'
"<s>"
"</s>"
"<unk>"
"<|endoftext|>"
"<0x0A>"
"\xe2\x96\x81"
" 's"
" ?"
"\xef\xbf\xbd"
"\xf0\x9f\xa6\x99"
"\xc3"
"\xed\xa0\x80"
DICT

exec "$OUT/fuzz_tokenizer" -max_total_time="$SECS" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -dict="$OUT/tokenizer.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
store)
SRC="src/base/err.c src/store/store_entry.c"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC tests/fuzz/fuzz_store_entry.c -o "$OUT/fuzz_store_entry" -lxxhash || exit 2
# shellcheck disable=SC2086
$CLANG $FLAGS -DFUZZ_SEEDGEN $SRC tests/fuzz/fuzz_store_entry.c -o "$OUT/seedgen_store" -lxxhash || exit 2
"$OUT/seedgen_store" "$CORPUS" || exit 2
exec "$OUT/fuzz_store_entry" -max_total_time="$SECS" -max_len=2048 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
*)
echo "run.sh: unknown target '$TARGET' (gguf | tokenizer | store)" >&2
exit 2
;;
esac
