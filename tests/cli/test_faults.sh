#!/usr/bin/env bash
# test_faults.sh - the fault sweep over the faults build (`make faults`:
# ASan + UBSan + LSan, PAGELLM_FAULT; src/base/fault.c). For each scenario it
# counts the allocations, file reads and socket writes of a clean run, then
# runs it again once per N with the Nth one failing: the first 100 densely,
# later ones at evenly spaced N (a fixed list, so that a failure reproduces).
#
#   harness load | run | engine  (tests/faults/fault_sweep.c): model load;
#       a context's prompt, decode and prefix-cache hit; the engine's fork
#       (n=3) and prefix hit, kv_check on every step (PAGELLM_ENGINE_CHECK)
#   pagellm run                  the CLI: exits 0, or non-zero with a message
#   pagellm serve                a completion, a streamed chat, n=2 and a
#       repeated prompt with the fault inside them: each answer is a 200, a
#       JSON error, or (a failed write) a dropped connection; then the server
#       still answers, its pool is back to 0 used blocks, and it exits 0
#       without a leak.
#   the disk KV tier             serve --kv-disk on a full disk (disk:1+) and
#       with EIO on every entry read after a restart: the text of a server
#       without tiers, the failures counted, a clean exit.
# Nothing may crash, hang, leak, break an invariant or fail without a word.
# FAULTS_SPARSE (default 12) sets how many N are tried beyond the first 100,
# FAULTS_SERVE_POINTS (12) how many allocations inside the served requests.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
FB=${FAULTS_BUILD:-build-faults}
SPARSE=${FAULTS_SPARSE:-12}
if [ ! -f "$M" ]; then skip faults "$M not found"; exit 0; fi
for c in curl jq; do command -v $c >/dev/null || { skip faults "$c not installed"; exit 0; }; done
if ! make -s --no-print-directory faults >"$T/build.log" 2>&1; then
  fail faults_build "make faults: $(tail -5 "$T/build.log")"; exit 0
fi
export ASAN_OPTIONS=detect_leaks=1:exitcode=66:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=67
export PAGELLM_ENGINE_CHECK=1
SPIDS=()
trap 'for p in "${SPIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$T"' EXIT

# points LO COUNT: the N to try: densely LO+1..LO+100 (the operations the
# scenario adds to a model load, or the load itself with LO 0), then SPARSE
# evenly spaced over 1..COUNT
points() {
  local lo=$1 c=$2 i
  for ((i = lo + 1; i <= c && i <= lo + 100; i++)); do echo "$i"; done
  for ((i = 1; i <= SPARSE; i++)); do ((c * i / SPARSE > 0)) && echo $((c * i / SPARSE)); done
}
# count KIND ERRFILE: the number a clean run reported (PAGELLM_FAULT=count)
count_of() { grep -o "pagellm faults: .*" "$2" | tail -1 | grep -o "$1=[0-9]*" | cut -d= -f2; }

sanitized() { grep -qE "Sanitizer|runtime error:" "$1"; }

