#!/usr/bin/env bash
# test_window.sh - the KV sliding window with attention sinks from the CLI:
# --kv-window / --kv-sinks on run, chat, serve and perplexity (flags checked
# with messages naming them), generation far past --ctx and the train
# context, perplexity --stream staying flat with a window where full
# attention past the train context blows up, and a served completion past
# the context.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
if [ ! -f "$M" ]; then skip window "$M not found"; exit 0; fi
TXT=tests/data/stories260K-samples.txt

# ---- flag validation (exit 2 for usage, 1 for a context the model refuses)
for cmd in run chat; do
  extra=(); [ $cmd = run ] && extra=(-p x)
  expect_exit ${cmd}_window_zero 2 'kv-window' -- "$PAGELLM" $cmd -m "$M" "${extra[@]}" --kv-window 0
  expect_exit ${cmd}_window_not_a_number 2 'kv-window' -- "$PAGELLM" $cmd -m "$M" "${extra[@]}" --kv-window many
  expect_exit ${cmd}_sinks_negative 2 'kv-sinks' -- "$PAGELLM" $cmd -m "$M" "${extra[@]}" --kv-window 64 --kv-sinks -1
  expect_exit ${cmd}_sinks_without_window 2 '--kv-sinks 4 needs --kv-window' -- \
    "$PAGELLM" $cmd -m "$M" "${extra[@]}" --kv-sinks 4 </dev/null
done
expect_exit run_window_below_two_blocks 1 'kv-window.* 20 must be at least 2 x the KV block size 16' -- \
  "$PAGELLM" run -m "$M" -p x --kv-window 20
expect_exit run_window_past_ctx 1 'kv-sinks.*\(16 in whole blocks of 16\).*kv-window.*exceed the context.*--ctx. 64' -- \
  "$PAGELLM" run -m "$M" -p x --kv-window 64 --kv-sinks 4 --ctx 64
expect_exit run_window_no_cache 1 'needs a KV cache' -- "$PAGELLM" run -m "$M" -p x --kv-window 64 --no-kv-cache
expect_exit serve_sinks_without_window 2 '--kv-sinks 4 needs --kv-window' -- "$PAGELLM" serve -m "$M" --kv-sinks 4
expect_exit ppl_window_needs_stream 2 '--kv-window needs --stream' -- "$PAGELLM" perplexity -m "$M" -f "$TXT" --kv-window 64
expect_exit ppl_stream_no_kl 2 'does not combine' -- "$PAGELLM" perplexity -m "$M" -f "$TXT" --stream --kl-base "$T/x"
expect_exit ppl_stream_too_long_for_ctx 1 'does not fit --ctx 512: give --kv-window' -- \
  "$PAGELLM" perplexity -m "$M" -f "$TXT" --stream --ctx 512

# ---- run: 1500 tokens through a context of 80 (sinks 16 + window 64)
j=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 1500 --temp 0 --ignore-eos --kv-window 64 --kv-sinks 4 --json 2>"$T/err")
check run_window_generates_past_ctx jq -e '(.gen_ids | length) == 1500 and .stop_reason == "length"' <<<"$j"
check run_window_holds_at_most_sinks_plus_window jq -e '.kv.tokens <= 80 and .kv.blocks_total == 5' <<<"$j"
# without the window the same context stops at 80 tokens
j=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 1500 --temp 0 --ignore-eos --ctx 80 --json 2>/dev/null)
check run_without_window_stops_at_ctx jq -e '(.gen_ids | length) == 76' <<<"$j"
# a window the text never reaches changes nothing
a=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 100 --temp 0 --ctx 256 --json 2>/dev/null | jq -c .gen_ids)
b=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 100 --temp 0 --ctx 256 --kv-window 200 --kv-sinks 4 --json 2>/dev/null | jq -c .gen_ids)
check run_window_not_reached_same_tokens test "$a" == "$b"

# ---- chat: turns past the context
printf 'Tell me a story.\nAnd then?\nAnd then?\n' >"$T/turns"
"$PAGELLM" chat -m "$M" -n 120 --temp 0 --kv-window 64 --kv-sinks 4 --json <"$T/turns" >"$T/chat" 2>"$T/chat.err"
check chat_window_three_turns test "$(jq -s 'length' "$T/chat")" -eq 3
check chat_window_turns_generate jq -es 'all(.[]; .generated_tokens > 0)' "$T/chat"

# ---- perplexity --stream: 2048 tokens (4 x the 512 the model was trained at)
w=$("$PAGELLM" perplexity -m "$M" -f "$TXT" --stream --chunks 4 --segment 512 --kv-sinks 0 --kv-window 448 --json 2>/dev/null)
s=$("$PAGELLM" perplexity -m "$M" -f "$TXT" --stream --chunks 4 --segment 512 --kv-window 432 --kv-sinks 4 --json 2>/dev/null)
f=$("$PAGELLM" perplexity -m "$M" -f "$TXT" --stream --chunks 4 --segment 512 --json 2>/dev/null)
check ppl_stream_window_finite jq -e '.ppl > 1 and .ppl < 4 and .n_tokens == 2047 and .n_dropped > 1500 and .kv_sinks == 0' <<<"$w"
# --kv-sinks defaults to 4 (one block of 16) with a window
d=$("$PAGELLM" perplexity -m "$M" -f "$TXT" --stream --chunks 1 --kv-window 64 --json 2>/dev/null)
check ppl_stream_default_sinks jq -e '.kv_sinks == 4 and .kv_sinks_effective == 16' <<<"$d"
check ppl_stream_sinks_finite jq -e '.ppl > 1 and .ppl < 4 and .kv_sinks_effective == 16' <<<"$s"
# flat with a window: the last segment within 25% of the first full one; full
# attention degrades past the trained length (measured: 2.88 -> 4.36)
check ppl_stream_window_flat jq -e '.segments[3].ppl < 1.25 * .segments[1].ppl' <<<"$w"
check ppl_stream_full_attention_degrades jq -e '.segments[3].ppl > 1.3 * .segments[1].ppl' <<<"$f"
check ppl_stream_window_beats_full test "$(jq -n --argjson a "$w" --argjson b "$f" '$a.segments[3].ppl < $b.segments[3].ppl')" == true

# ---- serve: a completion past the context
command -v curl >/dev/null || { skip serve_window "curl not installed"; exit 0; }
LOG=$T/serve.log
serve_start "$LOG" "$M" --threads 2 --kv-window 64 --kv-sinks 4
trap 'kill -KILL $SPID 2>/dev/null; rm -rf "$T"' EXIT
if [ -z "$PORT" ]; then
  fail serve_window_starts "$(tail -3 "$LOG")"
else
  check serve_window_context_line grep -q 'context 80 tokens' "$LOG"
  body=$(curl -s --max-time 120 -H 'Content-Type: application/json' \
    --data '{"prompt":"Once upon a time","max_tokens":400,"temperature":0,"ignore_eos":true}' "http://127.0.0.1:$PORT/v1/completions")
  check serve_window_completion_past_ctx jq -e '.usage.completion_tokens == 400 and .choices[0].finish_reason == "length"' <<<"$body"
  kill -TERM "$SPID"
  for _ in $(seq 1 300); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
  wait "$SPID"; rc=$?
  check serve_window_clean_exit test "$rc" -eq 0
fi
