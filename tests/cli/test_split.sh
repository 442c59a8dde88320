#!/usr/bin/env bash
# test_split.sh - split GGUF models (llama.cpp's PREFIX-00001-of-0000N.gguf)
# end to end: `synth --split` and `quantize --split` write them, pagellm
# and llama.cpp load them from the first shard and generate what the
# one-file model generates; naming a later shard, or losing one, is an
# error that names the shard. (Hostile shard contents: test_gguf_split.)
source tests/cli/lib.sh

gen() { "$PAGELLM" run -m "$1" -p "Once upon a time" -n 8 --temp 0 --json 2>"$T/err" | jq -c .gen_ids; }
peer_gen() { "$PEER" -m "$1" -p "Once upon a time" -ng 8 -t 1 2>/dev/null | jq -c .gen_ids; }

"$PAGELLM" synth --shape tiny --seed 5 -o "$T/one.gguf" >/dev/null 2>&1 || fail synth_one "synth failed"
if ! "$PAGELLM" synth --shape tiny --seed 5 --split 3 -o "$T/m.gguf" >/dev/null 2>"$T/err"; then
  fail synth_split "$(tail -c 300 "$T/err")"; exit 0
fi
check synth_split_writes_three_shards test -s "$T/m-00001-of-00003.gguf" -a -s "$T/m-00002-of-00003.gguf" -a -s "$T/m-00003-of-00003.gguf"
check synth_split_no_unsplit_file test ! -e "$T/m.gguf"

want=$(gen "$T/one.gguf")
got=$(gen "$T/m-00001-of-00003.gguf")
[ -n "$want" ] && [ "$got" == "$want" ] && pass split_runs_as_one_model || fail split_runs_as_one_model "split $got, one file $want: $(tail -c 200 "$T/err")"

n=$("$PAGELLM" inspect --json --tensors "$T/m-00001-of-00003.gguf" | jq '[.n_tensors, (.tensors | length), ([.tensors[].shard] | unique | length)] | join(",")')
m=$("$PAGELLM" inspect --json "$T/one.gguf" | jq '.n_tensors')
[ "$n" == "\"$m,$m,3\"" ] && pass split_inspect_lists_all_tensors || fail split_inspect_lists_all_tensors "got $n, one file has $m"

if have_peer; then
  [ "$(peer_gen "$T/m-00001-of-00003.gguf")" == "$want" ] && pass llama_cpp_loads_synth_split \
    || fail llama_cpp_loads_synth_split "llama.cpp $(peer_gen "$T/m-00001-of-00003.gguf"), ours $want"
else
  skip llama_cpp_loads_synth_split "no llama.cpp peer at $PEER"
fi

# quantize reads a split model and writes one file, or a split set
if "$PAGELLM" quantize "$T/m-00001-of-00003.gguf" "$T/q.gguf" q8_0 >/dev/null 2>"$T/err" &&
   "$PAGELLM" quantize "$T/one.gguf" "$T/qs.gguf" q8_0 --split 2 >/dev/null 2>>"$T/err"; then
  a=$(gen "$T/q.gguf") b=$(gen "$T/qs-00001-of-00002.gguf")
  [ -n "$a" ] && [ "$a" == "$b" ] && pass quantize_split_in_and_out || fail quantize_split_in_and_out "one file $a, split $b"
  check quantized_file_has_no_split_keys bash -c "! grep -aq split.count '$T/q.gguf'"
  if have_peer; then
    [ "$(peer_gen "$T/qs-00001-of-00002.gguf")" == "$(peer_gen "$T/q.gguf")" ] && pass llama_cpp_loads_quantize_split \
      || fail llama_cpp_loads_quantize_split "tokens differ"
  fi
else
  fail quantize_split_in_and_out "$(tail -c 300 "$T/err")"
fi

expect_exit later_shard_named 1 "shard 2 of a 3-file split model; open the first shard" -- \
  "$PAGELLM" run -m "$T/m-00002-of-00003.gguf" -p hi -n 1
rm "$T/m-00003-of-00003.gguf"
expect_exit missing_shard 1 "shard 3 of 3: .*m-00003-of-00003.gguf: cannot open" -- \
  "$PAGELLM" run -m "$T/m-00001-of-00003.gguf" -p hi -n 1
expect_exit bad_split_flag 2 "split" -- "$PAGELLM" synth --shape tiny --split 0 -o "$T/z.gguf"
