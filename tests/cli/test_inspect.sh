#!/usr/bin/env bash
# test_inspect.sh - `pagellm inspect`: stories260K's shape and KV bytes,
# dtypes that do not fit a model shown as n/a with why, metadata defaults,
# and failures (missing or corrupt file: exit 1 naming it; usage: exit 2).
# Small GGUF files are written here byte by byte (bash printf), so the test
# needs nothing beyond the binary.
source tests/cli/lib.sh

MODEL=$SHARED/models/stories260K.gguf

jget() {
  if command -v jq >/dev/null; then jq -r "$2" "$1"
  else python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
for k in sys.argv[2].strip(".").split("."): d=d.get(k) if isinstance(d,dict) else None
print("null" if d is None else int(d) if isinstance(d, float) and d.is_integer() else d)' "$1" "$2"; fi
}

# is NAME JSONFILE FILTER WANT
is() {
  local got
  if ! command -v jq >/dev/null && [[ $3 == *[\[\|]* ]]; then skip "$1" "needs jq for $3"; return; fi
  got=$(jget "$2" "$3")
  if [ "$got" = "$4" ]; then pass "$1"; else fail "$1" "$3 = $got, wanted $4"; fi
}

# ------------------------------------------------------- a tiny GGUF writer
le() { local v=$1 n=$2 i; for ((i = 0; i < n; i++)); do printf "\\x$(printf %02x $(((v >> (8 * i)) & 255)))"; done; }
gstr() { le ${#1} 8; printf '%s' "$1"; }
kv_u32() { gstr "$1"; le 4 4; le "$2" 4; }
kv_str() { gstr "$1"; le 8 4; gstr "$2"; }
kv_toks() { gstr "$1"; le 9 4; le 8 4; le $(($# - 1)) 8; shift; for s in "$@"; do gstr "$s"; done; }
# tensor NAME TYPE OFFSET NE...
tensor() { local name=$1 type=$2 off=$3; shift 3; gstr "$name"; le $# 4; for n in "$@"; do le "$n" 8; done; le "$type" 4; le "$off" 8; }
# gguf OUT N_TENSORS N_KV DATA_BYTES < body (kvs then tensor infos)
gguf() {
  { printf 'GGUF'; le 3 4; le "$2" 8; le "$3" 8; cat; } >"$1"
  local size pad
  size=$(wc -c <"$1"); pad=$(((32 - size % 32) % 32))
  head -c $((pad + $4)) /dev/zero >>"$1"
}

# 2 layers, dim 48, 4 heads, 2 KV heads: head dim 12, KV row 24 (no q8_0/q4_0).
# Tensors: f32 [48] (192 B) at 0, f16 [48 x 4] (384 B) at 192, q8_0 [64 x 2]
# (4 groups of 34 = 136 B) at 576.
{
  kv_str general.architecture llama
  kv_str general.name odd-shape
  kv_u32 llama.block_count 2
  kv_u32 llama.embedding_length 48
  kv_u32 llama.attention.head_count 4
  kv_u32 llama.attention.head_count_kv 2
  kv_toks tokenizer.ggml.tokens a b c
  tensor norm.weight 0 0 48
  tensor emb.weight 1 192 48 4
  tensor q.weight 8 576 64 2
} | gguf "$T/odd.gguf" 3 7 712

# No head_count_kv (defaults to head_count: MHA) and key_length 16 overriding
# dim / heads = 8; vocab from <arch>.vocab_size.
{
  kv_str general.architecture mistral
  kv_u32 mistral.block_count 3
  kv_u32 mistral.embedding_length 64
  kv_u32 mistral.attention.head_count 8
  kv_u32 mistral.attention.key_length 16
  kv_u32 mistral.vocab_size 1000
  kv_toks tokenizer.ggml.tokens a b c
} | gguf "$T/mha.gguf" 0 7 0

{ kv_str general.name no-arch; } | gguf "$T/noarch.gguf" 0 1 0
{ kv_str general.architecture llama; kv_str llama.block_count five; } | gguf "$T/badtype.gguf" 0 2 0

# ------------------------------------------------------------- stories260K
if [ ! -f "$MODEL" ]; then
  skip inspect_stories260k "$MODEL not found"
else
  if "$PAGELLM" inspect "$MODEL" --json >"$T/s.json" 2>"$T/s.err"; then pass inspect_stories_json_exit_0
  else fail inspect_stories_json_exit_0 "$(head -c 300 "$T/s.err")"; fi
  is inspect_stories_layers "$T/s.json" .n_layers 5
  is inspect_stories_kv_heads "$T/s.json" .n_kv_heads 4
  is inspect_stories_heads "$T/s.json" .n_heads 8
  is inspect_stories_head_dim "$T/s.json" .head_dim 8
  is inspect_stories_arch "$T/s.json" .arch llama
  is inspect_stories_vocab "$T/s.json" .vocab_size 512
  is inspect_stories_ctx_train "$T/s.json" .ctx_train 2048
  # All 48 tensors are f32: weights = 4 bytes x 292800 elements.
  is inspect_stories_weights_bytes "$T/s.json" .weights_bytes $((4 * 292800))
  is inspect_stories_bpw "$T/s.json" .weights_bpw 32
  is inspect_stories_type_bpw "$T/s.json" ".types[0].bpw" 32
  is inspect_stories_type_f32 "$T/s.json" '.types[0].type' f32
  is inspect_stories_type_count "$T/s.json" '.types[0].count' 48
  # 2 x 5 layers x 4 KV heads x 8 x 2 bytes = 640.
  is inspect_stories_bytes_per_token "$T/s.json" .bytes_per_token 640
  is inspect_stories_kv_f16 "$T/s.json" .kv_bytes_per_token.f16 $((2 * 5 * 4 * 8 * 2))
  is inspect_stories_kv_f32 "$T/s.json" .kv_bytes_per_token.f32 1280
  is inspect_stories_kv_bf16 "$T/s.json" .kv_bytes_per_token.bf16 640
  is inspect_stories_kv_q8_0 "$T/s.json" .kv_bytes_per_token.q8_0 $((2 * 5 * 34))
  is inspect_stories_kv_q4_0 "$T/s.json" .kv_bytes_per_token.q4_0 $((2 * 5 * 18))
  is inspect_stories_kv_e5m2 "$T/s.json" .kv_bytes_per_token.fp8_e5m2 320
  # e4m3: + 4 KV heads x f32 scale per block of 16, layer and K|V: 1 byte a token each.
  is inspect_stories_kv_e4m3 "$T/s.json" .kv_bytes_per_token.fp8_e4m3 $((2 * 5 * (32 + 1)))
  is inspect_stories_gqa_saved "$T/s.json" .gqa.saved_bytes_per_token 640
  is inspect_stories_table_size "$T/s.json" '.kv_table | length' $((9 * 4 * 3))
  "$PAGELLM" inspect "$MODEL" --json --block-size 32 >"$T/s32.json" 2>/dev/null
  is inspect_block_size_moves_e4m3_scales "$T/s32.json" .kv_bytes_per_token.fp8_e4m3 $((2 * 5 * 32 + 2 * 5 * 16 / 32))
  "$PAGELLM" inspect "$MODEL" >"$T/s.txt" 2>&1
  check inspect_stories_text_f16 grep -Eq "^  f16 +640 bytes" "$T/s.txt"
  check inspect_stories_text_layers grep -q "layers 5 .*kv heads 4 .*head dim 8" "$T/s.txt"
  check inspect_stories_text_table grep -Eq "^  q8_0 +128K" "$T/s.txt"
  check inspect_stories_text_gqa grep -q "GQA: 8 query heads share 4 KV heads (2x)" "$T/s.txt"
fi

# ------------------------------------------------------- generated shapes
if "$PAGELLM" inspect "$T/odd.gguf" --json >"$T/odd.json" 2>"$T/odd.err"; then pass inspect_odd_exit_0
else fail inspect_odd_exit_0 "$(head -c 300 "$T/odd.err")"; fi
is inspect_odd_head_dim "$T/odd.json" .head_dim 12
is inspect_odd_f16 "$T/odd.json" .kv_bytes_per_token.f16 $((2 * 2 * 24 * 2))
is inspect_odd_q8_0_na "$T/odd.json" .kv_bytes_per_token.q8_0 null
is inspect_odd_q4_0_na "$T/odd.json" .kv_bytes_per_token.q4_0 null
check inspect_odd_q8_0_why grep -q "multiple of 32" <<<"$(jget "$T/odd.json" .kv_unavailable.q8_0)"
is inspect_odd_vocab_from_tokens "$T/odd.json" .vocab_size 3
is inspect_odd_weights_bytes "$T/odd.json" .weights_bytes $((192 + 384 + 136))
is inspect_odd_n_types "$T/odd.json" '.types | length' 3
is inspect_odd_biggest_type_first "$T/odd.json" '.types[0].type' f16
is inspect_odd_rope_default "$T/odd.json" .rope_base 10000
"$PAGELLM" inspect "$T/odd.gguf" >"$T/odd.txt" 2>&1
check inspect_odd_text_na grep -Eq "^  q4_0 +n/a .*multiple of 32" "$T/odd.txt"

"$PAGELLM" inspect "$T/mha.gguf" --json >"$T/mha.json" 2>/dev/null
is inspect_kv_heads_default_to_heads "$T/mha.json" .n_kv_heads 8
is inspect_key_length_overrides "$T/mha.json" .head_dim 16
is inspect_vocab_size_key "$T/mha.json" .vocab_size 1000
is inspect_mha_bytes "$T/mha.json" .bytes_per_token $((2 * 3 * 8 * 16 * 2))
"$PAGELLM" inspect "$T/mha.gguf" >"$T/mha.txt" 2>&1
check inspect_mha_no_gqa_saving grep -q "no GQA saving" "$T/mha.txt"

"$PAGELLM" inspect "$T/noarch.gguf" --json >"$T/noarch.json" 2>/dev/null
is inspect_noarch_kv_na "$T/noarch.json" .kv_bytes_per_token.f16 null
check inspect_noarch_why grep -q "architecture" <<<"$(jget "$T/noarch.json" .kv_unavailable.f16)"

# ------------------------------------------------------ RoPE scaling and its reach
# plain: RoPE made for the trained context; linear x8 from 512: for 4096, so
# 8K is past the scaled context and 2K is not; phi3's LongRoPE is told by its tensors
"$PAGELLM" synth --shape tiny --arch llama -o "$T/r_plain.gguf" >/dev/null 2>&1
"$PAGELLM" synth --shape tiny --arch llama --rope-scaling linear --rope-factor 8 -o "$T/r_lin.gguf" >/dev/null 2>&1
"$PAGELLM" synth --shape tiny --arch phi3 --rope-scaling longrope --rope-orig-ctx 256 -o "$T/r_phi.gguf" >/dev/null 2>&1
for m in r_plain r_lin r_phi; do "$PAGELLM" inspect "$T/$m.gguf" --json >"$T/$m.json" 2>/dev/null; done
is inspect_rope_plain_reach "$T/r_plain.json" .ctx_rope "$(jget "$T/r_plain.json" .ctx_train)"
is inspect_rope_plain_factor "$T/r_plain.json" .rope_factor 0
is inspect_rope_linear_type "$T/r_lin.json" .rope_scaling linear
is inspect_rope_linear_factor "$T/r_lin.json" .rope_factor 8
is inspect_rope_linear_orig "$T/r_lin.json" .rope_orig_ctx 512
is inspect_rope_linear_reach "$T/r_lin.json" .ctx_rope 4096
is inspect_rope_longrope "$T/r_phi.json" .rope_scaling longrope
lin=$("$PAGELLM" inspect "$T/r_lin.gguf" 2>&1)
check inspect_rope_line grep -q "rope scaling   linear x8 from an original context of 512: made for 4096 positions" <<<"$lin"
check inspect_rope_2k_unmarked grep -qE "^  f16 +2K .*MiB$" <<<"$lin"
check inspect_rope_8k_past_the_scaled grep -qE "^  f16 +8K .*\(beyond the scaled context\)$" <<<"$lin"
check inspect_rope_plain_8k_past_trained grep -qE "^  f16 +8K .*\(beyond trained context\)$" <<<"$("$PAGELLM" inspect "$T/r_plain.gguf" 2>&1)"
check inspect_rope_longrope_line grep -q "rope scaling   longrope (factor tensors: short up to an original context of 256" \
  <<<"$("$PAGELLM" inspect "$T/r_phi.gguf" 2>&1)"

# ---------------------------------------------------------------- failures
expect_exit inspect_missing_file 1 "nope\.gguf" -- "$PAGELLM" inspect "$T/nope.gguf"
head -c 4096 /dev/urandom >"$T/random.gguf"
expect_exit inspect_corrupt_file 1 "random\.gguf" -- "$PAGELLM" inspect "$T/random.gguf"
if [ -f "$MODEL" ]; then
  head -c 100000 "$MODEL" >"$T/trunc.gguf"
  expect_exit inspect_truncated_file 1 "trunc\.gguf" -- "$PAGELLM" inspect "$T/trunc.gguf"
fi
expect_exit inspect_wrong_key_type 1 "badtype\.gguf.*llama\.block_count" -- "$PAGELLM" inspect "$T/badtype.gguf"
expect_exit inspect_no_model 2 "MODEL" -- "$PAGELLM" inspect
expect_exit inspect_unknown_flag 2 "--bogus" -- "$PAGELLM" inspect "$T/odd.gguf" --bogus
expect_exit inspect_block_size_zero 2 "--block-size" -- "$PAGELLM" inspect "$T/odd.gguf" --block-size 0
