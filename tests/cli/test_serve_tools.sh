#!/usr/bin/env bash
# test_serve_tools.sh - chat templates, tools and reasoning in `pagellm serve`
# end to end on ../shared/models/stories260K.gguf (no template of its own)
# with --chat-template-file:
#   - POST /apply-template renders byte for byte what jinja2 renders for the
#     same template and messages (tests/template_oracle.py);
#   - 400s naming the field: a tool without a name, a malformed message, a
#     template that raises (its message quoted), a bad add_generation_prompt;
#   - --chat-template-file and --reasoning-format usage errors;
#   - forced tool calls (tool_choice required / named) through four
#     templates' call formats, whole and streamed;
#   - the official `openai` npm client (tests/serve/tools.mjs) with the
#     DeepSeek-R1 template: tools accepted, reasoning_content whole and
#     streamed, forced calls whole and streamed (SKIP when npm cannot
#     install the package).
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
TPL=$SHARED/templates
OPENAI_NPM_DIR=${OPENAI_NPM_DIR:-/tmp/pagellm-openai-npm}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
if [ ! -f "$M" ] || [ ! -d "$TPL" ]; then skip serve_tools "$M or $TPL not found"; exit 0; fi
command -v curl >/dev/null && command -v jq >/dev/null || { skip serve_tools "curl or jq not installed"; exit 0; }

start() { serve_start "$T/$1.log" "$M" "${@:2}"; PIDS+=("$SPID"); URL=http://127.0.0.1:$PORT; [ -n "$PORT" ]; }
post() { CODE=$(curl -s -o "$T/body" -w '%{http_code}' --max-time 60 -H 'Content-Type: application/json' --data-binary "$2" "$URL$1"); BODY=$(cat "$T/body"); }
expect_400() { # NAME PATH DATA PARAM [TEXT]
  post "$2" "$3"
  if [ "$CODE" != 400 ]; then fail "$1" "status $CODE: ${BODY:0:300}"
  elif [ "$(jq -r '.error.param' <<<"$BODY")" != "$4" ]; then fail "$1" "param: ${BODY:0:300}"
  elif [ -n "${5:-}" ] && ! jq -e --arg t "$5" '.error.message | contains($t)' <<<"$BODY" >/dev/null; then fail "$1" "message: ${BODY:0:300}"
  else pass "$1"; fi
}

expect_exit serve_template_file_missing 1 "cannot read --chat-template-file" -- "$PAGELLM" serve -m "$M" --port 0 --chat-template-file "$T/nope.jinja"
printf '{%% for x in %%}' >"$T/broken.jinja"
expect_exit serve_template_file_broken 2 "broken.jinja: template line 1" -- "$PAGELLM" serve -m "$M" --port 0 --chat-template-file "$T/broken.jinja"
expect_exit serve_reasoning_format_bad 2 "--reasoning-format" -- "$PAGELLM" serve -m "$M" --port 0 --reasoning-format sometimes

# ------------------------------------------- /apply-template against jinja2
if start qwen --chat-template-file "$TPL/Qwen-Qwen2.5-7B-Instruct.jinja"; then
  pass serve_tools_starts
  CONV=tests/data/templates/06-parallel-calls.json
  post /apply-template "$(jq -c '{messages, tools, add_generation_prompt}' "$CONV")"
  if [ "$CODE" = 200 ] && python3 -c "import jinja2" 2>/dev/null; then
    python3 tests/template_oracle.py "$T/ref" "$TPL/Qwen-Qwen2.5-7B-Instruct.jinja" -- "$CONV" >/dev/null
    jq -j .prompt <<<"$BODY" >"$T/ours.txt"
    if cmp -s "$T/ours.txt" "$T/ref/Qwen-Qwen2.5-7B-Instruct__06-parallel-calls.out"; then pass apply_template_matches_jinja2
    else fail apply_template_matches_jinja2 "differs: $(cmp "$T/ours.txt" "$T/ref/Qwen-Qwen2.5-7B-Instruct__06-parallel-calls.out")"; fi
  elif [ "$CODE" = 200 ]; then skip apply_template_matches_jinja2 "python3-jinja2 not installed"
  else fail apply_template_matches_jinja2 "status $CODE: ${BODY:0:300}"; fi
  post /apply-template '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":false}'
  check apply_template_no_generation_prompt jq -e '.prompt == "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"' <<<"$BODY"
  expect_400 apply_template_bad_flag /apply-template '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":"yes"}' add_generation_prompt
  expect_400 chat_tool_without_name /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"parameters":{}}}]}' tools "name is required"
  expect_400 chat_bad_message /v1/chat/completions '{"messages":[{"role":"user","content":{"x":1}}]}' messages "content must be"
  expect_400 chat_bad_tool_call /v1/chat/completions '{"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":5}}]}]}' messages "arguments must be"
  post /v1/chat/completions '{"messages":[{"role":"user","content":"Weather?"}],"max_tokens":4,"tools":[{"type":"function","function":{"name":"get_weather"}}]}'
  check chat_with_tools_answers jq -e '.choices[0].message.role == "assistant" and (.choices[0].finish_reason | IN("length","stop"))' <<<"$BODY"
  kill "$SPID"
else
  fail serve_tools_starts "$(tail -3 "$T/qwen.log")"
fi

