#!/usr/bin/env bash
# scripts/model.sh - the model `make run` generates from, and `make model`.
#
#   model.sh fetch   put stories260K (TinyStories, 260K parameters) into
#                    $MODELS_DIR/stories260K.gguf: a copy of
#                    $SHARED_MODELS/stories260K.gguf when that file exists,
#                    else a download from $MODEL_URL. The file lands (by
#                    rename) only when its size and sha256 are the expected
#                    ones: never a partial or wrong file. Exit 1 with one line
#                    on stderr when neither source gives it.
#   model.sh choose  print the path `make run` uses: $PAGELLM_MODEL; else
#                    $MODELS_DIR/stories260K.gguf, fetched if missing; else the
#                    random synthetic $BUILD/models/tiny.gguf (made with
#                    `pagellm synth` if missing), with a one-line notice on
#                    stderr that its text is noise.
#
# Paths are relative to the repository root (make's working directory).
set -euo pipefail
BUILD=${BUILD:-build}
MODELS_DIR=${MODELS_DIR:-models}
SHARED_MODELS=${SHARED_MODELS:-../shared/models}
MODEL_URL=${MODEL_URL:-https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf}
SHA256=270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d
BYTES=1185376
DEST=$MODELS_DIR/stories260K.gguf
TMP=

# good FILE: FILE has the expected size and sha256.
good() {
  [ "$(stat -c %s "$1" 2>/dev/null)" = "$BYTES" ] &&
    [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]
}

fetch() {
  [ -f "$DEST" ] && return 0
  mkdir -p "$MODELS_DIR"
  local why
  TMP=$(mktemp "$MODELS_DIR/.stories260K.gguf.XXXXXX")
  trap 'rm -f "$TMP"' EXIT
  trap 'exit 1' INT TERM
  if [ -f "$SHARED_MODELS/stories260K.gguf" ]; then
    cp "$SHARED_MODELS/stories260K.gguf" "$TMP"
    if good "$TMP"; then chmod 644 "$TMP"; mv "$TMP" "$DEST"; echo "model: $DEST (copied from $SHARED_MODELS)" >&2; return 0; fi
    why="$SHARED_MODELS/stories260K.gguf has the wrong size or sha256"
  else
    why="no $SHARED_MODELS/stories260K.gguf"
  fi
  if ! command -v curl >/dev/null; then
    echo "model: $why, and curl is missing (scripts/deps.sh installs it)" >&2; return 1
  fi
  local err
  if err=$(curl -fsSL --connect-timeout 5 --max-time 120 -o "$TMP" "$MODEL_URL" 2>&1); then
    if good "$TMP"; then chmod 644 "$TMP"; mv "$TMP" "$DEST"; echo "model: $DEST (downloaded from $MODEL_URL)" >&2; return 0; fi
    echo "model: $why, and the download from $MODEL_URL has the wrong size or sha256" >&2; return 1
  fi
  echo "model: $why, and the download failed (${err:-curl exit}): $MODEL_URL" >&2
  return 1
}

choose() {
  if [ -n "${PAGELLM_MODEL:-}" ]; then echo "$PAGELLM_MODEL"; return 0; fi
  local msg tiny=$BUILD/models/tiny.gguf
  if [ -f "$DEST" ]; then echo "$DEST"; return 0; fi
  if msg=$( (fetch) 2>&1 ); then
    [ -z "$msg" ] || echo "$msg" >&2
    echo "$DEST"; return 0
  fi
  if [ ! -f "$tiny" ]; then
    mkdir -p "$BUILD/models"
    "$BUILD/pagellm" synth --shape tiny --seed 1 -o "$tiny" >/dev/null
  fi
  echo "make run: ${msg#model: }; so $tiny, random weights: its text is noise (for real text: 'make model' with internet, or PAGELLM_MODEL=path/to/model.gguf make run)" >&2
  echo "$tiny"
}

case "${1:-}" in
  fetch) fetch ;;
  choose) choose ;;
  *) echo "usage: scripts/model.sh fetch|choose" >&2; exit 2 ;;
esac
