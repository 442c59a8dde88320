#!/usr/bin/env bash
# test_swa.sh - sliding-window attention from the CLI: --swa auto|on|off on
# run, chat, serve and perplexity (bad values and combinations refused with
# messages naming the flags), synth --sliding-window, inspect showing the
# window, run and perplexity --stream going far past --ctx with a bounded KV,
# and a served completion past the context.
source "$(dirname "$0")/lib.sh"

S=$T/swa40.gguf
"$PAGELLM" synth -o "$S" --sliding-window 40 >/dev/null 2>&1 || { fail synth_sliding_window "synth failed"; exit 0; }
P=$T/plain.gguf
"$PAGELLM" synth -o "$P" >/dev/null 2>&1 || { fail synth_plain "synth failed"; exit 0; }
TXT=tests/data/stories260K-samples.txt

expect_exit synth_window_zero 2 'sliding-window' -- "$PAGELLM" synth -o "$T/x.gguf" --sliding-window 0
for cmd in run chat; do
  extra=(); [ $cmd = run ] && extra=(-p x)
  expect_exit ${cmd}_swa_bad_value 2 "bad value 'maybe' for --swa \(auto \| on \| off\)" -- \
    "$PAGELLM" $cmd -m "$S" "${extra[@]}" --swa maybe </dev/null
  expect_exit ${cmd}_swa_with_kv_window 1 '--kv-window cannot be combined.*sliding_window 40.*--swa off' -- \
    "$PAGELLM" $cmd -m "$S" "${extra[@]}" --kv-window 64 </dev/null
  expect_exit ${cmd}_swa_on_without_window 1 '--swa on: the model declares no sliding window \(llama.attention.sliding_window\)' -- \
    "$PAGELLM" $cmd -m "$P" "${extra[@]}" --swa on </dev/null
done
expect_exit run_swa_ctx_too_small 1 'n_ctx \(--ctx\) 45 with sliding-window attention 40: at least.*56' -- \
  "$PAGELLM" run -m "$S" -p x --ctx 45
expect_exit serve_swa_bad_value 2 "for --swa" -- "$PAGELLM" serve -m "$S" --swa 1
expect_exit ppl_swa_bad_value 2 "for --swa" -- "$PAGELLM" perplexity -m "$S" -f "$TXT" --swa yes

# inspect names the window and whether it applies
out=$("$PAGELLM" inspect "$S" 2>&1)
check inspect_shows_window grep -q 'sliding window 40: applied by default' <<<"$out"
check inspect_plain_has_none grep -q 'sliding window none' <<<"$("$PAGELLM" inspect "$P" 2>&1)"
j=$("$PAGELLM" inspect "$S" --json 2>/dev/null)
check inspect_json_window jq -e '.sliding_window == 40' <<<"$j"

# run: 400 tokens (10 W) through 56 + 16 KV slots; KV stays ~W + a block
j=$("$PAGELLM" run -m "$S" -p "hello" -n 400 --temp 0 --ignore-eos --ctx 72 --json 2>"$T/err")
check run_swa_generates_past_ctx jq -e '(.gen_ids | length) == 400 and .stop_reason == "length"' <<<"$j"
check run_swa_holds_about_w_plus_a_block jq -e '.kv.tokens <= 55 and .kv.tokens >= 40' <<<"$j"
# --swa off: the same context stops at --ctx (the last token generated is not stored); within the
# window the tokens are those of full attention
j2=$("$PAGELLM" run -m "$S" -p "hello" -n 400 --temp 0 --ignore-eos --ctx 72 --swa off --json 2>/dev/null)
check run_swa_off_stops_at_ctx jq -e '(.prompt_ids | length) + (.gen_ids | length) == 73' <<<"$j2"
same=$(jq -n --argjson a "$j" --argjson b "$j2" '[range(0; 30)] | all(. as $i | $a.gen_ids[$i] == $b.gen_ids[$i])')
check run_swa_same_as_full_within_the_window test "$same" = true
# --swa on = auto for a model with a window
j3=$("$PAGELLM" run -m "$S" -p "hello" -n 100 --temp 0 --ignore-eos --ctx 72 --swa on --json 2>/dev/null)
check run_swa_on_is_auto jq -e --argjson a "$j" '.gen_ids == $a.gen_ids[0:100]' <<<"$j3"
# a plain model is untouched by auto
check run_plain_auto_unchanged test "$("$PAGELLM" run -m "$P" -p hi -n 20 --temp 0 --json 2>/dev/null | jq -c .gen_ids)" = \
  "$("$PAGELLM" run -m "$P" -p hi -n 20 --temp 0 --swa off --json 2>/dev/null | jq -c .gen_ids)"
# --kv-window still works with --swa off
check run_kv_window_with_swa_off "$PAGELLM" run -m "$S" -p hello -n 100 --temp 0 --ignore-eos --kv-window 64 --swa off
# perplexity --stream runs through the window without --ctx, and says so
j=$("$PAGELLM" perplexity -m "$S" -f "$TXT" --stream --chunks 2 --json 2>/dev/null)
check ppl_stream_swa jq -e '.swa == 40 and .n_dropped > 400 and .n_tokens == 1023' <<<"$j"
j=$("$PAGELLM" perplexity -m "$S" -f "$TXT" --stream --chunks 2 --swa off --json 2>/dev/null)
check ppl_stream_swa_off jq -e '.swa == 0 and .n_dropped == 0' <<<"$j"

# ---- serve: a completion past the context (the engine frees blocks too)
command -v curl >/dev/null || { skip serve_swa "curl not installed"; exit 0; }
LOG=$T/serve.log
serve_start "$LOG" "$S" --threads 2 --ctx 72
trap 'kill -KILL $SPID 2>/dev/null; rm -rf "$T"' EXIT
if [ -z "$PORT" ]; then
  fail serve_swa_starts "$(tail -3 "$LOG")"
else
  body=$(curl -s --max-time 120 -H 'Content-Type: application/json' \
    --data '{"prompt":"hello","max_tokens":300,"temperature":0,"ignore_eos":true}' "http://127.0.0.1:$PORT/v1/completions")
  check serve_swa_completion_past_ctx jq -e '.usage.completion_tokens == 300 and .choices[0].finish_reason == "length"' <<<"$body"
  kill -TERM "$SPID"
  for _ in $(seq 1 300); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
  wait "$SPID"; rc=$?
  check serve_swa_clean_exit test "$rc" -eq 0
fi
