"""BackpressureSensor against a real task store and router: pokes until work exists."""

from __future__ import annotations

import json

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.sensors.backpressure import BackpressureSensor
from airflow_llm_router.store import TaskStore


@pytest.fixture
def sensor(monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
           pg_schema: str) -> BackpressureSensor:
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_SENSOR", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
         "extra": {"namespace": namespace}}))
    monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_SENSOR", pg_dsn)
    return BackpressureSensor(task_id="advice", router_conn_id="llm_router_sensor",
                              postgres_conn_id="postgres_sensor", store_schema=pg_schema,
                              per_solver_in_flight=4, max_solvers=8)


def test_keeps_poking_on_an_empty_backlog(sensor: BackpressureSensor, store: TaskStore,
                                          router: RouterClient) -> None:
    router.set_quota("m", {"rpm": 60, "tpm": 10**6, "max_concurrency": 50,
                           "expected_latency_s": 10.0})
    result = sensor.poke({})
    assert not result.is_done and result.xcom_value is None


def test_keeps_poking_without_an_enabled_model(sensor: BackpressureSensor, store: TaskStore,
                                               router: RouterClient) -> None:
    store.enqueue(["a prompt"])
    assert not sensor.poke({}).is_done  # no model at all
    router.set_quota("m", {"rpm": 60, "tpm": 10**6, "max_concurrency": 50, "enabled": False})
    assert not sensor.poke({}).is_done


def test_returns_the_advice_when_backlog_exists(sensor: BackpressureSensor, store: TaskStore,
                                                router: RouterClient) -> None:
    # a: 10 per 10 s window, 10 s per call: 10 in flight; b: 2/s * 3 s = 6 steady, 120 for
    # its 60 s window at once, capped at 5 -> 15 -> 4 solvers.
    router.set_quota("a", {"rpm": 10, "tpm": 10**6, "max_concurrency": 50, "window_s": 10.0,
                           "expected_latency_s": 10.0})
    router.set_quota("b", {"rpm": 120, "tpm": 10**6, "max_concurrency": 5,
                           "expected_latency_s": 3.0})
    store.enqueue([f"prompt {i}" for i in range(100)])
    result = sensor.poke({})
    assert result.is_done
    advice = json.loads(json.dumps(result.xcom_value))
    assert advice["backlog"] == 100 and advice["in_flight_needed"] == pytest.approx(15.0)
    assert advice["solvers"] == 4
    assert advice["models"]["b"]["binding"] == "concurrency"
    # A small backlog caps the fan-out: 6 tasks left keep only two solvers of 4 busy.
    store.claim(94, worker_id="w", claim_ttl_s=60)
    result = sensor.poke({})
    assert result.is_done and result.xcom_value["backlog"] == 6
    assert result.xcom_value["solvers"] == 2


def test_with_lead_solvers_it_looks_once_and_lists_the_solvers_beyond_them(
    sensor: BackpressureSensor, store: TaskStore, router: RouterClient
) -> None:
    """Beside a lead solver the sensor does not wait (the lead takes what arrives): on an
    empty backlog it adds no solver, and with a backlog it lists the advised ones less the
    lead."""
    router.set_quota("b", {"rpm": 120, "tpm": 10**6, "max_concurrency": 5,
                           "expected_latency_s": 3.0})
    sensor.solver_kwargs = {"store_schema": "s"}
    sensor.lead_solvers = 1
    assert sensor.execute({}) == []  # no deferral: nothing to wait for
    store.enqueue([f"prompt {i}" for i in range(100)])
    # 5 calls in flight, 4 per solver: 2 solvers, the lead and one more
    assert sensor.execute({}) == [{"store_schema": "s"}]
    # the lead claimed them all before the sensor looked: still the fan-out's work, still
    # 2 solvers (an empty backlog alone would add none)
    store.claim(100, worker_id="lead", claim_ttl_s=60)
    assert sensor.execute({}) == [{"store_schema": "s"}]


@pytest.mark.parametrize("kwargs", [{"lead_solvers": -1, "solver_kwargs": {}},
                                    {"lead_solvers": 1}])
def test_lead_solvers_need_solver_kwargs_and_a_count(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="lead_solvers"):
        BackpressureSensor(task_id="advice", **kwargs)  # type: ignore[arg-type]
