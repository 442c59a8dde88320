# test_lib.sh - sourced by the tests that run `pagellm serve` replicas on a
# throwaway Redis Cluster (after tests/cli/lib.sh): the model, the cluster
# control, and an EXIT trap that stops every process in PIDS and the
# cluster, also on failure or a signal.
M=$SHARED/models/stories260K.gguf
CTL="bash tests/redis/cluster.sh"
CL=$T/cluster
PIDS=()
redis_test_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  $CTL stop "$CL"
  rm -rf "$T"
}
trap redis_test_cleanup EXIT
trap 'exit 130' INT # bash runs no EXIT trap when a signal kills it: exit through it
trap 'exit 143' TERM

# redis_test_need NAME CMD...: SKIP NAME (and exit) unless every CMD and the model are there
redis_test_need() {
  local name=$1 c
  shift
  for c in "$@"; do
    command -v "$c" >/dev/null || { skip "$name" "$c not installed (scripts/deps.sh)"; exit 0; }
  done
  [ -f "$M" ] || { skip "$name" "$M not found"; exit 0; }
}
