#!/usr/bin/env bash
# Builds the llama.cpp oracle once: peer-bench from ../shared/peer, and our
# own peer-logits (tests/peer/peer_logits.c), peer-ppl (tests/peer/peer_ppl.c),
# peer-embed (tests/peer/peer_embed.c) and peer-quantize-iq
# (tests/peer/peer_quantize_iq.c) against the same library.
# Tests that need them print SKIP lines when they cannot be built.
set -u
dir=${PEER_DIR:-/tmp/llamacpp-peer}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$dir/peer-bench" ]; then
  if ! bash "$here/../shared/peer/build.sh" "$dir" >/tmp/pagellm-peer-build.log 2>&1; then
    echo "peer: build failed, see /tmp/pagellm-peer-build.log" >&2
    exit 0
  fi
fi
lib="$dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
# tool NAME SOURCE: $dir/NAME from tests/peer/SOURCE, when missing or older
tool() {
  local out="$dir/$1" src="$here/tests/peer/$2"
  if [ ! -x "$out" ] || [ "$src" -nt "$out" ]; then
    gcc -O2 -std=gnu11 -o "$out" "$src" \
        -I"$dir/headers/include" -I"$dir/headers/ggml/include" -DPEER_LIBDIR="\"$lib\"" \
        -L"$lib" -lllama -lggml -lggml-base -lm -Wl,-rpath,"$lib" ||
      echo "peer: $1 did not build" >&2
  fi
}
tool peer-logits peer_logits.c
tool peer-ppl peer_ppl.c
tool peer-embed peer_embed.c
tool peer-quantize-iq peer_quantize_iq.c
exit 0
