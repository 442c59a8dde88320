// metrics.js - the engine panel: /metrics (Prometheus text) polled every
// second; the last five minutes of tokens/s, running and waiting requests,
// and mean time to first token and inter-token latency per interval
// (from the histograms' _sum and _count), as small SVG line charts.
import { get } from "./api.js";

export const METRICS_POLL_MS = 1000;
const KEEP = 300; // samples: five minutes at one a second
const SVG = "http://www.w3.org/2000/svg";

let last = null;
const series = { tps: [], running: [], waiting: [], ttft: [], itl: [] };

// name (with labels) -> value, for the lines we read.
export function parseProm(text) {
  const m = new Map();
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const sp = line.lastIndexOf(" ");
    if (sp <= 0) continue;
    const v = Number(line.slice(sp + 1));
    if (Number.isFinite(v)) m.set(line.slice(0, sp), v);
  }
  return m;
}

const charts = [
  { id: "tps", title: "tokens/s", unit: "", lines: ["tps"] },
  { id: "reqs", title: "running / waiting", unit: "", lines: ["running", "waiting"] },
  { id: "ttft", title: "time to first token", unit: " ms", lines: ["ttft"] },
  { id: "itl", title: "inter-token latency", unit: " ms", lines: ["itl"] },
];

function setup() {
  const box = document.getElementById("charts");
  box.replaceChildren(...charts.map((c) => {
    const d = document.createElement("div");
    d.className = "chart";
    d.dataset.chart = c.id;
    const h = document.createElement("h4");
    h.textContent = c.title + " ";
    h.appendChild(document.createElement("b"));
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 " + KEEP + " 100");
    svg.setAttribute("preserveAspectRatio", "none");
    c.lines.forEach((_, i) => {
      const p = document.createElementNS(SVG, "path");
      if (i) p.setAttribute("class", "second");
      svg.appendChild(p);
    });
    d.append(h, svg);
    return d;
  }));
}

function draw() {
  for (const c of charts) {
    const el = document.querySelector('[data-chart="' + c.id + '"]');
    if (!el) continue;
    let max = 0;
    for (const s of c.lines) for (const v of series[s]) if (v !== null && v > max) max = v;
    const paths = el.querySelectorAll("path");
    c.lines.forEach((s, i) => {
      // one line per run of known values: an interval without a figure is a gap, not a zero
      const pts = series[s], off = KEEP - pts.length;
      let d = "", pen = "M";
      pts.forEach((v, j) => {
        if (v === null) { pen = "M"; return; }
        d += pen + (off + j) + "," + (98 - (max ? 93 * v / max : 0)).toFixed(1) + " ";
        pen = "L";
      });
      paths[i].setAttribute("d", d.trim());
    });
    const now = c.lines.map((s) => { const a = series[s]; const v = a.length ? a[a.length - 1] : null; return v === null ? "–" : (+v.toFixed(1)) + c.unit; });
    el.querySelector("b").textContent = now.join(" / ") + (max ? " (max " + +max.toFixed(1) + c.unit + ")" : "");
  }
}

function push(name, v) {
  const a = series[name];
  a.push(typeof v === "number" && Number.isFinite(v) ? v : null); // a metric the server lacks is a gap
  if (a.length > KEEP) a.shift();
}

// Mean of a histogram over the interval, in ms (null when nothing was observed).
function meanMs(m, name) {
  const dn = m.get(name + "_count") - last.m.get(name + "_count");
  const ds = m.get(name + "_sum") - last.m.get(name + "_sum");
  return dn > 0 ? (1000 * ds) / dn : null;
}

export async function pollMetrics() {
  if (!document.getElementById("charts").children.length) setup();
  const text = await get("/metrics", "text");
  if (text === null) return;
  const m = parseProm(text), t = performance.now();
  if (last) {
    const dt = (t - last.t) / 1000;
    push("tps", dt > 0 ? Math.max(0, m.get("pagellm_generation_tokens_total") - last.m.get("pagellm_generation_tokens_total")) / dt : 0);
    push("running", m.get("pagellm_requests_running") ?? 0);
    push("waiting", m.get("pagellm_requests_waiting") ?? 0);
    push("ttft", meanMs(m, "pagellm_time_to_first_token_seconds"));
    push("itl", meanMs(m, "pagellm_inter_token_latency_seconds"));
    draw();
  }
  last = { m, t };
}
