// The live page: polls history.json once a second and draws each model's
// charts as SVG. No libraries, no build step.
"use strict";

const W = 420, H = 178, M = { l: 46, r: 16, t: 8, b: 36 };
// Okabe-Ito tones, as lab/plot's palette: told apart by colour-blind eyes too.
const COLORS = ["#0072B2", "#E31A1C", "#009E73", "#CC79A7", "#E69F00", "#000000"];

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

// chart draws series [{name, color, pts: [[x, y]], dots, dashed}] on the
// x range [x0, x1]; y from 0 to the data's nice maximum (or yMax).
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
    g += `<text x="${X(x)}" y="${H - M.b + 14}" text-anchor="middle">${tick(x)}</text>`;
  }
  g += `<text x="${M.l + iw / 2}" y="${H - 3}" text-anchor="middle">${esc(xLabel)}</text>`;
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
    const dash = s.dashed ? ` stroke-dasharray="5 3"` : "";
    if (d) g += `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="1.8"${dash}/>`;
  }
  const legend = series.filter(s => s.pts.some(p => p[1] !== null))
    .map(s => `<span><i class="${s.dots ? "dot" : s.dashed ? "dash" : ""}" style="background:${s.color};color:${s.color}"></i>${esc(s.name)}</span>`).join("");
  return `<div class="legend">${legend}</div><svg data-chart="${id}" data-points="${n}" data-x0="${x0}" data-x1="${x1}" viewBox="0 0 ${W} ${H}">${g}</svg>`;
}

function card(title, note, body) {
  return `<div class="card"><h3>${esc(title)}</h3>${body}<div class="note">${note}</div></div>`;
}

// timeSpan is the time charts' width in seconds: the history there is,
// rounded up to a nice step, at least 10 s, so a short run fills the chart
// rather than sitting at the right edge of a fixed ten minutes.
function timeSpan(h, pts) {
  const have = pts.length ? h.now - pts[0].t + (h.interval_seconds || 1) : 0;
  if (have <= 10) return 10;
  const step = niceStep(have / 5);
  return Math.ceil(have / step - 1e-9) * step;
}

function pct(v) {
  return (v >= 1 ? "+" : "") + fmt(100 * (v - 1)) + "%";
}

// health says whether the model is failing upstream, why, and what the
// proxy's last probe of it found.
function health(m) {
  const h = m.health || {};
  const p = h.last_probe;
  const probe = p ? `; last probe ${new Date(p.at).toLocaleTimeString()}: ${esc(p.outcome)}` +
    (p.detail ? ` (${esc(p.detail)})` : "") + `, ${fmt(p.took_ms)} ms` : "";
  const state = h.failing ? `<b class="failing">failing</b>: ${esc(h.reason)}` : "healthy";
  return `<p class="health" data-failing="${h.failing ? 1 : 0}">upstream: ${state}${probe}</p>`;
}

// energy says whether the meter measures and, for a policy that weighs
// energy, what its plan optimises: without an energy figure the budget
// policy optimises GPU-seconds, not joules, and the page says so.
function energyState(m) {
  const measured = !m.energy_unavailable;
  const state = measured ? "measured by the meter" : `<b class="unmeasured">not measured</b> (${esc(m.energy_unavailable)})`;
  const objective = m.objective ? `; the ${esc(m.policy)} policy optimises <span data-k="objective">${esc(m.objective)}</span>` : "";
  return `<p class="energy" data-measured="${measured ? 1 : 0}">energy: ${state}${objective}</p>`;
}

// phase says where a policy that earns its holds stands and why.
function phase(m) {
  if (!m.phase) return "";
  return `<p class="health phase" data-phase="${esc(m.phase)}">phase: <b>${esc(m.phase)}</b>` +
    (m.phase_reason ? ` (${esc(m.phase_reason)})` : "") + `</p>`;
}

