// page.mjs - the web page at / in a real browser (Debian's chromium,
// headless, driven by puppeteer-core) against a running `pagellm serve`.
// Run by tests/cli/test_web.sh:
//
//   node tests/web/page.mjs CONFIG.json
//
// CONFIG: {url, pressureUrl, key, chromium, outDir, nodeModules}. The
// servers have an API key; the page gets it the way a person gives it (typed
// into the key box). pressureUrl is a server with a pool of a few blocks,
// where requests evict cached blocks and preempt sequences.
// Prints one "PASS name" / "FAIL name: why" line per check; screenshots go
// to outDir.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
const require = createRequire(cfg.nodeModules + "/");
const { default: puppeteer } = await import(require.resolve("puppeteer-core"));

let failed = 0;
async function check(name, fn) {
  try {
    const why = await fn();
    if (why) { failed++; console.log(`FAIL ${name}: ${why}`); } else console.log(`PASS ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: threw ${e && e.message}`.split("\n")[0]);
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const auth = { Authorization: "Bearer " + cfg.key };
async function kv(url) { return (await fetch((url || cfg.url) + "/v1/kv", { headers: auth })).json(); }

// What the page shows: every cell's id and state, in DOM order.
const cells = (page) => page.$$eval("[data-block-id]", (els) => els.map((e) => [Number(e.dataset.blockId), e.dataset.state]));

// Waits until the page's cells equal the server's states (the page polls at
// 2.5 Hz); returns null or why not. Call when the engine is idle.
const cellsMatch = (page) => cellsMatchAt(page, cfg.url);
async function cellsMatchAt(page, url) {
  let why = "no comparison made";
  for (let i = 0; i < 20; i++) {
    const want = await kv(url), got = await cells(page);
    if (got.length !== want.blocks.length || got.length !== want.blocks_total)
      why = `page has ${got.length} cells, /v1/kv ${want.blocks.length} blocks of ${want.blocks_total}`;
    else {
      const bad = want.blocks.filter((b, j) => got[j][0] !== b.id || got[j][1] !== b.state);
      if (!bad.length) return null;
      why = `${bad.length} cells differ, e.g. block ${bad[0].id}: page ${got[bad[0].id][1]}, server ${bad[0].state}`;
    }
    await sleep(250);
  }
  return why;
}

const browser = await puppeteer.launch({
  executablePath: cfg.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  timeout: 30000,
});
const errors = [];
let keyGiven = false; // until then the page's requests are answered 401, as they should be
try {
  const page = await browser.newPage();
  page.on("console", (m) => {
    if (m.type() === "error" && (keyGiven || !/status of 401/.test(m.text()))) errors.push("console: " + m.text());
  });
  page.on("pageerror", (e) => errors.push("page error: " + e.message));
  page.on("requestfailed", (r) => { if (!/chat\/completions/.test(r.url())) errors.push("request failed: " + r.url()); });
  await page.setViewport({ width: 1280, height: 800 });

  // first visit: no key yet (no request is made that would fail), then the person types it
  await page.goto(cfg.url + "/", { waitUntil: "domcontentloaded" });
  await check("web_page_loads", async () => {
    const title = await page.title();
    const hooks = await page.$$eval('[data-testid="message-input"], [data-testid="send"]', (e) => e.length);
    return title === "pagellm" && hooks === 2 ? null : `title ${title}, ${hooks} of 2 test hooks`;
  });
  await check("web_asks_for_key", async () => {
    for (let i = 0; i < 20; i++) {
      const s = await page.$eval("#status", (e) => e.textContent);
      if (/API key/.test(s)) return null;
      await sleep(100);
    }
    return "the status line never asked for the API key";
  });
  await page.type("#api-key", cfg.key);
  await page.click('#key-form button[type="submit"]');
  await check("web_key_kept", async () => {
    const k = await page.evaluate(() => localStorage.getItem("pagellm.apiKey"));
    return k === cfg.key ? null : `localStorage has ${k}`;
  });
  await page.reload({ waitUntil: "domcontentloaded" });
  keyGiven = true;

  await check("web_kv_cells_match_idle", () => cellsMatch(page));
  await check("web_formula_shown", async () => {
    const want = await kv();
    const t = await page.$eval("#kv-formula", (e) => e.textContent);
    return t.includes(`${want.n_layers} layers`) && t.includes(want.kv_dtype) && t.includes(`${want.blocks_total} blocks`)
      ? null : `formula text: ${t.slice(0, 200)}`;
  });

  // model text is only ever text: markup in it is shown, never parsed
  await check("web_markdown_is_safe", async () => {
    const r = await page.evaluate(async () => {
      const { renderMarkdown } = await import("/web/md.js");
      const el = document.createElement("div");
      const evil = '<img src=x onerror="window.__pwned=1"> **bold** `<b>code</b>` <script>window.__pwned=2</script>\n' +
                   '```html\n<iframe src="javascript:alert(1)"></iframe>\n```\n# Title <i>x</i>\n- item *em*\n1. one';
      renderMarkdown(el, evil);
      document.body.appendChild(el);
      await new Promise((res) => setTimeout(res, 50));
      const tags = [...el.querySelectorAll("*")].map((e) => e.tagName.toLowerCase());
      el.remove();
      return { tags, text: el.textContent, pwned: window.__pwned };
    });
    const allowed = new Set(["p", "strong", "em", "code", "pre", "h3", "ul", "ol", "li", "br"]);
    const bad = r.tags.filter((t) => !allowed.has(t));
    if (bad.length || r.pwned) return `elements ${bad.join(",")} made, pwned=${r.pwned}`;
    for (const want of ["strong", "code", "pre", "h3", "ul", "ol", "em"])
      if (!r.tags.includes(want)) return `no <${want}> in ${r.tags.join(",")}`;
    return r.text.includes('<img src=x onerror="window.__pwned=1">') && r.text.includes("<iframe") ? null : `text lost: ${r.text.slice(0, 120)}`;
  });

  // first turn: a long system prompt so that whole blocks are reused next turn
  await page.click("details.settings summary");
  await page.type("#system", "You are a storyteller. You tell short, happy stories about children, animals and parks.");
  await page.type('[data-testid="message-input"]', "Tell me a story about Lily and her red ball.");
  await page.evaluate(() => {
    // records every change of the answer's text while it streams
    window.__lengths = [];
    new MutationObserver(() => {
      const a = [...document.querySelectorAll('[data-testid="assistant-message"] .body')].pop();
      if (a) window.__lengths.push(a.textContent.length);
    }).observe(document.getElementById("messages"), { subtree: true, childList: true, characterData: true });
  });
  await page.click('[data-testid="send"]');
  const done = (n) => page.waitForFunction((n) => document.querySelectorAll('[data-testid="assistant-message"][data-done]').length >= n,
                                          { timeout: 30000 }, n);
  await done(1);
  const answers = () => page.$$eval('[data-testid="assistant-message"]', (els) => els.map((e) => ({
    text: e.querySelector(".body").textContent, stats: e.querySelector(".stats").textContent,
    deltas: Number(e.dataset.deltas || 0), cached: e.dataset.cachedTokens, error: e.classList.contains("error") })));
  await check("web_answer_streams", async () => {
    const [a] = await answers();
    const lens = await page.evaluate(() => window.__lengths);
    if (a.error || !a.text.trim()) return `no answer: ${JSON.stringify(a).slice(0, 200)}`;
    if (a.deltas < 2) return `${a.deltas} streamed deltas`;
    const grew = new Set(lens.filter((n) => n > 0)).size;
    console.log(`# first answer: ${a.deltas} deltas, text painted at ${grew} lengths; ${a.stats}`);
    return null;
  });
  await check("web_answer_stats", async () => {
    const [a] = await answers();
    return /\d+ tokens/.test(a.stats) && /TTFT \d+ ms/.test(a.stats) && /prompt \d+ \(0 cached\)/.test(a.stats)
      ? null : `stats: ${a.stats}`;
  });

  // second turn: the first turn's blocks come from the prefix cache
  await page.type('[data-testid="message-input"]', "And then what happened?");
  await page.click('[data-testid="send"]');
  await done(2);
  await check("web_second_turn_cached", async () => {
    const a = (await answers())[1];
    const m = a.stats.match(/prompt (\d+) \((\d+) cached\)/);
    if (!m) return `stats: ${a.stats}`;
    return Number(m[2]) >= 16 && Number(a.cached) === Number(m[2]) ? null : `stats: ${a.stats}`;
  });
  await check("web_kv_cells_match_after_chat", async () => {
    const why = await cellsMatch(page);
    if (why) return why;
    const k = await kv();
    return k.blocks_cached > 0 ? null : "no cached block after two turns";
  });

  // live: an n=4 request with a long shared prompt, seen while it runs
  const prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog.";
  const live = fetch(cfg.url + "/v1/completions", {
    method: "POST", headers: { ...auth, "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, n: 4, max_tokens: 1800, ignore_eos: true, temperature: 1 }),
  });
  await check("web_kv_live_shared", async () => {
    try {
      await page.waitForFunction(() => document.querySelectorAll(".seq").length >= 1 &&
                                       document.querySelectorAll('.cell.shared[data-state="used"]').length >= 1, { timeout: 15000 });
    } catch (e) {
      return "no running sequence with shared blocks appeared";
    }
    const chips = await page.$$eval(".seq .chip", (e) => e.length);
    return chips > 0 ? null : "block tables without blocks";
  });
  await page.screenshot({ path: cfg.outDir + "/desktop.png" });
  const res = await live;
  await check("web_live_request_ok", async () => (res.ok ? null : `status ${res.status}`));
  // the same prompt again: its block tables show the blocks served from the prefix cache
  const again = fetch(cfg.url + "/v1/completions", {
    method: "POST", headers: { ...auth, "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, n: 2, max_tokens: 1800, ignore_eos: true, temperature: 1 }),
  });
  await check("web_kv_prefix_hits_marked", async () => {
    try {
      await page.waitForFunction(() => document.querySelectorAll(".seq .chip.hit").length >= 1, { timeout: 15000 });
    } catch (e) {
      return "no block of the repeated prompt was marked as served from the cache";
    }
    return null;
  });
  const res2 = await again;
  await check("web_live_request_again_ok", async () => (res2.ok && (await res2.json()).usage.prompt_tokens_details.cached_tokens >= 16
    ? null : `status ${res2.status}`));
  await check("web_metrics_charts", async () => {
    await sleep(1200);
    const pts = await page.$$eval("[data-chart] path", (e) => e.map((p) => (p.getAttribute("d") || "").length));
    return pts.length >= 4 && pts.every((n) => n > 0) ? null : `chart points: ${pts}`;
  });

  // a second conversation; Stop ends a long answer early; both conversations survive a reload
  // The tiny model ends a story with its end token within a few hundred tokens,
  // faster than a click lands; this one request asks the server to ignore it,
  // so the answer (8000 tokens, >1 s) is still running when Stop is clicked.
  await page.click("#new-conv");
  await page.$eval("#max-tokens", (e) => { e.value = "8000"; });
  await page.setRequestInterception(true);
  const ignoreEos = (req) => {
    if (req.isInterceptResolutionHandled()) return;
    if (req.method() === "POST" && req.url().endsWith("/v1/chat/completions")) {
      req.continue({ postData: JSON.stringify({ ...JSON.parse(req.postData()), ignore_eos: true }) });
    } else req.continue();
  };
  page.on("request", ignoreEos);
  await page.type('[data-testid="message-input"]', "Tell me a very long story.");
  await page.click('[data-testid="send"]');
  await page.waitForFunction(() => {
    const a = [...document.querySelectorAll('[data-testid="assistant-message"]')].pop();
    return a && Number(a.dataset.deltas || 0) >= 1;
  }, { timeout: 15000 });
  await page.click('[data-testid="stop"]');
  await done(1);
  page.off("request", ignoreEos);
  await page.setRequestInterception(false);
  await check("web_stop", async () => {
    const a = (await answers()).pop();
    const m = a.stats.match(/^(\d+) tokens/);
    return /stopped/.test(a.stats) && m && Number(m[1]) < 8000 ? null : `stats after Stop: ${a.stats}`;
  });
  await check("web_stop_frees_the_sequence", async () => {
    for (let i = 0; i < 50; i++) {
      const k = await kv();
      if (k.running === 0 && k.blocks_used === 0) return null;
      await sleep(100);
    }
    return "the stopped request still holds blocks";
  });
  await page.reload({ waitUntil: "domcontentloaded" });
  await check("web_conversations_kept", async () => {
    await page.waitForFunction(() => document.querySelectorAll("#conv-list option").length >= 2, { timeout: 5000 });
    const opts = await page.$$eval("#conv-list option", (os) => os.map((o) => [o.value, o.textContent]));
    const first = opts.find(([, t]) => t.startsWith("Tell me a story about Lily"));
    if (!first) return `conversations: ${JSON.stringify(opts)}`;
    await page.select("#conv-list", first[0]);
    const n = await page.$$eval('[data-testid="assistant-message"]', (e) => e.length);
    return n === 2 ? null : `the first conversation shows ${n} answers, not 2`;
  });

  // layout: nothing wider than the window, at desktop and phone width
  for (const [name, w, h] of [["desktop", 1280, 800], ["phone", 390, 844]]) {
    await page.setViewport({ width: w, height: h });
    await sleep(300);
    await check(`web_layout_${name}`, async () => {
      const r = await page.evaluate(() => ({ sw: document.documentElement.scrollWidth, cw: document.documentElement.clientWidth,
        wide: [...document.querySelectorAll("body *")].filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
                .slice(0, 3).map((e) => e.tagName + "." + e.className) }));
      return r.sw <= r.cw && !r.wide.length ? null : `scrollWidth ${r.sw} > ${r.cw}: ${r.wide.join(" ")}`;
    });
    if (name === "phone") await page.screenshot({ path: cfg.outDir + "/phone.png", fullPage: true });
  }

  // pressure: evictions and preemptions are counted and flash on the page
  const p2 = await browser.newPage();
  p2.on("console", (m) => { if (m.type() === "error") errors.push("console (pressure): " + m.text()); });
  p2.on("pageerror", (e) => errors.push("page error (pressure): " + e.message));
  await p2.setViewport({ width: 1280, height: 800 });
  await p2.evaluateOnNewDocument((k) => localStorage.setItem("pagellm.apiKey", k), cfg.key);
  await p2.goto(cfg.pressureUrl + "/", { waitUntil: "domcontentloaded" });
  const pkv = async () => (await fetch(cfg.pressureUrl + "/v1/kv?compact=1", { headers: auth })).json();
  const total = (await pkv()).blocks_total;
  await p2.waitForFunction((n) => document.querySelectorAll("[data-block-id]").length === n, { timeout: 10000 }, total);
  await p2.evaluate(() => {
    window.__flashes = 0;
    const flashing = (n) => n.classList && n.classList.contains("flash");
    new MutationObserver((ms) => {
      for (const m of ms) window.__flashes += flashing(m.target) + [...m.addedNodes].filter(flashing).length;
    })
      .observe(document.getElementById("kv-events"), { subtree: true, childList: true, attributes: true });
  });
  const complete = (prompt, n, max) => fetch(cfg.pressureUrl + "/v1/completions", {
    method: "POST", headers: { ...auth, "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, n, max_tokens: max, ignore_eos: true, temperature: 1 }) }).then((r) => r.json());
  for (const p of ["Once upon a time there was a cat", "The dog ran to the park and played", "Lily and Ben went to the sea"])
    await complete(p, 1, 200);
  await sleep(600); // the page sees the cached blocks before they are taken
  await complete("Once upon a time, there was a little girl named Lily. She loved to play.", 4, 400);
  await check("web_pressure_counters", async () => {
    const want = await pkv();
    if (!(want.evictions > 0 && want.preemptions > 0)) return `the pressure made no eviction or preemption: ${JSON.stringify(want).slice(0, 200)}`;
    const text = `evictions ${want.evictions}`, text2 = `preemptions ${want.preemptions}`;
    try {
      await p2.waitForFunction((a, b) => { const t = document.getElementById("kv-events").textContent; return t.includes(a) && t.includes(b); },
                               { timeout: 5000 }, text, text2);
    } catch (e) {
      return `page shows "${await p2.$eval("#kv-events", (e) => e.textContent)}", server ${text}, ${text2}`;
    }
    return null;
  });
  await check("web_pressure_flashes", async () => {
    const n = await p2.evaluate(() => window.__flashes);
    return n > 0 ? null : "no eviction or preemption flashed";
  });
  await check("web_pressure_cells_match", () => cellsMatchAt(p2, cfg.pressureUrl));
  await p2.close();

  await check("web_no_console_errors", async () => (errors.length ? errors.slice(0, 3).join(" | ") : null));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
