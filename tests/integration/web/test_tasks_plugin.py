"""The /tasks routes inside the real Airflow API server (the plugin, under /llm-router/api):
Airflow's auth manager decides (read pools to read a task, edit pools to add or requeue),
on the task store the ``[llm_router]`` config names (the one the backlog panel shows)."""

from __future__ import annotations

from typing import Any

import httpx

from airflow_llm_router.store import TaskStore
from tests.integration.plugins.conftest import QuotaUiStack
from tests.integration.web.backlog_fixtures import kill, tasks  # noqa: F401 (fixture)


def call(ui: QuotaUiStack, token: str | None, method: str, path: str,
         **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.request(method, f"{ui.stack.api_url}/llm-router/api{path}", headers=headers,
                         timeout=15, **kwargs)


def test_tasks_routes_follow_airflows_rights(ui: QuotaUiStack, tokens: dict[str, str],
                                             tasks: TaskStore) -> None:  # noqa: F811
    (dead,) = kill(tasks, 1, error="backend 400")
    body = {"tasks": [{"prompt": "from outside", "idempotency_key": "plugin-1"}]}
    for method, path, json in [("POST", "/tasks", body), ("GET", f"/tasks/{dead}", None),
                               ("POST", "/tasks/requeue", {"ids": [dead]})]:
        assert call(ui, None, method, path, json=json).status_code == 401, path
    viewer = tokens["viewer"]
    read = call(ui, viewer, "GET", f"/tasks/{dead}")
    assert read.status_code == 200 and read.json()["status"] == "dead", read.text
    for path, json in [("/tasks", body), ("/tasks/requeue", {"ids": [dead]})]:
        refused = call(ui, viewer, "POST", path, json=json)
        assert refused.status_code == 403 and "edit pools" in refused.text, refused.text
    assert tasks.counts() == {"pending": 0, "claimed": 0, "solved": 0, "dead": 1}

    op = tokens["op"]
    posted = call(ui, op, "POST", "/tasks", json=body)
    assert posted.status_code == 201, posted.text
    (task_id,) = posted.json()["ids"]
    row = tasks.get(task_id)  # the server wrote into the store the config names
    assert row is not None and row.prompt == "from outside"
    again = call(ui, op, "POST", "/tasks", json=body)
    assert again.status_code == 200 and again.json()["ids"] == [task_id]
    requeued = call(ui, op, "POST", "/tasks/requeue", json={"ids": [dead]})
    assert requeued.status_code == 200 and requeued.json()["ids"] == [dead], requeued.text
    (log,) = tasks.admin.requeue_log(1)
    assert (log.actor, log.source) == ("op", "http-api")
    assert tasks.counts()["pending"] == 2
