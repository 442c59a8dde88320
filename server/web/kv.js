// kv.js - the KV panel, from GET /v1/kv?compact=1 polled while the page is
// visible: one cell per pool block (data-block-id, data-state; owners and
// refcount on hover), each running sequence's block table in logical order,
// evictions and preemptions flashing, and the memory formula. The compact
// form (one letter per block) keeps a poll of a 100k-block pool near 400 KB.
import { get } from "./api.js";

export const KV_POLL_MS = 400; // 2.5 Hz: one JSON snapshot per poll, built by the engine thread

const $ = (id) => document.getElementById(id);
let prev = null; // the previous snapshot
// "request:seq" -> ids of the blocks that sequence got from the prefix cache:
// those that already held a prefix-cache key in the snapshot before the
// sequence was first seen (cached, or used by a sequence ending just then),
// kept while it runs
const hits = new Map();

export function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(b < 10 ? 2 : 1) : String(Math.round(b))) + " " + u[i];
}

function flash(el) {
  el.classList.remove("flash");
  void el.offsetWidth; // restart the animation
  el.classList.add("flash");
}

const STATES = { f: "free", u: "used", c: "cached" };

// The compact snapshot as one object per block, owners from the sequences
// (with layer groups, every group's table: "groups").
function unpack(kv) {
  const n = kv.block_states.length;
  const blocks = new Array(n);
  for (let i = 0; i < n; i++)
    blocks[i] = { id: i, state: STATES[kv.block_states[i]] || "?", refcount: kv.block_refcounts[i],
                  cached: kv.block_keyed[i] === "1", owners: [] };
  for (const q of kv.sequences) {
    const tables = q.groups || [{ blocks: q.blocks }];
    for (const t of tables)
      for (const b of t.blocks) if (blocks[b]) blocks[b].owners.push({ seq: q.seq, request: q.request, group: t.group });
  }
  kv.blocks = blocks;
  return kv;
}

function ownersText(b) {
  if (!b.owners.length) return "no owner";
  return b.owners.map((o) => "seq " + o.seq + " (request " + o.request + ")" +
                             (o.group === undefined ? "" : ", layer group " + o.group)).join(", ");
}

function cellTitle(b) {
  return "block " + b.id + ": " + b.state + ", refcount " + b.refcount + (b.cached ? ", prefix-cached" : "") +
         (b.refcount > 1 ? ", shared" : "") + "\n" + ownersText(b);
}

// Titles are made when the pointer reaches a cell, from the newest snapshot.
function hoverTitles(grid) {
  grid.addEventListener("mouseover", (ev) => {
    const id = ev.target.dataset && ev.target.dataset.blockId;
    const b = id !== undefined && prev && prev.blocks[Number(id)];
    if (b) ev.target.title = cellTitle(b);
  });
}

function drawGrid(kv) {
  const grid = $("kv-grid");
  if (!grid.dataset.hover) { hoverTitles(grid); grid.dataset.hover = "1"; }
  grid.classList.toggle("dense", kv.blocks.length > 4096);
  if (grid.children.length !== kv.blocks.length) {
    const cells = kv.blocks.map((b) => {
      const c = document.createElement("span");
      c.className = "cell";
      c.dataset.blockId = String(b.id);
      return c;
    });
    grid.replaceChildren(...cells);
  }
  const evicted = prev && kv.evictions > prev.evictions;
  kv.blocks.forEach((b, i) => {
    const c = grid.children[i];
    const shared = b.refcount > 1;
    const cls = "cell " + b.state + (shared ? " shared" : "");
    if (c.dataset.state !== b.state || c.className.replace(" flash", "") !== cls) {
      c.className = cls;
      c.dataset.state = b.state;
    }
    // a cached block taken for another use lost its key: evicted
    const was = prev && prev.blocks[i];
    if (evicted && was && was.state === "cached" && was.cached && !b.cached) flash(c);
  });
}

function noteHits(kv) {
  const live = new Set();
  for (const q of kv.sequences) {
    const key = q.request + ":" + q.seq;
    live.add(key);
    if (hits.has(key)) continue;
    const got = new Set();
    if (prev) for (const b of q.blocks) if (prev.blocks[b] && prev.blocks[b].cached) got.add(b);
    hits.set(key, got);
  }
  for (const k of [...hits.keys()]) if (!live.has(k)) hits.delete(k);
}

