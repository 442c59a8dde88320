// bench/decode_beside_prompt.mjs - what a long prompt's prefill does to a
// conversation decoding beside it in `pagellm serve`.
//
// Starts `PAGELLM serve -m MODEL --ctx CTX -t 2` on loopback, then:
//   A  a streaming completion of 32 token ids, ignore_eos, decoding all along;
//   B  after A's 8th token, a streamed completion of PROMPT random token ids
//      (no shared prefix), max_tokens 1: the prompt is prefilled in chunks.
// A's inter-token gaps are split into those before B was sent ("alone") and
// those while B's prompt ran (from B's send to its answer). One JSON line:
//   {"b_ms": B's answer time, "alone_ms": median gap before B,
//    "beside_median_ms", "beside_p90_ms", "beside_max_ms": A's gaps while B
//    ran, "beside_tokens": A's tokens in that time, "prefill_cuts": the
//    server's pagellm_prefill_cuts_total at the end (absent: -1),
//    "key_cost_model", "key_cost_prompt", "key_cost_decode": its key costs
//    at the end (absent: null)}
//
//   node bench/decode_beside_prompt.mjs PAGELLM MODEL [PROMPT=8192] [CTX=16384] [KV_DTYPE=f16] [VOCAB=32000]
// (token ids are drawn from 3..VOCAB-1)
// The machine may be shared: alternate binaries run by run.
import { spawn } from 'node:child_process';

const [bin, model, promptArg = '8192', ctxArg = '16384', kvArg = 'f16', vocabArg = '32000'] = process.argv.slice(2);
if (!bin || !model) {
  console.error('usage: decode_beside_prompt.mjs PAGELLM MODEL [PROMPT] [CTX] [KV_DTYPE]');
  process.exit(2);
}
const promptN = Number(promptArg), ctx = Number(ctxArg), vocab = Number(vocabArg);

const server = spawn(bin, ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '--ctx', String(ctx),
  '-t', '2', '--kv-dtype', kvArg], { stdio: ['ignore', 'ignore', 'pipe'] });
process.on('exit', () => server.kill('SIGKILL')); /* also when a check below throws */
const url = await new Promise((resolve, reject) => {
  let err = '';
  server.stderr.on('data', (d) => {
    err += d;
    const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(err);
    if (m) resolve(m[1]);
  });
  server.on('exit', (c) => reject(new Error(`server exited (${c}): ${err.slice(-400)}`)));
});

const ids = (n, seed) => {
  let x = seed >>> 0;
  return Array.from({ length: n }, () => { x = (x * 1103515245 + 12345) >>> 0; return 3 + (x >>> 8) % (vocab - 3); });
};
const post = (body) => fetch(url + '/v1/completions', {
  method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });

const times = [];
let bSent = 0, bDone = 0, resolveEighth;
const eighth = new Promise((r) => { resolveEighth = r; });
const a = (async () => {
  const res = await post({ prompt: ids(32, 1), max_tokens: ctx - 64, ignore_eos: true, stream: true, temperature: 0 });
  if (res.status !== 200) throw new Error(`A: HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (ev.startsWith('data: {')) {
        times.push(performance.now());
        if (times.length === 8) resolveEighth();
      }
    }
    if (bDone) { reader.cancel(); break; }
  }
})();
await Promise.race([eighth, a]);
if (times.length < 8) throw new Error('A ended before its 8th token');
bSent = performance.now();
/* streamed: its headers come at once and keep-alive comments every 15 s,
 * where a plain answer would pass fetch's 300 s header timeout at depth */
const rb = await post({ prompt: ids(promptN, 2), max_tokens: 1, temperature: 0, stream: true });
const tb = await rb.text();
bDone = performance.now();
if (rb.status !== 200 || !/^data: \{.*"choices"/m.test(tb)) throw new Error(`B failed: HTTP ${rb.status}: ${tb.slice(0, 300)}`);
await a;
const metrics = await (await fetch(url + '/metrics')).text();
const cuts = /^pagellm_prefill_cuts_total (\d+)/m.exec(metrics);
const gauge = (name) => { const m = new RegExp(`^${name} (\\S+)`, 'm').exec(metrics); return m ? Number(Number(m[1]).toPrecision(3)) : null; };
server.kill('SIGTERM');

const gaps = (lo, hi) => {
  const g = [];
  for (let i = 1; i < times.length; i++) if (times[i] > lo && times[i] <= hi) g.push(times[i] - times[i - 1]);
  return g.sort((x, y) => x - y);
};
const q = (g, p) => (g.length ? g[Math.min(g.length - 1, Math.floor(p * g.length))] : null);
const alone = gaps(0, bSent), beside = gaps(bSent, bDone);
const r1 = (x) => (x === null ? null : Math.round(x * 10) / 10);
console.log(JSON.stringify({
  b_ms: r1(bDone - bSent), alone_ms: r1(q(alone, 0.5)), beside_median_ms: r1(q(beside, 0.5)),
  beside_p90_ms: r1(q(beside, 0.9)), beside_max_ms: r1(beside.length ? beside[beside.length - 1] : null),
  beside_tokens: beside.length, prefill_cuts: cuts ? Number(cuts[1]) : -1,
  key_cost_model: gauge('pagellm_key_cost_model'), key_cost_prompt: gauge('pagellm_key_cost_prompt'),
  key_cost_decode: gauge('pagellm_key_cost_decode'),
}));
process.exit(0);
