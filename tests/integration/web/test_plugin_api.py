"""The HTTP API inside the real Airflow API server (the plugin, under /llm-router/api):
Airflow's auth manager decides, as for the quota API (read pools to read, edit pools to
spend the quotas), on the same router the server's connections name. The server and its
fixtures (``ui``, ``tokens``) are the quota UI tests' own (imported by this conftest)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.plugins.conftest import QuotaUiStack

ROOMY = {"rpm": 1000, "tpm": 1_000_000, "max_concurrency": 4}


def call(ui: QuotaUiStack, token: str | None, method: str, path: str,
         **kwargs: Any) -> httpx.Response:
    headers = dict(kwargs.pop("headers", {}))
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    root = "/llm-router" if path in ("/openapi.json", "/docs") else "/llm-router/api"
    return httpx.request(method, f"{ui.stack.api_url}{root}{path}", headers=headers,
                         timeout=15, **kwargs)


ROUTES = [("POST", "/schedule", {"estimated_tokens": 9}), ("POST", "/complete",
          {"lease_id": "m#1"}), ("POST", "/heartbeat", {"lease_id": "m#1"}),
          ("POST", "/cancel", {"request_id": "r"}), ("GET", "/advice", None),
          ("GET", "/openapi.json", None), ("GET", "/docs", None)]


def test_every_route_needs_an_airflow_user(ui: QuotaUiStack) -> None:
    for method, path, body in ROUTES:
        response = call(ui, None, method, path, json=body)
        assert response.status_code == 401, (method, path, response.text)
    assert call(ui, "not-a-jwt", "POST", "/schedule", json={"estimated_tokens": 9}) \
        .status_code in (401, 403)


def test_a_viewer_reads_advice_but_cannot_spend_the_quotas(
        ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    with ui.router() as router:
        router.set_quota("m", ROOMY)
        viewer = tokens["viewer"]
        assert call(ui, viewer, "GET", "/advice").status_code == 200
        assert call(ui, viewer, "GET", "/openapi.json").json()["paths"]["/api/schedule"]
        for method, path, body in ROUTES[:4]:
            response = call(ui, viewer, method, path, json=body)
            assert response.status_code == 403, (path, response.text)
            assert "permission to edit pools" in response.json()["detail"]
        assert router.stats().models["m"].requests == 0


def test_an_op_schedules_and_completes_on_the_servers_router(
        ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    with ui.router() as router:
        router.set_quota("m", {**ROOMY, "max_concurrency": 1})
        op = tokens["op"]
        admitted = call(ui, op, "POST", "/schedule", json={"estimated_tokens": 50,
                                                           "request_id": "p-1"})
        assert admitted.status_code == 200, admitted.text
        lease = admitted.json()["lease_id"]
        assert router.stats().models["m"].in_flight == 1  # the server's namespace
        retry = call(ui, op, "POST", "/schedule", json={"estimated_tokens": 50,
                                                        "request_id": "p-1"}).json()
        assert retry["lease_id"] == lease and retry["reused"] is True
        assert call(ui, op, "POST", "/schedule", json={"estimated_tokens": 50}) \
            .json()["status"] == "wait"
        assert call(ui, op, "POST", "/heartbeat", json={"lease_id": lease}).status_code == 200
        done = call(ui, tokens["admin"], "POST", "/complete", json={
            "lease_id": lease, "usage": {"input_tokens": 30, "output_tokens": 5}})
        assert done.json()["status"] == "released"
        stats = router.stats().models["m"]
        assert (stats.in_flight, stats.tokens) == (0, 35)
        bad = call(ui, op, "POST", "/schedule", json={"estimated_tokens": -1})
        assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "estimated_tokens"


def test_cookie_writes_need_the_csrf_header(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    with ui.router() as router:
        router.set_quota("m", ROOMY)
        url = f"{ui.stack.api_url}/llm-router/api/schedule"
        with httpx.Client(cookies={"_token": tokens["op"]}, timeout=15) as browser:
            forged = browser.post(url, json={"estimated_tokens": 9})
            assert forged.status_code == 403 and "X-Requested-With" in forged.text
            same_site = browser.post(url, json={"estimated_tokens": 9},
                                     headers={"X-Requested-With": "fetch"})
            assert same_site.status_code == 200, same_site.text
        assert router.stats().models["m"].requests == 1
