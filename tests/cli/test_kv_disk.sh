#!/usr/bin/env bash
# test_kv_disk.sh - the disk KV tier end to end (`serve --kv-disk DIR`) on
# ../shared/models/stories260K.gguf: a long prompt is served, the server is
# stopped and started again on the same DIR, and the same prompt is then a
# tier hit (cached_tokens >= 90% of the prompt) with the same greedy text;
# the same entries as files of layouts 1 and 2 are migrated at open; then
# every entry in the segment is corrupted (bytes flipped, the last record
# cut short) and the prompt is still answered with the same text, the
# entries counted as rejected in /metrics. Also: a --role prefill replica answers with one
# token and a --role decode replica on its DIR serves the prompt from the
# tier; a second server on the same DIR is refused; bad flags get clear
# errors. The staged KV dtypes survive a restart the same way; blocks
# computed with sliding-window attention are never served without it, nor
# a model's blocks to another with the same header but other weights.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
D=$T/kvdisk
SPID=""
cleanup() {
  [ -n "$SPID" ] && kill -KILL "$SPID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

if [ ! -f "$M" ]; then skip kv_disk "$M not found"; exit 0; fi
command -v curl >/dev/null || { skip kv_disk "curl not installed"; exit 0; }
command -v jq >/dev/null || { skip kv_disk "jq not installed"; exit 0; }

# A prompt of ~400 tokens (stories260K's context is 512).
PROMPT=$(printf 'Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park. %.0s' $(seq 1 16))
BODY=$(jq -n --arg p "$PROMPT" '{prompt: $p, max_tokens: 24, temperature: 0}')

start() {
  serve_start "$T/serve$1.log" "$M" --kv-disk "$D" --kv-disk-max 64M --kv-tier-timeout-ms 2000 "${@:2}"
  URL=http://127.0.0.1:$PORT
  [ -n "$PORT" ]
}

stop() {
  kill -TERM "$SPID" 2>/dev/null
  for _ in $(seq 1 300); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SPID" 2>/dev/null
  wait "$SPID" 2>/dev/null
  SPID=""
}

# complete OUT: the completion of $BODY into OUT.
complete() { curl -s --max-time 60 -H 'Content-Type: application/json' --data-binary "$BODY" "$URL/v1/completions" >"$1"; }

# metric NAME: the value of /metrics line NAME (with its labels), 0 if absent.
metric() { curl -s --max-time 10 "$URL/metrics" | awk -v n="$1" '$1 == n { print $2; f = 1 } END { if (!f) print 0 }'; }

# 1. cold: computed, and written behind to DIR
if ! start 1; then fail kv_disk_start "$(tail -3 "$T/serve1.log")"; exit 0; fi
complete "$T/a.json"
PT=$(jq '.usage.prompt_tokens' "$T/a.json")
TEXT1=$(jq -r '.choices[0].text' "$T/a.json")
check kv_disk_cold_answer test "$PT" -ge 300 -a "$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/a.json")" -eq 0
# written behind: the response does not wait for it, so give the I/O thread a moment
for _ in $(seq 1 50); do
  W=$(metric 'pagellm_kv_tier_writes_total{tier="disk"}')
  [ "$W" -ge $((PT / 16 - 1)) ] && break
  sleep 0.1
done
check kv_disk_written_behind test "$W" -ge $((PT / 16 - 1))
# a second server on the same DIR is refused, naming the lock
expect_exit kv_disk_second_server_refused 1 'in use by another process' -- \
  "$PAGELLM" serve -m "$M" --host 127.0.0.1 --port 0 --kv-disk "$D"
stop
NFILES=$(kv_disk_entries "$D" | wc -l)
check kv_disk_files_after_stop test "$NFILES" -ge $((PT / 16 - 1)) -a "$(find "$D" -name '*.kv' | wc -l)" -eq 0

