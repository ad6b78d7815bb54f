// The Traffic chart of the LLM Quotas page: one model's last 5, 15 or 60 minutes as the engine
// recorded them (GET api/history?model=<model>), drawn with the vendored uPlot. Reads through
// quotas.js's api().
// Lines are each 10 s bucket's peak against the target, in % of it: the requests and tokens
// the sliding window held (against rpm and tpm) and the calls in flight (against max
// concurrency); the dashed line is the learned effective limit when it is below the target.
// Dots on the right axis count 429s and errors; a red vertical line marks a breaker opening.
"use strict";

(() => {
  const REFRESH_MS = 5000;
  const NAMES_EVERY = 6; // refresh the model list every 6th tick
  const HEIGHT = 280;
  const state = { model: null, minutes: 60, doc: null, chart: null, ticks: 0 };
  window.llmTraffic = state; // read by the browser test and handy in a console

  const $ = (id) => document.getElementById(id);
  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

  // The target in force at bucket i: the newest recorded at or before it, else the quota now.
  function targetsAt(doc, i) {
    const s = doc.series;
    for (let k = i; k >= 0; k -= 1) {
      if (s.rpm[k] !== null) {
        return { rpm: s.rpm[k], tpm: s.tpm[k], conc: s.max_concurrency[k] };
      }
    }
    const q = doc.quota || {};
    return { rpm: q.rpm ?? null, tpm: q.tpm ?? null, conc: q.max_concurrency ?? null };
  }

  const pct = (value, limit) => (value === null || value === undefined || !limit
    ? null : Math.round((1000 * value) / limit) / 10);
  const nz = (x) => (x ? x : null); // a count of 0 draws no dot

  // The chart's columns from the API's: x, then one array per series below.
  function columns(doc) {
    const s = doc.series;
    const data = [s.t, [], [], [], [], [], [], []];
    s.t.forEach((_, i) => {
      const t = targetsAt(doc, i);
      data[1].push(pct(s.requests[i], t.rpm));
      data[2].push(pct(s.tokens[i], t.tpm));
      data[3].push(pct(s.in_flight[i], t.conc));
      data[4].push(s.eff_rpm[i] === null ? null
        : Math.min(pct(s.eff_rpm[i], t.rpm), pct(s.eff_tpm[i], t.tpm)));
      data[5].push(t.rpm === null ? null : 100);
      data[6].push(nz(s.rate_limited[i]));
      data[7].push(nz(s.errors[i]));
    });
    return data;
  }

  // What the legend shows at bucket i: the absolute value against its target.
  function absolute(field, limitField) {
    return (u, v, si, i) => {
      const doc = state.doc;
      if (i === null || i === undefined || !doc) return "–";
      const value = doc.series[field][i];
      if (value === null) return "–";
      const limit = targetsAt(doc, i)[limitField];
      return `${value.toLocaleString()} / ${limit === null ? "?" : limit.toLocaleString()} (${v} %)`;
    };
  }

  function effectiveValue(u, v, si, i) {
    const doc = state.doc;
    if (i === null || i === undefined || !doc || doc.series.eff_rpm[i] === null) return "target";
    const s = doc.series;
    return `${s.eff_rpm[i]} rpm / ${s.eff_tpm[i].toLocaleString()} tpm / `
      + `${s.eff_max_concurrency[i]} conc (${v} %)`;
  }

  // Breaker openings: a red vertical line through the plot at each such bucket.
  function drawBreakers(u) {
    const doc = state.doc;
    if (!doc) return;
    const { ctx } = u;
    const { top, height } = u.bbox;
    ctx.save();
    ctx.strokeStyle = css("--bad") || "#e53e3e";
    ctx.lineWidth = 2 * devicePixelRatio;
    ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
    doc.series.breaker_opened.forEach((n, i) => {
      if (!n) return;
      const x = Math.round(u.valToPos(doc.series.t[i], "x", true));
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
    });
    ctx.restore();
  }

  function options(width) {
    const fg = css("--fg") || "#1a202c";
    const grid = css("--border") || "#e2e8f0";
    const axis = (extra) => ({ stroke: fg, grid: { stroke: grid, width: 1 },
                               ticks: { stroke: grid, width: 1 }, ...extra });
    const line = (label, color, value, extra = {}) => ({
      label, stroke: color, width: 2, value, spanGaps: false, ...extra });
    const dots = (label, color) => ({
      label, stroke: color, fill: color, scale: "n", paths: () => null,
      points: { show: true, size: 9, stroke: color, fill: color },
      value: (u, v) => (v ? String(v) : "0") });
    return {
      width, height: HEIGHT, class: "traffic-plot",
      cursor: { points: { size: 7 } },
      legend: { live: true },
      scales: {
        x: { time: true },
        y: { range: (u, min, max) => [0, Math.max(120, Math.ceil(((max || 0) * 1.1) / 10) * 10)] },
        n: { range: (u, min, max) => [0, Math.max(4, Math.ceil((max || 0) * 1.25))] },
      },
      axes: [
        axis({}),
        axis({ scale: "y", label: "% of target (window peak)", values: (u, vals) => vals.map((v) => `${v} %`) }),
        axis({ scale: "n", side: 1, label: "429s / errors", grid: { show: false } }),
      ],
      series: [
        { value: (u, v) => (v === null ? "–" : new Date(v * 1000).toLocaleTimeString()) },
        line("requests / rpm", css("--accent") || "#017cee", absolute("requests", "rpm")),
        line("tokens / tpm", "#805ad5", absolute("tokens", "tpm")),
        line("in flight / max concurrency", "#319795", absolute("in_flight", "conc")),
        line("effective limit", css("--warn") || "#dd6b20", effectiveValue, { dash: [6, 4] }),
        line("target", css("--muted") || "#718096", () => "100 %",
             { width: 1, dash: [2, 3], points: { show: false } }),
        dots("429s", css("--warn") || "#dd6b20"),
        dots("errors", css("--bad") || "#e53e3e"),
      ],
      hooks: { draw: [drawBreakers] },
    };
  }

  function summary(doc) {
    const t = doc.totals;
    const span = doc.span_ms >= 3_600_000 ? "last hour" : `last ${Math.round(doc.span_ms / 60_000)} min`;
    const plural = (n, one, many) => `${n.toLocaleString()} ${n === 1 ? one : many}`;
    return `${span}: ${plural(t.admitted, "admission", "admissions")} · `
      + `${plural(t.rate_limited, "429", "429s")} · ${plural(t.errors, "error", "errors")} · `
      + `${plural(t.breaker_opened, "breaker opening", "breaker openings")}`;
  }

  function draw(doc) {
    state.doc = doc;
    const box = $("traffic-chart");
    const data = columns(doc);
    if (!state.chart) {
      box.replaceChildren();
      state.chart = new uPlot(options(Math.max(320, box.clientWidth)), data, box);
    } else {
      state.chart.setData(data);
    }
    box.dataset.model = doc.model;
    box.dataset.buckets = String(doc.series.t.length);
    $("traffic-summary").textContent = summary(doc);
  }

  async function loadHistory() {
    if (!state.model) return;
    const model = state.model;
    // the list route answers for a model deleted meanwhile too (no quota, maybe no traffic),
    // where the model's own route would be a 404 in the console
    const { ok, status, body } = await api(
      `history?minutes=${state.minutes}&model=${encodeURIComponent(model)}`);
    if (model !== state.model) return; // the choice changed while it loaded
    if (!ok) {
      $("traffic-summary").textContent = `Could not load the traffic of ${model} (${status})`;
      return;
    }
    const found = body.models[model];
    if (!found.quota) state.ticks = -1; // deleted: read the model list again next tick
    draw({ model, now_ms: body.now_ms, bucket_ms: body.bucket_ms, span_ms: body.span_ms,
           ...found });
  }

  async function loadNames() {
    const { ok, body } = await api("quotas");
    if (!ok) return;
    const names = body.models.map((v) => v.model).sort();
    const select = $("traffic-model");
    const current = [...select.options].map((o) => o.value);
    if (names.join("\n") !== current.join("\n")) {
      select.replaceChildren(...names.map((n) => new Option(n, n)));
    }
    $("traffic-empty").hidden = names.length > 0;
    $("traffic-chart").hidden = names.length === 0;
    if (!names.includes(state.model)) {
      const remembered = localStorage.getItem("llm-router.traffic.model");
      choose(names.includes(remembered) ? remembered : names[0] || null);
    }
    select.value = state.model || "";
  }

  function choose(model) {
    if (model === state.model) return;
    state.model = model;
    if (model) localStorage.setItem("llm-router.traffic.model", model);
    if (state.chart) { state.chart.destroy(); state.chart = null; }
    state.doc = null;
  }

  async function tick() {
    try {
      if (state.ticks % NAMES_EVERY === 0) await loadNames();
      await loadHistory();
    } catch (err) {
      $("traffic-summary").textContent = `Could not reach the API: ${err}`;
    }
    state.ticks += 1;
    setTimeout(tick, REFRESH_MS);
  }

  function refreshNow() { // the regular ticks go on; this one answers a choice at once
    loadHistory().catch((err) => { $("traffic-summary").textContent = `${err}`; });
  }

  $("traffic-model").addEventListener("change", (e) => { choose(e.target.value); refreshNow(); });
  $("traffic-minutes").addEventListener("change", (e) => {
    state.minutes = Number(e.target.value);
    refreshNow();
  });
  // a click on a model's name in the quota table shows its traffic
  document.querySelector("#quotas tbody").addEventListener("click", (e) => {
    const cell = e.target.closest("td.model");
    const model = cell && cell.parentElement.dataset.model;
    if (!model || e.target.closest("button, input")) return;
    choose(model);
    $("traffic-model").value = model;
    $("traffic").scrollIntoView({ behavior: "smooth", block: "start" });
    refreshNow();
  });
  window.addEventListener("resize", () => {
    if (state.chart) state.chart.setSize({ width: Math.max(320, $("traffic-chart").clientWidth), height: HEIGHT });
  });
  // colours follow the light/dark scheme: redraw with the new ones when it changes
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
    if (state.chart) { state.chart.destroy(); state.chart = null; }
    if (state.doc) draw(state.doc);
  });
  tick();
})();
