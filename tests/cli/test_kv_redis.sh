#!/usr/bin/env bash
# test_kv_redis.sh - the Redis KV tier shared by `pagellm serve` replicas, end
# to end on ../shared/models/stories260K.gguf and a 3-master Redis Cluster on
# loopback (tests/redis/cluster.sh):
#   1. replica A computes a ~400-token prompt; replica B (empty RAM) is then
#      served >= 90% of it from Redis, with A's greedy text; B's /metrics
#      counts the redis hits (TTFT of both printed, not asserted: the
#      machine is shared).
#   2. a master is killed while requests run: every request answers 200
#      with the text of a replica without tiers (recompute, never wrong);
#      the master restarted, hits resume.
#   3. a --role prefill replica fills the cluster, a --role decode replica
#      is then served >= 90% with a mixed replica's text.
#   4. entries corrupted in Redis (garbage, truncated, another entry's
#      bytes under a key) are rejected, counted, and the text is right.
#   5. `pagellm run --kv-redis` is served >= 90% of a prompt a replica
#      wrote, with the replica's greedy text.
# Every server and node started here is stopped by the EXIT trap, also on
# failure. SKIP only without redis-server / redis-cli (or the model).
source "$(dirname "$0")/lib.sh"

source tests/redis/test_lib.sh
redis_test_need kv_redis redis-server redis-cli curl jq

if ! NODES=$($CTL start "$CL" 3 2>"$T/start.err"); then
  fail kv_redis_cluster_start "$(tr '\n' ' ' <"$T/start.err")"
  exit 1
fi
IFS=, read -r -a NP <<<"$NODES"
SEEDS=$(printf '127.0.0.1:%s,' "${NP[@]}")
SEEDS=${SEEDS%,}

# replica NAME [flags...]: a server on the cluster (no --kv-disk); sets URL_NAME
replica() {
  local name=$1; shift
  serve_start "$T/$name.log" "$M" "$@"
  PIDS+=("$SPID")
  [ -n "$PORT" ] || { fail "kv_redis_start_$name" "$(tail -n 3 "$T/$name.log" | tr '\n' ' ')"; exit 1; }
  printf -v "URL_$name" 'http://127.0.0.1:%s' "$PORT"
}
redis_replica() { replica "$1" --kv-redis "$SEEDS" --kv-tier-timeout-ms 2000 "${@:2}"; }

# prompt I: ~400 tokens (stories260K's context is 512), distinct from the first block on
prompt() { printf 'Story %s. ' "$1"; printf 'Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park. %.0s' $(seq 1 16); }

# complete URL I OUT [max_tokens]: greedy completion of prompt I into OUT
# (the JSON, then a last line "HTTP_CODE SECONDS")
complete() {
  jq -n --arg p "$(prompt "$2")" --argjson n "${4:-8}" '{prompt: $p, max_tokens: $n, temperature: 0}' >"$3.req"
  curl -s --max-time 60 -o "$3" -w '%{http_code} %{time_total}\n' -H 'Content-Type: application/json' \
    --data-binary @"$3.req" "$1/v1/completions" >"$3.st"
}
text() { jq -r '.choices[0].text' "$1"; }
cached() { jq '.usage.prompt_tokens_details.cached_tokens // 0' "$1"; }
ptok() { jq '.usage.prompt_tokens // 0' "$1"; }

# metric URL NAME: the value of /metrics line NAME (with its labels), 0 if absent
metric() { curl -s --max-time 10 "$1/metrics" | awk -v n="$2" '$1 == n { print $2; f = 1 } END { if (!f) print 0 }'; }

# keys_total: entries in the cluster (every master's DBSIZE; a dead one counts 0)
keys_total() {
  local p n s=0
  for p in "${NP[@]}"; do n=$(redis-cli -p "$p" dbsize 2>/dev/null); s=$((s + ${n:-0})); done
  echo "$s"
}
# wait_keys N: until the cluster holds at least N entries (10 s); written behind, so not at once
wait_keys() { for _ in $(seq 1 100); do [ "$(keys_total)" -ge "$1" ] && return 0; sleep 0.1; done; return 1; }

# A reference replica without tiers: the text of every prompt computed cold
replica REF
redis_replica A
redis_replica B

