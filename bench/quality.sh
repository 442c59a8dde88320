#!/usr/bin/env bash
# bench/quality.sh - the quality figure of every KV dtype beside its memory
# figure: perplexity, its change against an f16 cache, and the mean KL
# divergence of the next-token distributions against the f16 run
# (`pagellm perplexity --save-logits` with f16, then `--kl-base` for each
# dtype). The dtypes are whatever `pagellm inspect --json` lists, so a dtype
# added to the library appears here by itself; one the model cannot hold
# (q8_0/q4_0 groups of 32 need head_dim % 32 == 0) gets a row saying why.
#
#   bash bench/quality.sh                       # writes bench/out/kv-quality.md
#   QUALITY_SETS="stories" QUALITY_CHUNKS=8 bash bench/quality.sh
#
# Sets (QUALITY_SETS, default "stories devil 110m"; also ds2, mla):
#   stories  stories260K on tests/data/stories260K-samples.txt (text it sampled)
#   devil    stories260K on tests/data/devils-dictionary.txt (out of domain)
#   110m     a synthetic 110M-shape model (random weights, q8_0; head dim 64,
#            so every dtype fits) on the stories samples: its perplexity is
#            huge and meaningless, the KL against f16 is the figure
#   ds2      deepseek2's latent cache (multi-head latent attention): the synthetic
#            tiny file (random f32 weights, latent row 64 + 32) on the stories samples
#   mla      the same on the synthetic mla-bench file (V2-Lite's attention: latent
#            row 512 + 64; random weights, q8_0); for both, the KL is the figure
# QUALITY_CHUNKS caps the chunks of --ctx QUALITY_CTX (512) tokens of the
# 110m set (default 4); the stories260K sets use every chunk of their text.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
PL=${PAGELLM:-$BUILD/pagellm}
MD=${BENCH_MODELS:-/tmp/pagellm-bench}   # shared with bench/run.sh: models are made once
SETS=${QUALITY_SETS:-stories devil 110m}
CTX=${QUALITY_CTX:-512}; CHUNKS=${QUALITY_CHUNKS:-4}; THREADS=${QUALITY_THREADS:-2}
OUT=${QUALITY_OUT:-bench/out/kv-quality.md}
W=$(mktemp -d /tmp/pagellm-quality.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$MD" "$(dirname "$OUT")"

synth_model() { # shape type -> path (made once), as bench/run.sh makes them
  local f16="$MD/$1-f16.gguf" out="$MD/$1-$2.gguf"
  [ -s "$f16" ] || "$PL" synth --shape "$1" --seed 1 --type f16 -o "$f16" >&2 || return 1
  [ "$2" = f16 ] && { echo "$f16"; return; }
  [ -s "$out" ] || "$PL" quantize "$f16" "$out" "$2" >&2 || return 1
  echo "$out"
}
synth_ds2() { # shape type -> path of a synthetic deepseek2 file (made once)
  local out="$MD/ds2-$1-$2.gguf"
  [ -s "$out" ] || "$PL" synth --arch deepseek2 --shape "$1" --seed 1 --type "$2" -o "$out" >&2 || return 1
  echo "$out"
}

# one_set NAME MODEL TEXT [perplexity flags...]: appends one JSON line per
# dtype to $W/rows.jsonl: the run's own JSON plus set/dtype, or an error.
one_set() {
  local name=$1 model=$2 text=$3; shift 3
  local base="$W/$name-f16.lp" dts
  dts=$("$PL" inspect "$model" --json | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["kv_bytes_per_token"]))') || return 1
  echo "== $name: $(basename "$model") on $(basename "$text"), dtypes: $dts" >&2
  "$PL" perplexity -m "$model" -f "$text" --kv-dtype f16 -t "$THREADS" "$@" --save-logits "$base" --json \
    >"$W/base.json" 2>"$W/err" || { echo "   f16 base failed: $(tail -1 "$W/err")" >&2; return 1; }
  for dt in $dts; do
    local t0=$SECONDS
    if "$PL" perplexity -m "$model" -f "$text" --kv-dtype "$dt" -t "$THREADS" "$@" --kl-base "$base" --json \
         >"$W/run.json" 2>"$W/err"; then
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d.update(set=sys.argv[2], dtype=sys.argv[3], text=sys.argv[4]); print(json.dumps(d))' \
        "$W/run.json" "$name" "$dt" "$(basename "$text")" >>"$W/rows.jsonl"
    else
      python3 -c 'import json,sys; print(json.dumps(dict(set=sys.argv[1], dtype=sys.argv[2], error=sys.argv[3], model=sys.argv[4], text=sys.argv[5])))' \
        "$name" "$dt" "$(grep -v '^\[' "$W/err" | tail -1 | sed 's/^pagellm perplexity: //')" "$(basename "$model")" \
        "$(basename "$text")" >>"$W/rows.jsonl"
    fi
    echo "   $dt: $((SECONDS - t0)) s" >&2
  done
}

: >"$W/rows.jsonl"
STORIES=../shared/models/stories260K.gguf
for s in $SETS; do
  case $s in
    stories) one_set stories "$STORIES" tests/data/stories260K-samples.txt --ctx "$CTX" ;;
    devil)   one_set devil "$STORIES" tests/data/devils-dictionary.txt --ctx "$CTX" ;;
    110m)    m=$(synth_model 110m q8_0) && one_set 110m "$m" tests/data/stories260K-samples.txt --ctx "$CTX" --chunks "$CHUNKS" ;;
    ds2)     m=$(synth_ds2 tiny f32) && one_set ds2 "$m" tests/data/stories260K-samples.txt --ctx "$CTX" --chunks "$CHUNKS" ;;
    mla)     m=$(synth_ds2 mla-bench q8_0) && one_set mla "$m" tests/data/stories260K-samples.txt --ctx "$CTX" --chunks "$CHUNKS" ;;
    *)       echo "unknown set '$s' (stories, devil, 110m, ds2, mla)" >&2 ;;
  esac
done

python3 - "$W/rows.jsonl" <<'EOF' | tee "$OUT"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| model | text | KV dtype | bytes/token | perplexity | vs f16 | mean KL vs f16 | KL 99% | same top |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
f16 = {r["set"]: r for r in rows if r["dtype"] == "f16" and "ppl" in r}
for r in rows:
    if "error" in r:
        print(f"| {r['model']} | {r['text']} | {r['dtype']} | n/a | n/a: {r['error']} | | | | |")
        continue
    b = f16.get(r["set"])
    d = f"{r['ppl'] - b['ppl']:+.4f} ({100 * (r['ppl'] / b['ppl'] - 1):+.3f}%)" if b else "?"
    print(f"| {r['model']} | {r['text']} | {r['dtype']} | {r['bytes_per_token']:.1f} | "
          f"{r['ppl']:.4f} ± {r['ppl_err']:.4f} | {d} | {r['kl_mean']:.3g} ± {r['kl_err']:.1g} | "
          f"{r['kl_p99']:.3g} | {r['same_top_pct']:.2f}% |")
n = {r["set"]: (r.get("n_tokens"), r.get("n_chunks"), r.get("n_ctx")) for r in rows if "n_tokens" in r}
print()
for s, (t, c, x) in n.items():
    print(f"- {s}: {t} tokens scored ({c} chunks of {x}, second half of each)")
EOF
echo "table: $OUT"
