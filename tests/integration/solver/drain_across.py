"""A whole drain across a Redis fault, shared by the Sentinel and the Cluster failover
tests: ``N`` tasks drained by a ``DrainTrigger`` in this process against the simulator (one-
second windows, router targets equal to the provider's limits: zero slack), the fault run
once ``FIRST`` are solved, then the checks every such test makes with the backend's own
counters (429s, violations, the busiest window's calls per model), the task store (every
task solved once; the longest stretch without an answer after the fault) and the router
(every lease settled)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import httpx
import psycopg
import pytest
from airflow.triggers.base import TriggerEvent

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.store import TaskStore
from tests.integration.backends import drain_of, serve_backend, set_quotas_from, small_profile

__all__ = ["FIRST", "GUARD_MS", "WINDOW_S", "Drained", "N", "drain_across", "drain_started",
           "solved_at"]

#: tasks: about 15 s of the profile's 75 calls a second, so the drain outlasts the fault
N = 1100
#: tasks solved before the fault
FIRST = 100
GUARD_MS = 50
#: the simulator's window (one provider minute at time scale 60)
WINDOW_S = 1.0


@dataclass
class Drained:
    """What a drain across a fault did: when the fault ran, the answers' times, the
    trigger's event, the simulator's ``/stats`` and the router's leases left open."""

    started: float
    ended: float
    solved: list[float]
    event: dict[str, Any]
    stats: dict[str, Any]
    in_flight: dict[str, int]

    @property
    def pause(self) -> float:
        """The longest stretch without an answer from the fault's end to the last answer."""
        later = [self.ended, *(t for t in self.solved if t > self.ended)]
        return max((b - a for a, b in pairwise(later)), default=0.0)

    def report(self, fault: str) -> str:
        during = sum(self.started < t < self.ended for t in self.solved)
        peaks = {m: (e["peak_offered_requests_in_window"], e["limits"]["rpm"])
                 for m, e in self.stats["models"].items()}
        return (f"{fault}: fault {self.ended - self.started:.1f} s, {during} answers during "
                f"it, longest pause after it {self.pause:.2f} s; drain "
                f"{self.event.get('summary', {}).get('elapsed_s')} s; backend totals "
                f"{self.stats['totals']}; busiest window (calls, rpm) {peaks}")

    def check(self, store: TaskStore, max_pause_s: float) -> None:
        """Every task solved once, no 429 and no window over a limit at the backend, the
        drain going on after the fault within ``max_pause_s``, every lease settled."""
        assert self.event["status"] == "done", self.event
        counts = store.counts()
        assert counts["solved"] == N and counts["claimed"] == 0 and counts["pending"] == 0
        totals = self.stats["totals"]
        assert totals["completed"] == N, totals  # no call made twice
        assert totals["rejected_429"] == 0, totals
        assert totals["violations"] == 0, self.stats["models"]
        peaks = {m: (e["peak_offered_requests_in_window"], e["limits"]["rpm"])
                 for m, e in self.stats["models"].items()}
        assert all(calls <= rpm for calls, rpm in peaks.values()), peaks
        assert any(t > self.ended for t in self.solved)  # the drain went on after it
        assert self.pause < max_pause_s, self.pause
        assert set(self.in_flight.values()) == {0}, self.in_flight


async def drain_started(store: TaskStore, pg_schema: str, settings: dict[str, Any],
                        first: int, poll_s: float = 0.05) -> asyncio.Task[TriggerEvent]:
    """Run a drain (:func:`~tests.integration.backends.drain_of`, its deadline 120 s away,
    ended after 150 s at most) as a task; return it once ``first`` tasks are solved or it
    has ended."""
    trigger = drain_of(pg_schema, settings, 120)
    drain = asyncio.create_task(asyncio.wait_for(anext(trigger.run()), 150))
    while store.counts()["solved"] < first and not drain.done():
        await asyncio.sleep(poll_s)  # a poll of the store: nothing to wait on
    return drain


def solved_at(dsn: str, schema: str) -> list[float]:
    """When each solved task of ``schema.tasks`` was solved (epoch seconds), in order."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f'SELECT extract(epoch FROM solved_at) FROM "{schema}".tasks '
                            "WHERE status = 'solved' ORDER BY solved_at").fetchall()
    return [float(t) for (t,) in rows]


async def drain_across(fault: Callable[[], object], *, url: str, conn: dict[str, Any],
                       monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
                       pg_schema: str, store: TaskStore) -> Drained:
    """Drain ``N`` tasks with the router connection ``conn`` (its ``extra`` gets the
    namespace, a 10 s lease TTL and ``GUARD_MS``), running ``fault`` (blocking: it returns
    once Redis serves again) when ``FIRST`` are solved; ``url`` reaches the same Redis for
    the quotas and the leases' count."""
    profile = small_profile(time_scale=60)
    store.enqueue([f"question {i}: " + "why " * (i % 20) for i in range(N)])
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        extra = {**conn.get("extra", {}), "namespace": namespace, "lease_ttl_s": 10,
                 "guard_ms": GUARD_MS}
        monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
            {"conn_type": "llm_router", **conn, "extra": extra}))
        router = RouterClient.from_url(url, RouterSettings(namespace=namespace))
        try:
            set_quotas_from(router, profile)
            # no hedges: this counts one call per prompt
            drain = await drain_started(store, pg_schema, {
                "claim_ttl_s": 30.0, "claim_batch": 100, "max_in_flight": 100,
                "backoff_s": 0.05, "hedge_late_calls": False}, FIRST)
            assert not drain.done(), "the drain ended before the fault"
            started = time.time()
            await asyncio.to_thread(fault)
            ended = time.time()
            event = (await drain).payload
            stats = httpx.get(sim.url + "/stats").json()
            in_flight = {m: s.in_flight for m, s in router.stats().models.items()}
        finally:
            router.close()
    return Drained(started, ended, solved_at(pg_dsn, pg_schema), event, stats, in_flight)
