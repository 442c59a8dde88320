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
import net from 'node:net';

const [mode, portArg, ...rest] = process.argv.slice(2);
const port = Number(portArg);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const unescape = (s) => JSON.parse('"' + s.replace(/"/g, '\\"') + '"');

function connect(from) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress: from || '127.0.0.1' });
    s.once('connect', () => resolve(s));
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

let out;
if (mode === 'raw') out = await exchange(unescape(rest[0]), rest[1]);
else if (mode === 'slow') out = await slow(Number(rest[0]), Number(rest[1]), unescape(rest[2]));
else if (mode === 'hold') out = await hold(Number(rest[0]), unescape(rest[1]), rest[2], rest.slice(3));
else { console.error('usage: hostile.mjs raw|slow|hold PORT ...'); process.exit(2); }
console.log(JSON.stringify(out));
process.exit(0); // pending timers (the 5 s bound) need not run out
