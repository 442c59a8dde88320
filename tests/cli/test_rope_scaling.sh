#!/usr/bin/env bash
# test_rope_scaling.sh - RoPE scaling chosen on the command line
# (--rope-scaling, --rope-scale, --rope-freq-base, --yarn-orig-ctx and
# YaRN's --yarn-ext-factor, --yarn-attn-factor, --yarn-beta-fast,
# --yarn-beta-slow) instead of the file's: a plain file run with a file's
# scaling as flags gives the tokens (run, serve) and the perplexity of the
# file that carries it (those files match llama.cpp:
# test_model_families.sh); every flag gives llama.cpp's perplexity under
# its own flag of that name; "none" undoes a file's;
# the flags change what a cached block means, so a disk tier written
# without them serves nothing with them; bad values and files whose
# scaling is more than numbers are refused, naming why.
source "$(dirname "$0")/lib.sh"

PROMPT="Once upon a time, the dog"
TEXT=tests/data/stories260K-samples.txt
synth() { # name synth-flags...
  local n=$1; shift
  "$PAGELLM" synth --shape tiny "$@" -o "$T/$n.gguf" >/dev/null 2>"$T/synth.err" ||
    { fail "synth_$n" "$(head -c 300 "$T/synth.err")"; return 1; }
}
synth plain --arch llama
synth yarn --arch llama --rope-scaling yarn --rope-factor 4
synth linear --arch llama --rope-scaling linear --rope-factor 8
synth phi3_long --arch phi3 --rope-scaling longrope --rope-orig-ctx 256
train=$("$PAGELLM" inspect "$T/plain.gguf" --json | jq .ctx_train)
base=$("$PAGELLM" inspect "$T/plain.gguf" --json | jq .rope_base)
YARN_FLAGS=(--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx $((train / 4))) # synth's yarn: original context / 4

ours() { # model [run flags...]: prompt and generated ids
  local m=$1; shift
  "$PAGELLM" run -m "$m" -p "$PROMPT" -n 40 --temp 0 --ignore-eos --ctx 512 --json "$@" 2>/dev/null |
    jq -c '[.prompt_ids, .gen_ids]'
}
same() { # name a b: equal and not empty
  if [ -n "$2" ] && [ "$2" == "$3" ]; then pass "$1"; else fail "$1" "'$2' vs '$3'"; fi
}
differ() { # name a b: both there and different
  if [ -n "$2" ] && [ -n "$3" ] && [ "$2" != "$3" ]; then pass "$1"; else fail "$1" "'$2' vs '$3'"; fi
}

plain=$(ours "$T/plain.gguf")
# the files' scalings change the tokens, so matching them means something
differ rope_yarn_file_differs_from_plain "$(ours "$T/yarn.gguf")" "$plain"
differ rope_linear_file_differs_from_plain "$(ours "$T/linear.gguf")" "$plain"
same rope_flags_yarn_as_the_yarn_file "$(ours "$T/plain.gguf" "${YARN_FLAGS[@]}")" "$(ours "$T/yarn.gguf")"
same rope_flags_linear_as_the_linear_file "$(ours "$T/plain.gguf" --rope-scaling linear --rope-scale 8)" "$(ours "$T/linear.gguf")"
# absent from the file the type is linear (llama.cpp's default), so a scale alone is linear scaling
same rope_scale_alone_is_linear "$(ours "$T/plain.gguf" --rope-scale 8)" "$(ours "$T/linear.gguf")"
same rope_scaling_none_undoes_the_file "$(ours "$T/yarn.gguf" --rope-scaling none)" "$plain"
same rope_freq_base_of_the_file_changes_nothing "$(ours "$T/plain.gguf" --rope-freq-base "$base")" "$plain"
differ rope_freq_base_applied "$(ours "$T/plain.gguf" --rope-freq-base 500)" "$plain"
differ rope_yarn_orig_ctx_applied "$(ours "$T/plain.gguf" "${YARN_FLAGS[@]:0:4}" --yarn-orig-ctx 64)" \
  "$(ours "$T/plain.gguf" "${YARN_FLAGS[@]}")"

# perplexity takes the flags too: the yarn file's figure to the last digit
ppl() { "$PAGELLM" perplexity -m "$1" -f "$TEXT" --ctx 128 --chunks 4 --json "${@:2}" 2>/dev/null | jq -r .ppl; }
same rope_flags_perplexity_as_the_yarn_file "$(ppl "$T/plain.gguf" "${YARN_FLAGS[@]}")" "$(ppl "$T/yarn.gguf")"

