#!/usr/bin/env bash
# test_bench_grammar.sh - bench/micro/bench_grammar_mask works (not how
# fast): refuses bad arguments naming them, and a small run over the
# gpt-2 vocabulary extended to 60000 tokens (with stories260K's decode
# step for the ratio) prints its documented lines.
source "$(dirname "$0")/lib.sh"
B=$BUILD/bench/bench_grammar_mask
V=$SHARED/models/vocab/ggml-vocab-gpt-2.gguf
check bench_grammar_built [ -x "$B" ]
[ -x "$B" ] || exit 0
expect_exit bench_grammar_missing 2 "N_VOCAB missing" -- "$B" "$V"
expect_exit bench_grammar_n 2 "N_VOCAB: 'x'" -- "$B" "$V" x
expect_exit bench_grammar_vocab 2 "VOCAB: " -- "$B" "$T/none.gguf" 1000
if [ ! -f "$V" ]; then skip bench_grammar_run "$V not found"; exit 0; fi
timeout 120 "$B" "$V" 60000 "$SHARED/models/stories260K.gguf" 3 >"$T/out.txt" 2>"$T/err.txt"
check bench_grammar_exit [ $? -eq 0 ]
check bench_grammar_quiet [ ! -s "$T/err.txt" ]
check bench_grammar_head grep -Eq '^grammar mask: 60000 tokens, [0-9]+ document tokens, [0-9]+ allowed on average$' "$T/out.txt"
check bench_grammar_cold grep -Eq '^  cold \(no cache\): median [0-9.]+ us, p90 [0-9.]+ us, max [0-9.]+ us, mean [0-9.]+ us per token$' "$T/out.txt"
check bench_grammar_ratio grep -Eq '^  decode step of .*stories260K.gguf: median [0-9.]+ ms \(1 thread\); mask / step: ' "$T/out.txt"
