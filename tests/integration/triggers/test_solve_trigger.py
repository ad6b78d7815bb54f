"""The solve trigger against the real Redis and the simulator over HTTP."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.triggers.solve import SolveTrigger
from tests.integration.backends import serve_backend, set_quotas_from, small_profile


def _items(n: int, tag: str = "t") -> list[dict]:
    return [SolveItem(key=str(i), prompt=f"question {i}: " + "why " * (i % 30),
                      request_id=f"{tag}-{i}").to_dict() for i in range(n)]


def _trigger(items: list[dict], seconds: float = 60, **settings: object) -> SolveTrigger:
    return SolveTrigger(items=items, router_conn_id="llm_router_default",
                        backend_conn_id="models_backend_default", deadline=time.time() + seconds,
                        settings={"max_in_flight": 200, "backoff_s": 0.05, **settings})


async def _event(trigger: SolveTrigger) -> dict:
    return (await anext(trigger.run())).payload


async def test_run_solves_every_item_within_limits(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, router: RouterClient
) -> None:
    profile = small_profile(time_scale=60)  # one-second windows
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        # no hedges: a late call's loser, cut off as the solve ends, keeps its lease (and
        # counts in flight) until it expires, and this counts one call per prompt
        event = await _event(_trigger(_items(150), hedge_late_calls=False))
        stats = httpx.get(sim.url + "/stats").json()
    assert event["status"] == "done"
    results = event["results"]
    assert [r["key"] for r in results] == [str(i) for i in range(150)]
    assert all(r["status"] == "solved" and r["answer"] for r in results)
    assert stats["totals"]["rejected_429"] == 0 and stats["totals"]["violations"] == 0
    engine = router.stats()
    assert all(m.in_flight == 0 for m in engine.models.values())
    assert sum(m.counters["admitted"] for m in engine.models.values()) == 150


async def test_a_restarted_trigger_counts_every_call_it_makes(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, router: RouterClient
) -> None:
    """A trigger killed mid-call and run again (failover) sends the killed run's calls
    again: each is a new request to the backend, so each is admitted afresh (the killed
    run's leases count until they expire). The router admitted at least every request the
    backend received."""
    profile = small_profile(time_scale=20)  # calls of ~50 ms: the first run is cut mid-call
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        items = _items(8, tag="restart")
        first = asyncio.create_task(_event(_trigger(items)))
        while httpx.get(sim.url + "/stats").json()["totals"]["requests"] < 8:
            await asyncio.sleep(0.005)
        first.cancel()  # the triggerer died: its leases stay live until they expire
        with pytest.raises(asyncio.CancelledError):
            await first
        event = await _event(_trigger(items))
        totals = httpx.get(sim.url + "/stats").json()["totals"]
    assert all(r["status"] == "solved" for r in event["results"])
    admitted = sum(m.counters["admitted"] for m in router.stats().models.values())
    assert totals["requests"] >= 16, totals  # every call of the first run was sent again
    assert admitted >= totals["requests"], (admitted, totals)
    assert totals["rejected_429"] == 0 and totals["violations"] == 0, totals


async def test_impossible_prompt_fails_at_once(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, router: RouterClient
) -> None:
    profile = small_profile()
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
        items = [SolveItem(key="0", prompt="hi", request_id="x", models=("ghost",)).to_dict()]
        started = time.monotonic()
        event = await _event(_trigger(items))
    (result,) = event["results"]
    assert result["status"] == "failed" and not result["retryable"]
    assert "ghost" in result["error"] and time.monotonic() - started < 5


async def test_deadline_returns_unadmitted_items_unfinished(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, router: RouterClient
) -> None:
    profile = small_profile(time_scale=1)  # one-minute windows: only 75 fit now
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
        event = await _event(_trigger(_items(90), seconds=3))
    statuses = [r["status"] for r in event["results"]]
    assert statuses.count("unfinished") == 15
    assert (await asyncio.sleep(0)) is None and router.stats().waiting == 0


async def test_backend_unreachable_fails_with_error(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, router: RouterClient
) -> None:
    profile = small_profile()
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
    # the simulator is gone now: every call fails to connect
    event = await _event(_trigger(_items(3)))
    assert [r["status"] for r in event["results"]] == ["failed"] * 3
    assert all(r["retryable"] and r["calls"] == 3 for r in event["results"])


async def test_micro_batches_go_to_batch_endpoint(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, router: RouterClient
) -> None:
    profile = small_profile()
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        # no hedges, as above
        event = await _event(_trigger(_items(60), batch_size=5, hedge_late_calls=False))
        stats = httpx.get(sim.url + "/stats").json()
    assert all(r["status"] == "solved" and r["answer"] for r in event["results"])
    assert stats["calls"]["single"] == 0
    assert stats["calls"]["batch_items"] == 60 and stats["calls"]["batch"] < 60
    assert stats["totals"]["rejected_429"] == 0
    assert sum(m.in_flight for m in router.stats().models.values()) == 0
