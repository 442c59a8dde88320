#!/usr/bin/env bash
# run.sh [SECONDS] [TARGET] - build a fuzz target with clang's libFuzzer +
# ASan/UBSan, make its seed corpus, and fuzz for SECONDS (default 60).
# TARGET: gguf (default; the GGUF reader and writer), tokenizer (text ->
# ids -> text over stories260K and ../shared/models/vocab/*.gguf), model
# (hyper-parameters and tensor binding, mixture-of-experts layers run),
# openai (the server's request JSON -> generation parameters), cli (flag
# parsing: numbers, sizes like 512M, strings), grammar (the GBNF parser,
# matcher and token mask), schema (JSON schema -> GBNF), server (the
# server's other request parsers over stories260K), jinja (any bytes as a
# chat template, seeded with ../shared/templates), store (the KV tier
# entry reader, src/store/store_entry.c), segment (the disk tier segment
# scan, src/store/store_segment.c) or head (the server's request-head
# checker and the request gate's chunked-body reader, server/server_head.c,
# and answer tracker, server/server_resp.c) or imatrix (llama.cpp's
# importance matrix files, src/model/imatrix.c).
#
#   $FUZZ_BUILD (default build-fuzz/)  fuzz_TARGET, seedgen (gguf), TARGET.dict,
#                                      corpus-TARGET/ (seeds + what libFuzzer
#                                      finds), crashes/ (reproducers)
# Exit status: 0 clean, 1 the fuzzer found a crash (reproducer in crashes/),
# 2 the build failed. Reproduce a crash: $FUZZ_BUILD/fuzz_TARGET crashes/FILE
# (the tokenizer target needs FUZZ_TOK_VOCABS as run.sh sets it).
set -u
cd "$(dirname "$0")/../.."
SECS=${1:-60}
TARGET=${2:-gguf}
OUT=${FUZZ_BUILD:-build-fuzz}
CLANG=${FUZZ_CC:-clang}
SHARED=../shared/models
CORPUS="$OUT/corpus-$TARGET"
[ "$TARGET" = gguf ] && CORPUS="$OUT/corpus" # where earlier runs kept it
mkdir -p "$CORPUS" "$OUT/crashes"
FLAGS="-std=c11 -g -O1 -D_GNU_SOURCE -Isrc -Iinclude -fno-omit-frame-pointer"
# the server's request parsers (no HTTP): what the openai and server targets fuzz
SRV_PARSERS="server/server_openai.c server/server_chat.c server/server_tools.c server/server_reasoning.c server/server_params.c server/server_tokens.c server/server_format.c server/server_tokenize.c server/server_cors.c server/server_embed.c"
SAN="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"

case "$TARGET" in
gguf)
SRC="src/base/err.c src/base/mem.c src/tensor/dtype.c $(ls src/gguf/*.c)"
MODEL_SRC="src/model/config.c src/model/moe_config.c src/model/arch_gemma.c src/model/arch_deepseek2.c src/model/rope_scaling.c" # the config read from metadata
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC $MODEL_SRC tests/fuzz/fuzz_gguf.c -o "$OUT/fuzz_gguf" -lm || exit 2
# shellcheck disable=SC2086
$CLANG $FLAGS -DFUZZ_SEEDGEN $SRC $MODEL_SRC tests/fuzz/fuzz_gguf.c -o "$OUT/seedgen" -lm || exit 2

