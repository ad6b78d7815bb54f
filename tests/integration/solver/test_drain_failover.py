"""A drain whose router is a Sentinel-managed master, across a failover: no window over
target at the backend, no 429, and a pause of about one window.

A master, its replica and a sentinel on loopback ports (``LocalSentinel``), a
``DrainTrigger`` run in this process against the simulator in its own (one-second windows,
router targets equal to the provider's limits: zero slack), and mid-drain either
``SENTINEL FAILOVER`` (the old master goes on taking the drain's admissions until it is
demoted, seconds later) or a SIGKILL of the master (an outage until the replica is
promoted). Without the hold on a master change (``engine/failover.py``) a failover sent a
window's worth again at once (measured 18 429s in a 30-call window). Checked with the
backend's own counters (429s, violations, the busiest window's calls per model), the task
store (every task solved once; the longest stretch without an answer after the failover)
and the router (every lease settled).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from itertools import pairwise

import httpx
import psycopg
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import DrainTrigger
from llm_router_devkit.redis_tools import LocalSentinel
from tests.integration.backends import serve_backend, set_quotas_from, small_profile
from tests.integration.engine.test_failover_hold import FAULTS

pytestmark = pytest.mark.timeout(180)

#: tasks: about 15 s of the profile's 75 calls a second, so the drain outlasts the fault
N = 1100
#: tasks solved before the fault
FIRST = 100
GUARD_MS = 50
#: the simulator's window (one provider minute at time scale 60)
WINDOW_S = 1.0
#: from the failover's end to the first answer after it: the reconnection (the outage's
#: backoff, up to 2 s), the hold (one window + guard) and a call's round trip
MAX_PAUSE_S = WINDOW_S + GUARD_MS / 1000 + 2.5


@pytest.fixture
def sentinel() -> Iterator[LocalSentinel]:
    with LocalSentinel() as s:
        yield s


def _solved_at(dsn: str, schema: str) -> list[float]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f'SELECT extract(epoch FROM solved_at) FROM "{schema}".tasks '
                            "WHERE status = 'solved' ORDER BY solved_at").fetchall()
    return [float(t) for (t,) in rows]


def _longest_gap(times: list[float], after: float) -> float:
    """The longest stretch without an answer from ``after`` to the last answer."""
    later = [after, *(t for t in times if t > after)]
    return max((b - a for a, b in pairwise(later)), default=0.0)


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_drain_across_a_failover_keeps_every_window(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, sentinel: LocalSentinel, fault: str,
) -> None:
    profile = small_profile(time_scale=60)
    store.enqueue([f"question {i}: " + "why " * (i % 20) for i in range(N)])
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        assert sentinel.sentinel is not None
        monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
            {"conn_type": "llm_router", "host": "127.0.0.1", "port": sentinel.sentinel.port,
             "extra": {"namespace": namespace, "sentinel_master": sentinel.master_name,
                       "lease_ttl_s": 10, "guard_ms": GUARD_MS}}))
        router = RouterClient.from_url(sentinel.url, RouterSettings(namespace=namespace))
        try:
            set_quotas_from(router, profile)
            trigger = DrainTrigger(
                store={"postgres_conn_id": "postgres_default", "schema": pg_schema,
                       "table": "tasks"},
                worker_id="drain-under-test",
                # no hedges: this counts one call per prompt
                settings={"claim_ttl_s": 30.0, "claim_batch": 100, "max_in_flight": 100,
                          "backoff_s": 0.05, "hedge_late_calls": False},
                router_conn_id="llm_router_default",
                backend_conn_id="models_backend_default", deadline=time.time() + 120)
            drain = asyncio.create_task(asyncio.wait_for(anext(trigger.run()), 150))
            while store.counts()["solved"] < FIRST and not drain.done():
                await asyncio.sleep(0.05)  # a poll of the store: nothing to wait on
            assert not drain.done(), "the drain ended before the fault"
            started = time.time()
            await asyncio.to_thread(FAULTS[fault], sentinel)  # returns once promoted
            ended = time.time()
            event = (await drain).payload
            stats = httpx.get(sim.url + "/stats").json()
            in_flight = {m: s.in_flight for m, s in router.stats().models.items()}
        finally:
            router.close()
    solved = _solved_at(pg_dsn, pg_schema)
    pause = _longest_gap(solved, ended)
    during = sum(started < t < ended for t in solved)
    peaks = {m: (e["peak_offered_requests_in_window"], e["limits"]["rpm"])
             for m, e in stats["models"].items()}
    print(f"{fault}: failover {ended - started:.1f} s, {during} answers during it, "
          f"longest pause after it {pause:.2f} s; drain "
          f"{event.get('summary', {}).get('elapsed_s')} s; backend totals "
          f"{stats['totals']}; busiest window (calls, rpm) {peaks}")
    assert event["status"] == "done", event
    counts = store.counts()
    assert counts["solved"] == N and counts["claimed"] == 0 and counts["pending"] == 0
    assert stats["totals"]["completed"] == N, stats["totals"]  # no call made twice
    # the backend's own strict counters: no 429, no window over a limit
    assert stats["totals"]["rejected_429"] == 0, stats["totals"]
    assert stats["totals"]["violations"] == 0, stats["models"]
    assert all(calls <= rpm for calls, rpm in peaks.values()), peaks
    assert len([t for t in solved if t > ended]) > 0  # the drain went on after it
    assert pause < MAX_PAUSE_S, pause
    assert set(in_flight.values()) == {0}, in_flight  # every lease settled
