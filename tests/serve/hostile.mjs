// hostile.mjs - raw-socket clients that behave as hostile ones would, for
// tests/cli/test_serve_guard.sh. Node's `net` only (no packages). Every
// mode is bounded in time and exits by itself; each prints one JSON line.
//
//   node hostile.mjs raw PORT REQUEST [FROM]
//       sends REQUEST (JSON string escapes: \r\n...) from address FROM
//       (default 127.0.0.1), reads until the answer is whole, the server closes or 5 s pass:
//       {"status", "headers": {lowercased: value}, "body", "closed"}
//   node hostile.mjs slow PORT N SECS HEAD
//       N sockets send HEAD, then one more header byte every 300 ms for at
//       most SECS s: {"closed": how many the server closed, "max_s": when
//       the last of those closed, "open": still open at the end}
//   node hostile.mjs hold PORT HOLD REQUEST REQFROM FROM...
//       opens HOLD idle sockets (they only connect), from the FROM
//       addresses in turn, then sends REQUEST from REQFROM and prints its
//       answer as `raw` does
//   node hostile.mjs seq PORT SECS PART [MS PART]...
//       sends PART, then after MS ms the next PART..., on one connection, and
//       reads until the server closes or SECS s pass: {"answers": [{"status",
//       "headers", "body"}...] in the order they came, "closed", "ms": when
//       the server closed (or SECS), "rest": bytes that are no whole answer}
//   node hostile.mjs churn PORT SECS N REQUEST
//       N clients for SECS s, each sending REQUEST (with Connection: close)
//       on a new connection in a loop; every other time the client resets
//       its socket at the answer's first bytes, else it reads the answer to
//       the end: {"requests", "answered", "hung_up", "refused": connections
//       the server closed or reset before any byte of an answer}
//
// With HOSTILE_TLS_CA=FILE every mode but churn (plain TCP) speaks TLS,
// trusting that certificate.
import fs from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';

const [mode, portArg, ...rest] = process.argv.slice(2);
const port = Number(portArg);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const unescape = (s) => JSON.parse('"' + s.replace(/"/g, '\\"') + '"');

function connect(from) {
  return new Promise((resolve, reject) => {
    const opts = { host: '127.0.0.1', port, localAddress: from || '127.0.0.1' };
    const ca = process.env.HOSTILE_TLS_CA;
    const s = ca ? tls.connect({ ...opts, ca: fs.readFileSync(ca), servername: 'localhost' }) : net.connect(opts);
    s.once(ca ? 'secureConnect' : 'connect', () => resolve(s));
    s.once('error', reject);
  });
}

// True when text holds a whole answer with a Content-Length.
function complete(text) {
  const cut = text.indexOf('\r\n\r\n');
  const m = cut < 0 ? null : /\r\ncontent-length: *(\d+)/i.exec(text.slice(0, cut + 2));
  return m !== null && text.length - cut - 4 >= Number(m[1]);
}

// Sends req and collects the answer until the server closes (or 5 s).
async function exchange(req, from) {
  const s = await connect(from);
  const chunks = [];
  let closed = false;
  const done = new Promise((r) => {
    s.on('data', (d) => {
      chunks.push(d);
      if (complete(Buffer.concat(chunks).toString('latin1'))) r();
    });
    s.on('close', () => { closed = true; r(); });
    s.on('error', () => {});
  });
  s.write(req);
  await Promise.race([done, sleep(5000)]);
  s.destroy();
  const text = Buffer.concat(chunks).toString('latin1');
  const cut = text.indexOf('\r\n\r\n');
  const head = cut < 0 ? text : text.slice(0, cut);
  const lines = head.split('\r\n');
  const headers = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] || '');
  return { status: m ? Number(m[1]) : 0, headers, body: cut < 0 ? '' : text.slice(cut + 4), closed };
}

async function slow(n, secs, head) {
  const t0 = Date.now();
  const socks = await Promise.all(Array.from({ length: n }, () => connect()));
  let closed = 0, maxS = 0;
  for (const s of socks) {
    s.on('error', () => {});
    s.on('data', () => {});
    s.on('close', () => { closed++; maxS = (Date.now() - t0) / 1000; });
    s.write(head);
  }
  while (Date.now() - t0 < secs * 1000 && closed < n) {
    await sleep(300);
    for (const s of socks) if (!s.destroyed) s.write('a');
  }
  const open = n - closed;
  for (const s of socks) s.destroy();
  return { closed, max_s: maxS, open };
}

