#!/usr/bin/env bash
# test_deepseek2.sh - deepseek2 (multi-head latent attention, its latent KV
# kind, V3-style experts) against llama.cpp, and what synth, inspect, run
# and serve say of it.
#
# The synthetic tiny f32 file (q LoRA, kv_lora_rank 64, rope 32; sigmoid
# routing with exp_probs_b over 2 of 4 expert groups, a shared expert, one
# leading dense layer) and the tiny-v2 file (V2-Lite's plain q and
# softmax routing, 2 shared experts) give llama.cpp's greedy tokens exactly on two
# prompts of 40 tokens, also with a chunked prefill, an f32 cache and YaRN
# (with deepseek2's mscale), and its perplexity on the same ids within 1e-4
# (f32 KV, flash attention off on both sides). f16, q8_0 and llama.cpp's
# own q4_k_m copies agree in perplexity within 1.5%; the f16 and q4_k_m
# copies give the peer's greedy tokens (or, at the first difference, a near
# tie of its logits, as test_moe.sh asks). The all-q8_0 copy parts from the
# peer after a few tokens at a near tie of the *routing*, not the logits:
# q8_0 activations turn float-order differences into int8 steps, and an
# expert choice with a margin of 3e-4 flips (measured: forcing the other
# expert at that one choice takes the logit difference from 4.3 to 0.09);
# its first difference is reported, not asserted. KV bytes per token are
# layers x (kv_lora_rank + rope) x dtype (fp8_e4m3: plus a 4-byte scale a block and layer;
# kivi4/kivi2: 4/2 bits an element plus an f16 scale and zero a channel, block and layer).
# Legacy files (`synth --legacy-kv-b`: one attn_kv_b a layer, MHA metadata) run as llama.cpp runs
# them (its non-absorbed form): the same greedy tokens and perplexity.
source "$(dirname "$0")/lib.sh"

PDIR=$(dirname "$PEER")
PEER_PPL=$PDIR/peer-ppl QUANT=$PDIR/peer-quantize LOGITS=$PDIR/peer-logits
TEXT=tests/data/stories260K-samples.txt

for t in f32 f16 q8_0; do
  "$PAGELLM" synth --arch deepseek2 --shape tiny --type $t -o "$T/ds2-$t.gguf" 2>"$T/synth.err" ||
    fail "synth_deepseek2_$t" "$(head -c 300 "$T/synth.err")"
done
"$PAGELLM" synth --arch deepseek2 --shape tiny --rope-scaling yarn -o "$T/ds2-yarn.gguf" 2>/dev/null
"$PAGELLM" synth --arch deepseek2 --shape tiny-v2 -o "$T/ds2-v2.gguf" 2>/dev/null

# --- inspect: the latent kind and its formula (4 x (64 + 32) x 2 B at f16)
j=$("$PAGELLM" inspect "$T/ds2-f32.gguf" --json)
check inspect_latent_kind jq -e '.arch == "deepseek2" and .kv_kind == "latent" and .kv_lora_rank == 64 and .rope_dim == 32' <<<"$j"
check inspect_latent_bytes_per_token jq -e '.bytes_per_token == 4 * (64 + 32) * 2 and .kv_bytes_per_token.f32 == 4 * 96 * 4
  and .kv_bytes_per_token.q8_0 == 4 * 96 / 32 * 34 and .kv_bytes_per_token.q4_0 == 4 * 96 / 32 * 18
  and .kv_bytes_per_token.fp8_e5m2 == 4 * 96 and .kv_bytes_per_token.fp8_e4m3 == 4 * (96 * 16 + 4) / 16
  and .kv_bytes_per_token.kivi4 == 4 * (96 * 16 / 2 + 96 * 4) / 16
  and .kv_bytes_per_token.kivi2 == 4 * (96 * 16 / 4 + 96 * 4) / 16' <<<"$j"
