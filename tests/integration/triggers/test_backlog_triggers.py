"""The backlog triggers against the real PostgreSQL and Redis: woken by an enqueue's
notification, not by their polls (set to a minute here)."""

from __future__ import annotations

import asyncio
import importlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.sensors.backpressure import BackpressureSensor
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.backlog import BacklogArrivalTrigger, BackpressureTrigger
from tests.integration.watching import until_listening

#: 1 call/s over a 10 s window, 10 s per call: 10 in flight (a window's calls, and the
#: steady rate's).
QUOTA = {"rpm": 10, "tpm": 10**6, "max_concurrency": 50, "window_s": 10.0,
         "expected_latency_s": 10.0}


@pytest.fixture
def conns(monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_WATCH", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
         "extra": {"namespace": namespace}}))
    monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_WATCH", pg_dsn)


def _roundtrip(trigger: BaseTrigger) -> BaseTrigger:
    """What the triggerer does: import the class path, rebuild from the kwargs."""
    path, kwargs = trigger.serialize()
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))


def _backpressure_trigger(schema: str) -> BackpressureTrigger:
    return BackpressureTrigger(router_conn_id="llm_router_watch",
                               postgres_conn_id="postgres_watch", schema=schema, table="tasks",
                               per_solver_in_flight=4, max_solvers=8, poll_interval_s=60)


async def test_backpressure_trigger_fires_on_enqueue(
    conns: None, store: TaskStore, router: RouterClient, pg_dsn: str, pg_schema: str
) -> None:
    router.set_quota("m", QUOTA)
    trigger = _roundtrip(_backpressure_trigger(pg_schema))
    events: AsyncIterator[TriggerEvent] = trigger.run()
    pending = asyncio.ensure_future(anext(events))
    await until_listening(pg_dsn, pg_schema, pending)
    assert not pending.done()  # an empty backlog: still waiting
    await asyncio.to_thread(store.enqueue, [f"p{i}" for i in range(30)])
    event = (await asyncio.wait_for(pending, 10)).payload  # the poll is a minute away
    assert event["status"] == "ready" and event["backlog"] == 30
    # 1 call/s * 10 s = 10 in flight, 4 per solver -> 3 solvers
    assert event["advice"]["solvers"] == 3


async def test_backpressure_trigger_waits_for_an_enabled_model(
    conns: None, store: TaskStore, router: RouterClient, pg_dsn: str, pg_schema: str
) -> None:
    router.set_quota("m", {**QUOTA, "enabled": False})
    store.enqueue(["a prompt"])
    trigger = _backpressure_trigger(pg_schema)
    trigger.poll_interval_s = 0.05  # quota changes are seen on the poll
    pending = asyncio.ensure_future(anext(trigger.run()))
    await until_listening(pg_dsn, pg_schema, pending)
    assert not pending.done()
    router.set_quota("m", QUOTA)
    event = (await asyncio.wait_for(pending, 10)).payload
    assert event["status"] == "ready" and event["advice"]["models"]["m"]["enabled"]