# 1. A computes, B is served from Redis with A's text
complete "$URL_REF" 1 "$T/ref1.json"
complete "$URL_A" 1 "$T/a1.json"
PT=$(ptok "$T/a1.json")
NB=$((PT / 16)) # full blocks of the prompt: what A writes behind
check kv_redis_a_cold test "$PT" -ge 300 -a "$(cached "$T/a1.json")" -eq 0
check kv_redis_a_text_is_cold_text test "$(text "$T/a1.json")" = "$(text "$T/ref1.json")"
wait_keys "$NB"
check kv_redis_a_written test "$(keys_total)" -ge "$NB"
complete "$URL_B" 1 "$T/b1.json"
CT=$(cached "$T/b1.json")
echo "# prompt $PT tokens; replica B served $CT from Redis"
# one request each so far: the TTFT histograms' sums are those requests' TTFTs
echo "INFO TTFT of the $PT-token prompt: A computing it $(metric "$URL_A" pagellm_time_to_first_token_seconds_sum) s, B from Redis $(metric "$URL_B" pagellm_time_to_first_token_seconds_sum) s"
check kv_redis_b_hit test $((CT * 10)) -ge $((PT * 9))
check kv_redis_b_same_text test "$(text "$T/b1.json")" = "$(text "$T/a1.json")"
H=$(metric "$URL_B" 'pagellm_kv_tier_hits_total{tier="redis"}')
check kv_redis_b_hits_counted test "$H" -ge $((CT / 16))
check kv_redis_b_hit_tokens test "$(metric "$URL_B" pagellm_kv_tier_hit_tokens_total)" -eq "$CT"
check kv_redis_client_metrics curl -s --max-time 10 "$URL_B/metrics" -o "$T/m.txt"
check kv_redis_client_counters_exported grep -q '^pagellm_kv_redis_redirects_total ' "$T/m.txt"

# 2. a master killed while prompts 11..16 go to A then B: all 200, all the cold text
for i in $(seq 11 16); do complete "$URL_REF" "$i" "$T/ref$i.json"; done
(
  for i in $(seq 11 16); do
    complete "$URL_A" "$i" "$T/ka$i.json"
    complete "$URL_B" "$i" "$T/kb$i.json"
  done
) &
LOAD=$!
PIDS+=("$LOAD")
# killed once the first two requests are answered: the other ten run against a dead master
for _ in $(seq 1 300); do [ -s "$T/kb11.json.st" ] && break; sleep 0.05; done
$CTL kill "$CL" "${NP[0]}"
wait "$LOAD"
ok=0 bad=""
for i in $(seq 11 16); do
  for r in a b; do
    f=$T/k$r$i.json
    if [ "$(cut -d' ' -f1 "$f.st")" = 200 ] && [ "$(text "$f")" = "$(text "$T/ref$i.json")" ]; then ok=$((ok + 1))
    else bad="$bad $r$i($(cut -d' ' -f1 "$f.st" 2>/dev/null))"; fi
  done
done
echo "# master on port ${NP[0]} killed: $ok of 12 requests answered 200 with the cold text"
if [ "$ok" -eq 12 ]; then pass kv_redis_master_killed_answers_right; else fail kv_redis_master_killed_answers_right "$bad"; fi
F=$(( $(metric "$URL_A" pagellm_kv_redis_connect_failures_total) + $(metric "$URL_A" pagellm_kv_redis_errors_total) ))
check kv_redis_master_killed_counted test "$F" -ge 1
# a request that still finds the dead master's slots empty recomputes them, right
complete "$URL_B" 11 "$T/kb11b.json"
check kv_redis_dead_master_same_text test "$(text "$T/kb11b.json")" = "$(text "$T/ref11.json")"

# restarted (empty: no persistence; it rejoins with its slots): hits resume. The client
# retries a failed node after a backoff, so a few fresh prompts may be needed.
$CTL restart "$CL" "${NP[0]}"
resumed=0
for i in $(seq 21 30); do
  complete "$URL_A" "$i" "$T/ra$i.json"
  sleep 0.5
  complete "$URL_B" "$i" "$T/rb$i.json"
  c=$(cached "$T/rb$i.json") p=$(ptok "$T/rb$i.json")
  if [ $((c * 10)) -ge $((p * 9)) ] && [ "$p" -gt 0 ]; then resumed=$i; break; fi
  sleep 0.5
done
echo "# master restarted: B served >= 90% from Redis again at prompt $resumed"
check kv_redis_restarted_hits_resume test "$resumed" -gt 0
if [ "$resumed" -gt 0 ]; then
  complete "$URL_REF" "$resumed" "$T/ref$resumed.json"
  check kv_redis_restarted_same_text test "$(text "$T/rb$resumed.json")" = "$(text "$T/ref$resumed.json")"
fi
check kv_redis_reconnect_counted test "$(metric "$URL_A" pagellm_kv_redis_reconnects_total)" -ge 1

