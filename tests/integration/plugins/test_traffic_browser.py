"""The Traffic chart of the LLM Quotas page, in headless Chromium through the real Airflow UI.

Real traffic goes through the router client for about half a minute (a drain's pattern:
admit what the quota lets in, settle each call after its latency, a 429 and a run of errors
that open the breaker, a quota change half way); the page's chart then shows, bucket by
bucket, what the engine recorded: the uPlot instance holds those series, the canvas has the
lines drawn, and the summary counts what the test itself settled. Skipped without Chromium
like the quota page's browser test. ``LLMR_SCREENSHOT_DIR=docs/img`` re-makes
``docs/img/traffic.png``.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from airflow_llm_router.engine import Completion, RouterClient
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings
from tests.conftest import REDIS_URL
from tests.integration.plugins.conftest import QuotaUiStack, api
from tests.integration.plugins.test_quota_page_browser import (  # also skips without Chromium
    browser,  # noqa: F401 (the fixture)
    log_in,
    open_quotas_page,
    wait,
)

MODEL = "gpt-small"
#: a 10 s window, so half a minute of traffic fills several windows and buckets
QUOTA = {"rpm": 40, "tpm": 24_000, "max_concurrency": 6, "window_s": 10}
#: how long traffic runs (``LLMR_TRAFFIC_S``: longer for the docs' picture); the 429, the
#: errors and the quota change come at a quarter, a half and 70 % of it
TRAFFIC_S = float(os.environ.get("LLMR_TRAFFIC_S") or 32)


def drive_traffic(ui: QuotaUiStack, admin: str) -> Counter[str]:
    """Admit what the quota lets in and settle each call after a drawn latency, like a
    drain; the first call to end after a quarter of the time answers 429, the first two
    after half of it fail (the breaker opens: 2 failures in a row), and the rpm is lowered
    to 30 at 70 % of it. Returns what was admitted and settled, counted here."""
    rng = random.Random(16)
    done: Counter[str] = Counter()
    settings = RouterSettings(namespace=ui.namespace, breaker_failures=2,
                              breaker_open_ms=3000, cooldown_ms=500)
    router = RouterClient.from_url(REDIS_URL, settings)
    in_flight: list[tuple[float, Admission]] = []
    plan = {TRAFFIC_S / 4: ["rate_limited"], TRAFFIC_S / 2: ["error", "error"]}
    outcomes: list[str] = []  # how the next calls to end answer
    lowered = False
    start = time.monotonic()
    try:
        while (now := time.monotonic() - start) < TRAFFIC_S:
            for at in [t for t in plan if now >= t]:
                outcomes += plan.pop(at)
            if not lowered and now >= TRAFFIC_S * 0.7:
                assert api(ui, admin, "PATCH", f"/api/quotas/{MODEL}",
                           json={"rpm": 30}).status_code == 200
                lowered = True
            for decision in router.admit_many([AdmitRequest(600, models=[MODEL])
                                               for _ in range(4)]):
                if isinstance(decision, Admission):
                    done["admitted"] += 1
                    in_flight.append((time.monotonic() + rng.uniform(0.4, 1.6), decision))
            due = [x for x in in_flight if x[0] <= time.monotonic()]
            in_flight = [x for x in in_flight if x not in due]
            settle = []
            for _, lease in due:
                outcome = outcomes.pop(0) if outcomes else "ok"
                settle.append(Completion(lease.lease_id, 350, rng.randint(80, 300), outcome,
                                         0.5 if outcome == "rate_limited" else None))
                done[outcome] += 1
            router.complete_many(settle)
            time.sleep(0.05)  # a drain's pace between admission rounds, not a wait for state
        router.complete_many([Completion(lease.lease_id, 350, 100) for _, lease in in_flight])
        done["ok"] += len(in_flight)
    finally:
        router.close()
    return done


def chart_state(driver: WebDriver) -> dict[str, Any]:
    """What the page's chart holds: the model, the API document, uPlot's data and series
    labels, and how many canvas pixels carry the requests line's colour."""
    return driver.execute_script("""
        const s = window.llmTraffic, u = s && s.chart;
        if (!u || !s.doc) return null;
        const c = u.ctx.canvas, img = u.ctx.getImageData(0, 0, c.width, c.height).data;
        let blue = 0;  // the requests line: #017cee
        for (let k = 0; k < img.length; k += 4) {
          if (Math.abs(img[k] - 1) < 30 && Math.abs(img[k + 1] - 124) < 30
              && Math.abs(img[k + 2] - 238) < 30 && img[k + 3] > 200) blue += 1;
        }
        return {model: s.doc.model, doc: s.doc, data: u.data,
                labels: u.series.map((x) => x.label), width: c.width, height: c.height,
                blue: blue, summary: document.getElementById("traffic-summary").textContent};
    """)


