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
    whatifModels(h.models || []);
    document.getElementById("updated").textContent = new Date(h.now * 1000).toLocaleTimeString();
    document.getElementById("updated").dataset.now = h.now;
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "(update failed: " + e.message + ")";
  }
}


// The what-if: asks ../whatif for the chosen model (202 while it runs:
// asks again as Retry-After says) and draws the trade-off of every setting
// replayed, a table of them with the command that applies each, and what
// the replay assumed.
const whatif = { asked: false, report: null, timer: null, models: [] };

function whatifModels(models) {
  const sel = document.getElementById("wi-model");
  const names = models.map(m => m.model);
  if (names.join() === whatif.models.join()) return;
  const keep = sel.value;
  whatif.models = names;
  sel.innerHTML = names.map(n => `<option>${esc(n)}</option>`).join("");
  if (names.includes(keep)) sel.value = keep;
  if (!whatif.asked && names.length) {
    whatif.asked = true;
    askWhatif();
  }
}

async function askWhatif() {
  clearTimeout(whatif.timer);
  const out = document.getElementById("wi-out");
  const model = document.getElementById("wi-model").value;
  if (!model) return;
  const q = new URLSearchParams({ model, minutes: document.getElementById("wi-minutes").value || "5", wait: "15s" });
  const p99 = document.getElementById("wi-p99").value;
  if (p99 > 0) q.set("p99_ms", p99);
  try {
    const res = await fetch("../whatif?" + q, { cache: "no-store" });
    const body = await res.json().catch(() => ({}));
    if (res.status === 202 || res.status === 429) {
      const wait = Number(res.headers.get("Retry-After") || 2);
      out.innerHTML = `<p data-k="wi-running">` + (res.status === 202
        ? `Replaying ${esc(model)}: ${body.replayed} of ${body.settings} settings, ${fmt(body.seconds)} s so far…`
        : `Another what-if is running; asking again in ${wait} s…`) + `</p>`;
      whatif.timer = setTimeout(askWhatif, wait * 1000);
      return;
    }
    if (res.status === 404 && !body.error) {
      out.innerHTML = `<p>No what-if on this proxy (whatif.arrivals is 0).</p>`;
      return;
    }
    if (!res.ok) throw new Error(body.error || res.status + " " + res.statusText);
    whatif.report = body;
    out.innerHTML = renderWhatif(body);
  } catch (e) {
    out.innerHTML = `<p id="wi-error" class="failing">What-if failed: ${esc(e.message)}</p>`;
  }
}

function pctOf(v) { return v == null ? "-" : fmt(100 * v) + "%"; }
function times(v) { return v == null ? "-" : fmt(v) + "x"; }

function renderWhatif(r) {
  const arr = r.arrivals || {};
  let h = `<p class="sub" data-k="wi-window">${esc(r.model)}: ${fmt(r.seconds)} s of traffic to ${new Date(r.to).toLocaleTimeString()}, ` +
    `${arr.total} calls (${arr.open_loop} open-loop, ${arr.closed_loop + arr.lone} closed-loop, ${arr.unknown + arr.unnamed} not learnt or unnamed).</p>`;
  if (!r.enough) return h + `<p data-k="wi-reason">${esc(r.reason)}</p>`;
  const l = r.lived || {}, c = r.check_vs_lived || {};
  h += `<p data-k="wi-lived">Lived: mean ${fmt(l.mean_ms)} ms, p99 ${fmt(l.p99_ms)} ms, ${fmt(l.requests_per_joule)} requests/J, GPU busy ${pctOf(l.busy_share)}. ` +
    `The replay of the setting in force over what was lived: mean ${times(c.mean)}, p99 ${times(c.p99)}, requests/J ${times(c.requests_per_joule)} ` +
    `(the replay's own error on these minutes).</p>`;
  const y = document.getElementById("wi-y").value;
  h += whatifPlot(r, y);
  h += `<p data-k="wi-recommendation"><b>Recommended:</b> ${esc(r.recommendation)}</p>`;
  h += whatifTable(r);
  h += `<p><b>What the replay assumes</b></p><ul class="wi-assume">` + (r.assumptions || []).map(a => `<li>${esc(a)}</li>`).join("") + `</ul>`;
  return h;
}

