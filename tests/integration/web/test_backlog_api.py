"""The backlog API through the real Airflow API server: who may read and requeue, what the
answers hold (never a prompt), 422s naming the field, and the quota list at 1,000 models."""

from __future__ import annotations

import statistics
import time

import pytest

from airflow_llm_router.quotas import QuotaStore
from airflow_llm_router.store import TaskStore
from tests.conftest import POSTGRES_DSN
from tests.integration.plugins.conftest import QuotaUiStack, api
from tests.integration.web.backlog_fixtures import kill, tasks  # noqa: F401


def test_backlog_routes_need_a_user_and_requeue_needs_an_editor(
        ui: QuotaUiStack, tokens: dict[str, str], tasks: TaskStore) -> None:  # noqa: F811
    dead = kill(tasks, 2, error="boom")
    for method, path in [("GET", "/api/backlog"), ("GET", "/api/backlog/dead"),
                         ("POST", "/api/tasks/requeue"), ("GET", "/api/backlog/requeues")]:
        response = api(ui, None, method, path, json={"ids": dead} if method == "POST" else None)
        assert response.status_code == 401, (path, response.text)
    viewer = tokens["viewer"]
    assert api(ui, viewer, "GET", "/api/backlog").status_code == 200
    assert api(ui, viewer, "GET", "/api/backlog/dead").status_code == 200
    refused = api(ui, viewer, "POST", "/api/tasks/requeue", json={"ids": dead})
    assert refused.status_code == 403 and "permission to edit pools" in refused.json()["detail"]
    assert tasks.admin.backlog_summary().counts["dead"]["bulk"] == 2  # nothing moved


def test_summary_and_dead_list(ui: QuotaUiStack, tokens: dict[str, str],
                               tasks: TaskStore) -> None:  # noqa: F811
    hot_dead = kill(tasks, 1, error="HTTP 500: upstream failed", kind="summarise", priority="hot")
    bulk_dead = kill(tasks, 2, error="prompt too large for every allowed model")
    tasks.enqueue(["p1", "p2", "p3"])
    (claimed,) = tasks.claim(1, worker_id="w", claim_ttl_s=60)
    assert tasks.complete(claimed.id, claimed.claim_token, answer="a", model="m")

    doc = api(ui, tokens["viewer"], "GET", "/api/backlog").json()
    assert doc["counts"] == {"pending": {"hot": 0, "bulk": 2}, "claimed": {"hot": 0, "bulk": 0},
                             "solved": {"hot": 0, "bulk": 1}, "dead": {"hot": 1, "bulk": 2}}
    assert doc["totals"]["dead"] == 3 and doc["remaining"] == 2
    assert doc["solved_recently"] == 1 and doc["throughput_per_min"] == 0.2
    assert doc["eta_s"] == 600.0 and doc["oldest_pending_age_s"] >= 0
    assert doc["capacity_per_min"] == 0 and doc["eta_at_capacity_s"] is None  # no quota yet

    page = api(ui, tokens["viewer"], "GET", "/api/backlog/dead?limit=2").json()
    assert page["total"] == 3 and page["limit"] == 2
    assert [t["id"] for t in page["tasks"]] == sorted(bulk_dead, reverse=True)
    assert "do not show" not in str(page) and "prompt" not in page["tasks"][0]
    assert page["tasks"][0]["last_error"] == "prompt too large for every allowed model"
    found = api(ui, tokens["viewer"], "GET",
                "/api/backlog/dead?kind=summarise&error=http%20500").json()
    assert [t["id"] for t in found["tasks"]] == hot_dead
    assert found["tasks"][0]["priority"] == "hot"


def test_eta_at_the_capacity_the_quotas_allow(ui: QuotaUiStack, tokens: dict[str, str],
                                              tasks: TaskStore) -> None:  # noqa: F811
    """The router's advice bounds the ETA: 120 tasks at 60 requests per minute (the rpm
    binds: tokens are plenty) take at least 2 minutes, whatever the recent rate."""
    assert api(ui, tokens["admin"], "PUT", "/api/quotas/gpt-a", json={
        "rpm": 60, "tpm": 10_000_000, "max_concurrency": 100}).status_code == 201
    tasks.enqueue([f"p{i}" for i in range(120)])
    doc = api(ui, tokens["viewer"], "GET", "/api/backlog").json()
    assert doc["capacity_per_min"] == 60.0 and doc["eta_at_capacity_s"] == 120.0
    assert doc["eta_s"] is None  # nothing solved yet: no measured rate


