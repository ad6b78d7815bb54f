// The "Add model" form. Its fields are the quota's own, read from the API's OpenAPI
// document (the ModelQuota schema), so the form offers every field PUT accepts and the
// server's validation (422 naming the field) is the one that decides. Uses quotas.js.
"use strict";

const addForm = { fields: null, inputs: {}, errors: {} };

// Used only if the OpenAPI document cannot be read: the three fields a quota needs.
const FALLBACK_SCHEMA = {
  required: ["rpm", "tpm", "max_concurrency"],
  properties: {
    rpm: { type: "integer", title: "Rpm" },
    tpm: { type: "integer", title: "Tpm" },
    max_concurrency: { type: "integer", title: "Max Concurrency" },
  },
};

function fieldKind(prop) {
  const types = (prop.anyOf || [prop]).map((p) => p.type).filter((t) => t && t !== "null");
  if (types.includes("boolean")) return "bool";
  if (types.includes("integer")) return "int";
  return "number";
}

async function quotaSchema() {
  try {
    const response = await fetch("openapi.json", { credentials: "same-origin" });
    const doc = await response.json();
    return doc.components.schemas.ModelQuota || FALLBACK_SCHEMA;
  } catch (err) {
    return FALLBACK_SCHEMA;
  }
}

function addField(container, name, label, input) {
  const error = el("div", { class: "field-error", "data-field": name });
  addForm.inputs[name] = input;
  addForm.errors[name] = error;
  container.append(el("label", { class: "add-field" },
    el("span", { class: "label" }, label), input, error));
}

// What a person reads beside each field (the schema's own titles are its names,
// capitalized); the field's API name stays its input's name and tooltip, as errors name it.
const LABELS = {
  rpm: "requests per window", tpm: "tokens per window",
  max_concurrency: "calls in flight", weight: "weight (fair share)", enabled: "enabled",
  window_s: "window (s)", input_tpm: "input tokens per window",
  output_tpm: "output tokens per window", expected_output_tokens: "expected output tokens",
  expected_latency_s: "expected latency (s)",
  input_micro_usd_per_mtok: "input price (\u00b5$ per 1M tokens)",
  output_micro_usd_per_mtok: "output price (\u00b5$ per 1M tokens)",
  budget_micro_usd: "budget (\u00b5$ per period)", budget_period_s: "budget period (s)",
  overflow_threshold: "overflow threshold (share of window)",
};

async function buildAddForm() {
  const schema = await quotaSchema();
  const container = document.querySelector("#add-model .add-fields");
  const required = new Set(schema.required || []);
  addField(container, "model", "Model name *", el("input", {
    type: "text", name: "model", autocomplete: "off", placeholder: "e.g. openai/gpt-4o" }));
  addForm.fields = [];
  for (const [name, prop] of Object.entries(schema.properties)) {
    const kind = fieldKind(prop);
    const label = (LABELS[name] || name.replace(/_/g, " ")) + (required.has(name) ? " *" : "");
    const input = kind === "bool"
      ? el("input", { type: "checkbox", name, title: name, checked: prop.default !== false })
      : el("input", { type: "number", name, title: name, step: kind === "int" ? "1" : "any",
                      placeholder: prop.default == null ? "" : `default ${prop.default}` });
    addField(container, name, label, input);
    addForm.fields.push({ name, kind });
  }
}

function clearAddErrors() {
  clearFieldErrors(addForm.errors, addForm.inputs, document.getElementById("add-model-message"));
}

function showAddError(field, text) {
  const target = addForm.errors[field];
  if (target) {
    target.textContent = text;
    addForm.inputs[field].setAttribute("aria-invalid", "true");
  } else {
    const message = document.getElementById("add-model-message");
    message.textContent = `${field}: ${text}`;
    message.className = "row-message error";
  }
}

async function submitAddForm(event) {
  event.preventDefault();
  clearAddErrors();
  const model = addForm.inputs.model.value.trim();
  if (!model) { showAddError("model", "enter the model's name"); return; }
  if (table.views.some((v) => v.model === model)) {
    showAddError("model", "this model already has a quota: edit it in the table");
    return;
  }
  const quota = {};
  for (const f of addForm.fields) {
    const value = readInput({ kind: f.kind, nullable: true }, addForm.inputs[f.name]);
    if (value !== null) quota[f.name] = value; // empty: the server's default (or "required")
  }
  const { ok, status, body } = await send(modelPath(model), "PUT", quota);
  if (ok) {
    document.getElementById("add-model").reset();
    const message = document.getElementById("add-model-message");
    message.textContent = `Added ${model}`;
    message.className = "row-message ok";
    // show the new model: filter the table to it
    const search = document.getElementById("model-search");
    search.value = model;
    table.filter = model;
    table.page = 0;
    await Promise.all([loadQuotas(), loadAudit()]);
    return;
  }
  if (status === 422 && Array.isArray(body.detail)) {
    for (const d of body.detail) {
      // a name the key scheme cannot hold: say the rule, not the regular expression
      const msg = d.type === "string_pattern_mismatch"
        ? d.msg.replace(/^String should match pattern '.*' \((.*)\)$/, "not a valid model name: $1")
        : d.msg;
      showAddError(d.field === "model" || d.field === "path.model" ? "model" : d.field, msg);
    }
  } else {
    showAddError("model", `not added (${status}): ${detailText(body)}`);
  }
}

function toggleAddForm(open) {
  const form = document.getElementById("add-model");
  const toggle = document.getElementById("add-model-toggle");
  form.hidden = !open;
  toggle.setAttribute("aria-expanded", String(open));
  if (open) addForm.inputs.model.focus();
}

async function setupAddForm() {
  await buildAddForm();
  const form = document.getElementById("add-model");
  form.addEventListener("submit", submitAddForm);
  document.getElementById("add-model-toggle").addEventListener(
    "click", () => toggleAddForm(form.hidden));
  document.getElementById("add-model-cancel").addEventListener("click", () => {
    form.reset();
    clearAddErrors();
    toggleAddForm(false);
  });
}

setupAddForm();
