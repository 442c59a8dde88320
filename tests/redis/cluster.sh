#!/usr/bin/env bash
# cluster.sh - a throwaway Redis Cluster on loopback for the tests and the
# benchmarks (Debian's redis-server and redis-cli).
#
#   cluster.sh start DIR [MASTERS [REPLICAS]]
#                                    start MASTERS x (1 + REPLICAS) nodes (3, 0),
#                                    each in DIR/PORT, create the cluster
#                                    (REPLICAS per master), wait for
#                                    cluster_state:ok (and the replicas' links);
#                                    prints the ports "P1,P2,..."
#   cluster.sh stop DIR              shut every node down (no save), rm -rf DIR
#   cluster.sh kill DIR PORT         SIGKILL one node (a crash)
#   cluster.sh restart DIR PORT      start that node again (same port, same
#                                    nodes.conf: it rejoins with its slots)
#   cluster.sh pause|resume DIR PORT SIGSTOP / SIGCONT one node (a hang: the
#                                    kernel still accepts connections)
#
# The nodes run with cluster-require-full-coverage no (a dead master costs
# only its own slots, as docs/kv-redis.md recommends) and a 2 s node timeout.
# Ports: a random base below the kernel's ephemeral range (so that no
# outgoing connection takes a bus port between the check and the bind)
# whose port and bus port (+10000) no socket uses, for every node.
set -u

port_free() { ! ss -Htan "( sport = :$1 )" 2>/dev/null | grep -q .; }

# node_start DIR PORT: one cluster-mode node, daemonized, state in DIR/PORT
node_start() {
  local d=$1/$2
  mkdir -p "$d"
  redis-server --port "$2" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 2000 --cluster-require-full-coverage no \
    --appendonly no --save '' --daemonize yes --dir "$d" --pidfile "$d/redis.pid" \
    --logfile "$d/redis.log" >/dev/null
}

# wait_up PORT: until the node answers PING (10 s)
wait_up() {
  for _ in $(seq 1 200); do
    [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.05
  done
  return 1
}

cmd_start() {
  local dir=$1 masters=${2:-3} replicas=${3:-0} base ports=() tries
  local n=$((masters * (1 + replicas)))
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
    { echo "cluster.sh: redis-server / redis-cli not installed" >&2; return 1; }
  mkdir -p "$dir" || return 1
  local eph_lo top
  eph_lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  top=$((eph_lo - 10000 - n))
  [ "$top" -gt 12000 ] || top=22000
  for tries in $(seq 1 20); do
    base=$((top - 1 - RANDOM % (top - 11000))); ports=()
    local ok=1 i
    for i in $(seq 0 $((n - 1))); do
      port_free $((base + i)) && port_free $((base + i + 10000)) || { ok=0; break; }
      ports+=($((base + i)))
    done
    [ "$ok" = 1 ] && break
  done
  [ ${#ports[@]} -eq "$n" ] || { echo "cluster.sh: no free ports after $tries tries" >&2; return 1; }
  printf '%s\n' "${ports[@]}" >"$dir/ports"
  for p in "${ports[@]}"; do node_start "$dir" "$p" || { echo "cluster.sh: node $p did not start" >&2; return 1; }; done
  for p in "${ports[@]}"; do
    wait_up "$p" || { echo "cluster.sh: node $p does not answer: $(tail -n 2 "$dir/$p/redis.log" 2>/dev/null)" >&2; return 1; }
  done
  local addrs=()
  for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1 ||
    { echo "cluster.sh: redis-cli --cluster create failed: $(tail -n 3 "$dir/create.log")" >&2; return 1; }
  wait_ok "${ports[@]}" || return 1
  [ "$replicas" -eq 0 ] || wait_replicas "${ports[@]}" || return 1
  local IFS=,
  echo "${ports[*]}"
}

# wait_ok PORT...: until every node says cluster_state:ok (15 s)
wait_ok() {
  local p all
  for _ in $(seq 1 300); do
    all=1
    for p in "$@"; do
      redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || { all=0; break; }
    done
    [ "$all" = 1 ] && return 0
    sleep 0.05
  done
  echo "cluster.sh: cluster_state is not ok on every node of $*" >&2
  return 1
}

# wait_replicas PORT...: until every replica's link to its master is up (15 s)
wait_replicas() {
  local p all
  for _ in $(seq 1 300); do
    all=1
    for p in "$@"; do
      redis-cli -p "$p" info replication 2>/dev/null | grep -q '^role:slave' || continue
      redis-cli -p "$p" info replication 2>/dev/null | grep -q '^master_link_status:up' || { all=0; break; }
    done
    [ "$all" = 1 ] && return 0
    sleep 0.05
  done
  echo "cluster.sh: a replica's link to its master is not up" >&2
  return 1
}

cmd_stop() {
  local dir=$1 p pid
  [ -f "$dir/ports" ] || { rm -rf "$dir"; return 0; }
  while read -r p; do
    redis-cli -p "$p" shutdown nosave >/dev/null 2>&1
    pid=$(cat "$dir/$p/redis.pid" 2>/dev/null)
    # a node that did not go (hung, or not ours any more) is killed by its pid
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      sleep 0.2
      kill -KILL "$pid" 2>/dev/null
    fi
  done <"$dir/ports"
  rm -rf "$dir"
}

cmd_kill() {
  local pid
  pid=$(cat "$1/$2/redis.pid" 2>/dev/null) || { echo "cluster.sh: no pid file for $2" >&2; return 1; }
  kill -KILL "$pid" || return 1
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done
  rm -f "$1/$2/redis.pid"
}

cmd_signal() {
  local pid
  pid=$(cat "$2/$3/redis.pid" 2>/dev/null) || { echo "cluster.sh: no pid file for $3" >&2; return 1; }
  kill "-$1" "$pid"
}

cmd_restart() {
  node_start "$1" "$2" && wait_up "$2"
}

case ${1:-} in
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  kill) shift; cmd_kill "$@" ;;
  restart) shift; cmd_restart "$@" ;;
  pause) shift; cmd_signal STOP "$@" ;;
  resume) shift; cmd_signal CONT "$@" ;;
  *) echo "usage: cluster.sh start DIR [MASTERS [REPLICAS]] | stop DIR | kill|restart|pause|resume DIR PORT" >&2; exit 2 ;;
esac
