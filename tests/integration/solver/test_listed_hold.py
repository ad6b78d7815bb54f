"""A listed prompt held for its earlier model (lib/listed.lua), through the real solver:
the engine tells it to wait while its first model, full now, would likely finish it sooner
than the later model with room; the solver keeps it in flight but unsent (waiting for
admission: a drain's task stays claimed) and sends it to the first model once that
frees, never to the later one.

The backend is a real HTTP server in the test process that holds calls to "sticky" until
the test lets them go; the router is the real engine on the real Redis.
"""

from __future__ import annotations

import asyncio
import time

import airflow.configuration  # noqa: F401 (Airflow's logging set-up before caplog's)

from airflow_llm_router.backend import BackendConfig, http_client
from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.solver.session import solve_items, solving
from airflow_llm_router.solver.settings import SolveSettings
from tests.integration.solver.stub_backend import serve
from tests.integration.solver.test_hedging import Sticky

#: sticky (its calls held by the backend until the test lets them go): one call at a
#: time, likely 0.7 s (0.2 s + five deviations of half of it); roomy: room, likely 105 s
QUOTAS = {"sticky": {"rpm": 1000, "tpm": 10**7, "max_concurrency": 1, "expected_latency_s": 0.2},
          "roomy": {"rpm": 1000, "tpm": 10**7, "max_concurrency": 100,
                    "expected_latency_s": 30.0}}
LIMIT_S = 30.0


async def test_a_listed_prompt_waits_unsent_for_its_first_model(
        namespace: str, redis_url: str) -> None:
    """Two prompts listing ("sticky", "roomy"): the first takes sticky's one slot and its call
    is held; the second waits in the engine (unsent) rather than going to
    roomy, and is sent to sticky once the first call ends. Greedy admission sent it to
    roomy at once."""
    gate = Sticky()
    waited: list[int] = []

    async def open_once_the_second_waits(router: AsyncRouterClient) -> None:
        await asyncio.to_thread(gate.held.acquire)  # the first call is at sticky
        while (await router.stats()).waiting == 0 and not gate.calls["roomy"]:
            await asyncio.sleep(0.02)  # the second prompt is decided: held or sent
        waited.append((await router.stats()).waiting)
        gate.let_go()

    items = [SolveItem(key=k, prompt=f"prompt {k}", request_id=f"r-{k}",
                       models=("sticky", "roomy")) for k in ("1", "2")]
    router = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    try:
        for model, quota in QUOTAS.items():
            await router.set_quota(model, quota)
        with serve(gate.answer, gate.hold) as server:
            config = BackendConfig(base_url=server.url, timeout_s=LIMIT_S * 2)
            async with (await http_client(config, 16) as http,
                        solving(router, http, config,
                                SolveSettings(max_in_flight=10, hedge_late_calls=False),
                                time.time() + LIMIT_S * 2) as solver):
                results, _ = await asyncio.wait_for(asyncio.gather(
                    solve_items(solver, items), open_once_the_second_waits(router)), LIMIT_S)
        stats = await router.stats()
    finally:
        gate.let_go()
        await router.aclose()
    assert waited == [1], "the second prompt was not held for sticky"
    assert [r.answer for r in results] == ["from sticky", "from sticky"], results
    assert gate.calls == {"sticky": 2}
    assert stats.models["sticky"].counters["completed"] == 2
    assert stats.models["roomy"].counters.get("admitted", 0) == 0
    assert stats.waiting == 0
