"""Hedging a late call (solver/hedging.py): a call still out past its model's
``late_after_s`` while nothing of the solver waits for admission sends the prompt to
another allowed model too; the first answer is kept, and the other call runs on to its
end (the provider counts it until then) and is settled as any call.

The backend is a real HTTP server in the test process that holds every call to the
model "sticky" until the test lets it go (a straggler that never ends by itself) and
answers the others at once; the router is the real engine on the real Redis.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import Any

import airflow.configuration  # noqa: F401 (Airflow's logging set-up before caplog's)

from airflow_llm_router.backend import BackendConfig, http_client
from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.engine.stats import RouterStats
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings
from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.solver.session import solve_items, solving
from airflow_llm_router.solver.settings import SolveSettings
from tests.integration.solver.stub_backend import Reply, serve

#: late after 0.2 s + 2 x 0.1 s (the engine's prior: docs/engine.md)
QUICK = {"rpm": 1000, "tpm": 10**7, "max_concurrency": 100, "expected_latency_s": 0.2}
#: solving never takes this long unless a held call is waited for
LIMIT_S = 30.0


class Sticky:
    """Holds calls to "sticky" until :meth:`let_go`; counts the calls per model."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.calls: Counter[str] = Counter()
        self.held = threading.Semaphore(0)

    def hold(self, doc: dict[str, Any]) -> None:
        self.calls[doc["model"]] += 1
        if doc["model"] == "sticky":
            self.held.release()
            self.go.wait(LIMIT_S)

    def answer(self, doc: dict[str, Any]) -> Reply:
        return 200, {}, {"answer": f"from {doc['model']}",
                         "usage": {"input_tokens": 3, "output_tokens": 4}}

    def let_go(self) -> None:
        self.go.set()

    async def let_go_well_past_late(self, router: AsyncRouterClient) -> None:
        """Once a call to "sticky" is held, let it go well past late (0.4 s): a hedge
        would have gone by then. (A hedge not sent has no event to wait for.)"""
        await asyncio.to_thread(self.held.acquire)
        await asyncio.sleep(1.0)
        self.let_go()


async def _solve(namespace: str, redis_url: str, url: str, items: list[SolveItem],
                 quotas: dict[str, dict[str, Any]], during: Any = None,
                 **settings: Any) -> tuple[list[SolveResult], RouterStats]:
    """Solve ``items`` through the real solver (``during``, if given, runs beside it);
    the results and the engine's stats once the solver has closed."""
    router = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    try:
        for model, quota in quotas.items():
            await router.set_quota(model, quota)
        config = BackendConfig(base_url=url, timeout_s=LIMIT_S * 2)
        async with (await http_client(config, 16) as http,
                    solving(router, http, config, SolveSettings(max_in_flight=10, **settings),
                            time.time() + LIMIT_S * 2) as solver):
            work = solve_items(solver, items)
            if during is None:
                results = await asyncio.wait_for(work, LIMIT_S)
            else:
                results, _ = await asyncio.wait_for(asyncio.gather(work, during(router)),
                                                    LIMIT_S)
        return results, await router.stats()
    finally:
        await router.aclose()


def _item(key: str, *models: str) -> SolveItem:
    return SolveItem(key=key, prompt=f"prompt {key}", request_id=f"r-{key}", models=models)


async def test_a_late_call_is_hedged_and_the_straggler_runs_to_its_end(
        namespace: str, redis_url: str) -> None:
    """The prompt prefers "sticky", whose call is held: once it is late (0.4 s), the
    prompt goes to "quick" as well and is solved from there. The straggler keeps its slot
    while the backend still has it (freed at once, the next call could go over the
    model's concurrency at the provider), then ends and is settled as any call. Without
    hedging the solve waits for the straggler."""
    backend = Sticky()
    quotas = {"sticky": QUICK, "quick": QUICK}
    held: list[int] = []

    async def let_go_once_answered_elsewhere(router: AsyncRouterClient) -> None:
        while (await router.stats()).models["quick"].counters["completed"] < 1:
            await asyncio.sleep(0.02)  # the hedge's answer is in and settled
        held.append((await router.stats()).models["sticky"].in_flight)
        backend.let_go()
        while (await router.stats()).models["sticky"].counters["completed"] < 1:
            await asyncio.sleep(0.02)  # the straggler ended and was settled

    try:
        with serve(backend.answer, backend.hold) as server:
            (result,), stats = await _solve(namespace, redis_url, server.url,
                                            [_item("1", "sticky", "quick")], quotas,
                                            during=let_go_once_answered_elsewhere)
    finally:
        backend.let_go()
    assert result.status == "solved" and result.answer == "from quick", result
    assert result.model == "quick" and result.hedged and result.calls == 2
    assert backend.calls == {"sticky": 1, "quick": 1}
    assert held == [1], "the straggler's slot was freed while the backend still had it"
    sticky = stats.models["sticky"]
    assert sticky.in_flight == 0 and sticky.counters["completed"] == 1
    assert sticky.counters["errors"] == 0 and sticky.counters["abandoned"] == 0


