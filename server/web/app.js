// app.js - starts the page: the API key form, the model's name, the chat
// panel, and the KV and metrics pollers (paused while the page is hidden,
// so a background tab costs the server nothing).
import { apiKey, setApiKey, get } from "./api.js";
import { initChat } from "./chat.js";
import { pollKV, KV_POLL_MS } from "./kv.js";
import { pollMetrics, METRICS_POLL_MS } from "./metrics.js";

// Runs f every ms milliseconds, never two at once, not while hidden.
function every(ms, f) {
  let running = false;
  const tick = async () => {
    if (running || document.hidden) return;
    running = true;
    try { await f(); } catch (e) { console.warn(e); } finally { running = false; }
  };
  tick();
  setInterval(tick, ms);
}

async function showModel() {
  const m = await get("/v1/models");
  if (m && m.data && m.data[0]) document.getElementById("model").textContent = m.data[0].id;
}

document.getElementById("api-key").value = apiKey();
document.getElementById("key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  setApiKey(document.getElementById("api-key").value.trim());
  showModel();
});
initChat();
showModel();
every(KV_POLL_MS, pollKV);
every(METRICS_POLL_MS, pollMetrics);
