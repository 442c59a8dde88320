#!/usr/bin/env bash
# test_bench.sh - smoke runs of every `pagellm bench` with tiny sizes, so that
# `make test` notices when a benchmark stops working (not its speed): gen and
# cache on a synthetic tiny model, kv-memory on stories260K, prefix on the
# tiny model, tiers (cold, RAM and disk hits) on the tiny model, serve (a
# child `pagellm serve` on 127.0.0.1, no peer) and soak (a few seconds of
# streaming clients, its checks passing and failing) on stories260K; plus
# usage errors (exit 2). Well under a minute.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
command -v jq >/dev/null || { skip bench "jq not installed"; exit 0; }
if ! "$PAGELLM" bench kv-memory --help >/dev/null 2>&1; then skip bench "this pagellm has no bench kv-memory"; exit 0; fi
TINY=$T/tiny.gguf
"$PAGELLM" synth --shape tiny --seed 1 -o "$TINY" >/dev/null 2>&1 || { fail bench_synth "pagellm synth --shape tiny failed"; exit 0; }

# svgx FILE XPATH: the XPath's value in the SVG (its elements are in the SVG namespace: local-name()).
svgx() { xmllint --xpath "$2" "$1" 2>/dev/null; }

# jq_check NAME FILE FILTER: PASS if the JSON in FILE satisfies FILTER.
jq_check() {
  if jq -e "$3" "$2" >/dev/null 2>&1; then pass "$1"; else fail "$1" "$(head -c 400 "$2") does not satisfy $3"; fi
}

# gen and cache: rows with positive figures
"$PAGELLM" bench gen -m "$TINY" --n-prompt 16 --n-gen 4 -t 1 --json >"$T/gen.json" 2>"$T/gen.err"
jq_check bench_gen "$T/gen.json" '.prefill_tok_s > 0 and .decode_tok_s > 0'
"$PAGELLM" bench cache -m "$TINY" --positions 16,32 --steps 2 -t 1 --json >"$T/cache.json" 2>"$T/cache.err"
jq_check bench_cache "$T/cache.json" '.ms_with_cache > 0 and .ms_without_cache > 0'
check bench_cache_rows [ "$(wc -l <"$T/cache.json")" -eq 2 ]

# kv-memory: 2 static slots in the pool; paged must fit more and waste less
if [ -f "$M" ]; then
  "$PAGELLM" bench kv-memory -m "$M" --requests 8 --min-len 16 --max-len 64 --slots 2 -t 1 --json --svg "$T/kvm.svg" \
    >"$T/kvm.json" 2>"$T/kvm.err"
  jq_check bench_kv_memory_fields "$T/kvm.json" \
    '(.utilisation_paged|type) == "number" and (.utilisation_static|type) == "number" and
     .max_concurrent_static == 2 and .generated_tokens_paged == .generated_tokens_static'
  jq_check bench_kv_memory_paged_wins "$T/kvm.json" \
    '.max_concurrent_paged > .max_concurrent_static and .utilisation_paged > .utilisation_static and .utilisation_paged <= 1'
  "$PAGELLM" bench kv-memory -m "$M" --requests 4 --min-len 16 --max-len 32 -t 1 >"$T/kvm.txt" 2>&1
  check bench_kv_memory_table grep -q 'max_concurrent_paged' "$T/kvm.txt"
  expect_exit bench_kv_memory_svg_unwritable 1 "cannot write --svg" -- \
    "$PAGELLM" bench kv-memory -m "$M" --requests 2 --min-len 8 --max-len 16 -t 1 --svg "$T/no/such/dir/k.svg"
  # --svg: well-formed; utilisation and running over time, paged and static, a point per sampled step
  if command -v xmllint >/dev/null; then
    check bench_kv_memory_svg_wellformed xmllint --noout "$T/kvm.svg"
    for lay in paged static; do
      n=$(svgx "$T/kvm.svg" "count(//*[@data-name=\"$lay\"]/*[local-name()=\"polyline\"])")
      pts=$(svgx "$T/kvm.svg" "string((//*[@data-name=\"$lay\"]/*[local-name()=\"polyline\"])[1]/@points)" | wc -w)
      sampled=$(jq ".steps_sampled_$lay" "$T/kvm.json")
      if [ "$n" = 2 ] && [ "$pts" -ge 1 ] && [ "$pts" -le "$sampled" ]; then pass "bench_kv_memory_svg_$lay"
      else fail "bench_kv_memory_svg_$lay" "$n polylines, $pts points for $sampled sampled steps"; fi
    done
  else
    skip bench_kv_memory_svg "xmllint not installed (scripts/deps.sh: libxml2-utils)"
  fi
