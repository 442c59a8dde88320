#!/usr/bin/env bash
# test_run_kv_disk.sh - `pagellm run --kv-disk DIR` on
# ../shared/models/stories260K.gguf: a first run of a ~360-token prompt
# computes it and writes its blocks behind to DIR; a second run with the
# same prompt and DIR loads them (the report's "cached" line: > 90% of the
# prompt from the KV tiers) and prints the same greedy text, which is also
# the text of a run without a tier (the context path). --json says the same
# in cached_tokens and tier_tokens. Tier flags without a tier, and a tier
# without the paged KV cache, exit 2.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
D=$T/kvdisk
if [ ! -f "$M" ]; then skip run_kv_disk "$M not found"; exit 0; fi

PROMPT=$(printf 'Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park. %.0s' $(seq 1 12))
run() { "$PAGELLM" run -m "$M" -p "$PROMPT" -n 24 --temp 0 -t 1 "$@"; }

# cached REPORT: its line "cached    N of P prompt tokens ..., K of them loaded from the KV tiers" as "N P K"
cached() { sed -n 's/^cached *\([0-9]*\) of \([0-9]*\) prompt tokens.* \([0-9]*\) of them loaded from the KV tiers$/\1 \2 \3/p' "$1"; }

run --kv-disk "$D" >"$T/out1.txt" 2>"$T/err1.txt"
check run_kv_disk_first_exit [ $? -eq 0 ]
read -r C1 P1 T1 <<<"$(cached "$T/err1.txt")"
check run_kv_disk_first_cold test "${C1:-x}" = 0 -a "${P1:-0}" -ge 300
check run_kv_disk_files_written [ "$(kv_disk_entries "$D" | wc -l)" -ge $((P1 / 16 - 1)) ]

run --kv-disk "$D" >"$T/out2.txt" 2>"$T/err2.txt"
check run_kv_disk_second_exit [ $? -eq 0 ]
read -r C2 P2 T2 <<<"$(cached "$T/err2.txt")"
echo "# prompt $P2 tokens: $C2 cached on the second run, $T2 of them from disk"
check run_kv_disk_second_from_disk test "${T2:-0}" -gt 0 -a $((T2 * 10)) -ge $((P2 * 9)) -a "${C2:-0}" -ge "${T2:-0}"
check run_kv_disk_same_text cmp -s "$T/out1.txt" "$T/out2.txt"
check run_kv_disk_text_not_empty test -s "$T/out1.txt"
run >"$T/out0.txt" 2>/dev/null
check run_kv_disk_same_as_no_tier cmp -s "$T/out0.txt" "$T/out1.txt"

if command -v jq >/dev/null; then
  run --kv-disk "$D" --json >"$T/r.json" 2>"$T/r.err"
  check run_kv_disk_json jq -e '.cached_tokens > 0 and .tier_tokens > 0 and (.gen_ids | length) == 24 and .stop_reason == "length"' "$T/r.json"
  check run_kv_disk_json_text [ "$(jq -r .text "$T/r.json")" = "$(cat "$T/out1.txt")" ]
else
  skip run_kv_disk_json "jq not installed"
fi

expect_exit run_kv_disk_max_needs_tier 2 'need --kv-disk' -- "$PAGELLM" run -m "$M" -p hi --kv-disk-max 1G
expect_exit run_kv_redis_ttl_needs_redis 2 'needs --kv-redis' -- "$PAGELLM" run -m "$M" -p hi --kv-redis-ttl 5
expect_exit run_kv_disk_needs_paged 2 'paged KV layout' -- "$PAGELLM" run -m "$M" -p hi --kv-disk "$D" --kv-layout static
expect_exit run_kv_disk_needs_kv_cache 2 'need the KV cache' -- "$PAGELLM" run -m "$M" -p hi --kv-disk "$D" --no-kv-cache
expect_exit run_kv_disk_not_a_dir 1 'not a directory|cannot create' -- "$PAGELLM" run -m "$M" -p hi --kv-disk "$M"
for f in "$T"/*.err "$T"/err*.txt; do
  if grep -qE 'Sanitizer|runtime error' "$f" 2>/dev/null; then fail run_kv_disk_sanitizer "$(head -c 400 "$f")"; fi
done
