"""``bench.direct`` fires a workload's events as ``bench.e2e`` does, from a process of its
own: W3's cut of the busiest model's limits (in the router's quota store, then at the
provider) and W4's arrivals (into the task store), each at its time after the first call
the backend received, against a real simulator, Redis and PostgreSQL."""

from __future__ import annotations

import httpx
from psycopg.conninfo import make_conninfo

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.quotas import QuotaStore
from airflow_llm_router.store import TaskStore
from bench.direct_events import EventsSpec, WorkloadEvents
from bench.e2e.run import CUT_GRACE_S, busiest_model
from bench.e2e.workloads import Arrival, QuotaChange, Workload
from llm_router_devkit.demo.seed import make_backlog
from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer


def test_events_fire_at_their_time_after_the_first_call(
        pg_dsn: str, pg_schema: str, redis_url: str, namespace: str,
        router: RouterClient) -> None:
    profile = SimulatorProfile.default(time_scale=300)  # a 0.2 s window
    names = [m.name for m in profile.models]
    tasks = make_backlog(30, seed=1, models=names)
    workload = Workload("T", "a test", tuple(tasks[:20]),
                        arrivals=(Arrival(0.5, tuple(tasks[20:])),),
                        quota_change=QuotaChange(at_windows=1.0))
    store = TaskStore(pg_dsn, schema=pg_schema)
    store.migrate()
    quotas = QuotaStore(pg_dsn, router, schema=pg_schema)
    quotas.migrate()
    model = busiest_model(profile, workload)
    server = SimulatorServer(profile).start()
    try:
        events = WorkloadEvents(EventsSpec(server.url, workload, profile, pg_dsn, pg_schema,
                                           redis_url, namespace))
        events.start()  # returns once the process watches for the first call
        with httpx.Client(base_url=server.url, timeout=10) as http:
            before = http.get("/limits").json()
            assert store.counts()["pending"] == 0  # nothing before the first call
            http.post("/single", json={"model": "flash", "prompt": "the first call"})
            events.wait(timeout_s=30)
            after = http.get("/limits").json()
    finally:
        events.stop()
        server.stop()
    assert [e["event"] for e in events.fired] == ["arrival", "quota_change"], events.fired
    arrival, change = events.fired
    assert 0.1 <= arrival["at_s"] < 0.2 + 1.0 and 0.2 <= change["at_s"] < 0.2 + 1.0
    # the change's stamp is taken once the provider enforces it, the grace after the router
    assert change["done_wall"] > 0 and change["model"] == model
    assert store.counts()["pending"] == 10
    rpm = before[model]["rpm"]
    assert after[model]["rpm"] == rpm // 2
    record = quotas.get(model)
    assert record is not None and record.quota.rpm == rpm // 2
    assert CUT_GRACE_S > 0


def test_a_failing_event_is_recorded_not_lost(
        pg_dsn: str, pg_schema: str, redis_url: str, namespace: str) -> None:
    """A store that cannot be reached (nothing listens on its port): the arrival fails in
    the process, and its error comes back with the record; the run goes on."""
    unreachable = make_conninfo(pg_dsn, port=1, connect_timeout=2)
    profile = SimulatorProfile.default(time_scale=300)
    tasks = make_backlog(4, seed=1, models=[m.name for m in profile.models])
    workload = Workload("T", "a test", tuple(tasks[:2]),
                        arrivals=(Arrival(0.5, tuple(tasks[2:])),))
    server = SimulatorServer(profile).start()
    try:
        events = WorkloadEvents(EventsSpec(server.url, workload, profile, unreachable,
                                           pg_schema, redis_url, namespace))
        events.start()
        httpx.post(server.url + "/single", json={"model": "flash", "prompt": "first"},
                   timeout=10)
        events.wait(timeout_s=30)
    finally:
        events.stop()
        server.stop()
    assert [e["event"] for e in events.fired] == ["arrival"], events.fired
    assert "error" in events.fired[0] and events.fired[0]["at_s"] >= 0.1
