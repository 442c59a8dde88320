#!/usr/bin/env bash
# make bench: pagellm side by side with llama.cpp's peer-bench in the same
# run, on models made here by pagellm synth + quantize under /tmp.
#   BENCH_SHAPES="110m tinyllama-1.1b"  BENCH_TYPES="q8_0 q4_0"  BENCH_REPS=3
#   BENCH_ONLY="kv-memory prefix serve"  runs only those sections (of:
#   tokenizer generation cache kv-memory prefix streaming serve kv-dtype speed attention)
#   speed: BENCH_SPEED_MODELS="110m:q4_0,..."  BENCH_SPEED_TESTS="pp512,tg128,..."
#   (defaults: see pagellm bench speed --help)
# Prints medians and the pagellm/peer ratio; writes bench/out/*.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}; export BUILD
PL=${PAGELLM:-$BUILD/pagellm}
PEER=${PEER_DIR:-/tmp/llamacpp-peer}/peer-bench
MD=${BENCH_MODELS:-/tmp/pagellm-bench}
SHAPES=${BENCH_SHAPES:-110m tinyllama-1.1b}
TYPES=${BENCH_TYPES:-q8_0 q4_0}
REPS=${BENCH_REPS:-3}
NP=${BENCH_NP:-128}; NG=${BENCH_NG:-64}; T=${BENCH_THREADS:-2}
OUT=bench/out; mkdir -p "$OUT" "$MD"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > 0 ? a / b : 0) }'; }
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
want() { [ -z "${BENCH_ONLY:-}" ] || [[ " $BENCH_ONLY " == *" $1 "* ]]; }

model() { # shape type -> path (made once)
  local s=$1 t=$2 f16="$MD/$1-f16.gguf" out="$MD/$1-$2.gguf"
  [ -s "$f16" ] || "$PL" synth --shape "$s" --seed 1 --type f16 -o "$f16" >&2 || return 1
  [ "$t" = f16 ] && { echo "$f16"; return; }
  [ -s "$out" ] || "$PL" quantize "$f16" "$out" "$t" >&2 || return 1
  echo "$out"
}

if want tokenizer; then
echo "== tokenizer speed"
[ -f bench/bench_tokenize.sh ] && bash bench/bench_tokenize.sh
fi

if want generation; then
echo "== generation vs llama.cpp (prompt $NP tokens, $NG generated, $T threads, median of $REPS)"
printf '%-16s %-6s %12s %12s %7s %12s %12s %7s\n' model type pp_pagellm pp_peer ratio tg_pagellm tg_peer ratio
for s in $SHAPES; do for t in $TYPES; do
  m=$(model "$s" "$t") || { echo "cannot make $s $t"; continue; }
  ppa=(); tga=(); ppb=(); tgb=()
  for r in $(seq "$REPS"); do
    j=$("$PL" bench gen -m "$m" --n-prompt "$NP" --n-gen "$NG" -t "$T" --json)
    ppa+=("$(field prefill_tok_s <<<"$j")"); tga+=("$(field decode_tok_s <<<"$j")")
    if [ -x "$PEER" ]; then
      j=$("$PEER" -m "$m" -np "$NP" -ng "$NG" -t "$T" 2>/dev/null)
      ppb+=("$(field prefill_tok_s <<<"$j")"); tgb+=("$(field decode_tok_s <<<"$j")")
    fi
  done
  pa=$(printf '%s\n' "${ppa[@]}" | median); ta=$(printf '%s\n' "${tga[@]}" | median)
  pb=$(printf '%s\n' "${ppb[@]:-0}" | median); tb=$(printf '%s\n' "${tgb[@]:-0}" | median)
  printf '%-16s %-6s %12.1f %12.1f %6.2fx %12.1f %12.1f %6.2fx\n' "$s" "$t" "$pa" "$pb" \
    "$(ratio "$pa" "$pb")" "$ta" "$tb" "$(ratio "$ta" "$tb")"
done; done | tee "$OUT/generation.txt"
fi

if want cache; then
echo "== decode time with and without the KV cache (110m q8_0)"
m=$(model 110m q8_0) && "$PL" bench cache -m "$m" -t "$T" --svg "$OUT/kv-cache-scaling.svg" | tee "$OUT/kv-cache-scaling.txt"
echo "plot: $OUT/kv-cache-scaling.svg"
fi

