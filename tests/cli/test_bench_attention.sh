#!/usr/bin/env bash
# test_bench_attention.sh - bench/micro/bench_attention.c works (not how fast):
# make builds it against the library under test; it refuses bad flags with exit 2
# naming the flag, and a tiny run prints one row per context with the
# documented columns. x86-64 only (it flushes lines with clflush).
source "$(dirname "$0")/lib.sh"

[ "$(uname -m)" = x86_64 ] || { skip bench_attention "x86-64 only"; exit 0; }
B=$BUILD/bench/bench_attention
[ -x "$B" ] || { fail bench_attention_built "$B missing (make builds it)"; exit 0; }

expect_exit bench_attention_shape 2 "shape.*nosuch" -- "$B" --shape nosuch
expect_exit bench_attention_ctx 2 "ctx" -- "$B" --ctx 10,x
expect_exit bench_attention_ctx_zero 2 "ctx" -- "$B" --ctx 0
expect_exit bench_attention_kv 2 "kv.*q9" -- "$B" --kv q9
expect_exit bench_attention_threads 2 "threads" -- "$B" --threads 0
expect_exit bench_attention_split 2 "cannot split" -- "$B" --shape tinyllama --threads 3
expect_exit bench_attention_reps 2 "reps" -- "$B" --reps 0
expect_exit bench_attention_unknown 2 "frobnicate" -- "$B" --frobnicate 1
expect_exit bench_attention_missing_value 2 "needs a value" -- "$B" --ctx

# rows: keys, attention us a layer, its GB/s, read us a layer, its GB/s, ratio
row_re='^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x$'
for kv in f16 q8_0; do
  timeout 120 "$B" --shape 110m --ctx 40,100 --kv "$kv" --reps 1 >"$T/$kv.txt" 2>"$T/$kv.err"
  check "bench_attention_${kv}_exit" [ $? -eq 0 ]
  check "bench_attention_${kv}_header" grep -q "110m (12 heads, 12 KV heads, dim 64, 12 layers), $kv KV, 2 threads" "$T/$kv.txt"
  check "bench_attention_${kv}_rows" [ "$(grep -Ec "$row_re" "$T/$kv.txt")" -eq 2 ]
  check "bench_attention_${kv}_keys" [ "$(grep -E "$row_re" "$T/$kv.txt" | awk '{print $1}' | tr '\n' ' ')" = "40 100 " ]
  check "bench_attention_${kv}_quiet" [ ! -s "$T/$kv.err" ]
done
# head dim 128, 4 threads of 2 KV heads each (8 rows a call)
timeout 120 "$B" --shape gqa4 --ctx 33 --reps 1 --threads 4 >"$T/gqa4.txt" 2>&1
check bench_attention_gqa4_four_threads [ "$(grep -Ec "$row_re" "$T/gqa4.txt")" -eq 1 ]
