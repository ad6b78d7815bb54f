// The LLM Quotas page: polls the API, draws usage bars, saves inline edits as PATCHes.
// Same-origin requests only; the session cookie authenticates, and writes carry the header
// the API requires against cross-site requests.
"use strict";

const REFRESH_MS = Number(document.body.dataset.refreshMs) || 3000;
const CSRF_HEADER = document.body.dataset.csrfHeader;
const FIELDS = [
  { name: "enabled", kind: "bool" },
  { name: "rpm", kind: "int", min: 1 },
  { name: "tpm", kind: "int", min: 1 },
  { name: "max_concurrency", kind: "int", min: 1 },
  { name: "weight", kind: "float", min: 0, step: "any" },
  // prices and budget (docs/budgets.md), in one cell: whole micro-dollars, empty is null
  // (unpriced, no budget); the API checks them as for every quota field
  { name: "input_micro_usd_per_mtok", kind: "int", min: 0, nullable: true, group: "money",
    label: "input", title: "micro-dollars per million input tokens ($0.15 per 1M = 150000)" },
  { name: "output_micro_usd_per_mtok", kind: "int", min: 0, nullable: true, group: "money",
    label: "output", title: "micro-dollars per million output tokens" },
  { name: "budget_micro_usd", kind: "int", min: 0, nullable: true, group: "money",
    label: "budget", title: "micro-dollars per budget period ($25 = 25000000); empty: none" },
  { name: "budget_period_s", kind: "float", min: 0.01, step: "any", group: "money",
    label: "period s", title: "the budget period in seconds (86400: a UTC day)" },
];
const rows = new Map(); // model -> {tr, inputs, errors, bars, message, quota}
const PAGE_SIZE = 50; // rows of the quota table shown at once (filter to find the others)
const table = { views: [], page: 0, filter: "" }; // every model from the API, the page shown
// What the signed-in user may change (GET api/me). Until it answers, nothing may: controls
// marked .edit-only / .delete-only stay hidden (quotas.css), so a viewer never sees one.
const access = { canEdit: false, canDelete: false };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

async function api(path, options = {}) {
  const response = await fetch("api/" + path, {
    credentials: "same-origin",
    ...options,
    headers: { Accept: "application/json", ...(options.headers || {}) },
  });
  const body = await response.json().catch(() => ({}));
  return { ok: response.ok, status: response.status, body };
}

// A write: JSON body (if any) and the header the API requires against cross-site requests.
function send(path, method, body) {
  const headers = { [CSRF_HEADER]: "XMLHttpRequest" };
  if (body === undefined) return api(path, { method, headers });
  headers["Content-Type"] = "application/json";
  return api(path, { method, headers, body: JSON.stringify(body) });
}

// A form's field errors and message line, cleared before a write ...
function clearFieldErrors(errors, inputs, message) {
  for (const [name, error] of Object.entries(errors)) {
    error.textContent = "";
    inputs[name].removeAttribute("aria-invalid");
  }
  message.textContent = "";
  message.className = "row-message";
}

// ... and filled from its answer: a 422 under the field it names, else in the message line.
function showWriteError(errors, inputs, message, status, body) {
  if (status === 422 && Array.isArray(body.detail)) {
    for (const d of body.detail) {
      const target = errors[d.field];
      if (target) {
        target.textContent = d.msg;
        inputs[d.field].setAttribute("aria-invalid", "true");
      } else {
        message.textContent = `${d.field}: ${d.msg}`;
      }
    }
  } else {
    message.textContent = `Not saved (${status}): ${detailText(body)}`;
  }
  message.classList.add("error");
}

function setStatus(text, isError = false) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.classList.toggle("error", isError);
}

function bar(label) {
  const fill = el("div", { class: "fill" });
  const value = el("span", { class: "value" });
  const node = el("div", { class: "bar" }, el("span", { class: "label" }, label),
    el("div", { class: "track" }, fill), value);
  return { node, fill, value };
}

function showBar(b, used, limit, pct) {
  const p = Math.max(0, Math.min(100, pct ?? 0));
  b.fill.style.width = p + "%";
  b.fill.classList.toggle("high", p >= 80 && p < 100);
  b.fill.classList.toggle("full", p >= 100);
  b.value.textContent = `${used.toLocaleString()} / ${limit.toLocaleString()}`;
}

