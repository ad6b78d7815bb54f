"""The quota page shows a priced model's spend against its budget, and edits the
router-wide budget and a model's prices (headless Chromium, through the real Airflow API
server; skipped without Chromium like the page's other browser test).
``LLMR_SCREENSHOT_BUDGET=<file>`` saves a screenshot of the spend bar there
(``docs/img/budget_spend.png`` is made so), ``LLMR_SCREENSHOT_DIR=docs/img`` the Spend budget
section as ``budget_total.png``."""

from __future__ import annotations

import os
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from airflow_llm_router.engine.types import Admission
from tests.integration.plugins.conftest import QuotaUiStack, api
from tests.integration.plugins.test_quota_page_browser import (  # noqa: F401
    browser,
    edit,
    log_in,
    row,
    screenshot_path,
    text_of,
    wait,
)

#: 1,000 micro-dollars per token either way: 1,000 tokens cost $1
PRICED = {"rpm": 60, "tpm": 90_000, "max_concurrency": 8,
          "input_micro_usd_per_mtok": 10**9, "output_micro_usd_per_mtok": 10**9,
          "budget_micro_usd": 2_000_000, "budget_period_s": 86400}


def test_the_spend_bar(ui: QuotaUiStack, tokens: dict[str, str],
                       browser: WebDriver) -> None:  # noqa: F811
    admin = tokens["admin"]
    assert api(ui, admin, "PUT", "/api/quotas/priced", json=PRICED).status_code == 201
    assert api(ui, admin, "PUT", "/api/quotas/free",
               json={"rpm": 60, "tpm": 90_000, "max_concurrency": 8}).status_code == 201
    with ui.router() as router:
        done = router.admit(1000, estimated_output_tokens=500, models=["priced"])
        assert isinstance(done, Admission)
        router.complete(done.lease_id, 400, 350)  # $0.75 settled
        held = router.admit(500, estimated_output_tokens=250, models=["priced"])
        assert isinstance(held, Admission)  # $0.50 reserved while in flight
    log_in(browser, ui, "admin")
    browser.get(ui.url + "/ui")  # the page itself (the UI shows it in an iframe)
    bar = wait(browser, "the spend bar of the priced model", lambda d: d.find_elements(
        By.CSS_SELECTOR, "tr[data-model=priced] [data-spend]"))[0]
    wait(browser, "the spend figures", lambda d: "/" in bar.text)
    assert bar.text.split()[-3:] == ["$1.25", "/", "$2.00"], bar.text
    assert bar.find_element(By.CSS_SELECTOR, ".fill").get_attribute("style") == "width: 62.5%;"
    assert "settled $0.75" in (bar.get_attribute("title") or "")
    free = browser.find_element(By.CSS_SELECTOR, "tr[data-model=free] [data-spend]")
    assert not free.is_displayed()  # an unpriced model has no spend to show
    shot = os.environ.get("LLMR_SCREENSHOT_BUDGET")
    if shot:
        browser.find_element(By.CSS_SELECTOR, "tr[data-model=priced]").screenshot(shot)


def test_edit_the_total_budget_and_a_price(ui: QuotaUiStack, tokens: dict[str, str],
                                           browser: WebDriver,  # noqa: F811
                                           tmp_path: Path) -> None:
    admin = tokens["admin"]
    assert api(ui, admin, "PUT", "/api/quotas/priced", json=PRICED).status_code == 201
    with ui.router() as router:
        done = router.admit(1000, estimated_output_tokens=500, models=["priced"])
        assert isinstance(done, Admission)
        router.complete(done.lease_id, 400, 350)  # $0.75 settled
    log_in(browser, ui, "admin")
    browser.get(ui.url + "/ui")
    form = wait(browser, "the budget form", lambda d: d.find_elements(By.ID, "budget-form"))[0]
    total = browser.find_element(By.CSS_SELECTOR, "[data-total-spend]")
    wait(browser, "the total spend", lambda d: "$0.75" in total.text)
    assert "(no budget)" in total.text
    budget = form.find_element(By.NAME, "budget_micro_usd")
    period = form.find_element(By.NAME, "budget_period_s")
    wait(browser, "the budget editable for an admin", lambda d: budget.is_enabled())
    budget.send_keys("-5")
    form.find_element(By.CSS_SELECTOR, "button.save").click()
    error = form.find_element(By.CSS_SELECTOR, ".field-error[data-field=budget_micro_usd]")
    wait(browser, "the refused budget's message", lambda d: "greater than or equal" in error.text)
    assert api(ui, admin, "GET", "/api/budget").json()["budget"] is None
    budget.clear()
    budget.send_keys("3000000")
    period.clear()
    period.send_keys("86400")  # the day the spend was counted in (a new period starts at 0)
    form.find_element(By.CSS_SELECTOR, "button.save").click()
    wait(browser, "the saved budget", lambda d: "Saved" in d.find_element(
        By.ID, "budget-message").text)
    assert api(ui, admin, "GET", "/api/budget").json()["budget"] == {
        "budget_micro_usd": 3_000_000, "budget_period_s": 86400.0}
    wait(browser, "the total spend against the budget", lambda d: "$3.00" in total.text)
    assert total.text.split()[-3:] == ["$0.75", "/", "$3.00"], total.text
    assert total.find_element(By.CSS_SELECTOR, ".fill").get_attribute("style") == "width: 25%;"
    browser.find_element(By.ID, "budget").screenshot(
        str(screenshot_path(tmp_path, "budget_total.png")))  # docs/budgets.md shows it
    # a model's price and budget are edited in its row like any quota field
    price = row(browser, "priced").find_element(
        By.CSS_SELECTOR, "input[name=input_micro_usd_per_mtok]")
    assert price.get_attribute("value") == str(10**9)
    edit(browser, "priced", "input_micro_usd_per_mtok", "2000000")
    wait(browser, "the saved price", lambda d: "Saved" in text_of(d, "priced", ".row-message"))
    quota = api(ui, admin, "GET", "/api/quotas/priced").json()["quota"]
    assert quota["input_micro_usd_per_mtok"] == 2_000_000
    assert quota["output_micro_usd_per_mtok"] == 10**9  # the others kept
    box = row(browser, "priced").find_element(By.CSS_SELECTOR, "input[name=budget_micro_usd]")
    box.clear()  # empty: no budget of its own; Enter saves the row
    box.send_keys(Keys.ENTER)
    wait(browser, "the removed budget", lambda d: api(
        ui, admin, "GET", "/api/quotas/priced").json()["quota"]["budget_micro_usd"] is None)
    audit = api(ui, admin, "GET", "/api/audit").json()
    assert {(e["model"], e["action"]) for e in audit} >= {("*", "create"), ("priced", "patch")}