function drawSeqs(kv) {
  noteHits(kv);
  const box = $("kv-seqs");
  if (!kv.sequences.length) {
    const s = document.createElement("span");
    s.className = "muted";
    s.textContent = "no running sequence";
    box.replaceChildren(s);
    return;
  }
  box.replaceChildren(...kv.sequences.map((q) => {
    const row = document.createElement("div");
    row.className = "seq";
    row.dataset.seq = String(q.seq);
    const head = document.createElement("div");
    head.textContent = "seq " + q.seq + " · request " + q.request + (q.completions > 1 ? " ×" + q.completions : "") +
                       " · " + q.state + " · " + q.tokens + " tokens in " + q.blocks.length + " blocks";
    const chips = document.createElement("div");
    chips.className = "chips";
    const tail = q.tokens - (q.blocks.length - 1) * kv.block_size;
    const fromCache = hits.get(q.request + ":" + q.seq) || new Set();
    q.blocks.forEach((id, j) => {
      const b = kv.blocks[id];
      const chip = document.createElement("span");
      const shared = b && b.refcount > 1;
      const last = j === q.blocks.length - 1 && tail < kv.block_size;
      const hit = fromCache.has(id);
      chip.className = "chip" + (shared ? " shared" : "") + (hit ? " hit" : "") + (last ? " tail" : "");
      chip.textContent = String(id);
      chip.title = "logical block " + j + " → physical block " + id + (shared ? " (shared, refcount " + b.refcount + ")" : "") +
                   (hit ? "; served from the prefix cache" : "") +
                   (last ? "; " + tail + " of " + kv.block_size + " tokens filled" : "");
      chips.appendChild(chip);
    });
    row.append(head, chips);
    return row;
  }));
}

function drawFormula(kv) {
  const dims = 2 * kv.n_layers * kv.n_kv_heads * kv.head_dim;
  const perElem = dims ? kv.bytes_per_token / dims : 0;
  const allocTokens = kv.blocks_used * kv.block_size;
  // tokens in held blocks, each block once (bytes_live is stored tokens x bytes per token)
  const stored = kv.bytes_per_token ? Math.round(kv.bytes_live / kv.bytes_per_token) : 0;
  const rows = [
    ["bytes per token", "2 × " + kv.n_layers + " layers × " + kv.n_kv_heads + " KV heads × " + kv.head_dim + " dims × " +
      +perElem.toFixed(4) + " B (" + kv.kv_dtype + ") = " + fmtBytes(kv.bytes_per_token)],
    ["pool", kv.blocks_total + " blocks × " + kv.block_size + " tokens = " + kv.blocks_total * kv.block_size + " tokens, " +
      fmtBytes(kv.pool_bytes) + " (" + fmtBytes(kv.block_bytes) + " a block)"],
    ["blocks", kv.blocks_used + " used · " + kv.blocks_cached + " cached · " + (kv.blocks_total - kv.blocks_used - kv.blocks_cached) + " free"],
    ["utilisation", stored + " tokens stored / " + allocTokens + " token slots allocated = " +
      (allocTokens ? (100 * stored / allocTokens).toFixed(1) + " %" : "–") +
      (kv.tokens !== stored ? " (the sequences hold " + kv.tokens + ": shared blocks count once)" : "") +
      (allocTokens ? "; " + (100 * kv.utilisation).toFixed(1) + " % of the allocated bytes (with the blocks' padding)" : "")],
    ["wasted in tails", fmtBytes(kv.bytes_wasted) + " of " + fmtBytes(kv.bytes_allocated) + " allocated"],
    ["prefix cache", kv.prefix_hit_tokens + " of " + kv.prefix_query_tokens + " prompt tokens served from cache"],
  ];
  $("kv-formula").replaceChildren(...rows.flatMap(([k, v]) => {
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = k;
    dd.textContent = v;
    return [dt, dd];
  }));
}

function drawEvents(kv) {
  const box = $("kv-events");
  const item = (label, now, before) => {
    const s = document.createElement("span");
    s.textContent = label + " " + now;
    if (before !== undefined && now > before) { s.textContent += " (+" + (now - before) + ")"; flash(s); s.classList.add("flash"); }
    return s;
  };
  const sep = document.createTextNode(" · ");
  box.replaceChildren(item("evictions", kv.evictions, prev && prev.evictions), sep,
                      item("preemptions", kv.preemptions, prev && prev.preemptions));
  if (prev && kv.preemptions > prev.preemptions) flash($("kv-grid"));
}

export async function pollKV() {
  const raw = await get("/v1/kv?compact=1");
  if (!raw || typeof raw.block_states !== "string" || !Array.isArray(raw.block_refcounts) || !Array.isArray(raw.sequences)) return;
  const kv = unpack(raw);
  drawGrid(kv);
  drawSeqs(kv);
  drawFormula(kv);
  drawEvents(kv);
  prev = kv;
}
