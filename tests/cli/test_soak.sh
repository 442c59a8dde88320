#!/usr/bin/env bash
# test_soak.sh - the short soak: tests/serve/soak.mjs's 8 clients (chat,
# completions, n=3, streams, abrupt disconnects, bad requests, long
# prompts) for SOAK_SECONDS (default 60) against `pagellm serve` with a KV
# pool of 20 blocks, so that sequences are preempted. The server is the
# ASan + UBSan + LSan binary of `make faults` (no fault set), with the
# engine's invariant check on every step (PAGELLM_ENGINE_CHECK). PASS when
# no answer was unexpected, the pool is back to 0 used blocks, there were
# preemptions, and the server exits 0 on SIGTERM without a sanitizer report
# (LeakSanitizer runs at its exit: that is the leak check; RSS is reported).
# The streaming soak as a command, with its own checks and no Node, is
# `pagellm bench soak` (docs/security.md); this script keeps the wider
# request mix under the sanitizers.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
SECS=${SOAK_SECONDS:-60}
if [ ! -f "$M" ]; then skip soak "$M not found"; exit 0; fi
command -v node >/dev/null || { skip soak "node not installed"; exit 0; }
if ! make -s --no-print-directory faults >"$T/build.log" 2>&1; then
  fail soak_build "make faults: $(tail -5 "$T/build.log")"; exit 0
fi
export ASAN_OPTIONS=detect_leaks=1:exitcode=66 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export PAGELLM_ENGINE_CHECK=1
PAGELLM=${FAULTS_BUILD:-build-faults}/pagellm
# 20 blocks of 16 tokens (10240 bytes each for stories260K at f16)
serve_start "$T/serve.log" "$M" --kv-mem 204800 --max-seqs 8 -c 256 --max-queue 64
trap 'kill -KILL "$SPID" 2>/dev/null; rm -rf "$T"' EXIT
if [ -z "$PORT" ]; then fail soak_starts "$(tail -3 "$T/serve.log")"; exit 0; fi
timeout $((SECS + 60)) node tests/serve/soak.mjs "http://127.0.0.1:$PORT" "$SECS" 8 "$SPID" >"$T/soak.json" 2>"$T/soak.err"
rc=$?
echo "# soak ${SECS}s: $(cat "$T/soak.json")"
jqget() { jq -r "$1" "$T/soak.json" 2>/dev/null; }
if [ "$rc" -ne 0 ] && [ ! -s "$T/soak.json" ]; then fail soak_runs "exit $rc: $(tail -3 "$T/soak.err")"
else
  [ "$(jqget .errors)" = 0 ] && pass soak_no_unexpected_answer || fail soak_no_unexpected_answer "$(jqget '.first_errors | join(" | ")')"
  [ "$(jqget .blocks_used)" = 0 ] && [ "$(jqget .running)" = 0 ] && pass soak_pool_drains_to_0 ||
    fail soak_pool_drains_to_0 "blocks used $(jqget .blocks_used), running $(jqget .running)"
  [ "$(jqget '.completed > 0 and .disconnects > 0 and .bad_refused > 0')" = true ] && pass soak_mix_ran ||
    fail soak_mix_ran "$(jqget .by_kind)"
  [ "$(jqget '.preemptions > 0')" = true ] && pass soak_preempts || fail soak_preempts "no preemption in a 20-block pool"
fi
kill -TERM "$SPID"; wait "$SPID"; src=$?
if grep -qE "Sanitizer|runtime error:" "$T/serve.log"; then
  fail soak_server_clean_exit "$(grep -m2 -E 'Sanitizer|runtime error' "$T/serve.log" | tr '\n' ' ')"
elif [ "$src" -ne 0 ]; then fail soak_server_clean_exit "exit $src: $(tail -2 "$T/serve.log")"
else pass soak_server_clean_exit; fi
