#!/usr/bin/env bash
# test_kvcalc.sh - `pagellm kvcalc`: the KV memory formula on known shapes,
# whole-block allocation, the GQA line, and refusal of bad flags (exit 2,
# naming the flag).
source tests/cli/lib.sh

# jget FILE FILTER: a JSON field (jq syntax, dotted paths only).
jget() {
  if command -v jq >/dev/null; then jq -r "$2" "$1"
  else python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
for k in sys.argv[2].strip(".").split("."): d=d.get(k) if isinstance(d,dict) else None
print("null" if d is None else int(d) if isinstance(d, float) and d.is_integer() else d)' "$1" "$2"; fi
}

# field NAME FILTER WANT -- kvcalc args...: JSON field FILTER equals WANT.
field() {
  local name=$1 filter=$2 want=$3; shift 4
  local out="$T/$name.json" got
  if ! "$PAGELLM" kvcalc "$@" --json >"$out" 2>"$T/$name.err"; then
    fail "$name" "exit $?: $(head -c 300 "$T/$name.err")"; return
  fi
  got=$(jget "$out" "$filter")
  if [ "$got" = "$want" ]; then pass "$name"; else fail "$name" "$filter = $got, wanted $want"; fi
}

L70="--layers 80 --kv-heads 8 --head-dim 128"
L8="--layers 32 --kv-heads 8 --head-dim 128"

# Llama-3-70B at bf16: 2 x 80 x 8 x 128 x 2 = 327680 bytes (320 KiB) a token.
field kvcalc_llama70b_bf16 .bytes_per_token 327680 -- $L70 --dtype bf16
field kvcalc_llama70b_f32 .bytes_per_token 655360 -- $L70 --dtype f32
# q8_0: per layer and K|V, 1024 / 32 groups of 34 bytes.
field kvcalc_llama70b_q8_0 .bytes_per_token $((80 * 2 * 1024 / 32 * 34)) -- $L70 --dtype q8_0
field kvcalc_llama70b_q4_0 .bytes_per_token $((80 * 2 * 1024 / 32 * 18)) -- $L70 --dtype q4_0
field kvcalc_llama70b_e5m2 .bytes_per_token $((80 * 2 * 1024)) -- $L70 --dtype fp8_e5m2
# fp8_e4m3: + one f32 scale per (block of 16, layer, K|V, KV head) = 2 bytes a token per layer.
field kvcalc_llama70b_e4m3 .bytes_per_token $((80 * 2 * (1024 + 8 * 4 / 16))) -- $L70 --dtype fp8_e4m3
# fp8_e4m3 is staged like KIVI: one f16 block being filled per sequence, besides the pool
field kvcalc_llama70b_e4m3_stage .stage_bytes_per_seq $((80 * 2 * 16 * 1024 * 2)) -- $L70 --dtype fp8_e4m3
field kvcalc_llama70b_e5m2_no_stage .stage_bytes_per_seq 0 -- $L70 --dtype fp8_e5m2
# KIVI (kivi4 / kivi2): per layer and block of 16, K = 1024 channels x (a column of
# 16 codes + f16 scale + f16 min), V = 16 rows x 32 groups x (f16 scale + min + 32 codes).
field kvcalc_llama70b_kivi4 .bytes_per_token $((80 * (1024 * (8 + 4) + 16 * 32 * 20) / 16)) -- $L70 --dtype kivi4
field kvcalc_llama70b_kivi2 .bytes_per_token $((80 * (1024 * (4 + 4) + 16 * 32 * 12) / 16)) -- $L70 --dtype kivi2
# A block as allocated: its layers' planes, nothing added.
field kvcalc_kivi4_block .bytes_per_block $((80 * (1024 * 12 + 16 * 640))) -- $L70 --dtype kivi4
field kvcalc_int4_alias .dtype kivi4 -- $L70 --dtype int4
field kvcalc_int2_alias .dtype kivi2 -- $L70 --dtype INT2
# Blocks of 32 halve the per-channel key scales' share: K column 16 B + 4.
field kvcalc_kivi4_block32 .bytes_per_token $((80 * (1024 * (16 + 4) + 32 * 640) / 32)) -- $L70 --dtype kivi4 --block-size 32
# Llama-3.1-8B at 128000 tokens, f16: about 16 GB for one sequence.
field kvcalc_llama8b_128k_total .total_bytes 16777216000 -- $L8 --dtype f16 --ctx 128000
field kvcalc_llama8b_128k_blocks .blocks_per_seq 8000 -- $L8 --ctx 128000
field kvcalc_mha_32_kv_heads .total_bytes 67108864000 -- --layers 32 --kv-heads 32 --head-dim 128 --ctx 128000
field kvcalc_batch .total_bytes $((131072 * 1000 * 4)) -- $L8 --ctx 1000 --batch 4
field kvcalc_ctx_suffix .ctx 131072 -- $L8 --ctx 128K
# Whole blocks: 100 tokens take 7 blocks of 16 (112 slots); 12 slots are tail.
field kvcalc_allocated_whole_blocks .allocated_bytes $((7 * 16 * 131072)) -- $L8 --ctx 100
field kvcalc_tail_waste .tail_waste_bytes $((12 * 131072)) -- $L8 --ctx 100
field kvcalc_block_size_32 .allocated_bytes $((4 * 32 * 131072 * 2)) -- $L8 --ctx 100 --block-size 32 --batch 2
# GQA against MHA: 32 query heads on 8 KV heads is 4x.
field kvcalc_gqa_ratio .gqa_ratio 4 -- $L8 --heads 32
field kvcalc_gqa_mha_bytes .mha_bytes_per_token 524288 -- $L8 --heads 32
field kvcalc_gqa_saved .gqa_saved_bytes_per_token 393216 -- $L8 --heads 32