async def test_a_prompt_that_allows_one_model_is_not_hedged(
        namespace: str, redis_url: str) -> None:
    """With no other model to go to, a late call is only waited for."""
    backend = Sticky()

    try:
        with serve(backend.answer, backend.hold) as server:
            (result,), _ = await _solve(namespace, redis_url, server.url,
                                        [_item("1", "sticky")], {"sticky": QUICK},
                                        during=backend.let_go_well_past_late)
    finally:
        backend.let_go()
    assert result.answer == "from sticky" and not result.hedged and result.calls == 1


async def test_no_hedge_while_a_prompt_of_the_solver_waits(
        namespace: str, redis_url: str) -> None:
    """A hedge would take capacity a waiting prompt needs: while the second prompt waits
    for sticky's one slot, the first prompt's late call is not hedged. Once the
    straggler ends, both are solved on sticky and quick is never called."""
    backend = Sticky()
    quotas = {"sticky": {**QUICK, "max_concurrency": 1}, "quick": QUICK}

    async def let_go_once_late(router: AsyncRouterClient) -> None:
        await asyncio.to_thread(backend.held.acquire)
        await asyncio.sleep(1.0)  # well past late (0.4 s): a hedge would have gone by now
        assert (await router.stats()).waiting == 1  # the second prompt still waits
        backend.let_go()

    try:
        with serve(backend.answer, backend.hold) as server:
            results, stats = await _solve(
                namespace, redis_url, server.url,
                [_item("1", "sticky", "quick"), _item("2", "sticky")], quotas,
                during=let_go_once_late)
    finally:
        backend.let_go()
    assert [r.answer for r in results] == ["from sticky", "from sticky"], results
    assert not any(r.hedged for r in results)
    assert backend.calls["quick"] == 0
    assert stats.models["sticky"].counters["completed"] == 2


async def test_a_hedge_still_waiting_when_the_late_call_answers_is_withdrawn(
        namespace: str, redis_url: str) -> None:
    """quick's one request of its window is taken, so the hedge waits for admission;
    the straggler then answers. The hedge is withdrawn from the engine's waiters (none
    left), quick is never called, and the prompt is solved from sticky."""
    backend = Sticky()
    quotas = {"sticky": QUICK, "quick": {**QUICK, "rpm": 1, "window_s": 600}}

    async def let_go_once_hedged(router: AsyncRouterClient) -> None:
        taken = (await router.admit_many([AdmitRequest(estimated_tokens=10,
                                                       models=("quick",))]))[0]
        assert isinstance(taken, Admission)
        await asyncio.to_thread(backend.held.acquire)
        while (await router.stats()).waiting == 0:  # the hedge queues for quick
            await asyncio.sleep(0.02)
        backend.let_go()

    try:
        with serve(backend.answer, backend.hold) as server:
            (result,), stats = await _solve(namespace, redis_url, server.url,
                                            [_item("1", "sticky", "quick")], quotas,
                                            during=let_go_once_hedged)
    finally:
        backend.let_go()
    assert result.answer == "from sticky" and result.calls == 1 and not result.hedged, result
    assert backend.calls["quick"] == 0
    assert stats.waiting == 0, "the hedge still waits in the engine"
    assert stats.models["sticky"].in_flight == 0


async def test_hedging_can_be_turned_off(namespace: str, redis_url: str) -> None:
    backend = Sticky()

    try:
        with serve(backend.answer, backend.hold) as server:
            (result,), _ = await _solve(namespace, redis_url, server.url,
                                        [_item("1", "sticky", "quick")],
                                        {"sticky": QUICK, "quick": QUICK},
                                        during=backend.let_go_well_past_late,
                                        hedge_late_calls=False)
    finally:
        backend.let_go()
    assert result.answer == "from sticky" and not result.hedged
    assert backend.calls["quick"] == 0


async def _choice_behind_a_backlog(namespace: str, redis_url: str, url: str,
                                   hedge: bool) -> SolveResult:
    """One prompt allowing "fast" and "slow", solved by a solver, while "fast" is full
    for its 4 s window and 6 tasks are reported behind it: the pair starts them by about
    6 s from now, and a fast call ends 0.7 s later. "slow"'s 99th percentile (2 s mean and
    five deviations: 7 s) ends after that; its late point (4 s) plus a fast call ends
    before it."""
    router = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    pair = {"rpm": 2, "window_s": 4, "tpm": 10**6, "max_concurrency": 100}
    try:
        await router.set_quota("fast", {**pair, "expected_latency_s": 0.2})
        await router.set_quota("slow", {**pair, "expected_latency_s": 2.0})
        for _ in range(2):
            assert (await router.admit(10, models=["fast"])).model == "fast"  # type: ignore[union-attr]
        await router.report_backlog("store.tasks", 6, ttl_s=60)
        config = BackendConfig(base_url=url, timeout_s=LIMIT_S)
        async with (await http_client(config, 4) as http,
                    solving(router, http, config,
                            SolveSettings(max_in_flight=1, hedge_late_calls=hedge),
                            time.time() + LIMIT_S) as solver):
            (result,) = await asyncio.wait_for(
                solve_items(solver, [replace(_item("1", "fast", "slow"), ordered=False)]),
                LIMIT_S)
        return result
    finally:
        await router.aclose()