// whatifPlot draws each setting's latency (p99 or mean) against its
// efficiency: requests per joule, or the GPU's idle share without an
// energy line. The front is joined by a line, the setting in force is a
// square, the recommended one ringed.
function whatifPlot(r, y) {
  const rpj = r.efficiency === "requests_per_joule";
  const xOf = p => rpj ? p.requests_per_joule : 1 - p.busy_share;
  const yOf = p => y === "mean" ? p.mean_ms : p.p99_ms;
  const pts = (r.points || []).filter(p => !p.error && xOf(p) != null);
  if (!pts.length) return "";
  const Wp = 640, Hp = 300, m = { l: 52, r: 16, t: 10, b: 40 };
  let x0 = Math.min(...pts.map(xOf)), x1 = Math.max(...pts.map(xOf));
  const pad = (x1 - x0) * 0.08 || Math.abs(x0) * 0.05 || 1;
  x0 -= pad; x1 += pad;
  const ymax = niceMax(Math.max(...pts.map(yOf)) * 1.05);
  const iw = Wp - m.l - m.r, ih = Hp - m.t - m.b;
  const X = v => m.l + (v - x0) / (x1 - x0) * iw, Y = v => m.t + ih - v / ymax * ih;
  let g = "";
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    g += `<line class="grid-line" x1="${m.l}" x2="${Wp - m.r}" y1="${Y(v)}" y2="${Y(v)}"/><text x="${m.l - 4}" y="${Y(v) + 4}" text-anchor="end">${tick(v)}</text>`;
  }
  for (let i = 0; i <= 4; i++) {
    const v = x0 + (x1 - x0) * i / 4;
    g += `<text x="${X(v)}" y="${Hp - m.b + 14}" text-anchor="middle">${rpj ? fmt(v) : pctOf(v)}</text>`;
  }
  g += `<text x="${m.l + iw / 2}" y="${Hp - 4}" text-anchor="middle">${rpj ? "requests per joule (more is better)" : "GPU idle share (more is better)"}</text>`;
  g += `<text x="12" y="${m.t + ih / 2}" text-anchor="middle" transform="rotate(-90 12 ${m.t + ih / 2})">${y} latency, ms</text>`;
  g += `<line class="axis" x1="${m.l}" x2="${m.l}" y1="${m.t}" y2="${m.t + ih}"/><line class="axis" x1="${m.l}" x2="${Wp - m.r}" y1="${m.t + ih}" y2="${m.t + ih}"/>`;
  const front = pts.filter(p => p.front).sort((a, b) => xOf(a) - xOf(b));
  if (front.length > 1) {
    g += `<path data-k="wi-front" d="${front.map((p, i) => (i ? "L" : "M") + X(xOf(p)).toFixed(1) + "," + Y(yOf(p)).toFixed(1)).join("")}" fill="none" stroke="${COLORS[2]}" stroke-width="1.5" stroke-dasharray="4 3"/>`;
  }
  const rec = r.recommended >= 0 ? r.points[r.recommended] : null;
  for (const p of pts) {
    const cx = X(xOf(p)).toFixed(1), cy = Y(yOf(p)).toFixed(1);
    const tip = `<title>${esc(p.label)}: mean ${fmt(p.mean_ms)} ms, p99 ${fmt(p.p99_ms)} ms, ${rpj ? fmt(p.requests_per_joule) + " req/J" : pctOf(1 - p.busy_share) + " idle"}</title>`;
    const color = p.current ? COLORS[1] : p.front ? COLORS[2] : COLORS[0];
    g += p.current
      ? `<rect data-k="wi-current" x="${cx - 5}" y="${cy - 5}" width="10" height="10" fill="${color}">${tip}</rect>`
      : `<circle data-k="wi-point" data-front="${p.front ? 1 : 0}" cx="${cx}" cy="${cy}" r="4" fill="${color}" fill-opacity="0.8">${tip}</circle>`;
    if (p === rec) g += `<circle data-k="wi-recommended" cx="${cx}" cy="${cy}" r="9" fill="none" stroke="${COLORS[4]}" stroke-width="2"/>`;
    // The settings one would pick are named on the plot; the others in
    // their tooltip and the table.
    if (p.front || p.current) g += `<text x="${(+cx + 7).toFixed(1)}" y="${(+cy - 6).toFixed(1)}" style="font-size:9px">${esc(p.label)}</text>`;
  }
  const legend = `<div class="legend"><span><i class="dot" style="background:${COLORS[1]};border-radius:0"></i>in force</span>` +
    `<span><i class="dot" style="background:${COLORS[2]}"></i>on the front</span><span><i class="dot" style="background:${COLORS[0]}"></i>beaten by another</span>` +
    `<span><i class="dot" style="background:none;border:2px solid ${COLORS[4]}"></i>recommended</span></div>`;
  return `<div class="wi-plot">${legend}<svg data-chart="whatif" data-points="${pts.length}" viewBox="0 0 ${Wp} ${Hp}">${g}</svg></div>`;
}

function whatifTable(r) {
  const rpj = r.efficiency === "requests_per_joule";
  let h = `<table class="wi"><tr><th>setting</th><th>mean ms</th><th>p99 ms</th><th>batch</th><th>${rpj ? "req/J" : "idle"}</th><th>GPU busy</th>` +
    `<th>mean vs ad-hoc</th><th>p99 vs ad-hoc</th><th>${rpj ? "req/J vs ad-hoc" : ""}</th><th>front</th><th>apply (PUT /policy; the token in $RATEBATCH_ADMIN_TOKEN)</th></tr>`;
  (r.points || []).forEach((p, i) => {
    const cls = [p.current ? "current" : "", i === r.recommended ? "recommended" : ""].join(" ").trim();
    if (p.error) {
      h += `<tr class="${cls}"><td>${esc(p.label)}</td><td colspan="10">not replayed: ${esc(p.error)}</td></tr>`;
      return;
    }
    const v = p.vs_adhoc || {};
    h += `<tr class="${cls}" data-k="wi-row"><td>${esc(p.label)}${i === r.recommended ? " <b>(recommended)</b>" : ""}</td><td>${fmt(p.mean_ms)}</td><td>${fmt(p.p99_ms)}</td>` +
      `<td>${fmt(p.mean_batch)}</td><td>${rpj ? fmt(p.requests_per_joule) : pctOf(1 - p.busy_share)}</td><td>${pctOf(p.busy_share)}</td>` +
      `<td>${times(v.mean)}</td><td>${times(v.p99)}</td><td>${rpj && v.requests_per_joule != null ? pct(v.requests_per_joule) : ""}</td>` +
      `<td>${p.front ? "yes" : ""}</td><td>${p.apply ? `<code data-k="wi-apply">${esc(p.apply)}</code>` : p.current ? "in force" : ""}</td></tr>`;
  });
  return h + `</table>`;
}

document.getElementById("wi-form").addEventListener("submit", ev => { ev.preventDefault(); askWhatif(); });
document.getElementById("wi-y").addEventListener("change", () => {
  if (whatif.report && whatif.report.enough) document.getElementById("wi-out").innerHTML = renderWhatif(whatif.report);
});

refresh();
setInterval(refresh, 1000);
