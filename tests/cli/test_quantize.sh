#!/usr/bin/env bash
# test_quantize.sh - `pagellm quantize IN OUT TYPE` end to end.
#
# Quantizes stories260K (dim 64, ffn 172: no row is a multiple of 256, and
# ffn_down's 172-long rows not even of 32, so the fallbacks q4_K -> q5_0 ->
# f16 are exercised) to every type; checks the tensor mix the command
# reports; and, if the llama.cpp peer is built, that llama.cpp loads each
# output and generates, with the float conversions giving exactly the
# original's greedy tokens and the quantized ones the same start. Then the
# usage and runtime errors: exit 2 / 1 with messages that say what is wrong.
source "$(dirname "$0")/lib.sh"

MODEL=$SHARED/models/stories260K.gguf

# the greedy continuation llama.cpp produces for a model
peer_gen() {
  "$PEER" -m "$1" -p "Once upon a time" -ng 16 2>/dev/null | grep -o '"gen_ids":\[[0-9,]*\]'
}

# expected "N type" counts in the summary line for stories260K (48 tensors:
# 11 norms stay f32, the 5 ffn_down have 172-long rows)
declare -A MIX=(
  [f32]="48 f32"
  [f16]="37 f16|11 f32"
  [bf16]="37 bf16|11 f32"
  [q8_0]="32 q8_0|5 f16|11 f32"
  [q4_0]="31 q4_0|1 q8_0|5 f16|11 f32"
  [q4_k_m]="29 q5_0|3 q8_0|5 f16|11 f32"
)

if [ ! -f "$MODEL" ]; then
  skip quantize_stories "$MODEL not found"
else
  want_gen=""
  have_peer && want_gen=$(peer_gen "$MODEL")
  for type in f32 f16 bf16 q8_0 q4_0 q4_k_m; do
    out="$T/stories-$type.gguf"
    msg=$("$PAGELLM" quantize "$MODEL" "$out" "$type" 2>&1); rc=$?
    if [ $rc -ne 0 ] || [ ! -s "$out" ]; then
      fail "quantize_$type" "exit $rc: ${msg:0:300}"
      continue
    fi
    bad=""
    IFS='|' read -ra parts <<<"${MIX[$type]}"
    for p in "${parts[@]}"; do grep -q -- " $p\b" <<<"$msg" || bad="$bad [$p]"; done
    if [ -n "$bad" ]; then fail "quantize_$type" "summary lacks$bad: ${msg:0:300}"; else pass "quantize_$type"; fi

    if ! have_peer; then skip "peer_loads_$type" "no llama.cpp peer at $PEER"; continue; fi
    got=$(peer_gen "$out")
    n=$(grep -o '[0-9]\+' <<<"$got" | wc -l)
    if [ "$n" -ne 16 ]; then fail "peer_loads_$type" "llama.cpp did not generate 16 tokens: '${got:0:200}'"; continue; fi
    case $type in
      f32|f16|bf16|q8_0)  # near-lossless: the same greedy tokens as the original
        [ "$got" = "$want_gen" ] && pass "peer_loads_$type" \
          || fail "peer_loads_$type" "tokens $got, original $want_gen" ;;
      *)                  # 4-bit: the first 8 tokens of the story agree
        a=$(grep -o '[0-9]\+' <<<"$got" | head -8 | tr '\n' ,)
        b=$(grep -o '[0-9]\+' <<<"$want_gen" | head -8 | tr '\n' ,)
        [ "$a" = "$b" ] && pass "peer_loads_$type" || fail "peer_loads_$type" "tokens $got, original $want_gen" ;;
    esac
  done

  # a quantized file is valid input too (dequantized, then re-encoded)
  if [ -s "$T/stories-q8_0.gguf" ]; then
    check requantize_q8_0_to_f16 bash -c "'$PAGELLM' quantize '$T/stories-q8_0.gguf' '$T/re.gguf' f16 >/dev/null"
  fi

  expect_exit bad_type 2 "unknown type 'q3_k'.*q4_k_m" -- "$PAGELLM" quantize "$MODEL" "$T/x.gguf" q3_k
  expect_exit missing_type 2 "expected IN.gguf OUT.gguf TYPE" -- "$PAGELLM" quantize "$MODEL" "$T/x.gguf"
  expect_exit unwritable_out 1 "/nonexistent-dir/x.gguf" -- "$PAGELLM" quantize "$MODEL" /nonexistent-dir/x.gguf q8_0
  check no_partial_output test ! -e "$T/x.gguf"
fi

expect_exit no_args 2 "expected IN.gguf OUT.gguf TYPE" -- "$PAGELLM" quantize
expect_exit too_many_args 2 "." -- "$PAGELLM" quantize a b q8_0 d
expect_exit unknown_flag 2 "unknown flag '--fast'" -- "$PAGELLM" quantize --fast a b q8_0
expect_exit missing_input 1 "$T/nope.gguf" -- "$PAGELLM" quantize "$T/nope.gguf" "$T/out.gguf" q8_0
printf 'not a gguf file at all\n' >"$T/text.gguf"
expect_exit not_gguf 1 "text.gguf" -- "$PAGELLM" quantize "$T/text.gguf" "$T/out.gguf" q4_0
check help_exits_0 bash -c "'$PAGELLM' quantize --help | grep -q 'q4_k_m'"