async def test_a_solver_that_hedges_tells_the_engine_so(namespace: str,
                                                        redis_url: str) -> None:
    """The engine judges a slow model by its late point plus a fast call only for a caller
    that hedges (lib/finish.lua): the hedging solver's prompt takes "slow" at once, the
    other's waits for "fast" to free."""
    backend = Sticky()
    with serve(backend.answer) as server:
        hedged = await _choice_behind_a_backlog(namespace, redis_url, server.url, True)
        waited = await _choice_behind_a_backlog(namespace + "-off", redis_url, server.url,
                                                False)
    assert hedged.status == "solved" and hedged.model == "slow", hedged
    assert waited.status == "solved" and waited.model == "fast", waited


#: a model with no prior latency: its first admissions give no late point
COLD = {"rpm": 1000, "tpm": 10**7, "max_concurrency": 100}


async def test_a_call_admitted_cold_is_hedged_once_its_model_has_a_late_point(
        namespace: str, redis_url: str) -> None:
    """Nothing is known of "sticky"'s latency when the prompt's call on it is admitted
    (no late point). Another caller's call on sticky then answers in 50 ms and the engine
    learns the model's latency: the held call learns its late point from the engine and,
    nothing waiting, is hedged on "quick". Without that it is waited for to its end (the
    test lets it go once quick has answered, or after 10 s)."""
    backend = Sticky()
    late: list[float | None] = []

    async def teach_then_let_go(router: AsyncRouterClient) -> None:
        await asyncio.to_thread(backend.held.acquire)
        late.append(await router.late_after_s("sticky"))  # the held call's admission's
        lease = await router.admit(10, models=["sticky"])
        assert isinstance(lease, Admission) and lease.late_after_s is None, lease
        await router.complete(lease.lease_id, 3, 4, latency_s=0.05)
        late.append(await router.late_after_s("sticky"))
        until = time.monotonic() + 10.0
        while (await router.stats()).models["quick"].counters["completed"] < 1 \
                and time.monotonic() < until:
            await asyncio.sleep(0.02)  # the hedge's answer is in and settled
        backend.let_go()

    try:
        with serve(backend.answer, backend.hold) as server:
            (result,), _ = await _solve(namespace, redis_url, server.url,
                                        [_item("1", "sticky", "quick")],
                                        {"sticky": COLD, "quick": COLD},
                                        during=teach_then_let_go)
    finally:
        backend.let_go()
    assert late[0] is None and late[1] is not None and late[1] < 1.0, late
    assert result.answer == "from quick" and result.hedged and result.calls == 2, result
    assert backend.calls == {"sticky": 1, "quick": 1}


async def test_a_late_call_is_hedged_past_the_deadline_for_new_calls(
        namespace: str, redis_url: str) -> None:
    """A drain's start in the worker stops claiming and starting calls at its deadline,
    then waits for its calls in flight: a straggler among them is still hedged, until
    the hedge deadline (the task's). Here the deadline passes while sticky's call is
    held, before it is late (0.4 s); it is hedged on quick all the same."""
    backend = Sticky()
    router = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    try:
        for model in ("sticky", "quick"):
            await router.set_quota(model, QUICK)
        with serve(backend.answer, backend.hold) as server:
            config = BackendConfig(base_url=server.url, timeout_s=LIMIT_S * 2)
            task_deadline = time.time() + LIMIT_S * 2
            async with (await http_client(config, 16) as http,
                        solving(router, http, config, SolveSettings(max_in_flight=10),
                                task_deadline, hedge_deadline=task_deadline) as solver):
                work = asyncio.create_task(solve_items(solver, [_item("1", "sticky", "quick")]))
                await asyncio.to_thread(backend.held.acquire)
                solver.deadline = time.time()  # no new call from now on
                until = time.monotonic() + 10.0
                while (await router.stats()).models["quick"].counters["completed"] < 1 \
                        and time.monotonic() < until:
                    await asyncio.sleep(0.02)  # the hedge's answer is in and settled
                backend.let_go()
                (result,) = await asyncio.wait_for(work, LIMIT_S)
    finally:
        backend.let_go()
        await router.aclose()
    assert result.answer == "from quick" and result.hedged and result.calls == 2, result
    assert backend.calls == {"sticky": 1, "quick": 1}
