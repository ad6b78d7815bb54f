"""SolveTaskOperator outside a DAG run: deferral, resume, inline mode, bad input."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_llm_router.engine.client import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.operators.solve import SolveTaskOperator
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import SolveTrigger
from tests.integration.backends import serve_backend, set_quotas_from, small_profile
from tests.integration.watching import until_listening


def _context(map_index: int = -1) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=map_index, try_number=1)
    return {"ti": ti}


async def _fire(trigger: SolveTrigger) -> dict[str, Any]:
    return (await anext(trigger.run())).payload


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, redis_url: str):
    profile = small_profile(time_scale=600)
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        router = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
        set_quotas_from(router, profile)
        yield sim
        router.close()


def test_direct_prompts_defer_then_return_answers(backend: Any) -> None:
    op = SolveTaskOperator(task_id="t", prompts=["first question", "second question"])
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(_context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, SolveTrigger) and deferred.value.method_name == "execute_complete"
    answers = op.execute_complete(_context(), event=asyncio.run(_fire(trigger)))
    assert [a["status"] for a in answers] == ["solved", "solved"]
    assert all(a["answer"] and a["model"] and a["output_tokens"] > 0 for a in answers)


def test_single_prompt_inline_returns_one_answer(backend: Any) -> None:
    op = SolveTaskOperator(task_id="t", prompt="why is the sky blue?", deferrable=False,
                           models=["m3", "m2"])
    answer = op.execute(_context())
    assert answer["status"] == "solved" and answer["model"] == "m3"


def test_drain_inline_writes_every_answer(backend: Any, pg_dsn: str, pg_schema: str) -> None:
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(50)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema, chunk_size=20,
                               deferrable=False)
        summary = op.execute(_context(map_index=0))
        assert summary["solved"] == 50 and summary["chunks"] >= 3  # claims of <= 20
        assert store.counts()["solved"] == 50


def test_drain_defers_once_and_the_trigger_drains(
    backend: Any, pg_dsn: str, pg_schema: str
) -> None:
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(30)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema, chunk_size=20)
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(_context())
        trigger = deferred.value.trigger
        assert trigger.drain is not None and trigger.items is None
        assert store.counts()["pending"] == 30  # claims are the trigger's, as slots free up
        summary = op.execute_complete(_context(), event=asyncio.run(_fire(trigger)))
        assert summary["solved"] == 30 and store.counts()["solved"] == 30


def test_lingering_drain_takes_tasks_that_arrive_after_the_backlog_emptied(
    backend: Any, pg_dsn: str, pg_schema: str
) -> None:
    """With ``linger_s`` the drain waits, LISTENing, for new tasks instead of ending: an
    arrival is claimed at once, and the drain ends after ``linger_s`` with none."""
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"early {i}" for i in range(10)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema, linger_s=3)
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(_context())

        async def drain_with_a_late_arrival() -> dict[str, Any]:
            run = asyncio.create_task(_fire(deferred.value.trigger))
            await until_listening(pg_dsn, pg_schema, run)
            assert store.counts()["solved"] == 10 and not run.done()
            await asyncio.to_thread(store.enqueue, [f"late {i}" for i in range(5)])
            return await asyncio.wait_for(run, 30)

        event = asyncio.run(drain_with_a_late_arrival())
        summary = op.execute_complete(_context(), event=event)
        assert summary["solved"] == 15 and store.counts()["solved"] == 15


def test_drain_cut_short_returns_its_claims(backend: Any, pg_dsn: str, pg_schema: str) -> None:
    """A drain cancelled mid-way (its triggerer stopped) hands its claims back at once."""
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(400)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema, max_in_flight=50)
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(_context())

        async def cut_short() -> None:
            run = asyncio.create_task(_fire(deferred.value.trigger))
            while store.counts()["claimed"] == 0:
                await asyncio.sleep(0.01)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run

        asyncio.run(cut_short())
        counts = store.counts()
        assert counts["claimed"] == 0 and counts["solved"] < 400
        assert counts["pending"] + counts["solved"] == 400


def test_trigger_error_fails_the_task(backend: Any, pg_dsn: str, pg_schema: str) -> None:
    from airflow.sdk.exceptions import AirflowException

    op = SolveTaskOperator(task_id="t", store_schema=pg_schema)
    with pytest.raises(AirflowException, match="boom"):
        op.execute_complete(_context(), event={"status": "error", "error": "boom",
                                               "state": {"mode": "drain"}})


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prompt": "a", "prompts": ["b"]}, "prompt"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"max_in_flight": -1}, "max_in_flight"),
        ({"time_budget_s": 0}, "time_budget_s"),
        ({"linger_s": -1}, "linger_s"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SolveTaskOperator(task_id="t", **kwargs)


def test_malformed_event_is_refused() -> None:
    from airflow.sdk.exceptions import AirflowException

    op = SolveTaskOperator(task_id="t")
    with pytest.raises(AirflowException, match="unexpected event"):
        op.execute_complete(_context(), event={"nope": 1})