# 2. restarted: the prompt is a disk hit, same greedy text
start 2 || { fail kv_disk_restart "$(tail -3 "$T/serve2.log")"; exit 0; }
complete "$T/b.json"
CT=$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/b.json")
echo "# prompt $PT tokens, $CT served from disk after a restart"
check kv_disk_restart_hit test $((CT * 10)) -ge $((PT * 9))
check kv_disk_restart_same_text test "$(jq -r '.choices[0].text' "$T/b.json")" = "$TEXT1"
H=$(metric 'pagellm_kv_tier_hits_total{tier="disk"}')
check kv_disk_hits_counted test "$H" -ge $((PT / 16 - 1))
check kv_disk_tier_hit_tokens test "$(metric pagellm_kv_tier_hit_tokens_total)" -eq "$CT"
check kv_disk_latency_histogram test "$(metric 'pagellm_kv_tier_get_seconds_count{tier="disk"}')" -ge 1
stop

# 2b. the same entries as one file each, half in layout 1 (DIR/ab/cd/<key>.kv)
# and half in layout 2 (DIR/ab/<key>.kv), no DIR/seg, no DIR/layout: appended
# to a segment at open, the files removed, and served as before
i=0
while read -r f off len key; do
  sub="$D/${key:0:2}"
  [ $((i % 2)) -eq 0 ] && sub="$sub/${key:2:2}"
  mkdir -p "$sub" && dd if="$f" of="$sub/$key.kv" bs=1 skip="$off" count="$len" status=none
  i=$((i + 1))
done < <(kv_disk_entries "$D")
rm -rf "$D/seg" "$D/layout"
NOLD=$(find "$D" -name '*.kv' | wc -l)
start 2b || { fail kv_disk_layout1_restart "$(tail -3 "$T/serve2b.log")"; exit 0; }
complete "$T/b2.json"
CT2=$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/b2.json")
check kv_disk_old_layouts_migrated test "$NOLD" -ge $((PT / 16 - 1)) -a "$(find "$D" -name '*.kv' | wc -l)" -eq 0 \
  -a "$(kv_disk_entries "$D" | wc -l)" -ge "$NOLD" -a "$(find "$D" -mindepth 1 -type d | wc -l)" -eq 1
check kv_disk_old_layouts_served test "$CT2" -eq "$CT" -a "$(jq -r '.choices[0].text' "$T/b2.json")" = "$TEXT1"
check kv_disk_layout_file test "$(cat "$D/layout")" = "pagellm kv-disk layout 3"
stop
# a layout this build does not know is refused, naming it
echo "pagellm kv-disk layout 9" >"$D/layout"
expect_exit kv_disk_later_layout_refused 1 'layout 9' -- timeout 30 "$PAGELLM" serve -m "$M" --host 127.0.0.1 --port 0 --kv-disk "$D"
echo "pagellm kv-disk layout 3" >"$D/layout"

# 3. corrupt entries: a byte flipped in the middle of every entry (found by
#    the reads), and the segment cut short inside its last entry (cut off
#    at open: a torn append)
LAST=""
while read -r f off len key; do
  printf '\xff\xfe' | dd of="$f" bs=1 seek=$((off + len / 2)) conv=notrunc status=none
  LAST="$f $((off + len - 7))"
done < <(kv_disk_entries "$D")
[ -n "$LAST" ] && truncate -s "${LAST#* }" "${LAST%% *}"
start 3 || { fail kv_disk_restart_corrupt "$(tail -3 "$T/serve3.log")"; exit 0; }
complete "$T/c.json"
check kv_disk_corrupt_same_text test "$(jq -r '.choices[0].text' "$T/c.json")" = "$TEXT1"
check kv_disk_corrupt_not_served test "$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/c.json")" -eq 0
R=$(metric 'pagellm_kv_tier_rejected_total{tier="disk"}')
echo "# $R corrupt entries rejected"
check kv_disk_corrupt_rejected test "$R" -ge 1
stop
# the corrupt entries were dropped and rewritten by the recompute: a restart hits again
start 4 || { fail kv_disk_restart_rewritten "$(tail -3 "$T/serve4.log")"; exit 0; }
complete "$T/d.json"
CT=$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/d.json")
check kv_disk_rewritten_hit test $((CT * 10)) -ge $((PT * 9))
check kv_disk_rewritten_same_text test "$(jq -r '.choices[0].text' "$T/d.json")" = "$TEXT1"
stop

