"""The simulator counts the TCP connections its callers open (``/stats``' ``connections``):
a client that keeps its connection alive shows one for all its requests, one that opens a
connection per request shows one each, and a reset starts the count again."""

from __future__ import annotations

import httpx

from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer


def test_stats_count_the_connections_callers_open() -> None:
    with SimulatorServer(SimulatorProfile.default(time_scale=600, seed=1)) as sim, \
            httpx.Client() as kept:  # one connection, kept alive
        kept.post(f"{sim.url}/stats/reset").raise_for_status()
        for _ in range(5):
            kept.get(f"{sim.url}/health").raise_for_status()
        for _ in range(3):  # a new connection each
            httpx.get(f"{sim.url}/health").raise_for_status()
        seen = kept.get(f"{sim.url}/stats").json()["connections"]
        kept.post(f"{sim.url}/stats/reset").raise_for_status()
        after_reset = kept.get(f"{sim.url}/stats").json()["connections"]
    assert seen == {"connections": 4, "requests": 9, "connections_per_request": 0.4444}
    assert after_reset == {"connections": 1, "requests": 1, "connections_per_request": 1.0}
