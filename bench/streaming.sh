#!/usr/bin/env bash
# bench/streaming.sh - the shape of StreamingLLM's table (Xiao et al. 2023,
# "Efficient Streaming Language Models with Attention Sinks", table 1) on
# stories260K, trained on 512-token sequences (its GGUF says 2048): one
# stream of STREAM_TOKENS tokens (default 2048 = 4 x 512) of
# tests/data/stories260K-samples.txt through ONE sequence, every token
# scored (`pagellm perplexity --stream`), with
#   (c) full attention within the context: the usual chunked perplexity,
#       --ctx 512 (each chunk's second half scored), for reference
#   (d) full attention over the whole stream (positions up to 4 x 512)
#   (a) window only:  --kv-sinks 0 --kv-window W
#   (b) sinks+window: --kv-sinks 4 --kv-window W (4 sink tokens pin one
#       block of 16, so the effective sinks are 16 tokens)
# Perplexity per 512-token segment of the stream, then over all of it, and
# over the whole text (13,031 tokens) for the windowed runs.
#   bash bench/streaming.sh        (or BENCH_ONLY=streaming make bench)
set -u
cd "$(dirname "$0")/.."
PL=${PAGELLM:-${BUILD:-build}/pagellm}
M=${STREAM_MODEL:-../shared/models/stories260K.gguf}
TXT=${STREAM_TEXT:-tests/data/stories260K-samples.txt}
N=${STREAM_TOKENS:-2048}
TH=${BENCH_THREADS:-2}
OUT=bench/out; mkdir -p "$OUT"
[ -f "$M" ] || { echo "streaming: $M not found" >&2; exit 1; }
chunks=$(( (N + 511) / 512 ))

row() { # label, then perplexity flags
  local label=$1; shift
  local j a
  j=$("$PL" perplexity -m "$M" -f "$TXT" -t "$TH" --stream --chunks "$chunks" --segment 512 --json "$@" 2>/dev/null) \
    || { printf '| %s | (failed) |\n' "$label"; return; }
  a=""
  if true; then # the whole text: ~1 min for full attention (13k positions)
    a=$("$PL" perplexity -m "$M" -f "$TXT" -t "$TH" --stream --json "$@" 2>/dev/null | jq -r '.ppl | . * 1000 | round / 1000')
  fi
  jq -r --arg l "$label" --arg all "${a:--}" \
    '"| \($l) | \(if .kv_window == 0 then "all (no window)" else "\(.kv_sinks_effective) + \(.kv_window)" end) | " + ([.segments[].ppl | . * 1000 | round / 1000 | tostring] | join(" | ")) + " | \(.ppl * 1000 | round / 1000) | \($all) |"' <<<"$j"
}

{
echo "stories260K, $N-token stream of $(basename "$TXT"), f16 KV, block 16"
echo
printf '| run | sinks + window (tokens) |'
for ((i = 0; i < chunks; i++)); do printf ' [%d, %d) |' $((i * 512)) $(((i + 1) * 512)); done
echo " all $N | whole text |"
printf '|---|---|'; for ((i = 0; i < chunks; i++)); do printf -- '---|'; done; echo '---|---|'
c=$("$PL" perplexity -m "$M" -f "$TXT" -t "$TH" --ctx 512 --json 2>/dev/null | jq -r '.ppl | . * 1000 | round / 1000')
printf '| (c) full attention, chunks of 512 (second halves scored) | 0 + 512 |'
for ((i = 0; i < chunks; i++)); do printf ' |'; done; echo " $c | |"
row "(d) full attention over the stream" 
row "(a) window only" --kv-sinks 0 --kv-window 448
row "(b) sinks + window" --kv-sinks 4 --kv-window 432
row "(b) sinks + window" --kv-sinks 4 --kv-window 448
row "(a) window only, small" --kv-sinks 0 --kv-window 64
row "(b) sinks + window, small" --kv-sinks 4 --kv-window 48
row "(b) sinks + window, small" --kv-sinks 4 --kv-window 64
} | tee "$OUT/streaming.md"
