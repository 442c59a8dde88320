#!/usr/bin/env bash
# test_serve_auth.sh - `pagellm serve` configuration that must not open the
# server by accident: blank API keys refused at start, --api-key-file (several
# keys, a warning when others may read it), the warning for a non-loopback
# address without a key, who may read /metrics (--metrics-key,
# --metrics-public), and TLS (--tls-cert/--tls-key, checked with curl
# against a self-signed certificate made here with openssl: answers,
# streams, and the request gate's JSON errors over TLS). About 20 s.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT

if [ ! -f "$M" ]; then skip serve_auth "$M not found"; exit 0; fi
for c in curl jq; do command -v $c >/dev/null || { skip serve_auth "$c not installed"; exit 0; }; done

# start NAME SCHEME ARGS...: a server on 127.0.0.1, a free port; sets SPID PORT URL LOG
start() {
  LOG=$T/$1.log; local scheme=$2; shift 2
  "$PAGELLM" serve -m "$M" --host 127.0.0.1 --port 0 "$@" 2>"$LOG" &
  SPID=$!; PIDS+=("$SPID"); PORT=""
  for _ in $(seq 1 300); do
    PORT=$(grep -o "listening on $scheme://127\.0\.0\.1:[0-9]*" "$LOG" | sed 's/.*://')
    [ -n "$PORT" ] && break
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
  done
  URL=$scheme://127.0.0.1:$PORT
  [ -n "$PORT" ]
}
stop() { kill -TERM "$SPID" 2>/dev/null; for _ in $(seq 1 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done; wait "$SPID" 2>/dev/null; }
code() { curl -s -o "$T/body" -w '%{http_code}' --max-time 10 "$@"; }

# ------------------------------------------------------------ API keys
expect_exit auth_empty_key 2 "--api-key" -- timeout 20 "$PAGELLM" serve -m "$M" --port 0 --api-key ""
expect_exit auth_blank_key 2 "--api-key" -- timeout 20 "$PAGELLM" serve -m "$M" --port 0 --api-key "   "
expect_exit auth_empty_env_key 2 "PAGELLM_API_KEY" -- timeout 20 env PAGELLM_API_KEY=" " "$PAGELLM" serve -m "$M" --port 0
expect_exit auth_key_file_missing 1 "nope.keys" -- timeout 20 "$PAGELLM" serve -m "$M" --port 0 --api-key-file "$T/nope.keys"
printf '# no keys here\n\n   \n' >"$T/empty.keys"
expect_exit auth_key_file_empty 2 "empty.keys" -- timeout 20 "$PAGELLM" serve -m "$M" --port 0 --api-key-file "$T/empty.keys"
expect_exit auth_metrics_flags_conflict 2 "--metrics-public" -- timeout 20 "$PAGELLM" serve -m "$M" --port 0 --metrics-key m --metrics-public

printf '# keys of the team\nkey-one\n  key-two  \r\n' >"$T/team.keys"
chmod 644 "$T/team.keys"
if start keys http --api-key-file "$T/team.keys" --api-key key-three; then
  check auth_key_file_world_readable_warns grep -q "team.keys.*readable by group or others" "$LOG"
  check auth_key_file_first test "$(code -H 'Authorization: Bearer key-one' "$URL/v1/models")" = 200
  check auth_key_file_second test "$(code -H 'Authorization: Bearer key-two' "$URL/v1/models")" = 200
  check auth_key_flag_too test "$(code -H 'Authorization: Bearer key-three' "$URL/v1/models")" = 200
  check auth_comment_is_no_key test "$(code -H 'Authorization: Bearer # keys of the team' "$URL/v1/models")" = 401
  check auth_prefix_is_no_key test "$(code -H 'Authorization: Bearer key-on' "$URL/v1/models")" = 401
  # /metrics follows the API key by default
  check auth_metrics_needs_key test "$(code "$URL/metrics")" = 401
  check auth_metrics_401_json jq -e '.error.code == "invalid_api_key"' "$T/body"
  check auth_metrics_with_key test "$(code -H 'Authorization: Bearer key-two' "$URL/metrics")" = 200
  check auth_health_public test "$(code "$URL/health")" = 200
  stop
else
  fail auth_key_file_starts "$(tail -3 "$LOG")"
fi
chmod 600 "$T/team.keys"
if start keys600 http --api-key-file "$T/team.keys"; then
  check auth_key_file_private_no_warning bash -c "! grep -q 'readable by group' '$LOG'"
  stop
fi

# ------------------------------------------------------------ /metrics
if start mkey http --api-key k --metrics-key scrape; then
  check auth_metrics_key test "$(code -H 'Authorization: Bearer scrape' "$URL/metrics")" = 200
  check auth_metrics_key_not_api test "$(code -H 'Authorization: Bearer scrape' "$URL/v1/models")" = 401
  check auth_metrics_wrong_key test "$(code -H 'Authorization: Bearer nope' "$URL/metrics")" = 401
  stop
fi
if start mpub http --api-key k --metrics-public; then
  check auth_metrics_public test "$(code "$URL/metrics")" = 200
  stop
fi
if start mopen http; then
  check auth_metrics_open_without_keys test "$(code "$URL/metrics")" = 200
  check auth_loopback_no_warning bash -c "! grep -q WARNING '$LOG'"
  stop
fi
if start mkeyonly http --metrics-key scrape; then
  check auth_metrics_key_alone test "$(code "$URL/metrics")" = 401
  check auth_metrics_key_alone_api_open test "$(code "$URL/v1/models")" = 200
  stop
fi

# ---------------------------------- a public address without a key warns
"$PAGELLM" serve -m "$M" --host 0.0.0.0 --port 0 2>"$T/public.log" &
SPID=$!; PIDS+=("$SPID")
for _ in $(seq 1 300); do grep -q "listening on" "$T/public.log" && break; kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
check auth_public_without_key_warns grep -q "WARNING.*0\.0\.0\.0.*without an API key" "$T/public.log"
stop

# ------------------------------------------------------------------ TLS
expect_exit tls_cert_missing 1 "nope.pem" -- timeout 20 "$PAGELLM" serve -m "$M" --port 0 --tls-cert "$T/nope.pem" --tls-key "$T/nope.pem"
expect_exit tls_key_alone 2 "--tls-cert" -- timeout 20 "$PAGELLM" serve -m "$M" --port 0 --tls-key "$T/k.pem"
if ! command -v openssl >/dev/null; then skip serve_tls "openssl not installed"; exit 0; fi
if ! openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
     -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$T/key.pem" -out "$T/cert.pem" >/dev/null 2>&1; then
  fail tls_openssl_cert "openssl could not make a certificate"; exit 0
fi
expect_exit tls_key_not_pem 1 "cert.pem|TLS" -- timeout 20 "$PAGELLM" serve -m "$M" --port 0 --tls-cert "$T/cert.pem" --tls-key "$T/cert.pem"
if start tls https --tls-cert "$T/cert.pem" --tls-key "$T/key.pem" --api-key k --header-timeout 1; then
  check tls_health test "$(code --cacert "$T/cert.pem" "$URL/health")" = 200
  CODE=$(code --cacert "$T/cert.pem" -H 'Authorization: Bearer k' -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}' "$URL/v1/completions")
  check tls_completion test "$CODE" = 200 -a "$(jq -r '.usage.completion_tokens' "$T/body")" = 8
  check tls_untrusted_refused test "$(code "$URL/health")" = 000
  # the gate is the TLS end: a stream passes, and a bad head (first, or later
  # on a kept connection) gets its JSON error over TLS
  curl -sN --max-time 30 --cacert "$T/cert.pem" -H 'Authorization: Bearer k' -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":8,"stream":true}' "$URL/v1/completions" >"$T/tls.sse"
  check tls_stream test "$(grep -c '"text":' "$T/tls.sse")" -ge 8 -a "$(grep -v '^$' "$T/tls.sse" | tail -1)" = "data: [DONE]"
  if command -v node >/dev/null; then
    OUT=$(HOSTILE_TLS_CA=$T/cert.pem timeout 20 node tests/serve/hostile.mjs seq "$PORT" 5 'GARBAGE\r\n\r\n')
    check tls_bad_head_json jq -e '.answers[0].status == 400 and (.answers[0].body | fromjson | .error.code == "invalid_request_line") and .closed' <<<"$OUT"
    OUT=$(HOSTILE_TLS_CA=$T/cert.pem timeout 20 node tests/serve/hostile.mjs seq "$PORT" 5 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nBad Name: 1\r\n\r\n')
    check tls_second_bad_header_json jq -e '[.answers[].status] == [200, 400] and (.answers[1].body | fromjson | .error.code == "invalid_header") and .closed' <<<"$OUT"
  fi
  check tls_plain_http_refused bash -c "! curl -s --max-time 5 http://127.0.0.1:$PORT/health | grep -q ok"
  # a client that never starts its handshake is cut at --header-timeout
  if command -v node >/dev/null; then
    check tls_silent_handshake_cut timeout 10 node -e '
      const s = require("net").connect('"$PORT"', "127.0.0.1"), t0 = Date.now();
      s.on("error", () => {});
      s.on("close", () => process.exit(Date.now() - t0 < 3000 ? 0 : 1));
      setTimeout(() => process.exit(1), 5000);'
  fi
  stop
else
  fail tls_starts "$(tail -3 "$LOG")"
fi
if grep -q Sanitizer "$T"/*.log; then fail auth_sanitizer "$(grep -h -m3 -A5 Sanitizer "$T"/*.log)"; fi
exit 0
