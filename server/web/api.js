// api.js - talking to the server: the API key (kept in localStorage and
// sent as a Bearer token) and the status line that reports failures.
const KEY = "pagellm.apiKey";

export function apiKey() { return localStorage.getItem(KEY) || ""; }
export function setApiKey(k) { k ? localStorage.setItem(KEY, k) : localStorage.removeItem(KEY); }

export function headers(extra) {
  const h = Object.assign({}, extra || {});
  const k = apiKey();
  if (k) h.Authorization = "Bearer " + k;
  return h;
}

// The message of an OpenAI-shaped error body, else the status line.
export async function errorText(res) {
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) return res.status + ": " + j.error.message;
  } catch (e) { /* not JSON */ }
  return res.status + " " + res.statusText;
}

const statusEl = () => document.getElementById("status");
const problems = new Map(); // source -> message

// Each poller reports its own trouble; the line shows what is wrong now.
export function report(source, message) {
  if (message) problems.set(source, message); else problems.delete(source);
  const el = statusEl();
  if (!el) return;
  const all = [...problems.values()];
  el.textContent = all.join(" · ");
  el.classList.toggle("error", all.length > 0);
}

// GET path as JSON or text; null (and a status line) on failure. A 401
// asks for the key instead of failing loudly.
export async function get(path, as) {
  let res;
  try {
    res = await fetch(path, { headers: headers(), cache: "no-store" });
  } catch (e) {
    report(path, path + ": server unreachable");
    return null;
  }
  if (!res.ok) {
    report(path, res.status === 401 ? "the server wants an API key (top right)" : path + ": " + (await errorText(res)));
    return null;
  }
  report(path, null);
  return as === "text" ? res.text() : res.json();
}