# --- KV memory, prefix cache and serving (bench/bench_*.c; see their headers
# for the methods). BENCH_SERVE="110m q4_0" picks the serving model.
SHARED=${SHARED:-../shared}
STORIES=$SHARED/models/stories260K.gguf

if want kv-memory; then
echo "== KV memory: paged vs static reservation in the same KV pool (64 requests)"
if [ -f "$STORIES" ]; then
  # stories260K was trained on 512-token sequences: lengths 32..256
  "$PL" bench kv-memory -m "$STORIES" --max-len 256 -t "$T" | tee "$OUT/kv-memory-stories260K.txt"
fi
m=$(model tiny f16) && "$PL" bench kv-memory -m "$m" -t "$T" | tee "$OUT/kv-memory-tiny.txt"
fi

if want prefix; then
echo "== prefix cache: time to first token behind a shared 2,000-token system prompt"
m=$(model tiny f16) && "$PL" bench prefix -m "$m" -t "$T" --reps "$REPS" | tee "$OUT/prefix-tiny.txt"
m=$(model 110m q8_0) && "$PL" bench prefix -m "$m" -t "$T" | tee "$OUT/prefix-110m.txt"
fi

if want streaming; then
echo "== streaming: sliding window + attention sinks past the context (stories260K)"
bash bench/streaming.sh
fi

if want kv-dtype; then
# decode at depth 2048 per KV dtype (ours), beside the peer with f16 and
# q8_0 KV (flash attention on, as llama.cpp needs for a quantized V cache)
KD_SHAPE=${BENCH_KVD_SHAPE:-tinyllama-1.1b}; KD_TYPE=${BENCH_KVD_TYPE:-q4_0}
echo "== KV dtypes: decode tok/s at depth 2048 ($KD_SHAPE $KD_TYPE, $T threads, median of $REPS)"
if m=$(model "$KD_SHAPE" "$KD_TYPE"); then
  "$PL" bench kv-dtype -m "$m" --depth 2048 --n-gen 32 -t "$T" --reps "$REPS" | tee "$OUT/kv-dtype.txt"
  if [ -x "$PEER" ]; then
    for kv in f16 q8_0; do
      r=()
      for i in $(seq "$REPS"); do
        # the context filled by a 2048-token prompt: peer-bench decodes its
        # -depth fill in one batch of max(np, 512) tokens, so -np 1 -depth
        # 2048 aborts (GGML_ASSERT n_tokens_all <= n_batch)
        r+=("$("$PEER" -m "$m" -np 2048 -ng 32 -fa 1 -ctk $kv -ctv $kv -t "$T" 2>/dev/null | field decode_tok_s)")
      done
      printf 'peer %-6s %10.2f tok/s (llama.cpp, -fa 1, decode after a 2048-token prompt)\n' "$kv" "$(printf '%s\n' "${r[@]}" | median)"
    done | tee -a "$OUT/kv-dtype.txt"
  fi
fi
fi

if want serve; then
read -r SV_SHAPE SV_TYPE <<<"${BENCH_SERVE:-110m q4_0}"
echo "== serving: streaming clients vs llama.cpp batched decode ($SV_SHAPE $SV_TYPE, $T threads)"
m=$(model "$SV_SHAPE" "$SV_TYPE") && "$PL" bench serve -m "$m" -t "$T" --clients 1,4,8,16 --max-tokens "$NG" \
  --prompt-tokens 32 --peer "$PEER" | tee "$OUT/serve.txt"
fi

if want attention; then
echo "== decode attention, cache cold, against a plain read of the same KV bytes"
bash bench/bench_attention.sh | tee "$OUT/attention.txt"
fi

if want speed; then
echo "== speed vs llama.cpp: pp512, tg128, tg128@d2048, 8 sequences, decode roofline, peak RSS ($T threads, median of $REPS)"
"$PL" bench speed --dir "$MD" -t "$T" --reps "$REPS" --peer "$PEER" \
  ${BENCH_SPEED_MODELS:+--models "$BENCH_SPEED_MODELS"} ${BENCH_SPEED_TESTS:+--tests "$BENCH_SPEED_TESTS"} \
  --json-out "$OUT/speed.json" | tee "$OUT/speed.txt"
fi
