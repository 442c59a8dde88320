# lib.sh - helpers for CLI tests (sourced). Each check prints one line,
# "PASS name" or "FAIL name: why", which tests/run.sh counts.
# $PAGELLM is the binary under test; $BUILD the build dir; tests run from the
# repo root. Scratch files go to $T (removed at exit).
PAGELLM=${PAGELLM:-build/pagellm}
BUILD=${BUILD:-build}
SHARED=../shared
PEER=${PEER_DIR:-/tmp/llamacpp-peer}/peer-bench
T=$(mktemp -d /tmp/pagellm-cli.XXXXXX)
trap 'rm -rf "$T"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "SKIP $1: $2"; }

# expect_exit NAME CODE PATTERN -- CMD...: CMD exits with CODE and its stderr
# matches the extended regex PATTERN.
expect_exit() {
  local name=$1 code=$2 pat=$3; shift 4
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -ne "$code" ]; then fail "$name" "exit $rc, wanted $code; stderr: ${err:0:300}"
  elif ! grep -Eq -- "$pat" <<<"$err"; then fail "$name" "stderr does not match /$pat/: ${err:0:300}"
  elif grep -q "Sanitizer" <<<"$err"; then fail "$name" "sanitizer report: ${err:0:300}"
  else pass "$name"; fi
}

# check NAME COND...: runs the test command COND; PASS if it succeeds.
check() { local name=$1; shift; if "$@" >/dev/null 2>&1; then pass "$name"; else fail "$name" "$*"; fi; }

have_peer() { [ -x "$PEER" ]; }

# have_libfuzzer: true when ${FUZZ_CC:-clang} exists and links a libFuzzer
# target (the fuzz tests SKIP otherwise).
have_libfuzzer() {
  local probe='int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }'
  command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1 &&
    echo "$probe" | "${FUZZ_CC:-clang}" -fsanitize=fuzzer -x c - -o "$T/probe" 2>/dev/null
}

# run_fuzzer NAME SECS BUILD_PATTERN [TARGET]: runs tests/fuzz/run.sh SECS
# [TARGET] in $T/fuzz and reports NAME_builds (on a build failure, exit 2,
# the log lines matching the extended regex BUILD_PATTERN) and NAME_SECSs
# (no crash or broken property, and libFuzzer reported its runs).
run_fuzzer() {
  local name=$1 secs=$2 pat=$3 rc; shift 3
  FUZZ_BUILD="$T/fuzz" bash tests/fuzz/run.sh "$secs" "$@" >"$T/fuzz.log" 2>&1
  rc=$?
  if [ "$rc" -eq 2 ]; then
    fail "${name}_builds" "$(grep -m3 -E "$pat" "$T/fuzz.log" | tr '\n' ' ')"
  elif [ "$rc" -ne 0 ]; then
    pass "${name}_builds"
    fail "${name}_${secs}s" "exit $rc: $(grep -m3 -E 'ERROR|broken property|SUMMARY' "$T/fuzz.log" | tr '\n' ' ')"
  elif ! grep -q '^Done [0-9]* runs' "$T/fuzz.log"; then
    pass "${name}_builds"
    fail "${name}_${secs}s" "the fuzzer did not report its runs: $(tail -n 3 "$T/fuzz.log" | tr '\n' ' ')"
  else
    pass "${name}_builds"
    echo "# $name: $(grep -m1 -o '^Done [0-9]* runs' "$T/fuzz.log" | cut -d' ' -f2) runs in ${secs}s"
    pass "${name}_${secs}s"
  fi
}

# serve_start LOG MODEL [serve flags...]: starts `pagellm serve` on a free
# local port with stderr to LOG and waits (at most 30 s) for its
# "listening on" line. Sets SPID, and PORT (empty if it did not start).
serve_start() {
  local log=$1 model=$2
  shift 2
  : >"$log" # emptied here: the server's own redirect may come after the first look below
  "$PAGELLM" serve -m "$model" --host 127.0.0.1 --port 0 "$@" 2>"$log" &
  SPID=$!
  PORT=""
  for _ in $(seq 1 300); do
    PORT=$(grep -so 'listening on http://127\.0\.0\.1:[0-9]*' "$log" | sed 's/.*://') # -s: the server may not have opened it yet
    [ -n "$PORT" ] && break
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
  done
}

# kv_disk_entries DIR: the live records of a disk tier's segments
# (store_segment.h, layout 3), one a line: "SEGFILE ENTRY_OFFSET ENTRY_LEN
# KEYHEX". Walks each segment's record headers (48 bytes: magic, state,
# entry length at 8, key at 24); stops at a header that is not a record's.
kv_disk_entries() {
  local f off size magic state len key
  for f in "$1"/seg/*.seg; do
    [ -f "$f" ] || continue
    size=$(stat -c %s "$f")
    off=0
    while [ $((off + 48)) -le "$size" ]; do
      magic=$(dd if="$f" bs=1 skip="$off" count=4 status=none)
      [ "$magic" = PLSG ] || break
      state=$(dd if="$f" bs=1 skip=$((off + 4)) count=4 status=none)
      len=$(od -An -t u8 -j $((off + 8)) -N 8 "$f" | tr -d ' ')
      key=$(od -An -t x8 -j $((off + 24)) -N 16 "$f" | tr -d ' \n')
      [ "$state" = LIVE ] && echo "$f $((off + 48)) $len $key"
      off=$((off + 48 + len))
    done
  done
}
