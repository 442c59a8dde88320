#!/usr/bin/env bash
# bench/page_poll.sh - does an open web page slow decoding? One `pagellm
# serve` with a large KV pool (POLL_KV_MEM, default 1G = 104k blocks of
# stories260K: the snapshot is O(blocks), so a big pool is the hard case),
# then the same batched generation (n=4, POLL_TOKENS tokens each, greedy,
# ignore_eos) timed REPS times in each of three conditions, taking turns:
#   none   nobody polls
#   page   what an open page sends: GET /v1/kv?compact=1 every 0.4 s and
#          GET /metrics every 1 s
#   full   GET /v1/kv (the full JSON, ~70 bytes a block) every 0.4 s
# and prints the median generated tok/s of each, with the ratio to none.
#   bash bench/page_poll.sh     (BUILD, POLL_MODEL, POLL_REPS, POLL_THREADS)
set -u
cd "$(dirname "$0")/.."
PL=${PAGELLM:-${BUILD:-build}/pagellm}
M=${POLL_MODEL:-../shared/models/stories260K.gguf}
REPS=${POLL_REPS:-3}
TOK=${POLL_TOKENS:-1500}
TH=${POLL_THREADS:-2}
[ -f "$M" ] || { echo "page_poll: $M not found" >&2; exit 1; }
T=$(mktemp -d /tmp/pagellm-poll.XXXXXX)
SPID="" POLLERS=()
stop_pollers() { for p in "${POLLERS[@]+"${POLLERS[@]}"}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; POLLERS=(); }
cleanup() { stop_pollers; [ -n "$SPID" ] && kill "$SPID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

"$PL" serve -m "$M" --host 127.0.0.1 --port 0 -t "$TH" --kv-mem "${POLL_KV_MEM:-1G}" 2>"$T/serve.log" &
SPID=$!
PORT=""
for _ in $(seq 1 300); do
  PORT=$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*' "$T/serve.log" | sed 's/.*://')
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "page_poll: the server did not start: $(tail -3 "$T/serve.log")" >&2; exit 1; }
URL=http://127.0.0.1:$PORT

poll() { # path seconds: GET path every seconds until killed
  while :; do curl -s -o /dev/null "$URL$1"; sleep "$2"; done
}
start_pollers() {
  case $1 in
    page) poll "/v1/kv?compact=1" 0.4 & POLLERS+=($!); poll /metrics 1 & POLLERS+=($!) ;;
    full) poll /v1/kv 0.4 & POLLERS+=($!) ;;
  esac
}
run() { # prints generated tok/s of one request
  local t
  t=$(curl -s -o "$T/out.json" -w '%{time_total}' "$URL/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\":\"Once upon a time\",\"n\":4,\"max_tokens\":$TOK,\"temperature\":0,\"ignore_eos\":true}")
  jq -r --arg t "$t" '.usage.completion_tokens / ($t | tonumber)' "$T/out.json"
}
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

run >/dev/null # warm-up
blocks=$(curl -s "$URL/v1/kv?compact=1" | jq .blocks_total)
for mode in none page full; do : >"$T/$mode"; done
for r in $(seq 1 "$REPS"); do
  for mode in none page full; do
    start_pollers "$mode"
    sleep 0.5
    run >>"$T/$mode"
    stop_pollers
  done
done
snap() { curl -s -o /dev/null -w '%{time_total}' "$URL$1" | awk '{printf "%.1f", $1 * 1000}'; }
echo "page_poll: $(basename "$M"), $blocks KV blocks, n=4 x $TOK tokens, $TH threads, $REPS reps, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null)"
echo "one snapshot: compact $(snap '/v1/kv?compact=1') ms, full $(snap /v1/kv) ms (the engine thread only copies; the rest is the HTTP thread)"
base=$(median <"$T/none")
for mode in none page full; do
  m=$(median <"$T/$mode")
  printf "%-5s %10.1f tok/s  %.3f x none   (runs: %s)\n" "$mode" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN {print a / b}')" \
    "$(tr '\n' ' ' <"$T/$mode" | awk '{for (i = 1; i <= NF; i++) printf "%.0f ", $i}')"
done