# ------------------------------------------------- a template that raises
printf "{%%- if messages[0].role != 'system' %%}{{ raise_exception('Conversations must start with a system message') }}{%%- endif %%}{%%- for m in messages %%}{{ m.role }}: {{ m.content }}\n{%%- endfor %%}" >"$T/strict.jinja"
if start strict --chat-template-file "$T/strict.jinja" --reasoning-format none; then
  expect_400 chat_template_raises /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}]}' messages "template raised: Conversations must start with a system message"
  expect_400 apply_template_raises /apply-template '{"messages":[{"role":"user","content":"Hi"}]}' messages "template raised:"
  post /v1/chat/completions '{"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"}],"max_tokens":3}'
  check chat_strict_template_ok test "$CODE" = 200
  kill "$SPID"
else
  fail serve_strict_starts "$(tail -3 "$T/strict.log")"
fi

# ----------------------------------------------------- forced tool calls
# tool_choice "required" / named: sampling follows a grammar of one call,
# so even this tiny story model answers with a valid call, in the
# template's own wire format (Qwen <tool_call>, Mistral [TOOL_CALLS]) or
# the bare JSON object (Llama 3.1; DeepSeek-R1's after closing <think>).
W='{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"unit":{"enum":["celsius","fahrenheit"]}},"required":["unit"],"additionalProperties":false}}}'
TIME='{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"enum":["utc","local"]}},"required":["zone"],"additionalProperties":false}}}'
forced_ok() { # NAME FUNCTION_REGEX: one call to such a function with a valid unit/zone, finish_reason tool_calls
  check "$1" jq -e --arg f "$2" '.choices[0].finish_reason == "tool_calls" and (.choices[0].message.tool_calls | length == 1)
    and (.choices[0].message.tool_calls[0].function.name | test("^(" + $f + ")$"))
    and (.choices[0].message.tool_calls[0].function.arguments | fromjson | (.unit // .zone) | IN("celsius","fahrenheit","utc","local"))' <<<"$BODY"
}
for tpl in Qwen-Qwen2.5-7B-Instruct mistralai-Mistral-Nemo-Instruct-2407 meta-llama-Llama-3.1-8B-Instruct deepseek-ai-DeepSeek-R1-Distill-Llama-8B; do
  if start "forced-$tpl" --chat-template-file "$TPL/$tpl.jinja"; then
    post /v1/chat/completions '{"messages":[{"role":"user","content":"Weather in Paris?"}],"max_tokens":300,"temperature":0,"tools":['"$W,$TIME"'],"tool_choice":"required"}'
    forced_ok "forced_required_$tpl" "get_weather|get_time"
    post /v1/chat/completions '{"messages":[{"role":"user","content":"Time?"}],"max_tokens":300,"temperature":1,"seed":5,"tools":['"$W,$TIME"'],"tool_choice":{"type":"function","function":{"name":"get_time"}}}'
    forced_ok "forced_named_$tpl" get_time
    kill "$SPID"
  else
    fail "serve_forced_starts_$tpl" "$(tail -3 "$T/forced-$tpl.log")"
  fi
done
if start forced-stream --chat-template-file "$TPL/Qwen-Qwen2.5-7B-Instruct.jinja"; then
  curl -s --max-time 60 -H 'Content-Type: application/json' "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Time?"}],"max_tokens":300,"temperature":0.8,"seed":9,"stream":true,"tools":['"$W,$TIME"'],"tool_choice":{"type":"function","function":{"name":"get_time"}}}' >"$T/stream"
  check forced_named_stream jq -sRe '[split("\n")[] | select(startswith("data: {")) | .[6:] | fromjson | .choices[0]] as $c
    | ([$c[].delta.tool_calls // empty | .[]] | length == 1 and .[0].function.name == "get_time")
      and ($c[-1].finish_reason == "tool_calls")' "$T/stream"
  expect_400 forced_with_response_format /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":['"$W"'],"tool_choice":"required","response_format":{"type":"json_object"}}' tool_choice "cannot be combined"
  kill "$SPID"
else
  fail serve_forced_stream_starts "$(tail -3 "$T/forced-stream.log")"
fi

# ------------------------------------------------ the openai npm client
npm_ready() {
  [ -d "$OPENAI_NPM_DIR/node_modules/openai" ] && cmp -s tests/serve/package.json "$OPENAI_NPM_DIR/package.json" && return 0
  command -v npm >/dev/null && command -v node >/dev/null || return 1
  mkdir -p "$OPENAI_NPM_DIR" && cp tests/serve/package.json "$OPENAI_NPM_DIR/" || return 1
  (cd "$OPENAI_NPM_DIR" && timeout 300 npm install --no-audit --no-fund --loglevel=error >"$T/npm.log" 2>&1)
}
if ! npm_ready; then
  skip serve_tools_openai_client "npm could not install the openai package: $(tail -3 "$T/npm.log" 2>/dev/null)"
elif start r1 --chat-template-file "$TPL/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"; then
  jq -n --arg u "$URL/v1" --arg nm "$OPENAI_NPM_DIR/node_modules" '{baseURL: $u, model: "stories260K.gguf", nodeModules: $nm}' >"$T/client.json"
  timeout 300 node tests/serve/tools.mjs "$T/client.json"
  kill "$SPID"
else
  fail serve_r1_starts "$(tail -3 "$T/r1.log")"
fi
