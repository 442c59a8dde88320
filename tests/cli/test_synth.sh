#!/usr/bin/env bash
# test_synth.sh - `pagellm synth`: deterministic files of the named shapes
# that llama.cpp loads and runs exactly as pagellm does, with the built-in
# byte-level vocabulary or one taken from a vocab GGUF.
source "$(dirname "$0")/lib.sh"

"$PAGELLM" synth --shape tiny --seed 1 -o "$T/a.gguf" 2>/dev/null
"$PAGELLM" synth --shape tiny --seed 1 -o "$T/b.gguf" 2>/dev/null
"$PAGELLM" synth --shape tiny --seed 2 -o "$T/c.gguf" 2>/dev/null
check synth_same_seed_same_bytes cmp -s "$T/a.gguf" "$T/b.gguf"
check synth_other_seed_other_bytes test "$(sha256sum <"$T/a.gguf")" != "$(sha256sum <"$T/c.gguf")"
size=$(stat -c %s "$T/a.gguf")
check "synth_tiny_is_a_few_MB_($size)" test "$size" -gt 1000000 -a "$size" -lt 8000000
j=$("$PAGELLM" inspect "$T/a.gguf" --json)
check synth_tiny_shape jq -e '.n_layers == 4 and .n_kv_heads == 2 and .head_dim == 32' <<<"$j"
check synth_lists_shapes test "$("$PAGELLM" synth --list | tr '\n' ' ')" == "tiny tiny256 tiny-gqa8 110m tinyllama-1.1b llama3.2-1b qwen3moe-3b gemma3-1b phi3-mini tiny-v2 mla-bench deepseek2-lite "

# 39 tensors: 30 matrices in q8_0, the 9 norm vectors stay f32
"$PAGELLM" synth --shape tiny --type q8_0 -o "$T/q8.gguf" 2>/dev/null
check synth_writes_quantized_types jq -e '.types[] | select(.type == "q8_0") | .count == 30' <<<"$("$PAGELLM" inspect "$T/q8.gguf" --json)"

# llama.cpp loads the files and generates exactly what pagellm generates
same_as_peer() { # name model prompt
  local name=$1 m=$2 p=$3 ours peer
  ours=$("$PAGELLM" run -m "$m" -p "$p" -n 24 --temp 0 --ignore-eos --json 2>/dev/null | jq -c '[.prompt_ids, .gen_ids]')
  peer=$("$PEER" -m "$m" -p "$p" -ng 24 2>/dev/null | jq -c '[.prompt_ids, .gen_ids]')
  if [ -n "$ours" ] && [ "$ours" == "$peer" ]; then pass "$name"
  else fail "$name" "ours $ours peer $peer"; fi
}
if have_peer; then
  same_as_peer synth_tiny_builtin_vocab_runs_in_llama_cpp "$T/a.gguf" "Once upon a time, the little dog"
  same_as_peer synth_tiny_q8_0_runs_in_llama_cpp "$T/q8.gguf" "Once upon a time"
  "$PAGELLM" synth --shape tiny --vocab "$SHARED/models/vocab/ggml-vocab-llama-spm.gguf" -o "$T/spm.gguf" 2>/dev/null
  same_as_peer synth_tiny_llama_spm_vocab_runs_in_llama_cpp "$T/spm.gguf" "Hello world, this is a test"
  # the other architectures' code paths: qwen2 (q/k/v biases, NeoX rope),
  # qwen3 (per-head q/k RMSNorm, NeoX rope)
  for a in qwen2 qwen3; do
    "$PAGELLM" synth --shape tiny --arch $a -o "$T/$a.gguf" 2>/dev/null
    same_as_peer "synth_tiny_${a}_runs_in_llama_cpp" "$T/$a.gguf" "Once upon a time, the dog"
  done
else
  skip synth_vs_llama_cpp "peer not built"
fi

expect_exit synth_unknown_shape 2 "unknown --shape 'huge'" -- "$PAGELLM" synth --shape huge -o "$T/x.gguf"
expect_exit synth_no_output 2 'missing -o' -- "$PAGELLM" synth --shape tiny
expect_exit synth_bad_type 2 "bad value 'q3' for --type" -- "$PAGELLM" synth --shape tiny --type q3 -o "$T/x.gguf"
expect_exit synth_bad_arch 2 "bad value 'gptj' for --arch" -- "$PAGELLM" synth --arch gptj -o "$T/x.gguf"
expect_exit synth_bad_seed 2 "bad value 'abc' for --seed" -- "$PAGELLM" synth --seed abc -o "$T/x.gguf"
expect_exit synth_missing_vocab 1 'nope.gguf' -- "$PAGELLM" synth --vocab "$T/nope.gguf" -o "$T/x.gguf"
expect_exit synth_unwritable 1 'cannot create' -- "$PAGELLM" synth -o /nonexistent/dir/x.gguf
# an error from the library: the command's name once, then what and where
expect_exit synth_library_error_one_prefix 1 "^pagellm synth: --rope-scaling longrope is written for --arch phi3 only$" -- \
  "$PAGELLM" synth --shape tiny --rope-scaling longrope -o "$T/x.gguf"