// A priced model's spend this budget period (settled + reserved) against its budget;
// hidden for an unpriced model. Amounts come in micro-dollars and show in dollars.
function showSpend(b, spend) {
  b.node.style.display = spend ? "" : "none"; // .bar's display: grid outranks [hidden]
  if (!spend) return;
  const usd = (micro) => "$" + (micro / 1e6).toLocaleString(undefined,
    { minimumFractionDigits: 2, maximumFractionDigits: 4 });
  const spent = spend.settled_micro_usd + spend.reserved_micro_usd;
  showBar(b, 0, 0, spend.spend_pct);
  b.value.textContent = spend.budget_micro_usd == null ? `${usd(spent)} (no budget)`
    : `${usd(spent)} / ${usd(spend.budget_micro_usd)}`;
  b.node.title = `settled ${usd(spend.settled_micro_usd)} + reserved `
    + `${usd(spend.reserved_micro_usd)} by calls in flight, in the budget period of `
    + `${spend.period_s} s that began ${new Date(spend.period_start_ms).toLocaleString()}`;
}

// A model whose budget is (nearly) spent says so beside its name, not only in its bar's
// colour: admission refuses a call whose estimated cost no longer fits, so a model is out
// of budget before its bar reaches 100 % (amber from BUDGET_LOW_PCT), and over it (red) when
// what it spent and reserved reaches the budget.
const BUDGET_LOW_PCT = 90;
function budgetBadge(spend) {
  const pct = spend ? spend.spend_pct : null;
  if (pct == null || pct < BUDGET_LOW_PCT) return null;
  const over = pct >= 100;
  return el("span", {
    class: over ? "badge bad" : "badge warn", "data-budget": over ? "over" : "low",
    title: `${pct} % of the budget of the period spent or reserved: calls whose estimated `
      + "cost does not fit wait for the next period or go to other models",
  }, over ? "over budget" : `budget ${pct} % spent`);
}

function readInput(field, input) {
  if (field.kind === "bool") return input.checked;
  const text = input.value.trim();
  if (text === "") return field.nullable ? null : text; // else the API names the rule
  const value = Number(text);
  return Number.isNaN(value) ? text : value;
}

function isDirty(row) {
  return FIELDS.some((f) => readInput(f, row.inputs[f.name]) !== row.quota[f.name]);
}

function refreshDirty(row) {
  const dirty = isDirty(row);
  row.save.disabled = !dirty;
  for (const f of FIELDS) {
    row.inputs[f.name].classList.toggle(
      "dirty", readInput(f, row.inputs[f.name]) !== row.quota[f.name]);
  }
  return dirty;
}

function createRow(model) {
  const inputs = {}, errors = {};
  const fieldNodes = (f) => {
    const input = f.kind === "bool"
      ? el("input", { type: "checkbox", name: f.name, "aria-label": `${model} ${f.name}` })
      : el("input", { type: "number", name: f.name, min: String(f.min), step: f.step || "1",
                      "aria-label": `${model} ${f.name}` });
    const error = el("div", { class: "field-error", "data-field": f.name });
    inputs[f.name] = input;
    errors[f.name] = error;
    return [input, error];
  };
  const cells = FIELDS.filter((f) => !f.group).map((f) => el("td", {}, ...fieldNodes(f)));
  cells.push(el("td", { class: "money" }, ...FIELDS.filter((f) => f.group).map((f) =>
    el("label", { class: "money-field", title: f.title }, f.label, ...fieldNodes(f)))));
  const bars = { rpm: bar("requests"), tpm: bar("tokens"), conc: bar("in flight"),
                 spend: bar("spend") };
  bars.spend.node.dataset.spend = "1";
  const save = el("button", { class: "save edit-only", type: "button", disabled: true }, "Save");
  const remove = el("button", { class: "delete delete-only", type: "button",
                                "aria-label": `Delete ${model}` }, "Delete");
  const message = el("div", { class: "row-message", role: "status" });
  const name = el("td", { class: "model" }, model, el("small"));
  const tr = el("tr", { "data-model": model }, name, ...cells,
    el("td", {}, bars.rpm.node, bars.tpm.node, bars.conc.node, bars.spend.node),
    el("td", { class: "actions" }, save, remove, message));
  const row = { tr, inputs, errors, bars, save, message, name, quota: null };
  remove.addEventListener("click", () => deleteModel(model));
  for (const input of Object.values(inputs)) {
    input.addEventListener("input", () => refreshDirty(row));
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") saveRow(model); });
  }
  save.addEventListener("click", () => saveRow(model));
  rows.set(model, row);
  return row;
}

