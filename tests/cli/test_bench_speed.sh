#!/usr/bin/env bash
# test_bench_speed.sh - `pagellm bench speed` works (not how fast): usage
# errors exit 2 naming the flag, --help, and a tiny run (a synthetic tiny
# model made by the bench itself under a scratch --dir, one rep, one thread,
# a 64 MiB bandwidth buffer) whose --json output is a header and rows with
# exactly the documented fields. The peer part (peer_tok_s of the 8-sequence
# test) runs only if peer-bench is built. Speeds are never asserted.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null || { skip bench_speed "jq not installed"; exit 0; }
if ! "$PAGELLM" bench speed --help >/dev/null 2>&1; then skip bench_speed "this pagellm has no bench speed"; exit 0; fi

# jq_check NAME FILE FILTER: PASS if the JSON stream in FILE satisfies FILTER (slurped).
jq_check() {
  if jq -se "$3" "$2" >/dev/null 2>&1; then pass "$1"; else fail "$1" "$(head -c 600 "$2") does not satisfy $3"; fi
}

"$PAGELLM" bench speed --help >"$T/help.txt" 2>&1
check bench_speed_help grep -q -- '--tests' "$T/help.txt"
expect_exit bench_speed_reps 2 "reps" -- "$PAGELLM" bench speed --reps 0
expect_exit bench_speed_tests 2 "tests.*(pp512|nosuch)" -- "$PAGELLM" bench speed --tests tg128,nosuch
expect_exit bench_speed_models 2 "models" -- "$PAGELLM" bench speed --models 110m:q9_9
expect_exit bench_speed_models_form 2 "models" -- "$PAGELLM" bench speed --models 110m
expect_exit bench_speed_unknown_flag 2 "frobnicate" -- "$PAGELLM" bench speed --frobnicate
expect_exit bench_speed_rss_ctx 2 "rss-ctx" -- "$PAGELLM" bench speed --tests rss --rss-ctx 100 --rss-model "$T/none.gguf"
expect_exit bench_speed_missing_file 1 "none.gguf" -- "$PAGELLM" bench speed --models "$T/none.gguf" --tests tg128

peer_flag=(--no-peer)
have_peer && peer_flag=(--peer "$PEER")
# tg128 (after a 512-id prompt), the 8-sequence decode and the RSS of
# `pagellm run` on a small context; tiny's 512-id vocabulary is too small
# for peer-bench's 512-id prompt, so only tg128x8 gets a peer figure.
timeout 120 "$PAGELLM" bench speed --models tiny:q8_0 --dir "$T/models" --reps 1 -t 1 --bw-mib 64 \
  --tests tg128,tg128x8,rss --rss-model tiny:q8_0 --rss-ctx 1024 "${peer_flag[@]}" --json --svg "$T/speed.svg" \
  >"$T/speed.json" 2>"$T/speed.err"
rc=$?
check bench_speed_exit [ "$rc" -eq 0 ]
# --svg: well-formed, a panel per speed test, a pagellm bar in each, the peer's where it ran
svgx() { xmllint --xpath "$2" "$1" 2>/dev/null; }
if command -v xmllint >/dev/null; then
  check bench_speed_svg_wellformed xmllint --noout "$T/speed.svg"
  check bench_speed_svg_panels [ "$(svgx "$T/speed.svg" 'count(//*[local-name()="g"][@class="panel"])')" = 2 ]
  check bench_speed_svg_ours [ "$(svgx "$T/speed.svg" 'count(//*[@data-name="pagellm"]/*[local-name()="rect"])')" = 2 ]
  want_peer=$(jq -s '[.[1:][] | select(.test != "rss" and .peer_tok_s != null)] | length' "$T/speed.json")
  check bench_speed_svg_peer [ "$(svgx "$T/speed.svg" 'count(//*[@data-name="peer"]/*[local-name()="rect"])')" = "$want_peer" ]
else
  skip bench_speed_svg "xmllint not installed (scripts/deps.sh: libxml2-utils)"
