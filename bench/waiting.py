"""The engine's cost of re-deciding requests that wait: every model full, many waiters.

A drain keeps its waiting prompts in one :class:`~airflow_llm_router.solver.admitter.
BatchAdmitter`, which sends all of them to ``admit_many`` again whenever a call ends
anywhere (a release) or a wait runs out. With every model full, a round admits nothing
or one or two, so what it costs is Redis time spent telling each waiter to wait again:
the engine's share of a drain that waits most of a window (W1's first window), and Redis
time that more drains multiply. On demand, not in CI.

    python -m bench.waiting                       # 350 waiters, 10 models, 40 rounds
    python -m bench.waiting --waiters 1000 --models 20

The run uses a Redis server of its own (nothing else counts in its ``INFO``). Quotas are
roomy on rpm and tpm and bound by concurrency; each model has answered one call (so the
finish-time choice orders them by learned latency) and is then filled to its
``max_concurrency``. The waiters allow any model and leave their output to the engine,
as a drain's prompts do, at the router's default settings. Reported:
milliseconds per round (the client's wall time, and Redis's own time in the scripts from
``INFO commandstats``, read as ``bench.admission`` reads it), microseconds of Redis per
waiter, and the Redis commands the scripts ran per waiter and round, by command.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from bench.common import guarded


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.waiting", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--waiters", type=int, default=350,
                        help="requests waiting (a drain's in-flight target less its calls)")
    parser.add_argument("--models", type=int, default=10, help="models, every one full")
    parser.add_argument("--rounds", type=int, default=40, help="rounds timed")
    parser.add_argument("--bound", choices=("concurrency", "rpm"), default="concurrency",
                        help="the limit that holds every model full: its max_concurrency "
                             "(calls in flight) or its rpm (a window of calls already sent)")
    return parser


def measure(waiters: int, models: int, rounds: int, bound: str = "concurrency"
            ) -> dict[str, Any]:
    """Fill every model, queue ``waiters`` requests, then time ``rounds`` rounds of
    re-deciding them all (each answered: wait)."""
    import redis

    from airflow_llm_router.engine import (
        Admission,
        AdmitRequest,
        Completion,
        RouterClient,
        RouterSettings,
        Wait,
    )
    from bench.admission.model import RedisCpu, ServerDelta, Snapshot
    from llm_router_devkit.redis_tools import PrivateRedis

    server = PrivateRedis()
    server.start()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        router = RouterClient.from_url(server.url, RouterSettings(
            namespace=f"waiting-{uuid.uuid4().hex[:8]}"))
        names = [f"model-{k}" for k in range(models)]
        for k, name in enumerate(names):
            limit = 4 + k
            router.set_quota(name, {
                "rpm": limit + 1 if bound == "rpm" else 1_000_000, "tpm": 10**9,
                "max_concurrency": limit if bound == "concurrency" else 1_000_000,
                "expected_output_tokens": 200})
            first = router.admit_many([AdmitRequest(input_tokens=100, models=(name,),
                                                    request_id=f"first-{name}")])[0]
            assert isinstance(first, Admission), first
            router.complete_many([Completion(first.lease_id, outcome="ok", input_tokens=100,
                                             output_tokens=180, latency_s=1.0 + 0.3 * k)])
            held = 0
            while isinstance(router.admit_many([AdmitRequest(
                    input_tokens=100, models=(name,), request_id=f"held-{name}-{held}")])[0],
                    Admission):
                held += 1
            assert held == limit, f"{name} took {held} calls, not its {bound} of {limit}"
        # a drain's waiters: its solver hedges late calls, and reports the backlog behind
        router.report_backlog("bench.waiting", 10 * waiters, 600.0)
        queue = [AdmitRequest(input_tokens=100, request_id=f"waiter-{k}", hedges_late=True)
                 for k in range(waiters)]
        router.admit_many(queue)  # the first round: every waiter joins the engine's queue
        cpu = RedisCpu(admin)
        before = Snapshot.take(admin, cpu)
        for _ in range(rounds):
            decisions = router.admit_many(queue)
        delta = ServerDelta.between(before, Snapshot.take(admin, cpu))
        told = {type(d).__name__ for d in decisions}
        assert told == {Wait.__name__}, f"a full engine answered {told}"
        router.close()
    finally:
        admin.close()
        server.close()
    calls = {name: round(n / rounds / waiters, 2) for name, n in delta.inner.items()}
    return {"waiters": waiters, "models": models, "rounds": rounds, "bound": bound,
            "ms_per_round": round(delta.wall / rounds * 1000, 1),
            "redis_ms_per_round": round(delta.lua_usec / rounds / 1000, 1),
            "redis_us_per_waiter": round(delta.lua_usec / rounds / waiters, 1),
            "commands_per_waiter": dict(sorted(calls.items(), key=lambda kv: -kv[1]))}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("waiters", "models", "rounds"):
        if getattr(args, name) < 1:
            print(f"error: --{name} {getattr(args, name)}: give at least 1", file=sys.stderr)
            return 2

    def body() -> int:
        result = measure(args.waiters, args.models, args.rounds, args.bound)
        print(f"{result['waiters']} waiters on {result['models']} models full ({args.bound}): "
              f"{result['ms_per_round']} ms a round ({result['redis_ms_per_round']} ms of it in "
              f"Redis), {result['redis_us_per_waiter']} us of Redis per waiter")
        print("Redis commands per waiter and round: " + ", ".join(
            f"{k} {v}" for k, v in result["commands_per_waiter"].items() if v))
        print("RESULT " + json.dumps(result))
        return 0

    return guarded(body)


if __name__ == "__main__":
    sys.exit(main())
