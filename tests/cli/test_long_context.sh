#!/usr/bin/env bash
# test_long_context.sh - a sequence of ~30k tokens runs in `run` and `serve`
# with --ctx 32768 and no other flag, on a tiny synthetic model (the cost is
# attention's, O(n^2), small at dim 128). Its rows attend far more keys than
# one attention call takes, so every layer goes through attention_chunks.c's
# chunks: the text is the same with 1, 2 and 3 threads (the cut and the
# merge depend only on each row, never on the threads; with more threads
# than decode tokens decode splits the keys across threads), and `serve`
# answers the same greedy text as `run`.
source "$(dirname "$0")/lib.sh"

M="$T/tiny.gguf"
"$PAGELLM" synth --shape tiny -o "$M" >/dev/null 2>&1 || { fail long_ctx_synth "synth failed"; exit 0; }
# ~29k tokens with the tiny model's byte-level vocabulary
python3 -c "print(' '.join('word%d' % (i % 500) for i in range(4300)))" >"$T/prompt.txt"

run_long() { # THREADS OUT
  "$PAGELLM" run -m "$M" --ctx 32768 -f "$T/prompt.txt" -n 12 -t "$1" --temp 0 >"$2" 2>"$2.err"
}
run_long 2 "$T/t2.txt"
check long_ctx_run_exit [ $? -eq 0 ]
toks=$(grep -o 'prompt *[0-9]* tokens' "$T/t2.txt.err" | grep -o '[0-9]*')
check long_ctx_run_prompt_over_28k [ "${toks:-0}" -gt 28000 ]
run_long 1 "$T/t1.txt"
check long_ctx_run_one_thread_exit [ $? -eq 0 ]
check long_ctx_same_text_any_threads cmp -s "$T/t1.txt" "$T/t2.txt"
# 3 threads, 2 KV heads: each decode step splits its keys across the threads
# (flash-decoding); a ~5.4k-token prompt is long enough to be chunked
python3 -c "print(' '.join('word%d' % (i % 500) for i in range(800)))" >"$T/mid.txt"
"$PAGELLM" run -m "$M" --ctx 32768 -f "$T/mid.txt" -n 12 -t 1 --temp 0 >"$T/m1.txt" 2>/dev/null
"$PAGELLM" run -m "$M" --ctx 32768 -f "$T/mid.txt" -n 12 -t 3 --temp 0 >"$T/m3.txt" 2>/dev/null
check long_ctx_run_three_threads_exit [ $? -eq 0 ]
check long_ctx_same_text_keys_split_across_threads cmp -s "$T/m1.txt" "$T/m3.txt"
# TinyLlama's heads (32 query heads over 4 KV heads) on 2 and 5 threads: the
# split takes each token's heads in two tiles of 16 rows, whose pieces go
# out piece by piece and are folded per tile
G="$T/gqa8.gguf"
"$PAGELLM" synth --shape tiny-gqa8 -o "$G" >/dev/null 2>&1
check long_ctx_gqa8_synth [ $? -eq 0 ]
"$PAGELLM" run -m "$G" --ctx 32768 -f "$T/mid.txt" -n 12 -t 1 --temp 0 >"$T/g1.txt" 2>/dev/null
"$PAGELLM" run -m "$G" --ctx 32768 -f "$T/mid.txt" -n 12 -t 5 --temp 0 >"$T/g5.txt" 2>/dev/null
check long_ctx_gqa8_five_threads_exit [ $? -eq 0 ]
check long_ctx_gqa8_same_text_split_in_two_tiles cmp -s "$T/g1.txt" "$T/g5.txt"
"$PAGELLM" run -m "$G" --ctx 32768 -f "$T/mid.txt" -n 12 -t 2 --temp 0 >"$T/g2.txt" 2>/dev/null
check long_ctx_gqa8_same_text_two_threads cmp -s "$T/g1.txt" "$T/g2.txt"

command -v curl >/dev/null || { skip long_ctx_serve "curl not installed"; exit 0; }
command -v jq >/dev/null || { skip long_ctx_serve "jq not installed"; exit 0; }
LOG="$T/serve.log"
serve_start "$LOG" "$M" --threads 2 --ctx 32768
if [ -z "$PORT" ]; then
  fail long_ctx_serve_start "$(tail -5 "$LOG")"
  exit 0
fi
jq -n --rawfile p "$T/prompt.txt" '{prompt: $p, max_tokens: 12, temperature: 0}' >"$T/req.json"
curl -s --max-time 300 -H 'Content-Type: application/json' --data-binary @"$T/req.json" \
  "http://127.0.0.1:$PORT/v1/completions" >"$T/resp.json"
check long_ctx_serve_prompt_over_28k jq -e '.usage.prompt_tokens > 28000 and .usage.completion_tokens == 12' "$T/resp.json"
jq -j '.choices[0].text' "$T/resp.json" >"$T/served.txt"
check long_ctx_serve_same_text_as_run cmp -s "$T/served.txt" "$T/t2.txt"
kill "$SPID" 2>/dev/null
wait "$SPID" 2>/dev/null
