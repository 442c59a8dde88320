#!/usr/bin/env bash
# Builds llama.cpp's peer-bench (the oracle) once, from ../shared/peer.
# Tests that need it skip with a clear SKIP line when it cannot be built.
set -u
dir=${PEER_DIR:-/tmp/llamacpp-peer}
[ -x "$dir/peer-bench" ] && exit 0
here=$(cd "$(dirname "$0")/.." && pwd)
if ! bash "$here/../shared/peer/build.sh" "$dir" >/tmp/pagellm-peer-build.log 2>&1; then
  echo "peer: build failed, see /tmp/pagellm-peer-build.log" >&2
fi
exit 0
