#!/usr/bin/env bash
# test_kv_tiers_groups.sh - the KV tiers with layer groups (gemma3's local
# sliding-window layers; docs/kv-tiers.md#layer-groups), on a synthetic
# gemma3 (`synth --arch gemma3 --shape tiny`: window 32, block 16):
#   1. `pagellm run --kv-disk DIR` of a ~370-token prompt (11 windows)
#      writes its blocks behind; a second run loads >= 90% of the prompt
#      from the disk with the same greedy text, which is also the text of a
#      run without a tier and of a run with one table (--kv-groups off).
#   2. a one-table run on the same DIR finds none of the groups' entries
#      (their keys and salt name the layout), and the groups run then still
#      loads its own.
#   3. every entry damaged in its last (local group) bytes: refused and
#      counted, the prompt recomputed, the same text.
#   4. `pagellm serve` restarted on its DIR is served the prompt again
#      (the scheduler's lookup), with the same text; /metrics shows each
#      group's blocks and bytes, /v1/kv the layer groups.
#   5. with a 3-master Redis Cluster (tests/redis/cluster.sh; SKIP without
#      redis-server): a run writes to Redis, a second run loads >= 90% of
#      the prompt from it with the same text.
source "$(dirname "$0")/lib.sh"

G=$T/gemma3.gguf
D=$T/kvdisk
if ! "$PAGELLM" synth --shape tiny --arch gemma3 -o "$G" >/dev/null 2>"$T/synth.err"; then
  fail kv_tiers_groups_synth "$(head -c 300 "$T/synth.err")"
  exit 1
fi

PROMPT=$(printf 'the quick brown fox jumps over the lazy dog %.0s' $(seq 1 12))
run() { "$PAGELLM" run -m "$G" -p "$PROMPT" -n 24 --temp 0 -t 1 "$@"; }
# cached REPORT: "N P K": N of P prompt tokens cached, K of them from the tiers
cached() { sed -n 's/^cached *\([0-9]*\) of \([0-9]*\) prompt tokens.* \([0-9]*\) of them loaded from the KV tiers$/\1 \2 \3/p' "$1"; }
# rejected REPORT TIER: the tier's rejected count
rejected() { sed -n "s/^kv tier *$2: .* \([0-9]*\) rejected.*/\1/p" "$1"; }

run >"$T/out0.txt" 2>"$T/err0.txt"
check kv_tiers_groups_no_tier_exit [ $? -eq 0 ]
check kv_tiers_groups_on grep -q '^kv groups [2-9]' "$T/err0.txt"

run --kv-disk "$D" >"$T/out1.txt" 2>"$T/err1.txt"
check kv_tiers_groups_disk_first_exit [ $? -eq 0 ]
read -r C1 P1 T1 <<<"$(cached "$T/err1.txt")"
check kv_tiers_groups_disk_first_cold test "${C1:-x}" = 0 -a "${P1:-0}" -ge 300
check kv_tiers_groups_disk_files_written [ "$(kv_disk_entries "$D" | wc -l)" -ge $((P1 / 16 - 1)) ]

run --kv-disk "$D" >"$T/out2.txt" 2>"$T/err2.txt"
check kv_tiers_groups_disk_second_exit [ $? -eq 0 ]
read -r C2 P2 T2 <<<"$(cached "$T/err2.txt")"
echo "# prompt $P2 tokens: $C2 cached on the second run, $T2 of them from disk"
check kv_tiers_groups_disk_hit test "${T2:-0}" -gt 0 -a $((T2 * 10)) -ge $((P2 * 9))
check kv_tiers_groups_disk_same_text cmp -s "$T/out1.txt" "$T/out2.txt"
check kv_tiers_groups_same_as_no_tier cmp -s "$T/out0.txt" "$T/out1.txt"
check kv_tiers_groups_text_not_empty test -s "$T/out1.txt"

# one table on the same directory: not the groups' entries
run --kv-groups off --kv-disk "$D" >"$T/out3.txt" 2>"$T/err3.txt"
check kv_tiers_groups_one_table_exit [ $? -eq 0 ]
read -r C3 P3 T3 <<<"$(cached "$T/err3.txt")"
check kv_tiers_groups_one_table_takes_none test "${T3:-x}" = 0
check kv_tiers_groups_one_table_same_text cmp -s "$T/out0.txt" "$T/out3.txt"
run --kv-disk "$D" >"$T/out4.txt" 2>"$T/err4.txt"
read -r C4 P4 T4 <<<"$(cached "$T/err4.txt")"
check kv_tiers_groups_own_entries_still_served test "${T4:-0}" = "${T2:-x}"
check kv_tiers_groups_own_entries_same_text cmp -s "$T/out0.txt" "$T/out4.txt"

# damage the last byte of every groups entry (the last local group's bytes);
# the one-table entries of step 2 are damaged too, and not asked for
while read -r f off len key; do
  printf 'Z' | dd of="$f" bs=1 seek=$((off + len - 1)) conv=notrunc status=none
done < <(kv_disk_entries "$D")
run --kv-disk "$D" >"$T/out5.txt" 2>"$T/err5.txt"
check kv_tiers_groups_damaged_exit [ $? -eq 0 ]
read -r C5 P5 T5 <<<"$(cached "$T/err5.txt")"
R5=$(rejected "$T/err5.txt" disk)
echo "# damaged entries: $T5 tokens loaded, ${R5:-?} rejected"
check kv_tiers_groups_damaged_refused test "${T5:-x}" = 0 -a "${R5:-0}" -ge 1
check kv_tiers_groups_damaged_same_text cmp -s "$T/out0.txt" "$T/out5.txt"

