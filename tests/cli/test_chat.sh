#!/usr/bin/env bash
# test_chat.sh - `pagellm chat` keeps its KV cache between turns: each turn
# prefills only the tokens it adds, and three turns give the same answer as
# one `pagellm run` over the whole rendered conversation.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
if [ ! -f "$M" ]; then skip chat "$M not found"; exit 0; fi

printf 'Once upon a time\nThe dog ran to the park\nThen\n' |
  "$PAGELLM" chat -m "$M" --temp 0 -n 16 --json >"$T/chat.jsonl" 2>"$T/chat.err"
check chat_exits_0_with_three_turns test "$(wc -l <"$T/chat.jsonl")" -eq 3

field() { sed -n "${1}p" "$T/chat.jsonl" | jq -r ".$2"; }
# turn 1 computes everything; later turns reuse all but the tail of the
# previous turn (the re-tokenized answer may differ from the sampled ids
# only at its end) and prefill about what they add
check turn1_prefills_its_prompt test "$(field 1 reused_tokens)" -eq 0
for t in 2 3; do
  p=$(field $t prompt_tokens); r=$(field $t reused_tokens); n=$(field $t prefilled_tokens)
  prev=$(( $(field $((t - 1)) prompt_tokens) + $(field $((t - 1)) generated_tokens) - 1 ))
  check "turn${t}_reuses_previous_turn_($r of $prev)" test "$r" -ge $((prev - 4))
  check "turn${t}_prefills_only_new_tokens_($n of $p)" test "$n" -le $((p - prev + 4))
done

# the third answer equals a run over the same rendered conversation
prompt=$(sed -n 3p "$T/chat.jsonl" | jq -r .prompt)
want=$(field 3 text)
got=$("$PAGELLM" run -m "$M" -p "$prompt" --temp 0 -n 16 --stop $'\n\nUser:' --stop $'\nUser:' --json 2>/dev/null | jq -r .text)
if [ "$got" == "$want" ]; then pass chat_turn3_equals_run_over_conversation
else fail chat_turn3_equals_run_over_conversation "chat: '$want' run: '$got'"; fi

# the human report says the same on stderr, and the plain text mode works from a pipe
printf 'Once upon a time\nThen\n' | "$PAGELLM" chat -m "$M" --temp 0 -n 8 >"$T/plain.out" 2>"$T/plain.err"
check chat_reports_reuse_per_turn grep -q '\[turn 2\] prompt [0-9]* tokens: [1-9][0-9]* reused from the KV cache' "$T/plain.err"
check chat_prints_answers test -s "$T/plain.out"

expect_exit chat_without_model 2 'missing -m' -- "$PAGELLM" chat
expect_exit chat_bad_flag 2 "unknown flag '--nope'" -- "$PAGELLM" chat -m "$M" --nope
expect_exit chat_missing_file 1 'no-such.gguf' -- "$PAGELLM" chat -m "$T/no-such.gguf"
