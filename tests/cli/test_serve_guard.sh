#!/usr/bin/env bash
# test_serve_guard.sh - `pagellm serve` against hostile clients on loopback
# (raw sockets from tests/serve/hostile.mjs): a deadline for a request's
# head and body however slowly its bytes come (slowloris), the per-address
# connection limit (429) and --max-conns (503 with Retry-After, never a
# reset), conflicting Content-Length / Transfer-Encoding (400 and close),
# JSON error bodies, protocol errors answered by the server's request gate
# (malformed request line, header, Content-Length or chunk; head, line and
# version limits: 400 413 414 431 505, JSON, Connection: close) while valid
# requests (keep-alive, pipelined, chunked, streamed) still pass; the same
# checks on a keep-alive connection's later requests and on chunk lines that
# come after the head, each after the answer before it (the gate's relay),
# a 408 for a later head that comes too slowly, a client gone mid-stream
# cancelling its generation, /health answering 503 during a drain while a
# running stream finishes, and no connection refused while others come and
# go with resets. Every loop is bounded; about 45 s.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
H=tests/serve/hostile.mjs
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT

if [ ! -f "$M" ]; then skip serve_guard "$M not found"; exit 0; fi
for c in node curl jq; do command -v $c >/dev/null || { skip serve_guard "$c not installed"; exit 0; }; done

start() { # NAME ARGS...: sets SPID PORT URL LOG
  LOG=$T/$1.log; shift
  serve_start "$LOG" "$M" "$@"
  PIDS+=("$SPID")
  URL=http://127.0.0.1:$PORT
  [ -n "$PORT" ]
}
jqok() { jq -e "$@" >/dev/null 2>&1; }
# an OpenAI error object with this status and code in the JSON line of hostile.mjs
is_error() { jq -e --argjson s "$1" --arg c "$2" '.status == $s and (.body | fromjson | .error | .message and .type and has("param") and .code == $c)' >/dev/null 2>&1; }
raw() { timeout 20 node "$H" raw "$PORT" "$@"; }

# ------------------------------------------------ usage of the new flags
expect_exit guard_usage_header_timeout 2 "--header-timeout" -- timeout 20 "$PAGELLM" serve -m "$M" --header-timeout -1

if ! start main --header-timeout 2 --max-conns 6 --max-conns-per-ip 3; then
  fail guard_starts "no 'listening on' line: $(tail -5 "$LOG")"; exit 0
fi

