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