check inspect_experts jq -e '.n_expert == 8 and .n_expert_used == 2' <<<"$j"
check inspect_text_names_the_kind bash -c "'$PAGELLM' inspect '$T/ds2-f32.gguf' | grep -q 'latent kind, MLA) = 4 layers x (kv_lora_rank 64 + rope dims 32)'"
# what the run held is the same formula
r=$("$PAGELLM" run -m "$T/ds2-f32.gguf" -p "Once upon a time" -n 4 --temp 0 --json 2>/dev/null)
check run_kv_bytes_per_token jq -e '.kv.bytes_per_token == 768' <<<"$r"
r=$("$PAGELLM" run -m "$T/ds2-f32.gguf" -p "Once upon a time" -n 4 --temp 0 --kv-dtype q8_0 --json 2>/dev/null)
check run_q8_0_latent_cache jq -e '.kv.bytes_per_token == 408 and (.gen_ids | length) == 4' <<<"$r"
# the cache's layouts and modes give the same greedy tokens
ref=$("$PAGELLM" run -m "$T/ds2-f32.gguf" -p "Once upon a time, the dog" -n 20 --temp 0 --ignore-eos --json 2>/dev/null | jq -c .gen_ids)
for mode in --no-kv-cache "--kv-layout static" "-t 1"; do
  # shellcheck disable=SC2086
  got=$("$PAGELLM" run -m "$T/ds2-f32.gguf" -p "Once upon a time, the dog" -n 20 --temp 0 --ignore-eos --json $mode 2>/dev/null | jq -c .gen_ids)
  check "same_tokens_${mode// /_}" test -n "$ref" -a "$got" = "$ref"
done
r=$("$PAGELLM" run -m "$T/ds2-f32.gguf" -p "Once upon a time" -n 4 --temp 0 --kv-dtype q4_0 --json 2>/dev/null)
check run_q4_0_latent_cache jq -e '.kv.bytes_per_token == 216 and (.gen_ids | length) == 4' <<<"$r"
# fp8 latent rows: e5m2 a byte an element; e4m3 staged (the block being filled in f16, sealed with a
# block scale when full), so its greedy tokens do not depend on how the prompt is chunked
r=$("$PAGELLM" run -m "$T/ds2-f32.gguf" -p "Once upon a time" -n 4 --temp 0 --kv-dtype fp8_e5m2 --json 2>/dev/null)
check run_fp8_e5m2_latent_cache jq -e '.kv.bytes_per_token == 384 and (.gen_ids | length) == 4' <<<"$r"
long_prompt="the little cat was sad because the dog ran away and the sun went down over the hills and far away"
e4=$("$PAGELLM" run -m "$T/ds2-f32.gguf" -p "$long_prompt" -n 24 --temp 0 --ignore-eos --kv-dtype fp8_e4m3 --json 2>/dev/null)
check run_fp8_e4m3_latent_cache jq -e '.kv.bytes_per_token == 385 and (.prompt_ids | length) > 48 and (.gen_ids | length) == 24' <<<"$e4"
for b in 1 5; do
  got=$("$PAGELLM" run -m "$T/ds2-f32.gguf" -p "$long_prompt" -n 24 --temp 0 --ignore-eos --kv-dtype fp8_e4m3 -b $b --json 2>/dev/null | jq -c .gen_ids)
  check "fp8_e4m3_same_tokens_batch_$b" test -n "$got" -a "$got" = "$(jq -c .gen_ids <<<"$e4")"