async function hold(nHold, req, reqFrom, froms) {
  const idle = [];
  for (let i = 0; i < nHold; i++) {
    const s = await connect(froms[i % froms.length]);
    s.on('error', () => {});
    idle.push(s);
  }
  await sleep(200); /* the server has taken them in */
  const r = await exchange(req, reqFrom);
  for (const s of idle) s.destroy();
  return r;
}

// Splits text into the answers in it (Content-Length or chunked bodies).
function answers(text) {
  const out = [];
  for (;;) {
    const cut = text.indexOf('\r\n\r\n');
    if (cut < 0) break;
    const lines = text.slice(0, cut).split('\r\n');
    const headers = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
    }
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]);
    if (!m) break;
    let rest = text.slice(cut + 4), body = '';
    if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length']);
      if (rest.length < n) break;
      body = rest.slice(0, n);
      rest = rest.slice(n);
    } else if (/chunked/i.test(headers['transfer-encoding'] || '')) {
      let ok = false;
      for (;;) {
        const e = rest.indexOf('\r\n');
        if (e < 0) break;
        const size = parseInt(rest.slice(0, e), 16);
        if (size === 0) { const t = rest.indexOf('\r\n', e + 2); if (t >= 0) { rest = rest.slice(t + 2); ok = true; } break; }
        if (rest.length < e + 2 + size + 2) break;
        body += rest.slice(e + 2, e + 2 + size);
        rest = rest.slice(e + 2 + size + 2);
      }
      if (!ok) break;
    } else if (Number(m[1]) >= 200 && Number(m[1]) !== 204 && Number(m[1]) !== 304) {
      body = rest;
      rest = '';
    }
    out.push({ status: Number(m[1]), headers, body });
    text = rest;
  }
  return { answers: out, rest: text };
}

async function seq(secs, parts) {
  const t0 = Date.now();
  const s = await connect();
  const chunks = [];
  let closed = false, ms = secs * 1000;
  const done = new Promise((r) => {
    s.on('data', (d) => chunks.push(d));
    s.on('close', () => { closed = true; ms = Date.now() - t0; r(); });
    s.on('error', () => {});
  });
  (async () => {
    s.write(parts[0]);
    for (let k = 1; k + 1 < parts.length; k += 2) {
      await sleep(Number(parts[k]));
      if (!s.destroyed) s.write(parts[k + 1]);
    }
  })();
  await Promise.race([done, sleep(secs * 1000)]);
  s.destroy();
  const r = answers(Buffer.concat(chunks).toString('latin1'));
  return { answers: r.answers, closed, ms, rest: r.rest };
}

// One request of churn: 'answered', 'hung_up' (this side reset it at the
// answer's first bytes) or 'refused' (closed or reset before any byte).
function churnOnce(req, hangUp) {
  return new Promise((resolve) => {
    let got = false;
    const s = net.connect({ host: '127.0.0.1', port });
    s.setTimeout(5000, () => s.destroy());
    s.on('error', () => {});
    s.on('data', () => {
      got = true;
      if (hangUp) { s.resetAndDestroy(); resolve('hung_up'); }
    });
    s.on('close', () => resolve(got ? 'answered' : 'refused'));
    s.on('connect', () => s.write(req));
  });
}

async function churn(secs, n, req) {
  const until = Date.now() + secs * 1000;
  const out = { requests: 0, answered: 0, hung_up: 0, refused: 0 };
  await Promise.all(Array.from({ length: n }, async (_, k) => {
    for (let i = k; Date.now() < until; i++) {
      out.requests++;
      out[await churnOnce(req, i % 2 === 1)]++;
    }
  }));
  return out;
}

let out;
if (mode === 'seq') out = await seq(Number(rest[0]), rest.slice(1).map((p, k) => (k % 2 ? p : unescape(p))));
else if (mode === 'raw') out = await exchange(unescape(rest[0]), rest[1]);
else if (mode === 'slow') out = await slow(Number(rest[0]), Number(rest[1]), unescape(rest[2]));
else if (mode === 'churn') out = await churn(Number(rest[0]), Number(rest[1]), unescape(rest[2]));
else if (mode === 'hold') out = await hold(Number(rest[0]), unescape(rest[1]), rest[2], rest.slice(3));
else { console.error('usage: hostile.mjs raw|slow|hold|seq|churn PORT ...'); process.exit(2); }
console.log(JSON.stringify(out));
process.exit(0); // pending timers (the 5 s bound) need not run out
