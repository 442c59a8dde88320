#!/usr/bin/env bash
# test_web.sh - the web page at / of `pagellm serve`: its files and headers
# over curl, then the page in Debian's chromium driven by puppeteer-core
# (tests/web/page.mjs, installed once into $WEB_NPM_DIR): chat streaming, a
# second turn served from the prefix cache, KV cells equal to /v1/kv, the
# live view of an n=4 request, no console errors, the layout at 1280x800
# and 390x844. Screenshots go to $BUILD/web/. SKIP without chromium or npm.
source "$(dirname "$0")/lib.sh"

M=$SHARED/models/stories260K.gguf
WEB_NPM_DIR=${WEB_NPM_DIR:-/tmp/pagellm-web-npm}
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
KEY=web-test-key
SPID=""
PPID2=""
cleanup() { for p in $SPID $PPID2; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT

if [ ! -f "$M" ]; then skip web "$M not found"; exit 0; fi
command -v curl >/dev/null || { skip web "curl not installed"; exit 0; }

# --ctx 8192: room for the long answer Stop interrupts
serve_start "$T/serve.log" "$M" --api-key "$KEY" --threads 2 --max-seqs 8 --ctx 8192
if [ -z "$PORT" ]; then fail web_serve_starts "$(tail -3 "$T/serve.log")"; exit 0; fi
URL=http://127.0.0.1:$PORT

# ---------------------------------------------------------- over curl
code=$(curl -s -o "$T/index.html" -D "$T/h" -w '%{http_code}' "$URL/")
check web_index_open_without_key test "$code" = 200
check web_index_is_html grep -qi '^Content-Type: text/html' "$T/h"
check web_index_csp grep -qi "^Content-Security-Policy: default-src 'none'; script-src 'self'" "$T/h"
check web_index_testids grep -q 'data-testid="message-input"' "$T/index.html"
# every script and stylesheet the page names is served, with its type
ok=1
for a in $(grep -o '/web/[A-Za-z0-9._-]*' "$T/index.html" | sort -u) $(grep -ho 'from "\./[a-z]*\.js"' server/web/*.js | grep -o '[a-z]*\.js' | sort -u | sed 's|^|/web/|'); do
  t=$(curl -s -o /dev/null -w '%{http_code} %{content_type}' "$URL$a")
  case "$a:$t" in *.svg:"200 image/svg+xml"*|*.js:"200 text/javascript"*|*.css:"200 text/css"*) ;; *) ok=0; echo "# $a: $t" ;; esac
done
check web_assets_served test $ok = 1
code=$(curl -s --path-as-is -o "$T/b" -w '%{http_code}' "$URL/web/../index.html")
check web_no_path_escape test "$code" = 404
code=$(curl -s -o "$T/b" -w '%{http_code}' -X POST "$URL/")
check web_post_405 test "$code" = 405
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/kv")
check web_kv_needs_key test "$code" = 401
curl -s -H "Authorization: Bearer $KEY" "$URL/v1/kv" >"$T/kv.json"
check web_kv_formula_fields jq -e '.kv_dtype == "f16" and .n_layers > 0 and .bytes_per_token == 2 * .n_layers * .n_kv_heads * .head_dim * 2
  and (.evictions | type) == "number" and (.preemptions | type) == "number" and (.blocks | length) == .blocks_total' "$T/kv.json"

curl -s -H "Authorization: Bearer $KEY" "$URL/v1/kv?compact=1" >"$T/kvc.json"
check web_kv_compact jq -e '(.block_states | length) == .blocks_total and (.block_keyed | length) == .blocks_total
  and (.block_refcounts | length) == .blocks_total and (has("blocks") | not) and (.block_states | test("^[fuc]*$"))' "$T/kvc.json"
code=$(curl -s -o "$T/b" -w '%{http_code}' -H "Authorization: Bearer $KEY" "$URL/v1/kv?compact=maybe")
check web_kv_compact_bad_value test "$code" = 400 -a "$(jq -r .error.param "$T/b")" = compact

# ------------------------------------------------------ in a browser
if [ -z "$CHROMIUM" ]; then skip web_browser "chromium not installed (scripts/deps.sh installs it)"; exit 0; fi
npm_ready() {
  [ -d "$WEB_NPM_DIR/node_modules/puppeteer-core" ] && cmp -s tests/web/package.json "$WEB_NPM_DIR/package.json" && return 0
  command -v npm >/dev/null && command -v node >/dev/null || return 1
  mkdir -p "$WEB_NPM_DIR" && cp tests/web/package.json "$WEB_NPM_DIR/" || return 1
  (cd "$WEB_NPM_DIR" && PUPPETEER_SKIP_DOWNLOAD=1 timeout 300 npm install --no-audit --no-fund --loglevel=error >"$T/npm.log" 2>&1)
}
if ! npm_ready; then skip web_browser "npm could not install puppeteer-core: $(tail -3 "$T/npm.log" 2>/dev/null)"; exit 0; fi
# a second server with a pool of 63 blocks: evictions and preemptions
MAIN_PID=$SPID MAIN_PORT=$PORT
serve_start "$T/pressure.log" "$M" --api-key "$KEY" --threads 1 --max-seqs 8 --kv-mem 640K
PPID2=$SPID PURL=http://127.0.0.1:$PORT SPID=$MAIN_PID PORT=$MAIN_PORT
mkdir -p "$BUILD/web"
jq -n --arg u "$URL" --arg pu "$PURL" --arg k "$KEY" --arg c "$CHROMIUM" --arg o "$(cd "$BUILD/web" && pwd)" --arg nm "$WEB_NPM_DIR/node_modules" \
  '{url: $u, pressureUrl: $pu, key: $k, chromium: $c, outDir: $o, nodeModules: $nm}' >"$T/web.json"
timeout 120 node tests/web/page.mjs "$T/web.json" || true
check web_screenshots test -s "$BUILD/web/desktop.png" -a -s "$BUILD/web/phone.png"
kill -TERM "$SPID"; wait "$SPID"; rc=$?; SPID=""
check web_server_exits_cleanly test "$rc" = 0
kill -TERM "$PPID2"; wait "$PPID2"; rc=$?; PPID2=""
check web_pressure_server_exits_cleanly test "$rc" = 0
