"""One contract under both mounts: the same ``/advice`` and requeue requests sent to the
plugin (the real Airflow API server, ``/llm-router/api``) and to the standalone app (routes
at the root, bearer token) get the same answers, on the same router and task store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.store import TaskStore
from airflow_llm_router.web import Lazy, create_app, token_access
from tests.conftest import POSTGRES_DSN, REDIS_URL
from tests.integration.plugins.conftest import QuotaUiStack, api
from tests.integration.web.backlog_fixtures import kill, tasks  # noqa: F401 (fixture)
from tests.integration.web.conftest import AUTH, TOKEN


@pytest.fixture
async def standalone(ui: QuotaUiStack) -> AsyncIterator[httpx.AsyncClient]:
    """The standalone app on the plugin's router namespace and task store."""
    async def router() -> AsyncRouterClient:
        return AsyncRouterClient.from_url(REDIS_URL, RouterSettings(namespace=ui.namespace))

    async def store() -> TaskStore:
        return TaskStore(POSTGRES_DSN, schema=ui.schema)

    async def close_router(client: AsyncRouterClient) -> None:
        await client.aclose()

    async def close_store(opened: TaskStore) -> None:
        opened.close()

    sources: list[Lazy[Any]] = [Lazy(router, "the UI's Redis", close_router),
                                Lazy(store, "the UI's task store", close_store)]
    app = create_app(access=token_access(TOKEN), router=sources[0], task_store=sources[1])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                 headers=AUTH) as client:
        yield client
    for source in sources:
        await source.aclose()


async def test_advice_answers_the_same_under_both_mounts(
        ui: QuotaUiStack, tokens: dict[str, str], standalone: httpx.AsyncClient) -> None:
    with ui.router() as router:
        router.set_quota("m", {"rpm": 600, "tpm": 1_000_000, "max_concurrency": 8})
    for params in ({"backlog": 250}, {"backlog": 0, "max_solvers": 3}):
        plugin = api(ui, tokens["viewer"], "GET", "/api/advice", params=params)
        alone = await standalone.get("/advice", params=params)
        assert (plugin.status_code, alone.status_code) == (200, 200), plugin.text
        assert plugin.json() == alone.json()
        assert plugin.json()["models"]["m"]["enabled"] is True
    bad = {"backlog": -1}
    plugin_bad = api(ui, tokens["viewer"], "GET", "/api/advice", params=bad)
    assert plugin_bad.status_code == 422
    assert plugin_bad.json() == (await standalone.get("/advice", params=bad)).json()


async def test_requeue_answers_the_same_under_both_mounts(
        ui: QuotaUiStack, tokens: dict[str, str], standalone: httpx.AsyncClient,
        tasks: TaskStore) -> None:  # noqa: F811
    first, second = kill(tasks, 2, error="backend 400")
    plugin = api(ui, tokens["op"], "POST", "/api/tasks/requeue", json={"ids": [first, 10**9]})
    alone = await standalone.post("/tasks/requeue", json={"ids": [second, 10**9]})
    assert (plugin.status_code, alone.status_code) == (200, 200), plugin.text
    assert plugin.json() == {**alone.json(), "ids": [first]}
    assert alone.json() == {"requeued": 1, "ids": [second], "skipped": [10**9],
                            "remaining": 0, "max_per_call": 10_000}

    tasks.claim(2, worker_id="test-solver", claim_ttl_s=60)  # the two requeued: out of the way
    kill(tasks, 2, error="Timeout after 120 s", kind="k")
    matching = {"matching": {"kind": "k", "error_contains": "timeout"}}
    by_filter = api(ui, tokens["op"], "POST", "/api/tasks/requeue", json=matching).json()
    assert by_filter["requeued"] == 2
    assert by_filter == {**(await standalone.post("/tasks/requeue", json=matching)).json(),
                         "requeued": 2, "ids": by_filter["ids"]}  # nothing left to move

    for body in ({"ids": [1], "matching": {}}, {"matching": {"kind": ""}}, {}):
        refused = api(ui, tokens["op"], "POST", "/api/tasks/requeue", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json() == (await standalone.post("/tasks/requeue", json=body)).json()
    assert {(e.actor, e.source) for e in tasks.admin.requeue_log()} == {
        ("token", "http-api"), ("op", "http-api")}
