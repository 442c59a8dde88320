#!/usr/bin/env bash
# test_kv_balancer.sh - three `pagellm serve` replicas (stories260K) behind
# HAProxy round robin (docs/deploy/haproxy.cfg, loopback ports), N = 9
# requests sharing a ~400-token system prompt, each with its own question:
# the prefix hit rate (sum cached_tokens / sum prompt_tokens) with the
# replicas sharing a Redis Cluster tier, and with the same replicas without
# it. Without sharing each replica computes the system prompt once, so the
# rate is at most (N - 3) / N = 67%; with it only the first request
# computes it: about (N - 1) / N x 96% = 85%. Asserted: >= 80% shared,
# <= 70% alone, both printed as INFO. Every replica must have served
# requests (the balancer spreads them). Every process started here is
# stopped by the EXIT trap, also on failure. SKIP without haproxy,
# redis-server / redis-cli or the model.
source "$(dirname "$0")/lib.sh"

source tests/redis/test_lib.sh
N=9
redis_test_need kv_balancer haproxy redis-server redis-cli curl jq

if ! NODES=$($CTL start "$CL" 3 2>"$T/start.err"); then
  fail kv_balancer_cluster_start "$(tr '\n' ' ' <"$T/start.err")"
  exit 1
fi
IFS=, read -r -a NP <<<"$NODES"
SEEDS=$(printf '127.0.0.1:%s,' "${NP[@]}")
SEEDS=${SEEDS%,}

keys_total() {
  local p n s=0
  for p in "${NP[@]}"; do n=$(redis-cli -p "$p" dbsize 2>/dev/null); s=$((s + ${n:-0})); done
  echo "$s"
}

# free_port: a loopback port no socket uses (below the ephemeral range)
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 10000))
    ss -Htan "( sport = :$p )" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
  done
  return 1
}

SYS=$(printf 'You are a storyteller. Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park. %.0s' $(seq 1 15))

# phase NAME [serve flags...]: 3 replicas + HAProxy, N requests; writes "CACHED PROMPT SERVED"
# (SERVED: replicas that saw requests) to $T/NAME.res; stops them all at the end. Runs in
# this shell, so that PIDS holds what it starts for the trap
phase() {
  local name=$1 i r lb hp; shift
  local rp=() rpid=()
  for r in 1 2 3; do
    serve_start "$T/$name$r.log" "$M" "$@"
    PIDS+=("$SPID"); rpid+=("$SPID")
    [ -n "$PORT" ] || { fail "kv_balancer_${name}_replica_start" "$(tail -n 3 "$T/$name$r.log" | tr '\n' ' ')"; return 1; }
    rp+=("$PORT")
  done
  lb=$(free_port) || return 1
  PL_LB_BIND=127.0.0.1:$lb PL_REPLICA1=127.0.0.1:${rp[0]} PL_REPLICA2=127.0.0.1:${rp[1]} \
    PL_REPLICA3=127.0.0.1:${rp[2]} haproxy -db -f docs/deploy/haproxy.cfg >"$T/$name.haproxy.log" 2>&1 &
  hp=$!
  PIDS+=("$hp")
  for _ in $(seq 1 100); do curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$lb/health" && break; sleep 0.1; done
  local sc=0 sp=0 k0
  k0=$(keys_total)
  for i in $(seq 1 $N); do
    jq -n --arg p "$SYS Question $i: what did Lily find number $i?" '{prompt: $p, max_tokens: 4, temperature: 0}' >"$T/req"
    curl -s --max-time 60 -H 'Content-Type: application/json' --data-binary @"$T/req" \
      "http://127.0.0.1:$lb/v1/completions" >"$T/$name.$i.json"
    sc=$((sc + $(jq '.usage.prompt_tokens_details.cached_tokens // 0' "$T/$name.$i.json")))
    sp=$((sp + $(jq '.usage.prompt_tokens // 0' "$T/$name.$i.json")))
    # the first request's blocks are written behind: with the tier, the next ones are sent once
    # they are in Redis (a deployment's first concurrent requests may race and recompute)
    if [ "$i" = 1 ] && [ "$#" -gt 0 ]; then
      for _ in $(seq 1 100); do [ "$(keys_total)" -ge $((k0 + sp / 16)) ] && break; sleep 0.05; done
    fi
  done
  # each replica served some: the prompt tokens it saw
  local served=0
  for r in 0 1 2; do
    [ "$(curl -s --max-time 10 "http://127.0.0.1:${rp[$r]}/metrics" | awk '$1 == "pagellm_prompt_tokens_total" { print $2 }')" -gt 0 ] &&
      served=$((served + 1))
  done
  kill -TERM "$hp" "${rpid[@]}" 2>/dev/null
  wait "$hp" "${rpid[@]}" 2>/dev/null
  echo "$sc $sp $served" >"$T/$name.res"
}

phase shared --kv-redis "$SEEDS" --kv-tier-timeout-ms 2000
read -r SC SP SERVED <"$T/shared.res"
check kv_balancer_shared_ran test "${SP:-0}" -gt $((N * 300))
check kv_balancer_shared_spread test "${SERVED:-0}" -eq 3
phase alone
read -r AC AP ASERVED <"$T/alone.res"
check kv_balancer_alone_ran test "${AP:-0}" -gt $((N * 300))
check kv_balancer_alone_spread test "${ASERVED:-0}" -eq 3
[ "${SP:-0}" -gt 0 ] && [ "${AP:-0}" -gt 0 ] || exit 1
echo "INFO prefix hit rate through round robin over 3 replicas, $N requests: shared Redis tier $((SC * 100 / SP))% ($SC / $SP), without it $((AC * 100 / AP))% ($AC / $AP)"
check kv_balancer_shared_hit_rate test $((SC * 100)) -ge $((SP * 80))
check kv_balancer_alone_hit_rate test $((AC * 100)) -le $((AP * 70))