else
  skip bench_kv_memory "$M not found"
fi

# prefix: the warm requests must be served the whole system prompt (128 = 8 blocks)
"$PAGELLM" bench prefix -m "$TINY" --system-tokens 128 --requests 3 -t 1 --json >"$T/pf.json" 2>"$T/pf.err"
jq_check bench_prefix "$T/pf.json" \
  '.cached_tokens_cold == 0 and .cached_tokens_warm_min == 128 and .ttft_cold_ms > 0 and .ttft_warm_ms > 0 and (.rows|length) == 3'
"$PAGELLM" bench prefix -m "$TINY" --system-tokens 64 --requests 2 -t 1 --no-prefix-cache --json >"$T/pf0.json" 2>&1
jq_check bench_prefix_off "$T/pf0.json" '.cached_tokens_warm_min == 0'

# tiers: the RAM hit and the disk hit (a fresh engine) serve the whole prefix (128 = 8 blocks)
"$PAGELLM" bench tiers -m "$TINY" --prefix-tokens 128 --reps 1 -t 1 --kv-disk "$T/tiers" --json >"$T/bt.json" 2>"$T/bt.err"
jq_check bench_tiers "$T/bt.json" \
  '.tier == "disk" and .cached_cold == 0 and .cached_ram >= 128 and .cached_tier == 128 and .ttft_cold_ms > 0 and .ttft_tier_ms > 0'

# serve: a child server, two levels, every stream exactly --max-tokens long
if [ -f "$M" ]; then
  timeout 120 "$PAGELLM" bench serve -m "$M" --clients 1,3 --max-tokens 8 -t 1 --no-peer --json --svg "$T/sv.svg" \
    >"$T/sv.json" 2>"$T/sv.err"
  rc=$?
  check bench_serve_exit [ "$rc" -eq 0 ]
  jq_check bench_serve_rows "$T/sv.json" \
    'select(.clients == 3) | .tokens == 24 and .total_tok_s > 0 and .ttft_p50_ms > 0 and .itl_p99_ms >= .itl_p50_ms and .engine_decode_tok_s > 0 and .engine_total_tok_s > 0 and .first_token_spread_ms >= 0 and .engine_first_token_spread_ms >= 0'
  check bench_serve_levels [ "$(grep -c '"clients"' "$T/sv.json")" -eq 2 ]
  # --svg: throughput, TTFT and ITL against clients, a point per level; no peer series without a peer
  if command -v xmllint >/dev/null; then
    check bench_serve_svg_wellformed xmllint --noout "$T/sv.svg"
    check bench_serve_svg_series [ "$(svgx "$T/sv.svg" 'count(//*[@class="series"])')" = 7 ]
    check bench_serve_svg_levels [ "$(svgx "$T/sv.svg" 'count(//*[@data-name="HTTP total tok/s"]/*[local-name()="circle"])')" = 2 ]
    check bench_serve_svg_no_peer [ "$(svgx "$T/sv.svg" 'count(//*[@data-name="peer decode tok/s"])')" = 0 ]
  else
    skip bench_serve_svg "xmllint not installed (scripts/deps.sh: libxml2-utils)"
  fi
  if grep -q Sanitizer "$T/sv.err"; then fail bench_serve_sanitizer "$(head -c 400 "$T/sv.err")"; fi