# 4. disaggregated prefill: a prefill replica fills DIR2 and answers with one token; a decode
#    replica on DIR2 then serves the prompt from the tier with the mixed replica's text
D=$T/kvdisk2
start 5 --role prefill || { fail kv_disk_prefill_start "$(tail -3 "$T/serve5.log")"; exit 0; }
complete "$T/e.json"
check kv_disk_prefill_one_token test "$(jq '.usage.completion_tokens' "$T/e.json")" -eq 1 -a \
  "$(jq -r '.choices[0].finish_reason' "$T/e.json")" = length
stop
start 6 --role decode || { fail kv_disk_decode_start "$(tail -3 "$T/serve6.log")"; exit 0; }
complete "$T/f.json"
CT=$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/f.json")
check kv_disk_decode_hit test $((CT * 10)) -ge $((PT * 9))
check kv_disk_decode_same_text test "$(jq -r '.choices[0].text' "$T/f.json")" = "$TEXT1"
stop

# 5. a limit of 8 entries keeps the prompt's first 8 blocks (a chain is kept from its head), and
#    a restart is served those 128 tokens with the same text
D=$T/kvdisk3
E=$(kv_disk_entries "$T/kvdisk2" | head -1 | cut -d' ' -f3)
start 7 --kv-disk-max $((8 * E)) || { fail kv_disk_small_start "$(tail -3 "$T/serve7.log")"; exit 0; }
complete "$T/g.json"
stop
check kv_disk_small_within_limit test "$(kv_disk_entries "$D" | wc -l)" -le 8 -a "$(kv_disk_entries "$D" | wc -l)" -ge 1
start 8 --kv-disk-max $((8 * E)) || { fail kv_disk_small_restart "$(tail -3 "$T/serve8.log")"; exit 0; }
complete "$T/h.json"
stop
check kv_disk_small_same_text test "$(jq -r '.choices[0].text' "$T/h.json")" = "$TEXT1"
check kv_disk_small_keeps_the_head test "$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/h.json")" -eq 128

# 6. the staged KV dtypes (a block quantized when it fills) and bf16: a restart serves the same
#    text from disk (entries are salted by dtype, so each gets its own)
for dt in bf16 fp8_e4m3 kivi4; do
  start "9$dt" --kv-dtype "$dt" || { fail "kv_disk_${dt}_start" "$(tail -3 "$T/serve9$dt.log")"; continue; }
  complete "$T/$dt-a.json"
  stop
  start "10$dt" --kv-dtype "$dt" || { fail "kv_disk_${dt}_restart" "$(tail -3 "$T/serve10$dt.log")"; continue; }
  complete "$T/$dt-b.json"
  stop
  CT=$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/$dt-b.json")
  check "kv_disk_${dt}_hit_same_text" test $((CT * 10)) -ge $((PT * 9)) -a \
    "$(jq -r '.choices[0].text' "$T/$dt-a.json")" = "$(jq -r '.choices[0].text' "$T/$dt-b.json")"
done

# 7. sliding-window attention changes K/V past the window: blocks written with SWA on are never
#    served to --swa off (their keys differ), whose own blocks then serve its restart
SW=$T/swa.gguf
if "$PAGELLM" synth --shape tiny --seed 3 --sliding-window 64 -o "$SW" >/dev/null 2>&1; then
  D=$T/kvdisk-swa
  SBODY=$BODY
  BODY=$(jq -n --arg p "$(printf 'Once upon a time, there was a little girl named Lily. %.0s' $(seq 1 12))" \
    '{prompt: $p, max_tokens: 16, temperature: 0}')
  M0=$M; M=$SW
  for run in on off off2; do
    flags=(); [ "$run" != on ] && flags=(--swa off)
    start "11$run" "${flags[@]}" || { fail kv_disk_swa_start "$(tail -3 "$T/serve11$run.log")"; break; }
    complete "$T/swa-$run.json"
    stop
  done
  M=$M0; BODY=$SBODY
  check kv_disk_swa_off_not_served_swa_blocks test "$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/swa-off.json")" -eq 0
  check kv_disk_swa_off_restart_hit test "$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/swa-off2.json")" -gt 0 -a \
    "$(jq -r '.choices[0].text' "$T/swa-off.json")" = "$(jq -r '.choices[0].text' "$T/swa-off2.json")"