async def test_backpressure_trigger_reports_errors(monkeypatch: pytest.MonkeyPatch,
                                                   conns: None, pg_schema: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_WATCH", "postgresql://nobody@127.0.0.1:1/none")
    event = (await asyncio.wait_for(anext(_backpressure_trigger(pg_schema).run()), 30)).payload
    assert event["status"] == "error" and "OperationalError" in event["error"]


async def test_arrival_trigger_fires_at_start_then_on_enqueues(
    conns: None, store: TaskStore, pg_dsn: str, pg_schema: str
) -> None:
    store.enqueue(["early 1", "early 2", "early 3"])  # before anyone listened
    trigger = _roundtrip(BacklogArrivalTrigger(postgres_conn_id="postgres_watch",
                                               schema=pg_schema, min_interval_s=0.5,
                                               poll_interval_s=60))
    events = trigger.run()
    first = (await asyncio.wait_for(anext(events), 10)).payload
    assert first == {"backlog": 3, "announced": 0}
    await asyncio.to_thread(store.enqueue, ["a", "b"])
    second = (await asyncio.wait_for(anext(events), 10)).payload
    assert second == {"backlog": 5, "announced": 2}
    # enqueues within min_interval_s of an event are folded into one event after it
    fired = time.monotonic()
    await asyncio.to_thread(store.enqueue, ["c"])
    await asyncio.to_thread(store.enqueue, ["d", "e"])
    third = (await asyncio.wait_for(anext(events), 10)).payload
    assert third == {"backlog": 8, "announced": 3}
    assert time.monotonic() - fired >= 0.45
    await events.aclose()


async def test_arrival_trigger_counts_the_backlog_up_to_its_cap(
    conns: None, store: TaskStore, pg_dsn: str, pg_schema: str
) -> None:
    """Each read counts at most ``backlog_cap`` pending tasks (a full count reads every
    pending entry of the claim index, per poll); enqueues still fire past the cap."""
    store.enqueue([f"early {i}" for i in range(5)])
    trigger = _roundtrip(BacklogArrivalTrigger(postgres_conn_id="postgres_watch",
                                               schema=pg_schema, min_interval_s=0,
                                               poll_interval_s=60, backlog_cap=2))
    events = trigger.run()
    first = (await asyncio.wait_for(anext(events), 10)).payload
    assert first == {"backlog": 2, "announced": 0}
    await asyncio.to_thread(store.enqueue, ["late"])
    second = (await asyncio.wait_for(anext(events), 10)).payload
    assert second == {"backlog": 2, "announced": 1}
    await events.aclose()


async def test_backpressure_trigger_counts_the_backlog_up_to_its_cap(
    conns: None, store: TaskStore, router: RouterClient, pg_schema: str
) -> None:
    router.set_quota("m", QUOTA)
    store.enqueue([f"p{i}" for i in range(30)])
    trigger = _backpressure_trigger(pg_schema)
    trigger.backlog_cap = 5
    event = (await asyncio.wait_for(anext(_roundtrip(trigger).run()), 10)).payload
    assert event["status"] == "ready" and event["backlog"] == 5


@pytest.mark.parametrize("cap", [0, -1, 2.5, True, "10"])
def test_backlog_triggers_reject_a_bad_cap(cap: Any) -> None:
    with pytest.raises(ValueError, match="backlog_cap must be an integer >= 1"):
        BacklogArrivalTrigger(backlog_cap=cap)
    with pytest.raises(ValueError, match="backlog_cap must be an integer >= 1"):
        BackpressureTrigger(router_conn_id="r", postgres_conn_id="p", schema="s", table="t",
                            per_solver_in_flight=1, max_solvers=1, backlog_cap=cap)


def test_sensor_counts_the_backlog_up_to_the_report_cap(
    monkeypatch: pytest.MonkeyPatch, conns: None, store: TaskStore, router: RouterClient,
    pg_schema: str
) -> None:
    router.set_quota("m", QUOTA)
    store.enqueue([f"p{i}" for i in range(30)])
    monkeypatch.setattr("airflow_llm_router.sensors.backpressure.BACKLOG_REPORT_CAP", 4)
    sensor = BackpressureSensor(task_id="advise", router_conn_id="llm_router_watch",
                                postgres_conn_id="postgres_watch", store_schema=pg_schema,
                                per_solver_in_flight=4, max_solvers=8, poke_interval=7,
                                timeout=600)
    advice: Any = sensor.execute({})
    assert advice["backlog"] == 4


def test_sensor_defers_to_the_trigger_when_nothing_waits(
    conns: None, store: TaskStore, router: RouterClient, pg_schema: str
) -> None:
    router.set_quota("m", QUOTA)
    sensor = BackpressureSensor(task_id="advise", router_conn_id="llm_router_watch",
                                postgres_conn_id="postgres_watch", store_schema=pg_schema,
                                per_solver_in_flight=4, max_solvers=8, poke_interval=7,
                                timeout=600)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, BackpressureTrigger)
    assert (trigger.schema, trigger.per_solver_in_flight, trigger.poll_interval_s) == (
        pg_schema, 4, 7.0)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout is not None and deferred.value.timeout.total_seconds() == 600
    # with work waiting, the first check in the worker returns the advice without deferring
    store.enqueue(["a prompt"])
    advice: Any = sensor.execute({})
    assert advice["backlog"] == 1 and advice["solvers"] == 1


def test_sensor_resumes_with_the_advice_or_fails_with_the_error() -> None:
    sensor = BackpressureSensor(task_id="advise")
    advice = {"solvers": 2, "in_flight_needed": 7.5, "backpressure": 0.0}
    assert sensor.execute_complete({}, {"status": "ready", "backlog": 9,
                                        "advice": advice}) == advice
    with pytest.raises(AirflowException, match="OperationalError: refused"):
        sensor.execute_complete({}, {"status": "error", "error": "OperationalError: refused"})
