// The router-wide spend budget: what every priced model spends together per period, its
// bar, and the form that changes it (PUT api/budget: stored in PostgreSQL, audited, pushed
// to the router). Uses quotas.js (el, api, send, readInput, bar, showSpend,
// clearFieldErrors, showWriteError, loadAudit, access).
"use strict";

const budgetForm = { node: null, inputs: {}, errors: {}, stored: null, bar: null, editing: false };

// Empty is null: no budget (the period keeps its default).
function budgetValue(name) {
  return readInput({ nullable: true }, budgetForm.inputs[name]);
}

function showBudget(view) {
  budgetForm.stored = view.budget;
  if (!budgetForm.editing) { // never overwrite what someone is typing
    budgetForm.inputs.budget_micro_usd.value = view.budget ? view.budget.budget_micro_usd : "";
    budgetForm.inputs.budget_period_s.value = view.budget ? view.budget.budget_period_s : "";
  }
  allowBudgetEdits();
  const spend = view.total_spend;
  showSpend(budgetForm.bar, spend);
  const note = document.getElementById("budget-note");
  note.textContent = !view.budget ? "No router-wide budget: only each model's own applies."
    : `$${(view.budget.budget_micro_usd / 1e6).toLocaleString()} per `
      + `${view.budget.budget_period_s} s for all priced models together`
      + (view.updated_by ? ` · set by ${view.updated_by}` : "")
      + (view.applied ? "" : " · not in router yet");
  document.getElementById("budget-no-spend").hidden = Boolean(spend);
}

// A viewer reads the budget: its inputs are disabled and its Save button is .edit-only,
// hidden until quotas.js's loadAccess says the user may edit (body[data-can-edit]).
function allowBudgetEdits() {
  for (const input of Object.values(budgetForm.inputs)) input.disabled = !access.canEdit;
}

async function loadBudget() {
  const { ok, body } = await api("budget");
  if (ok) showBudget(body);
}

async function saveBudget(event) {
  event.preventDefault();
  const message = document.getElementById("budget-message");
  clearFieldErrors(budgetForm.errors, budgetForm.inputs, message);
  const body = { budget_micro_usd: budgetValue("budget_micro_usd") };
  const period = budgetValue("budget_period_s");
  if (period !== null) body.budget_period_s = period;
  const answer = await send("budget", "PUT", body);
  if (answer.ok) {
    message.textContent = "Saved";
    message.className = "row-message ok";
    budgetForm.editing = false;
    await Promise.all([loadBudget(), loadAudit()]);
    return;
  }
  showWriteError(budgetForm.errors, budgetForm.inputs, message, answer.status, answer.body);
}

function setupBudget() {
  const node = document.getElementById("budget-form");
  budgetForm.node = node;
  for (const name of ["budget_micro_usd", "budget_period_s"]) {
    budgetForm.inputs[name] = node.querySelector(`input[name=${name}]`);
    budgetForm.errors[name] = node.querySelector(`.field-error[data-field=${name}]`);
  }
  budgetForm.bar = bar("total spend");
  budgetForm.bar.node.dataset.totalSpend = "1";
  document.getElementById("budget-spend").append(budgetForm.bar.node);
  allowBudgetEdits();
  new MutationObserver(allowBudgetEdits).observe(
    document.body, { attributes: true, attributeFilter: ["data-can-edit"] });
  node.addEventListener("submit", saveBudget);
  node.addEventListener("input", () => { budgetForm.editing = true; });
  loadBudget();
  setInterval(loadBudget, REFRESH_MS);
}

setupBudget();
