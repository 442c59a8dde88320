#!/usr/bin/env bash
# test_moe.sh - mixture-of-experts models against llama.cpp, and what
# `synth` and `inspect` say of them.
#
# For mixtral, qwen2moe and qwen3moe, the synthetic tiny f32 model (8
# experts; top-2, top-4 with a shared expert, top-4 renormalised) gives
# llama.cpp's greedy tokens exactly and its perplexity within 1e-4
# (measured: 2e-6 .. 2e-5; both engines do the same maths in another
# summation order). Copies quantized by llama.cpp's own quantizer (q8_0,
# q4_0, q4_k_m) load and agree as test_formats.sh's do: perplexity within
# 1.5%, and greedy tokens equal or, at the first difference, a near tie in
# llama.cpp's own logits (both choices within 0.1 of its best). The
# tie bound is twice the dense one: routing is itself an argmax, so a
# rounding that flips one token's choice of expert moves its logits by far
# more than a flipped activation rounding does (measured first
# differences: gaps 0.005-0.052).
source tests/cli/lib.sh

D=tests/data/devils-dictionary.txt
PDIR=$(dirname "$PEER")
QUANT=$PDIR/peer-quantize PPL=$PDIR/peer-perplexity LOGITS=$PDIR/peer-logits
ARCHS="mixtral qwen2moe qwen3moe"

for a in $ARCHS; do "$PAGELLM" synth --shape tiny --arch "$a" -o "$T/$a.gguf" 2>/dev/null; done

# --- synth and inspect
j=$("$PAGELLM" inspect "$T/mixtral.gguf" --json)
check mixtral_is_llama_with_experts jq -e '.arch == "llama" and .n_expert == 8 and .n_expert_used == 2' <<<"$j"
# 4 layers x 8 experts x 3 matrices x 128 x 384 = 4718592 expert weights, 2 of 8 used
check mixtral_active_weights jq -e '.active_elements == .weights_elements - 4718592 / 8 * 6' <<<"$j"
j=$("$PAGELLM" inspect "$T/qwen2moe.gguf" --json)
check qwen2moe_experts jq -e '.arch == "qwen2moe" and .n_expert == 8 and .n_expert_used == 4' <<<"$j"
check inspect_text_names_experts bash -c "'$PAGELLM' inspect '$T/qwen3moe.gguf' | grep -Eq '^  experts 8, 4 per token: [0-9]+ of [0-9]+ weights active'"
check dense_model_has_no_experts jq -e '.n_expert == 0 and .active_elements == .weights_elements' \
  <<<"$("$PAGELLM" inspect "$SHARED/models/stories260K.gguf" --json)"
expect_exit synth_moe_bad_arch 2 "bad value 'dbrx' for --arch.*qwen3moe" -- "$PAGELLM" synth --arch dbrx -o "$T/x.gguf"

if ! have_peer || [ ! -x "$QUANT" ] || [ ! -x "$PPL" ]; then skip moe_vs_llama_cpp "llama.cpp peer not built (make peer)"; exit 0; fi

within() { python3 -c "import sys; a,b,t=map(float,sys.argv[1:4]); sys.exit(0 if abs(a-b) <= t*b else 1)" "$1" "$2" "$3"; }
ppl_pair() { # FILE -> "ours peer"
  echo "$("$PAGELLM" perplexity -m "$1" -f "$D" -c 128 --chunks 8 --json 2>/dev/null | jq .ppl)" \
       "$("$PPL" -m "$1" -f "$D" -c 128 -chunks 8 -t 1 2>/dev/null | jq .ppl)"
}
gen() { # FILE PROMPT N: ours and the peer's [prompt ids, greedy ids], one line each
  "$PAGELLM" run -m "$1" -p "$2" -n "$3" --temp 0 --ignore-eos --json 2>/dev/null | jq -c '[.prompt_ids, .gen_ids]'
  "$PEER" -m "$1" -p "$2" -ng "$3" -t 1 2>/dev/null | jq -c '[.prompt_ids, .gen_ids]'
}

# tokens_agree FILE: 32 greedy tokens equal, or first different at a near
# tie of llama.cpp's logits (see the header). Prints why not.
tokens_agree() {
  local out; out=$(gen "$1" "Once upon a time" 32)
  python3 tests/cli/tokens_agree.py "$LOGITS" "$1" 0.1 "$T/l.f32" "$(sed -n 1p <<<"$out")" "$(sed -n 2p <<<"$out")"
}

for a in $ARCHS; do
  f=$T/$a.gguf
  # --- f32: exactly llama.cpp's greedy tokens, on two prompts
  for p in "Once upon a time, the dog" "the little cat was sad because"; do
    out=$(gen "$f" "$p" 24)
    ours=$(sed -n 1p <<<"$out") peer=$(sed -n 2p <<<"$out")
    if [ -n "$ours" ] && [ "$ours" == "$peer" ]; then pass "${a}_f32_greedy_as_llama_cpp_${#p}"
    else fail "${a}_f32_greedy_as_llama_cpp_${#p}" "ours $ours peer $peer"; fi
  done
  read -r x y <<<"$(ppl_pair "$f")"
  echo "INFO $a f32: perplexity pagellm $x, llama.cpp $y"
  if [ -n "$x" ] && [ -n "$y" ] && within "$x" "$y" 1e-4; then pass "${a}_f32_ppl_as_llama_cpp"
  else fail "${a}_f32_ppl_as_llama_cpp" "pagellm '$x' llama.cpp '$y'"; fi
  # --- llama.cpp's quantized copies
  for t in q8_0 q4_0 q4_k_m; do
    q=$T/$a-$t.gguf
    if ! "$QUANT" "$f" "$q" "$t" >"$T/q.log" 2>&1; then fail "${a}_${t}_quantize" "$(tail -c 300 "$T/q.log")"; continue; fi
    read -r x y <<<"$(ppl_pair "$q")"
    echo "INFO $a $t: perplexity pagellm $x, llama.cpp $y"
    if [ -n "$x" ] && [ -n "$y" ] && within "$x" "$y" 0.015; then pass "${a}_${t}_ppl_as_llama_cpp"
    else fail "${a}_${t}_ppl_as_llama_cpp" "pagellm '$x' llama.cpp '$y'"; fi
    if why=$(tokens_agree "$q"); then pass "${a}_${t}_tokens_as_llama_cpp"; [ -n "$why" ] && echo "INFO $a $t: $why"
    else fail "${a}_${t}_tokens_as_llama_cpp" "$why"; fi
    rm -f "$q"
  done
done

# pagellm's own quantizer writes expert tensors llama.cpp reads
"$PAGELLM" quantize "$T/qwen3moe.gguf" "$T/own-q8.gguf" q8_0 >/dev/null 2>&1
out=$(gen "$T/own-q8.gguf" "Once upon a time" 16)
if [ -n "$(sed -n 1p <<<"$out")" ] && [ "$(sed -n 1p <<<"$out")" == "$(sed -n 2p <<<"$out")" ]; then pass qwen3moe_own_q8_0_runs_in_llama_cpp
else fail qwen3moe_own_q8_0_runs_in_llama_cpp "$out"; fi
