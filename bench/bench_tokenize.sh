#!/usr/bin/env bash
# bench_tokenize.sh - tokenizer throughput on 1 MiB of English text with the
# SentencePiece (Llama) and byte-level BPE (GPT-2) vocabularies.
#
#   bash bench/bench_tokenize.sh          (from the repo root; BUILD=build)
#
# Runs $BUILD/bench/bench_tokenize (make builds it), makes the text and
# prints one MB/s line per vocabulary. The text:
# $BENCH_TEXT if set; else English prose found on every Debian system (the
# licence texts in /usr/share/common-licenses, read locally, never shipped),
# repeated to 1 MiB; else a generated paragraph.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
VOCAB=${VOCAB_DIR:-../shared/models/vocab}
out=$BUILD/bench
mkdir -p "$out"
B=$BUILD/bench/bench_tokenize
[ -x "$B" ] || { echo "bench_tokenize: $B missing (run make first)" >&2; exit 1; }

text=$out/english-1MiB.txt
src=${BENCH_TEXT:-}
if [ -z "$src" ]; then
  src=$out/english-src.txt
  if ls /usr/share/common-licenses/* >/dev/null 2>&1; then
    cat /usr/share/common-licenses/* >"$src" 2>/dev/null || true
  fi
  if [ ! -s "$src" ]; then
    for i in $(seq 200); do
      echo "Once upon a time, there was a little girl named Lily. She loved to play outside in the park,"
      echo "and one day she saw a big, red ball. \"Can I play?\" she asked. It's 3 o'clock - time for tea!"
    done >"$src"
  fi
fi
# repeat the source to at least 1 MiB, then cut to exactly 1 MiB
: >"$text"
while [ "$(stat -c %s "$text")" -lt 1048576 ]; do cat "$src" >>"$text"; done
truncate -s 1048576 "$text"

"$B" "$text" "$VOCAB/ggml-vocab-llama-spm.gguf" "$VOCAB/ggml-vocab-gpt-2.gguf"
