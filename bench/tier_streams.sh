#!/usr/bin/env bash
# bench/tier_streams.sh - what the disk tier's write-behind costs running
# decodes (issue 31: under 8 concurrent streams, < 5% of throughput).
#
# Each run starts a fresh `pagellm serve` (synthetic 110m q8_0, -t 2,
# --max-seqs 8), once without a tier and once with --kv-disk on an empty
# directory, alternating which goes first, and sends STREAMS concurrent
# streaming completions with distinct PROMPT-token prompts (token ids: no
# prefix is shared, so every prompt block is sealed and written behind) and
# MAX_TOKENS tokens each (ignore_eos). Per run, from /metrics and the clock:
#   itl_ms   mean inter-token latency (pagellm_inter_token_latency_seconds)
#   tok_s    completion tokens / wall time of the whole batch (pays prefill)
#   dropped  writes the disk tier dropped (pagellm_kv_tier_dropped_writes_total)
#   mib      bytes it wrote
# then the medians of each mode and the loss (with / without - 1).
#   bash bench/tier_streams.sh            RUNS=6 STREAMS=8 PROMPT=337 MAX_TOKENS=64
# PAGELLM_BASE=path/to/other/pagellm adds a third mode, `base`: that binary
# with --kv-disk (e.g. a build of an earlier commit), in the same rotation.
# The machine may be shared: the modes rotate so all meet the same load.
set -u
cd "$(dirname "$0")/.."
PL=${PAGELLM:-build/pagellm}
BASE=${PAGELLM_BASE:-}
M=${TIER_MODEL:-/tmp/tier-streams-110m.gguf}
RUNS=${RUNS:-6}
STREAMS=${STREAMS:-8}
PROMPT=${PROMPT:-337}
MAXT=${MAX_TOKENS:-64}
TH=${BENCH_THREADS:-2}
WORK=$(mktemp -d /tmp/tier-streams.XXXXXX)
SRV=
cleanup() {
  [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
[ -x "$PL" ] || { echo "tier_streams: $PL not built" >&2; exit 1; }
[ -f "$M" ] || "$PL" synth --shape 110m --type q8_0 -o "$M" >/dev/null || { echo "tier_streams: cannot make $M" >&2; exit 1; }

# $1 = request number, $2 = run: a prompt of PROMPT token ids unique to both
prompt_json() {
  awk -v n="$PROMPT" -v r="$1" -v run="$2" 'BEGIN {
    printf "[1"; for (i = 1; i < n; i++) printf ",%d", 100 + (i * 7 + r * 131 + run * 977 + (i == 1 ? r * 17 + run * 3 : 0)) % 3000; printf "]" }'
}

metric() { # name filter (a substring of the line), from $WORK/metrics
  awk -v pat="$1" 'index($0, pat) == 1 { v = $NF } END { print v + 0 }' "$WORK/metrics"
}

# $1 = mode (none|disk|base), $2 = run; prints "itl_ms tok_s dropped mib"
one_run() {
  local mode=$1 run=$2 port args=() i t0 t1 bin=$PL
  port=$(( 20000 + (RANDOM % 20000) ))
  if [ "$mode" != none ]; then rm -rf "$WORK/disk"; args=(--kv-disk "$WORK/disk"); fi
  [ "$mode" = base ] && bin=$BASE
  "$bin" serve -m "$M" --host 127.0.0.1 --port "$port" -t "$TH" --max-seqs "$STREAMS" \
    --ctx $((PROMPT + MAXT + 16)) "${args[@]}" >"$WORK/serve.log" 2>&1 &
  SRV=$!
  for i in $(seq 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
  for i in $(seq "$STREAMS"); do
    printf '{"prompt":%s,"max_tokens":%d,"temperature":0,"ignore_eos":true,"stream":true}' \
      "$(prompt_json "$i" "$run")" "$MAXT" >"$WORK/req$i.json"
  done
  local pids=()
  t0=$(date +%s.%N)
  for i in $(seq "$STREAMS"); do
    curl -sN -H 'Content-Type: application/json' --data @"$WORK/req$i.json" \
      "http://127.0.0.1:$port/v1/completions" >"$WORK/out$i.txt" &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(date +%s.%N)
  curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/metrics"
  kill "$SRV"; wait "$SRV" 2>/dev/null; SRV=
  local toks sum n
  toks=$(cat "$WORK"/out*.txt | grep -c '^data: {')
  sum=$(metric 'pagellm_inter_token_latency_seconds_sum')
  n=$(metric 'pagellm_inter_token_latency_seconds_count')
  awk -v s="$sum" -v n="$n" -v k="$toks" -v t0="$t0" -v t1="$t1" \
      -v d="$(metric 'pagellm_kv_tier_dropped_writes_total{tier="disk"}')" \
      -v w="$(metric 'pagellm_kv_tier_written_bytes_total{tier="disk"}')" \
    'BEGIN { printf "%.2f %.1f %d %.0f\n", n ? 1000 * s / n : 0, k / (t1 - t0), d, w / 1048576 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# run mode itl_ms tok_s dropped_writes written_MiB"
modes=(none disk)
[ -n "$BASE" ] && modes+=(base)
for m in "${modes[@]}"; do : >"$WORK/$m.txt"; done
for r in $(seq "$RUNS"); do
  for k in "${!modes[@]}"; do
    mode=${modes[$(( (k + r) % ${#modes[@]} ))]}
    res=$(one_run "$mode" "$r")
    echo "$r $mode $res"
    echo "$res" >>"$WORK/$mode.txt"
  done
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
itl0=$(cut -d' ' -f1 "$WORK/none.txt" | median); tps0=$(cut -d' ' -f2 "$WORK/none.txt" | median)
for m in "${modes[@]}"; do
  awk -v m="$m" -v a="$itl0" -v b="$(cut -d' ' -f1 "$WORK/$m.txt" | median)" \
      -v c="$tps0" -v d="$(cut -d' ' -f2 "$WORK/$m.txt" | median)" \
      -v x="$(awk '{ s += $3 } END { print s + 0 }' "$WORK/$m.txt")" \
      -v w="$(cut -d' ' -f4 "$WORK/$m.txt" | median)" 'BEGIN {
    printf "%-5s median itl_ms %.2f (%+.1f%%), median tok_s %.1f (%+.1f%%), dropped writes %d, written MiB (median) %.0f\n",
      m, b, 100 * (b / a - 1), d, 100 * (d / c - 1), x, w }'
done
