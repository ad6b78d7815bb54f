"""A drain fills its ``max_in_flight`` at its start as fast as it can claim: claims of
``claim_batch`` follow each other while slots are open, so a window's worth of calls goes
out at once (the second window mirrors the first, so a slow first burst is paid twice).
It used to claim one batch, then wait for a call to end or ``flush_every_s`` to pass
before claiming the next.

The backend is a real HTTP server in the test process that holds every call until the
test lets them go; the drain is the real ``DrainTrigger`` on the real Redis and
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from airflow_llm_router.engine.client import RouterClient
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import DrainTrigger
from tests.integration.solver.stub_backend import Reply, serve

TASKS, BATCH, IN_FLIGHT = 60, 10, 40
#: long enough that a drain waiting for it between claims cannot reach IN_FLIGHT in time
FLUSH_EVERY_S = 30.0
#: how long the calls may take to reach the backend (a loaded machine included)
WITHIN_S = 10.0


class Held:
    """Holds every call until :meth:`let_go`; counts the calls that arrived."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.arrived = 0
        self.lock = threading.Condition()

    def hold(self, doc: dict[str, Any]) -> None:
        with self.lock:
            self.arrived += 1
            self.lock.notify_all()
        self.go.wait(60)

    def answer(self, doc: dict[str, Any]) -> Reply:
        return 200, {}, {"answer": "ok", "usage": {"input_tokens": 3, "output_tokens": 4}}

    def wait_for(self, n: int, timeout_s: float) -> int:
        with self.lock:
            self.lock.wait_for(lambda: self.arrived >= n, timeout_s)
            return self.arrived


async def test_a_drain_fills_its_calls_in_flight_at_once(
        monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
        store: TaskStore, router: RouterClient) -> None:
    # room for every call; the output is capped (max_output_tokens), so admission knows
    # each call's tokens and no cold start holds the model to a few calls
    router.set_quota("m", {"rpm": 1000, "tpm": 10**7, "max_concurrency": 100,
                           "window_s": 60, "expected_latency_s": 30})
    store.enqueue([f"prompt {i}" for i in range(TASKS)])
    backend = Held()
    with serve(backend.answer, backend.hold) as server:
        monkeypatch.setenv("AIRFLOW_CONN_MODELS_BACKEND_DEFAULT", json.dumps(
            {"conn_type": "models_backend", "host": server.url, "extra": {"timeout_s": 60}}))
        monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
            {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
             "extra": {"namespace": namespace}}))
        monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_DEFAULT", pg_dsn)
        trigger = DrainTrigger(
            store={"postgres_conn_id": "postgres_default", "schema": pg_schema,
                   "table": "tasks"},
            worker_id="drain-under-test",
            settings={"claim_batch": BATCH, "max_in_flight": IN_FLIGHT,
                      "flush_every_s": FLUSH_EVERY_S, "max_output_tokens": 16,
                      "hedge_late_calls": False},
            router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
            deadline=time.time() + 120)
        drain = asyncio.create_task(anext(trigger.run()))
        try:
            arrived = await asyncio.to_thread(backend.wait_for, IN_FLIGHT, WITHIN_S)
            # every slot's call is at the backend, none ended: claims did not wait for one
            assert arrived == IN_FLIGHT, f"{arrived} calls reached the backend"
            assert store.counts()["claimed"] == IN_FLIGHT
        finally:
            backend.go.set()
        event = (await asyncio.wait_for(drain, 60)).payload
    assert event["status"] == "done" and event["summary"]["solved"] == TASKS, event
    assert store.counts()["solved"] == TASKS