# Layer groups: gemma3-1b (26 layers, 22 local, W 512, 1 KV head of 256) at 32K: blocks of the 4
# global layers (4 x 16 KiB = 65536 B); 2048 of them global, 6 local groups x 33 blocks
G3="--layers 26 --kv-heads 1 --head-dim 256 --local-layers 22 --window 512 --ctx 32768"
field kvcalc_groups_global .layer_groups.global_bytes $((2048 * 65536)) -- $G3
field kvcalc_groups_local .layer_groups.local_bytes $((6 * 33 * 65536)) -- $G3
field kvcalc_groups_count .layer_groups.groups 7 -- $G3
expect_exit kvcalc_groups_need_a_global_layer 2 "--local-layers" -- "$PAGELLM" kvcalc --layers 4 --kv-heads 1 --head-dim 8 --local-layers 4 --window 8
expect_exit kvcalc_groups_window_alone 2 "--window" -- "$PAGELLM" kvcalc $L8 --window 64

out=$("$PAGELLM" kvcalc $L70 --dtype bf16 --heads 64 2>&1)
check kvcalc_text_per_token grep -q "bytes per token *327680 (320.00 KiB)" <<<"$out"
check kvcalc_text_gqa grep -q "GQA: 64 query heads share 8 KV heads (8x)" <<<"$out"
out=$("$PAGELLM" kvcalc $L8 --ctx 128000 2>&1)
check kvcalc_text_total grep -q "total bytes *16777216000 (15.62 GiB)" <<<"$out"
"$PAGELLM" kvcalc --help >"$T/help" 2>&1
check kvcalc_help_exit_0 grep -q -- "--kv-heads" "$T/help"

expect_exit kvcalc_unknown_flag 2 "--bogus" -- "$PAGELLM" kvcalc $L8 --bogus
expect_exit kvcalc_layers_zero 2 "--layers" -- "$PAGELLM" kvcalc --layers 0 --kv-heads 8 --head-dim 128
expect_exit kvcalc_kv_heads_negative 2 "--kv-heads" -- "$PAGELLM" kvcalc --layers 32 --kv-heads -8 --head-dim 128
expect_exit kvcalc_head_dim_zero 2 "--head-dim" -- "$PAGELLM" kvcalc --layers 32 --kv-heads 8 --head-dim 0
expect_exit kvcalc_ctx_zero 2 "--ctx" -- "$PAGELLM" kvcalc $L8 --ctx 0
expect_exit kvcalc_batch_negative 2 "--batch" -- "$PAGELLM" kvcalc $L8 --batch -2
expect_exit kvcalc_block_zero 2 "--block-size" -- "$PAGELLM" kvcalc $L8 --block-size 0
expect_exit kvcalc_heads_zero 2 "--heads" -- "$PAGELLM" kvcalc $L8 --heads 0
expect_exit kvcalc_layers_not_a_number 2 "--layers" -- "$PAGELLM" kvcalc --layers 3x --kv-heads 8 --head-dim 128
expect_exit kvcalc_unknown_dtype 2 "--dtype.*q5" -- "$PAGELLM" kvcalc $L8 --dtype q5
expect_exit kvcalc_missing_layers 2 "--layers" -- "$PAGELLM" kvcalc --kv-heads 8 --head-dim 128
expect_exit kvcalc_missing_head_dim 2 "--head-dim" -- "$PAGELLM" kvcalc --layers 2 --kv-heads 8
# q4_0 groups 32 elements of a token's KV row; 1 x 8 = 8 does not divide.
expect_exit kvcalc_dtype_does_not_fit 2 "--dtype q4_0.*multiple of 32" -- "$PAGELLM" kvcalc --layers 2 --kv-heads 1 --head-dim 8 --dtype q4_0
# KIVI values group 32 elements of a token's KV row: 1 x 8 does not divide either.
expect_exit kvcalc_kivi_does_not_fit 2 "--dtype kivi2.*multiple of 32" -- "$PAGELLM" kvcalc --layers 2 --kv-heads 1 --head-dim 8 --dtype kivi2
expect_exit kvcalc_heads_not_multiple 2 "--heads" -- "$PAGELLM" kvcalc $L8 --heads 12
expect_exit kvcalc_stray_argument 2 "extra" -- "$PAGELLM" kvcalc $L8 extra
