#!/usr/bin/env bash
# test_make_run.sh - scripts/model.sh, the model choice behind `make run` and
# `make model`: PAGELLM_MODEL first, then models/stories260K.gguf (copied from
# the shared models and checked by sha256, never left partial or wrong), then
# the random tiny model with a one-line notice. No network: the download
# URL points at a closed local port.
source tests/cli/lib.sh

NOURL=http://127.0.0.1:9/stories260K.gguf
mkdir -p "$T/b"
ln -s "$(cd "$(dirname "$PAGELLM")" && pwd)/$(basename "$PAGELLM")" "$T/b/pagellm"
model() { BUILD="$T/b" MODELS_DIR="$T/models" MODEL_URL=$NOURL bash scripts/model.sh "$@"; }

# PAGELLM_MODEL wins, whatever else is there.
got=$(PAGELLM_MODEL=/some/where.gguf SHARED_MODELS="$T/none" model choose 2>"$T/err")
check choose_pagellm_model [ "$got" = /some/where.gguf -a ! -s "$T/err" ]

# Nothing to copy, nothing to download: the tiny model and one line saying why.
got=$(SHARED_MODELS="$T/none" model choose 2>"$T/err")
check choose_falls_back_to_tiny [ "$got" = "$T/b/models/tiny.gguf" -a -s "$T/b/models/tiny.gguf" ]
check fallback_notice_one_line [ "$(wc -l <"$T/err")" -eq 1 ]
check fallback_notice_says_random grep -q 'random weights' "$T/err"
check fallback_leaves_no_file [ -z "$(ls -A "$T/models" 2>/dev/null)" ]

# A wrong file beside the repo is refused, and nothing is left behind.
mkdir -p "$T/bad"; head -c 1185376 /dev/zero >"$T/bad/stories260K.gguf"
SHARED_MODELS="$T/bad" model fetch 2>"$T/err"; rc=$?
check fetch_refuses_wrong_sha [ "$rc" -eq 1 ]
check fetch_wrong_names_it grep -q 'wrong size or sha256' "$T/err"
check fetch_wrong_leaves_nothing [ -z "$(ls -A "$T/models" 2>/dev/null)" ]

# The project's machines have the real file beside the repo.
if [ -f "$SHARED/models/stories260K.gguf" ]; then
  SHARED_MODELS="$SHARED/models" model fetch 2>"$T/err"; rc=$?
  check fetch_copies_shared [ "$rc" -eq 0 -a -f "$T/models/stories260K.gguf" ]
  check fetch_sha256 [ "$(sha256sum "$T/models/stories260K.gguf" | cut -d' ' -f1)" = \
    270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d ]
  check fetch_only_the_file [ "$(ls -A "$T/models")" = stories260K.gguf ]
  got=$(SHARED_MODELS="$T/none" model choose 2>"$T/err")
  check choose_stories [ "$got" = "$T/models/stories260K.gguf" -a ! -s "$T/err" ]
else
  skip fetch_copies_shared "no $SHARED/models/stories260K.gguf"
fi
