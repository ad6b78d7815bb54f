"""Task ingestion over HTTP on a real PostgreSQL: what a POST writes is read back from the
store itself, retried and racing POSTs add nothing twice, limits answer 413/422 naming the
field and write nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import psycopg
import pytest

from airflow_llm_router.store import TaskStore
from airflow_llm_router.web import Lazy, backlog
from airflow_llm_router.web import ingestion as tasks_api
from tests.integration.web.conftest import AUTH, MakeApi

MakeTasksApi = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def make_tasks_api(make_api: MakeApi, pg_dsn: str, pg_schema: str,
                         store: TaskStore) -> MakeTasksApi:
    """An API app (conftest's ``make_api``) with its own task store (its own connection) on
    the test's schema; ``with_store=False`` builds one without a store."""
    async def make(*, with_store: bool = True, prefix: str = "", **store_kw: Any
                   ) -> httpx.AsyncClient:
        async def task_store() -> TaskStore:
            return TaskStore(pg_dsn, schema=pg_schema, **store_kw)

        async def close_store(mine: TaskStore) -> None:
            mine.close()

        return await make_api(task_store=Lazy(task_store, "the test's store", close_store)
                              if with_store else None, prefix=prefix)

    return make


@pytest.fixture
async def api(make_tasks_api: MakeTasksApi) -> httpx.AsyncClient:
    return await make_tasks_api()


async def post(api: httpx.AsyncClient, *tasks: dict[str, Any], expect: int = 201
               ) -> dict[str, Any]:
    response = await api.post("/tasks", json={"tasks": list(tasks)})
    assert response.status_code == expect, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _field(response: httpx.Response) -> str:
    detail = response.json()["detail"]
    assert isinstance(detail, list), detail
    return str(detail[0]["field"])


async def test_posted_tasks_are_stored_with_their_own_settings(api: httpx.AsyncClient,
                                                               store: TaskStore) -> None:
    answer = await post(api, {"prompt": "plain"}, {
        "prompt": "urgent", "priority": "hot", "allowed_models": ["m-b", "m-a"],
        "kind": "summary", "max_attempts": 2, "metadata": {"source": "crm", "n": [1]}})
    assert answer["duplicates"] == [False, False] and answer["created"] == 2
    plain, urgent = (store.get(i) for i in answer["ids"])
    assert plain is not None and urgent is not None
    assert (plain.prompt, plain.priority, plain.kind, plain.allowed_models,
            plain.max_attempts) == ("plain", "bulk", "default", None, 5)
    assert (urgent.prompt, urgent.priority, urgent.kind, urgent.allowed_models,
            urgent.max_attempts, urgent.metadata) == (
        "urgent", "hot", "summary", ("m-b", "m-a"), 2, {"source": "crm", "n": [1]})
    claimed = store.claim(1, worker_id="w", claim_ttl_s=30)
    assert [t.id for t in claimed] == [answer["ids"][1]]  # the hot lane first


async def test_get_answers_the_state_and_the_prompt_only_when_asked(
        api: httpx.AsyncClient, store: TaskStore) -> None:
    (task_id,) = (await post(api, {"prompt": "secret prompt", "kind": "k"}))["ids"]
    pending = (await api.get(f"/tasks/{task_id}")).json()
    assert pending["status"] == "pending" and pending["attempts"] == 0
    assert pending["prompt"] is None and "secret prompt" not in json.dumps(pending)
    assert "claim_token" not in pending
    (claim,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    store.fail(claim.id, claim.claim_token, error="backend 503")
    (claim,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    store.complete(claim.id, claim.claim_token, answer="42", model="m-a", input_tokens=5,
                   output_tokens=1)
    solved = (await api.get(f"/tasks/{task_id}", params={"include_prompt": "true"})).json()
    assert {k: solved[k] for k in ("status", "answer", "model", "attempts", "last_error",
                                   "input_tokens", "output_tokens", "prompt")} == {
        "status": "solved", "answer": "42", "model": "m-a", "attempts": 2,
        "last_error": "backend 503", "input_tokens": 5, "output_tokens": 1,
        "prompt": "secret prompt"}
    assert solved["solved_at"] is not None and solved["created_at"] <= solved["solved_at"]
    missing = await api.get("/tasks/999999999")
    assert missing.status_code == 404 and "999999999" in missing.json()["detail"]
    for bad in ("0", "-3", "abc", str(2**63)):
        assert (await api.get(f"/tasks/{bad}")).status_code == 422


async def test_a_retried_post_answers_the_same_ids_and_adds_nothing(
        api: httpx.AsyncClient, store: TaskStore) -> None:
    tasks = [{"prompt": f"p{i}", "idempotency_key": f"src-1:{i}"} for i in range(3)]
    first = await post(api, *tasks)
    again = await post(api, *tasks, expect=200)
    assert again == {"ids": first["ids"], "duplicates": [True] * 3, "created": 0}
    mixed = await post(api, {"prompt": "new"}, tasks[1])
    assert mixed["duplicates"] == [False, True] and mixed["ids"][1] == first["ids"][1]
    assert store.counts()["pending"] == 4


async def test_racing_duplicate_posts_to_two_servers_get_the_same_ids(
        make_tasks_api: MakeTasksApi, store: TaskStore) -> None:
    """Two API apps, each with its own store connection, receive the same keyed POST at
    once (a producer that retried on a timeout): one set of tasks, the same ids for both."""
    apis = [await make_tasks_api() for _ in range(2)]
    body = {"tasks": [{"prompt": f"p{i}", "idempotency_key": f"k{i}"} for i in range(300)]}
    answers = await asyncio.gather(*(a.post("/tasks", json=body) for a in apis for _ in "ab"))
    assert {r.status_code for r in answers} <= {200, 201}
    ids = [r.json()["ids"] for r in answers]
    assert all(i == ids[0] for i in ids) and len(set(ids[0])) == 300
    assert sum(r.json()["created"] for r in answers) == 300
    assert store.counts()["pending"] == 300


async def test_a_post_wakes_listeners_of_the_backlog(api: httpx.AsyncClient, store: TaskStore,
                                                     pg_dsn: str) -> None:
    """Drains LISTEN on the store's channel: the POST's commit notifies how many arrived."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as listener:
        await listener.execute(f'LISTEN "{store.notify_channel}"')
        await post(api, {"prompt": "a"}, {"prompt": "b"})
        gen = listener.notifies(timeout=5)
        note = await anext(gen)
        await gen.aclose()
    assert note.payload == "2"


@pytest.mark.parametrize(
    ("tasks", "field"),
    [
        ([{"prompt": "ok", "priority": "urgent"}], "tasks.0.priority"),
        ([{"prompt": "ok"}, {"prompt": "ok", "allowed_models": ["bad{x}"]}],
         "tasks.1.allowed_models.0"),
        ([{"prompt": "ok", "allowed_models": []}], "tasks.0.allowed_models"),
        ([{"prompt": "ok", "max_attempts": 0}], "tasks.0.max_attempts"),
        ([{"prompt": "ok", "max_attempts": "3"}], "tasks.0.max_attempts"),
        ([{"prompt": "ok", "colour": "red"}], "tasks.0.colour"),
        ([{"prompt": ""}], "tasks.0.prompt"),
        ([{"prompt": "ok"}, {"prompt": "   "}], "tasks.1.prompt"),  # the store's check
        ([{"prompt": "nul \u0000 in it"}], "tasks.0.prompt"),
        ('[{"prompt": "lone \\ud800"}]', "tasks.0.prompt"),  # JSON escapes a lone surrogate
        ([{"prompt": "ok", "kind": "line\nbreak"}], "tasks.0.kind"),
        ([{"prompt": "ok", "idempotency_key": "k" * 201}], "tasks.0.idempotency_key"),
        ([{"prompt": "a", "idempotency_key": "k"}, {"prompt": "b", "idempotency_key": "k"}],
         "tasks.1.idempotency_key"),
        ([{"prompt": "ok", "metadata": {"blob": "x" * 70_000}}], "tasks.0.metadata"),
        ([], "tasks"),
    ],
)
async def test_bad_tasks_answer_422_naming_the_field_and_write_nothing(
        api: httpx.AsyncClient, store: TaskStore, tasks: list[dict[str, Any]] | str,
        field: str) -> None:
    if isinstance(tasks, str):
        response = await api.post("/tasks", content=f'{{"tasks": {tasks}}}',
                                  headers={"Content-Type": "application/json"})
    else:
        response = await api.post("/tasks", json={"tasks": tasks})
    assert response.status_code == 422, response.text
    assert _field(response) == field
    assert store.counts()["pending"] == 0


async def test_refusals_never_quote_the_prompt(api: httpx.AsyncClient) -> None:
    response = await api.post("/tasks", json={"tasks": [{"prompt": "confidential\u0000"}]})
    assert response.status_code == 422 and "confidential" not in response.text


async def test_nan_in_metadata_is_refused_by_the_store(api: httpx.AsyncClient,
                                                       store: TaskStore) -> None:
    body = '{"tasks": [{"prompt": "ok", "metadata": {"x": NaN}}]}'
    response = await api.post("/tasks", content=body,
                              headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and _field(response) == "tasks.0.metadata"
    assert store.counts()["pending"] == 0


async def test_too_many_tasks_and_too_long_prompts_are_refused(
        api: httpx.AsyncClient, make_tasks_api: MakeTasksApi, store: TaskStore) -> None:
    many = [{"prompt": "p"}] * (tasks_api.MAX_TASKS_PER_POST + 1)
    response = await api.post("/tasks", json={"tasks": many})
    assert response.status_code == 422 and _field(response) == "tasks"
    small = await make_tasks_api(max_prompt_chars=10)
    response = await small.post("/tasks", json={"tasks": [{"prompt": "x" * 10},
                                                          {"prompt": "x" * 11}]})
    assert response.status_code == 422 and _field(response) == "tasks.1.prompt"
    assert "max_prompt_chars" in response.text
    assert store.counts()["pending"] == 0


async def test_bodies_over_the_limit_are_refused_unread(
        make_tasks_api: MakeTasksApi, store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tasks_api.BODY_LIMITS, "/tasks", 1000)
    api = await make_tasks_api()
    body = json.dumps({"tasks": [{"prompt": "x" * 1000}]}).encode()
    declared = await api.post("/tasks", content=body,
                              headers={"Content-Type": "application/json"})
    assert declared.status_code == 413 and _field(declared) == "body"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked
        for start in range(0, len(body), 100):
            yield body[start:start + 100]

    streamed = await api.post("/tasks", content=chunks(),
                              headers={"Content-Type": "application/json"})
    assert "content-length" not in streamed.request.headers
    assert streamed.status_code == 413 and _field(streamed) == "body"
    fits = await api.post("/tasks", json={"tasks": [{"prompt": "x" * 100}]})
    assert fits.status_code == 201
    unauthenticated = await api.post("/tasks", content=body, headers={
        "Content-Type": "application/json", "Authorization": ""})
    assert unauthenticated.status_code == 413  # refused before anyone is asked who it is
    assert store.counts()["pending"] == 1
    many = json.dumps({"ids": list(range(10**15, 10**15 + 20_000))})
    assert len(many) > backlog.BODY_LIMITS["/tasks/requeue"]
    assert _field(await api.post("/tasks/requeue", content=many, headers={
        "Content-Type": "application/json"})) == "body"


async def test_routes_need_the_token(api: httpx.AsyncClient, store: TaskStore) -> None:
    (task_id,) = store.enqueue(["p"])
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong-token"}):
        posted = await api.post("/tasks", json={"tasks": [{"prompt": "x"}]}, headers=headers)
        read = await api.get(f"/tasks/{task_id}", headers=headers)
        assert (posted.status_code, read.status_code) == (401, 401)
    assert store.counts()["pending"] == 1


async def test_an_unreachable_database_answers_503(
        make_tasks_api: MakeTasksApi, pg_schema: str, store: TaskStore) -> None:
    """The store's connection fails (here: a port nobody listens on): 503 with Retry-After,
    never a 500 or the DSN's password."""
    api = await make_tasks_api(with_store=False)
    app = api._transport.app  # type: ignore[attr-defined]

    async def unreachable() -> TaskStore:
        return TaskStore("postgresql://postgres:s3cret@127.0.0.1:1/test?connect_timeout=2",
                         schema=pg_schema)

    app.state.task_store = Lazy(unreachable, "the test's broken store")
    response = await api.post("/tasks", json={"tasks": [{"prompt": "x"}]})
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert "task store is unavailable" in response.json()["detail"]
    assert "s3cret" not in response.text
    assert (await api.get("/tasks/1")).status_code == 503


async def test_a_fresh_schema_is_migrated_by_the_first_post(
        make_api: MakeApi, pg_dsn: str, pg_schema: str) -> None:
    """No migrate step before the first POST (the schema does not even exist): the store
    creates its table on first use and the task is written, instead of 503 forever."""
    async def fresh() -> TaskStore:
        return TaskStore(pg_dsn, schema=pg_schema)

    api = await make_api(task_store=Lazy(fresh, "a store on a fresh schema"))
    answer = await post(api, {"prompt": "first task"})
    with TaskStore(pg_dsn, schema=pg_schema) as reader:
        row = reader.get(answer["ids"][0])
    assert row is not None and row.status == "pending"


async def test_what_retrying_cannot_fix_is_not_answered_retry(
        make_tasks_api: MakeTasksApi, pg_dsn: str, pg_schema: str, store: TaskStore) -> None:
    """A schema migrated by a newer release: 500 naming the fix, no Retry-After, no "retry"
    (a 503 with Retry-After would have producers retry forever)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{pg_schema}".schema_version (table_name, version, '
                     "description) VALUES ('tasks', 1000, 'a newer release')")
    api = await make_tasks_api()
    for response in (await api.post("/tasks", json={"tasks": [{"prompt": "x"}]}),
                     await api.get("/tasks/1")):
        assert response.status_code == 500, response.text
        assert "retry-after" not in response.headers
        detail = response.json()["detail"]
        assert "upgrade the package" in detail and "retry" not in detail.lower()


async def test_an_app_without_a_store_answers_503(make_tasks_api: MakeTasksApi) -> None:
    api = await make_tasks_api(with_store=False)
    response = await api.post("/tasks", json={"tasks": [{"prompt": "x"}]})
    assert response.status_code == 503 and "task store" in response.json()["detail"]


def _dead(store: TaskStore, prompts: list[str], kind: str = "default") -> list[int]:
    ids = store.enqueue(prompts, kind=kind)
    for task in store.claim(len(ids), worker_id="w", claim_ttl_s=30):
        assert store.fail(task.id, task.claim_token, error=f"backend 400 on {kind}",
                          retryable=False) == "dead"
    return ids


async def test_requeue_by_ids_brings_dead_tasks_back_to_the_drain(
        api: httpx.AsyncClient, store: TaskStore, pg_dsn: str) -> None:
    dead = _dead(store, ["a", "b"])
    (alive,) = store.enqueue(["still pending"])
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as listener:
        await listener.execute(f'LISTEN "{store.notify_channel}"')
        response = await api.post("/tasks/requeue", json={"ids": [*dead, alive]})
        gen = listener.notifies(timeout=5)
        note = await anext(gen)
        await gen.aclose()
    assert response.status_code == 200, response.text
    assert response.json() == {"requeued": 2, "ids": dead, "skipped": [alive],
                               "remaining": 0, "max_per_call": 10_000}
    assert note.payload == "2"
    view = (await api.get(f"/tasks/{dead[0]}")).json()
    assert (view["status"], view["attempts"], view["last_error"]) == (
        "pending", 0, "backend 400 on default")
    (log,) = store.admin.requeue_log(1)
    assert (log.actor, log.source, log.requeued) == ("token", "http-api", 2)
    claimed = store.claim(3, worker_id="w2", claim_ttl_s=30)
    assert sorted(t.id for t in claimed) == sorted([*dead, alive])
    assert all(store.complete(t.id, t.claim_token, answer="ok", model="m") for t in claimed)


async def test_requeue_by_filter_moves_only_what_matches(api: httpx.AsyncClient,
                                                         store: TaskStore) -> None:
    summaries = _dead(store, ["s1", "s2"], kind="summary")
    essays = _dead(store, ["e1"], kind="essay")
    response = await api.post("/tasks/requeue", json={"matching": {"kind": "summary"}})
    assert response.json()["ids"] == summaries and response.json()["remaining"] == 0
    assert store.counts() == {"pending": 2, "claimed": 0, "solved": 0, "dead": 1}
    everything = await api.post("/tasks/requeue", json={"matching": {}})
    assert everything.json()["ids"] == essays


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "ids"),
        ({"ids": [1], "matching": {}}, "ids"),
        ({"ids": []}, "ids"),
        ({"ids": [0]}, "ids.0"),
        ({"ids": ["1"]}, "ids.0"),
        ({"matching": {"kind": "line\nbreak"}}, "matching.kind"),  # the store's check
        ({"matching": {"model": "bad{x}"}}, "matching.model"),
        ({"matching": {"error_contains": ""}}, "matching.error_contains"),
        ({"matching": {"colour": "red"}}, "matching.colour"),
    ],
)
async def test_bad_requeues_answer_422_naming_the_field(
        api: httpx.AsyncClient, store: TaskStore, body: dict[str, Any], field: str) -> None:
    _dead(store, ["x"])
    response = await api.post("/tasks/requeue", json=body)
    assert response.status_code == 422, response.text
    assert _field(response) == field
    assert store.counts()["dead"] == 1


async def test_the_documented_bodies_are_accepted(api: httpx.AsyncClient,
                                                  store: TaskStore) -> None:
    """Each request example of the OpenAPI document succeeds as it stands: clients copy
    them, and the schemathesis run counts on them for each operation's success."""
    _dead(store, ["x"], kind="summary")
    paths = (await api.get("/openapi.json")).json()["paths"]
    for path, code in (("/tasks", 201), ("/tasks/requeue", 200)):
        examples = paths[path]["post"]["requestBody"]["content"]["application/json"].get(
            "examples", {})
        assert examples, f"POST {path} documents no example"
        for name, example in examples.items():
            response = await api.post(path, json=example["value"])
            assert response.status_code == code, (path, name, response.text)
    assert store.counts()["dead"] == 0


async def test_requeue_needs_the_token(api: httpx.AsyncClient, store: TaskStore) -> None:
    dead = _dead(store, ["x"])
    response = await api.post("/tasks/requeue", json={"ids": dead},
                              headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401 and store.counts()["dead"] == 1


async def test_body_limits_hold_where_the_app_is_mounted(
        make_tasks_api: MakeTasksApi, store: TaskStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The Airflow plugin mounts the app under /llm-router, its routes under /api: the
    limits still apply (the mount's prefix is not part of the route's path)."""
    from fastapi import FastAPI

    monkeypatch.setitem(tasks_api.BODY_LIMITS, "/tasks", 1000)
    inner = await make_tasks_api(prefix="/api")
    parent = FastAPI()
    parent.mount("/llm-router", inner._transport.app)  # type: ignore[attr-defined]
    body = json.dumps({"tasks": [{"prompt": "x" * 1000}]})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=parent),
                                 base_url="http://airflow", headers=AUTH) as client:
        refused = await client.post("/llm-router/api/tasks", content=body,
                                    headers={"Content-Type": "application/json"})
        schedule = await client.post("/llm-router/api/schedule", content="x" * 100_000,
                                     headers={"Content-Type": "application/json"})
        fits = await client.post("/llm-router/api/tasks", json={"tasks": [{"prompt": "ok"}]})
    assert (refused.status_code, schedule.status_code, fits.status_code) == (413, 413, 201)
    assert store.counts()["pending"] == 1