# 3. roles: a prefill replica fills the cluster, a decode replica is served from it
redis_replica PF --role prefill
redis_replica DC --role decode
complete "$URL_PF" 41 "$T/pf.json"
check kv_redis_prefill_one_token test "$(jq '.usage.completion_tokens' "$T/pf.json")" -eq 1 -a \
  "$(jq -r '.choices[0].finish_reason' "$T/pf.json")" = length
complete "$URL_DC" 41 "$T/dc.json"
complete "$URL_REF" 41 "$T/ref41.json" # REF is a mixed replica (the default role)
CT=$(cached "$T/dc.json") PT=$(ptok "$T/dc.json")
echo "# decode replica: $CT of $PT prompt tokens from the prefill replica's blocks"
check kv_redis_decode_hit test $((CT * 10)) -ge $((PT * 9))
check kv_redis_decode_same_text test "$(text "$T/dc.json")" = "$(text "$T/ref41.json")"
check kv_redis_decode_full_answer test "$(jq '.usage.completion_tokens' "$T/dc.json")" -eq 8

# 4. corrupt entries: A writes prompt 51's blocks; three of its keys are then garbage,
#    truncated by 7 bytes, and another of its entries' bytes; B must recompute them
scan_keys() { local p; for p in "${NP[@]}"; do redis-cli -p "$p" --scan --pattern 'plkv:*'; done | sort; }
scan_keys >"$T/keys0"
complete "$URL_A" 51 "$T/a51.json"
wait_keys $(( $(wc -l <"$T/keys0") + $(ptok "$T/a51.json") / 16 ))
scan_keys >"$T/keys1"
mapfile -t NEW < <(comm -13 "$T/keys0" "$T/keys1")
check kv_redis_corrupt_keys_found test "${#NEW[@]}" -ge 4
RC="redis-cli -c -p ${NP[1]}"
$RC set "${NEW[0]}" garbage >/dev/null
# redis-cli prints a raw bulk value plus a newline; -x sends stdin as the last argument
$RC get "${NEW[1]}" | head -c -8 | $RC -x set "${NEW[1]}" >/dev/null
LEN3=$($RC strlen "${NEW[3]}")
$RC get "${NEW[3]}" | head -c -1 | $RC -x set "${NEW[2]}" >/dev/null
check kv_redis_corrupt_applied test "$($RC get "${NEW[0]}")" = garbage -a \
  "$($RC strlen "${NEW[2]}")" -eq "$LEN3" -a "$($RC strlen "${NEW[1]}")" -eq $((LEN3 - 7))
R0=$(metric "$URL_B" 'pagellm_kv_tier_rejected_total{tier="redis"}')
complete "$URL_B" 51 "$T/b51.json"
complete "$URL_REF" 51 "$T/ref51.json"
R1=$(metric "$URL_B" 'pagellm_kv_tier_rejected_total{tier="redis"}')
echo "# corrupt entries: B rejected $((R1 - R0)), served $(cached "$T/b51.json") of $(ptok "$T/b51.json") tokens"
check kv_redis_corrupt_rejected test $((R1 - R0)) -ge 1
check kv_redis_corrupt_same_text test "$(text "$T/b51.json")" = "$(text "$T/ref51.json")"
check kv_redis_corrupt_200 test "$(cut -d' ' -f1 "$T/b51.json.st")" = 200

# 5. `pagellm run --kv-redis`: a process of its own is served a prompt that replica A
#    wrote to the cluster, with a replica's greedy text (a fresh prompt: 2. lost the
#    killed master's entries)
K0=$(keys_total)
complete "$URL_A" 61 "$T/a61.json"
complete "$URL_REF" 61 "$T/ref61.json"
wait_keys $((K0 + $(ptok "$T/a61.json") / 16))
"$PAGELLM" run -m "$M" -p "$(prompt 61)" -n 8 --temp 0 -t 1 --kv-redis "$SEEDS" --kv-tier-timeout-ms 2000 --json \
  >"$T/run61.json" 2>"$T/run61.err"
check kv_redis_run_exit test $? -eq 0
echo "# run --kv-redis: $(jq '.tier_tokens' "$T/run61.json") of $(jq '.prompt_ids | length' "$T/run61.json") prompt tokens from Redis"
check kv_redis_run_hit jq -e '.tier_tokens * 10 >= (.prompt_ids | length) * 9 and .cached_tokens >= .tier_tokens' "$T/run61.json"
check kv_redis_run_same_text test "$(jq -r .text "$T/run61.json")" = "$(text "$T/ref61.json")"