fi
check bench_speed_model_made [ -s "$T/models/tiny-q8_0.gguf" ]
check bench_speed_no_temp_left [ -z "$(ls "$T/models" | grep tmp)" ]
jq_check bench_speed_header "$T/speed.json" '.[0].bench == "speed" and .[0].bandwidth_gb_s > 0 and .[0].threads == 1'
# the probe's read loop: plain loads or with the 8 KiB prefetch, whichever read faster at the start
jq_check bench_speed_read_loop "$T/speed.json" '.[0].bandwidth_prefetch_bytes == 0 or .[0].bandwidth_prefetch_bytes == 8192'
jq_check bench_speed_row_fields "$T/speed.json" \
  '[.[1:][] | select(.test != "rss") | keys] == [["bandwidth_gb_s","floor_share","floor_tok_s","model","pagellm_tok_s","peer_tok_s","ratio","roofline_share","roofline_tok_s","test","weights"],
                                                 ["bandwidth_gb_s","floor_share","floor_tok_s","model","pagellm_tok_s","peer_tok_s","ratio","roofline_share","roofline_tok_s","test","weights"]]'
# the arithmetic floor is for decode rows at depth only (and its peak is measured only for them)
jq_check bench_speed_no_floor "$T/speed.json" 'all(.[1:][] | select(.test != "rss"); .floor_tok_s == null) and all(.[]; .bench != "fma_peak")'
jq_check bench_speed_rows "$T/speed.json" \
  '[.[1:][] | select(.test != "rss")] as $r | ($r | map(.test)) == ["tg128","tg128x8"] and
   all($r[]; .model == "tiny" and .weights == "q8_0" and .pagellm_tok_s > 0 and .roofline_tok_s > 0 and .bandwidth_gb_s > 0)'
# one rep: the run's share is its tok/s over its own roofline
jq_check bench_speed_share "$T/speed.json" \
  'all(.[1:][] | select(.test != "rss"); (.roofline_share - .pagellm_tok_s / .roofline_tok_s | fabs) < 1e-4 * .roofline_share)'
jq_check bench_speed_rss "$T/speed.json" \
  '[.[] | select(.test == "rss")] | length == 1 and .[0].pagellm_rss_mib > 0 and .[0].ctx == 1024 and .[0].tokens > 0'
if have_peer; then
  jq_check bench_speed_peer "$T/speed.json" \
    '.[] | select(.test == "tg128x8") | .peer_tok_s > 0 and ((.ratio - .pagellm_tok_s / .peer_tok_s) | fabs) < 1e-3 * .ratio'
else
  skip bench_speed_peer "peer-bench not built"
fi
# the table form: a header line and one line per test
"$PAGELLM" bench speed --models "$T/models/tiny-q8_0.gguf" --reps 1 -t 1 --bw-mib 64 --tests tg128 --no-peer \
  --json-out "$T/out.json" >"$T/speed.txt" 2>&1
check bench_speed_table grep -Eq '^tiny-q8_0 +q8_0 +tg128 ' "$T/speed.txt"
jq_check bench_speed_json_out "$T/out.json" 'length == 2 and .[1].model == "tiny-q8_0" and .[1].test == "tg128" and .[1].peer_tok_s == null'
check bench_speed_bandwidth grep -q 'memory read bandwidth' "$T/speed.txt"
check bench_speed_read_loop_line grep -Eq '^read loop: (plain loads|loads with prefetch) \(calibration, medians of 4: plain loads [0-9.]+ GB/s, with the lines 8 KiB ahead prefetched into L2 [0-9.]+\)$' "$T/speed.txt"
# long-context rows: one per (row, KV dtype), named ROW:DTYPE; decode rows have a roofline of their dtype's bytes
expect_exit bench_speed_depth_bad 2 "tests" -- "$PAGELLM" bench speed --tests tg32@d0
expect_exit bench_speed_seqs_bad 2 "tests" -- "$PAGELLM" bench speed --tests tg32x1@d64
expect_exit bench_speed_seqs_many 2 "tests" -- "$PAGELLM" bench speed --tests tg32x9@d64
expect_exit bench_speed_mixed_many 2 "tests" -- "$PAGELLM" bench speed --tests tg32@d1+d2+d3+d4+d5+d6+d7+d8+d9
expect_exit bench_speed_mixed_open 2 "tests" -- "$PAGELLM" bench speed --tests tg32@d64+
expect_exit bench_speed_mixed_seqs 2 "tests" -- "$PAGELLM" bench speed --tests tg32x2@d64+d16
expect_exit bench_speed_mixed_pp 2 "tests" -- "$PAGELLM" bench speed --tests pp512@d64+d16
expect_exit bench_speed_kv_dtypes_bad 2 "kv-dtypes" -- "$PAGELLM" bench speed --tests tg32@d64 --kv-dtypes f16,q9
PAGELLM_FWD_PROFILE=1 timeout 120 "$PAGELLM" bench speed --models "$T/models/tiny-q8_0.gguf" --reps 1 -t 1 --bw-mib 64 --no-peer \
  --tests tg32@d64,pp512@d64,tg32x2@d64,tg32@d64+d16 --kv-dtypes f16,q4_0 --json >"$T/depth.json" 2>"$T/depth.err"
