"""The quota API through the real Airflow API server: auth, validation, audit, effect."""

from __future__ import annotations

import httpx
import pytest

from airflow_llm_router.engine.types import Admission, Wait
from tests.integration.plugins.conftest import QuotaUiStack, api

SMALL = {"rpm": 60, "tpm": 90_000, "max_concurrency": 8}


def test_every_route_needs_a_user(ui: QuotaUiStack) -> None:
    for method, path in [("GET", "/api/quotas"), ("GET", "/api/quotas/m"),
                         ("PUT", "/api/quotas/m"), ("PATCH", "/api/quotas/m"),
                         ("DELETE", "/api/quotas/m"), ("GET", "/api/stats"),
                         ("GET", "/api/advice"), ("GET", "/api/audit"), ("GET", "/ui"),
                         ("GET", "/ui/quotas.js"), ("GET", "/openapi.json"), ("GET", "/docs")]:
        response = api(ui, None, method, path, json=SMALL if method in ("PUT", "PATCH") else None)
        assert response.status_code == 401, (method, path, response.text)
    # a token that does not verify: Airflow's own answer is 403 ("Invalid JWT token")
    assert api(ui, "not-a-token", "GET", "/api/quotas").status_code == 403


def test_a_viewer_reads_but_cannot_write(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    assert api(ui, tokens["admin"], "PUT", "/api/quotas/m", json=SMALL).status_code == 201
    viewer = tokens["viewer"]
    assert api(ui, viewer, "GET", "/api/quotas").status_code == 200
    assert api(ui, viewer, "GET", "/ui").status_code == 200
    for method, body in [("PUT", {**SMALL, "rpm": 1}), ("PATCH", {"rpm": 1}), ("DELETE", None)]:
        response = api(ui, viewer, method, "/api/quotas/m", json=body)
        assert response.status_code == 403, (method, response.text)
        assert "permission to edit pools" in response.json()["detail"]
    # a new model is refused too, and nothing changed
    assert api(ui, viewer, "PUT", "/api/quotas/n", json=SMALL).status_code == 403
    listed = api(ui, viewer, "GET", "/api/quotas").json()["models"]
    assert [(m["model"], m["quota"]["rpm"]) for m in listed] == [("m", 60)]
    assert len(api(ui, viewer, "GET", "/api/audit").json()) == 1


def test_admin_and_op_change_quotas_with_audit(ui: QuotaUiStack,
                                               tokens: dict[str, str]) -> None:
    admin, op = tokens["admin"], tokens["op"]
    created = api(ui, admin, "PUT", "/api/quotas/openai/gpt-4o", json=SMALL)
    assert created.status_code == 201, created.text
    assert created.json()["action"] == "create"
    replaced = api(ui, admin, "PUT", "/api/quotas/openai/gpt-4o", json={**SMALL, "tpm": 1000})
    assert replaced.status_code == 200 and replaced.json()["action"] == "replace"
    patched = api(ui, op, "PATCH", "/api/quotas/openai/gpt-4o", json={"rpm": 30, "weight": 2})
    assert patched.status_code == 200, patched.text
    assert patched.json()["new"]["rpm"] == 30 and patched.json()["new"]["tpm"] == 1000
    view = api(ui, admin, "GET", "/api/quotas/openai/gpt-4o").json()
    assert view["quota"]["weight"] == 2.0 and view["updated_by"] == "op"
    assert view["applied"] is True  # Redis holds what PostgreSQL holds
    assert api(ui, admin, "DELETE", "/api/quotas/openai/gpt-4o").status_code == 200
    assert api(ui, admin, "GET", "/api/quotas/openai/gpt-4o").status_code == 404
    assert api(ui, admin, "DELETE", "/api/quotas/openai/gpt-4o").status_code == 404
    assert api(ui, admin, "PATCH", "/api/quotas/ghost", json={"rpm": 1}).status_code == 404
    audit = api(ui, admin, "GET", "/api/audit").json()
    assert [(a["actor"], a["action"]) for a in audit] == [
        ("admin", "delete"), ("op", "patch"), ("admin", "replace"), ("admin", "create")]
    patch_row = audit[1]
    assert patch_row["old"]["rpm"] == 60 and patch_row["new"]["rpm"] == 30
    assert patch_row["source"] == "api" and patch_row["at"]


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("PUT", "/api/quotas/m", {**SMALL, "rpm": -5}, "rpm"),
    ("PUT", "/api/quotas/m", {**SMALL, "tpm": "lots"}, "tpm"),
    ("PUT", "/api/quotas/m", {**SMALL, "rpm": 1.5}, "rpm"),
    ("PUT", "/api/quotas/m", {**SMALL, "burst": 10}, "burst"),
    ("PUT", "/api/quotas/m", {**SMALL, "window_s": 0}, "window_s"),
    ("PUT", "/api/quotas/m", {"tpm": 1, "max_concurrency": 1}, "rpm"),
    ("PUT", "/api/quotas/bad{model}", SMALL, "model"),
    ("PUT", "/api/quotas/has space", SMALL, "model"),
    ("PATCH", "/api/quotas/m", {"max_concurrency": 0}, "max_concurrency"),
    ("PATCH", "/api/quotas/m", {"rpm": None}, "rpm"),
    ("PATCH", "/api/quotas/m", {"weight": -1}, "weight"),
    ("PATCH", "/api/quotas/m", {"enabled": "yes"}, "enabled"),
    ("PATCH", "/api/quotas/m", {"window_s": 0}, "window_s"),
    ("PATCH", "/api/quotas/m", {"unknown": 1}, "unknown"),
])
def test_invalid_input_is_422_naming_the_field_and_changes_nothing(
        ui: QuotaUiStack, tokens: dict[str, str], method: str, path: str,
        body: dict[str, object], field: str) -> None:
    admin = tokens["admin"]
    assert api(ui, admin, "PUT", "/api/quotas/m", json=SMALL).status_code == 201
    response = api(ui, admin, method, path, json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert field in [d["field"] for d in detail], detail
    assert all(d["msg"] for d in detail)
    listed = api(ui, admin, "GET", "/api/quotas").json()["models"]
    assert [(m["model"], m["quota"]) for m in listed] == [
        ("m", {**SMALL, "weight": 1.0, "enabled": True, "window_s": 60.0, "input_tpm": None,
               "output_tpm": None, "expected_output_tokens": 256, "expected_latency_s": None,
               "input_micro_usd_per_mtok": None, "output_micro_usd_per_mtok": None,
               "budget_micro_usd": None, "budget_period_s": 86400.0,
               "overflow_threshold": 1.0})]
    with ui.router() as router:
        assert router.get_quota("m").rpm == 60  # type: ignore[union-attr]
    assert len(api(ui, admin, "GET", "/api/audit").json()) == 1


def test_the_messages_say_how_to_fix(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    response = api(ui, tokens["admin"], "PUT", "/api/quotas/m", json={**SMALL, "rpm": 0})
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "rpm"]
    assert "at least 1" in error["msg"]


def test_cookie_writes_need_the_header_and_the_same_origin(
        ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    assert api(ui, tokens["admin"], "PUT", "/api/quotas/m", json=SMALL).status_code == 201
    cookies = {"_token": tokens["admin"]}
    same = {"Origin": ui.stack.api_url, "Sec-Fetch-Site": "same-origin"}

    def patch(headers: dict[str, str], **kwargs: object) -> int:
        return api(ui, None, "PATCH", "/api/quotas/m", cookies=cookies, headers=headers,
                   **kwargs).status_code

    # a form post from another site: no custom header, not JSON
    assert patch({"Content-Type": "application/x-www-form-urlencoded",
                  "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
                 content="rpm=1") == 403
    assert patch({"Sec-Fetch-Site": "same-origin"}, json={"rpm": 1}) == 403  # no header
    assert patch({"X-Requested-With": "XMLHttpRequest", "Origin": "https://evil.example"},
                 json={"rpm": 1}) == 403
    assert patch({"X-Requested-With": "XMLHttpRequest", "Sec-Fetch-Site": "cross-site"},
                 json={"rpm": 1}) == 403
    assert patch({"X-Requested-With": "XMLHttpRequest", **same,
                  "Content-Type": "text/plain"}, content='{"rpm": 1}') == 415
    assert api(ui, tokens["admin"], "GET", "/api/quotas/m").json()["quota"]["rpm"] == 60
    assert patch({"X-Requested-With": "XMLHttpRequest", **same}, json={"rpm": 2}) == 200
    assert api(ui, tokens["admin"], "GET", "/api/quotas/m").json()["quota"]["rpm"] == 2


def test_a_change_applies_at_the_next_admission(ui: QuotaUiStack,
                                                tokens: dict[str, str]) -> None:
    admin = tokens["admin"]
    api(ui, admin, "PUT", "/api/quotas/m", json={**SMALL, "window_s": 30})
    with ui.router() as router:
        assert isinstance(router.admit(10), Admission)
        assert api(ui, admin, "PATCH", "/api/quotas/m", json={"rpm": 2}).status_code == 200
        assert isinstance(router.admit(10), Admission)
        wait = router.admit(10)
        assert isinstance(wait, Wait) and wait.reason == "rpm"


def test_stats_advice_and_live_usage(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    viewer = tokens["viewer"]
    api(ui, tokens["admin"], "PUT", "/api/quotas/m", json={**SMALL, "rpm": 10})
    with ui.router() as router:
        leases = [router.admit(100) for _ in range(3)]
        assert all(isinstance(lease, Admission) for lease in leases)
        router.complete(leases[0].lease_id, outcome="rate_limited",  # type: ignore[union-attr]
                        retry_after_s=0.01)
    stats = api(ui, viewer, "GET", "/api/stats").json()["models"]["m"]
    assert stats["requests"] == 3 and stats["in_flight"] == 2
    assert stats["targets"] == {"rpm": 10, "tpm": 90_000, "max_concurrency": 8}
    assert stats["counters"]["rate_limited"] == 1
    assert set(stats["recent"]) == {"rate_limited", "errors", "over_s"}
    # the provider refused the first call of its window: the effective limit halves, and
    # is shown next to the target
    assert stats["limit_share"] == 0.5
    assert stats["effective"] == {"rpm": 5, "tpm": 45_000, "max_concurrency": 4}
    usage = api(ui, viewer, "GET", "/api/quotas").json()["models"][0]["usage"]
    assert usage["rpm_pct"] == 30.0 and usage["concurrency_pct"] == 25.0
    assert usage["limit_share"] == 0.5 and usage["effective"]["rpm"] == 5
    assert usage["guard_ms"] == stats["guard_ms"] > 0  # the guard in force, from the engine
    advice = api(ui, viewer, "GET", "/api/advice", params={"backlog": 100})
    assert advice.status_code == 200 and advice.json()["solvers"] >= 1
    assert api(ui, viewer, "GET", "/api/advice", params={"backlog": -1}).status_code == 422


def test_a_quota_only_redis_holds_is_listed_and_can_be_stored(
        ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    with ui.router() as router:
        router.set_quota("direct", SMALL)
    [view] = api(ui, tokens["viewer"], "GET", "/api/quotas").json()["models"]
    assert (view["model"], view["stored"], view["updated_by"]) == ("direct", False, None)
    assert view["quota"]["rpm"] == 60 and view["usage"]["requests"] == 0
    stored = api(ui, tokens["admin"], "PUT", "/api/quotas/direct", json={**SMALL, "rpm": 9})
    assert stored.status_code == 201
    [view] = api(ui, tokens["viewer"], "GET", "/api/quotas").json()["models"]
    assert (view["stored"], view["updated_by"], view["quota"]["rpm"]) == (True, "admin", 9)


def test_openapi_documents_the_api(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    doc = api(ui, tokens["viewer"], "GET", "/openapi.json").json()
    assert {"/api/quotas", "/api/quotas/{model}", "/api/stats", "/api/advice",
            "/api/audit"} <= set(doc["paths"])
    assert {"get", "put", "patch", "delete"} <= set(doc["paths"]["/api/quotas/{model}"])
    assert "rpm" in doc["components"]["schemas"]["ModelQuota"]["properties"]
    # a generated client calls the paths under the server the document names: the mount
    assert doc["servers"] == [{"url": "/llm-router"}]
    answer = httpx.get(ui.stack.api_url + doc["servers"][0]["url"] + "/api/quotas",
                       headers={"Authorization": f"Bearer {tokens['viewer']}"}, timeout=15)
    assert answer.status_code == 200, answer.text
    responses = doc["paths"]["/api/quotas/{model}"]["put"]["responses"]
    assert {"400", "401", "403", "415", "422"} <= set(responses), sorted(responses)
    # the viewer loads Swagger UI from the package, under the mount: no CDN
    page = api(ui, tokens["viewer"], "GET", "/docs").text
    assert "/llm-router/docs/assets/swagger-ui-bundle.js" in page and "cdn" not in page
    bundle = api(ui, tokens["viewer"], "GET", "/docs/assets/swagger-ui-bundle.js")
    assert bundle.status_code == 200 and "SwaggerUIBundle" in bundle.text
