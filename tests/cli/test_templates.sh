#!/usr/bin/env bash
# test_templates.sh - pagellm's Jinja interpreter against Python's jinja2 as
# transformers runs it (tests/template_oracle.py): every real chat template
# in ../shared/templates with every conversation in tests/data/templates
# (system, multi-turn, tools, tool calls and results, non-ASCII text,
# reasoning), and the feature snippets in tests/data/templates/snippets.
# Each pair must render byte for byte the same, or fail in both (then a
# raise_exception message must reach our error text). One INFO line per
# template gives its pass rate.
source tests/cli/lib.sh

if ! python3 -c "import jinja2" 2>/dev/null; then
  skip templates "python3-jinja2 is not installed (scripts/deps.sh installs it)"
  exit 0
fi
TPLDIR=$SHARED/templates
DATA=tests/data/templates
if ! ls "$TPLDIR"/*.jinja >/dev/null 2>&1; then
  skip templates "no templates under $TPLDIR"
  exit 0
fi

# compare_all REFDIR TEMPLATE_DIR LABEL: one PASS/FAIL per pair, INFO per template
compare_all() {
  local ref=$1 tdir=$2 label=$3 ctx base name t rc
  declare -A ok=() all=()
  for ctx in "$ref"/*.ctx.json; do
    base=${ctx%.ctx.json}; name=$(basename "$base"); t=${name%%__*}
    $PAGELLM template -t "$tdir/$t.jinja" -c "$ctx" >"$T/our.out" 2>"$T/our.err"; rc=$?
    all[$t]=$(( ${all[$t]:-0} + 1 ))
    if grep -q Sanitizer "$T/our.err"; then fail "${label}_$name" "sanitizer: $(head -c 300 "$T/our.err")"; continue; fi
    if [ -f "$base.out" ]; then
      if [ $rc -eq 0 ] && cmp -s "$T/our.out" "$base.out"; then
        pass "${label}_$name"; ok[$t]=$(( ${ok[$t]:-0} + 1 ))
      elif [ $rc -ne 0 ]; then fail "${label}_$name" "jinja2 renders it, ours fails: $(head -c 300 "$T/our.err")"
      else fail "${label}_$name" "output differs at byte $(cmp "$T/our.out" "$base.out" | grep -o 'byte [0-9]*')"; fi
    else
      local want; want=$(sed -n 's/^TemplateError: //p' "$base.err")
      if [ $rc -eq 0 ]; then fail "${label}_$name" "jinja2 fails ($(head -c 200 "$base.err")), ours renders"
      elif [ $rc -ne 1 ]; then fail "${label}_$name" "exit $rc, wanted 1"
      elif [ -n "$want" ] && ! grep -qF -- "template raised: $want" "$T/our.err"; then
        fail "${label}_$name" "raise_exception message lost: $(head -c 200 "$T/our.err")"
      else pass "${label}_$name"; ok[$t]=$(( ${ok[$t]:-0} + 1 )); fi
    fi
  done
  for t in $(printf '%s\n' "${!all[@]}" | sort); do
    echo "INFO $label $t: ${ok[$t]:-0}/${all[$t]} agree with jinja2 (same bytes, or both fail)"
  done
}

python3 tests/template_oracle.py "$T/ref" "$TPLDIR"/*.jinja -- "$DATA"/*.json || { fail templates_oracle "template_oracle.py failed"; exit 1; }
compare_all "$T/ref" "$TPLDIR" tpl
python3 tests/template_oracle.py "$T/snip" "$DATA"/snippets/*.jinja -- "$DATA"/05-tool-calls.json || { fail snippets_oracle "template_oracle.py failed"; exit 1; }
compare_all "$T/snip" "$DATA/snippets" snip

# the CLI's contract: usage errors 2, unreadable files 1
expect_exit template_no_args 2 "required" -- $PAGELLM template
expect_exit template_missing_file 1 "cannot read" -- $PAGELLM template -t "$T/nope.jinja"
printf '{{ x }}' >"$T/x.jinja"
expect_exit template_bad_context 1 "invalid JSON" -- $PAGELLM template -t "$T/x.jinja" -c <(printf '{"x": ')

# -m MODEL: bos_token/eos_token from the vocabulary; a leading bos_token is
# dropped because the tokenizer adds BOS itself (stories260K adds it)
M=$SHARED/models/stories260K.gguf
if [ -f "$M" ]; then
  printf '{{ bos_token }}[{{ eos_token }}]{{ messages[0].content }}{%% if add_generation_prompt %%}>{%% endif %%}{{ extra }}' >"$T/b.jinja"
  printf '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true,"extra":"!"}' >"$T/b.json"
  got=$($PAGELLM template -m "$M" -t "$T/b.jinja" -c "$T/b.json")
  if [ "$got" = "[</s>]Hi>!" ]; then pass template_model_tokens; else fail template_model_tokens "got '$got'"; fi
  got=$($PAGELLM template -t "$T/b.jinja" -c "$T/b.json")
  if [ "$got" = "[]Hi>!" ]; then pass template_no_model_tokens_undefined; else fail template_no_model_tokens_undefined "got '$got'"; fi
fi
