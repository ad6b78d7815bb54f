"""Where Redis time goes per operation (one caller, sequential), and a client-side profile."""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import time
from collections.abc import Callable
from typing import Any, cast

import redis

from airflow_llm_router.engine import (
    Admission,
    AdmitRequest,
    Decision,
    RouterClient,
    RouterSettings,
    Wait,
)
from bench.admission.load import _completions, cleanup
from bench.admission.model import (
    BATCH,
    HUGE,
    TOKENS,
    OpCost,
    RedisCpu,
    ServerDelta,
    Snapshot,
    connect,
)
from bench.admission.monitor import QUIET, wait_quiet


def _measure_op(r: redis.Redis, fn: Callable[[], Any], calls: int, per_call: int, op: str,
                models: int) -> OpCost:
    cpu = RedisCpu(r)
    a = Snapshot.take(r, cpu)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    wall = time.perf_counter() - t0
    d = ServerDelta.between(a, Snapshot.take(r, cpu))
    n = calls * per_call
    top = sorted(d.inner.items(), key=lambda kv: -kv[1])[:6]
    return OpCost(op, models, per_call, d.lua_usec / n, wall / n * 1e6,
                  sum(d.inner.values()) / n, [(k, v / n) for k, v in top],
                  foreign=d.lua_calls > calls * 1.05 + 2)



def _admitted(decision: Admission | Wait) -> Admission:
    """The admission: the quotas here are far above the load, so a wait is a broken run."""
    if not isinstance(decision, Admission):
        raise RuntimeError(f"told to wait ({decision}): the quotas are too low for the run")
    return decision

def _op_costs(r: redis.Redis, c: RouterClient, models: int, singles: int) -> list[OpCost]:
    leases: list[str] = []
    batches: list[list[Decision]] = []
    nb = max(4, singles // 16)

    def admit() -> None:
        leases.append(_admitted(c.admit(TOKENS)).lease_id)

    def admit_many() -> None:
        batches.append(c.admit_many([AdmitRequest(TOKENS) for _ in range(BATCH)]))

    costs = [_measure_op(r, admit, singles, 1, "admit", models)]
    it = iter(leases)
    costs.append(_measure_op(r, lambda: c.complete(next(it), 50, 50), singles, 1, "complete",
                             models))
    costs.append(_measure_op(r, admit_many, nb, BATCH, "admit_many", models))
    bt = iter(batches)
    # every decision is an admission (quotas far above the load), unchecked: it is timed
    costs.append(_measure_op(
        r, lambda: c.complete_many(_completions(cast("list[Admission]", next(bt)))), nb, BATCH,
        "complete_many", models))
    return costs


def breakdown(url: str, quick: bool) -> list[OpCost]:
    """Per operation, sequentially: Redis time and ``redis.call()`` commands per admission."""
    out = []
    for models in (10, 100):
        settings = RouterSettings(namespace=f"bench-adm-{os.getpid()}-ops{models}")
        r = connect(url)
        c = RouterClient(r, settings)
        try:
            for m in range(models):
                c.set_quota(f"m{m}", HUGE)
            c.complete(_admitted(c.admit(TOKENS)).lease_id)  # load the scripts
            if QUIET["max_wait_s"] > 0:
                wait_quiet(QUIET["max_wait_s"])
            out += _op_costs(r, c, models, 200 if quick else 600)
        finally:
            cleanup(r, settings)
            r.close()
    return out


def profile_client(url: str, seconds: float) -> str:
    """cProfile of one sync caller (10 models, admit -> complete): where the client spends."""
    settings = RouterSettings(namespace=f"bench-adm-{os.getpid()}-prof")
    r = connect(url)
    c = RouterClient(r, settings)
    try:
        for m in range(10):
            c.set_quota(f"m{m}", HUGE)
        prof, end = cProfile.Profile(), time.perf_counter() + seconds
        prof.enable()
        while time.perf_counter() < end:
            c.complete(_admitted(c.admit(TOKENS)).lease_id, 50, 50)
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(22)
        return buf.getvalue()
    finally:
        cleanup(r, settings)
        r.close()