# llama.cpp's own flags on the same token ids (tests/peer/peer_ppl.c sets
# its context parameters as its tools do): f32 KV, so only summation order
# may differ. Each knob moves the figure, except where llama.cpp ignores
# it (YaRN's ramp sets its own magnitude) and where two spellings mean the same.
PEER_PPL=$(dirname "$PEER")/peer-ppl
if [ -x "$PEER_PPL" ]; then
  "$PAGELLM" tokenize -m "$T/plain.gguf" --json -f "$TEXT" | jq -r '.ids | map(tostring) | join(" ")' >"$T/ids.txt"
  declare -A fig=()
  as_peer() { # key flags...: our perplexity against llama.cpp's under the same flags, kept in fig[key]
    local key=$1 a b; shift
    a=$(ppl "$T/plain.gguf" --kv-dtype f32 -t 1 "$@")
    b=$("$PEER_PPL" -m "$T/plain.gguf" -ids-file "$T/ids.txt" -c 128 -chunks 4 -t 1 -ctk f32 -ctv f32 \
      "${@/#--/-}" 2>"$T/peer.err" | jq -r .ppl)
    if [ -z "$a" ] || [ -z "$b" ]; then
      fail "rope_as_llama_cpp_$key" "ours '$a' peer '$b' $(head -c 200 "$T/peer.err")"
    elif python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * b)" "$a" "$b"; then
      pass "rope_as_llama_cpp_$key"
    else
      fail "rope_as_llama_cpp_$key" "ours $a, llama.cpp $b ($*)"
    fi
    fig[$key]=$a
  }
  as_peer plain
  as_peer yarn "${YARN_FLAGS[@]}"
  as_peer yarn_betas "${YARN_FLAGS[@]}" --yarn-beta-fast 8 --yarn-beta-slow 2
  as_peer yarn_half_mix "${YARN_FLAGS[@]}" --yarn-ext-factor 0.5
  as_peer yarn_no_mix "${YARN_FLAGS[@]}" --yarn-ext-factor 0
  as_peer yarn_attn_factor "${YARN_FLAGS[@]}" --yarn-attn-factor 2
  as_peer linear_attn_factor --rope-scaling linear --rope-scale 4 --yarn-attn-factor 1.5
  as_peer linear_with_a_mix --rope-scaling linear --rope-scale 4 --yarn-orig-ctx $((train / 4)) --yarn-ext-factor 1
  as_peer linear --rope-scaling linear --rope-scale 4
  as_peer freq_base --rope-freq-base 500
  distinct=$(printf '%s\n' "${fig[plain]}" "${fig[yarn]}" "${fig[yarn_betas]}" "${fig[yarn_half_mix]}" \
    "${fig[yarn_no_mix]}" "${fig[linear_attn_factor]}" "${fig[freq_base]}" | sort -u | wc -l)
  check rope_knobs_each_move_the_figure [ "$distinct" = 7 ]
  same rope_yarn_attn_factor_ignored_under_a_ramp "${fig[yarn_attn_factor]}" "${fig[yarn]}"
  same rope_linear_with_a_mix_is_yarn "${fig[linear_with_a_mix]}" "${fig[yarn]}"
  same rope_no_mix_is_linear_interpolation "${fig[yarn_no_mix]}" "${fig[linear]}"
else
  skip rope_as_llama_cpp "peer-ppl not built (tests/peer.sh)"
fi

# serve: the same greedy completion as the yarn file under run
serve_start "$T/serve.log" "$T/plain.gguf" --ctx 512 -t 1 "${YARN_FLAGS[@]}"
if [ -n "$PORT" ]; then
  got=$(curl -s -m 60 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 40, \"temperature\": 0, \"ignore_eos\": true}" | jq -r '.choices[0].text')
  want=$("$PAGELLM" run -m "$T/yarn.gguf" -p "$PROMPT" -n 40 --temp 0 --ignore-eos --ctx 512 --json 2>/dev/null | jq -r .text)
  same rope_flags_serve_as_the_yarn_file "$got" "$want"
  kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
else
  fail rope_flags_serve_started "$(head -c 300 "$T/serve.log")"
fi

# a disk tier written without the flags: a hit for the same flags, nothing with other RoPE
tier() { "$PAGELLM" run -m "$T/plain.gguf" -p "$PROMPT the cat and the bird went" -n 2 --temp 0 --ctx 512 \
  --block-size 4 --kv-disk "$T/tier" --json "$@" 2>/dev/null | jq -c '[.cached_tokens, .tier_tokens]'; }
