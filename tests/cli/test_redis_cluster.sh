#!/usr/bin/env bash
# test_redis_cluster.sh - the Redis Cluster KV tier's client against a real
# 3-master cluster on loopback (tests/redis/cluster.sh starts it, the trap
# stops it, also on failure): build/tests/test_redis_cluster run with the
# ports in PL_REDIS_PORTS (batches of 64 KiB and 1 MiB values, TTL, a slot
# migrated mid-test for ASK and MOVED, a wrong-type value, a master hung,
# a master killed and restarted); then, on a cluster of 3 masters + 3
# replicas, a master killed and its replica promoted. SKIP only without
# redis-server / redis-cli. About 20 s.
source "$(dirname "$0")/lib.sh"

CTL="bash tests/redis/cluster.sh"
BIN=$BUILD/tests/test_redis_cluster
for c in redis-server redis-cli; do
  command -v $c >/dev/null || { skip redis_cluster "$c not installed (scripts/deps.sh installs redis-server redis-tools)"; exit 0; }
done
[ -x "$BIN" ] || { fail redis_cluster "$BIN not built (make all)"; exit 1; }

CL=$T/cluster
HA=$T/cluster-ha
cleanup() {
  $CTL stop "$CL"
  $CTL stop "$HA"
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT # bash runs no EXIT trap when a signal kills it: exit through it,
trap 'exit 143' TERM # so that the daemonized nodes are stopped on Ctrl-C or kill too

if ! ports=$($CTL start "$CL" 3 2>"$T/start.err"); then
  fail redis_cluster_start "$(tr '\n' ' ' <"$T/start.err")"
  exit 1
fi
pass redis_cluster_start

PL_REDIS_PORTS=$ports PL_REDIS_DIR=$CL PL_REDIS_CTL=$CTL timeout 60 "$BIN"
rc=$?
[ "$rc" -eq 124 ] && fail redis_cluster_timeout "$BIN ran past 60 s"
$CTL stop "$CL"

if ! ports=$($CTL start "$HA" 3 1 2>"$T/start.err"); then
  fail redis_cluster_ha_start "$(tr '\n' ' ' <"$T/start.err")"
  exit 1
fi
pass redis_cluster_ha_start
PL_REDIS_HA_PORTS=$ports PL_REDIS_DIR=$HA PL_REDIS_CTL=$CTL timeout 60 "$BIN"
rc_ha=$?
[ "$rc_ha" -eq 124 ] && fail redis_cluster_ha_timeout "$BIN ran past 60 s"
[ "$rc" -eq 0 ] && rc=$rc_ha
exit "$rc"