function renderRow(view) {
  const row = rows.get(view.model) || createRow(view.model);
  const dirty = row.quota !== null && isDirty(row);
  row.quota = view.quota;
  if (!dirty) { // never overwrite what someone is typing
    for (const f of FIELDS) {
      if (f.kind === "bool") row.inputs[f.name].checked = view.quota[f.name];
      else row.inputs[f.name].value = view.quota[f.name] ?? "";
    }
  }
  refreshDirty(row);
  for (const input of Object.values(row.inputs)) input.disabled = !access.canEdit;
  const u = view.usage || { requests: 0, tokens: 0, in_flight: 0 };
  showBar(row.bars.rpm, u.requests, view.quota.rpm, u.rpm_pct);
  showBar(row.bars.tpm, u.tokens, view.quota.tpm, u.tpm_pct);
  showBar(row.bars.conc, u.in_flight, view.quota.max_concurrency, u.concurrency_pct);
  showSpend(row.bars.spend, u.spend);
  const small = row.name.querySelector("small");
  small.textContent = `window ${view.quota.window_s} s`;
  if (u.cooldown_ms > 0) small.append(el("span", { class: "badge bad" }, "cooldown"));
  if (u.breaker && u.breaker !== "closed") {
    const unknown = u.breaker_cause === "unknown_model";
    small.append(el("span", {
      class: "badge bad", "data-breaker-cause": u.breaker_cause || "",
      title: unknown ? "the backend answered 404: it does not have this model; its calls "
        + "go to other models until a probe call succeeds"
        : "errors in a row: calls go to other models until a probe call succeeds",
    }, unknown ? `breaker ${u.breaker}: unknown to the backend` : `breaker ${u.breaker}`));
  }
  if (u.effective) { // the provider's 429s taught a lower limit than the target
    const e = u.effective;
    small.append(el("span", {
      class: "badge bad", "data-effective": "1",
      title: "learned from the provider's 429s: admission holds this model to "
        + `${Math.round(u.limit_share * 1000) / 10} % of its quota, probing back up`,
    }, `effective ${e.rpm} rpm / ${e.tpm} tpm / ${e.max_concurrency} conc`));
  }
  const budget = budgetBadge(u.spend);
  if (budget) small.append(budget);
  if (!view.applied) small.append(el("span", { class: "badge" }, "not in router yet"));
  if (!view.stored) {
    small.append(el("span", { class: "badge", title: "set in Redis directly; saving "
      + "stores it in PostgreSQL" }, "not stored"));
  }
  row.stored = view.stored;
  return row;
}

async function loadQuotas() {
  const { ok, status, body } = await api("quotas");
  if (!ok) {
    setStatus(`Could not load quotas (${status}): ${detailText(body)}`, true);
    return;
  }
  table.views = body.models;
  const seen = new Set(body.models.map((v) => v.model));
  for (const [model, row] of rows) {
    if (!seen.has(model)) { row.tr.remove(); rows.delete(model); }
  }
  renderTable();
  document.getElementById("no-models").hidden = body.models.length > 0;
  setStatus(`${body.models.length} model(s), ${body.waiting} request(s) waiting · updated `
            + new Date().toLocaleTimeString());
}

// Only the rows of the page shown exist in the table (1,000 models stay quick): the filter
// matches names case-insensitively, and the pager walks pages of PAGE_SIZE.
function renderTable() {
  const needle = table.filter.trim().toLowerCase();
  const matching = needle ? table.views.filter((v) => v.model.toLowerCase().includes(needle))
    : table.views;
  const pages = Math.max(1, Math.ceil(matching.length / PAGE_SIZE));
  table.page = Math.min(table.page, pages - 1);
  const shown = matching.slice(table.page * PAGE_SIZE, (table.page + 1) * PAGE_SIZE);
  const tbody = document.querySelector("#quotas tbody");
  const wanted = shown.map((view) => renderRow(view).tr);
  for (const tr of [...tbody.children]) if (!wanted.includes(tr)) tr.remove();
  wanted.forEach((tr, i) => { if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null); });
  const info = document.getElementById("models-page-info");
  info.textContent = matching.length === 0 ? (needle ? "no model matches" : "")
    : `${table.page * PAGE_SIZE + 1}–${table.page * PAGE_SIZE + shown.length} of `
      + `${matching.length.toLocaleString()}${needle ? ` matching (${table.views.length.toLocaleString()} in all)` : ""}`;
  const pager = document.getElementById("models-pager");
  pager.querySelector("[data-page=prev]").disabled = table.page === 0;
  pager.querySelector("[data-page=next]").disabled = table.page >= pages - 1;
}

function setupTable() {
  const search = document.getElementById("model-search");
  search.addEventListener("input", () => { table.filter = search.value; table.page = 0; renderTable(); });
  const pager = document.getElementById("models-pager");
  pager.querySelector("[data-page=prev]").addEventListener("click", () => { table.page -= 1; renderTable(); });
  pager.querySelector("[data-page=next]").addEventListener("click", () => { table.page += 1; renderTable(); });
}

function modelPath(model) {
  return "quotas/" + model.split("/").map(encodeURIComponent).join("/");
}

