"""A start in the worker that has spent its time still hedges its stragglers.

``SolveTaskOperator`` drains in the worker until ``start_in_worker_s`` is spent, then
claims nothing more and waits for its calls in flight before it defers. A call among them
that runs late is hedged all the same (until the task's own deadline): the hand-off waits
for the first answer, not for the straggler. The backend is a real HTTP server in the
test process that holds every call to "sticky" (tests/integration/solver/stub_backend.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.operators.solve import SolveTaskOperator
from airflow_llm_router.store import TaskStore
from tests.integration.operators.running import context
from tests.integration.solver.stub_backend import Reply, serve

#: the start in the worker's time (s), and when a call on sticky is late: its prior
#: latency, 6 s, plus half of it (docs/engine.md); the call is late well after the start
#: in the worker has stopped claiming
START_S = 3.0
SLOW = {"rpm": 1000, "tpm": 10**7, "max_concurrency": 100, "expected_latency_s": 6.0}
QUICK = {"rpm": 1000, "tpm": 10**7, "max_concurrency": 100, "expected_latency_s": 0.2}
#: the held call is let go after this long at most (a hedge would have answered by then)
HELD_S = 20.0


class Sticky:
    """Holds calls to "sticky" until :meth:`let_go` (or :data:`HELD_S`)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.held_at: list[float] = []
        self.go = threading.Event()

    def hold(self, doc: dict[str, Any]) -> None:
        self.calls[doc["model"]] += 1
        if doc["model"] == "sticky":
            self.held_at.append(time.time())
            self.go.wait(HELD_S)

    def answer(self, doc: dict[str, Any]) -> Reply:
        return 200, {}, {"answer": f"from {doc['model']}",
                         "usage": {"input_tokens": 3, "output_tokens": 4}}

    def let_go_once_quick_settled(self, router: RouterClient) -> None:
        """Let sticky's call go once quick's answer is in and settled (the hedge won)."""
        until = time.monotonic() + HELD_S
        while not self.go.is_set() and time.monotonic() < until:
            if router.stats(["quick"]).models["quick"].counters["completed"] >= 1:
                break
            time.sleep(0.02)
        self.go.set()


def test_a_start_in_the_worker_hedges_a_call_late_after_its_time_is_spent(
    monkeypatch: pytest.MonkeyPatch, namespace: str, redis_url: str, pg_dsn: str,
    pg_schema: str,
) -> None:
    router = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    router.set_quota("sticky", SLOW)
    router.set_quota("quick", QUICK)
    backend = Sticky()
    watch = threading.Thread(target=backend.let_go_once_quick_settled, args=(router,))
    with serve(backend.answer, backend.hold) as server, \
            TaskStore(pg_dsn, schema=pg_schema) as store:
        monkeypatch.setenv("AIRFLOW_CONN_MODELS_BACKEND_DEFAULT", json.dumps(
            {"conn_type": "models_backend", "host": server.url,
             "extra": {"timeout_s": 60}}))
        monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
            {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
             "extra": {"namespace": namespace}}))
        monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_DEFAULT", pg_dsn)
        store.migrate()
        (task_id,) = store.enqueue(["prompt 1"], allowed_models=["sticky", "quick"])
        op = SolveTaskOperator(task_id="t", store_schema=pg_schema,
                               settings={"start_in_worker_s": START_S, "linger_s": 0})
        started = time.time()
        watch.start()
        try:
            with pytest.raises(TaskDeferred) as deferred:
                op.execute(context())
        finally:
            backend.go.set()
            watch.join()
            router.close()
        row = store.get(task_id)
    # the call went out within the start's time, and was late only after it
    assert len(backend.held_at) == 1 and backend.held_at[0] < started + START_S
    in_worker = deferred.value.trigger.state["in_worker"]
    assert in_worker["solved"] == 1, in_worker
    assert row is not None and row.status == "solved" and row.answer == "from quick", row
    assert backend.calls == {"sticky": 1, "quick": 1}