# One faulted run of a sweep: the Nth call of KIND fails; a verdict file
# $T/NAME.N.bad when the program did not fail cleanly.
sweep_point() {
  local n=$1 kind=$2 why=$3 name=$4; shift 4
  local err=$T/$name.$n.err rc bad=""
  PAGELLM_FAULT=$kind:$n timeout 60 "$@" >/dev/null 2>"$err"; rc=$?
  if sanitized "$err"; then bad="sanitizer: $(grep -m1 -E 'Sanitizer|runtime error' "$err")"
  elif [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then bad="exit $rc: $(tail -2 "$err" | tr '\n' ' ')"
  elif [ "$rc" -eq 1 ] && ! grep -q "$why" "$err"; then bad="exit 1 without '$why': $(tail -2 "$err" | tr '\n' ' ')"
  fi
  [ -n "$bad" ] && echo "$n: $bad" >"$T/$name.$n.bad"
  rm -f "$err"
  return 0
}
export -f sweep_point sanitized
export T

# sweep NAME KIND LO CMD...: CMD once per N (points LO COUNT); exit 0, or
# exit 1 with a message that names the fault (out of memory; the I/O error)
# is clean: a message that blames something else hides the cause. The runs
# are independent processes: as many at a time as the machine has cores;
# the first failing N (the smallest) is reported.
sweep() {
  local name=$1 kind=$2 lo=$3; shift 3
  local err=$T/$name.err rc c
  PAGELLM_FAULT=count timeout 60 "$@" >/dev/null 2>"$err"; rc=$?
  c=$(count_of "$kind" "$err")
  if [ "$rc" -ne 0 ] || [ -z "$c" ]; then
    fail "faults_${name}_${kind}" "the clean run exited $rc: $(tail -3 "$err")"; return
  fi
  LAST_COUNT=$c
  local why="out of memory"
  [ "$kind" = read ] && why="Input/output error"
  local ns tried
  ns=$(points "$lo" "$c" | sort -nu)
  tried=$(wc -w <<<"$ns")
  xargs -P "$(nproc)" -I{} bash -c 'sweep_point "$@"' _ {} "$kind" "$why" "$name" "$@" <<<"$ns"
  local bad
  bad=$(cat "$T/$name".*.bad 2>/dev/null | sort -n | head -n 1)
  rm -f "$T/$name".*.bad
  if [ -n "$bad" ]; then fail "faults_${name}_${kind}" "PAGELLM_FAULT=$kind:$bad ($*)"
  else pass "faults_${name}_${kind}_${tried}_of_${c}"; fi
}

PARTS=${FAULTS_PARTS:-harness serve}
if [[ $PARTS == *harness* ]]; then
  sweep load alloc 0 "$FB/faults/fault_sweep" load "$M"
  LOAD=$LAST_COUNT
  sweep load read 0 "$FB/faults/fault_sweep" load "$M"
  for s in run engine; do
    sweep "$s" alloc "$LOAD" "$FB/faults/fault_sweep" "$s" "$M"
  done
  sweep cli_run alloc "$LOAD" "$FB/pagellm" run -m "$M" -p "Once upon a time" -n 12 --seed 3
  sweep cli_run read 0 "$FB/pagellm" run -m "$M" -p "Once upon a time" -n 12 --seed 3
fi
[[ $PARTS == *serve* ]] || exit 0
PAGELLM=$FB/pagellm # serve_start runs it

# ---------------------------------------------------------------- the server
LONG="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends."
COMPL=$(jq -nc --arg p "$LONG" '{prompt: $p, max_tokens: 8, seed: 1}')
CHAT='{"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":8,"stream":true,"seed":2}'
FORK='{"prompt":"The dog ran","max_tokens":8,"n":2,"seed":3}'

# one request; prints OK or why not. A JSON answer is a 200 with choices or
# a 5xx error object (the requests are valid: a fault is never the client's
# fault); a stream ends with [DONE] or an error event; a dropped connection
# is allowed only when $1 says so (a failed socket write).
req() {
  local drop_ok=$1 path=$2 body=$3 out=$T/resp code rc
  code=$(curl -s -m 30 -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "$body" "$URL$path"); rc=$?
  if [ "$rc" -ne 0 ] || [ "$code" = 000 ]; then
    # a connection the server closed: empty reply (52), receive error (56),
    # partial body (18); never a refused connection or a timeout
    [ "$drop_ok" = 1 ] && [[ " 18 52 56 " == *" $rc "* ]] && { echo OK; return; }
    echo "curl exit $rc (code $code) on $path"; return
  fi
  if grep -q '^data: ' "$out"; then
    if grep -q '^data: \[DONE\]' "$out" || grep '^data: ' "$out" | sed 's/^data: //' | jq -e '.error.message' >/dev/null 2>&1; then
      echo OK; else echo "stream on $path ended without [DONE] or an error"; fi
    return
  fi
  if [ "$code" = 200 ] && jq -e '.choices | length > 0' "$out" >/dev/null 2>&1; then echo OK
  elif [ "$code" -ge 500 ] && jq -e '.error.message and .error.type' "$out" >/dev/null 2>&1; then echo OK
  else echo "$path: $code $(head -c 200 "$out")"; fi
}

# serve_case FAULT: starts the server with PAGELLM_FAULT=FAULT, sends the
# requests, checks it still serves and drains; prints OK or why not.
serve_case() {
  local fault=$1 drop_ok=0 log=$T/serve.log r
  [[ $fault == write:* ]] && drop_ok=1
  PAGELLM_FAULT=$fault serve_start "$log" "$M" --kv-mem 262144 --max-seqs 4 -c 256
  SPIDS+=("$SPID")
  URL=http://127.0.0.1:$PORT
  if [ -z "$PORT" ]; then
    wait "$SPID"; r=$?
    local why="out of memory"
    [[ $fault == read:* ]] && why="Input/output error"
    if [ "$r" -ne 1 ] || sanitized "$log" || ! grep -q "$why" "$log"; then echo "start failed badly (exit $r): $(tail -2 "$log")"
    elif [[ $fault == count ]]; then echo "no start: $(tail -2 "$log")"
    else echo OK; fi
    return
  fi
  for q in "/v1/completions|$COMPL" "/v1/chat/completions|$CHAT" "/v1/completions|$FORK" "/v1/completions|$COMPL"; do
    r=$(req "$drop_ok" "${q%%|*}" "${q#*|}")
    [ "$r" = OK ] || { echo "$r; log: $(grep -v '^  *#' "$log" | tail -4 | tr '\n' ' ')"; kill -KILL "$SPID"; return; }
  done
  # still serving; its pool back to 0 used blocks (a persistent fault
  # leaves nothing to answer with: then only a clean exit is asked)
  local used="" i
  if [[ $fault == *+ ]]; then used=0; else
  for i in $(seq 1 50); do
    used=$(curl -s -m 10 "$URL/metrics" | awk '/^pagellm_kv_blocks_used /{print $2}')
    [ "$used" = 0 ] && break
    sleep 0.1
  done; fi
  if [ "$used" != 0 ]; then
    kill -0 "$SPID" 2>/dev/null && r="alive" || { wait "$SPID"; r="gone, exit $?"; }
    echo "blocks used after the requests: '$used' (server $r); log: $(tail -3 "$log" | tr '\n' ' ')"
    kill -KILL "$SPID" 2>/dev/null; return
  fi
  r=$(req "$drop_ok" /v1/completions "$FORK")
  [[ $fault == *+ ]] && r=OK
  if [ "$r" != OK ]; then echo "no clean answer after the fault: $r"; kill -KILL "$SPID"; return; fi
  kill -TERM "$SPID"; wait "$SPID"; r=$?
  if sanitized "$log"; then echo "sanitizer: $(grep -m1 -E 'Sanitizer|runtime error' "$log")"
  elif [ "$r" -ne 0 ]; then echo "exit $r after SIGTERM: $(tail -2 "$log")"
  else echo OK; fi
}

r=$(serve_case count)
cs=$(count_of alloc "$T/serve.log"); cw=$(count_of write "$T/serve.log")
if [ "$r" != OK ] || [ -z "$cs" ]; then fail faults_serve_clean "$r"; exit 0; fi
pass faults_serve_clean
# the allocations of a start alone, so that the sweep lands inside requests
PAGELLM_FAULT=count serve_start "$T/start.log" "$M" --kv-mem 262144 --max-seqs 4 -c 256
kill -TERM "$SPID"; wait "$SPID"
c0=$(count_of alloc "$T/start.log")

serve_sweep() { # NAME KIND FIRST LAST COUNT
  local name=$1 kind=$2 lo=$3 hi=$4 k=$5 i n r bad="" tried=0
  for ((i = 0; i < k; i++)); do
    n=$((lo + (hi - lo) * i / (k > 1 ? k - 1 : 1)))
    r=$(serve_case "$kind:$n"); tried=$((tried + 1))
    [ "$r" = OK ] || { bad="$kind:$n: $r"; break; }
  done
  if [ -n "$bad" ]; then fail "faults_serve_$name" "PAGELLM_FAULT=$bad"
  else pass "faults_serve_${name}_${tried}"; fi
}
serve_sweep start alloc 1 "$c0" 6
serve_sweep start_read read 1 "$(count_of read "$T/start.log")" 4
serve_sweep requests alloc $((c0 + 1)) "$cs" "${FAULTS_SERVE_POINTS:-12}"
serve_sweep requests_write write 1 "$cw" "$cw"
r=$(serve_case "alloc:$((c0 + (cs - c0) / 3))+")
[ "$r" = OK ] && pass faults_serve_persistent_alloc || fail faults_serve_persistent_alloc "$r"

# ------------------------------------------------------- the disk KV tier
# A full disk (every file write fails with ENOSPC) and EIO on every entry
# read after a restart: the answers equal a run without tiers (recomputed,
# never wrong), the failures are counted in /metrics, and the server exits
# 0 without a leak.
TIER_BODY=$(jq -nc --arg p "$LONG $LONG $LONG" '{prompt: $p, max_tokens: 8, temperature: 0}')
tier_text() { curl -s -m 60 -H 'Content-Type: application/json' -d "$TIER_BODY" "$URL/v1/completions" | jq -r '.choices[0].text // "no answer"'; }
tier_metric() { curl -s -m 10 "$URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# tier_serve FAULT LOG ARGS...: a server (PAGELLM_FAULT=FAULT unless empty); sets URL
tier_serve() {
  local fault=$1 log=$2; shift 2
  if [ -n "$fault" ]; then PAGELLM_FAULT=$fault serve_start "$log" "$M" "$@"; else serve_start "$log" "$M" "$@"; fi
  SPIDS+=("$SPID")
  URL=http://127.0.0.1:$PORT
  [ -n "$PORT" ]
}
# tier_stop LOG: SIGTERM; STOP = OK or why not (not in a subshell: the
# server is this shell's child)
tier_stop() {
  local r
  kill -TERM "$SPID"; wait "$SPID"; r=$?
  if sanitized "$1"; then STOP="sanitizer: $(grep -m1 -E 'Sanitizer|runtime error' "$1")"
  elif [ "$r" -ne 0 ]; then STOP="exit $r after SIGTERM: $(tail -2 "$1")"
  else STOP=OK; fi
}
D=$T/tier
if tier_serve "" "$T/ref.log"; then REF=$(tier_text); tier_stop "$T/ref.log"; else REF=""; fi
if [ -z "$REF" ] || [ "$REF" = "no answer" ]; then fail faults_tier_reference "no answer without tiers: $(tail -2 "$T/ref.log")"
else
  mkdir -p "$D/full"
  if tier_serve "disk:1+" "$T/full.log" --kv-disk "$D/full"; then
    a=$(tier_text); b=$(tier_text)
    sleep 0.5 # the write-behind thread meets the full disk
    errs=$(tier_metric 'pagellm_kv_tier_errors_total{tier="disk"}')
    tier_stop "$T/full.log"
    if [ "$a" != "$REF" ] || [ "$b" != "$REF" ]; then fail faults_tier_disk_full "text '$a' / '$b', expected '$REF'"
    elif ! [ "${errs:-0}" -gt 0 ] 2>/dev/null; then fail faults_tier_disk_full "no disk tier error counted (errors '${errs}')"
    elif [ "$STOP" != OK ]; then fail faults_tier_disk_full "$STOP"
    else pass faults_tier_disk_full; fi
  else fail faults_tier_disk_full "no start: $(tail -2 "$T/full.log")"; fi

  # fill a directory, then read every entry with EIO after a restart
  mkdir -p "$D/eio"
  tier_serve "" "$T/fill.log" --kv-disk "$D/eio" && { tier_text >/dev/null; tier_stop "$T/fill.log"; }
  tier_serve count "$T/count.log" --kv-disk "$D/eio" && tier_stop "$T/count.log"
  c=$(count_of read "$T/count.log")
  if [ -z "$c" ] || [ -z "$(find "$D/eio" -name '*.seg' -size +0 | head -1)" ]; then
    fail faults_tier_read_eio "no entries written or no read count: $(tail -2 "$T/fill.log")"
  elif tier_serve "read:$((c + 1))+" "$T/eio.log" --kv-disk "$D/eio"; then
    a=$(tier_text)
    hits=$(tier_metric 'pagellm_kv_tier_hits_total{tier="disk"}')
    tier_stop "$T/eio.log"
    if [ "$a" != "$REF" ]; then fail faults_tier_read_eio "text '$a', expected '$REF'"
    elif [ "${hits:-x}" != 0 ]; then fail faults_tier_read_eio "disk hits '$hits' with every entry read failing"
    elif [ "$STOP" != OK ]; then fail faults_tier_read_eio "$STOP"
    else pass faults_tier_read_eio; fi
  else fail faults_tier_read_eio "no start: $(tail -2 "$T/eio.log")"; fi
fi
