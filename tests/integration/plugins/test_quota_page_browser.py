"""The LLM Quotas page in headless Chromium, through the real Airflow UI.

Logs in, opens "LLM Quotas" from the Admin menu (the page is an iframe inside the UI),
sees a validation message next to a bad value, edits a model's rpm, sees the new value and
its audit row, and checks that the next admissions obey the new rpm and that the usage bars
follow them. Needs Debian's ``chromium`` and ``chromium-driver``: without them the test is
skipped, unless ``LLMR_REQUIRE_BROWSER=1`` (CI) makes that a failure.
``LLMR_SCREENSHOT_DIR=docs/img`` re-makes the docs' pictures of the page (light and dark);
``LLMR_SCREENSHOT=<file>`` saves the first test's light one there instead.
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
from selenium.common.exceptions import (  # noqa: E402
    StaleElementReferenceException,
    WebDriverException,
)
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
    """Wait until ``condition`` holds. A look that lands while the page is navigating (the
    UI's own redirect, e.g. to the login form: "aborted by navigation") counts as "not yet"
    and is looked at again on the new page, as does an element the page replaced between
    finding it and reading it (the page re-renders its tables on each refresh: "stale
    element"); any other error is raised."""
    def polled(d: WebDriver) -> Any:
        try:
            return condition(d)
        except StaleElementReferenceException:
            return False
        except WebDriverException as err:
            if "aborted by navigation" in str(err):
                return False
            raise

    return WebDriverWait(driver, TIMEOUT_S, poll_frequency=0.1).until(polled, message=what)


def log_in(driver: WebDriver, ui: QuotaUiStack, user: str) -> None:
    driver.get(ui.stack.api_url + "/")
    wait(driver, "the login form", ec.presence_of_element_located((By.NAME, "username")))
    driver.find_element(By.NAME, "username").send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(ui.passwords[user])
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    def home(d: WebDriver) -> bool:
        try:
            return "/auth/login" not in d.current_url and bool(
                d.find_elements(By.XPATH, "//button[normalize-space()='Admin']"))
        except WebDriverException:  # "aborted by navigation": the login redirect is under way
            return False

    wait(driver, "the Airflow home page", home)


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

    shot = Path(os.environ.get("LLMR_SCREENSHOT") or screenshot_path(tmp_path, "quota_ui.png"))
    shot.parent.mkdir(parents=True, exist_ok=True)
    viewport_shot(browser, None, shot)


# --- the backlog panel, adding and deleting models, search and paging ----------------------

from airflow_llm_router.exceptions import ImpossibleRequestError  # noqa: E402
from airflow_llm_router.quotas import QuotaStore  # noqa: E402
from airflow_llm_router.store import TaskStore  # noqa: E402
from tests.conftest import POSTGRES_DSN  # noqa: E402
from tests.integration.web.backlog_fixtures import kill, tasks  # noqa: E402, F401


def screenshot_path(tmp_path: Path, name: str) -> Path:
    """``$LLMR_SCREENSHOT_DIR/<name>`` (``docs/img`` re-makes the docs' pictures), else a
    temporary file."""
    folder = Path(os.environ.get("LLMR_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def viewport_shot(driver: WebDriver, element_id: str | None, path: Path,
                  dark: bool = True) -> None:
    """Scroll the page (inside the UI's iframe) to ``element_id`` (None: its top) and save
    the whole window, Airflow's navigation included; with ``dark``, then the same in dark
    colours as ``<name>_dark.png`` (the page and Airflow's UI follow the system's scheme)."""
    driver.execute_script("const e = arguments[0] && document.getElementById(arguments[0]);"
                          "if (e) e.scrollIntoView(); else window.scrollTo(0, 0);", element_id)
    driver.switch_to.default_content()
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    frame = driver.find_element(By.CSS_SELECTOR, "iframe[src*='/llm-router/ui']")
    driver.switch_to.frame(frame)
    if not dark:
        return
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        wait(driver, "the page in dark colours", lambda d: d.execute_script(
            "return getComputedStyle(document.body).backgroundColor") == "rgb(26, 32, 44)")
        driver.switch_to.default_content()
        dark_path = path.with_name(f"{path.stem}_dark{path.suffix}")
        assert driver.save_screenshot(str(dark_path))
        assert dark_path.stat().st_size > 10_000
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        driver.switch_to.frame(frame)


# Read in one script call: the panel redraws every few seconds, so an element found by
# one WebDriver call may be gone by the next.
def card(driver: WebDriver, name: str) -> str:
    return str(driver.execute_script(
        "const v = document.querySelector(`[data-card='${arguments[0]}'] .value`);"
        "return v ? v.textContent : '';", name))


def dead_rows(driver: WebDriver) -> list[int]:
    return [int(i) for i in driver.execute_script(
        "return [...document.querySelectorAll('#dead tbody tr')].map(r => r.dataset.task);")]


def accept_confirm(driver: WebDriver) -> str:
    """Confirm the page's inline question (the UI's sandboxed iframe blocks confirm())."""
    box = wait(driver, "the confirmation", ec.visibility_of_element_located(
        (By.CSS_SELECTOR, ".confirm")))
    text = str(box.text)
    box.find_element(By.CSS_SELECTOR, "button.danger").click()
    return text


def filter_dead(driver: WebDriver, error: str) -> None:
    box = driver.find_element(By.CSS_SELECTOR, "#dead-filter input[name='error']")
    box.clear()
    box.send_keys(error)
    driver.find_element(By.CSS_SELECTOR, "#dead-filter button[type=submit]").click()


def await_dead_refreshes(driver: WebDriver, count: int) -> None:
    """Wait until the page has had ``count`` more answers to its dead-letter question; the
    page asks again only after drawing an answer, so all but the last are drawn."""
    start = driver.execute_script("""
        if (window.deadAnswers === undefined) {
          window.deadAnswers = 0;
          const plain = window.fetch;
          window.fetch = async (...args) => {
            const answer = await plain(...args);
            if (String(args[0]).startsWith("api/backlog/dead?")) window.deadAnswers += 1;
            return answer;
          };
        }
        return window.deadAnswers;""")
    wait(driver, f"{count} refreshes of the dead list",
         lambda d: d.execute_script("return window.deadAnswers;") >= start + count + 1)


def test_backlog_panel_shows_dead_tasks_and_requeues_them_until_solved(
        ui: QuotaUiStack, browser: WebDriver, tasks: TaskStore,  # noqa: F811
        tmp_path: Path) -> None:
    overloaded = kill(tasks, 3, error="HTTP 503 from the backend: overloaded",
                      kind="summarise")
    timeouts = kill(tasks, 2, error="Timeout after 120 s on gpt-large", kind="classify",
                    priority="hot")
    tasks.enqueue([f"waiting prompt {i}" for i in range(4)])
    with ui.router() as router:  # 2 requests per minute: the 4 pending need 2 minutes at best
        router.set_quota("gpt-small", {"rpm": 2, "tpm": 100_000, "max_concurrency": 4})

    log_in(browser, ui, "op")
    open_quotas_page(browser)
    wait(browser, "5 dead tasks", lambda d: card(d, "Dead") == "5")
    assert card(browser, "Pending") == "4"
    eta = str(browser.execute_script(
        "return document.querySelector(\"[data-card='ETA'] small\").textContent;"))
    assert eta == "nothing solved lately · \u2265 2 min at quota capacity", eta
    wait(browser, "the dead-letter list", lambda d: sorted(dead_rows(d))
         == sorted(overloaded + timeouts))
    first = str(browser.execute_script(
        f"return document.querySelector(\"tr[data-task='{timeouts[-1]}']\").innerText;"))
    assert "Timeout after 120 s" in first and "classify" in first and "hot" in first
    assert "prompt" not in browser.find_element(By.ID, "backlog").text

    # requeue all matching a filter: the two timeouts go back to pending
    filter_dead(browser, "timeout")
    wait(browser, "the filtered list", lambda d: sorted(dead_rows(d)) == timeouts)
    browser.find_element(By.ID, "requeue-matching").click()
    assert "Requeue all 2 dead tasks matching the filter" in accept_confirm(browser)
    wait(browser, "the requeue message", lambda d: d.find_element(
        By.ID, "requeue-message").text.startswith("Requeued 2"))
    wait(browser, "3 dead, 6 pending", lambda d: (card(d, "Dead"), card(d, "Pending"))
         == ("3", "6"))

    # requeue one selected task
    filter_dead(browser, "")
    wait(browser, "the unfiltered list", lambda d: sorted(dead_rows(d)) == overloaded)
    # the list refreshes every few seconds; the row under the user stays the same row
    box = browser.find_element(By.CSS_SELECTOR, f"tr[data-task='{overloaded[0]}'] input")
    await_dead_refreshes(browser, 1)
    box.click()  # a row redrawn by the refresh would be stale here
    await_dead_refreshes(browser, 1)
    assert browser.execute_script(
        "return document.activeElement === arguments[0] && arguments[0].checked;", box)
    assert browser.find_element(By.ID, "requeue-selected").text == "Requeue selected (1)"
    browser.find_element(By.ID, "requeue-selected").click()
    wait(browser, "the second requeue", lambda d: d.find_element(
        By.ID, "requeue-message").text.startswith("Requeued 1"))
    wait(browser, "2 dead", lambda d: card(d, "Dead") == "2")
    for task_id in [*timeouts, overloaded[0]]:
        row_ = tasks.get(task_id)
        assert row_ is not None and (row_.status, row_.attempts) == ("pending", 0)

    # a solver claims and solves everything pending, requeued tasks included
    claimed = tasks.claim(100, worker_id="browser-test-solver", claim_ttl_s=60)
    assert {t.id for t in claimed} >= {*timeouts, overloaded[0]} and len(claimed) == 7
    assert claimed[0].id in timeouts  # the hot lane first
    for task in claimed:
        assert tasks.complete(task.id, task.claim_token, answer="ok", model="gpt-small")
    wait(browser, "7 solved, none pending", lambda d: (card(d, "Solved"), card(d, "Pending"))
         == ("7", "0"))
    assert card(browser, "Throughput") == "1.4 / min"
    assert card(browser, "ETA") == "—"
    for task_id in [*timeouts, overloaded[0]]:
        row_ = tasks.get(task_id)
        assert row_ is not None and row_.status == "solved"
    log = tasks.admin.requeue_log()
    assert [(e.actor, e.requeued) for e in log] == [("op", 1), ("op", 2)]
    shown = wait(browser, "the requeue log", lambda d: d.execute_script(
        "const r = [...document.querySelectorAll('#requeues tbody tr')].map(t => t.innerText);"
        "return r.length === 2 ? r : null;"))
    assert "op" in shown[0] and "1 task(s) by id" in shown[0]
    assert "all matching error \u201ctimeout\u201d" in shown[1]
    viewport_shot(browser, "backlog", screenshot_path(tmp_path, "backlog.png"))


def test_add_a_model_on_the_page_makes_it_admissible_and_delete_removes_it(
        ui: QuotaUiStack, tokens: dict[str, str], browser: WebDriver, tmp_path: Path) -> None:
    api(ui, tokens["admin"], "PUT", "/api/quotas/gpt-small",
        json={"rpm": 60, "tpm": 200_000, "max_concurrency": 16})
    with ui.router() as router, pytest.raises(ImpossibleRequestError, match="has no quota"):
        router.admit(100, models=["gpt-new"])

    log_in(browser, ui, "op")
    open_quotas_page(browser)
    row(browser, "gpt-small")
    browser.find_element(By.ID, "add-model-toggle").click()
    form = wait(browser, "the add form's fields", ec.visibility_of_element_located(
        (By.CSS_SELECTOR, "#add-model input[name='max_concurrency']")))
    assert form is not None
    fields = {e.get_attribute("name") for e in browser.find_elements(
        By.CSS_SELECTOR, "#add-model input")}
    assert {"model", "rpm", "tpm", "max_concurrency", "weight", "enabled", "window_s"} <= fields

    def fill(values: dict[str, str]) -> None:
        for name, value in values.items():
            box = browser.find_element(By.CSS_SELECTOR, f"#add-model input[name='{name}']")
            box.clear()
            box.send_keys(value)
        browser.find_element(By.CSS_SELECTOR, "#add-model button[type=submit]").click()

    # refused: the message names the field, inline; nothing is stored
    fill({"model": "gpt-new", "rpm": "0", "tpm": "50000", "max_concurrency": "4"})
    message = wait(browser, "the rpm message", lambda d: d.find_element(
        By.CSS_SELECTOR, "#add-model .field-error[data-field='rpm']").text)
    assert "at least 1" in message
    fill({"model": "bad name"})
    wait(browser, "the name message", lambda d: d.find_element(
        By.CSS_SELECTOR, "#add-model .field-error[data-field='model']").text.startswith(
        "not a valid model name: use 1-128 letters"))
    viewport_shot(browser, "models-title", screenshot_path(tmp_path, "add_model.png"))
    assert api(ui, tokens["admin"], "GET", "/api/quotas/gpt-new").status_code == 404

    fill({"model": "gpt-new", "rpm": "30"})
    wait(browser, "Added", lambda d: d.find_element(By.ID, "add-model-message").text
         == "Added gpt-new")
    row(browser, "gpt-new")
    stored = api(ui, tokens["admin"], "GET", "/api/quotas/gpt-new").json()
    assert stored["quota"]["rpm"] == 30 and stored["quota"]["tpm"] == 50_000
    assert stored["updated_by"] == "op"
    with ui.router() as router:
        admitted = router.admit(100, models=["gpt-new"])
        assert isinstance(admitted, Admission) and admitted.model == "gpt-new"
        router.complete(admitted.lease_id, input_tokens=60, output_tokens=40)

    # delete it: confirm, the row goes, the model admits nothing
    row(browser, "gpt-new").find_element(By.CSS_SELECTOR, "button.delete").click()
    assert "Delete the quota of gpt-new?" in accept_confirm(browser)
    wait(browser, "the row removed", lambda d: not d.find_elements(
        By.CSS_SELECTOR, "tr[data-model='gpt-new']"))
    assert api(ui, tokens["admin"], "GET", "/api/quotas/gpt-new").status_code == 404
    with ui.router() as router, pytest.raises(ImpossibleRequestError, match="has no quota"):
        router.admit(100, models=["gpt-new"])
    audit = api(ui, tokens["admin"], "GET", "/api/audit?model=gpt-new").json()
    assert [(a["action"], a["actor"]) for a in audit] == [("delete", "op"), ("create", "op")]


def test_the_quota_table_filters_and_pages_1000_models(
        ui: QuotaUiStack, browser: WebDriver) -> None:
    quota = {"rpm": 600, "tpm": 200_000, "max_concurrency": 16}
    with ui.router() as router:
        QuotaStore(POSTGRES_DSN, router, schema=ui.schema).load(
            {f"team-{i // 100}/model-{i:04d}": quota for i in range(1000)}, actor="test")
    log_in(browser, ui, "viewer")
    open_quotas_page(browser)
    info = (By.ID, "models-page-info")
    wait(browser, "the first page", lambda d: d.find_element(*info).text == "1\u201350 of 1,000")
    shown = browser.find_elements(By.CSS_SELECTOR, "#quotas tbody tr")
    assert [r.get_attribute("data-model") for r in shown][:2] == [
        "team-0/model-0000", "team-0/model-0001"] and len(shown) == 50
    browser.find_element(By.CSS_SELECTOR, "#models-pager [data-page=next]").click()
    wait(browser, "the second page", lambda d: d.find_element(*info).text == "51\u2013100 of 1,000")
    row(browser, "team-0/model-0050")
    search = browser.find_element(By.ID, "model-search")
    search.send_keys("MODEL-09")
    wait(browser, "the filtered page", lambda d: d.find_element(*info).text
         == "1\u201350 of 100 matching (1,000 in all)")
    search.send_keys("99")
    wait(browser, "one match", lambda d: d.find_element(*info).text
         == "1\u20131 of 1 matching (1,000 in all)")
    assert [r.get_attribute("data-model") for r in browser.find_elements(
        By.CSS_SELECTOR, "#quotas tbody tr")] == ["team-9/model-0999"]


def controls_outside(driver: WebDriver) -> list[str]:
    """The page's visible controls (inside the UI's iframe) that do not lie wholly inside
    the browser's viewport, and the number fields too narrow for their value."""
    return list(driver.execute_script("""
        const frame = window.frameElement.getBoundingClientRect();
        const width = window.top.innerWidth;
        const bad = [];
        for (const e of document.querySelectorAll("input, button, select")) {
          const r = e.getBoundingClientRect();
          if (r.width === 0 && r.height === 0) continue;  // not shown
          const name = e.getAttribute("aria-label") || e.name || e.id || e.textContent;
          if (frame.left + r.left < 0 || frame.left + r.right > width) {
            bad.push(`${name}: ${Math.round(frame.left + r.left)}-`
                     + `${Math.round(frame.left + r.right)} px of ${width}`);
          }
          if (e.type === "number" && e.scrollWidth > e.clientWidth) {
            bad.push(`${name}: ${e.value} cut (${e.scrollWidth} > ${e.clientWidth} px)`);
          }
        }
        return bad;"""))


def test_at_1280x800_every_control_is_on_screen_and_budgets_show_badges(
        ui: QuotaUiStack, tokens: dict[str, str], browser: WebDriver, tmp_path: Path) -> None:
    priced = {"input_micro_usd_per_mtok": 1_000_000, "output_micro_usd_per_mtok": 1_000_000,
              "budget_micro_usd": 10_000}
    admin = tokens["admin"]
    for model, quota in {
            "team-research/very-long-model-name-v2": {
                "rpm": 12_345_678, "tpm": 1_000_000_000, "max_concurrency": 99_999_999,
                "weight": 12.5, **priced, "budget_micro_usd": 9_876_543_210},
            "spent-model": {"rpm": 600, "tpm": 10_000_000, "max_concurrency": 16, **priced},
            "nearly-spent": {"rpm": 600, "tpm": 10_000_000, "max_concurrency": 16, **priced},
            }.items():
        answer = api(ui, admin, "PUT", f"/api/quotas/{model}", json=quota)
        assert answer.status_code == 201, answer.text
    with ui.router() as router:  # $1 per 1M tokens: a token costs a micro-dollar
        for model, used in (("spent-model", 20_000), ("nearly-spent", 9_600)):
            lease = router.admit(10, models=[model])
            assert isinstance(lease, Admission), lease
            router.complete(lease.lease_id, input_tokens=used, output_tokens=0)

    log_in(browser, ui, "admin")
    open_quotas_page(browser)
    badge = "[data-budget]"
    wait(browser, "the budget badges", lambda d: (
        text_of(d, "spent-model", badge), text_of(d, "nearly-spent", badge))
        == ("over budget", "budget 96 % spent"))
    assert "bad" in row(browser, "spent-model").find_element(
        By.CSS_SELECTOR, badge).get_attribute("class")
    assert not row(browser, "team-research/very-long-model-name-v2").find_elements(
        By.CSS_SELECTOR, badge)
    assert (row(browser, "team-research/very-long-model-name-v2").find_element(
        By.CSS_SELECTOR, "input[name='tpm']").get_attribute("value") == "1000000000")
    browser.find_element(By.ID, "add-model-toggle").click()
    wait(browser, "the add form", ec.visibility_of_element_located(
        (By.CSS_SELECTOR, "#add-model input[name='rpm']")))
    viewport_shot(browser, None, screenshot_path(tmp_path, "quota_ui_1280.png"), dark=False)
    assert controls_outside(browser) == []


def test_the_api_docs_render_from_the_package_alone(ui: QuotaUiStack, browser: WebDriver) -> None:
    log_in(browser, ui, "viewer")
    browser.get(ui.url + "/docs")
    wait(browser, "the operations listed", lambda d: len(d.find_elements(
        By.CSS_SELECTOR, ".swagger-ui .opblock")) >= 10)
    assert browser.find_element(By.CSS_SELECTOR, ".swagger-ui .servers").text.strip() \
        .startswith("/llm-router")
    # every file it loaded came from the API server: it needs no CDN, works offline
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name);")
    assert loaded and all(url.startswith(ui.stack.api_url) for url in loaded), loaded
