#!/usr/bin/env bash
# test_tokenize.sh - `pagellm tokenize` / `pagellm detokenize`: ids as
# llama.cpp gives them (the peer, when built), --no-bos, --special, --json,
# -f FILE and -f - (stdin), round trips, and the exit-code contract (usage
# errors and ids out of range: 2; unreadable files or models: 1, named).
source tests/cli/lib.sh

SPM=$SHARED/models/vocab/ggml-vocab-llama-spm.gguf
GPT2=$SHARED/models/vocab/ggml-vocab-gpt-2.gguf
STORIES=$SHARED/models/stories260K.gguf

# same NAME GOT WANT
same() { if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "got '${2:0:200}', wanted '${3:0:200}'"; fi; }

same tokenize_stories "$($PAGELLM tokenize -m "$STORIES" "Once upon a time")" "1 403 407 261 378"
same tokenize_no_bos "$($PAGELLM tokenize -m "$STORIES" --no-bos "Once upon a time")" "403 407 261 378"
same tokenize_spm "$($PAGELLM tokenize -m "$SPM" --no-bos " Hello World!")" "29871 15043 2787 29991"
same tokenize_gpt2_no_bos_by_default "$($PAGELLM tokenize -m "$GPT2" "Hello world")" "15496 995"
same tokenize_empty "$($PAGELLM tokenize -m "$SPM" --no-bos "")" ""

# --special: control texts become ids only when asked
same special_on "$($PAGELLM tokenize -m "$SPM" --no-bos --special "<s>Hello</s>")" "1 15043 2"
out=$($PAGELLM tokenize -m "$SPM" --no-bos "<s>Hello</s>")
check special_off bash -c "[[ ' $out ' != *' 1 '* && ' $out ' != *' 2 '* ]]"

# -f FILE and -f - read the same text as TEXT (a trailing newline is text)
text=$'Lily saw a big, red ball.\nShe said: "caf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\xa6\x99"'
printf '%s' "$text" >"$T/in.txt"
want=$($PAGELLM tokenize -m "$SPM" "$text")
same file_equals_text "$($PAGELLM tokenize -m "$SPM" -f "$T/in.txt")" "$want"
same stdin_equals_text "$($PAGELLM tokenize -m "$SPM" -f - <"$T/in.txt")" "$want"

# --json: ids and their stored pieces, one each
json=$($PAGELLM tokenize -m "$SPM" --json $'Hello \xff world')
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert len(d["ids"])==len(d["pieces"])>0 and d["pieces"][1]=="\u2581Hello", d' "$json" 2>/dev/null; then
  pass json_ids_and_pieces
else
  fail json_ids_and_pieces "$json"
fi
json=$($PAGELLM tokenize -m "$SPM" --json --no-bos "$(printf 'a\xe4')")
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["pieces"][-1]=="<0xE4>", d' "$json" 2>/dev/null; then
  pass json_byte_pieces
else
  fail json_byte_pieces "$json"
fi

# round trips: detokenize(tokenize(x)) == x
for v in "$SPM" "$GPT2"; do
  name=roundtrip_$(basename "$v" .gguf)
  ids=$($PAGELLM tokenize -m "$v" --no-bos -f "$T/in.txt")
  # shellcheck disable=SC2086
  same "$name" "$($PAGELLM detokenize -m "$v" $ids)" "$text"
done
same detokenize_list_forms "$($PAGELLM detokenize -m "$SPM" "[15043," "3186]")" "Hello world"
same detokenize_stdin "$(echo "15043 3186" | $PAGELLM detokenize -m "$SPM" -)" "Hello world"
same detokenize_after_bos "$($PAGELLM detokenize -m "$SPM" 1 15043)" " Hello"

# agreement with llama.cpp on prompts with unicode and leading spaces
if have_peer; then
  i=0
  for p in "Once upon a time" "  Lily went to the park" "caf$(printf '\xc3\xa9') $(printf '\xf0\x9f\xa6\x99') and more" $'two\nlines'; do
    want=$("$PEER" -m "$STORIES" -p "$p" -ng 1 2>/dev/null | sed -n 's/.*"prompt_ids":\[\([^]]*\)\].*/\1/p' | tr ',' ' ')
    i=$((i + 1))
    same "peer_prompt_ids_$i" "$($PAGELLM tokenize -m "$STORIES" "$p")" "$want"
  done
else
  skip peer_prompt_ids "no $PEER"
fi

# exit codes
expect_exit bad_flag 2 "unknown flag" -- "$PAGELLM" tokenize -m "$SPM" --bogus hi
expect_exit missing_model 2 "missing -m" -- "$PAGELLM" tokenize hi
expect_exit text_and_file 2 "exactly one" -- "$PAGELLM" tokenize -m "$SPM" -f "$T/in.txt" hi
expect_exit no_text 2 "exactly one" -- "$PAGELLM" tokenize -m "$SPM"
expect_exit bad_file 1 "$T/nope.txt" -- "$PAGELLM" tokenize -m "$SPM" -f "$T/nope.txt"
expect_exit bad_model 1 "$T/nope.gguf" -- "$PAGELLM" tokenize -m "$T/nope.gguf" hi
printf 'GGUF junk' >"$T/junk.gguf"
expect_exit junk_model 1 "junk.gguf" -- "$PAGELLM" tokenize -m "$T/junk.gguf" hi
expect_exit id_out_of_range 2 "token id 32000 " -- "$PAGELLM" detokenize -m "$SPM" 1 32000
expect_exit id_negative 2 "token id -5 " -- "$PAGELLM" detokenize -m "$SPM" -5
expect_exit id_not_a_number 2 "bad token id 'abc'" -- "$PAGELLM" detokenize -m "$SPM" 12 abc
expect_exit detok_no_ids 2 "token ids" -- "$PAGELLM" detokenize -m "$SPM"
expect_exit detok_bad_flag 2 "unknown flag" -- "$PAGELLM" detokenize -m "$SPM" --nope 1
check tokenize_help bash -c "'$PAGELLM' tokenize --help | grep -q -- --special"