// The Airflow UI shows the page in a sandboxed iframe without allow-modals, where
// window.confirm() silently answers false: destructive actions ask inline instead.
function confirmInline(after, text, label, onConfirm) {
  after.parentNode.querySelector(".confirm")?.remove();
  const yes = el("button", { type: "button", class: "danger" }, label);
  const no = el("button", { type: "button", class: "secondary" }, "Cancel");
  const box = el("span", { class: "confirm", role: "alertdialog", "aria-label": text },
    el("span", { class: "confirm-text" }, text), yes, no);
  yes.addEventListener("click", () => { box.remove(); onConfirm(); });
  no.addEventListener("click", () => box.remove());
  after.after(box);
  yes.focus();
}

function deleteModel(model) {
  const row = rows.get(model);
  confirmInline(row.tr.querySelector("button.delete"),
    `Delete the quota of ${model}? It admits nothing until added again.`, "Delete",
    () => removeModel(model));
}

async function removeModel(model) {
  const row = rows.get(model);
  const { ok, status, body } = await send(modelPath(model), "DELETE");
  if (!ok) {
    row.message.textContent = `Not deleted (${status}): ${detailText(body)}`;
    row.message.className = "row-message error";
    return;
  }
  await Promise.all([loadQuotas(), loadAudit()]);
}

function detailText(body) {
  if (typeof body.detail === "string") return body.detail;
  if (Array.isArray(body.detail)) return body.detail.map((d) => `${d.field}: ${d.msg}`).join("; ");
  return "unexpected answer";
}

async function saveRow(model) {
  const row = rows.get(model);
  const patch = {};
  for (const f of FIELDS) {
    const value = readInput(f, row.inputs[f.name]);
    if (value !== row.quota[f.name]) patch[f.name] = value;
  }
  clearFieldErrors(row.errors, row.inputs, row.message);
  if (Object.keys(patch).length === 0) return;
  row.save.disabled = true;
  // a quota only Redis holds has nothing to patch in the store: save it whole
  const { ok, status, body } = await send(modelPath(model), row.stored ? "PATCH" : "PUT",
    row.stored ? patch : { ...row.quota, ...patch });
  if (ok) {
    row.quota = body.new;
    row.message.textContent = "Saved";
    row.message.classList.add("ok");
    refreshDirty(row);
    await Promise.all([loadQuotas(), loadAudit()]);
    return;
  }
  showWriteError(row.errors, row.inputs, row.message, status, body);
  refreshDirty(row);
}

// The audit log names the router-wide budget's changes "*" (no model can have that name).
function auditSubject(entry) {
  return entry.model === "*" ? "router-wide budget" : entry.model;
}

function describeChange(entry) {
  if (!entry.old) return "created";
  if (!entry.new) return "deleted";
  const parts = [];
  for (const key of Object.keys(entry.new)) {
    if (JSON.stringify(entry.old[key]) !== JSON.stringify(entry.new[key])) {
      parts.push(`${key}: ${entry.old[key]} → ${entry.new[key]}`);
    }
  }
  return parts.join(", ") || "no change";
}

async function loadAudit() {
  const { ok, body } = await api("audit?limit=20");
  if (!ok) return;
  const tbody = document.querySelector("#audit tbody");
  tbody.replaceChildren(...body.map((e) => el("tr", { "data-audit-id": String(e.id) },
    el("td", {}, new Date(e.at).toLocaleString()), el("td", {}, e.actor),
    el("td", {}, e.action), el("td", {}, auditSubject(e)),
    el("td", { class: "change" }, describeChange(e)), el("td", {}, e.source))));
}

// Ask once what the user may change; show the controls they may use, or say why not.
async function loadAccess() {
  const { ok, status, body } = await api("me");
  const note = document.getElementById("read-only-note");
  if (ok) {
    access.canEdit = body.can_edit;
    access.canDelete = body.can_delete;
    document.body.dataset.canEdit = String(body.can_edit);
    document.body.dataset.canDelete = String(body.can_delete);
    note.textContent = `Signed in as ${body.user}: read only. Changing quotas or requeueing `
      + "tasks needs the permission to edit pools (the op or admin role).";
  } else {
    note.textContent = `Could not tell what you may change (${status}): the page is read `
      + "only.";
  }
  note.hidden = ok && body.can_edit;
  renderTable();
}

async function tick() {
  try {
    await loadQuotas();
  } catch (err) {
    setStatus(`Could not reach the API: ${err}`, true);
  }
  setTimeout(tick, REFRESH_MS);
}

setupTable();
loadAccess();
tick();
loadAudit();
setInterval(loadAudit, REFRESH_MS * 5);
