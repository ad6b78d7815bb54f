"""What a model's learned latency is made of when the solver calls it: each call's own
time, from its send to its answer (``Completion.latency_s``), not the time since its
admission, which also holds the wait for a connection before the send (in a burst of
hundreds of calls, a third of a fast model's latency) and the settlement after it.

The backend is a real HTTP server in the test process that takes 0.3 s per call; the
solver gets one connection, so of four calls admitted together each waits for the ones
before it: admission to answer 0.3, 0.6, 0.9 and 1.2 s, each call 0.3 s.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from airflow_llm_router.backend import BackendConfig, http_client
from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.solver.session import solve_items, solving
from airflow_llm_router.solver.settings import SolveSettings
from tests.integration.solver.stub_backend import Reply, serve

CALL_S = 0.3
ROOMY = {"rpm": 1000, "tpm": 10**7, "max_concurrency": 100}


def _hold(_doc: dict[str, Any]) -> None:
    time.sleep(CALL_S)


def _answer(_doc: dict[str, Any]) -> Reply:
    return 200, {}, {"answer": "ok", "usage": {"input_tokens": 3, "output_tokens": 4}}


async def test_a_model_learns_its_calls_own_latency_not_their_wait_to_be_sent(
        namespace: str, redis_url: str) -> None:
    router = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        await router.set_quota("m", ROOMY)
        items = [SolveItem(key=str(k), prompt=f"prompt {k}", request_id=f"r-{k}",
                           models=("m",)) for k in range(4)]
        with serve(_answer, hold=_hold) as backend:
            url = backend.url
            config = BackendConfig(base_url=url, timeout_s=30)
            async with (await http_client(config, 1) as http,
                        solving(router, http, config,
                                SolveSettings(max_in_flight=4, hedge_late_calls=False),
                                time.time() + 30) as solver):
                results = await solve_items(solver, items)
        assert [r.status for r in results] == ["solved"] * 4
        stats = await router.stats()
        assert stats.models["m"].counters["completed"] == 4  # every call settled
        learned = float(raw.hget(RouterKeys(namespace).router("K_EST"), "m|lat") or 0)
        # from the admission it would be ~610 ms (0.3, 0.6, 0.9, 1.2 s averaged, EWMA)
        assert CALL_S * 1000 * 0.9 <= learned <= CALL_S * 1000 * 1.5, learned
    finally:
        raw.close()
        await router.aclose()
