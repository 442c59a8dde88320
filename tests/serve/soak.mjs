// soak.mjs - many clients against one `pagellm serve` for a while, mixing
// what real and careless clients send; for tests/cli/test_soak.sh. Node's
// fetch only (no packages).
//
//   node soak.mjs URL SECONDS CLIENTS SERVER_PID [SEED]
//
// Each client loops until SECONDS have passed, choosing (from a seeded
// generator, so that a run can be repeated) one of: a chat completion, a
// completion, a completion with n=3 (a fork), a streamed chat read to its
// end, a stream dropped after its first bytes (an abrupt disconnect), a bad
// request (invalid JSON, a bad parameter), and a long prompt (near the
// context, so that the small pool preempts). Then it waits for the pool to
// drain and prints one JSON line:
//   {completed, refused, errors, disconnects, bad_refused, preemptions,
//    p50_ms, p99_ms, rss_start_kb, rss_end_kb, blocks_used, running,
//    by_kind, first_errors}
// refused: 503/429 answers with an OpenAI error body (the server was full:
// allowed). errors: anything else unexpected (a 5xx, a dropped connection
// the client did not drop, a malformed body, a bad request not refused
// with a 400). Exit status 1 when errors > 0 or the pool did not drain.
import { readFileSync } from 'node:fs';

const [url, secsArg, clientsArg, pidArg, seedArg] = process.argv.slice(2);
const secs = Number(secsArg), nClients = Number(clientsArg), pid = Number(pidArg);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function rssKb() {
  try {
    const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : -1;
  } catch { return -1; }
}

async function metrics() {
  const r = await fetch(`${url}/metrics`);
  const t = await r.text();
  const get = (name) => {
    const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(t);
    return m ? Number(m[1]) : NaN;
  };
  return { used: get('pagellm_kv_blocks_used'), running: get('pagellm_requests_running'),
           preemptions: get('pagellm_preemptions_total') };
}

// a small deterministic generator (xorshift32) per client
function rng(seed) {
  let x = seed >>> 0 || 1;
  return () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x / 4294967296; };
}