def test_requeue_by_ids_and_by_filter_is_logged_with_the_user(
        ui: QuotaUiStack, tokens: dict[str, str], tasks: TaskStore) -> None:  # noqa: F811
    timeouts = kill(tasks, 3, error="Timeout after 120 s", kind="k")
    others = kill(tasks, 1, error="HTTP 400", kind="k")
    one = api(ui, tokens["op"], "POST", "/api/tasks/requeue", json={"ids": [timeouts[0], 10**9]})
    assert one.status_code == 200, one.text
    assert one.json() == {"requeued": 1, "ids": [timeouts[0]], "skipped": [10**9],
                          "remaining": 0, "max_per_call": 10_000}
    row = tasks.get(timeouts[0])
    assert row is not None and (row.status, row.attempts) == ("pending", 0)

    by_filter = api(ui, tokens["admin"], "POST", "/api/tasks/requeue",
                    json={"matching": {"kind": "k", "error_contains": "timeout"}})
    assert by_filter.status_code == 200, by_filter.text
    assert by_filter.json()["ids"] == timeouts[1:] and by_filter.json()["remaining"] == 0
    still = tasks.get(others[0])
    assert still is not None and still.status == "dead"

    log = api(ui, tokens["viewer"], "GET", "/api/backlog/requeues").json()
    assert [(e["actor"], e["source"], e["requeued"]) for e in log] == [
        ("admin", "http-api", 2), ("op", "http-api", 1)]
    assert log[0]["request"] == {"matching": {"kind": "k", "error": "timeout"}}


def test_a_cookie_write_needs_the_csrf_header(ui: QuotaUiStack, tokens: dict[str, str],
                                              tasks: TaskStore) -> None:  # noqa: F811
    dead = kill(tasks, 1, error="boom")
    cookies = {"_token": tokens["op"]}
    refused = api(ui, None, "POST", "/api/tasks/requeue", json={"ids": dead}, cookies=cookies)
    assert refused.status_code == 403 and "X-Requested-With" in refused.json()["detail"]
    allowed = api(ui, None, "POST", "/api/tasks/requeue", json={"ids": dead}, cookies=cookies,
                  headers={"X-Requested-With": "XMLHttpRequest"})
    assert allowed.status_code == 200 and allowed.json()["requeued"] == 1


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("GET", "/api/backlog/dead?limit=0", None, "limit"),
    ("GET", "/api/backlog/dead?limit=501", None, "limit"),
    ("GET", "/api/backlog/dead?offset=-1", None, "offset"),
    ("GET", "/api/backlog/dead?model=bad%20name", None, "model"),
    ("GET", "/api/backlog/dead?kind=", None, "kind"),
    ("GET", "/api/backlog/dead?error=", None, "error"),
    ("GET", "/api/backlog/requeues?limit=0", None, "limit"),
    ("POST", "/api/tasks/requeue", {}, "ids"),
    ("POST", "/api/tasks/requeue", {"ids": []}, "ids"),
    ("POST", "/api/tasks/requeue", {"ids": ["x"]}, "ids.0"),
    ("POST", "/api/tasks/requeue", {"ids": [0]}, "ids.0"),
    ("POST", "/api/tasks/requeue", {"ids": list(range(1, 10_002))}, "ids"),
    ("POST", "/api/tasks/requeue", {"ids": [1], "matching": {}}, "ids"),
    ("POST", "/api/tasks/requeue", {"ids": [1], "matching": {"kind": "k"}}, "ids"),
    ("POST", "/api/tasks/requeue", {"matching": "yes"}, "matching"),
    ("POST", "/api/tasks/requeue", {"matching": {"kind": ""}}, "matching.kind"),
    ("POST", "/api/tasks/requeue", {"matching": {"model": "bad name"}}, "matching.model"),
    ("POST", "/api/tasks/requeue", {"matching": {"error_contains": "x\u0000"}},
     "matching.error_contains"),
    ("POST", "/api/tasks/requeue", {"matching": {"status": "dead"}}, "matching.status"),
])
def test_bad_input_is_a_422_naming_the_field_and_changes_nothing(
        ui: QuotaUiStack, tokens: dict[str, str], tasks: TaskStore,  # noqa: F811
        method: str, path: str, body: object, field: str) -> None:
    dead = kill(tasks, 1, error="boom")
    response = api(ui, tokens["admin"], method, path, json=body)
    assert response.status_code == 422, response.text
    fields = [d["field"] for d in response.json()["detail"]]
    assert field in fields, response.text
    row = tasks.get(dead[0])
    assert row is not None and row.status == "dead"
    assert tasks.admin.requeue_log() == []


def test_the_quota_list_at_1000_models(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    """The page filters and pages the list in the browser: one GET must stay fast with
    1,000 models (figures printed for docs/quotas_ui.md)."""
    quota = {"rpm": 600, "tpm": 200_000, "max_concurrency": 16}
    with ui.router() as router:
        QuotaStore(POSTGRES_DSN, router, schema=ui.schema).load(
            {f"team-{i // 100}/model-{i:04d}": quota for i in range(1000)}, actor="test")
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        response = api(ui, tokens["viewer"], "GET", "/api/quotas")
        timings.append(time.perf_counter() - started)
        assert response.status_code == 200
        assert len(response.json()["models"]) == 1000
    size = len(response.content)
    print(f"GET /api/quotas at 1,000 models: median {statistics.median(timings) * 1000:.0f} ms,"
          f" max {max(timings) * 1000:.0f} ms, {size / 1024:.0f} KiB")
    assert statistics.median(timings) < 3.0
