"""A viewer on the LLM Quotas page (headless Chromium through the real Airflow UI) sees the
quotas, usage, traffic and backlog, but no control that changes anything: no Add model, no
Save or Delete, read-only fields, no requeue, no selection boxes; a note says why. (The
op's tests in test_quota_page_browser.py use every one of these controls.) Skipped without
Chromium like the page's other browser tests. ``LLMR_SCREENSHOT_DIR=docs/img`` re-makes
``viewer.png``.
"""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from airflow_llm_router.store import TaskStore
from tests.integration.plugins.conftest import QuotaUiStack, api
from tests.integration.plugins.test_quota_page_browser import (  # also skips without Chromium
    browser,  # noqa: F401 (the fixture)
    card,
    dead_rows,
    log_in,
    open_quotas_page,
    row,
    screenshot_path,
    viewport_shot,
    wait,
)
from tests.integration.web.backlog_fixtures import kill, tasks  # noqa: F401

#: every control that changes something, as the op's page has them
WRITE_CONTROLS = ("#add-model-toggle", "tr[data-model='gpt-small'] button.save",
                  "tr[data-model='gpt-small'] button.delete", "#requeue-selected",
                  "#requeue-matching", "#dead-select-all", "#dead tbody input[type=checkbox]")


def shown(driver: WebDriver, selector: str) -> list[bool]:
    return [e.is_displayed() for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def test_a_viewer_sees_no_write_controls(ui: QuotaUiStack, tokens: dict[str, str],
                                         browser: WebDriver, tasks: TaskStore,  # noqa: F811
                                         tmp_path: Path) -> None:
    api(ui, tokens["admin"], "PUT", "/api/quotas/gpt-small",
        json={"rpm": 60, "tpm": 200_000, "max_concurrency": 16})
    dead = kill(tasks, 2, error="HTTP 503 from the backend: overloaded", kind="summarise")

    log_in(browser, ui, "viewer")
    open_quotas_page(browser)
    row(browser, "gpt-small")
    wait(browser, "the page to know the user's rights", lambda d: d.execute_script(
        "return document.body.dataset.canEdit") == "false")
    wait(browser, "the dead letters", lambda d: sorted(dead_rows(d)) == dead
         and card(d, "Dead") == "2")

    for selector in WRITE_CONTROLS:  # present in the page, hidden from a viewer
        assert shown(browser, selector) and not any(shown(browser, selector)), selector
    fields = browser.find_elements(By.CSS_SELECTOR, "tr[data-model='gpt-small'] input")
    assert len(fields) >= 5 and all(not f.is_enabled() for f in fields)  # every quota field
    note = browser.find_element(By.ID, "read-only-note")
    assert note.is_displayed() and "viewer" in note.text and "edit pools" in note.text
    # what a viewer reads is all there
    assert row(browser, "gpt-small").find_element(By.CSS_SELECTOR, ".bar .value").text \
        == "0 / 60"
    assert browser.find_element(By.ID, "model-search").is_displayed()
    viewport_shot(browser, "models-title", screenshot_path(tmp_path, "viewer.png"), dark=False)

    # the server decides regardless: the hidden write is still refused
    viewer = tokens["viewer"]
    assert api(ui, viewer, "POST", "/api/tasks/requeue",
               json={"ids": dead}).status_code == 403
    assert api(ui, viewer, "PATCH", "/api/quotas/gpt-small", json={"rpm": 1}).status_code == 403