else
  fail kv_disk_swa_synth "pagellm synth --sliding-window failed"
fi

# 8. two models whose headers and sizes agree but whose weights differ (as fine-tunes of one
#    base): the second is never served the first's blocks
A=$T/fa.gguf; B=$T/fb.gguf
if command -v perl >/dev/null && "$PAGELLM" synth --shape tiny --seed 5 -o "$A" >/dev/null 2>&1 &&
   "$PAGELLM" synth --shape tiny --seed 6 -o "$T/fb0.gguf" >/dev/null 2>&1; then
  perl -0777 -pe 's/pagellm-synth-tiny-seed6/pagellm-synth-tiny-seed5/' "$T/fb0.gguf" >"$B"
  D=$T/kvdisk-fp
  SBODY=$BODY
  BODY=$(jq -n --arg p "$(printf 'Once upon a time, there was a little girl named Lily. %.0s' $(seq 1 12))" \
    '{prompt: $p, max_tokens: 8, temperature: 0}')
  M0=$M
  M=$A; start 12a && complete "$T/fa.json"; stop
  M=$B; start 12b && complete "$T/fb.json"; stop
  M=$M0; BODY=$SBODY
  check kv_disk_same_header_other_weights_not_served test "$(head -c 13600 "$A" | cmp -s - <(head -c 13600 "$B") && echo same)" = same -a \
    "$(jq '.usage.prompt_tokens_details.cached_tokens' "$T/fb.json")" -eq 0
else
  skip kv_disk_same_header_other_weights "perl or pagellm synth not available"
fi

# 9. flags
expect_exit kv_disk_role_bad 2 'expected mixed, prefill or decode' -- "$PAGELLM" serve -m "$M" --kv-disk "$D" --role both
expect_exit kv_disk_role_needs_tier 2 'needs a KV tier' -- "$PAGELLM" serve -m "$M" --role prefill
expect_exit kv_disk_max_needs_tier 2 'need --kv-disk' -- "$PAGELLM" serve -m "$M" --kv-disk-max 1G
expect_exit kv_disk_max_bad_size 2 'kv-disk-max' -- "$PAGELLM" serve -m "$M" --kv-disk "$D" --kv-disk-max 12Q
expect_exit kv_disk_max_below_a_block 1 'less than one KV block' -- "$PAGELLM" serve -m "$M" --kv-disk "$D" --kv-disk-max 1K
expect_exit kv_disk_not_a_dir 1 'not a directory|cannot create' -- "$PAGELLM" serve -m "$M" --kv-disk "$M"
expect_exit kv_disk_no_prefix_cache 2 'prefix cache' -- "$PAGELLM" serve -m "$M" --kv-disk "$D" --no-prefix-cache
expect_exit kv_redis_ttl_needs_redis 2 'needs --kv-redis' -- "$PAGELLM" serve -m "$M" --kv-redis-ttl 5
# no Redis Cluster listens on port 1: refused at start with a message naming the Redis tier
expect_exit kv_redis_unavailable 1 '[Rr]edis' -- "$PAGELLM" serve -m "$M" --kv-redis 127.0.0.1:1
# every server exited cleanly (under ASan: no report, no leak)
if grep -lE 'Sanitizer|runtime error' "$T"/serve*.log >/dev/null 2>&1; then
  fail kv_disk_servers_clean "$(grep -hE 'Sanitizer|runtime error' "$T"/serve*.log | head -3)"
else
  pass kv_disk_servers_clean
fi