// headline is a model's row of the figures a person came for.
function headline(m) {
  const hl = m.headline || {};
  const cell = (k, label, value, sub) =>
    `<div class="hl" data-k="${k}"><div class="hl-label">${label}</div><div class="hl-value">${value}</div><div class="hl-sub">${sub}</div></div>`;
  const span = hl.seconds > 0 ? `last ${fmt(hl.seconds)} s` : "no span yet";
  let energy = cell("rpj", "requests per joule", hl.requests_per_joule != null ? fmt(hl.requests_per_joule) : "-",
    hl.requests_per_joule != null ? "measured by the meter" : m.energy_unavailable ? "energy not measured" : "no figure yet");
  let gain = cell("gain", "vs ad-hoc, modelled", hl.gain_vs_adhoc != null ? pct(hl.gain_vs_adhoc) : "-",
    hl.gain_vs_adhoc != null ? `requests per joule, modelled from zeta(b), not measured against ad-hoc: ${fmt(hl.batched_mj_per_request)} mJ vs ${fmt(hl.adhoc_mj_per_request)} mJ a request (ad-hoc's batch ${fmt(hl.adhoc_batch)})`
      : "needs the energy line zeta(b), learnt from the meter (not yet: /status energy_fit says why)");
  return `<div class="headline" data-model="${esc(m.model)}">` + energy + gain +
    cell("p50", "p50 latency", hl.p50_ms != null ? fmt(hl.p50_ms) + " ms" : "-", span + ", end to end") +
    cell("p99", "p99 latency", hl.p99_ms != null ? fmt(hl.p99_ms) + " ms" : "-", span + ", end to end" +
      (m.planned_p99_ms != null ? `; the plan predicts ${fmt(m.planned_p99_ms)} ms inside the proxy` : "")) +
    cell("batch", "batch size", hl.sent_batch != null ? fmt(hl.sent_batch) : "-", `rows per batch sent; max ${m.max_batch_size}`) +
    cell("rho", "load rho", hl.rho != null ? fmt(hl.rho) : "-", `${fmt(hl.sent_rps)} req/s sent; 1 = saturated`) +
    `</div><p class="caption">Measured: requests per joule (the power meter, its shortest window), latency and batch size (the proxy). ` +
    `Modelled: the gain over ad-hoc, which sends everything waiting whenever the device is free ` +
    (hl.adhoc_batch != null ? `(at this load and on the fitted line, batches of ${fmt(hl.adhoc_batch)}) ` : ``) +
    `and so spends zeta(b)/b at its batch size, against zeta(b)/b at the batch size sent, from the energy line zeta(b)` +
    (m.beta_mj != null ? ` = ${fmt(m.beta_mj)}·b + ${fmt(m.zeta0_mj)} mJ` : ` (not known yet for this model)`) +
    `; and rho = sent rate × tau(b)/b per instance (${m.instances || 1}).</p>`;
}

// fitChart draws the round trips the proxy measured and the fitted line,
// saying which is which and what the line was fitted on.
function fitChart(m) {
  const bmax = Math.max(m.max_batch_size || 1, ...(m.batches || []).map(b => b.rows));
  const line = o => [[0, m.tau0_ms + o], [bmax, m.alpha_ms * bmax + m.tau0_ms + o]];
  const server = m.fit_source === "server statistics";
  const series = [
    { name: "round trips measured by the proxy", color: COLORS[0], dots: true, pts: (m.batches || []).map(b => [b.rows, b.latency_ms]) },
    { name: server ? "tau(b) fitted on Triton's statistics" : "tau(b) fitted on the round trips", color: COLORS[1], pts: line(0) },
  ];
  if (server && m.overhead_ms != null) {
    series.push({ name: `tau(b) + ${fmt(m.overhead_ms)} ms overhead`, color: COLORS[1], dashed: true, pts: line(m.overhead_ms) });
  }
  const n = (m.batches || []).length;
  const note = `tau(b) = ${fmt(m.alpha_ms)}·b + ${fmt(m.tau0_ms)} ms, R² ${fmt(m.r2)}. ` + (server
    ? `The line is fitted on Triton's own per-batch-size compute times (its statistics), free of network and HTTP; ` +
      `the dots are ${n} batch round trips the proxy timed (the last it learnt from before Triton's statistics took over), ` +
      `so they sit above the line by the overhead` + (m.overhead_ms != null ? ` (${fmt(m.overhead_ms)} ms on average: network, HTTP, the server's queue; dashed)` : "") + "."
    : `The line is fitted on the ${n} batch round trips the proxy timed (the dots): the upstream gives no batch statistics.`);
  return card("Batch latency tau(b): round trips and fit (ms)", note, chart("fit", series, 0, bmax, "batch size b (rows)"));
}

