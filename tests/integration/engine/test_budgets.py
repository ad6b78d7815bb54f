"""Spend budgets in fixed point (docs/budgets.md), against the real Redis: reservations,
settlement, expiry, period resets, overflow or wait, the router-wide total, and concurrent
callers on both clients that never spend past the budget beyond the stated bound."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

from airflow_llm_router.engine import AsyncRouterClient, RouterClient
from airflow_llm_router.engine.quota import RouterBudget
from airflow_llm_router.engine.stats import SpendStats
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings, Wait
from airflow_llm_router.exceptions import ImpossibleRequestError, QuotaValidationError
from llm_router_devkit.stack import wait_for

#: 1 micro-dollar per input token, 3 per output token (prices are per million tokens)
PIN, POUT = 1_000_000, 3_000_000
ROOMY = {"rpm": 10**6, "tpm": 10**9, "max_concurrency": 10**4}
#: the longest period: its boundary never falls inside a test
YEAR_S = 366 * 86400


def priced(budget: int | None = None, period_s: float = YEAR_S, **more: Any) -> dict[str, Any]:
    quota: dict[str, Any] = {**ROOMY, "input_micro_usd_per_mtok": PIN,
                             "output_micro_usd_per_mtok": POUT, "budget_period_s": period_s,
                             **more}
    if budget is not None:
        quota["budget_micro_usd"] = budget
    return quota


def cost(inp: int, out: int, pin: int = PIN, pout: int = POUT) -> int:
    """The engine's rule, computed independently: ceil((in x price + out x price) / 10^6)."""
    return -(-(inp * pin + out * pout) // 1_000_000)


def spend(router: RouterClient, model: str) -> SpendStats:
    s = router.stats([model]).models[model].spend
    assert s is not None
    return s


def test_reservation_then_settlement_of_the_actual(router: RouterClient) -> None:
    router.set_quota("a", priced(budget=10_000))
    lease = router.admit(1000, estimated_output_tokens=400, models=["a"])
    assert isinstance(lease, Admission)
    reserved = cost(600, 400)  # 600 + 1200
    s = spend(router, "a")
    assert (s.reserved_micro_usd, s.settled_micro_usd) == (reserved, 0)
    assert s.budget_micro_usd == 10_000 and s.period_s == YEAR_S
    assert router.complete(lease.lease_id, 650, 120) == "released"
    s = spend(router, "a")
    assert (s.reserved_micro_usd, s.settled_micro_usd) == (0, cost(650, 120))
    total = router.stats().total_spend
    assert total is not None and total.settled_micro_usd == cost(650, 120)
    assert total.budget_micro_usd is None and total.period_s == 86400


def test_unknown_tokens_settle_at_the_reservation_and_a_429_costs_nothing(
        router: RouterClient) -> None:
    router.set_quota("a", priced())
    unknown = router.admit(100, estimated_output_tokens=50, models=["a"])
    refused = router.admit(100, estimated_output_tokens=50, models=["a"])
    assert isinstance(unknown, Admission) and isinstance(refused, Admission)
    router.complete(unknown.lease_id)  # no token counts: the estimate stays
    router.complete(refused.lease_id, 100, 50, outcome="rate_limited")
    s = spend(router, "a")
    assert (s.settled_micro_usd, s.reserved_micro_usd) == (cost(50, 50), 0)


def test_without_a_split_every_token_is_reserved_at_the_higher_price(
        router: RouterClient) -> None:
    router.set_quota("a", priced())
    lease = router.admit(100, models=["a"])
    assert isinstance(lease, Admission)
    assert spend(router, "a").reserved_micro_usd == cost(0, 100)


def test_an_unpriced_model_tracks_no_spend(router: RouterClient) -> None:
    router.set_quota("free", ROOMY)
    lease = router.admit(100)
    assert isinstance(lease, Admission)
    router.complete(lease.lease_id, 60, 40)
    stats = router.stats()
    assert stats.models["free"].spend is None
    assert stats.total_spend is not None and stats.total_spend.committed_micro_usd == 0


def test_over_budget_waits_until_the_period_resets(router: RouterClient) -> None:
    # a 1 s period: periods are whole seconds of the Redis clock
    router.set_quota("a", priced(budget=cost(50, 50) * 2, period_s=1))

    def ask() -> Admission | Wait:
        return router.admit(100, estimated_output_tokens=50, models=["a"])

    for _ in range(100):  # spend the period's budget (a new period may begin meanwhile)
        d = ask()
        if isinstance(d, Wait):
            break
    assert isinstance(d, Wait) and d.reason == "budget"
    assert d.retry_after_ms <= 1000 * 1.1 + 1  # until the period ends, jittered
    blocked_in = spend(router, "a").period_start_ms
    router.cancel([d.request_id])
    wait_for("an admission in the next period", lambda: isinstance(ask(), Admission), 5,
             interval_s=0.01)
    s = spend(router, "a")
    assert s.period_start_ms > blocked_in
    assert s.committed_micro_usd <= cost(50, 50) * 2


def test_an_expired_lease_settles_at_its_reservation(make_router: Callable[..., RouterClient]
                                                     ) -> None:
    router = make_router(lease_ttl_s=0.2)
    router.set_quota("a", priced(budget=10**6))
    lease = router.admit(100, estimated_output_tokens=40, models=["a"])
    assert isinstance(lease, Admission)
    reserved = cost(60, 40)
    assert spend(router, "a").reserved_micro_usd == reserved
    # stats reclaim expired leases: poll until the lease is gone
    s = wait_for("the lease's expiry", lambda: (x := spend(router, "a")).reserved_micro_usd == 0
                 and x, 10, interval_s=0.01)
    assert s.settled_micro_usd == reserved
    assert router.stats(["a"]).models["a"].counters["expired"] == 1
    # a late completion neither refunds nor re-bills it
    assert router.complete(lease.lease_id, 1, 1) in ("settled", "unknown")
    assert spend(router, "a").settled_micro_usd == reserved


def test_overflow_to_the_next_model_or_wait(router: RouterClient) -> None:
    one_call = cost(100, 100)
    router.set_quota("big", priced(budget=one_call))
    router.set_quota("small", {**ROOMY, "input_micro_usd_per_mtok": 100_000,
                               "output_micro_usd_per_mtok": 200_000})
    first = router.admit(200, estimated_output_tokens=100, models=["big", "small"])
    assert isinstance(first, Admission) and first.model == "big"
    over = router.admit(200, estimated_output_tokens=100, models=["big", "small"])
    assert isinstance(over, Admission) and over.model == "small"  # overflow, the default
    held = router.admit(200, estimated_output_tokens=100, models=["big", "small"],
                        on_budget="wait")
    assert isinstance(held, Wait) and held.reason == "budget"
    assert held.retry_after_ms > 60_000  # the year's period, not a rate window
    router.cancel([held.request_id])
    # shared by weight, every allowed model is alike: the over-budget one is skipped
    fair = router.admit(200, estimated_output_tokens=100, models=["big", "small"],
                        ordered=False, on_budget="wait")
    assert isinstance(fair, Admission) and fair.model == "small"
    assert spend(router, "small").reserved_micro_usd == 2 * cost(100, 100, 100_000, 200_000)
    # a settlement below the reservation makes room again
    router.complete(first.lease_id, 10, 10)
    again = router.admit(200, estimated_output_tokens=100, models=["big", "small"])
    assert isinstance(again, Admission) and again.model == "small"
    # ... but only as much as was left: cost(10, 10) + one_call > one_call
    router.set_quota("big", priced(budget=one_call + cost(10, 10)))
    fits = router.admit(200, estimated_output_tokens=100, models=["big", "small"])
    assert isinstance(fits, Admission) and fits.model == "big"


def test_a_call_larger_than_the_budget_is_rejected(router: RouterClient) -> None:
    router.set_quota("a", priced(budget=100))
    with pytest.raises(ImpossibleRequestError, match="raise the budget") as err:
        router.admit(200, estimated_output_tokens=100, models=["a"])
    assert err.value.reason == "too_costly"


def test_the_total_budget_spans_models(router: RouterClient) -> None:
    router.set_quota("a", priced())
    router.set_quota("b", priced())
    router.set_quota("free", ROOMY)
    assert router.budget() is None
    one = cost(50, 50)
    router.set_budget({"budget_micro_usd": 3 * one, "budget_period_s": YEAR_S})
    assert router.budget() == RouterBudget(budget_micro_usd=3 * one, budget_period_s=YEAR_S)
    got = [router.admit(100, estimated_output_tokens=50, models=[m]) for m in "aba"]
    assert all(isinstance(d, Admission) for d in got)
    for m in "ab":
        d = router.admit(100, estimated_output_tokens=50, models=[m])
        assert isinstance(d, Wait) and d.reason == "budget"
        router.cancel([d.request_id])
    # an unpriced model is not held by the total
    free = router.admit(100, estimated_output_tokens=50, models=["a", "b", "free"])
    assert isinstance(free, Admission) and free.model == "free"
    total = router.stats().total_spend
    assert total is not None
    assert (total.budget_micro_usd, total.reserved_micro_usd) == (3 * one, 3 * one)
    # a raise applies at the next admission
    router.set_budget(RouterBudget(budget_micro_usd=4 * one, budget_period_s=YEAR_S))
    assert isinstance(router.admit(100, estimated_output_tokens=50, models=["b"]), Admission)
    router.set_budget(None)
    assert router.budget() is None
    assert isinstance(router.admit(100, estimated_output_tokens=50, models=["b"]), Admission)


@pytest.mark.parametrize("bad,field", [
    ({"budget_micro_usd": -1}, "budget_micro_usd"),
    ({"budget_micro_usd": 10, "budget_period_s": 0}, "budget_period_s"),
    ({"budget_micro_usd": 10, "extra": 1}, "extra"),
])
def test_a_bad_total_budget_names_the_field(router: RouterClient, bad: dict[str, Any],
                                            field: str) -> None:
    with pytest.raises(QuotaValidationError, match=field):
        router.set_budget(bad)
    assert router.budget() is None


# -- concurrent callers -------------------------------------------------------------------

EST_IN, EST_OUT = 300, 200
EST_COST = cost(EST_IN, EST_OUT)
BUDGET = 150 * EST_COST


class Ledger:
    """What the test itself settled: the independent sum the engine's counter must match."""

    def __init__(self, overrun: bool, seed: int) -> None:
        self.lock = threading.Lock()
        self.settled = 0
        self.overrun = 0  # sum over calls of max(0, actual cost - reserved cost)
        self.admitted = 0
        self.budget_waits = 0
        self.max_out = EST_OUT + (150 if overrun else 0)
        self.seed = seed

    def usage(self, rng: random.Random) -> tuple[int, int]:
        """Input as estimated; output up to the reservation (an output cap) or past it."""
        out = rng.randint(EST_OUT // 2, self.max_out)
        actual = cost(EST_IN, out)
        with self.lock:
            self.settled += actual
            self.overrun += max(0, actual - EST_COST)
            self.admitted += 1
        return EST_IN, out

    def waited(self) -> None:
        with self.lock:
            self.budget_waits += 1


def sync_caller(router: RouterClient, ledger: Ledger, seed: int, calls: int) -> None:
    rng = random.Random(seed)
    for _ in range(calls):
        d = router.admit(EST_IN + EST_OUT, estimated_output_tokens=EST_OUT, models=["a"])
        if isinstance(d, Wait):
            assert d.reason == "budget"
            router.cancel([d.request_id])
            ledger.waited()
            return
        inp, out = ledger.usage(rng)
        router.complete(d.lease_id, inp, out)


async def async_caller(router: AsyncRouterClient, ledger: Ledger, seed: int,
                       calls: int) -> None:
    rng = random.Random(seed)
    for _ in range(calls):
        d = await router.admit(EST_IN + EST_OUT, estimated_output_tokens=EST_OUT,
                               models=["a"])
        if isinstance(d, Wait):
            assert d.reason == "budget"
            await router.cancel([d.request_id])
            ledger.waited()
            return
        inp, out = ledger.usage(rng)
        await asyncio.sleep(0)  # let other callers admit while this call is "in flight"
        await router.complete(d.lease_id, inp, out)


def run_callers(namespace: str, redis_url: str, ledger: Ledger) -> list[SpendStats]:
    """4 threads with a sync client each and 16 coroutines on one async client, each
    trying far more calls than the budget holds; a monitor samples the engine's spend."""
    settings = RouterSettings(namespace=namespace)
    samples: list[SpendStats] = []
    stop = threading.Event()

    def monitor() -> None:
        watcher = RouterClient.from_url(redis_url, settings)
        try:
            while not stop.is_set():
                samples.append(spend(watcher, "a"))
        finally:
            watcher.close()

    async def coroutines() -> None:
        client = AsyncRouterClient.from_url(redis_url, settings)
        try:
            await asyncio.gather(*(async_caller(client, ledger, ledger.seed + 100 + k, 200)
                                   for k in range(16)))
        finally:
            await client.aclose()

    clients = [RouterClient.from_url(redis_url, settings) for _ in range(4)]
    threads = [threading.Thread(target=sync_caller, args=(c, ledger, ledger.seed + k, 200))
               for k, c in enumerate(clients)]
    threads.append(threading.Thread(target=lambda: asyncio.run(coroutines())))
    watcher = threading.Thread(target=monitor)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    stop.set()
    watcher.join(timeout=30)
    for c in clients:
        c.close()
    assert not any(t.is_alive() for t in threads)
    return samples


@pytest.mark.parametrize("overrun", [False, True], ids=["output-capped", "outputs-overrun"])
def test_concurrent_callers_stay_within_the_budget(router: RouterClient, namespace: str,
                                                   redis_url: str, overrun: bool) -> None:
    router.set_quota("a", priced(budget=BUDGET))
    ledger = Ledger(overrun, seed=7 if overrun else 3)
    samples = run_callers(namespace, redis_url, ledger)
    final = spend(router, "a")
    # the engine's counter is the test's own sum, to the micro-dollar
    assert final.reserved_micro_usd == 0
    assert final.settled_micro_usd == ledger.settled
    # the budget bound: exact with an output cap, else by what settlement above the
    # reservation added
    bound = BUDGET + ledger.overrun
    assert ledger.settled <= bound
    assert all(s.committed_micro_usd <= bound for s in samples)
    if not overrun:
        assert ledger.overrun == 0 and ledger.settled <= BUDGET
    # the budget bound the run: every caller stopped on a budget wait, far short of its calls
    assert ledger.budget_waits == 20 and ledger.admitted < 20 * 200
    # and the budget was used: the first budget wait came with less than one call's cost
    # left, counting the reservations of at most 20 calls then in flight
    assert ledger.settled >= BUDGET - 21 * EST_COST
    assert len(samples) > 1


async def test_a_budget_waiter_wakes_when_settlement_frees_budget(namespace: str,
                                                                  redis_url: str) -> None:
    """A budget wait lasts until the period ends (a year here), but spend settled below its
    reservation frees budget at once: the waiter is woken by that release, not its timer."""
    client = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    try:
        await client.set_quota("a", priced(budget=cost(50, 50)))
        holder = await client.admit(100, estimated_output_tokens=50, models=["a"])
        assert isinstance(holder, Admission)
        probe = await client.admit(100, estimated_output_tokens=50, models=["a"])
        assert isinstance(probe, Wait) and probe.reason == "budget"
        assert probe.retry_after_ms > 86_400_000
        await client.cancel([probe.request_id])

        async def waited() -> int:
            return (await client.stats(["a"])).models["a"].counters["waited"]

        before = await waited()
        request = AdmitRequest(100, estimated_output_tokens=50, models=("a",))
        waiter = asyncio.create_task(client.wait_for_admission(request, timeout_s=20))
        while await waited() == before:  # the waiter has asked and was told to wait
            await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        settled_at = loop.time()
        await client.complete(holder.lease_id, 0, 0)  # it cost nothing: the budget is free
        admitted = await asyncio.wait_for(waiter, timeout=10)
        assert admitted is not None and admitted.model == "a"
        assert loop.time() - settled_at < 5.0
    finally:
        await client.aclose()


def test_large_amounts_come_back_exact(router: RouterClient) -> None:
    """Money up to the largest budget (10^15 micro-dollars) keeps every digit (the engine's
    JSON would round numbers to 14 significant digits)."""
    router.set_quota("a", priced(budget=10**15 - 3, input_micro_usd_per_mtok=10**9,
                                 output_micro_usd_per_mtok=10**9, tpm=10**15))
    router.set_budget({"budget_micro_usd": 10**15 - 7})
    # 4 million input tokens at the largest price: tokens x price 4 x 10^15, still exact
    lease = router.admit(4_000_001, estimated_output_tokens=1, models=["a"])
    assert isinstance(lease, Admission)
    stats = router.stats()
    s, total = stats.models["a"].spend, stats.total_spend
    assert s is not None and total is not None
    assert (s.budget_micro_usd, total.budget_micro_usd) == (10**15 - 3, 10**15 - 7)
    assert s.reserved_micro_usd == total.reserved_micro_usd == 4_000_001_000
    budget = router.budget()
    assert budget is not None and budget.budget_micro_usd == 10**15 - 7
