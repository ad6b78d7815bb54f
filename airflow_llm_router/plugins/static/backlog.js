// The backlog panel: counts, age, throughput and ETA from GET api/backlog; the dead letters
// (filtered, paged) from GET api/backlog/dead; requeue through POST api/tasks/requeue
// (editors only: a viewer is shown no requeue control, see quotas.js loadAccess). Uses el,
// api, send and detailText of quotas.js.
"use strict";

const DEAD_PAGE = 20;
const dead = { offset: 0, total: 0, filter: {}, selected: new Set(), asked: 0 };
// The dead list's rows by task id, with the answer each was drawn from: a refresh that
// brings the same task back keeps its row, so a row being clicked, or a focused checkbox,
// is not swapped for a copy under the user every few seconds.
const deadRows = new Map();

function duration(seconds) {
  if (seconds == null) return "—";
  const s = Math.round(seconds);
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

function card(name, value, detail) {
  return el("div", { class: "card", "data-card": name },
    el("span", { class: "label" }, name), el("span", { class: "value" }, value),
    el("small", {}, detail));
}

// Under the ETA at the recent rate: what remains, and the soonest the quotas allow (the
// router's advice: every enabled model at its sustainable rate).
function etaDetail(body) {
  if (!body.remaining) return "nothing remains";
  const parts = [body.eta_s == null ? "nothing solved lately"
    : `${body.remaining.toLocaleString()} remaining`];
  if (body.eta_at_capacity_s != null) {
    parts.push(`≥ ${duration(body.eta_at_capacity_s)} at quota capacity`);
  }
  return parts.join(" · ");
}

function lanes(counts, capped) {
  const more = capped ? "+" : "";
  return `hot ${counts.hot.toLocaleString()}${more} · bulk ${counts.bulk.toLocaleString()}${more}`;
}

async function loadBacklog() {
  const { ok, status, body } = await api("backlog");
  const cards = document.getElementById("backlog-cards");
  if (!ok) {
    cards.replaceChildren(el("p", { class: "status error" },
      `Could not read the backlog (${status}): ${detailText(body)}`));
    return;
  }
  const capped = new Set(body.capped);
  const total = (s) => body.totals[s].toLocaleString() + (capped.has(s) ? "+" : "");
  cards.replaceChildren(
    card("Pending", total("pending"), lanes(body.counts.pending, capped.has("pending"))),
    card("Claimed", total("claimed"), lanes(body.counts.claimed, capped.has("claimed"))),
    card("Solved", total("solved"), lanes(body.counts.solved, capped.has("solved"))),
    card("Dead", total("dead"), lanes(body.counts.dead, capped.has("dead"))),
    card("Oldest pending", duration(body.oldest_pending_age_s),
      body.oldest_pending_age_s == null ? "nothing pending" : "since enqueued"),
    card("Throughput", `${body.throughput_per_min} / min`,
      `${body.solved_recently} solved in ${body.window_s / 60} min`),
    card("ETA", body.eta_s == null ? "—" : duration(body.eta_s), etaDetail(body)));
  for (const node of cards.querySelectorAll("[data-card=Dead] .value")) {
    node.classList.toggle("bad", body.totals.dead > 0);
  }
}

function deadQuery() {
  const params = new URLSearchParams({ limit: String(DEAD_PAGE), offset: String(dead.offset) });
  for (const [key, value] of Object.entries(dead.filter)) if (value) params.set(key, value);
  return params.toString();
}

function deadRow(task, drawn) {
  const box = el("input", { type: "checkbox", "aria-label": `Select task ${task.id}`,
                            checked: dead.selected.has(task.id) });
  box.addEventListener("change", () => {
    if (box.checked) dead.selected.add(task.id); else dead.selected.delete(task.id);
    refreshRequeueButtons();
  });
  const models = task.model || (task.allowed_models ? task.allowed_models.join(", ") : "any");
  const row = el("tr", { "data-task": String(task.id) }, el("td", { class: "edit-only" }, box),
    el("td", {}, `#${task.id}`), el("td", {}, task.kind), el("td", {}, task.priority),
    el("td", {}, `${task.attempts} / ${task.max_attempts}`), el("td", {}, models),
    el("td", { class: "error-text", title: task.last_error || "" }, task.last_error || ""),
    el("td", {}, new Date(task.updated_at).toLocaleString()));
  return { row, box, drawn };
}

// The row for task, reused when the task is unchanged; its box shows the current selection
// (a requeue clears the selection while the rows it left stay).
function deadRowFor(task) {
  const drawn = JSON.stringify(task);
  let entry = deadRows.get(task.id);
  if (!entry || entry.drawn !== drawn) {
    entry = deadRow(task, drawn);
    deadRows.set(task.id, entry);
  }
  entry.box.checked = dead.selected.has(task.id);
  return entry.row;
}

function showDeadRows(tasks) {
  const tbody = document.querySelector("#dead tbody");
  const shown = tasks.map(deadRowFor);
  const keep = new Set(tasks.map((task) => task.id));
  for (const id of [...deadRows.keys()]) if (!keep.has(id)) deadRows.delete(id);
  const current = [...tbody.children];
  if (current.length !== shown.length || current.some((row, i) => row !== shown[i])) {
    tbody.replaceChildren(...shown);
  }
}

async function loadDead() {
  // Only the latest question's answer is drawn: a refresh sent before the filter changed
  // may answer after the filtered one, and would put the old filter's rows back.
  const asked = ++dead.asked;
  const { ok, status, body } = await api("backlog/dead?" + deadQuery());
  if (asked !== dead.asked) return;
  const errors = document.getElementById("dead-filter-errors");
  const form = document.getElementById("dead-filter");
  for (const input of form.querySelectorAll("input")) input.removeAttribute("aria-invalid");
  if (!ok) {
    if (status === 422 && Array.isArray(body.detail)) {
      errors.textContent = body.detail.map((d) => `${d.field}: ${d.msg}`).join("; ");
      for (const d of body.detail) {
        const input = form.querySelector(`input[name='${d.field}']`);
        if (input) input.setAttribute("aria-invalid", "true");
      }
    } else {
      errors.textContent = `Could not read the dead letters (${status}): ${detailText(body)}`;
    }
    return;
  }
  errors.textContent = "";
  dead.total = body.total;
  showDeadRows(body.tasks);
  document.getElementById("no-dead").hidden = body.tasks.length > 0;
  const info = document.getElementById("dead-page-info");
  info.textContent = body.total === 0 ? "" : `${body.offset + 1}–${body.offset + body.tasks.length}`
    + ` of ${body.total.toLocaleString()}${body.total_capped ? "+" : ""}`;
  const pager = document.getElementById("dead-pager");
  pager.querySelector("[data-page=prev]").disabled = body.offset === 0;
  pager.querySelector("[data-page=next]").disabled = body.offset + body.tasks.length >= body.total;
  const boxes = [...document.querySelectorAll("#dead tbody input[type=checkbox]")];
  document.getElementById("dead-select-all").checked =
    boxes.length > 0 && boxes.every((box) => box.checked);
  refreshRequeueButtons();
}

function describeRequeue(request) {
  if (request.ids) return `${request.ids.length} task(s) by id`;
  const m = request.matching || {};
  const parts = Object.entries(m).map(([key, value]) => `${key} “${value}”`);
  return parts.length ? `all matching ${parts.join(", ")}` : "all dead tasks";
}

async function loadRequeues() {
  const { ok, body } = await api("backlog/requeues?limit=5");
  if (!ok) return;
  document.querySelector("#requeues tbody").replaceChildren(...body.map((e) =>
    el("tr", { "data-requeue-id": String(e.id) },
      el("td", {}, new Date(e.at).toLocaleString()), el("td", {}, e.actor),
      el("td", {}, describeRequeue(e.request)), el("td", {}, String(e.requeued)),
      el("td", {}, String(e.skipped)), el("td", {}, String(e.remaining)),
      el("td", {}, e.source))));
}

function refreshRequeueButtons() {
  const selected = document.getElementById("requeue-selected");
  selected.disabled = dead.selected.size === 0;
  selected.textContent = dead.selected.size ? `Requeue selected (${dead.selected.size})`
    : "Requeue selected";
  document.getElementById("requeue-matching").disabled = dead.total === 0;
}

function requeueMessage(text, isError) {
  const message = document.getElementById("requeue-message");
  message.textContent = text;
  message.className = "row-message " + (isError ? "error" : "ok");
}

async function requeue(body) {
  const { ok, status, body: answer } = await send("tasks/requeue", "POST", body);
  if (!ok) {
    requeueMessage(`Not requeued (${status}): ${detailText(answer)}`, true);
    return;
  }
  const parts = [`Requeued ${answer.requeued}`];
  if (answer.skipped.length) parts.push(`${answer.skipped.length} no longer dead`);
  if (answer.remaining) parts.push(`${answer.remaining} more match: requeue again`);
  requeueMessage(parts.join(" · "), false);
  dead.selected.clear();
  await Promise.all([loadBacklog(), loadDead(), loadRequeues()]);
}

function setupBacklog() {
  const form = document.getElementById("dead-filter");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    dead.filter = { kind: data.get("kind").trim(), model: data.get("model").trim(),
                    error: data.get("error").trim() };
    dead.offset = 0;
    dead.selected.clear();
    loadDead();
  });
  const pager = document.getElementById("dead-pager");
  pager.querySelector("[data-page=prev]").addEventListener("click", () => {
    dead.offset = Math.max(0, dead.offset - DEAD_PAGE); loadDead();
  });
  pager.querySelector("[data-page=next]").addEventListener("click", () => {
    dead.offset += DEAD_PAGE; loadDead();
  });
  document.getElementById("dead-select-all").addEventListener("change", (event) => {
    for (const box of document.querySelectorAll("#dead tbody input[type=checkbox]")) {
      box.checked = event.target.checked;
      box.dispatchEvent(new Event("change"));
    }
  });
  document.getElementById("requeue-selected").addEventListener("click", () =>
    requeue({ ids: [...dead.selected] }));
  document.getElementById("requeue-matching").addEventListener("click", () => {
    const f = dead.filter;
    const matching = {};
    if (f.kind) matching.kind = f.kind;
    if (f.model) matching.model = f.model;
    if (f.error) matching.error_contains = f.error;
    const body = { matching };
    const what = Object.keys(matching).length ? " matching the filter" : "";
    confirmInline(document.getElementById("requeue-matching"),
      `Requeue all ${dead.total.toLocaleString()} dead tasks${what}? They go back to `
      + "pending with their attempts reset.", "Requeue", () => requeue(body));
  });
}

async function backlogTick() {
  try {
    await Promise.all([loadBacklog(), loadDead()]);
  } catch (err) {
    document.getElementById("backlog-cards").replaceChildren(
      el("p", { class: "status error" }, `Could not reach the API: ${err}`));
  }
  setTimeout(backlogTick, REFRESH_MS);
}

setupBacklog();
backlogTick();
loadRequeues();
setInterval(loadRequeues, REFRESH_MS * 5);
