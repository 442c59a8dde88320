// relay_cost.mjs - what a request costs through `pagellm serve`, for
// comparing two builds (docs/security.md: the relay's cost). Node's `net`
// only. Prints one JSON line of milliseconds:
//
//   node relay_cost.mjs PORT [CONNECTS] [KEEPALIVE] [STREAMS] [TOKENS]
//     connect_p50/p90   a new connection, GET /health, Connection: close,
//                       until the server closes (CONNECTS of them, default 1000)
//     keepalive_p50/p90 GET /health on one kept connection (KEEPALIVE, default 1000)
//     ttft_p50          a streamed completion's first token event after the request
//     itl_p50/p90       between two token events (STREAMS completions of
//                       TOKENS tokens, default 5 x 64)
import net from 'node:net';

const [port, nConn = 1000, nKeep = 1000, nStream = 5, nTok = 64] = process.argv.slice(2).map(Number);
const now = () => Number(process.hrtime.bigint()) / 1e6;
const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };

function connectOnce() {
  return new Promise((resolve) => {
    const t0 = now();
    const s = net.connect({ host: '127.0.0.1', port }, () => s.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    s.on('data', () => {});
    s.on('error', () => {});
    s.on('close', () => resolve(now() - t0));
  });
}

async function keepalive(n) {
  const s = net.connect({ host: '127.0.0.1', port });
  await new Promise((r) => s.once('connect', r));
  const times = [];
  let buf = '', wake = null;
  s.on('data', (d) => { buf += d.toString('latin1'); if (wake) wake(); });
  for (let i = 0; i < n; i++) {
    const t0 = now();
    s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    while (!/\r\n\r\n\{"status":"ok"\}/.test(buf)) await new Promise((r) => { wake = r; });
    buf = buf.slice(buf.indexOf('{"status":"ok"}') + 15);
    times.push(now() - t0);
  }
  s.destroy();
  return times;
}

function stream() {
  return new Promise((resolve) => {
    const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: nTok, ignore_eos: true, temperature: 0, stream: true });
    const s = net.connect({ host: '127.0.0.1', port });
    const events = [];
    let t0;
    s.on('connect', () => {
      t0 = now();
      s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    });
    s.on('data', (d) => {
      const t = now();
      const k = (d.toString('latin1').match(/"text":/g) || []).length;
      for (let i = 0; i < k; i++) events.push(t);
    });
    s.on('error', () => {});
    s.on('close', () => resolve({ ttft: events[0] - t0, gaps: events.slice(1).map((t, i) => t - events[i]) }));
  });
}

const conn = [];
for (let i = 0; i < nConn; i++) conn.push(await connectOnce());
const keep = await keepalive(nKeep);
const ttft = [], gaps = [];
for (let i = 0; i < nStream; i++) { const r = await stream(); ttft.push(r.ttft); gaps.push(...r.gaps); }
const f = (x) => Math.round(x * 1000) / 1000;
console.log(JSON.stringify({
  connect_p50: f(pct(conn, 0.5)), connect_p90: f(pct(conn, 0.9)),
  keepalive_p50: f(pct(keep, 0.5)), keepalive_p90: f(pct(keep, 0.9)),
  ttft_p50: f(pct(ttft, 0.5)), itl_p50: f(pct(gaps, 0.5)), itl_p90: f(pct(gaps, 0.9)), tokens: gaps.length + ttft.length,
}));