// sourcesCard draws the model's callers by kind over time and says what
// they are now: how many, closed-loop with their think time or open-loop,
// busy or idle.
function sourcesCard(m, pts, span, ago, xl) {
  const s = m.sources || {};
  const callers = chart("sources", [
    { name: "closed-loop", color: COLORS[0], pts: pts.map(p => [ago(p), p.closed_loop]) },
    { name: "open-loop", color: COLORS[1], pts: pts.map(p => [ago(p), p.open_loop]) },
    { name: "not learnt yet", color: COLORS[5], pts: pts.map(p => [ago(p), p.unknown_sources]) },
  ], -span, 0, xl);
  const think = s.think_ms != null ? ` (think time ${fmt(s.think_ms)} ms, answer to next request)` : "";
  // Each connection of a pool under an open stream looks closed-loop by
  // its own gaps; only the feedback score tells the pool apart, so until
  // it is known a closed-loop count is what the gaps say, and no more.
  const tentative = !s.lone && s.feedback == null && s.closed_loop > 0 ?
    ` by their own gaps (<span data-k="tentative">not yet told from a pool of connections carrying an open stream</span>)` : "";
  let note = `now <span data-k="population">${s.population || 0}</span>: ${s.closed_loop || 0} closed-loop${tentative}${think}, ` +
    `${s.open_loop || 0} open-loop, ${s.unknown || 0} not learnt yet; ${s.busy || 0} with a call in the proxy, ${s.idle || 0} idle` +
    (s.concurrency > s.population ? `; up to ${s.concurrency} calls at once over them (streams sharing a connection)` : "") + `. ` +
    `A closed-loop caller sends its next request only after its answer; an open-loop one sends on its own schedule or several at once.` +
    (s.feedback != null ? ` Feedback <span data-k="feedback">${fmt(s.feedback)}</span>: how many more idle callers a request finds than the average ` +
      `(about 1 for a closed loop, about 0 for open arrivals over a pool of connections)` +
      (s.feedback < 0.25 ? `; below 0.25: the arrivals do not follow the answers, so the connections count, and are planned, as open-loop.` : `.`) : "");
  if (!s.known) note += " Some calls came without a connection the proxy can name (or none came yet): these are not all the callers.";
  return card("Callers (connections active in the last second)", note, callers);
}

// chooser lists the models, most active first, as links to their section.
function chooser(models) {
  if (models.length < 2) return "";
  return `<nav id="chooser">Models, most active first: ` + models.map(m =>
    `<a href="#m-${encodeURIComponent(m.model)}">${esc(m.model)} <small>${fmt((m.headline || {}).sent_rps)}/s</small></a>`).join(" · ") + `</nav>`;
}

// modes lists every model the proxy knows with what it does with its
// calls, batched or passed through, and why.
function modes(h) {
  const ms = h.modes || [];
  if (ms.length === 0) return "";
  return `<table id="modes"><caption>Every model the proxy knows and what it does with its inference calls</caption>` +
    `<tr><th>model</th><th>mode</th><th>why</th></tr>` +
    ms.map(m => `<tr data-model="${esc(m.model)}" data-mode="${esc(m.mode)}"><td>${esc(m.model)}</td><td>${esc(m.mode)}</td>` +
      `<td>${esc(m.reason || "")}</td></tr>`).join("") + `</table>`;
}

function render(h) {
  const models = h.models || [];
  if (models.length === 0) return modes(h) + "<p>No batched model yet.</p>";
  let out = modes(h) + chooser(models);
  for (const m of models) {
    const pts = m.points || [];
    const span = timeSpan(h, pts);
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
    out += `<h2 id="m-${esc(m.model)}" data-model="${esc(m.model)}">${esc(m.model)} <small>policy ${esc(m.policy)}</small></h2>` +
      health(m) + energyState(m) + phase(m) + headline(m) + `<div class="grid">` +
      card("Arrival rate (requests/s)", `now ${fmt(last.rate_rps)}/s, as the monitor counted its last window`, rate) +
      card("Batch size (rows)", `chosen ${fmt(last.batch_size)}, sent ${fmt(last.sent_batch)} per batch in the last second; max ${m.max_batch_size}`, batch) +
      card("Latency, end to end (ms)", `last second: p50 ${fmt(last.p50_ms)}, p90 ${fmt(last.p90_ms)}, p99 ${fmt(last.p99_ms)} ms`, lat) +
      card("Requests per joule", hasEnergy ? `now ${fmt(last.requests_per_joule)} over the meter's shortest window` :
        m.energy_unavailable ? "no figure: energy not measured" : "no figure yet: no energy attributed to this model", rpj) +
      sourcesCard(m, pts, span, ago, xl) +
      fitChart(m) +
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