# Seeds: writer-made files, metadata-only copies of the shared GGUFs, and the
# shared GGUFs cut to 64 KiB (their headers and directories, no bulk data).
models=$(ls "$SHARED"/*.gguf "$SHARED"/vocab/*.gguf 2>/dev/null)
# shellcheck disable=SC2086
"$OUT/seedgen" "$CORPUS" $models || exit 2
for m in $models; do head -c 65536 "$m" >"$CORPUS/cut-$(basename "$m")"; done

cat >"$OUT/gguf.dict" <<'DICT'
"GGUF"
"\x03\x00\x00\x00"
"\x02\x00\x00\x00"
"general.alignment"
"general.architecture"
"tokenizer.ggml.tokens"
"\x00\x00\x00\x00\x00\x00\x00\x80"
"\xff\xff\xff\xff\xff\xff\xff\xff"
"\x09\x00\x00\x00"
"\x08\x00\x00\x00"
"\x20\x00\x00\x00"
DICT

# -malloc_limit_mb: the reader must never allocate more than a few times the
# input size, so any large allocation from a <= 64 KiB input is a bug.
exec "$OUT/fuzz_gguf" -max_total_time="$SECS" -max_len=65536 -timeout=10 \
  -malloc_limit_mb=64 -rss_limit_mb=2048 -dict="$OUT/gguf.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
tokenizer)
SRC="src/base/err.c src/base/mem.c src/tensor/dtype.c $(ls src/gguf/*.c src/tokenizer/*.c)"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC tests/fuzz/fuzz_tokenizer.c -o "$OUT/fuzz_tokenizer" -lpcre2-8 -lxxhash -lm || exit 2
vocabs=$(ls "$SHARED"/stories260K.gguf "$SHARED"/vocab/*.gguf 2>/dev/null | tr '\n' ':')
[ -n "$vocabs" ] || { echo "run.sh: no vocabulary under $SHARED" >&2; exit 2; }
export FUZZ_TOK_VOCABS=${vocabs%:}

# Seeds: llama.cpp's tokenizer test texts (vocab/*.inp, one per
# __ggml_vocab_test__ block), each behind the selector bytes of every
# vocabulary, plain and with BOS + special parsing.
n=0
for inp in "$SHARED"/vocab/*.inp; do
  [ -f "$inp" ] || continue
  awk -v dir="$CORPUS" -v base="$(basename "$inp")" '
    /^__ggml_vocab_test__$/ { if (have) { close(f) } k++; f = sprintf("%s/seed-%s-%03d.txt", dir, base, k); printf "" > f; have = 1; first = 1; next }
    have { if (!first) printf "\n" >> f; printf "%s", $0 >> f; first = 0 }' "$inp"
done
for f in "$CORPUS"/seed-*.txt; do
  [ -f "$f" ] || continue
  for sel in 00 01 02 03 0c 0d 0e; do
    { printf "\\x$sel"; cat "$f"; } >"$CORPUS/s$sel-$(basename "$f" .txt)"
  done
  rm -f "$f"; n=$((n + 1))
done
printf '\x10\x01\x00\x02\x00\x03\x00\x0a\x01\xff\x00' >"$CORPUS/ids-1"
printf '\x11\x01\x00\x02\x00\xd3\x01\x0a\x01\xff\x00' >"$CORPUS/ids-2"
cat >"$OUT/tokenizer.dict" <<'DICT'
"<s>"
"</s>"
"<unk>"
"<|endoftext|>"
"<0x0A>"
"\xe2\x96\x81"
" 's"
" ?"
"\xef\xbf\xbd"
"\xf0\x9f\xa6\x99"
"\xc3"
"\xed\xa0\x80"
DICT

exec "$OUT/fuzz_tokenizer" -max_total_time="$SECS" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -dict="$OUT/tokenizer.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
model)
# The kernels come uninstrumented from the engine's library (make builds
# it): instrumenting their SIMD variants takes clang many minutes, and the
# fuzzed code is the reading, binding and routing around them.
LIBPL=${FUZZ_LIBPL:-build/libpagellm.a}
[ -f "$LIBPL" ] || { echo "run.sh: $LIBPL not built (make)" >&2; exit 2; }
SRC="$(ls src/base/*.c src/tensor/*.c src/gguf/*.c) src/model/config.c src/model/arch_deepseek2.c src/model/weights.c src/model/moe.c src/model/mla.c"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC tests/fuzz/fuzz_model.c "$LIBPL" -o "$OUT/fuzz_model" -lm -lpthread || exit 2
# shellcheck disable=SC2086
$CLANG $FLAGS -DFUZZ_SEEDGEN $SRC tests/fuzz/fuzz_model.c "$LIBPL" -o "$OUT/seedgen-model" -lm -lpthread || exit 2
"$OUT/seedgen-model" "$CORPUS" || exit 2
cat >"$OUT/model.dict" <<'DICT'
"expert_count"
"expert_used_count"
"expert_feed_forward_length"
"expert_shared_feed_forward_length"
"_exps.weight"
"qwen2moe"
"qwen3moe"
"llama"
"deepseek2"
"attention.q_lora_rank"
"attention.kv_lora_rank"
"attention.key_length_mla"
"attention.value_length_mla"
"expert_shared_count"
"leading_dense_block_count"
"expert_gating_func"
"expert_weights_scale"
"expert_weights_norm"
"expert_group_count"
"expert_group_used_count"
"rope.scaling.yarn_log_multiplier"
"exp_probs_b.bias"
"attn_kv_a_mqa.weight"
"attn_k_b.weight"
"attn_v_b.weight"
"attn_q_a.weight"
"\x04\x00\x00\x00"
"\x00\x04\x00\x00"
DICT

exec "$OUT/fuzz_model" -max_total_time="$SECS" -max_len=262144 -timeout=10 \
  -rss_limit_mb=2048 -dict="$OUT/model.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
openai)
# The request parser over the uninstrumented engine of $BUILD (only the
# server's JSON code is instrumented: that is what is fuzzed, and the engine
# builds once, by make).
LIBPL=${BUILD:-build}/libpagellm.a
make -s --no-print-directory BUILD="${BUILD:-build}" "$LIBPL" || exit 2
# shellcheck disable=SC2086
$CLANG $FLAGS -Iserver $SAN tests/fuzz/fuzz_openai.c $SRV_PARSERS \
  "$LIBPL" -o "$OUT/fuzz_openai" -lpcre2-8 -lxxhash -ljansson -lhiredis -lm -lpthread || exit 2
export FUZZ_OPENAI_MODEL=$SHARED/stories260K.gguf
[ -f "$FUZZ_OPENAI_MODEL" ] || { echo "run.sh: $FUZZ_OPENAI_MODEL not found" >&2; exit 2; }
# Seeds: byte 0 selects endpoint and context (fuzz_openai.c), then a body.
seed() { { printf "\\x$1"; printf '%s' "$2"; } >"$CORPUS/seed-$1-$(printf '%s' "$2" | cksum | cut -d' ' -f1)"; }
seed 08 '{"prompt":"Once upon a time","max_tokens":8}'
seed 0c '{"prompt":["The cat","The dog"],"max_tokens":4,"n":2,"stop":["\n","."],"logprobs":3,"echo":false}'
seed 08 '{"prompt":[1,2,3,400],"max_tokens":16,"temperature":0.5,"top_p":0.9,"seed":7,"stream":true,"stream_options":{"include_usage":true}}'
seed 09 '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_completion_tokens":5}'
seed 0d '{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"logprobs":true,"top_logprobs":2,"n":3}'
seed 0b '{"messages":[{"role":"assistant","content":null},{"role":"user","content":"x"}],"response_format":{"type":"text"},"stop":"z"}'
seed 00 '{"prompt":"a long prompt for a tiny context","max_tokens":100}'
cat >"$OUT/openai.dict" <<'DICT'
"\"prompt\""
"\"messages\""
"\"role\""
"\"content\""
"\"user\""
"\"assistant\""
"\"system\""
"\"max_tokens\""
"\"max_completion_tokens\""
"\"stream\""
"\"stop\""
"\"n\""
"\"logprobs\""
"\"top_logprobs\""
"\"temperature\""
"\"seed\""
"\"type\""
"\"text\""
"\"response_format\""
"\"stream_options\""
"\"include_usage\""
"null"
"true"
"1e999"
"-1"
"\\u0000"
"\\ud800"
DICT
exec "$OUT/fuzz_openai" -max_total_time="$SECS" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -dict="$OUT/openai.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
cli)
# shellcheck disable=SC2086
$CLANG $FLAGS -Icli $SAN tests/fuzz/fuzz_cli.c cli/cli.c -o "$OUT/fuzz_cli" -lm || exit 2
# Seeds: argument vectors, NUL-separated (fuzz_cli.c).
printf -- '--ctx\0512\0--kv-mem=512M\0--temp\0000.7\0pos' >"$CORPUS/seed-1"
printf -- '-c\0001\0-t\0-4\0--seed\00018446744073709551615\0--stop\0a\0--stop=b' >"$CORPUS/seed-2"
printf -- '--max-body\0001.5GiB\0--flag\0--\0--ctx\0-m\0f.gguf' >"$CORPUS/seed-3"
printf -- '--kv-mem\0001e400\0--temp=nan' >"$CORPUS/seed-4"
cat >"$OUT/cli.dict" <<'DICT'
"nan"
"inf"
"1e999"
"0x"
"K"
"M"
"GiB"
"--ctx="
"--kv-mem"
"--max-body="
"--temp"
"--stop"
"--"
"-c"
DICT
# -close_fd_mask=1: --help's page to stdout is noise; errors stay on stderr
exec "$OUT/fuzz_cli" -max_total_time="$SECS" -max_len=512 -timeout=10 -close_fd_mask=1 \
  -rss_limit_mb=2048 -dict="$OUT/cli.dict" -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
grammar | schema)
# the grammar module alone (schema: with jansson for the JSON)
SRC="src/base/err.c src/base/mem.c $(ls src/grammar/*.c)"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC "tests/fuzz/fuzz_$TARGET.c" -o "$OUT/fuzz_$TARGET" -ljansson -lm || exit 2
if [ "$TARGET" = grammar ]; then
  printf 'root ::= "{" ws ( pair ( "," ws pair )* )? "}"\npair ::= [a-z]+ ":" ws [0-9]{1,3}\nws ::= [ \\t]*\n\0{a: 12,b:3}' >"$CORPUS/seed-json"
  printf 'root ::= (x | "b"){2,4} [^a-z\\n] . "\\u00e9"\nx ::= "a"?\n\0abba\xc3\xa9' >"$CORPUS/seed-rep"
  printf 'root ::= a\na ::= b "x"\nb ::= a?\n' >"$CORPUS/seed-leftrec"
else
  printf '{"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]+\\\\d?$"},"b":{"enum":[1,"x",null]}},"required":["a"]}' >"$CORPUS/seed-obj"
  printf '{"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"$ref":"#/$defs/n"}' >"$CORPUS/seed-ref"
  printf '{"anyOf":[{"type":"string","format":"date"},{"type":"number"}],"additionalProperties":{"type":"integer"}}' >"$CORPUS/seed-any"
fi
cat >"$OUT/$TARGET.dict" <<'DICT'
"::="
"root"
"|"
"{2,5}"
"[^"
"\\x"
"\"type\""
"\"object\""
"\"properties\""
"\"$ref\""
"\"#/$defs/"
"\"pattern\""
"\"anyOf\""
"\"items\""
DICT
exec "$OUT/fuzz_$TARGET" -max_total_time="$SECS" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -dict="$OUT/$TARGET.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
server)
# The parsers are instrumented; the engine library they call (model, vocab,
# chat templates) is the plain build/libpagellm.a: instrumenting its SIMD
# kernels for libFuzzer takes clang many minutes.
make --no-print-directory BUILD=build build/libpagellm.a >"$OUT/lib.log" 2>&1 || { cat "$OUT/lib.log" >&2; exit 2; }
# shellcheck disable=SC2086
$CLANG $FLAGS -Iserver $SAN $SRV_PARSERS tests/fuzz/fuzz_server.c build/libpagellm.a -o "$OUT/fuzz_server" \
  -ljansson -lpcre2-8 -lxxhash -lhiredis -lm -lpthread || exit 2
# Seeds: one body per parser (byte 0 picks it: 0 completions, 1 chat,
# 2 tokenize, 3 detokenize, 4 embeddings, 5 CORS origins).
seed() { printf "\\x$1"; printf '%s' "$2"; }
seed 00 '{"prompt":["Once upon","a",[1,5]],"n":2,"max_tokens":8,"min_tokens":2,"presence_penalty":1,"frequency_penalty":-1,"logit_bias":{"5":-100,"9":3},"stop_token_ids":[2],"echo":false,"best_of":2}' >"$CORPUS/completions"
seed 00 '{"prompt":"Hi","echo":true,"max_tokens":4,"logprobs":2}' >"$CORPUS/echo"
seed 01 '{"messages":[{"role":"user","content":"Hi"}],"logit_bias":{"1":1},"frequency_penalty":2,"min_tokens":1}' >"$CORPUS/chat"
seed 02 '{"content":"Hello \u65e5","add_special":true,"with_pieces":true,"parse_special":false}' >"$CORPUS/tokenize"
seed 03 '{"tokens":[1,403,407,233,154]}' >"$CORPUS/detokenize"
seed 04 '{"input":["a cat",[1,2,3],[[4]]],"encoding_format":"base64","dimensions":64}' >"$CORPUS/embed"
seed 05 'http://a.example, https://[::1]:8080,*' >"$CORPUS/cors"
cat >"$OUT/server.dict" <<'DICT'
"\"prompt\""
"\"messages\""
"\"logit_bias\""
"\"stop_token_ids\""
"\"min_tokens\""
"\"max_tokens\""
"\"presence_penalty\""
"\"frequency_penalty\""
"\"best_of\""
"\"echo\""
"\"input\""
"\"tokens\""
"\"content\""
"\"with_pieces\""
"\"encoding_format\""
"\"dimensions\""
"\"base64\""
"http://"
"://"
DICT
exec "$OUT/fuzz_server" -max_total_time="$SECS" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -dict="$OUT/server.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
head)
# the checker and the relay's framing readers: libc only
$CLANG $FLAGS -Iserver $SAN server/server_head.c server/server_resp.c tests/fuzz/fuzz_head.c -o "$OUT/fuzz_head" || exit 2
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}' >"$CORPUS/seed-cl"
printf 'POST /tokenize HTTP/1.1\nTransfer-Encoding: chunked\n\n4;ext=1\r\n{\"\"}\r\n0\r\n\r\n' >"$CORPUS/seed-chunked"
printf '\r\nGET /health?x=%%20 HTTP/1.0\r\nX-A:\tv\xe9 \r\n\r\n' >"$CORPUS/seed-get"
printf 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' >"$CORPUS/seed-h2"
printf 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n' >"$CORPUS/seed-answer"
cat >"$OUT/head.dict" <<'DICT'
"\x0d\x0a"
"\x0d\x0a\x0d\x0a"
" HTTP/1.1"
"HTTP/1.0"
"Content-Length:"
"Transfer-Encoding: chunked"
"ffffffffffffffff"
";"
":"
DICT
exec "$OUT/fuzz_head" -max_total_time="$SECS" -max_len=24576 -timeout=10 \
  -rss_limit_mb=2048 -dict="$OUT/head.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
jinja)
SRC="src/base/err.c $(ls src/template/*.c)"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC tests/fuzz/fuzz_jinja.c -o "$OUT/fuzz_jinja" -ljansson -lm || exit 2
# Seeds: the real chat templates and the interpreter's feature snippets.
for f in "$SHARED"/../templates/*.jinja tests/data/templates/snippets/*.jinja; do
  [ -f "$f" ] && cp "$f" "$CORPUS/seed-$(basename "$f")"
done
cat >"$OUT/jinja.dict" <<'DICT'
"{%"
"%}"
"{{"
"}}"
"{%-"
"-%}"
"{#"
"#}"
"for"
"endfor"
"if"
"endif"
"macro"
"endmacro"
"set"
"namespace("
"loop.index"
"|tojson"
"|map(attribute="
"range("
"raise_exception("
"messages"
"tools"
"[::-1]"
"**"
"~"
DICT
# -malloc_limit_mb: the render's arena is capped at 8 MiB, so any larger
# allocation is a limit that does not hold; -timeout: one that does not end.
exec "$OUT/fuzz_jinja" -max_total_time="$SECS" -max_len=16384 -timeout=10 \
  -malloc_limit_mb=64 -rss_limit_mb=2048 -dict="$OUT/jinja.dict" \
  -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
store)
SRC="src/base/err.c src/store/store_entry.c"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC tests/fuzz/fuzz_store_entry.c -o "$OUT/fuzz_store_entry" -lxxhash || exit 2
# shellcheck disable=SC2086
$CLANG $FLAGS -DFUZZ_SEEDGEN $SRC tests/fuzz/fuzz_store_entry.c -o "$OUT/seedgen_store" -lxxhash || exit 2
"$OUT/seedgen_store" "$CORPUS" || exit 2
exec "$OUT/fuzz_store_entry" -max_total_time="$SECS" -max_len=2048 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
segment)
SRC="src/base/err.c src/store/store_entry.c src/store/store_segment.c"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC tests/fuzz/fuzz_store_segment.c -o "$OUT/fuzz_store_segment" -lxxhash || exit 2
# shellcheck disable=SC2086
$CLANG $FLAGS -DFUZZ_SEEDGEN $SRC tests/fuzz/fuzz_store_segment.c -o "$OUT/seedgen_segment" -lxxhash || exit 2
"$OUT/seedgen_segment" "$CORPUS" || exit 2
exec "$OUT/fuzz_store_segment" -max_total_time="$SECS" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
imatrix)
# the importance matrix reader over the GGUF reader; seeds: a legacy .dat,
# and the gguf target's seed files (GGUF files of other content: the
# reader's GGUF side is reached from them)
SRC="src/base/err.c src/base/mem.c src/tensor/dtype.c $(ls src/gguf/*.c) src/model/imatrix.c"
# shellcheck disable=SC2086
$CLANG $FLAGS $SAN $SRC tests/fuzz/fuzz_imatrix.c -o "$OUT/fuzz_imatrix" -lm || exit 2
# shellcheck disable=SC2086
$CLANG $FLAGS -DFUZZ_SEEDGEN tests/fuzz/fuzz_imatrix.c -o "$OUT/seedgen_imatrix" || exit 2
"$OUT/seedgen_imatrix" "$CORPUS" || exit 2
[ -d "$OUT/corpus" ] && find "$OUT/corpus" -maxdepth 1 -type f -size -64k | head -20 | xargs -r cp -t "$CORPUS"
exec "$OUT/fuzz_imatrix" -max_total_time="$SECS" -max_len=65536 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$CORPUS"
;;
*)
echo "run.sh: unknown target '$TARGET' (gguf | tokenizer | model | openai | cli | grammar | schema | server | jinja | store | segment | head | imatrix)" >&2
exit 2
;;
esac
