#!/usr/bin/env bash
# bench_attention.sh - decode attention with the cache cold against a plain
# read of the same KV bytes (bench/micro/bench_attention.c), for the TinyLlama
# (GQA 8), 110m (no GQA) and Llama-3-like (GQA 4, dim 128) head shapes.
#
#   bash bench/bench_attention.sh          (from the repo root; BUILD=build)
#   ATTN_CTX=576,2112 ATTN_REPS=5 ATTN_THREADS=2 ATTN_SHAPES="tinyllama 110m gqa4"
#
# make builds $BUILD/bench/bench_attention (run `make` first). x86-64 only: it
# flushes lines with clflush.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
B=$BUILD/bench/bench_attention
[ -x "$B" ] || { echo "bench_attention: $B missing (run make first)" >&2; exit 1; }
for s in ${ATTN_SHAPES:-tinyllama 110m gqa4}; do
  "$B" --shape "$s" --ctx "${ATTN_CTX:-576,2112}" --reps "${ATTN_REPS:-5}" \
    --threads "${ATTN_THREADS:-2}"
done
