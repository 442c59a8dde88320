#!/usr/bin/env bash
# test_run.sh - `pagellm run`: its report and JSON, and bad input refused
# with a message naming the flag or file and the right exit code.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
if [ ! -f "$M" ]; then skip run "$M not found"; exit 0; fi

out=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 64 --temp 0 2>"$T/err")
check run_streams_the_known_story grep -q "there was a little girl named Lily. She loved to play outside in the park" <<<"$out"
check run_reports_tokens grep -q '^prompt    5 tokens' "$T/err"
check run_reports_kv_blocks grep -Eq '^kv blocks [0-9]+ used / [0-9]+ total' "$T/err"
check run_reports_kv_bytes grep -Eq 'formula 640.0 B/token' "$T/err"

j=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 20 --temp 0 --ignore-eos --json 2>/dev/null)
check run_json_prompt_ids test "$(jq -c .prompt_ids <<<"$j")" == "[1,403,407,261,378]"
check run_json_gen_count test "$(jq '.gen_ids | length' <<<"$j")" -eq 20
# 5 prompt tokens + 19 appended (the 20th generated token is never fed back)
# a block of 16 x 640 bytes = 160 lines takes one line of pad (kv_pool.h)
check run_json_kv_fields jq -e '.kv | (.block_size == 16 and .blocks_used == 2 and .bytes_per_token == 640 and .bytes_used == 2 * 10240 and .tokens == 24 and .bytes_wasted == 2 * 10240 - 24 * 640)' <<<"$j"
check run_json_rates jq -e '.prefill_tok_s > 0 and .decode_tok_s > 0' <<<"$j"

# sampling: a fixed seed repeats, another seed differs
a=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 40 --temp 1 --seed 7 --json 2>/dev/null | jq -c .gen_ids)
b=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 40 --temp 1 --seed 7 --json 2>/dev/null | jq -c .gen_ids)
c=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 40 --temp 1 --seed 8 --json 2>/dev/null | jq -c .gen_ids)
check run_same_seed_same_tokens test "$a" == "$b"
check run_other_seed_other_tokens test "$a" != "$c"

# stop strings end the text before the stop string
s=$("$PAGELLM" run -m "$M" -p "Once upon a time" -n 64 --temp 0 --stop "Lily" --json 2>/dev/null)
check run_stop_string jq -e '.stop_reason == "stop" and .text == ", there was a little girl named "' <<<"$s"

# the prompt file and stdin
printf 'Once upon a time' >"$T/p.txt"
check run_prompt_file test "$("$PAGELLM" run -m "$M" -f "$T/p.txt" -n 8 --temp 0 --json 2>/dev/null | jq -c .prompt_ids)" == "[1,403,407,261,378]"
check run_prompt_stdin test "$(printf 'Once upon a time' | "$PAGELLM" run -m "$M" -f - -n 8 --temp 0 --json 2>/dev/null | jq -c .prompt_ids)" == "[1,403,407,261,378]"

# bad input
long=$(printf 'and then %.0s' $(seq 200))
expect_exit prompt_longer_than_context 2 'does not fit the context of 64 tokens \(--ctx\)' -- "$PAGELLM" run -m "$M" -p "$long" --ctx 64
expect_exit zero_tokens 2 "bad value '0' for --n-predict" -- "$PAGELLM" run -m "$M" -p x -n 0
expect_exit negative_threads 2 "bad value '-2' for --threads" -- "$PAGELLM" run -m "$M" -p x -t -2
expect_exit zero_ctx 2 "bad value '0' for --ctx" -- "$PAGELLM" run -m "$M" -p x --ctx 0
expect_exit zero_block_size 2 "bad value '0' for --block-size" -- "$PAGELLM" run -m "$M" -p x --block-size 0
expect_exit bad_temperature 2 "bad value 'hot' for --temp" -- "$PAGELLM" run -m "$M" -p x --temp hot
expect_exit bad_layout 2 "bad value 'ring' for --kv-layout" -- "$PAGELLM" run -m "$M" -p x --kv-layout ring
expect_exit bad_kv_dtype 2 "--kv-dtype" -- "$PAGELLM" run -m "$M" -p x --kv-dtype f13
expect_exit unknown_flag 2 "unknown flag '--frobnicate'" -- "$PAGELLM" run -m "$M" -p x --frobnicate
expect_exit no_prompt 2 'give exactly one of -p PROMPT or -f FILE' -- "$PAGELLM" run -m "$M"
expect_exit missing_model 1 'no-such.gguf' -- "$PAGELLM" run -m "$T/no-such.gguf" -p x
expect_exit missing_prompt_file 1 "cannot read prompt file" -- "$PAGELLM" run -m "$M" -f "$T/none.txt"
head -c 100 "$M" >"$T/cut.gguf"
expect_exit truncated_model 1 'cut.gguf: offset' -- "$PAGELLM" run -m "$T/cut.gguf" -p x
expect_exit q8_kv_on_head_dim_8 1 '--kv-dtype q8_0: this model.s head dim 8 is not a multiple of 32' -- "$PAGELLM" run -m "$M" -p x --kv-dtype q8_0
check run_help "$PAGELLM" run --help
