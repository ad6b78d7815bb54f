"""SolveTaskOperator outside a DAG run: deferral, resume, inline drain, bad input."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.operators.solve import SolveTaskAsyncOperator, SolveTaskOperator
from airflow_llm_router.solver.settings import DrainSettings
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import DrainTrigger
from tests.integration.backends import quotas_from, small_profile
from tests.integration.operators.running import context, fire
from tests.integration.watching import until_listening


def test_drain_inline_writes_every_answer(backend: Any, pg_dsn: str, pg_schema: str) -> None:
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(50)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema,
                               settings=DrainSettings(claim_batch=20), deferrable=False)
        summary = op.execute(context(map_index=0))
        assert summary["solved"] == 50 and summary["chunks"] >= 3  # claims of <= 20
        assert store.counts()["solved"] == 50


def test_the_async_operator_drains_in_the_workers_event_loop(
    backend: Any, pg_dsn: str, pg_schema: str
) -> None:
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(50)])
        op = SolveTaskAsyncOperator(task_id="t", store_schema=pg_schema, deferrable=True,
                                    settings=DrainSettings(claim_batch=20))
        assert op.is_async and not op.deferrable
        summary = op.execute(context(map_index=0))  # never defers: runs aexecute here
        assert summary["solved"] == 50 and store.counts()["solved"] == 50


def test_a_retry_takes_back_the_crashed_trys_claims_at_once(
    backend: Any, pg_dsn: str, pg_schema: str
) -> None:
    """Try 1 died holding claims (a worker killed: nothing handed back). Try 2 takes them
    back at once, keeping their attempts, instead of waiting for them to expire."""
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(30)])
        dead = store.claim(12, worker_id="d.t.r.0.try1", claim_ttl_s=3600)
        op = SolveTaskAsyncOperator(task_id="t", store_schema=pg_schema,
                                    settings={"linger_s": 0})
        summary = op.execute(context(map_index=0, try_number=2))
        assert summary["adopted"] == len(dead) == 12
        assert summary["solved"] == 30 and store.counts()["solved"] == 30
        for task in dead:
            row = store.get(task.id)
            assert row is not None and row.status == "solved" and row.attempts == 1


def test_a_retry_that_starts_in_the_worker_takes_back_the_crashed_trys_claims(
    backend: Any, pg_dsn: str, pg_schema: str
) -> None:
    """A worker killed during its start in the worker leaves its claims held (nothing
    handed back). The retry's own start takes them back at once, before it defers, and
    answers each once."""
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(30)])
        dead = store.claim(12, worker_id="d.t.r.0.try1", claim_ttl_s=3600)
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema,
                               settings={"linger_s": 0, "start_in_worker_s": 30})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context(map_index=0, try_number=2))
        in_worker = deferred.value.trigger.state["in_worker"]
        assert in_worker["adopted"] == len(dead) == 12
        assert in_worker["solved"] == 30 and store.counts()["solved"] == 30
        for task in dead:
            row = store.get(task.id)
            assert row is not None and row.status == "solved" and row.attempts == 1


def test_drain_defers_once_and_the_trigger_drains(
    backend: Any, pg_dsn: str, pg_schema: str
) -> None:
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(30)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema,
                               settings={"claim_batch": 20})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context())
        trigger = deferred.value.trigger
        assert isinstance(trigger, DrainTrigger) and trigger.settings["claim_batch"] == 20
        assert store.counts()["pending"] == 30  # claims are the trigger's, as slots free up
        summary = op.execute_complete(context(), event=asyncio.run(fire(trigger)))
        assert summary["solved"] == 30 and store.counts()["solved"] == 30


def test_lingering_drain_takes_tasks_that_arrive_after_the_backlog_emptied(
    backend: Any, pg_dsn: str, pg_schema: str
) -> None:
    """With ``linger_s`` the drain waits, LISTENing, for new tasks instead of ending: an
    arrival is claimed at once, and the drain ends after ``linger_s`` with none."""
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"early {i}" for i in range(10)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema,
                               settings={"linger_s": 3})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context())

        async def drain_with_a_late_arrival() -> dict[str, Any]:
            run = asyncio.create_task(fire(deferred.value.trigger))
            await until_listening(pg_dsn, pg_schema, run)
            assert store.counts()["solved"] == 10 and not run.done()
            await asyncio.to_thread(store.enqueue, [f"late {i}" for i in range(5)])
            return await asyncio.wait_for(run, 30)

        event = asyncio.run(drain_with_a_late_arrival())
        summary = op.execute_complete(context(), event=event)
        assert summary["solved"] == 15 and store.counts()["solved"] == 15


def test_a_start_in_the_worker_admits_before_deferring_and_the_trigger_lingers(
    backend: Any, pg_dsn: str, pg_schema: str
) -> None:
    """``start_in_worker_s``: the backlog is drained in the worker before the task defers
    (no wait for the triggerer's loop); the trigger then lingers for arrivals, and the
    summary counts both parts."""
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"early {i}" for i in range(10)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema,
                               settings={"linger_s": 3, "start_in_worker_s": 30})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context())
        assert store.counts()["solved"] == 10  # before deferring, in the worker
        trigger = deferred.value.trigger
        assert isinstance(trigger, DrainTrigger) and not trigger.until_empty
        assert trigger.state["in_worker"]["solved"] == 10

        async def linger_for_a_late_arrival() -> dict[str, Any]:
            run = asyncio.create_task(fire(trigger))
            await until_listening(pg_dsn, pg_schema, run)
            await asyncio.to_thread(store.enqueue, [f"late {i}" for i in range(5)])
            return await asyncio.wait_for(run, 30)

        summary = op.execute_complete(context(), event=asyncio.run(linger_for_a_late_arrival()))
        assert summary["solved"] == 15 and store.counts()["solved"] == 15


def test_a_start_in_the_worker_hands_the_rest_over_when_its_time_is_spent(
    backend: Any, pg_dsn: str, pg_schema: str, redis_url: str, namespace: str
) -> None:
    """The worker claims nothing after ``start_in_worker_s``: tasks it claimed and could not
    start go back to the backlog before it defers, none stays claimed, and the trigger
    solves the rest."""
    router = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    for name, quota in quotas_from(small_profile(time_scale=600)).items():
        router.set_quota(name, {**quota, "window_s": 1.0})  # 75 calls a second in all
    router.close()
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(200)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema,
                               settings={"start_in_worker_s": 0.5, "claim_batch": 200,
                                         "max_in_flight": 200})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context())
        counts = store.counts()
        in_worker = deferred.value.trigger.state["in_worker"]
        assert counts["claimed"] == 0 and counts["solved"] == in_worker["solved"]
        assert 0 < counts["solved"] < 200 and in_worker["released"] == counts["pending"]
        assert counts["pending"] + counts["solved"] == 200
        summary = op.execute_complete(context(),
                                      event=asyncio.run(fire(deferred.value.trigger)))
        assert summary["solved"] == 200 and store.counts()["solved"] == 200


def test_a_start_in_the_worker_can_take_the_advised_calls_in_flight_alone(
    backend: Any, pg_dsn: str, pg_schema: str
) -> None:
    """``start_in_flight=0``: the start in the worker keeps as many calls in flight as the
    router advises for the backlog (capped by it), not its own ``max_in_flight``: the 50
    tasks go in three claims of ``claim_batch`` (20, 20, 10) made at once, not in a claim
    of 20 and then one as each answer frees a slot."""
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(50)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema,
                               settings={"start_in_worker_s": 30, "start_in_flight": 0,
                                         "claim_batch": 20, "max_in_flight": 20})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context())
        in_worker = deferred.value.trigger.state["in_worker"]
        assert in_worker["solved"] == 50 and in_worker["chunks"] == 3
        assert deferred.value.trigger.settings["max_in_flight"] == 20  # the trigger's own


def test_the_advised_start_is_capped_by_what_the_advised_solvers_would_hold(
    backend: Any, pg_dsn: str, pg_schema: str, redis_url: str, namespace: str
) -> None:
    """A model with a huge quota asks for thousands of calls in flight: the start in the
    worker takes no more than the advice's solvers (at most 16) would hold, not one
    connection per call the quota allows."""
    router = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    router.set_quota("huge", {"rpm": 10**6, "tpm": 10**9, "max_concurrency": 10**5,
                              "window_s": 1.0, "expected_latency_s": 1.0})
    router.close()
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(3000)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema)
        backlog = op._migrate(count_backlog=True)
        assert backlog == 3000
        assert op._advised_in_flight(DrainSettings(max_in_flight=10), backlog) == 16 * 10
        # and never fewer than its own max_in_flight
        assert op._advised_in_flight(DrainSettings(max_in_flight=5000), backlog) == 5000


def test_drain_cut_short_returns_its_claims(backend: Any, pg_dsn: str, pg_schema: str) -> None:
    """A drain cancelled mid-way (its triggerer stopped) hands its claims back at once."""
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        store.enqueue([f"prompt {i}" for i in range(400)])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema,
                               settings={"max_in_flight": 50})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context())

        async def cut_short() -> None:
            run = asyncio.create_task(fire(deferred.value.trigger))
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
        op.execute_complete(context(), event={"status": "error", "error": "boom",
                                               "state": {}})


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prompt": "a"}, "prompt: .*SolvePromptsOperator"),
        ({"settings": {"claim_batch": 0}}, r"settings\.claim_batch: 0 is wrong"),
        ({"settings": {"max_in_flight": -1}}, r"settings\.max_in_flight: -1 is wrong"),
        ({"settings": {"time_budget_s": 0}}, r"settings\.time_budget_s: 0 is wrong"),
        ({"settings": {"linger_s": -1}}, r"settings\.linger_s: -1 is wrong"),
        ({"settings": {"chunk_size": 5}}, r"settings\.chunk_size: not a setting .*claim_batch"),
        ({"settings": "fast"}, "settings: give a DrainSettings or a dict"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SolveTaskOperator(task_id="t", **kwargs)


def test_templated_settings_are_checked_once_rendered() -> None:
    op = SolveTaskOperator(task_id="t", settings={"max_in_flight": "{{ params.n }}"})
    op.settings = {"max_in_flight": 0}  # as rendered from a bad param
    with pytest.raises(ValueError, match=r"settings\.max_in_flight: 0 is wrong"):
        op.parsed_settings()


def test_malformed_event_is_refused() -> None:
    from airflow.sdk.exceptions import AirflowException

    op = SolveTaskOperator(task_id="t")
    with pytest.raises(AirflowException, match="unexpected event"):
        op.execute_complete(context(), event={"nope": 1})
