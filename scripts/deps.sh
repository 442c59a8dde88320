#!/usr/bin/env bash
# Installs the Debian packages pagellm needs, only those missing.
# Runs as root (the CI and dev machines) or through sudo when available.
set -euo pipefail
pkgs=(gcc make clang pkg-config libpcre2-dev libxxhash-dev libjansson-dev libmicrohttpd-dev nodejs npm git jq curl
      gcc-aarch64-linux-gnu qemu-user # tests/arm64.sh (NEON kernels under qemu)
      libsimde-dev                    # tests/avx512.sh (AVX-512 kernels on SIMDe's emulation)
      openssl                         # tests/cli/test_serve_auth.sh (a self-signed certificate for --tls-cert)
      chromium                        # tests/cli/test_web.sh (the web page in a headless browser)
      libxml2-utils                   # xmllint: the bench --svg plots are well-formed XML
      python3-jinja2                  # tests/cli/test_templates.sh (the reference renderer of chat templates)
      libhiredis-dev                  # src/store/redis_cluster.c (the Redis Cluster KV tier's client)
      libgnutls28-dev                 # server/server_tls.c (the request gate is the TLS end of --tls-cert)
      redis-server redis-tools        # tests/cli/test_redis_cluster.sh (a 3-master cluster on loopback)
      haproxy)                        # tests/cli/test_kv_balancer.sh (round robin over replicas: docs/deploy/haproxy.cfg)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere than Debian (e.g. a preinstalled Node.js)
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
