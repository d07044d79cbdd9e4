// The live page: polls history.json once a second and draws each model's
// charts as SVG. No libraries, no build step.
"use strict";

const W = 420, H = 170, M = { l: 46, r: 16, t: 8, b: 28 };
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

function esc(s) {
  return String(s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// niceStep is the smallest 1, 2 or 5 times a power of ten at least v.
function niceStep(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v - 1e-9) return m * p;
  return 10 * p;
}

function tick(v) {
  return Number.isInteger(Math.round(v * 1e6) / 1e6) ? String(Math.round(v)) : fmt(v);
}

function fmt(v) {
  if (v === null || v === undefined || !isFinite(v)) return "-";
  const a = Math.abs(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

// chart draws series [{name, color, pts: [[x, y]], dots}] on fixed x range
// [x0, x1]; y from 0 to the data's nice maximum (or yMax).
function chart(id, series, x0, x1, xLabel, yMax) {
  let ymax = yMax || 0;
  let n = 0;
  for (const s of series) for (const p of s.pts) if (p[1] !== null && isFinite(p[1])) { ymax = Math.max(ymax, p[1]); n++; }
  ymax = niceMax(ymax);
  const iw = W - M.l - M.r, ih = H - M.t - M.b;
  const X = x => M.l + (x - x0) / (x1 - x0 || 1) * iw;
  const Y = y => M.t + ih - y / ymax * ih;
  let g = "";
  for (let i = 0; i <= 4; i++) {
    const y = ymax * i / 4;
    g += `<line class="grid-line" x1="${M.l}" x2="${W - M.r}" y1="${Y(y)}" y2="${Y(y)}"/>` +
      `<text x="${M.l - 4}" y="${Y(y) + 4}" text-anchor="end">${tick(y)}</text>`;
  }
  const step = niceStep((x1 - x0) / 5 || 1);
  for (let x = Math.ceil(x0 / step) * step; x <= x1 + 1e-9; x += step) {
    g += `<text x="${X(x)}" y="${H - 12}" text-anchor="middle">${tick(x)}</text>`;
  }
  g += `<text x="${M.l + iw / 2}" y="${H - 1}" text-anchor="middle">${esc(xLabel)}</text>`;
  g += `<line class="axis" x1="${M.l}" x2="${M.l}" y1="${M.t}" y2="${M.t + ih}"/>` +
    `<line class="axis" x1="${M.l}" x2="${W - M.r}" y1="${M.t + ih}" y2="${M.t + ih}"/>`;
  for (const s of series) {
    if (s.dots) {
      for (const p of s.pts) if (p[1] !== null) g += `<circle cx="${X(p[0]).toFixed(1)}" cy="${Y(p[1]).toFixed(1)}" r="2.2" fill="${s.color}" fill-opacity="0.5"/>`;
      continue;
    }
    // Gaps (null) break the line: a second without data draws nothing.
    let d = "", pen = false;
    for (const p of s.pts) {
      if (p[1] === null || !isFinite(p[1])) { pen = false; continue; }
      d += (pen ? "L" : "M") + X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1);
      pen = true;
    }
    if (d) g += `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="1.6"/>`;
  }
  const legend = series.filter(s => s.pts.some(p => p[1] !== null))
    .map(s => `<span><i style="background:${s.color}"></i>${esc(s.name)}</span>`).join("");
  return `<div class="legend">${legend}</div><svg data-chart="${id}" data-points="${n}" viewBox="0 0 ${W} ${H}">${g}</svg>`;
}

function card(title, note, body) {
  return `<div class="card"><h3>${esc(title)}</h3>${body}<div class="note">${note}</div></div>`;
}

function render(h) {
  const models = h.models || [];
  if (models.length === 0) return "<p>No batched model yet.</p>";
  let out = "";
  for (const m of models) {
    const pts = m.points || [];
    // Every time chart shares one x range: seconds before now, at least 60.
    const span = Math.max(60, pts.length ? h.now - pts[0].t : 0);
    const ago = p => p.t - h.now;
    const last = pts.length ? pts[pts.length - 1] : {};
    const xl = "seconds before now";
    const rate = chart("rate", [{ name: "arrivals/s", color: COLORS[0], pts: pts.map(p => [ago(p), p.rate_rps]) }], -span, 0, xl);
    const batch = chart("batch", [
      { name: "chosen batch size", color: COLORS[0], pts: pts.map(p => [ago(p), p.batch_size]) },
      { name: "rows per batch sent", color: COLORS[1], pts: pts.map(p => [ago(p), p.sent_batch]) },
    ], -span, 0, xl, m.max_batch_size);
    const lat = chart("latency", [
      { name: "p50", color: COLORS[2], pts: pts.map(p => [ago(p), p.p50_ms]) },
      { name: "p90", color: COLORS[4], pts: pts.map(p => [ago(p), p.p90_ms]) },
      { name: "p99", color: COLORS[1], pts: pts.map(p => [ago(p), p.p99_ms]) },
    ], -span, 0, xl);
    const hasEnergy = pts.some(p => p.requests_per_joule !== null);
    const rpj = chart("rpj", [{ name: "requests/J", color: COLORS[3], pts: pts.map(p => [ago(p), p.requests_per_joule]) }], -span, 0, xl);
    const bmax = Math.max(m.max_batch_size || 1, ...(m.batches || []).map(b => b.rows));
    const fitLine = [[0, m.tau0_ms], [bmax, m.alpha_ms * bmax + m.tau0_ms]];
    const fit = chart("fit", [
      { name: "observed batches", color: COLORS[0], dots: true, pts: (m.batches || []).map(b => [b.rows, b.latency_ms]) },
      { name: "fit tau(b)", color: COLORS[1], pts: fitLine },
    ], 0, bmax, "batch size b (rows)");
    out += `<h2 data-model="${esc(m.model)}">${esc(m.model)} <small>policy ${esc(m.policy)}</small></h2><div class="grid">` +
      card("Arrival rate (requests/s)", `now ${fmt(last.rate_rps)}/s, as the monitor counted its last window`, rate) +
      card("Batch size (rows)", `chosen ${fmt(last.batch_size)}, sent ${fmt(last.sent_batch)} per batch in the last second; max ${m.max_batch_size}`, batch) +
      card("Latency, end to end (ms)", `last second: p50 ${fmt(last.p50_ms)}, p90 ${fmt(last.p90_ms)}, p99 ${fmt(last.p99_ms)} ms`, lat) +
      card("Requests per joule", hasEnergy ? `now ${fmt(last.requests_per_joule)} over the meter's shortest window` : "no figure yet: no energy measured for this model (or power.source none)", rpj) +
      card("Batch latency tau(b) and its fit (ms)", `tau(b) = ${fmt(m.alpha_ms)}·b + ${fmt(m.tau0_ms)} ms, R² ${fmt(m.r2)}, from ${(m.batches || []).length} recent batches`, fit) +
      `</div>`;
  }
  return out;
}

async function refresh() {
  try {
    const res = await fetch("history.json", { cache: "no-store" });
    if (!res.ok) throw new Error(res.status + " " + res.statusText);
    const h = await res.json();
    document.getElementById("models").innerHTML = render(h);
    document.getElementById("updated").textContent = new Date(h.now * 1000).toLocaleTimeString();
    document.getElementById("updated").dataset.now = h.now;
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "(update failed: " + e.message + ")";
  }
}

refresh();
setInterval(refresh, 1000);