const WORDS = 'once upon a time there was a little girl named lily she loved to play in the park with her dog'.split(' ');
const words = (rand, n) => Array.from({ length: n }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(' ');

const st = { completed: 0, refused: 0, errors: 0, disconnects: 0, bad_refused: 0, lat: [], by_kind: {}, first_errors: [] };
function error(kind, what) {
  st.errors++;
  if (st.first_errors.length < 5) st.first_errors.push(`${kind}: ${what}`.slice(0, 300));
}
const isErrorBody = (j) => j && j.error && typeof j.error.message === 'string' && typeof j.error.type === 'string';

async function post(path, body, signal) {
  return fetch(`${url}${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                   body: typeof body === 'string' ? body : JSON.stringify(body), signal });
}

// A JSON answer: 200 with choices (n of them), or a refusal with an error body.
async function jsonCall(kind, path, body, n) {
  const t0 = Date.now();
  const r = await post(path, body);
  const text = await r.text();
  let j = null;
  try { j = JSON.parse(text); } catch { /* checked below */ }
  if (r.status === 200 && j && Array.isArray(j.choices) && j.choices.length === n) {
    st.completed++; st.lat.push(Date.now() - t0);
  } else if ((r.status === 503 || r.status === 429) && isErrorBody(j)) {
    st.refused++;
  } else {
    error(kind, `${r.status} ${text.slice(0, 200)}`);
  }
}

async function stream(kind, body, dropAfterFirst) {
  const t0 = Date.now();
  const ac = new AbortController();
  const r = await post('/v1/chat/completions', { ...body, stream: true }, ac.signal);
  if (r.status !== 200) {
    const text = await r.text();
    let j = null;
    try { j = JSON.parse(text); } catch { /* below */ }
    if ((r.status === 503 || r.status === 429) && isErrorBody(j)) st.refused++;
    else error(kind, `${r.status} ${text.slice(0, 200)}`);
    return;
  }
  const reader = r.body.getReader();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString('utf8');
    if (dropAfterFirst) { ac.abort(); st.disconnects++; return; }
  }
  if (text.includes('data: [DONE]')) { st.completed++; st.lat.push(Date.now() - t0); }
  else error(kind, `a stream without [DONE]: ${text.slice(-200)}`);
}

async function bad(kind, rand) {
  const bodies = ['{"prompt": "unclosed', '{"prompt": "x", "max_tokens": -3}', '{"messages": "not a list"}',
                  '{"prompt": "x", "n": 99}', '[1, 2, 3]', '{"prompt": "x", "temperature": "hot"}'];
  const b = bodies[Math.floor(rand() * bodies.length)];
  const path = b.includes('messages') ? '/v1/chat/completions' : '/v1/completions';
  const r = await post(path, b);
  const text = await r.text();
  let j = null;
  try { j = JSON.parse(text); } catch { /* below */ }
  if (r.status === 400 && isErrorBody(j)) st.bad_refused++;
  else error(kind, `${b} -> ${r.status} ${text.slice(0, 200)}`);
}

async function client(i, deadline) {
  const rand = rng(Number(seedArg || 1) * 7919 + i);
  while (Date.now() < deadline) {
    const x = rand();
    const kind = x < 0.18 ? 'chat' : x < 0.36 ? 'completion' : x < 0.48 ? 'fork' : x < 0.66 ? 'stream'
               : x < 0.76 ? 'disconnect' : x < 0.88 ? 'bad' : 'long';
    st.by_kind[kind] = (st.by_kind[kind] || 0) + 1;
    const seed = Math.floor(rand() * 1e6), max_tokens = 4 + Math.floor(rand() * 28);
    try {
      if (kind === 'chat')
        await jsonCall(kind, '/v1/chat/completions', { messages: [{ role: 'user', content: words(rand, 6) }], max_tokens, seed }, 1);
      else if (kind === 'completion')
        await jsonCall(kind, '/v1/completions', { prompt: words(rand, 8), max_tokens, seed }, 1);
      else if (kind === 'fork')
        await jsonCall(kind, '/v1/completions', { prompt: words(rand, 8), max_tokens, n: 3, seed }, 3);
      else if (kind === 'stream' || kind === 'disconnect')
        await stream(kind, { messages: [{ role: 'user', content: words(rand, 6) }], max_tokens, seed }, kind === 'disconnect');
      else if (kind === 'bad')
        await bad(kind, rand);
      else
        await jsonCall(kind, '/v1/completions', { prompt: words(rand, 120), max_tokens: 30, seed }, 1);
    } catch (e) {
      if (!(kind === 'disconnect' && e.name === 'AbortError')) error(kind, String(e && e.cause ? e.cause : e));
    }
  }
}

const rss_start_kb = rssKb();
const m0 = await metrics();
const deadline = Date.now() + secs * 1000;
await Promise.all(Array.from({ length: nClients }, (_, i) => client(i, deadline)));
let m = await metrics();
for (let k = 0; k < 100 && (m.used !== 0 || m.running !== 0); k++) { await sleep(100); m = await metrics(); }
const lat = st.lat.sort((a, b) => a - b);
const pct = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] : -1);
const out = {
  completed: st.completed, refused: st.refused, errors: st.errors, disconnects: st.disconnects,
  bad_refused: st.bad_refused, preemptions: m.preemptions - m0.preemptions, p50_ms: pct(0.5), p99_ms: pct(0.99),
  rss_start_kb, rss_end_kb: rssKb(), blocks_used: m.used, running: m.running, by_kind: st.by_kind,
  first_errors: st.first_errors,
};
console.log(JSON.stringify(out));
process.exit(st.errors === 0 && m.used === 0 && m.running === 0 && st.completed > 0 ? 0 : 1);
