// chat.js - the chat panel: conversations kept in localStorage, answers
// streamed from /v1/chat/completions (SSE), a stop button, and per answer
// its tokens, tokens/s, time to first token and prompt tokens served from
// the prefix cache (usage.prompt_tokens_details.cached_tokens).
import { headers, errorText } from "./api.js";
import { renderMarkdown } from "./md.js";

const STORE = "pagellm.convs", CURRENT = "pagellm.current";
const $ = (id) => document.getElementById(id);

let convs = [], current = null, abort = null;

function load() {
  try {
    const v = JSON.parse(localStorage.getItem(STORE) || "[]");
    convs = Array.isArray(v) ? v.filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages)) : [];
  } catch (e) {
    convs = []; // a damaged store starts afresh rather than breaking the page
  }
  current = convs.find((c) => c.id === localStorage.getItem(CURRENT)) || null;
  if (!current) newConv();
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(convs));
    localStorage.setItem(CURRENT, current.id);
  } catch (e) { /* storage full or disabled: the chat still works */ }
}

function newConv() {
  current = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat",
              system: $("system").value, messages: [] };
  convs.unshift(current);
}

function fillList() {
  const sel = $("conv-list");
  sel.replaceChildren(...convs.map((c) => {
    const o = document.createElement("option");
    o.value = c.id;
    o.textContent = c.title || "chat";
    return o;
  }));
  sel.value = current.id;
}

function fmtStats(s) {
  if (!s) return "";
  const parts = [s.tokens + " tokens"];
  if (s.tps !== null && s.tps !== undefined) parts.push(s.tps.toFixed(1) + " tok/s");
  if (s.ttft !== null && s.ttft !== undefined) parts.push("TTFT " + Math.round(s.ttft) + " ms");
  if (s.prompt !== undefined) parts.push("prompt " + s.prompt + " (" + s.cached + " cached)");
  if (s.stopped) parts.push("stopped");
  if (s.finish && s.finish !== "stop") parts.push("finish: " + s.finish);
  return parts.join(" · ");
}

function messageEl(m) {
  const el = document.createElement("div");
  el.className = "msg " + m.role + (m.error ? " error" : "");
  const body = document.createElement("div");
  body.className = "body";
  el.appendChild(body);
  if (m.role === "assistant") {
    el.dataset.testid = "assistant-message";
    const st = document.createElement("div");
    st.className = "stats";
    st.textContent = fmtStats(m.stats);
    el.appendChild(st);
    if (m.stats) el.dataset.cachedTokens = String(m.stats.cached ?? "");
    renderMarkdown(body, m.content);
  } else {
    body.textContent = m.content;
  }
  return el;
}

function showConv() {
  $("system").value = current.system || "";
  $("messages").replaceChildren(...current.messages.map(messageEl));
  fillList();
  scrollDown();
}

function scrollDown() { const m = $("messages"); m.scrollTop = m.scrollHeight; }

function busy(on) {
  $("send").disabled = on;
  $("stop").disabled = !on;
  $("new-conv").disabled = on;
  $("conv-list").disabled = on;
  $("del-conv").disabled = on;
}

function numberIn(id, lo, hi, dflt) {
  const v = Number($(id).value);
  return Number.isFinite(v) && v >= lo && v <= hi ? v : dflt;
}

// Reads an SSE body, calling onData with each parsed "data:" JSON object.
async function readSSE(res, onData) {
  const reader = res.body.getReader(), dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of ev.split("\n")) {
        if (!line.startsWith("data:")) continue; // comments (keep-alives) and other fields
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        onData(JSON.parse(data));
      }
    }
  }
}

// Decode tokens/s between the first and last token; when the answer came in
// one burst (a fast model: the server gathers ready events into one write)
// that span says nothing, so the whole request's time is used instead.
function rate(tokens, t0, tFirst, tLast) {
  if (tFirst === null || tokens < 1) return null;
  if (tokens > 1 && tLast - tFirst >= 100) return (tokens - 1) / ((tLast - tFirst) / 1000);
  return tLast > t0 ? tokens / ((tLast - t0) / 1000) : null;
}

async function send(text) {
  if (!text.trim() || abort) return;
  current.system = $("system").value;
  current.messages.push({ role: "user", content: text });
  if (current.title === "New chat") current.title = text.slice(0, 40);
  const answer = { role: "assistant", content: "", stats: null };
  const userEl = messageEl(current.messages[current.messages.length - 1]);
  const el = messageEl(answer);
  $("messages").append(userEl, el);
  fillList();
  scrollDown();

  const msgs = [];
  if (current.system.trim()) msgs.push({ role: "system", content: current.system });
  for (const m of current.messages) if (!m.error) msgs.push({ role: m.role, content: m.content });
  const body = { messages: msgs, stream: true, stream_options: { include_usage: true },
                 temperature: numberIn("temperature", 0, 2, 0.7), max_tokens: Math.round(numberIn("max-tokens", 1, 100000, 256)) };

  abort = new AbortController();
  busy(true);
  const t0 = performance.now();
  let tFirst = null, tLast = null, deltas = 0, usage = null, finish = null, stopped = false, pending = false;
  const bodyEl = el.querySelector(".body");
  const paint = () => { pending = false; renderMarkdown(bodyEl, answer.content); scrollDown(); };
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(body), signal: abort.signal,
    });
    if (!res.ok) throw new Error(await errorText(res));
    await readSSE(res, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message || "the server reported an error");
      if (chunk.usage) usage = chunk.usage;
      const c = chunk.choices && chunk.choices[0];
      if (!c) return;
      if (c.finish_reason) finish = c.finish_reason;
      const d = c.delta && c.delta.content;
      if (typeof d === "string" && d.length) {
        tLast = performance.now();
        if (tFirst === null) tFirst = tLast;
        deltas++;
        el.dataset.deltas = String(deltas);
        answer.content += d;
        if (!pending) { pending = true; requestAnimationFrame(paint); }
      }
    });
  } catch (e) {
    if (e.name === "AbortError") stopped = true;
    else { answer.error = true; answer.content += (answer.content ? "\n\n" : "") + "Error: " + e.message; el.classList.add("error"); }
  }
  const tokens = usage ? usage.completion_tokens : deltas;
  answer.stats = {
    tokens,
    tps: rate(tokens, t0, tFirst, tLast),
    ttft: tFirst !== null ? tFirst - t0 : null,
    finish, stopped,
  };
  if (usage) {
    answer.stats.prompt = usage.prompt_tokens;
    answer.stats.cached = (usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens) || 0;
    el.dataset.cachedTokens = String(answer.stats.cached);
  }
  paint();
  el.querySelector(".stats").textContent = fmtStats(answer.stats);
  el.dataset.done = "true";
  current.messages.push(answer);
  save();
  abort = null;
  busy(false);
}

export function initChat() {
  load();
  showConv();
  $("chat-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("input").value;
    if (!t.trim() || abort) return;
    $("input").value = "";
    send(t);
  });
  $("input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("chat-form").requestSubmit(); }
  });
  $("stop").addEventListener("click", () => abort && abort.abort());
  $("new-conv").addEventListener("click", () => { newConv(); save(); showConv(); });
  $("del-conv").addEventListener("click", () => {
    convs = convs.filter((c) => c !== current);
    current = convs[0] || null;
    if (!current) newConv();
    save();
    showConv();
  });
  $("conv-list").addEventListener("change", (ev) => {
    current = convs.find((c) => c.id === ev.target.value) || current;
    save();
    showConv();
  });
  $("system").addEventListener("change", () => { current.system = $("system").value; save(); });
}
