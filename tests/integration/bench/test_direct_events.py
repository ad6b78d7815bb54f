"""``bench.direct`` fires a workload's events as ``bench.e2e`` does: W3's cut of the
busiest model's limits (in the router, through the given setter, then at the provider)
and W4's arrivals, each at its time after the first call the backend received, against a
real simulator."""

from __future__ import annotations

from typing import Any

import httpx

from bench.direct import _Events
from bench.e2e.run import busiest_model
from bench.e2e.workloads import Arrival, QuotaChange, Workload
from llm_router_devkit.demo.seed import SeedTask, make_backlog
from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer


def test_events_fire_at_their_time_after_the_first_call() -> None:
    profile = SimulatorProfile.default(time_scale=300)  # a 0.2 s window
    names = [m.name for m in profile.models]
    tasks = make_backlog(30, seed=1, models=names)
    workload = Workload("T", "a test", tuple(tasks[:20]),
                        arrivals=(Arrival(0.5, tuple(tasks[20:])),),
                        quota_change=QuotaChange(at_windows=1.0))
    quotas: list[tuple[str, dict[str, Any]]] = []
    arrived: list[tuple[SeedTask, ...]] = []
    server = SimulatorServer(profile).start()
    try:
        events = _Events(server.url, workload, profile,
                         lambda model, quota: quotas.append((model, quota)), arrived.append)
        events.start()
        with httpx.Client(base_url=server.url, timeout=10) as http:
            before = http.get("/limits").json()
            assert events.fired == []  # nothing before the first call
            http.post("/single", json={"model": "flash", "prompt": "the first call"})
            events.join(timeout=10)
            after = http.get("/limits").json()
    finally:
        events.stop()
        server.stop()
    assert not events.is_alive()
    assert [e["event"] for e in events.fired] == ["arrival", "quota_change"], events.fired
    arrival, change = events.fired
    assert 0.1 <= arrival["at_s"] < 0.2 + 1.0 and 0.2 <= change["at_s"] < 0.2 + 1.0
    assert arrived == [tuple(tasks[20:])]
    model = busiest_model(profile, workload)
    assert change["model"] == model and [m for m, _ in quotas] == [model]
    rpm = before[model]["rpm"]
    assert after[model]["rpm"] == rpm // 2 and quotas[0][1]["rpm"] == rpm // 2
