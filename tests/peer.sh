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
    if [ ! -x "$dir/peer-quantize-iq" ] || [ "$here/tests/peer/peer_quantize_iq.c" -nt "$dir/peer-quantize-iq" ]; then
  gcc -O2 -std=gnu11 -o "$dir/peer-quantize-iq" "$here/tests/peer/peer_quantize_iq.c" \
      -I"$dir/headers/include" -I"$dir/headers/ggml/include" \
      -L"$lib" -lllama -lggml -lggml-base -Wl,-rpath,"$lib" ||
    echo "peer: peer-quantize-iq did not build" >&2
fi
exit 0
  fi
fi
lib="$dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
if [ ! -x "$dir/peer-logits" ] || [ "$here/tests/peer/peer_logits.c" -nt "$dir/peer-logits" ]; then
  gcc -O2 -std=gnu11 -o "$dir/peer-logits" "$here/tests/peer/peer_logits.c" \
      -I"$dir/headers/include" -I"$dir/headers/ggml/include" -DPEER_LIBDIR="\"$lib\"" \
      -L"$lib" -lllama -lggml -lggml-base -Wl,-rpath,"$lib" ||
    echo "peer: peer-logits did not build" >&2
fi
if [ ! -x "$dir/peer-ppl" ] || [ "$here/tests/peer/peer_ppl.c" -nt "$dir/peer-ppl" ]; then
  gcc -O2 -std=gnu11 -o "$dir/peer-ppl" "$here/tests/peer/peer_ppl.c" \
      -I"$dir/headers/include" -I"$dir/headers/ggml/include" -DPEER_LIBDIR="\"$lib\"" \
      -L"$lib" -lllama -lggml -lggml-base -lm -Wl,-rpath,"$lib" ||
    echo "peer: peer-ppl did not build" >&2
fi
if [ ! -x "$dir/peer-embed" ] || [ "$here/tests/peer/peer_embed.c" -nt "$dir/peer-embed" ]; then
  gcc -O2 -std=gnu11 -o "$dir/peer-embed" "$here/tests/peer/peer_embed.c" \
      -I"$dir/headers/include" -I"$dir/headers/ggml/include" -DPEER_LIBDIR="\"$lib\"" \
      -L"$lib" -lllama -lggml -lggml-base -lm -Wl,-rpath,"$lib" ||
    echo "peer: peer-embed did not build" >&2
fi
if [ ! -x "$dir/peer-quantize-iq" ] || [ "$here/tests/peer/peer_quantize_iq.c" -nt "$dir/peer-quantize-iq" ]; then
  gcc -O2 -std=gnu11 -o "$dir/peer-quantize-iq" "$here/tests/peer/peer_quantize_iq.c" \
      -I"$dir/headers/include" -I"$dir/headers/ggml/include" \
      -L"$lib" -lllama -lggml -lggml-base -Wl,-rpath,"$lib" ||
    echo "peer: peer-quantize-iq did not build" >&2
fi
exit 0