def per_mille(value: int, limit: int) -> int:
    """``value / limit`` in tenths of a percent, rounded as the chart's ``Math.round`` does:
    halves up (Python's ``round`` sends 892.5 to 892, the chart to 893)."""
    return math.floor(1000 * value / limit + 0.5)


def test_the_chart_shows_the_traffic_the_engine_recorded(
        ui: QuotaUiStack, tokens: dict[str, str], browser: WebDriver,  # noqa: F811
        tmp_path: Path) -> None:
    admin = tokens["admin"]
    assert api(ui, admin, "PUT", f"/api/quotas/{MODEL}", json=QUOTA).status_code == 201
    assert api(ui, admin, "PUT", "/api/quotas/gpt-large",
               json={"rpm": 20, "tpm": 90_000, "max_concurrency": 4}).status_code == 201
    done = drive_traffic(ui, admin)
    assert done["admitted"] > 60 and done["rate_limited"] == 1 and done["error"] == 2

    log_in(browser, ui, "viewer")
    open_quotas_page(browser)
    select = wait(browser, "the model choice", lambda d: d.find_element(By.ID, "traffic-model")
                  if len(d.find_elements(By.CSS_SELECTOR, "#traffic-model option")) == 2
                  else None)
    Select(select).select_by_value(MODEL)
    minutes = 5 if TRAFFIC_S < 240 else 15
    Select(browser.find_element(By.ID, "traffic-minutes")).select_by_value(str(minutes))
    state = wait(browser, f"the chart of gpt-small over {minutes} minutes", lambda d: (
        s := chart_state(d)) and s["model"] == MODEL and s["doc"]["span_ms"] == minutes * 60_000
        and s["blue"] > 0 and s)

    # the chart holds what the engine recorded, bucket by bucket
    with ui.router() as router:
        recorded = router.history([MODEL], minutes=minutes).models[MODEL]
    series = state["doc"]["series"]
    assert len(state["data"][0]) == len(series["t"]) == minutes * 6  # 10 s buckets
    by_start = {b.start_ms / 1000: b for b in recorded.buckets}
    drawn = 0
    for i, t in enumerate(series["t"]):
        bucket = by_start.get(t)
        requests_pct, tokens_pct, conc_pct = (state["data"][k][i] for k in (1, 2, 3))
        if bucket is None or bucket.requests is None:
            continue
        drawn += 1
        assert requests_pct == per_mille(bucket.requests, bucket.rpm) / 10
        assert tokens_pct == per_mille(bucket.tokens, bucket.tpm) / 10
        assert conc_pct == per_mille(bucket.in_flight, bucket.max_concurrency) / 10
        # admission never let the window exceed the target (it held entries admitted
        # under the rpm of 40 for one window after the rpm was lowered to 30)
        assert bucket.requests <= QUOTA["rpm"]
    assert drawn >= 3  # half a minute spans at least three 10 s buckets
    assert max(x or 0 for x in state["data"][1]) >= 50  # a drain fills its window
    # markers: the 429 and the errors as dots, the breaker opening in the document
    assert sum(x or 0 for x in state["data"][6]) == done["rate_limited"] == 1
    assert sum(x or 0 for x in state["data"][7]) == done["error"] == 2
    assert sum(x or 0 for x in series["breaker_opened"]) == 1
    # the targets in force: the rpm lowered half way, and the learned effective limit
    assert {x for x in series["rpm"] if x is not None} == {40, 30}
    assert any(x is not None for x in state["data"][4]), "no effective limit drawn"
    assert state["labels"][1:6] == ["requests / rpm", "tokens / tpm",
                                    "in flight / max concurrency", "effective limit", "target"]
    assert f"{done['admitted']} admissions" in state["summary"].replace(",", "")
    assert "1 429 ·" in state["summary"] and "2 errors" in state["summary"]
    assert "1 breaker opening" in state["summary"]

    # the legend at the last bucket with a learned limit, for the screenshot: hover it
    hovered = max(i for i, x in enumerate(series["eff_rpm"]) if x is not None)
    browser.execute_script("""
        const u = window.llmTraffic.chart, i = arguments[0];
        u.setCursor({left: u.valToPos(u.data[0][i], "x"), top: u.valToPos(50, "y")});
        document.getElementById("traffic").scrollIntoView({block: "start"});
    """, hovered)
    legend = wait(browser, "the legend's values", lambda d: [
        e.text for e in d.find_elements(By.CSS_SELECTOR, "#traffic-chart .u-legend .u-value")
        if "/" in e.text])
    assert any(f"{series['requests'][hovered]} / " in v for v in legend), legend

    # a click on a model's name in the quota table shows that model's traffic
    browser.find_element(By.CSS_SELECTOR, "tr[data-model='gpt-large'] td.model").click()
    wait(browser, "the chart of gpt-large", lambda d: (s := chart_state(d))
         and s["model"] == "gpt-large")
    assert browser.find_element(By.ID, "traffic-model").get_attribute("value") == "gpt-large"
    Select(browser.find_element(By.ID, "traffic-model")).select_by_value(MODEL)
    wait(browser, "the chart of gpt-small again", lambda d: (s := chart_state(d))
         and s["model"] == MODEL and s["blue"] > 0)
    browser.execute_script("""
        const u = window.llmTraffic.chart, i = arguments[0];
        u.setCursor({left: u.valToPos(u.data[0][i], "x"), top: u.valToPos(50, "y")});
        document.getElementById("traffic").scrollIntoView({block: "start"});
    """, hovered)

    errors = [e["message"] for e in browser.get_log("browser")
              if e["level"] == "SEVERE" and "/llm-router/" in e["message"]]
    assert errors == [], errors
    folder = Path(os.environ.get("LLMR_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    browser.switch_to.default_content()
    assert browser.save_screenshot(str(folder / "traffic.png"))
    assert (folder / "traffic.png").stat().st_size > 10_000

    # dark mode: the chart is drawn again in the page's dark colours
    browser.switch_to.frame(browser.find_element(By.CSS_SELECTOR, "iframe[src*='/llm-router/ui']"))

    def axis_colour(d: WebDriver) -> str:
        return str(d.execute_script(
            "const u = window.llmTraffic.chart; return u ? u.axes[0].stroke(u, 0) : '';"))

    assert axis_colour(browser) == "#1a202c"  # quotas.css --fg, light
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        wait(browser, "the chart in dark colours", lambda d: axis_colour(d) == "#e2e8f0")
        browser.execute_script("""  // the redrawn chart's legend at the same bucket
            const u = window.llmTraffic.chart, i = arguments[0];
            u.setCursor({left: u.valToPos(u.data[0][i], "x"), top: u.valToPos(50, "y")});
        """, hovered)
        browser.switch_to.default_content()
        assert browser.save_screenshot(str(folder / "traffic_dark.png"))
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