tier >/dev/null
hit=$(tier)
check rope_tier_hit_with_the_same_rope jq -e '.[1] > 0' <<<"$hit"
miss=$(tier --rope-scale 2)
same rope_tier_miss_with_other_rope "$miss" "[0,0]"

# a context past the positions RoPE was made for is said, with the flags that stretch it
warn() { "$PAGELLM" run -m "$1" -p hi -n 1 --ctx "$2" "${@:3}" 2>&1 >/dev/null | grep -c "RoPE was trained or scaled for"; }
w=$("$PAGELLM" run -m "$T/plain.gguf" -p hi -n 1 --ctx $((4 * train)) 2>&1 >/dev/null)
check rope_warns_past_the_trained_context grep -q "past the $train positions.*--rope-scaling yarn --rope-scale 4" <<<"$w"
check rope_no_warning_within_it [ "$(warn "$T/plain.gguf" "$train")" = 0 ]
check rope_no_warning_when_scaled_by_flags [ "$(warn "$T/plain.gguf" $((4 * train)) --rope-scale 4)" = 0 ]
check rope_no_warning_when_the_file_scales [ "$(warn "$T/linear.gguf" $((2 * train)))" = 0 ] # its original context / 4, x 8
check rope_warns_with_a_tier_too [ "$(warn "$T/plain.gguf" $((4 * train)) --kv-disk "$T/tier-warn")" = 1 ]
check rope_warning_past_the_scaled_reach [ "$(warn "$T/plain.gguf" $((4 * train + 16)) --rope-scale 4)" = 1 ]
serve_start "$T/serve-warn.log" "$T/plain.gguf" --ctx $((4 * train)) -t 1
check rope_serve_warns grep -q "past the $train positions the model's RoPE" "$T/serve-warn.log"
[ -n "$SPID" ] && { kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; }

# --kv-window re-rotates kept keys with plain RoPE: refused where the flags make it more than that
expect_exit rope_window_refused_with_a_multiplier 1 'cannot re-rotate kept keys' -- \
  "$PAGELLM" run -m "$T/plain.gguf" -p hi -n 2 --kv-window 64 --yarn-attn-factor 1.5
check rope_window_taken_once_the_ramp_is_off \
  "$PAGELLM" run -m "$T/yarn.gguf" -p hi -n 2 --kv-window 64 --yarn-ext-factor 0

# refusals
expect_exit rope_bad_type 2 "bad value 'ntk' for --rope-scaling" -- \
  "$PAGELLM" run -m "$T/plain.gguf" -p hi --rope-scaling ntk
expect_exit rope_yarn_needs_a_factor 1 'YaRN needs a RoPE scale > 1' -- \
  "$PAGELLM" run -m "$T/plain.gguf" -p hi --rope-scaling yarn
expect_exit rope_scale_range 2 'rope-scale' -- \
  "$PAGELLM" run -m "$T/plain.gguf" -p hi --rope-scale 0
expect_exit rope_ext_factor_range 2 'yarn-ext-factor' -- \
  "$PAGELLM" run -m "$T/plain.gguf" -p hi --yarn-ext-factor 1.5
expect_exit rope_betas_in_order 1 'YaRN beta fast 2 must be above beta slow 3' -- \
  "$PAGELLM" run -m "$T/plain.gguf" -p hi --yarn-beta-fast 2 --yarn-beta-slow 3
expect_exit rope_perplexity_betas_in_order 1 'YaRN beta fast 2 must be above beta slow 3' -- \
  "$PAGELLM" perplexity -m "$T/plain.gguf" -f "$TEXT" --yarn-beta-fast 2 --yarn-beta-slow 3
expect_exit rope_longrope_not_replaced 1 'LongRoPE' -- \
  "$PAGELLM" run -m "$T/phi3_long.gguf" -p hi --rope-scale 2
expect_exit rope_serve_bad_type 2 "bad value 'ntk' for --rope-scaling" -- \
  "$PAGELLM" serve -m "$T/plain.gguf" --port 0 --rope-scaling ntk
synth ds2 --arch deepseek2
expect_exit rope_deepseek2_not_replaced 1 "deepseek2's RoPE scaling is part of its attention scale" -- \
  "$PAGELLM" run -m "$T/ds2.gguf" -p hi --rope-freq-base 5000