done
# KIVI latent rows: per channel over each block, staged like e4m3. Batch-invariance on the q8_0
# file: f32 matrices take another path up to 4 rows (test_deepseek2.c), and a float-order
# difference in a row can move a 2-bit code, then a greedy token
for dt in kivi4:288 kivi2:192; do
  k=${dt%%:*} bpt=${dt##*:}
  kv=$("$PAGELLM" run -m "$T/ds2-q8_0.gguf" -p "$long_prompt" -n 24 --temp 0 --ignore-eos --kv-dtype "$k" --json 2>/dev/null)
  check "run_${k}_latent_cache" jq -e ".kv.bytes_per_token == $bpt and (.gen_ids | length) == 24" <<<"$kv"
  for b in 1 5; do
    got=$("$PAGELLM" run -m "$T/ds2-q8_0.gguf" -p "$long_prompt" -n 24 --temp 0 --ignore-eos --kv-dtype "$k" -b $b --json 2>/dev/null | jq -c .gen_ids)
    check "${k}_same_tokens_batch_$b" test -n "$got" -a "$got" = "$(jq -c .gen_ids <<<"$kv")"
  done
done
check kvcalc_deepseek_v3_kivi4 bash -c "'$PAGELLM' kvcalc --layers 61 --kv-lora-rank 512 --rope-dim 64 --dtype kivi4 --json |
  jq -e '.kind == \"latent\" and .bytes_per_token == 61 * (576 / 2 + 576 * 4 / 16) and .stage_bytes_per_seq == 61 * 16 * 576 * 2'"
check kvcalc_deepseek_v3_kivi2 bash -c "'$PAGELLM' kvcalc --layers 61 --kv-lora-rank 512 --rope-dim 64 --dtype kivi2 --block-size 32 --json |
  jq -e '.bytes_per_token == 61 * (576 / 4 + 576 * 4 / 32)'"
expect_exit kvcalc_latent_kivi_needs_32 2 'kivi4.*multiple of 32' -- \
  "$PAGELLM" kvcalc --layers 2 --kv-lora-rank 40 --rope-dim 8 --dtype kivi4
# --kv-window over latent rows: blocks past sinks + window are freed and the kept rows' k_pe turned
# to their new positions (kv_shift.h); the cache holds at most 5 blocks (16 sinks + 64) however far it
# runs, and a prefill in pieces of 1 or 5 gives the same tokens (the q8_0 file, as above)
for dt in f16 q8_0 fp8_e4m3 kivi4; do
  w=$("$PAGELLM" run -m "$T/ds2-q8_0.gguf" -p "$long_prompt" -n 300 --temp 0 --ignore-eos --kv-dtype $dt \
    --kv-window 64 --kv-sinks 4 --json 2>"$T/win.err")
  check "kv_window_latent_${dt}_runs_past_the_window" jq -e '(.gen_ids | length) == 300 and .kv.tokens <= 80
    and .kv.blocks_total == 5 and .kv.bytes_used <= 5 * .kv.bytes_per_token * 16 + 5 * 128' <<<"$w"
  for b in 1 5; do
    got=$("$PAGELLM" run -m "$T/ds2-q8_0.gguf" -p "$long_prompt" -n 300 --temp 0 --ignore-eos --kv-dtype $dt \
      --kv-window 64 --kv-sinks 4 -b $b --json 2>/dev/null | jq -c .gen_ids)
    check "kv_window_latent_${dt}_same_tokens_batch_$b" test -n "$got" -a "$got" = "$(jq -c .gen_ids <<<"$w")"
  done
done
# the window's tokens differ from a full cache's once it slides (the dropped rows are gone), and
# not before: the first 80 - prompt tokens agree (kivi4 both, $w the last of the loop)
full=$("$PAGELLM" run -m "$T/ds2-q8_0.gguf" -p "$long_prompt" -n 300 --temp 0 --ignore-eos --ctx 512 --kv-dtype kivi4 --json 2>/dev/null)
check kv_window_latent_same_until_it_slides python3 -c '
import json, sys
w, f = json.loads(sys.argv[1]), json.loads(sys.argv[2])
n = 80 - len(w["prompt_ids"])
sys.exit(0 if n > 0 and w["gen_ids"][:n] == f["gen_ids"][:n] and w["gen_ids"] != f["gen_ids"] else 1)' "$w" "$full"
expect_exit kv_window_latent_yarn_refused 1 'kv_window.*YaRN' -- \
  "$PAGELLM" run -m "$T/ds2-yarn.gguf" -p hi -n 1 --kv-window 64
expect_exit kvcalc_latent_needs_rope_dim 2 '--rope-dim is required' -- "$PAGELLM" kvcalc --layers 27 --kv-lora-rank 512
check kvcalc_deepseek_v3_bf16 bash -c "'$PAGELLM' kvcalc --layers 61 --kv-lora-rank 512 --rope-dim 64 --dtype bf16 --json |
  jq -e '.kind == \"latent\" and .bytes_per_token == 70272 and .total_bytes == 70272 * 4096'"
expect_exit synth_legacy_kv_b_is_deepseek2s 2 'legacy-kv-b is for --arch deepseek2' -- \
  "$PAGELLM" synth --shape tiny --legacy-kv-b -o "$T/x.gguf"
expect_exit synth_deepseek2_shape 1 "shape '110m' \(tiny, tiny-v2, mla-bench, deepseek2-lite\)" -- \
  "$PAGELLM" synth --arch deepseek2 --shape 110m -o "$T/x.gguf"

# --- serve: a request, the prefix cache and fork over latent blocks, per KV dtype
serve_checks() { # DTYPE BYTES_PER_TOKEN
  local dt=$1 bpt=$2
  serve_start "$T/serve-$dt.log" "$T/ds2-q8_0.gguf" --ctx 256 --kv-dtype "$dt"
  if [ -z "$PORT" ]; then fail "serve_starts_$dt" "$(tail -3 "$T/serve-$dt.log")"; return; fi
  local body a b c
  body=$(curl -s -m 30 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}')
  check "serve_completion_$dt" jq -e '.choices[0].text | length > 0' <<<"$body"
  check "serve_completion_tokens_$dt" jq -e '.usage.completion_tokens == 8' <<<"$body"
  # a repeated 40-token prompt is served from the cache with the same greedy text; n = 2 shares the
  # prompt's blocks and both samples agree
  long='{"prompt":"the little cat was sad because the dog ran away and the sun went down over the hills","max_tokens":12,"temperature":0}'
  a=$(curl -s -m 30 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$long")
  b=$(curl -s -m 30 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$long")
  check "serve_prefix_cache_hit_$dt" jq -e '.usage.prompt_tokens_details.cached_tokens >= 16' <<<"$b"
  check "serve_prefix_cache_same_text_$dt" test "$(jq -r '.choices[0].text' <<<"$a")" = "$(jq -r '.choices[0].text' <<<"$b")"
  c=$(curl -s -m 30 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "${long%\}},\"n\":2}")
  check "serve_fork_n2_$dt" jq -e '(.choices | length) == 2 and .choices[0].text == .choices[1].text' <<<"$c"
  check "serve_kv_view_latent_$dt" bash -c "curl -s -m 10 http://127.0.0.1:$PORT/v1/kv |
    jq -e '.kv_kind == \"latent\" and .n_kv_heads == 1 and .head_dim == 96 and .bytes_per_token == $bpt'"
  check "serve_fork_same_as_alone_$dt" test "$(jq -r '.choices[0].text' <<<"$c")" = "$(jq -r '.choices[0].text' <<<"$a")"
  kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
}
serve_checks f16 768
# fp8_e4m3: prefix hits are whole sealed blocks (the token-granular tail copy is off for staged dtypes)
serve_checks fp8_e4m3 385
serve_checks kivi4 288

# --- the disk tier: a KIVI latent entry written by one server is served to the next
DK=$T/kvdisk-kivi
for run in a b; do
  serve_start "$T/serve-disk-$run.log" "$T/ds2-q8_0.gguf" --ctx 256 --kv-dtype kivi4 --kv-disk "$DK" --kv-disk-max 64M \
    --kv-tier-timeout-ms 2000
  if [ -z "$PORT" ]; then fail "kv_disk_kivi4_latent_start_$run" "$(tail -3 "$T/serve-disk-$run.log")"; break; fi
  curl -s -m 30 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"the little cat was sad because the dog ran away and the sun went down over the hills","max_tokens":12,"temperature":0}' \
    >"$T/disk-$run.json"
  kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
done
check kv_disk_kivi4_latent_round_trip jq -e --slurpfile a "$T/disk-a.json" \
  '.usage.prompt_tokens_details.cached_tokens >= 16 and .choices[0].text == $a[0].choices[0].text' "$T/disk-b.json"

if ! have_peer; then skip deepseek2_vs_llama_cpp "llama.cpp peer not built (make peer)"; exit 0; fi

gen() { # FILE PROMPT N [our flags]: greedy ids, ours then the peer's (peer flags in PEER_FLAGS)
  local f=$1 p=$2 n=$3; shift 3
  "$PAGELLM" run -m "$f" -p "$p" -n "$n" --temp 0 --ignore-eos --json "$@" 2>/dev/null | jq -c '[.prompt_ids, .gen_ids]'
  "$PEER" -m "$f" -p "$p" -ng "$n" -t 1 $PEER_FLAGS 2>/dev/null | jq -c '[.prompt_ids, .gen_ids]'
}
same_as_peer() { # NAME FILE PROMPT [our flags]
  local name=$1 f=$2 p=$3; shift 3
  local out; out=$(gen "$f" "$p" 40 "$@")
  local a b; a=$(sed -n 1p <<<"$out") b=$(sed -n 2p <<<"$out")
  if [ -n "$a" ] && [ "$a" == "$b" ]; then pass "$name"; else fail "$name" "ours $a peer $b"; fi
}

# tokens_agree FILE: 32 greedy tokens equal, or first different at a near
# tie of llama.cpp's logits (both choices within 0.1 of its best)
tokens_agree() {
  local out; out=$(gen "$1" "Once upon a time" 32)
  python3 tests/cli/tokens_agree.py "$LOGITS" "$1" 0.1 "$T/l.f32" "$(sed -n 1p <<<"$out")" "$(sed -n 2p <<<"$out")"
}

within() { python3 -c "import sys; a,b,t=map(float,sys.argv[1:4]); sys.exit(0 if abs(a-b) <= t*b else 1)" "$1" "$2" "$3"; }
ppl_pair() { # FILE KV -> "ours peer" on the same ids, chunks of 128, flash attention off in the peer
  "$PAGELLM" tokenize -m "$1" --json -f "$TEXT" | jq -r '.ids | map(tostring) | join(" ")' >"$T/ids.txt"
  echo "$("$PAGELLM" perplexity -m "$1" -f "$TEXT" --ctx 128 --chunks 16 --kv-dtype "$2" --json 2>/dev/null | jq -r .ppl)" \
       "$("$PEER_PPL" -m "$1" -ids-file "$T/ids.txt" -c 128 -chunks 16 -t 1 -ctk "$2" -ctv "$2" 2>/dev/null | jq -r .ppl)"
}

# --- f32: exactly llama.cpp's greedy tokens
PEER_FLAGS=""
same_as_peer f32_greedy_as_llama_cpp "$T/ds2-f32.gguf" "Once upon a time, the dog"
same_as_peer f32_greedy_as_llama_cpp_2 "$T/ds2-f32.gguf" "the little cat was sad because"
same_as_peer f32_chunked_prefill_as_llama_cpp "$T/ds2-f32.gguf" "Once upon a time, the dog" --batch 3
same_as_peer yarn_greedy_as_llama_cpp "$T/ds2-yarn.gguf" "Once upon a time, the dog"
same_as_peer v2_plain_q_greedy_as_llama_cpp "$T/ds2-v2.gguf" "Once upon a time, the dog"
same_as_peer v2_plain_q_greedy_as_llama_cpp_2 "$T/ds2-v2.gguf" "the little cat was sad because"
PEER_FLAGS="-ctk f32 -ctv f32"
same_as_peer f32_cache_greedy_as_llama_cpp "$T/ds2-f32.gguf" "the little cat was sad because" --kv-dtype f32
PEER_FLAGS=""
# legacy files (one attn_kv_b a layer, no key_length_mla): llama.cpp runs them in its non-absorbed
# (MHA) form, we split attn_kv_b at load into the absorbed matrices; the same greedy tokens
for v in tiny tiny-v2; do
  "$PAGELLM" synth --arch deepseek2 --shape $v --legacy-kv-b -o "$T/ds2-legacy-$v.gguf" 2>/dev/null
done
"$PAGELLM" synth --arch deepseek2 --shape tiny --legacy-kv-b --type q8_0 -o "$T/ds2-legacy-q8_0.gguf" 2>/dev/null
same_as_peer legacy_kv_b_greedy_as_llama_cpp "$T/ds2-legacy-tiny.gguf" "Once upon a time, the dog"
same_as_peer legacy_kv_b_chunked_prefill_as_llama_cpp "$T/ds2-legacy-tiny.gguf" "the little cat was sad because" --batch 3
same_as_peer legacy_kv_b_v2_greedy_as_llama_cpp "$T/ds2-legacy-tiny-v2.gguf" "the little cat was sad because"
PEER_FLAGS="-ctk f32 -ctv f32"
same_as_peer legacy_kv_b_f32_cache_greedy_as_llama_cpp "$T/ds2-legacy-tiny.gguf" "the little cat was sad because" --kv-dtype f32
PEER_FLAGS=""
if why=$(tokens_agree "$T/ds2-legacy-q8_0.gguf"); then pass legacy_kv_b_q8_0_tokens_as_llama_cpp
else echo "INFO deepseek2 legacy q8_0 (the routing near tie of the header applies): $why"; fi
check yarn_changes_the_tokens test "$(gen "$T/ds2-yarn.gguf" "Once upon a time, the dog" 40 | head -1)" != \
  "$(gen "$T/ds2-f32.gguf" "Once upon a time, the dog" 40 | head -1)"

if [ -x "$PEER_PPL" ]; then
  for v in f32 v2 legacy-tiny; do
    read -r x y <<<"$(ppl_pair "$T/ds2-$v.gguf" f32)"
    echo "INFO deepseek2 $v: perplexity pagellm $x, llama.cpp $y"
    if [ -n "$x" ] && [ -n "$y" ] && within "$x" "$y" 1e-4; then pass "${v}_perplexity_as_llama_cpp"
    else fail "${v}_perplexity_as_llama_cpp" "pagellm '$x' llama.cpp '$y'"; fi
  done
else
  skip deepseek2_perplexity "peer-ppl not built"
fi

# --- quantized copies: ours (f16, q8_0) and llama.cpp's own q4_k_m
[ -x "$QUANT" ] && "$QUANT" "$T/ds2-f32.gguf" "$T/ds2-q4_k_m.gguf" q4_k_m >"$T/q.log" 2>&1
for t in f16 q8_0 q4_k_m; do
  q=$T/ds2-$t.gguf
  [ -f "$q" ] || { fail "${t}_file" "$(tail -c 300 "$T/q.log" 2>/dev/null)"; continue; }
  if [ -x "$PEER_PPL" ]; then
    read -r x y <<<"$(ppl_pair "$q" f16)"
    echo "INFO deepseek2 $t: perplexity pagellm $x, llama.cpp $y"
    if [ -n "$x" ] && [ -n "$y" ] && within "$x" "$y" 0.015; then pass "${t}_perplexity_as_llama_cpp"
    else fail "${t}_perplexity_as_llama_cpp" "pagellm '$x' llama.cpp '$y'"; fi
  fi
  if why=$(tokens_agree "$q"); then pass "${t}_tokens_as_llama_cpp"; [ -n "$why" ] && echo "INFO deepseek2 $t: $why"
  elif [ "$t" = q8_0 ]; then echo "INFO deepseek2 q8_0 (routing near tie, see the header): $why"
  else fail "${t}_tokens_as_llama_cpp" "$why"; fi
done
exit 0