else
  skip bench_serve "$M not found"
fi

# soak: 8 streaming clients for 4 s in a 20-block pool (so that sequences
# are preempted), 20% hanging up mid-stream: no error, the pool back to 0,
# RSS flat, exit 0; with a context too small for its prompts the errors
# make it exit 1 and name the failed check
if [ -f "$M" ]; then
  timeout 120 "$PAGELLM" bench soak -m "$M" --seconds 4 --kv-blocks 20 --ctx 256 --disconnect 0.2 -t 1 --json \
    >"$T/soak.json" 2>"$T/soak.err"
  rc=$?
  check bench_soak_exit [ "$rc" -eq 0 ]
  [ "$rc" -eq 0 ] || sed 's/^/    soak: /' "$T/soak.err" | tail -n 30 >&2 # the server's last lines say why
  jq_check bench_soak_fields "$T/soak.json" \
    '.ok == true and .failed == [] and .errors == 0 and .completed > 0 and .disconnects > 0 and .requests == .completed + .disconnects + .errors and .kv_blocks_total == 20 and .kv_blocks_used_end == 0 and .requests_running_end == 0 and .preemptions > 0 and .latency_p99_ms >= .latency_p50_ms and .latency_p50_ms > 0 and .rss_start_kb > 0 and .rss_end_kb > 0 and .server_clean_exit == true and (.rss_judged | type) == "boolean"'
  timeout 60 "$PAGELLM" bench soak -m "$M" --seconds 1 --clients 2 --ctx 48 -t 1 --json >"$T/soak_bad.json" 2>"$T/soak_bad.err"
  rc=$?
  check bench_soak_fails_exit_1 [ "$rc" -eq 1 ]
  jq_check bench_soak_fails_names_check "$T/soak_bad.json" '.ok == false and .errors > 0 and (.failed | index("errors")) != null'
else
  skip bench_soak "$M not found"
fi

# usage errors name the flag and exit 2
# kv-dtype: one JSON line per dtype asked for, f16 first (the reference)
"$PAGELLM" bench kv-dtype -m "$TINY" --depth 40 --n-gen 4 -t 1 --dtypes kivi4,fp8_e4m3 --json >"$T/kvd.json" 2>"$T/kvd.err"
check bench_kv_dtype_rows [ "$(wc -l <"$T/kvd.json")" -eq 3 ]
jq_check bench_kv_dtype_f16_first "$T/kvd.json" '[., inputs] | .[0].kv_dtype == "f16" and .[0].vs_f16 == 1'
jq_check bench_kv_dtype_kivi4 "$T/kvd.json" \
  '[., inputs] | map(select(.kv_dtype == "kivi4"))[0] | .decode_tok_s > 0 and .cpu_ms_per_token > 0 and .stage_bytes_per_seq > 0'
expect_exit bench_kv_dtype_bad 2 "--dtypes" -- "$PAGELLM" bench kv-dtype -m "$TINY" --dtypes f16,nosuch
expect_exit bench_unknown 2 "unknown benchmark" -- "$PAGELLM" bench nosuch
expect_exit bench_kvm_no_model 2 "missing -m" -- "$PAGELLM" bench kv-memory
expect_exit bench_kvm_lengths 2 "min-len" -- "$PAGELLM" bench kv-memory -m "$TINY" --min-len 64 --max-len 32
expect_exit bench_serve_clients 2 "clients" -- "$PAGELLM" bench serve -m "$TINY" --clients 0,4
expect_exit bench_soak_pool 2 "--kv-blocks or --kv-mem" -- "$PAGELLM" bench soak -m "$TINY" --kv-blocks 4 --kv-mem 1M
expect_exit bench_cache_positions 2 "positions" -- "$PAGELLM" bench cache -m "$TINY" --positions 64,32
for f in "$T"/*.err; do
  if grep -q Sanitizer "$f"; then fail "bench_sanitizer_$(basename "$f" .err)" "$(head -c 400 "$f")"; fi
done
