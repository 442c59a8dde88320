#!/usr/bin/env bash
# test_serve_format.sh - structured output through `pagellm serve` on
# stories260K: curl checks of the 400s (bad schema with its path, bad
# grammar with its line:column, several constraining fields), a grammar
# obeyed over curl, then the official `openai` npm client
# (tests/serve/structured.mjs: json_schema sampled at temperature 1 over
# many seeds always parses and validates). The npm package is installed
# once into $OPENAI_NPM_DIR, as test_serve.sh does; SKIP without it.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
OPENAI_NPM_DIR=${OPENAI_NPM_DIR:-/tmp/pagellm-openai-npm}
SEEDS=${SERVE_FORMAT_SEEDS:-16}
if [ ! -f "$M" ]; then skip serve_format "$M not found"; exit 0; fi
command -v curl >/dev/null && command -v jq >/dev/null || { skip serve_format "curl or jq not installed"; exit 0; }

serve_start "$T/serve.log" "$M" --max-seqs 4
trap 'kill -KILL $SPID 2>/dev/null; rm -rf "$T"' EXIT
if [ -z "$PORT" ]; then fail serve_format_start "$(tail -5 "$T/serve.log")"; exit 0; fi
URL=http://127.0.0.1:$PORT

post() { # post PATH DATA: sets CODE, BODY
  CODE=$(curl -s -o "$T/body" -w '%{http_code}' --max-time 120 -H 'Content-Type: application/json' --data-binary "$2" "$URL$1")
  BODY=$(cat "$T/body")
}
expect_400() { # NAME PARAM MESSAGE-REGEX DATA [PATH]
  post "${5:-/v1/chat/completions}" "$4"
  if [ "$CODE" != 400 ]; then fail "$1" "status $CODE: ${BODY:0:300}"
  elif [ "$(jq -r .error.param <<<"$BODY")" != "$2" ]; then fail "$1" "param: ${BODY:0:300}"
  elif ! jq -r .error.message <<<"$BODY" | grep -Eq -- "$3"; then fail "$1" "message: ${BODY:0:300}"
  else pass "$1"; fi
}
MSG='"messages":[{"role":"user","content":"hi"}]'
expect_400 serve_format_bad_schema_path response_format "\\\$\\.properties\\.a\\.items: 'uniqueItems' is not supported" \
  "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"properties\":{\"a\":{\"items\":{\"uniqueItems\":true}}}}}}}"
expect_400 serve_format_bad_grammar grammar "line 2, column 7: unterminated string literal" \
  '{"prompt":"x","grammar":"root ::= a\na ::= \"b"}' /v1/completions
expect_400 serve_format_two_constraints grammar "not several" \
  "{$MSG,\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}}"

post /v1/completions '{"prompt":"Once upon a time","temperature":1,"seed":5,"max_tokens":40,"grammar":"root ::= [A-Z] [a-z]{2,5} (\" \" [a-z]{1,6}){2}\n"}'
t=$(jq -r '.choices[0].text' <<<"$BODY" 2>/dev/null)
if [ "$CODE" = 200 ] && grep -Eqx '[A-Z][a-z]{2,5}( [a-z]{1,6}){2}' <<<"$t"; then pass serve_format_grammar_curl
else fail serve_format_grammar_curl "$CODE ${BODY:0:300}"; fi

npm_ready() {
  [ -d "$OPENAI_NPM_DIR/node_modules/openai" ] && cmp -s tests/serve/package.json "$OPENAI_NPM_DIR/package.json" && return 0
  command -v npm >/dev/null && command -v node >/dev/null || return 1
  mkdir -p "$OPENAI_NPM_DIR" && cp tests/serve/package.json "$OPENAI_NPM_DIR/" || return 1
  (cd "$OPENAI_NPM_DIR" && timeout 300 npm install --no-audit --no-fund --loglevel=error >"$T/npm.log" 2>&1)
}
if npm_ready; then
  jq -n --arg u "$URL/v1" --arg nm "$OPENAI_NPM_DIR/node_modules" \
    '{baseURL: $u, apiKey: "none", model: "stories260K.gguf", seeds: '"$SEEDS"', nodeModules: $nm}' >"$T/client.json"
  timeout 600 node tests/serve/structured.mjs "$T/client.json"
else
  skip serve_format_openai_client "npm could not install the openai package: $(tail -3 "$T/npm.log" 2>/dev/null)"
fi
if grep -q "Sanitizer" "$T/serve.log"; then fail serve_format_sanitizer "$(grep -m3 Sanitizer "$T/serve.log")"; else pass serve_format_server_clean; fi