check bench_speed_depth_exit [ $? -eq 0 ]
jq_check bench_speed_depth_rows "$T/depth.json" \
  '[.[2:][] | .test] == ["tg32@d64:f16","tg32@d64:q4_0","pp512@d64:f16","pp512@d64:q4_0","tg32x2@d64:f16","tg32x2@d64:q4_0",
                         "tg32@d64+d16:f16","tg32@d64+d16:q4_0"] and
   all(.[2:][]; .pagellm_tok_s > 0 and .peer_tok_s == null)'
jq_check bench_speed_depth_roofline "$T/depth.json" \
  '[.[2:][] | select(.test | startswith("tg32"))] as $d | ($d[1].roofline_tok_s / $d[1].bandwidth_gb_s) > ($d[0].roofline_tok_s / $d[0].bandwidth_gb_s) and
   all(.[2:][] | select(.test | startswith("pp512")); .roofline_tok_s == null)'
# the forward profile (stderr) keeps one-token decode, several sequences'
# steps and other batches apart: 31 steps of the two sequences in each dtype
check bench_speed_profile_kinds grep -Eq '^pagellm forward profile, decode steps of several sequences \(a token each\): 31 passes, 62 tokens, .* ms per step' "$T/depth.err"
check bench_speed_profile_decode grep -q '^pagellm forward profile, decode (1-token passes)' "$T/depth.err"
# two sequences at a depth: twice the tokens a step for the weights once and
# twice the KV, so per GB/s above one sequence's roofline and below twice it
jq_check bench_speed_depth_seqs_roofline "$T/depth.json" \
  '[.[2:][] | select(.test | startswith("tg32")) | {key: .test, value: (.roofline_tok_s / .bandwidth_gb_s)}] |
   from_entries as $p |
   all(["f16","q4_0"][]; $p["tg32x2@d64:" + .] > $p["tg32@d64:" + .] and $p["tg32x2@d64:" + .] < 2 * $p["tg32@d64:" + .])'
# sequences at depths 64 and 16: one at 64 (1e9 / (w + 80 k) per GB/s) and
# two at 64 (2e9 / (w + 160 k)) give the weights w and a token's KV k; the
# mixed row's roofline must count the KV of 80 + 32 tokens (within the
# JSON's rounding; counting 64 + 64, or no + 16 each, is off by 1.5-5%)
jq_check bench_speed_depth_mixed_roofline "$T/depth.json" \
  '[.[2:][] | select(.test | startswith("tg32")) | {key: .test, value: (.roofline_tok_s / .bandwidth_gb_s)}] |
   from_entries as $p |
   all(["f16","q4_0"][]; (1e9 / $p["tg32@d64:" + .]) as $a | (2e9 / $p["tg32x2@d64:" + .]) as $b | (($b - $a) / 80) as $k |
       ((2e9 / ($a - 80 * $k + 112 * $k)) / $p["tg32@d64+d16:" + .] - 1 | fabs) < 1e-3)'
# decode rows at depth: the CPU's multiply-add peak (an object after the
# header), and a floor no faster than the roofline (it adds the arithmetic to
# the bytes), our share of it from the same run; prompt rows have none
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  jq_check bench_speed_fma_peak "$T/depth.json" \
    '.[1].bench == "fma_peak" and .[1].threads == 1 and .[1].f32_g_macs_s > 0 and .[1].i8_g_macs_s > .[1].f32_g_macs_s and
     (.[1].f32_kind | test("^f32 fma [yz]mm$")) and (.[1].i8_kind | test("^int8 (dpbusd zmm|maddubs ymm)$"))'
  jq_check bench_speed_depth_floor "$T/depth.json" \
    'all(.[2:][] | select(.test | startswith("tg32")); .floor_tok_s > 0 and .floor_tok_s <= .roofline_tok_s * (1 + 1e-9) and
       ((.floor_share - .pagellm_tok_s / .floor_tok_s) | fabs) < 1e-4 * .floor_share) and
     all(.[2:][] | select(.test | startswith("pp512")); .floor_tok_s == null and .floor_share == null)'
else
  skip bench_speed_depth_floor "no AVX2 with FMA: no multiply-add peak"
fi
for f in "$T"/*.err; do
  if grep -q Sanitizer "$f"; then fail "bench_speed_sanitizer" "$(head -c 400 "$f")"; fi
done
