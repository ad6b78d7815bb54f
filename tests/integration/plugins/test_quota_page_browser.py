"""The LLM Quotas page in headless Chromium, through the real Airflow UI.

Logs in, opens "LLM Quotas" from the Admin menu (the page is an iframe inside the UI),
sees a validation message next to a bad value, edits a model's rpm, sees the new value and
its audit row, and checks that the next admissions obey the new rpm and that the usage bars
follow them. Needs Debian's ``chromium`` and ``chromium-driver``: without them the test is
skipped, unless ``LLMR_REQUIRE_BROWSER=1`` (CI) makes that a failure.
``LLMR_SCREENSHOT=<file>`` saves the screenshot there (``docs/img/quota_ui.png`` is made so).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_llm_router.engine.types import Admission, Wait
from tests.integration.plugins.conftest import QuotaUiStack, api

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
TIMEOUT_S = 20.0

if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    if os.environ.get("LLMR_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"the browser test needs {CHROMIUM} and {CHROMEDRIVER}: "
                           "apt-get install chromium chromium-driver")
    pytest.skip("headless Chromium is not installed (apt-get install chromium "
                "chromium-driver)", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,800", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    # the viewport itself at 1280x800, whatever the window decorations take
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": 800, "deviceScaleFactor": 1,
                            "mobile": False})
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: WebDriver, what: str, condition: Any) -> Any:
    return WebDriverWait(driver, TIMEOUT_S, poll_frequency=0.1).until(condition, message=what)


def log_in(driver: WebDriver, ui: QuotaUiStack, user: str) -> None:
    driver.get(ui.stack.api_url + "/")
    wait(driver, "the login form", ec.presence_of_element_located((By.NAME, "username")))
    driver.find_element(By.NAME, "username").send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(ui.passwords[user])
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(driver, "the Airflow home page", lambda d: "/auth/login" not in d.current_url
         and d.find_elements(By.XPATH, "//button[normalize-space()='Admin']"))


def open_quotas_page(driver: WebDriver) -> None:
    """Admin > LLM Quotas. The menu is animated: on a busy machine a click can land while
    it is still opening (or re-rendering) and be lost, so open and click again until the
    route changes, within the same overall timeout."""
    menu_item = (By.XPATH, "//*[@role='menuitem' or self::a][normalize-space()='LLM Quotas']")

    def navigated(d: WebDriver) -> bool:
        if d.current_url.endswith("/plugin/llm-quotas"):
            return True
        items = [e for e in d.find_elements(*menu_item) if e.is_displayed()]
        try:
            if items:
                items[0].click()
            else:
                d.find_element(By.XPATH, "//button[normalize-space()='Admin']").click()
        except WebDriverException:  # detached or covered mid-animation: try again
            pass
        return False

    WebDriverWait(driver, TIMEOUT_S, poll_frequency=0.5).until(
        navigated, message="the plugin route (Admin > LLM Quotas)")
    frame = wait(driver, "the page's iframe", ec.presence_of_element_located(
        (By.CSS_SELECTOR, "iframe[src*='/llm-router/ui']")))
    driver.switch_to.frame(frame)


def row(driver: WebDriver, model: str) -> WebElement:
    return wait(driver, f"the row of {model}", ec.presence_of_element_located(
        (By.CSS_SELECTOR, f"tr[data-model='{model}']")))


def edit(driver: WebDriver, model: str, field: str, value: str) -> None:
    box = row(driver, model).find_element(By.CSS_SELECTOR, f"input[name='{field}']")
    box.clear()
    box.send_keys(value)
    row(driver, model).find_element(By.CSS_SELECTOR, "button.save").click()


def text_of(driver: WebDriver, model: str, selector: str) -> str:
    return row(driver, model).find_element(By.CSS_SELECTOR, selector).text


def test_edit_rpm_in_the_airflow_ui(ui: QuotaUiStack, tokens: dict[str, str],
                                    browser: WebDriver, tmp_path: Path) -> None:
    admin = tokens["admin"]
    api(ui, admin, "PUT", "/api/quotas/gpt-small",
        json={"rpm": 60, "tpm": 200_000, "max_concurrency": 16})
    api(ui, admin, "PUT", "/api/quotas/gpt-large",
        json={"rpm": 20, "tpm": 90_000, "max_concurrency": 4, "weight": 2.0})
    with ui.router() as router:
        for i in range(24):  # some live usage for the bars: 24 calls, 6 still in flight
            lease = router.admit(900, models=["gpt-small"])
            assert isinstance(lease, Admission)
            if i < 18:
                router.complete(lease.lease_id, input_tokens=700, output_tokens=300)

    log_in(browser, ui, "op")
    open_quotas_page(browser)
    wait(browser, "gpt-small's usage", lambda d: text_of(d, "gpt-small", ".bar .value")
         == "24 / 60")

    # a bad value: the message sits next to the field, nothing is saved
    edit(browser, "gpt-large", "rpm", "0")
    message = wait(browser, "the rpm field's message", lambda d: text_of(
        d, "gpt-large", ".field-error[data-field='rpm']"))
    assert "at least 1" in message
    assert api(ui, admin, "GET", "/api/quotas/gpt-large").json()["quota"]["rpm"] == 20

    # a good value: saved, shown, audited
    edit(browser, "gpt-large", "rpm", "3")
    wait(browser, "Saved", lambda d: text_of(d, "gpt-large", ".row-message") == "Saved")
    assert text_of(browser, "gpt-large", ".field-error[data-field='rpm']") == ""
    assert (row(browser, "gpt-large").find_element(By.CSS_SELECTOR, "input[name='rpm']")
            .get_attribute("value") == "3")
    audit = wait(browser, "the audit row", lambda d: [
        r.text for r in d.find_elements(By.CSS_SELECTOR, "#audit tbody tr")
        if "rpm: 20 → 3" in r.text])
    assert "op" in audit[0] and "gpt-large" in audit[0] and "patch" in audit[0]
    stored = api(ui, admin, "GET", "/api/quotas/gpt-large").json()
    assert stored["quota"]["rpm"] == 3 and stored["updated_by"] == "op"

    # the next admissions obey it, and the page's bars follow them
    with ui.router() as router:
        decisions = [router.admit(100, models=["gpt-large"]) for _ in range(4)]
    assert [type(d) for d in decisions] == [Admission] * 3 + [Wait]
    assert isinstance(decisions[3], Wait) and decisions[3].reason == "rpm"
    wait(browser, "gpt-large's usage", lambda d: text_of(d, "gpt-large", ".bar .value")
         == "3 / 3")

    # the page's own script logged no error
    errors = [e["message"] for e in browser.get_log("browser")
              if e["level"] == "SEVERE" and "/llm-router/" in e["message"]]
    assert errors == [] or all("api/quotas/gpt-large" in e and "422" in e for e in errors), \
        errors  # the one refused PATCH above is the only expected failure

    browser.switch_to.default_content()
    shot = Path(os.environ.get("LLMR_SCREENSHOT") or tmp_path / "quota_ui.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
