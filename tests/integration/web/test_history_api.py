"""The traffic history API through the real Airflow API server: what the engine recorded,
for readers, with bad input refused naming the field."""

from __future__ import annotations

from airflow_llm_router.engine import Completion
from airflow_llm_router.engine.types import Admission
from tests.integration.plugins.conftest import QuotaUiStack, api

SMALL = {"rpm": 60, "tpm": 90_000, "max_concurrency": 8}


def traffic(ui: QuotaUiStack, model: str, calls: int) -> None:
    """``calls`` admissions on ``model``; the first settled as a 429, the second as an error,
    the rest ok but two still in flight."""
    with ui.router() as router:
        leases = [router.admit(500, models=[model]) for _ in range(calls)]
        assert all(isinstance(x, Admission) for x in leases)
        outcomes = ["rate_limited", "error"] + ["ok"] * (calls - 4)
        router.complete_many([Completion(x.lease_id, 300, 100, o)  # type: ignore[union-attr]
                              for x, o in zip(leases, outcomes, strict=False)])


def test_routes_need_a_user(ui: QuotaUiStack) -> None:
    for path in ("/api/history", "/api/models/m/history"):
        assert api(ui, None, "GET", path).status_code == 401, path


def test_a_viewer_reads_a_models_traffic(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    assert api(ui, tokens["admin"], "PUT", "/api/quotas/openai/gpt-4o",
               json=SMALL).status_code == 201
    traffic(ui, "openai/gpt-4o", 7)
    response = api(ui, tokens["viewer"], "GET", "/api/models/openai/gpt-4o/history",
                   params={"minutes": 5})
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["model"] == "openai/gpt-4o" and doc["bucket_ms"] == 10_000
    assert doc["span_ms"] == 300_000
    assert doc["quota"] == {"rpm": 60, "tpm": 90_000, "max_concurrency": 8, "window_s": 60.0}
    assert doc["totals"] == {"admitted": 7, "rate_limited": 1, "errors": 1,
                             "breaker_opened": 0}
    series = doc["series"]
    assert len(series["t"]) == 30  # every 10 s bucket of 5 minutes, oldest first
    assert series["t"] == sorted(series["t"])
    assert all(len(column) == 30 for column in series.values())
    assert sum(x or 0 for x in series["admitted"]) == 7
    assert max(x or 0 for x in series["requests"]) == 7  # the window's peak, against rpm
    assert max(x or 0 for x in series["in_flight"]) == 7
    assert {x for x in series["rpm"] if x is not None} == {60}
    assert series["requests"][0] is None  # nothing recorded 5 minutes ago


def test_every_model_or_those_named(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    admin = tokens["admin"]
    for name in ("a", "b", "c"):
        assert api(ui, admin, "PUT", f"/api/quotas/{name}", json=SMALL).status_code == 201
    traffic(ui, "b", 5)
    every = api(ui, admin, "GET", "/api/history").json()
    assert sorted(every["models"]) == ["a", "b", "c"]
    assert every["models"]["b"]["totals"]["admitted"] == 5
    assert every["models"]["a"]["totals"]["admitted"] == 0
    assert every["models"]["a"]["quota"]["rpm"] == 60  # an idle model still shows its target
    assert len(every["models"]["a"]["series"]["t"]) == 360  # one hour by default
    named = api(ui, admin, "GET", "/api/history", params=[("model", "b"), ("model", "c"),
                                                          ("minutes", "1")]).json()
    assert sorted(named["models"]) == ["b", "c"] and named["span_ms"] == 60_000
    # every model comes in pages (a thousand models' hour would be tens of MB)
    assert (every["total"], every["offset"], every["limit"]) == (3, 0, 50)
    first = api(ui, admin, "GET", "/api/history", params={"limit": 2}).json()
    rest = api(ui, admin, "GET", "/api/history", params={"limit": 2, "offset": 2}).json()
    assert list(first["models"]) == ["a", "b"] and list(rest["models"]) == ["c"]
    assert first["total"] == rest["total"] == 3


def test_bad_input_is_422_naming_the_field(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    viewer = tokens["viewer"]
    for path in ("/api/history", "/api/models/m/history"):
        for minutes in ("0", "61", "soon"):
            response = api(ui, viewer, "GET", path, params={"minutes": minutes})
            assert response.status_code == 422, (path, minutes, response.text)
            assert [d["field"] for d in response.json()["detail"]] == ["minutes"]
    for name, value in (("limit", "0"), ("limit", "101"), ("offset", "-1")):
        response = api(ui, viewer, "GET", "/api/history", params={name: value})
        assert response.status_code == 422, (name, value)
        assert [d["field"] for d in response.json()["detail"]] == [name]
    response = api(ui, viewer, "GET", "/api/history", params={"model": "no spaces"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["field"] == "model"
    assert "model name" in response.json()["detail"][0]["msg"]
    response = api(ui, viewer, "GET", "/api/models/ghost/history")
    assert response.status_code == 404 and "ghost" in response.json()["detail"]


def test_the_page_serves_its_chart_and_the_vendored_library(
        ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    viewer = tokens["viewer"]
    page = api(ui, viewer, "GET", "/ui")
    assert 'id="traffic-chart"' in page.text
    assert 'src="ui/vendor/uPlot.iife.min.js"' in page.text  # served here: no CDN
    for name, kind, marker in [("traffic.js", "javascript", "llmTraffic"),
                               ("vendor/uPlot.iife.min.js", "javascript", "uPlot"),
                               ("vendor/uPlot.min.css", "css", ".uplot"),
                               ("vendor/uPlot.LICENSE", "plain", "MIT License")]:
        response = api(ui, viewer, "GET", f"/ui/{name}")
        assert response.status_code == 200, name
        assert kind in response.headers["content-type"] and marker in response.text, name
        assert api(ui, None, "GET", f"/ui/{name}").status_code == 401, name
    for name in ("vendor/other.js", "vendor/%2e%2e/quotas.js", "history.py"):
        assert api(ui, viewer, "GET", f"/ui/{name}").status_code == 404, name