# ------------------------------------------------------------- slowloris
# a header byte every 300 ms: the head deadline (2 s) closes them anyway
OUT=$(timeout 20 node "$H" slow "$PORT" 3 8 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ')
if jq -e '.closed == 3 and .max_s <= 4.5' <<<"$OUT" >/dev/null; then pass guard_slow_head_closed
else fail guard_slow_head_closed "$OUT"; fi
# a body that trickles in is held to the same deadline
OUT=$(timeout 20 node "$H" slow "$PORT" 2 8 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"prompt":"')
if jq -e '.closed == 2 and .max_s <= 4.5' <<<"$OUT" >/dev/null; then pass guard_slow_body_closed
else fail guard_slow_body_closed "$OUT"; fi
check guard_alive_after_slowloris test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$URL/health")" = 200

# ------------------------------------------------------ connection limits
GET='GET /health HTTP/1.1\r\nHost: x\r\n\r\n'
# 3 idle sockets from 127.0.0.1 (--max-conns-per-ip 3): the 4th from it gets 429, others pass
OUT=$(timeout 20 node "$H" hold "$PORT" 3 "$GET" 127.0.0.1 127.0.0.1)
if is_error 429 too_many_connections <<<"$OUT" && jqok '.headers["retry-after"] and .headers.connection == "close"' <<<"$OUT"
then pass guard_per_ip_429; else fail guard_per_ip_429 "${OUT:0:400}"; fi
OUT=$(timeout 20 node "$H" hold "$PORT" 3 "$GET" 127.0.0.2 127.0.0.1)
check guard_per_ip_other_address jqok '.status == 200' <<<"$OUT"
# past its share and half the reserve (3 + 4/2) an address's new connection is closed unanswered
OUT=$(timeout 20 node "$H" hold "$PORT" 5 "$GET" 127.0.0.1 127.0.0.1)
check guard_per_ip_hard_limit_closed jqok '.status == 0 and .closed' <<<"$OUT"
# 6 idle sockets from 6 addresses (--max-conns 6): the 7th gets a JSON 503 with Retry-After
OUT=$(timeout 20 node "$H" hold "$PORT" 6 "$GET" 127.0.0.9 127.0.0.3 127.0.0.4 127.0.0.5 127.0.0.6 127.0.0.7 127.0.0.8)
if is_error 503 server_overloaded <<<"$OUT" && jqok '.headers["retry-after"]' <<<"$OUT"
then pass guard_max_conns_503; else fail guard_max_conns_503 "${OUT:0:400}"; fi
for _ in $(seq 1 30); do [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health")" = 200 ] && break; sleep 0.1; done
check guard_alive_after_limits test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health")" = 200

# ------------------------------------ message framing (RFC 9112 section 6.3)
P='POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
B='{"prompt":"Hi","max_tokens":1}'
OUT=$(raw "${P}Content-Length: 30\r\nContent-Length: 5\r\n\r\n$B")
if is_error 400 invalid_framing <<<"$OUT" && jqok '.headers.connection == "close"' <<<"$OUT"
then pass guard_two_content_lengths; else fail guard_two_content_lengths "${OUT:0:400}"; fi
OUT=$(raw "${P}Content-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n1e\r\n$B\r\n0\r\n\r\n")
if is_error 400 invalid_framing <<<"$OUT" && jqok '.headers.connection == "close"' <<<"$OUT"
then pass guard_content_length_and_chunked; else fail guard_content_length_and_chunked "${OUT:0:400}"; fi
OUT=$(raw "${P}Transfer-Encoding: gzip, chunked\r\n\r\n1e\r\n$B\r\n0\r\n\r\n")
check guard_unknown_transfer_coding is_error 400 invalid_framing <<<"$OUT"
OUT=$(raw "${P}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n1e\r\n$B\r\n0\r\n\r\n")
check guard_two_transfer_encodings is_error 400 invalid_framing <<<"$OUT"
# the same length twice is one length (RFC 9110 section 8.6)
OUT=$(raw "${P}Content-Length: 30\r\nContent-Length: 30\r\nConnection: close\r\n\r\n$B")
check guard_same_content_length_twice jqok '.status == 200' <<<"$OUT"

# ----------------- protocol errors: the gate's JSON, not libmicrohttpd's HTML
# an OpenAI error with this status and code that closes the connection
gate_error() { # NAME STATUS CODE REQUEST
  local out; out=$(raw "$4")
  if is_error "$2" "$3" <<<"$out" && jqok '.headers.connection == "close"' <<<"$out"
  then pass "$1"; else fail "$1" "${out:0:300}"; fi
}
gate_error gate_not_a_request_line 400 invalid_request_line 'GARBAGE\r\n\r\n'
gate_error gate_version_505 505 http_version_not_supported 'GET /health HTTP/2.0\r\nHost: x\r\n\r\n'
gate_error gate_header_without_colon 400 invalid_header 'GET /health HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n'
gate_error gate_header_name_space 400 invalid_header 'GET /health HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n'
gate_error gate_content_length_not_number 400 invalid_content_length "${P}Content-Length: 1x\r\n\r\n$B"
gate_error gate_content_length_too_large 413 request_too_large "${P}Content-Length: 99999999999999999999999\r\n\r\n$B"
gate_error gate_chunk_malformed 400 invalid_chunk "${P}Transfer-Encoding: chunked\r\n\r\nzz\r\n$B\r\n0\r\n\r\n"
gate_error gate_chunk_too_large 413 request_too_large "${P}Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n$B\r\n"
LONG=$(head -c 40000 /dev/zero | tr '\0' a)
gate_error gate_request_line_414 414 uri_too_long "GET /$LONG HTTP/1.1\r\nHost: x\r\n\r\n"
gate_error gate_head_431 431 headers_too_large "GET /health HTTP/1.1\r\nHost: x\r\nX-A: $LONG\r\n\r\n"
FIELDS=$(for i in $(seq 1 101); do printf 'X-%d: 1\\r\\n' "$i"; done)
gate_error gate_fields_431 431 headers_too_large "GET /health HTTP/1.1\r\n$FIELDS\r\n"
# the largest head passed on: 16 KiB, 100 field lines, libmicrohttpd still answers it
PAD=$(head -c 14000 /dev/zero | tr '\0' p)
FIELDS=$(for i in $(seq 1 97); do printf 'X-%d: 1\\r\\n' "$i"; done)
OUT=$(raw "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${FIELDS}X-Pad: $PAD\r\n\r\n")
check gate_largest_head_passes jqok '.status == 200' <<<"$OUT"
# valid requests pass the gate: several on one keep-alive connection (curl
# reuses it: one connect), pipelined ones, a chunked body, a stream
KA=$(curl -s -o /dev/null -o /dev/null -o /dev/null --max-time 10 -w '%{num_connects} ' "$URL/health" "$URL/v1/models" "$URL/health")
check gate_keepalive_one_connection test "$KA" = "1 0 0 "
PIPE=$(exec 3<>"/dev/tcp/127.0.0.1/$PORT" && printf 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3 && timeout 10 cat <&3)
check gate_pipelined_three test "$(grep -o 'HTTP/1.1 200' <<<"$PIPE" | wc -l)" = 3
OUT=$(raw "${P}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n1e\r\n$B\r\n0\r\n\r\n")
check gate_chunked_body_passes jqok '.status == 200 and (.body | fromjson | .choices[0].text | type == "string")' <<<"$OUT"
curl -sN --max-time 30 "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}' >"$T/gate.sse"
check gate_stream_passes test "$(grep -v '^$' "$T/gate.sse" | tail -1)" = "data: [DONE]"
check gate_alive_after_errors test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health")" = 200

# ------------- the relay: every later request on a connection is checked too
relayed() { timeout 30 node "$H" seq "$PORT" "$@"; }
GOOD='GET /health HTTP/1.1\r\nHost: x\r\n\r\n'
# the first answer whole and first, then the gate's JSON error, then the close
relay_error() { # NAME STATUS CODE SECOND-REQUEST
  local out; out=$(relayed 5 "$GOOD$4")
  if jqok --argjson s "$2" --arg c "$3" '(.answers | length) == 2 and .answers[0].status == 200 and .answers[0].body == "{\"status\":\"ok\"}"
      and .answers[1].status == $s and .answers[1].headers.connection == "close"
      and (.answers[1].body | fromjson | .error | .message and .type and has("param") and .code == $c) and .closed' <<<"$out"
  then pass "$1"; else fail "$1" "${out:0:400}"; fi
}
relay_error relay_second_request_line 400 invalid_request_line 'GARBAGE\r\n\r\n'
relay_error relay_second_header 400 invalid_header 'GET /health HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n'
relay_error relay_second_two_lengths 400 invalid_framing "${P}Content-Length: 30\r\nContent-Length: 5\r\n\r\n$B"
relay_error relay_second_head_431 431 headers_too_large "GET /health HTTP/1.1\r\nHost: x\r\nX-A: $LONG\r\n\r\n"
relay_error relay_second_version_505 505 http_version_not_supported 'GET /health HTTP/3.0\r\n\r\n'
relay_error relay_second_bad_chunk 400 invalid_chunk "${P}Transfer-Encoding: chunked\r\n\r\n1e\r\n$B\r\nzz\r\n"
# a chunk-size line that comes after the head (not visible when the head is checked)
OUT=$(relayed 5 "${P}Transfer-Encoding: chunked\r\n\r\n1e\r\n$B\r\n" 300 '12x\r\n')
if jqok '(.answers | length) == 1 and .answers[0].status == 400 and (.answers[0].body | fromjson | .error.code == "invalid_chunk") and .closed' <<<"$OUT"
then pass relay_late_bad_chunk; else fail relay_late_bad_chunk "${OUT:0:400}"; fi
OUT=$(relayed 5 "${P}Transfer-Encoding: chunked\r\n\r\n1e\r\n$B\r\n0\r\nBad Trailer\r\n\r\n")
check relay_bad_trailer jqok '.answers[0].status == 400 and (.answers[0].body | fromjson | .error.code == "invalid_chunk")' <<<"$OUT"
# a second head that comes too slowly: the request deadline (2 s) answers 408 and closes
OUT=$(relayed 8 "${GOOD}GET /health HTTP/1.1\r\nHo")
if jqok '(.answers | length) == 2 and .answers[0].status == 200 and .answers[1].status == 408 and
    (.answers[1].body | fromjson | .error.code == "request_timeout") and .closed and .ms >= 1800 and .ms <= 4500' <<<"$OUT"
then pass relay_slow_second_head_408; else fail relay_slow_second_head_408 "${OUT:0:400}"; fi
# an idle keep-alive connection ends at the deadline too, unanswered
OUT=$(relayed 8 "$GOOD")
check relay_idle_keepalive_closed jqok '(.answers | length) == 1 and .closed and .ms >= 1800 and .ms <= 4500' <<<"$OUT"
# pipelined requests, a 100-continue, a HEAD (no body): all answered, in order
# (the 404 last: it closes the connection)
OUT=$(relayed 10 "${GOOD}GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n${P}Content-Length: 30\r\n\r\n${B}GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
check relay_pipelined_in_order jqok '[.answers[].status] == [200, 200, 200, 404] and (.answers[1].body | fromjson | .data | length) == 1 and (.answers[2].body | fromjson | .choices | length) == 1 and .closed' <<<"$OUT"
OUT=$(relayed 10 "${P}Expect: 100-continue\r\nContent-Length: 30\r\n\r\n" 300 "${B}GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
check relay_100_continue jqok '[.answers[].status] == [100, 200, 200] and .closed' <<<"$OUT"
HEADS=$(exec 3<>"/dev/tcp/127.0.0.1/$PORT" && printf 'HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3 && timeout 10 cat <&3)
check relay_head_then_get test "$(grep -c '^HTTP/1.1 200' <<<"$HEADS"):$(grep -c '"status":"ok"' <<<"$HEADS")" = 2:1
# a streamed completion through the relay: the same text as the answer in one piece
REQ='{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"ignore_eos":true'
WHOLE=$(curl -s --max-time 30 "$URL/v1/completions" -H 'Content-Type: application/json' -d "$REQ}" | jq -r '.choices[0].text')
STREAM=$(curl -sN --max-time 30 "$URL/v1/completions" -H 'Content-Type: application/json' -d "$REQ,\"stream\":true}" |
  sed -n 's/^data: //p' | grep -v '^\[DONE\]' | jq -j '.choices[0].text')
check relay_stream_equals_whole test -n "$WHOLE" -a "$WHOLE" = "$STREAM"
# a client that goes away mid-stream: the generation is cancelled (counted), nothing stays running
metric() { curl -s --max-time 5 "$URL/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
D0=$(metric pagellm_http_client_disconnects_total)
timeout 3 curl -sN "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":1800,"ignore_eos":true,"stream":true}' 2>/dev/null | head -c 300 >/dev/null
for _ in $(seq 1 50); do [ "$(metric pagellm_http_client_disconnects_total)" != "$D0" ] && [ "$(metric pagellm_requests_running)" = 0 ] && break; sleep 0.1; done
check relay_disconnect_cancels test "$(metric pagellm_http_client_disconnects_total):$(metric pagellm_requests_running)" = "$((D0 + 1)):0"
check relay_alive_after test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health")" = 200

# ------------------------------------------------------- JSON everywhere
OUT=$(raw 'GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
check guard_404_json is_error 404 not_found <<<"$OUT"

# ---------------------------------------------- drain: /health says 503
kill -TERM "$SPID"; for _ in $(seq 1 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
if start drain --max-seqs 2 --drain-timeout 30; then
  curl -sN --max-time 60 "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":1800,"ignore_eos":true,"stream":true}' >"$T/drain.sse" &
  CPID=$!
  for _ in $(seq 1 50); do [ -s "$T/drain.sse" ] && break; sleep 0.1; done
  kill -TERM "$SPID"
  for _ in $(seq 1 50); do grep -q "SIGTERM received" "$LOG" && break; sleep 0.05; done
  CODE=$(curl -s -o "$T/h.json" -w '%{http_code}' --max-time 3 "$URL/health")
  if [ "$CODE" = 503 ] && jqok '.error.code == "shutting_down" and .error.type and .error.message and (.error | has("param"))' "$T/h.json"
  then pass guard_drain_health_503; else fail guard_drain_health_503 "status $CODE: $(head -c 300 "$T/h.json")"; fi
  CODE=$(curl -s -o "$T/c.json" -w '%{http_code}' --max-time 3 "$URL/v1/completions" -H 'Content-Type: application/json' -d '{"prompt":"Hi"}')
  check guard_drain_completion_503 test "$CODE" = 503
  wait "$CPID"
  check guard_drain_stream_finishes test "$(grep -v '^$' "$T/drain.sse" | tail -1)" = "data: [DONE]"
  for _ in $(seq 1 300); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
  wait "$SPID"; RC=$?
  check guard_drain_exit_0 test "$RC" = 0
else
  fail guard_drain_starts "$(tail -3 "$LOG")"
fi
# ------------------------------- connections come and go: none refused
# 8 clients for 3 s, each a new connection a request, every other one
# reset by the client at the first streamed bytes: the resets of closed
# connections must not close the new ones that take their place (no
# connection closed or reset before any byte of an answer)
if start churn; then
  BODY='{"prompt":"Once upon a time","max_tokens":24,"stream":true}'
  OUT=$(timeout 30 node "$H" churn "$PORT" 3 8 "POST /v1/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nConnection: close\\r\\nContent-Length: ${#BODY}\\r\\n\\r\\n$BODY")
  check guard_churn_none_refused jqok '.refused == 0 and .answered > 100 and .hung_up > 100 and .requests == .answered + .hung_up' <<<"$OUT"
  [ "$(jq -r .refused <<<"$OUT" 2>/dev/null)" = 0 ] || echo "    churn: $OUT" >&2
  kill -TERM "$SPID"; wait "$SPID"
else
  fail guard_churn_starts "$(tail -3 "$LOG")"
fi
if grep -q Sanitizer "$T"/*.log; then fail guard_sanitizer "$(grep -h -m3 -A5 Sanitizer "$T"/*.log)"; fi
exit 0
