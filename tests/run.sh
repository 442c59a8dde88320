#!/usr/bin/env bash
# Runs every unit-test binary (build/tests/test_*) and every CLI script
# (tests/cli/test_*.sh) from the repo root, and counts their PASS / FAIL lines.
# A program that exits non-zero without printing a FAIL line counts as one
# failure (a crash or a sanitizer report). The last line is the CI contract:
#   N passed, N failed
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD PAGELLM=${PAGELLM:-$BUILD/pagellm}
pass=0; fail=0; skip=0
log=$(mktemp -d /tmp/pagellm-test.XXXXXX)
only=${TESTS:-}
# report NAME RC SECONDS: counts the PASS / FAIL / SKIP lines of NAME's
# output ($log/NAME.out) and prints its line
report() {
  local name=$1 rc=$2 secs=$3 out="$log/$(basename "$1").out"
  local p f s
  p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
  grep -E '^(FAIL|SKIP|INFO) ' "$out" | sed "s|^|  $(basename "$name"): |"
  grep -E '^FAIL ' "$out" | sed "s|^|  $(basename "$name"): |" >>"$log/failures"
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "  $(basename "$name"): exited $rc without a FAIL line; stderr tail:"
    tail -n 15 "$out.err" | sed 's/^/    /'
    echo "  $(basename "$name"): exited $rc without a FAIL line" >>"$log/failures"
    f=1
  fi
  printf '%-28s %3d passed %3d failed %3d skipped  (%ds)\n' "$(basename "$name")" "$p" "$f" "$s" "$secs"
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
}
selected() { [ -z "$only" ] || [[ $1 == *$only* ]]; }
run_one() {
  local name=$1; shift
  selected "$name" || return 0
  local out="$log/$(basename "$name").out" t0=$SECONDS
  "$@" >"$out" 2>"$out.err"
  report "$name" $? $((SECONDS - t0))
}
# run_together SCRIPT...: bash SCRIPT for each, as many at a time as the
# machine has cores, reported in order once all are done. For scripts that
# are one-threaded, independent (each its own scratch directory) and not
# timed against a wall clock: the fuzzers.
run_together() {
  local t n=0 t0=$SECONDS
  for t in "$@"; do
    selected "$t" || continue
    ( s0=$SECONDS; bash "$t" >"$log/$(basename "$t").out" 2>"$log/$(basename "$t").out.err"
      echo "$? $((SECONDS - s0))" >"$log/$(basename "$t").rc" ) &
    n=$((n + 1))
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
  done
  wait
  for t in "$@"; do
    selected "$t" || continue
    local rc secs
    read -r rc secs <"$log/$(basename "$t").rc"
    report "$t" "$rc" "$secs"
  done
  [ "$n" -eq 0 ] || echo "  ($n scripts above ran side by side: $((SECONDS - t0))s in all)"
}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] && run_one "$t" "$t"
done
for t in tests/cli/test_*.sh; do
  [[ $t == tests/cli/test_fuzz_* ]] && continue
  [ -f "$t" ] && run_one "$t" bash "$t"
done
run_together tests/cli/test_fuzz_*.sh
# the kernel tests for aarch64 under qemu-user (SKIP without qemu / the cross compiler)
run_one arm64-qemu bash tests/arm64.sh
# the AVX-512 kernels on SIMDe's emulation (any x86-64; SKIP without libsimde-dev)
run_one avx512-emu bash tests/avx512.sh
# the failures again, so that a log's tail names them
if [ -s "$log/failures" ]; then
  echo "failures:"
  head -n 60 "$log/failures"
fi
rm -rf "$log"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