for f in "$T"/err*.txt; do
  if grep -qE 'Sanitizer|runtime error' "$f" 2>/dev/null; then fail kv_tiers_groups_sanitizer "$(head -c 400 "$f")"; fi
done

# pagellm serve: a server writes the prompt to a new DIR; a restarted one is
# served it from there (the scheduler's lookup); /metrics has each group's
# gauges and /v1/kv the layer groups' kind
if command -v curl >/dev/null && command -v jq >/dev/null; then
  D2=$T/kvdisk2
  SPID=""
  trap '[ -n "$SPID" ] && kill -KILL "$SPID" 2>/dev/null; rm -rf "$T"' EXIT
  stop() {
    kill -TERM "$SPID" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SPID" 2>/dev/null
    wait "$SPID" 2>/dev/null
    SPID=""
  }
  BODY=$(jq -n --arg p "$PROMPT" '{prompt: $p, max_tokens: 12, temperature: 0}')
  complete() { curl -s --max-time 60 -H 'Content-Type: application/json' --data-binary "$BODY" "http://127.0.0.1:$PORT/v1/completions" >"$1"; }
  for i in 1 2; do
    serve_start "$T/serve$i.log" "$G" --kv-disk "$D2" --kv-tier-timeout-ms 2000 -t 1
    if [ -z "$PORT" ]; then fail kv_tiers_groups_serve_start "$(tail -n 3 "$T/serve$i.log" | tr '\n' ' ')"; break; fi
    complete "$T/c$i.json"
    curl -s --max-time 10 "http://127.0.0.1:$PORT/metrics" >"$T/metrics$i.txt"
    curl -s --max-time 10 "http://127.0.0.1:$PORT/v1/kv" >"$T/kv$i.json"
    stop
  done
  c2=$(jq '.usage.prompt_tokens_details.cached_tokens // 0' "$T/c2.json")
  p2=$(jq '.usage.prompt_tokens // 0' "$T/c2.json")
  echo "# serve: the restarted server was served $c2 of $p2 prompt tokens from disk"
  check kv_tiers_groups_serve_cold [ "$(jq '.usage.prompt_tokens_details.cached_tokens // 0' "$T/c1.json")" = 0 ]
  check kv_tiers_groups_serve_restart_hit test "${c2:-0}" -gt 0 -a $((c2 * 10)) -ge $((p2 * 9))
  check kv_tiers_groups_serve_same_text test "$(jq -r '.choices[0].text' "$T/c1.json")" = "$(jq -r '.choices[0].text' "$T/c2.json")" -a -n "$(jq -r '.choices[0].text' "$T/c1.json")"
  check kv_tiers_groups_serve_tier_metric grep -Eq '^pagellm_kv_tier_hit_tokens_total [1-9]' "$T/metrics2.txt"
  check kv_tiers_groups_metrics_group0 grep -q '^pagellm_kv_group_blocks{group="0"} ' "$T/metrics2.txt"
  check kv_tiers_groups_metrics_group1 grep -q '^pagellm_kv_group_bytes{group="1"} ' "$T/metrics2.txt"
  check kv_tiers_groups_metrics_no_group2 test -z "$(grep '^pagellm_kv_group_blocks{group="2"}' "$T/metrics2.txt")"
  check kv_tiers_groups_v1_kv jq -e '.kv_kind == "layer_groups" and (.group_blocks | length) == 2' "$T/kv2.json"
  for f in "$T"/serve*.log; do
    if grep -qE 'Sanitizer|runtime error' "$f" 2>/dev/null; then fail kv_tiers_groups_serve_sanitizer "$(head -c 400 "$f")"; fi
  done
else
  skip kv_tiers_groups_serve "curl / jq not installed"
fi

# the Redis tier
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  skip kv_tiers_groups_redis "redis-server / redis-cli not installed (scripts/deps.sh)"
  exit 0
fi
source tests/redis/test_lib.sh
if ! NODES=$($CTL start "$CL" 3 2>"$T/start.err"); then
  fail kv_tiers_groups_redis_cluster_start "$(tr '\n' ' ' <"$T/start.err")"
  exit 1
fi
IFS=, read -r -a NP <<<"$NODES"
SEEDS=$(printf '127.0.0.1:%s,' "${NP[@]}")
SEEDS=${SEEDS%,}
run --kv-redis "$SEEDS" --kv-tier-timeout-ms 2000 >"$T/out6.txt" 2>"$T/err6.txt"
check kv_tiers_groups_redis_first_exit [ $? -eq 0 ]
run --kv-redis "$SEEDS" --kv-tier-timeout-ms 2000 >"$T/out7.txt" 2>"$T/err7.txt"
check kv_tiers_groups_redis_second_exit [ $? -eq 0 ]
read -r C7 P7 T7 <<<"$(cached "$T/err7.txt")"
echo "# redis: $T7 of $P7 prompt tokens loaded"
check kv_tiers_groups_redis_hit test "${T7:-0}" -gt 0 -a $((T7 * 10)) -ge $((P7 * 9))
check kv_tiers_groups_redis_same_text cmp -s "$T/out0.txt" "$T/out7.txt"
for f in "$T"/err6.txt "$T"/err7.txt; do
  if grep -qE 'Sanitizer|runtime error' "$f" 2>/dev/null; then fail kv_tiers_groups_redis_sanitizer "$(head -c 400 "$f")"; fi
done
