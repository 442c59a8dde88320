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
#   eng_cpu  CPU time of the engine's threads (named pagellm) per completion
#            token, in ms, from /proc/PID/task/*/schedstat over the batch: the
#            cost the decodes pay themselves, whatever the load of the host
#   io_cpu   CPU time of the tier's I/O threads (pl-*) over the batch, ms
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

# CPU ns of the server's threads by kind: "engine NS io NS"
thread_cpu() {
  local t c n e=0 i=0
  for t in /proc/"$1"/task/*; do
    c=$(cat "$t/comm" 2>/dev/null) && n=$(cut -d' ' -f1 "$t/schedstat" 2>/dev/null) || continue
    case $c in pagellm) e=$((e + n)) ;; pl-*) i=$((i + n)) ;; esac
  done
  echo "$e $i"
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
  local pids=() cpu0 cpu1
  cpu0=$(thread_cpu "$SRV")
  t0=$(date +%s.%N)
  for i in $(seq "$STREAMS"); do
    curl -sN -H 'Content-Type: application/json' --data @"$WORK/req$i.json" \
      "http://127.0.0.1:$port/v1/completions" >"$WORK/out$i.txt" &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(date +%s.%N)
  cpu1=$(thread_cpu "$SRV")
  curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/metrics"
  kill "$SRV"; wait "$SRV" 2>/dev/null; SRV=
  local toks sum n
  toks=$(cat "$WORK"/out*.txt | grep -c '^data: {')
  sum=$(metric 'pagellm_inter_token_latency_seconds_sum')
  n=$(metric 'pagellm_inter_token_latency_seconds_count')
  awk -v s="$sum" -v n="$n" -v k="$toks" -v t0="$t0" -v t1="$t1" \
      -v d="$(metric 'pagellm_kv_tier_dropped_writes_total{tier="disk"}')" \
      -v w="$(metric 'pagellm_kv_tier_written_bytes_total{tier="disk"}')" \
      -v c0="$cpu0" -v c1="$cpu1" 'BEGIN { split(c0, a, " "); split(c1, b, " ")
    printf "%.2f %.1f %d %.0f %.3f %.0f\n", n ? 1000 * s / n : 0, k / (t1 - t0), d, w / 1048576,
      k ? (b[1] - a[1]) / 1e6 / k : 0, (b[2] - a[2]) / 1e6 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# run mode itl_ms tok_s dropped_writes written_MiB eng_cpu_ms_per_tok io_cpu_ms"
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
eng0=$(cut -d' ' -f5 "$WORK/none.txt" | median)
# paired: each run's ratio to the run of mode none in the same rotation, then the median
paired() { paste -d' ' "$WORK/none.txt" "$WORK/$1.txt" | awk -v f="$2" -v n=6 '{ print $(n + f) / $f }' | median; }
for m in "${modes[@]}"; do
  awk -v m="$m" -v a="$itl0" -v b="$(cut -d' ' -f1 "$WORK/$m.txt" | median)" \
      -v c="$tps0" -v d="$(cut -d' ' -f2 "$WORK/$m.txt" | median)" \
      -v x="$(awk '{ s += $3 } END { print s + 0 }' "$WORK/$m.txt")" \
      -v w="$(cut -d' ' -f4 "$WORK/$m.txt" | median)" \
      -v e0="$eng0" -v e="$(cut -d' ' -f5 "$WORK/$m.txt" | median)" -v io="$(cut -d' ' -f6 "$WORK/$m.txt" | median)" \
      -v pi="$(paired "$m" 1)" -v pe="$(paired "$m" 5)" 'BEGIN {
    printf "%-5s median itl_ms %.2f (%+.1f%%, paired %.3f), median tok_s %.1f (%+.1f%%), dropped writes %d, written MiB (median) %.0f\n",
      m, b, 100 * (b / a - 1), pi, d, 100 * (d / c - 1), x, w
    printf "%-5s median engine CPU ms/token %.3f (%+.1f%%, paired %.3f), median I/O threads CPU ms %.0f\n",
      m, e, 100 * (e / e0 - 1), pe, io }'
done
