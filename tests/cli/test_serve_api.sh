#!/usr/bin/env bash
# test_serve_api.sh - `pagellm serve` as browsers and OpenAI clients meet it
# on ../shared/models/stories260K.gguf: CORS (preflight without a key,
# --cors-origin restricting it), /tokenize and /detokenize round trip,
# /v1/models meta, several keys of --api-key-file, embeddings leaving no
# KV block behind, and tests/serve/api.mjs (the official `openai` npm
# client: embeddings, penalties, logit_bias, min_tokens, stop_token_ids,
# echo, best_of, and the 400s naming their field).
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
OPENAI_NPM_DIR=${OPENAI_NPM_DIR:-/tmp/pagellm-openai-npm}
SPIDS=()
cleanup() {
  for p in "${SPIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT

if [ ! -f "$M" ]; then skip serve_api "$M not found"; exit 0; fi
command -v curl >/dev/null || { skip serve_api "curl not installed"; exit 0; }
command -v jq >/dev/null || { skip serve_api "jq not installed"; exit 0; }

printf '# team keys\nkey-one\nkey-two\n' >"$T/keys"
chmod 600 "$T/keys"
serve_start "$T/s.log" "$M" --api-key-file "$T/keys" --cors-origin 'http://app.example, http://b.example:8080'
SPIDS+=("$SPID")
[ -n "$PORT" ] || { fail serve_api_start "$(tail -3 "$T/s.log")"; exit 0; }
URL=http://127.0.0.1:$PORT
k1=(-H "Authorization: Bearer key-one")
k2=(-H "Authorization: Bearer key-two")

# hdr NAME FILE: the value of header NAME in a curl -D dump.
hdr() { tr -d '\r' <"$2" | awk -v n="$(tr 'A-Z' 'a-z' <<<"$1")" -F': ' 'tolower($1) == n {print $2}'; }
code() { curl -s -o "$T/body" -D "$T/h" -w '%{http_code}' --max-time 30 "$@"; }

# ------------------------------------------------------------------ CORS
c=$(code -X OPTIONS "$URL/v1/chat/completions" -H 'Origin: http://app.example' \
  -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: content-type, x-stainless-os')
check cors_preflight_204_without_key test "$c" = 204
check cors_preflight_origin test "$(hdr Access-Control-Allow-Origin "$T/h")" = http://app.example
check cors_preflight_methods grep -qi '^access-control-allow-methods: POST, OPTIONS' "$T/h"
check cors_preflight_headers grep -qi '^access-control-allow-headers: Authorization, Content-Type, content-type, x-stainless-os' "$T/h"
check cors_preflight_max_age grep -qi '^access-control-max-age: [1-9]' "$T/h"
c=$(code -X OPTIONS "$URL/v1/embeddings" -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: POST')
check cors_preflight_other_origin_403 test "$c" = 403
check cors_preflight_other_origin_no_header test -z "$(hdr Access-Control-Allow-Origin "$T/h")"
check cors_preflight_other_origin_json jq -e '.error.code == "cors_origin_not_allowed"' "$T/body"
c=$(code "${k1[@]}" "$URL/v1/models" -H 'Origin: http://b.example:8080')
check cors_get_allowed_origin test "$(hdr Access-Control-Allow-Origin "$T/h")" = http://b.example:8080
check cors_vary_origin grep -qi '^vary: Origin' "$T/h"
c=$(code "${k1[@]}" "$URL/v1/models" -H 'Origin: http://evil.example')
check cors_get_other_origin_served_without_header test "$c" = 200 -a -z "$(hdr Access-Control-Allow-Origin "$T/h")"
c=$(code "$URL/v1/models" -H 'Origin: http://app.example')
check cors_401_carries_origin test "$c" = 401 -a "$(hdr Access-Control-Allow-Origin "$T/h")" = http://app.example
c=$(code -X OPTIONS "$URL/nope" -H 'Origin: http://app.example')
check cors_preflight_unknown_route_404 test "$c" = 404
expect_exit cors_bad_origin_flag 2 "cors-origin" -- "$PAGELLM" serve -m "$M" --port 0 --cors-origin 'app.example/path'

# ------------------------------------------------------ keys from a file
c=$(code "${k2[@]}" -X POST "$URL/tokenize" -d '{"content":"Hello"}')
check keys_file_second_key test "$c" = 200
c=$(code -H 'Authorization: Bearer key-three' -X POST "$URL/tokenize" -d '{"content":"Hello"}')
check keys_file_wrong_key_401 test "$c" = 401

# ---------------------------------------------------- tokenize round trip
TEXT='Once upon a time, there was a little girl named Lily. Ünïcödé ok?'
code "${k1[@]}" -X POST "$URL/tokenize" -d "$(jq -n --arg c "$TEXT" '{content: $c}')" >/dev/null
cp "$T/body" "$T/tok"
check tokenize_ids jq -e '.tokens | length > 5 and all(type == "number")' "$T/tok"
code "${k1[@]}" -X POST "$URL/detokenize" -d "$(jq -c '{tokens: .tokens}' "$T/tok")" >/dev/null
check tokenize_round_trip test "$(jq -r .content "$T/body")" = "$TEXT"
code "${k1[@]}" -X POST "$URL/tokenize" -d "$(jq -n --arg c "$TEXT" '{content: $c, with_pieces: true, add_special: true}')" >/dev/null
check tokenize_pieces jq -e '.tokens[0].id == 1 and (.tokens[1].piece | type == "string") and ([.tokens[].id] | length > 5)' "$T/body"
# pieces joined give the text back (byte tokens come as byte arrays)
check tokenize_pieces_join test "$(jq -r '[.tokens[1:][].piece | if type == "string" then . else implode end] | add' "$T/body" | head -c 20)" = " Once upon a time, t"
for bad in '{"content": 5}:content' '{}:content' '{"tokens": [1, 99999]}:tokens' '{"tokens": "x"}:tokens' 'nope:-'; do
  body=${bad%:*} param=${bad##*:}
  path=/tokenize; [[ $body == *tokens* ]] && path=/detokenize
  c=$(code "${k1[@]}" -X POST "$URL$path" -d "$body")
  if [ "$c" = 400 ] && { [ "$param" = - ] || jq -e --arg p "$param" '.error.param == $p' "$T/body" >/dev/null; }; then
    pass "tokenize_bad_${param}_$c"
  else fail "tokenize_bad_${param}" "$c $(cat "$T/body")"; fi
done

# ---------------------------------------------------------------- models
code "${k1[@]}" "$URL/v1/models" >/dev/null
check models_meta jq -e '.data[0].meta.n_ctx > 0 and .data[0].meta.n_ctx_train == 2048 and .data[0].meta.n_embd == 64 and .data[0].meta.chat_template == false' "$T/body"

# ------------------------------------------- embeddings leave no KV behind
code "${k1[@]}" -X POST "$URL/v1/embeddings" -d '{"input": ["Once upon a time there was a girl who liked to play in the big park near her house every day", "x", [1, 2, 3]]}' >/dev/null
check embed_curl jq -e '.data | length == 3 and all(.embedding | length == 64)' "$T/body"
used=""
for _ in $(seq 1 50); do used=$(curl -s "${k1[@]}" "$URL/v1/kv" | jq -r .blocks_used); [ "$used" = 0 ] && break; sleep 0.1; done
check embed_frees_kv_blocks test "$used" = 0

# ------------------------------------------------- the openai npm client
npm_ready() {
  [ -d "$OPENAI_NPM_DIR/node_modules/openai" ] && cmp -s tests/serve/package.json "$OPENAI_NPM_DIR/package.json" && return 0
  command -v npm >/dev/null && command -v node >/dev/null || return 1
  mkdir -p "$OPENAI_NPM_DIR" && cp tests/serve/package.json "$OPENAI_NPM_DIR/" || return 1
  (cd "$OPENAI_NPM_DIR" && timeout 300 npm install --no-audit --no-fund --loglevel=error >"$T/npm.log" 2>&1)
}
if npm_ready; then
  jq -n --arg u "$URL/v1" --arg nm "$OPENAI_NPM_DIR/node_modules" \
    '{baseURL: $u, apiKey: "key-one", model: "stories260K.gguf", nEmbd: 64, eos: 2, nodeModules: $nm}' >"$T/api.json"
  timeout 300 node tests/serve/api.mjs "$T/api.json"
else
  skip serve_api_openai_client "npm could not install the openai package: $(tail -3 "$T/npm.log" 2>/dev/null)"
fi
used=""
for _ in $(seq 1 50); do used=$(curl -s "${k1[@]}" "$URL/v1/kv" | jq -r .blocks_used); [ "$used" = 0 ] && break; sleep 0.1; done
check api_no_kv_blocks_left test "$used" = 0
check api_no_sanitizer_report bash -c "! grep -q Sanitizer '$T/s.log'"
