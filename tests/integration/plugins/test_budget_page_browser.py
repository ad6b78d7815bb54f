"""The quota page shows a priced model's spend against its budget (headless Chromium,
through the real Airflow API server; skipped without Chromium like the page's other
browser test). ``LLMR_SCREENSHOT_BUDGET=<file>`` saves a screenshot there
(``docs/img/budget_spend.png`` is made so)."""

from __future__ import annotations

import os

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from airflow_llm_router.engine.types import Admission
from tests.integration.plugins.conftest import QuotaUiStack, api
from tests.integration.plugins.test_quota_page_browser import browser, log_in, wait  # noqa: F401

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
